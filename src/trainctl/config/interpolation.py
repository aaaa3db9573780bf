"""OmegaConf's interpolations in plain data, read without OmegaConf's parser, giving what OmegaConf gives.

A plan resolves trainctl's sections (~25 interpolations: `${paths.home}/models`, `${oc.env:TRAINCTL_HOME,...}`)
and the backend's mapping table (~100: `${model.path}`, `${tc.opt:${hardware.param_dtype}}`). OmegaConf reads each
with its ANTLR grammar, ~1 ms apiece in a fresh process: most of the 0.3 s a config error is allowed. resolve()
reads the forms these files use itself:

  ${a.b}                       the key's value, itself resolved (a copy); a key written as a path from the root
  ${tc.NAME:ARG,...}           trainctl's resolvers (trainctl.config.resolvers), and OmegaConf's own oc.env
  ARG                          an interpolation, a word (a string), an integer, true/false, null, a quoted word,
                               or text around interpolations (a string)
  text${...}text               the string: each interpolation's value must be a string

and gives each value as OmegaConf.to_container(resolve=True) would: a resolver's result as it returned it, a
key's value copied, a missing value (???) left as it is. Anything else (an escape, a float written as an argument,
whitespace, a relative key, a missing or circular one, a resolver that raises, a value that is not plain data)
leaves the whole tree to OmegaConf, which resolves it or names what is wrong, as before.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from trainctl.config.resolvers import RESOLVERS


class _NotPlain(Exception):
    """What resolve() leaves to OmegaConf."""


MISSING = "???"
_KEY_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# an argument's text: these characters OmegaConf's lexer keeps as written (words, -, ., /)
_ARG_TEXT = re.compile(r"[A-Za-z0-9_\-./]+")
_QUOTED = re.compile(r"\"[A-Za-z0-9_\-. /:]*\"|'[A-Za-z0-9_\-. /:]*'")
# OmegaConf's lexer reads this text as one INT; and maybe as a FLOAT (left to OmegaConf)
_INT = re.compile(r"[+-]?(?:0|[1-9](?:_?[0-9])*)")
_FLOATISH = re.compile(r"[+-]?[0-9_]*\.?[0-9_]*(?:[eE][+-]?[0-9_]+)?|[+-]?(?:inf|nan)", re.IGNORECASE)
_PLAIN_TYPES = (str, int, float, bool, type(None))


def _oc_env(*args):
    from omegaconf.resolvers import oc

    return oc.env(*args)


_FUNCTIONS = {**RESOLVERS, "oc.env": _oc_env}


def resolve(tree: Any, root: dict) -> Any:
    """`tree` with every interpolation resolved against `root` (both plain data, as OmegaConf holds them: the tree
    may be a part of the root); None where OmegaConf must do it."""
    try:
        _check_plain(root)
        _check_plain(tree)
        return _Reader(root).walk(tree)
    except _NotPlain:
        return None


def _check_plain(value: Any) -> None:
    """Data OmegaConf gives back as it is (a tuple would come back a list, an object a dict)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise _NotPlain
            _check_plain(v)
    elif isinstance(value, list):
        for v in value:
            _check_plain(v)
    elif not isinstance(value, _PLAIN_TYPES):
        raise _NotPlain


class _Reader:
    def __init__(self, root: dict):
        self.root = root
        self.done: dict[str, Any] = {}  # key path -> its resolved value
        self.under_way: set[str] = set()

    def walk(self, node: Any) -> Any:
        if isinstance(node, dict):
            return {k: self.walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [self.walk(v) for v in node]
        if isinstance(node, str) and "${" in node:
            return self.string(node)
        return node

    def select(self, path: str) -> Any:
        """The value at a key path, resolved: an interpolation to a missing or circular key is an error."""
        if path not in self.done:
            node: Any = self.root
            for part in path.split("."):
                if not isinstance(node, dict) or part not in node:
                    raise _NotPlain
                node = node[part]
            if node == MISSING or path in self.under_way:
                raise _NotPlain
            self.under_way.add(path)
            self.done[path] = self.walk(node)
            self.under_way.discard(path)
        return copy.deepcopy(self.done[path])

    def string(self, text: str) -> Any:
        """A string with interpolations: one alone is its value as it is; with text around, a string."""
        pieces, end = self.pieces(text, 0, top=True)
        if end != len(text):
            raise _NotPlain
        return _joined(pieces)

    def pieces(self, text: str, i: int, top: bool) -> tuple[list[tuple[bool, Any]], int]:
        """(is it an interpolation's value?, the piece) from text[i] to the end (top) or to the argument's end (the
        next , or } outside an interpolation)."""
        out: list[tuple[bool, Any]] = []
        while i < len(text):
            if text.startswith("${", i):
                value, i = self.interpolation(text, i)
                out.append((True, value))
                continue
            stops = [text.find(stop, i) for stop in (("${",) if top else ("${", ",", "}"))]
            end = min((j for j in stops if j >= 0), default=len(text))
            if end == i:
                break
            literal = text[i:end]
            if "\\" in literal or (not top and not (_ARG_TEXT.fullmatch(literal) or _QUOTED.fullmatch(literal))):
                raise _NotPlain
            if top and any(c in literal for c in "${}"):
                raise _NotPlain
            out.append((False, literal))
            i = end
        return out, i

    def interpolation(self, text: str, start: int) -> tuple[Any, int]:
        """The value of the interpolation at text[start] (`${`), and where it ends."""
        m = _KEY_PATH.match(text, start + 2)
        if m is None:
            raise _NotPlain
        name, i = m.group(), m.end()
        if text.startswith("}", i):
            return self.select(name), i + 1
        if not text.startswith(":", i) or name not in _FUNCTIONS:
            raise _NotPlain
        i += 1
        args: list[Any] = []
        while not text.startswith("}", i):
            pieces, i = self.pieces(text, i, top=False)
            if not pieces:
                raise _NotPlain  # an empty argument
            args.append(_argument(pieces))
            if text.startswith(",", i):
                i += 1
            elif not text.startswith("}", i):
                raise _NotPlain
        try:
            result = _FUNCTIONS[name](*args)
        except Exception:
            raise _NotPlain from None
        _check_plain(result)
        return result, i + 1


def _joined(pieces: list[tuple[bool, Any]]) -> Any:
    if len(pieces) == 1 and pieces[0][0]:
        return pieces[0][1]
    if not all(isinstance(piece, str) for _, piece in pieces):
        raise _NotPlain  # OmegaConf's str() of a number or a node: not worth copying
    return "".join(piece for _, piece in pieces)


def _argument(pieces: list[tuple[bool, Any]]) -> Any:
    """A resolver's argument: one interpolation's value, text typed as OmegaConf's lexer types it, or a string."""
    if len(pieces) > 1 or pieces[0][0]:
        if any(not value and _QUOTED.fullmatch(piece) for value, piece in pieces):
            raise _NotPlain  # a quoted string is an argument of its own
        return _joined(pieces)
    word = pieces[0][1]
    if _QUOTED.fullmatch(word):
        return word[1:-1]
    if _INT.fullmatch(word):
        return int(word)
    if _FLOATISH.fullmatch(word):
        raise _NotPlain
    lower = word.lower()
    if lower in ("true", "false"):
        return lower == "true"
    if lower == "null":
        return None
    return word
