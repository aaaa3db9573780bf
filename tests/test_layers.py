"""Layers point down: cli over plan over backends and checks over config; data, models and ckpt use config, never
the plan; code that runs inside trainer processes (runtime) imports none of the translation or CLI layers; the MCP
package (plan-time server specs and discovery, shared with the worker-side bridge) is a leaf."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import trainctl

SRC = Path(trainctl.__file__).resolve().parent

# what trainctl.mcp may import: checks, the CLI and the worker-side bridge all build on it
MCP_IMPORTS = {"mcp", "errors", "secrets", "paths"}


def _all_but(allowed: set[str]) -> tuple[str, ...]:
    names = {p.stem for p in SRC.iterdir() if (p.is_dir() or p.suffix == ".py") and not p.name.startswith("_")}
    return tuple(f"trainctl.{n}" for n in sorted(names - allowed))


# package -> trainctl modules it must never import (anywhere in a module: top level, functions, TYPE_CHECKING)
FORBIDDEN = {
    "data": ("trainctl.plan", "trainctl.cli", "trainctl.launch"),
    "models": ("trainctl.plan", "trainctl.cli", "trainctl.launch"),
    "ckpt": ("trainctl.plan", "trainctl.cli", "trainctl.launch"),
    "checks": ("trainctl.plan", "trainctl.cli", "trainctl.launch"),
    # trainctl.backends includes trainctl.backends.tools: a worker reads the tool config, it never builds one
    "runtime": ("trainctl.plan", "trainctl.checks", "trainctl.cli", "trainctl.backends", "trainctl.launch"),
    # composition and the schema only: no translation (backends), no discovery (mcp), nothing of the workers
    "config": (
        "trainctl.plan",
        "trainctl.checks",
        "trainctl.backends",
        "trainctl.cli",
        "trainctl.launch",
        "trainctl.runtime",
        "trainctl.mcp",
    ),
    "mcp": _all_but(MCP_IMPORTS),
    "backends": ("trainctl.plan", "trainctl.cli", "trainctl.launch"),
    # launchers start, follow and stop a prepared command: the backends and checks ask them how a trainer reaches
    # Ray, so they sit below the plan and know nothing of it
    "launchers": ("trainctl.plan", "trainctl.cli", "trainctl.launch", "trainctl.checks", "trainctl.backends"),
    # eval sits beside plan (it translates configs with plan.resolve, as training does), under the CLI
    "eval": ("trainctl.cli", "trainctl.launch"),
    # the tool environment outside a run (tools ls/call, the preflight, the lock's record): under plan and CLI
    "toolenv": ("trainctl.plan", "trainctl.cli", "trainctl.launch", "trainctl.checks", "trainctl.backends"),
    # model serve and chat: beside eval (they resolve models as eval does), under the CLI
    "inference": ("trainctl.cli", "trainctl.launch"),
    "facts": ("trainctl.",),  # plain data: a leaf
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names]
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layers_point_down(package):
    bad = []
    for path in sorted((SRC / package).rglob("*.py")):
        for name in _imports(path):
            if any(
                name == f.rstrip(".") or name.startswith(f if f.endswith(".") else f + ".") or name == f
                for f in FORBIDDEN[package]
            ):
                bad.append(f"{path.relative_to(SRC.parent)} imports {name}")
    assert not bad, "\n".join(bad)


def test_the_mcp_package_imports_neither_verl_nor_the_sdk_until_it_connects():
    """checks/ and the CLI read server specs without paying for verl, ray or the mcp SDK."""
    code = (
        "import sys, trainctl.mcp.specs, trainctl.mcp.discovery, trainctl.mcp.schemas, trainctl.mcp.results\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('verl', 'ray', 'torch', 'mcp') "
        "or m.startswith(('trainctl.config', 'trainctl.runtime', 'trainctl.backends', 'trainctl.plan'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_importing_the_model_catalog_loads_no_plan_checks_or_backend():
    code = (
        "import sys, trainctl.models.catalog, trainctl.data.prep, trainctl.ckpt.layout\n"
        "print(sorted(m for m in sys.modules if m.startswith(('trainctl.plan', 'trainctl.checks', "
        "'trainctl.backends', 'trainctl.cli'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
