"""Command-line overrides: parsing, malformed-input messages, and sweep expansion."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainctl.config.search import GROUPS, SearchPath
from trainctl.errors import UsageError
from trainctl.suggest import closest


@dataclass(frozen=True)
class Override:
    """One `key=value` from the command line, parsed the way Hydra parses it."""

    raw: str
    key: str
    value: Any = None
    op: str = "set"  # set | add (+key) | force_add (++key) | delete (~key)
    package: str | None = None


@lru_cache(maxsize=1)
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _op(o) -> str:
    if o.is_delete():
        return "delete"
    if o.is_force_add():
        return "force_add"
    if o.is_add():
        return "add"
    return "set"


def _not_an_override(word: str, search: SearchPath | None) -> UsageError:
    hint = "overrides look like key=value, e.g. algorithm=grpo or data.max_prompt_length=1024"
    if search is not None:
        if word in GROUPS:
            opts = ", ".join(search.options(word)) or "(none)"
            hint = f"choose an option: {word}=OPTION (one of: {opts})"
        else:
            for group in GROUPS:
                if word in search.options(group):
                    hint = f"did you mean {group}={word}?"
                    break
    return UsageError(f"'{word}' is not an override.", hint=hint)


# NAME=value inside an override's value (e.g. an env list written as [HF_TOKEN=hf_...]): the value may be a secret
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=([^,\]\s']+)")


def _without_assignments(text: str, after_key: bool = True) -> str:
    """The text with every NAME=value (after the override's own key=) shown as NAME=***."""
    key, eq, value = text.partition("=") if after_key else ("", "", text)
    return key + eq + _ASSIGNMENT.sub(r"\1=***", value)


def parse_one(raw: str, search: SearchPath | None = None):
    """Parse one override with Hydra's grammar; a malformed one is a UsageError that says how to write it."""
    from hydra.errors import HydraException

    if "=" not in raw and not raw.startswith("~"):
        raise _not_an_override(raw, search)
    try:
        return _parser().parse_override(raw)
    except HydraException as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else "cannot be parsed"
        raise UsageError(
            f"malformed override '{_without_assignments(raw)}': {_without_assignments(reason, after_key=False)}.",
            hint="write key=value; quote values with spaces or special characters: key='a b', "
            "lists as key=[a,b], several values to sweep with -m: key=a,b",
        ) from None


def _override(o, raw: str, value: Any) -> Override:
    return Override(raw=raw, key=o.key_or_group, value=value, op=_op(o), package=o.package)


# The plainest overrides (`a.b=word`, `+a.b=1e-6`: a dotted key, a value of letters, digits and -_./+:@) read
# without Hydra's grammar, as it reads them: importing and running its ANTLR parser costs ~0.1 s of the 0.3 s a
# config error is allowed. Hydra's lexer (hydra/grammar/OverrideLexer.g4) makes such a value one token when one
# rule matches all of it (FLOAT before INT, BOOL and NULL before ID: `inf` is a float, `true` a bool), else
# several, joined back into the string written. Anything else goes to Hydra.
_PLAIN_KEY = re.compile(r"(\+{0,2})([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z_][A-Za-z0-9_\-]*)*)=([A-Za-z0-9_\-./+:@]+)")
_UINT = r"(?:0|[1-9](?:_?[0-9])*)"
_POINT = rf"(?:{_UINT}\.|{_UINT}?\.[0-9](?:_?[0-9])*)"
_FLOAT = re.compile(rf"[+-]?(?:{_POINT}|(?:{_UINT}|{_POINT})[eE][+-]?[0-9](?:_?[0-9])*|[Ii][Nn][Ff]|[Nn][Aa][Nn])")
_INT = re.compile(rf"[+-]?{_UINT}")
_OPS = {"": "set", "+": "add", "++": "force_add"}


def _plain(raw: str) -> Override | None:
    m = _PLAIN_KEY.fullmatch(raw)
    if m is None:
        return None
    prefix, key, text = m.groups()
    value: Any
    if _FLOAT.fullmatch(text):
        value = float(text)
    elif _INT.fullmatch(text):
        value = int(text)
    elif text.lower() in ("true", "false"):
        value = text.lower() == "true"
    elif text.lower() == "null":
        value = None
    else:
        value = text
    return Override(raw=raw, key=key, value=value, op=_OPS[prefix])


def expand(args: list[str], multirun: bool, search: SearchPath | None = None) -> list[list[Override]]:
    """The override lists to run, each override parsed once: one list, or with -m one per point of the sweep
    (the product of all swept values)."""
    axes: list[list[Override]] = []
    for raw in args:
        plain = _plain(raw)
        if plain is not None:
            axes.append([plain])
            continue
        o = parse_one(raw, search)
        if not o.is_sweep_override():
            axes.append([_override(o, raw, None if o.is_delete() else o.value())])
            continue
        key = o.get_key_element()
        points = [
            _override(o, f"{key}={text}", value)
            for text, value in zip(o.sweep_string_iterator(), o.sweep_iterator(), strict=True)
        ]
        if not multirun:
            raise UsageError(
                f"'{raw}' gives {len(points)} values.",
                hint=f"add -m to sweep ({len(points)} runs), or write a list in brackets: {o.key_or_group}=[...]",
            )
        axes.append(points)
    return [list(point) for point in itertools.product(*axes)]


def parse(args: list[str], search: SearchPath | None = None) -> list[Override]:
    """Parse a (sweep-free) override list."""
    out = []
    for raw in args:
        plain = _plain(raw)
        if plain is not None:
            out.append(plain)
            continue
        o = parse_one(raw, search)
        if o.is_sweep_override():
            raise UsageError(f"'{raw}' gives several values.", hint="add -m to sweep over them")
        out.append(_override(o, raw, None if o.is_delete() else o.value()))
    return out


def suggest_option(option: str, options: list[str]) -> str | None:
    match = closest(option, options, cutoff=0.5)
    return match[0] if match else None


# -- rendering overrides ----------------------------------------------------------------------------------------

_BARE = re.compile(r"[A-Za-z_/][\w./\-]*")
_RESERVED = {"true", "false", "null", "none", "nan", "inf", "yes", "no", "on", "off"}


def render_value(value: Any) -> str:
    """A value written in Hydra's override grammar (what verl's command line accepts)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(render_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{render_value(v)}" for k, v in value.items()) + "}"
    s = str(value)
    if _BARE.fullmatch(s) and s.lower() not in _RESERVED:
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render_override(path: str, value: Any, added: bool = False) -> str:
    return f"{'+' if added else ''}{path}={render_value(value)}"
