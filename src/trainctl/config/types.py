"""Types declared once, checked everywhere: a config value against the annotation of the dataclass field it sets.

One mechanism serves trainctl's own schema (trainctl.config.schema), verl's config dataclasses (reached through each
node's `_target_`) and TRL's DPOConfig. A field's annotation becomes a `Spec` (JSON-able, so the specs of verl's and
TRL's classes can be cached on disk instead of importing them, which costs seconds); `problem()` says whether a value
fits a spec, and in words what was expected when it does not.

Ranges come from two places: a field's metadata (`field(metadata=bounds(ge=1))`, trainctl's own) and the checks a
class's `__post_init__` makes that can be read without running it (`assert self.x > 0`, `if not 0 < self.x <= 1:
raise ...`, `assert self.x in [...]`), read from its source with `ast`.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import inspect
import textwrap
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Spec:
    """What a field accepts. kind: any, none, bool, int, float, str, literal, list, dict, union, dataclass."""

    kind: str
    values: tuple = ()  # literal: the allowed values
    of: tuple[Spec, ...] = ()  # list: (element,), dict: (value,), union: the members
    name: str = ""  # dataclass: module.Class

    def to_json(self) -> Any:
        out: dict[str, Any] = {"k": self.kind}
        if self.values:
            out["v"] = list(self.values)
        if self.of:
            out["o"] = [s.to_json() for s in self.of]
        if self.name:
            out["n"] = self.name
        return out

    @classmethod
    def from_json(cls, data: Any) -> Spec:
        return cls(
            data["k"],
            tuple(data.get("v", ())),
            tuple(cls.from_json(s) for s in data.get("o", ())),
            data.get("n", ""),
        )


ANY = Spec("any")
_SCALARS = {bool: "bool", int: "int", float: "float", str: "str", bytes: "str"}


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """A class's evaluated annotations, once per class (evaluating string annotations compiles each of them)."""
    return typing.get_type_hints(cls)


def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def spec_of(annotation: Any) -> Spec:
    """The Spec of a type annotation (an evaluated one: typing.get_type_hints). Unknown types accept anything."""
    if annotation is type(None) or annotation is None:
        return Spec("none")
    if annotation in _SCALARS:
        return Spec(_SCALARS[annotation])
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return Spec("literal", values=tuple(a.value if isinstance(a, enum.Enum) else a for a in args))
    if origin in (typing.Union, types.UnionType):
        members: list[Spec] = []
        for a in args:
            s = spec_of(a)
            if s.kind == "any":
                return ANY
            for m in s.of if s.kind == "union" else (s,):
                if m not in members:
                    members.append(m)
        return members[0] if len(members) == 1 else Spec("union", of=tuple(members))
    if origin is typing.Annotated:
        return spec_of(args[0])
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return Spec("literal", values=tuple(m.value for m in annotation))
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return Spec("dataclass", name=qualname(annotation))
    container = origin or annotation
    if isinstance(container, type):
        if issubclass(container, str):
            return Spec("str")
        if issubclass(container, Mapping) or _is_omegaconf(container, "DictConfig"):
            return Spec("dict", of=(spec_of(args[1]) if len(args) == 2 else ANY,))
        if issubclass(container, Sequence | set | frozenset) or _is_omegaconf(container, "ListConfig"):
            elem = spec_of(args[0]) if args and (container is not tuple or len(args) == 2) else ANY
            return Spec("list", of=(elem,))
        if container.__name__ in ("PosixPath", "Path", "PurePath"):
            return Spec("str")
    return ANY


def _is_omegaconf(cls: type, name: str) -> bool:
    return cls.__module__.startswith("omegaconf") and cls.__name__ == name


# -- checking one value -----------------------------------------------------------------------------------------


def fits(value: Any, spec: Spec) -> bool:
    """Whether a value (as OmegaConf resolves it: int, float, bool, str, None, list, dict) fits a spec."""
    kind = spec.kind
    if kind == "any":
        return True
    if kind == "none":
        return value is None
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "literal":
        return any(value == v and type(value) is type(v) for v in spec.values)
    if kind == "list":
        return isinstance(value, list | tuple) and all(fits(v, spec.of[0]) for v in value)
    if kind in ("dict", "dataclass"):
        # a dataclass node is checked field by field by the caller
        return isinstance(value, dict) and (kind == "dataclass" or all(fits(v, spec.of[0]) for v in value.values()))
    if kind == "union":
        return any(fits(value, s) for s in spec.of)
    return True


def describe(spec: Spec) -> str:
    """A spec in words: 'an integer', 'a number or null', 'one of: a, b'."""
    kind = spec.kind
    if kind == "union":
        nullable = any(s.kind == "none" for s in spec.of)
        rest = [s for s in spec.of if s.kind != "none"]
        if rest and all(s.kind == "literal" for s in rest):
            rest = [Spec("literal", values=tuple(v for s in rest for v in s.values))]
        text = " or ".join(describe(s) for s in rest)
        return f"{text} or null" if nullable else text
    return {
        "any": "anything",
        "none": "null",
        "bool": "true or false",
        "int": "an integer",
        "float": "a number",
        "str": "a string",
        "dict": "a mapping (key: value)",
        "dataclass": "a mapping (key: value)",
    }.get(kind) or (
        "one of: " + ", ".join(_show(v) for v in spec.values)
        if kind == "literal"
        else f"a list of {_plural(describe(spec.of[0]))}"
    )


def _show(v: Any) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def _plural(text: str) -> str:
    for single, many in (("an integer", "integers"), ("a number", "numbers"), ("a string", "strings")):
        text = text.replace(single, many)
    return text.removeprefix("anything") or "values"


# -- ranges -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    """A numeric bound (lo and/or hi, each inclusive or not), or a set of choices."""

    lo: float | None = None
    lo_open: bool = False
    hi: float | None = None
    hi_open: bool = False
    choices: tuple = ()

    def admits(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        if not isinstance(value, int | float) or isinstance(value, bool):
            return True  # the type check speaks for values of the wrong kind
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False
        return not (self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi)))

    def text(self) -> str:
        if self.choices:
            return "one of: " + ", ".join(_show(c) for c in self.choices)
        lo, hi = _num(self.lo), _num(self.hi)
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'greater than' if self.lo_open else 'at least'} {lo}"
        return f"{'less than' if self.hi_open else 'at most'} {hi}"

    def to_json(self) -> list:
        return [self.lo, self.lo_open, self.hi, self.hi_open, list(self.choices)]

    @classmethod
    def from_json(cls, data: list) -> Range:
        return cls(data[0], data[1], data[2], data[3], tuple(data[4]))

    def merge(self, other: Range) -> Range:
        """Both bounds at once (the tighter of each)."""
        if self.choices or other.choices:
            return other if other.choices else self
        lo, lo_open = max(((r.lo, r.lo_open) for r in (self, other) if r.lo is not None), default=(None, False))
        hi, hi_open = min(((r.hi, not r.hi_open) for r in (self, other) if r.hi is not None), default=(None, True))
        return Range(lo, lo_open, hi, not hi_open if hi is not None else False)


def _num(x: float | None) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def bounds(ge=None, gt=None, le=None, lt=None, doc: str = "") -> dict:
    """Field metadata for trainctl's own schema: `field(metadata=bounds(ge=1, doc="..."))`."""
    lo, lo_open = (gt, True) if gt is not None else (ge, False)
    hi, hi_open = (lt, True) if lt is not None else (le, False)
    meta: dict[str, Any] = {"doc": doc}
    if lo is not None or hi is not None:
        meta["range"] = Range(lo, lo_open, hi, hi_open)
    return meta


_FLIP = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt}
_MIRROR = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}


def _const(node: ast.AST) -> Any:
    if isinstance(node, ast.Set):  # as written: a set's own order changes with the interpreter's hash seed
        values = [_const(elt) for elt in node.elts]
        return _MISSING if _MISSING in values else tuple(dict.fromkeys(values))
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return _MISSING
    return value


_MISSING = object()


def _self_field(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _ranges_of_compare(cmp: ast.Compare, negate: bool) -> dict[str, Range]:
    """`self.x > 0`, `0 < self.x <= 1`, `self.x in [...]` (negated for `if ...: raise`)."""
    operands = [cmp.left, *cmp.comparators]
    out: dict[str, Range] = {}
    for left, op, right in zip(operands, cmp.ops, operands[1:], strict=False):
        name, const, op_type = _self_field(left), _const(right), type(op)
        if name is None:
            name, const = _self_field(right), _const(left)
            op_type = _MIRROR.get(op_type, op_type)
        if name is None or const is _MISSING:
            continue
        if op_type in (ast.In, ast.NotIn):
            if (op_type is ast.In) != negate and isinstance(const, list | tuple | set):
                out[name] = Range(choices=tuple(const))
            continue
        if op_type not in _FLIP or not isinstance(const, int | float) or isinstance(const, bool):
            continue
        if negate:
            if len(cmp.ops) > 1:
                return {}  # `not a < x < b` is two ranges joined by "or": not readable as one
            op_type = _FLIP[op_type]
        r = {
            ast.Gt: Range(lo=const, lo_open=True),
            ast.GtE: Range(lo=const),
            ast.Lt: Range(hi=const, hi_open=True),
            ast.LtE: Range(hi=const),
        }[op_type]
        out[name] = out[name].merge(r) if name in out else r
    return out


def _ranges_of_test(test: ast.AST, negate: bool) -> dict[str, Range]:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _ranges_of_test(test.operand, not negate)
    if isinstance(test, ast.Compare):
        return _ranges_of_compare(test, negate)
    if isinstance(test, ast.BoolOp):
        # `if a < 1 or b < 1: raise` -> both ranges; `assert x is None or x > 0` -> x's range when set
        parts = [_ranges_of_test(v, negate) for v in test.values]
        joins_independent = isinstance(test.op, ast.Or) == negate
        guards = [v for v in test.values if _is_none_guard(v, negate)]
        if joins_independent or guards:
            out: dict[str, Range] = {}
            for p in parts:
                out.update(p)
            return out
    return {}


def _is_none_guard(node: ast.AST, negate: bool) -> bool:
    """`self.x is not None` (in an `if ... and`) or `self.x is None` (in an `assert ... or`)."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and _self_field(node.left)):
        return False
    op = node.ops[0]
    right = node.comparators[0]
    if not (isinstance(right, ast.Constant) and right.value is None):
        return False
    return isinstance(op, ast.IsNot) if negate else isinstance(op, ast.Is)


def _raises(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[0], ast.Raise)


def post_init_ranges(cls: type) -> dict[str, Range]:
    """The ranges and choices a dataclass's __post_init__ (and its bases') enforce, where they can be read."""
    out: dict[str, Range] = {}
    for klass in reversed(cls.__mro__):
        fn = klass.__dict__.get("__post_init__")
        if fn is None:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            continue
        func = tree.body[0]
        # only the function's own top-level statements: a check nested in another `if` holds only sometimes
        for stmt in getattr(func, "body", []):
            if isinstance(stmt, ast.Assert):
                found = _ranges_of_test(stmt.test, negate=False)
            elif isinstance(stmt, ast.If) and _raises(stmt.body) and not stmt.orelse:
                found = _ranges_of_test(stmt.test, negate=True)
            else:
                continue
            for name, r in found.items():
                out[name] = out[name].merge(r) if name in out else r
    return out


# -- dataclass schemas --------------------------------------------------------------------------------------------


@dataclass
class FieldInfo:
    spec: Spec
    range: Range | None = None
    doc: str = ""
    has_default: bool = True
    default: Any = None  # a plain (JSON-able) default, for fixes that show a valid value; None when unknown


@dataclass
class ClassSchema:
    """A dataclass's fields, as the checker needs them."""

    name: str
    fields: dict[str, FieldInfo] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "fields": {
                k: [f.spec.to_json(), f.range.to_json() if f.range else None, f.doc, f.has_default, f.default]
                for k, f in self.fields.items()
            },
        }

    @classmethod
    def from_json(cls, data: dict) -> ClassSchema:
        return cls(
            data["name"],
            {
                k: FieldInfo(Spec.from_json(s), Range.from_json(r) if r else None, doc, has_default, default)
                for k, (s, r, doc, has_default, default) in data["fields"].items()
            },
        )


def class_schema(cls: type, extra_ranges: dict[str, Range] | None = None) -> ClassSchema:
    """A dataclass's schema: each init field's Spec, its range (metadata, __post_init__, extra) and doc."""
    hints = type_hints(cls)
    read = post_init_ranges(cls)
    out = ClassSchema(qualname(cls))
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        r = f.metadata.get("range") or read.get(f.name)
        if extra_ranges and f.name in extra_ranges:
            r = r.merge(extra_ranges[f.name]) if r else extra_ranges[f.name]
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = f.default if isinstance(f.default, bool | int | float | str) else None
        if isinstance(default, enum.Enum):
            default = default.value
        spec = spec_of(hints.get(f.name, Any))
        out.fields[f.name] = FieldInfo(spec, r, f.metadata.get("doc", ""), has_default, default)
    return out


def schemas_of(root: type, extra_ranges: dict[str, dict[str, Range]] | None = None) -> dict[str, ClassSchema]:
    """The schema of a dataclass and of every dataclass its fields name, by qualified name."""
    out: dict[str, ClassSchema] = {}
    todo = [root]
    while todo:
        cls = todo.pop()
        name = qualname(cls)
        if name in out:
            continue
        extra: dict[str, Range] = {}
        for klass in reversed(cls.__mro__):  # ranges given for a base class hold for its subclasses
            extra.update((extra_ranges or {}).get(klass.__name__, {}))
        out[name] = class_schema(cls, extra)
        hints = type_hints(cls)
        for f in dataclasses.fields(cls):
            todo.extend(_dataclasses_in(hints.get(f.name)))
    return out


def _dataclasses_in(annotation: Any) -> list[type]:
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return [annotation]
    return [c for a in typing.get_args(annotation) for c in _dataclasses_in(a)]


# -- checking a tree against a schema -----------------------------------------------------------------------------


@dataclass
class Issue:
    """One value that does not fit its declaration."""

    path: str
    value: Any
    kind: str  # type | range | unknown | missing
    expected: str = ""
    known: tuple[str, ...] = ()  # the fields of the node, for an unknown key
    owner: str = ""  # the dataclass that declares the node


def _dataclass_member(spec: Spec) -> str | None:
    if spec.kind == "dataclass":
        return spec.name
    if spec.kind == "union":
        return next((s.name for s in spec.of if s.kind == "dataclass"), None)
    return None


def _dataclass_entries(spec: Spec) -> str | None:
    """The dataclass a mapping field's values are (dict[str, Cls], possibly optional), else None."""
    for member in spec.of if spec.kind == "union" else (spec,):
        if member.kind == "dict" and member.of and member.of[0].kind == "dataclass":
            return member.of[0].name
    return None


def check_tree(
    tree: Mapping,
    schema: ClassSchema,
    schemas: Mapping[str, ClassSchema],
    path: str = "",
    report: typing.Callable[[str], bool] | None = None,
    required: bool = False,
) -> list[Issue]:
    """Every value of `tree` against the fields of `schema` (nested dataclass fields recursively).

    `report(path)` says whether a path's problems are reported (e.g. only the keys a user set); `required` also
    reports fields without a default that the tree leaves out.
    """
    issues: list[Issue] = []
    report = report or (lambda p: True)

    def join(key: str) -> str:
        return f"{path}.{key}" if path else str(key)

    for key, value in tree.items():
        if key == "_target_":
            continue
        p = join(key)
        info = schema.fields.get(str(key))
        if info is None:
            if report(p):
                issues.append(Issue(p, value, "unknown", known=tuple(schema.fields), owner=schema.name))
            continue
        nested = _dataclass_member(info.spec)
        if nested and isinstance(value, Mapping):
            sub = schemas.get(str(value.get("_target_") or "")) or schemas.get(nested)
            if sub is not None:
                issues += check_tree(value, sub, schemas, p, report, required)
            continue
        entries = _dataclass_entries(info.spec)
        if entries and isinstance(value, Mapping) and entries in schemas:
            # a mapping of named sections (tools.servers.NAME): each entry against its dataclass
            for name, entry in value.items():
                if isinstance(entry, Mapping):
                    issues += check_tree(entry, schemas[entries], schemas, f"{p}.{name}", report, required)
                elif report(p):  # reported at the field, which the owner's schema declares
                    issues.append(Issue(p, {name: entry}, "type", describe(info.spec), owner=schema.name))
            continue
        if isinstance(value, str) and (value == "???" or "${" in value):
            continue  # MISSING (verl's own "set me" marker) or an interpolation the backend resolves
        if not report(p):
            continue
        if not fits(value, info.spec):
            issues.append(Issue(p, value, "type", describe(info.spec), owner=schema.name))
        elif info.range is not None and value is not None and not info.range.admits(value):
            issues.append(Issue(p, value, "range", info.range.text(), owner=schema.name))
    if required:
        for key, info in schema.fields.items():
            if not info.has_default and key not in tree:
                issues.append(Issue(join(key), None, "missing", describe(info.spec), owner=schema.name))
    return issues


def example(info: FieldInfo) -> Any:
    """A valid value for a field, for a fix: its default, else the bound of its range, else one of its kind."""
    default = info.default
    if default is not None and fits(default, info.spec) and (info.range is None or info.range.admits(default)):
        return default
    if info.range is not None and info.range.choices:
        return info.range.choices[0]
    spec = info.spec
    if spec.kind == "union":
        spec = next((s for s in spec.of if s.kind != "none"), spec)
    if spec.kind == "literal" and spec.values:
        return spec.values[0]
    if spec.kind in ("int", "float"):
        lo = info.range.lo if info.range is not None else None
        if lo is None:
            return 1 if spec.kind == "int" else 0.5
        step = 1 if spec.kind == "int" else lo or 0.1
        value = lo + step if info.range.lo_open else lo
        return int(value) if spec.kind == "int" else float(value)
    return {"bool": True, "str": "TEXT", "list": [], "dict": {}}.get(spec.kind)


def beside(text: str, reserved: tuple[str, ...] = ()) -> Any:
    """A field that gathers the keys of its section that no field declares, written beside the declared ones
    (reward.url beside reward.kind): whoever reads them declares and checks them (a reward kind its settings).
    Keys in `reserved` are never a section's own: a backend node of the same name has them (verl's `reward`)."""
    return field(default_factory=dict, metadata={**bounds(doc=text), "beside": tuple(reserved)})


def beside_field(cls: type) -> dataclasses.Field | None:
    """The field of a section class that gathers its undeclared keys, if it has one."""
    return next((f for f in dataclasses.fields(cls) if "beside" in f.metadata), None)


def gather(cls: type, data: dict) -> dict:
    """A section's data with the keys no field declares moved into its `beside` field (as written, unchecked)."""
    f = beside_field(cls)
    if f is None or not isinstance(data, dict):
        return data
    declared = {g.name for g in dataclasses.fields(cls) if g is not f}
    return {
        **{k: v for k, v in data.items() if k in declared},
        f.name: {k: v for k, v in data.items() if k not in declared},
    }
