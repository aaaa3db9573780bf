"""The shape of the package: no import cycle among trainctl's modules (imports inside functions and under
TYPE_CHECKING count: each is an arrow, and a lazy one only hides a cycle), config/ importing nothing of runtime/
(nor of backends/: tests/test_layers.py), and no module over 600 lines."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import trainctl

SRC = Path(trainctl.__file__).resolve().parent
MAX_LINES = 600


def _module_files() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = ["trainctl", *path.relative_to(SRC).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _module_files()


def _imported(module: str, path: Path) -> set[str]:
    """The trainctl modules a module imports anywhere in it; `from pkg import name` counts pkg (its __init__ runs)
    and pkg.name when that is a module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    found = set()
    for name in names:
        while name and name not in MODULES:  # pkg.mod.func -> pkg.mod
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


@functools.cache
def _graph() -> dict[str, set[str]]:
    return {m: _imported(m, p) for m, p in MODULES.items()}


@functools.cache
def _cycles() -> list[list[str]]:
    return _components(_graph())


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def _path(start: str, members: set[str]) -> list[str]:
    """One cycle through `start` inside its component, for the message."""
    graph = _graph()
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return [start]


def test_the_cycle_finder_finds_every_cycle_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": set()}
    assert sorted(_components(graph)) == [["a", "b", "c"], ["d", "e"]]


def test_the_graph_sees_lazy_imports():
    """The walk must see what a module imports inside its functions, or a lazy import would hide a cycle."""
    # cli/train.py imports the runner only inside _run
    assert "trainctl.launch.runner" in _graph()["trainctl.cli.train"]
    assert "trainctl.config.search" in _graph()["trainctl.cli.common"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_cycle(module):
    for component in _cycles():
        if module in component:
            cycle = " -> ".join(_path(module, set(component)))
            pytest.fail(f"{module} is in an import cycle: {cycle} (all of it: {', '.join(component)})")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("trainctl.config")))
def test_config_imports_nothing_of_runtime(module):
    """config/ is composition and the schema; what runs in trainer processes builds on it, never under it."""
    bad = sorted(m for m in _graph()[module] if m.startswith("trainctl.runtime"))
    assert not bad, f"{module} imports {', '.join(bad)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_over_600_lines(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(SRC.parent)} has {lines} lines (at most {MAX_LINES})"
