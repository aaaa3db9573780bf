"""Where each value of a composed config came from: a group file, a recipe, or the command line.

Hydra merges the primary config's defaults list in order, each group option after its own defaults list (a
variant after the option it inherits from), `_self_` where the list puts it (last when absent). That order is
rebuilt here from the group choices Hydra reported and the files' own defaults lists, so that the last file that
sets a key is the one named.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainctl.config.yaml_files import config_file

if TYPE_CHECKING:
    from trainctl.config.search import SearchPath

COMMAND_LINE = "command line"


def _leaves(tree: Any, prefix: str) -> list[str]:
    if isinstance(tree, dict) and tree:
        out = []
        for k, v in tree.items():
            out.extend(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [prefix] if prefix else []


def _package(file: Path, default: str) -> str:
    """A file's `# @package` header (`_global_` is the root), else the group it is in."""
    with file.open() as fh:
        for line in fh:
            if not line.startswith("#"):
                break
            text = line.lstrip("#").strip()
            if text.startswith("@package"):
                pkg = text.removeprefix("@package").strip()
                return "" if pkg == "_global_" else pkg
    return default


def _entry(entry: Any) -> tuple[str | None, str | None, str | None]:
    """(group, option, package) of a defaults-list entry; (None, name, None) for a config of the same group;
    overrides are skipped (they change a choice and merge nothing where they stand)."""
    if isinstance(entry, str):
        return None, entry, None
    if isinstance(entry, dict) and len(entry) == 1:
        ((key, value),) = entry.items()
        key = str(key)
        if key.startswith("override "):
            return None, None, None
        group, _, package = key.removeprefix("optional ").strip().lstrip("/").partition("@")
        return group, value, (package or None)
    return None, None, None


def merge_order(search: SearchPath, choices: dict[str, str], primary: str = "trainctl") -> list[tuple[Path, str]]:
    """(file, package) for every config file Hydra merged, in merge order."""
    out: list[tuple[Path, str]] = []

    def visit(config_path: str, group: str | None, mount: str | None = None) -> None:
        file = search.find(config_path)
        if file is None:
            return
        package = _package(file, group or "") if mount is None else ("" if mount == "_global_" else mount)
        raw = config_file(str(file))[1] or {}
        defaults = raw.get("defaults") or [] if isinstance(raw, dict) else []
        if "_self_" not in defaults:
            defaults = [*defaults, "_self_"]
        for entry in defaults:
            sub_group, option, sub_mount = _entry(entry)
            if option == "_self_":
                out.append((file, package))
            elif sub_group is None and option:
                visit(f"{group}/{option}" if group else option, group, mount)  # a variant of the same group
            elif sub_group:
                key = f"{sub_group}@{sub_mount}" if sub_mount else sub_group
                chosen = choices.get(key, choices.get(sub_group, option))
                if chosen and chosen != "null":
                    visit(f"{sub_group}/{chosen}", sub_group, sub_mount)

    visit(primary, None)
    return out


def sources(
    search: SearchPath, choices: dict[str, str], cli: set[str], primary: str = "trainctl"
) -> list[tuple[str, set[str]]]:
    """(label, keys it sets) for every config file Hydra merged, in merge order, then the command line (`cli`: the
    keys the overrides set)."""
    out: list[tuple[str, set[str]]] = []
    for file, package in merge_order(search, choices, primary):
        raw = config_file(str(file))[1] or {}
        raw.pop("defaults", None)
        out.append((search.label(file), set(_leaves(raw, package))))
    out.append((COMMAND_LINE, cli))
    return out


def origin_of(path: str, srcs: list[tuple[str, set[str]]]) -> str | None:
    """The last source that set `path` (or a key under it)."""
    for label, keys in reversed(srcs):
        if path in keys or any(k.startswith(path + ".") for k in keys):
            return label
    return None
