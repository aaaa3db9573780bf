"""Every backend value against the type its backend declares, before anything starts.

verl: the built config is walked; a node with a `_target_` is checked field by field against that dataclass
(nested dataclass fields through their annotations); a node no dataclass declares is checked against the type of
verl's own default value there, plus the few ranges verl needs but leaves unchecked (facts.verl.NODE_RANGES).
TRL: the flat config against the trainer's config's and ModelConfig's fields. One mechanism (trainctl.config.types),
no table of keys: a field trainctl never names is checked like any other. Only values trainctl or the user set are
reported; verl's own defaults are verl's business.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from trainctl.config.overrides import render_value
from trainctl.config.types import FieldInfo, Issue, Range, Spec, check_tree, describe, example, fits
from trainctl.errors import Problem
from trainctl.suggest import closest

if TYPE_CHECKING:
    from trainctl.backends.schemas import BackendSchemas
    from trainctl.checks.base import Subject


def _set_by_us(subject: Subject):
    """Whether a path (or a key under it) was set by trainctl's mapping, a group file, a recipe or the command line."""
    prefixes = set()
    for leaf in subject.built.leaves:
        parts = leaf.split(".")
        prefixes.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return prefixes.__contains__


def _tree(subject: Subject) -> dict:
    """The backend config as plain data with the values trainctl and the user set: only those are reported, so
    verl's own interpolations need not be resolved (resolving all of them costs more than the rest of the plan)."""
    from trainctl.backends.base import set_path

    tree = OmegaConf.to_container(subject.built.cfg, resolve=False)
    for path, value in subject.built.leaves.items():
        set_path(tree, path, value)
    return tree


def check(subject: Subject) -> list[Problem]:
    from trainctl.backends import schemas

    if subject.backend.startswith("trl-"):
        found = schemas.trl_schemas()
        root = found.classes[schemas.trl_root(subject.cfg.family)]
        issues = check_tree(_tree(subject), root, found.by_name, "", _set_by_us(subject))
        return [_problem(i, subject, found, "TRL") for i in issues if i.kind != "unknown"]
    found = schemas.verl_schemas()
    issues = walk_verl(_tree(subject), found, found.by_name, _set_by_us(subject), subject.built.defaults)
    added = subject.built.added
    # a key verl's own YAML has is accepted as verl accepts it; only a key added with + can be a stray field
    issues = [i for i in issues if i.kind != "unknown" or any(i.path == a or i.path.startswith(a + ".") for a in added)]
    return [_problem(i, subject, found, "verl") for i in issues]


def walk_verl(
    tree: dict, found: BackendSchemas, by_name: dict, report, defaults: dict | None, path: str = ""
) -> list[Issue]:
    """Issues in a verl config: dataclass nodes by their declaration, other leaves by verl's default's type."""
    from trainctl.facts.verl import NODE_RANGES, NULLABLE_KEYS

    issues: list[Issue] = []
    target = tree.get("_target_") if isinstance(tree, dict) else None
    schema = found.for_target(str(target)) if target else None
    if schema is not None:
        return check_tree(tree, schema, by_name, path, report)
    for key, value in tree.items():
        p = f"{path}.{key}" if path else str(key)
        default = defaults.get(key) if isinstance(defaults, dict) else None
        if isinstance(value, dict):
            issues += walk_verl(value, found, by_name, report, default if isinstance(default, dict) else None, p)
            continue
        if not report(p) or (isinstance(value, str) and (value == "???" or "${" in value)):
            continue
        if value is None and p in NULLABLE_KEYS:
            continue
        info = _inferred(default, NODE_RANGES.get(p))
        if info is None:
            continue
        if not fits(value, info.spec):
            issues.append(Issue(p, value, "type", describe(info.spec), owner=""))
        elif info.range is not None and value is not None and not info.range.admits(value):
            issues.append(Issue(p, value, "range", info.range.text(), owner=""))
    return issues


def _inferred(default: Any, bounds: dict | None) -> FieldInfo | None:
    """What a key no dataclass declares accepts: the kind of verl's default value there (a bool stays a bool, an
    int an int, a float a number, a list a list); nothing is inferred from a null, string or interpolation."""
    if isinstance(default, bool):
        spec = Spec("bool")
    elif isinstance(default, int):
        spec = Spec("int")
    elif isinstance(default, float):
        spec = Spec("float")
    elif isinstance(default, list):
        spec = Spec("list", of=(Spec("any"),))
    elif bounds and default is None:
        spec = Spec("union", of=(Spec("int"), Spec("none")))
    else:
        return None
    r = None
    if bounds:
        lo, lo_open = (bounds["gt"], True) if "gt" in bounds else (bounds.get("ge"), False)
        hi, hi_open = (bounds["lt"], True) if "lt" in bounds else (bounds.get("le"), False)
        r = Range(lo, lo_open, hi, hi_open)
    return FieldInfo(spec, r, default=default if not isinstance(default, list) else None)


def _short(owner: str) -> str:
    return owner.rsplit(".", 1)[-1]


def _owner(issue: Issue, found: BackendSchemas) -> str:
    """The dataclass that declares an issue's field (a flat TRL schema merges the trainer's config and ModelConfig)."""
    from trainctl.backends.schemas import TRL_ROOTS

    if issue.owner not in TRL_ROOTS:
        return issue.owner
    field = issue.path.rsplit(".", 1)[-1]
    declaring = (n for short in TRL_ROOTS[issue.owner] for n, c in found.classes.items() if _short(n) == short)
    return next((n for n in declaring if field in found.classes[n].fields), issue.owner)


def _problem(issue: Issue, subject: Subject, found: BackendSchemas, backend: str) -> Problem:
    key = issue.path
    origin = subject.built.origins.get(key) if key in subject.built.leaves else None
    where = f" (set in {origin})" if origin and origin != "command line" else ""
    field_name = key.rsplit(".", 1)[-1]
    declared = f"{backend}'s {_short(_owner(issue, found))}.{field_name}" if issue.owner else f"{backend}'s default"
    if issue.kind == "unknown":
        field = key.rsplit(".", 1)[-1]
        parent = key.rpartition(".")[0]
        guess = closest(field, issue.known)
        node = parent or "the top level"
        return Problem(
            f"unknown field '{field}' in {node}: {backend}'s {_short(issue.owner)} has no such field{where}.",
            key=key,
            details=[
                *([f"Did you mean '{parent + '.' if parent else ''}{guess[0]}'?"] if guess else []),
                f"Its fields: {', '.join(issue.known)}",
            ],
            hint=f"{parent + '.' if parent else ''}{guess[0]}={render_value(issue.value)}"
            if guess
            else "remove it (a dataclass node takes only its declared fields)",
        )
    fix = _fix(issue, subject, found)
    if issue.kind == "range":
        return Problem(
            f"{key} = {render_value(issue.value)} is out of range: it must be {issue.expected}{where}.",
            key=key,
            details=[f"declared by {declared}"],
            hint=fix,
        )
    return Problem(
        f"{key} must be {issue.expected}, not {issue.value!r}{where}.",
        key=key,
        details=[f"declared by {declared}"],
        hint=fix,
    )


def _fix(issue: Issue, subject: Subject, found: BackendSchemas) -> str:
    """`key=value` with a value that fits: the closest choice, verl's own default there, or one of the range."""
    key = issue.path
    origin = subject.built.origins.get(key) or ""
    target = key
    if origin.startswith("conf/mapping/"):
        return f"the value comes from trainctl's {origin}: fix the trainctl setting it reads (trainctl config show)"
    info = None
    if issue.owner and issue.owner in found.classes:
        info = found.classes[issue.owner].fields.get(key.rsplit(".", 1)[-1])
    default = _default_at(subject, key)
    spec = info.spec if info else None
    if spec is not None and not isinstance(issue.value, list | dict):
        # a single value where a list is declared: the same value as a one-element list
        members = spec.of if spec.kind == "union" else (spec,)
        if any(m.kind == "list" and fits(issue.value, m.of[0]) for m in members):
            return f"{target}=[{render_value(issue.value)}]"
    if spec is not None and isinstance(issue.value, str):
        choices = [v for s in (spec.of if spec.kind == "union" else (spec,)) if s.kind == "literal" for v in s.values]
        choices += list(info.range.choices) if info.range else []
        guess = closest(issue.value, [str(c) for c in choices], cutoff=0.4)
        if guess:
            return f"{target}={guess[0]}"
    valid_default = info is None or (fits(default, info.spec) and (not info.range or info.range.admits(default)))
    if default is not None and valid_default:
        backend = "TRL" if subject.backend.startswith("trl-") else "verl"
        return f"{target}={render_value(default)}  ({backend}'s default)"
    if info is not None:
        return f"{target}={render_value(example(info))}"
    return f"{target}=VALUE"


def _default_at(subject: Subject, key: str) -> Any:
    node: Any = subject.built.defaults
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if not isinstance(node, dict | list) and not (isinstance(node, str) and "${" in node) else None
