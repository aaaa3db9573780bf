"""The tool environment in lock.json (trainctl.toolenv.identity): what each server is, and how two records differ;
`train --resume` notes the difference (tests/launch/test_agent_grpo.py reads a real run's record)."""

from __future__ import annotations

import json
import sys

import trainctl
from tests.checks.test_tools import GRPO
from tests.toolenv.test_preflight import fresh_listings, tool_data  # noqa: F401 - fixtures
from trainctl.toolenv.identity import changes, package_of


def test_the_package_behind_a_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    cached = tmp_path / ".npm" / "_npx" / "a1b2" / "node_modules" / "@modelcontextprotocol" / "server-everything"
    cached.mkdir(parents=True)
    (cached / "package.json").write_text(
        json.dumps({"name": "@modelcontextprotocol/server-everything", "version": "2.1.0"})
    )
    assert package_of("npx", ["-y", "@modelcontextprotocol/server-everything"]) == {
        "registry": "npm", "name": "@modelcontextprotocol/server-everything", "version": "2.1.0"
    }, "not pinned: the version npx's cache holds"  # fmt: skip
    assert package_of("npx", ["-y", "@scope/srv@1.2.3", "--flag"])["version"] == "1.2.3"
    assert package_of("npx", ["server-memory"]) == {"registry": "npm", "name": "server-memory", "version": None}
    assert package_of("uvx", ["mcp-server-fetch==2025.1.17"]) == {
        "registry": "pypi", "name": "mcp-server-fetch", "version": "2025.1.17"
    }  # fmt: skip
    assert package_of("uvx", ["--from", "mcp-server-git@0.6.2", "mcp-server-git"])["version"] == "0.6.2"
    assert package_of("pipx", ["run", "mcp-server-time"])["name"] == "mcp-server-time"
    calculator = str(__import__("trainctl.runtime.tools.calculator", fromlist=["x"]).__file__)
    assert package_of(sys.executable, [calculator])["name"] == "trainctl", "a file of this environment's trainctl"
    assert package_of(sys.executable, ["-m", "mcp.cli"]) == {
        "registry": "pypi", "name": "mcp", "version": __import__("importlib.metadata").metadata.version("mcp")
    }  # fmt: skip
    assert package_of("node", ["server.js"]) is None
    assert trainctl.__file__


def test_differences_are_said_per_server():
    before = {
        "servers": {
            "calc": {"transport": "stdio", "command": "python calc.py", "package": {"name": "calc", "version": "1.0"},
                     "server_info": {"name": "calc", "version": "1.0"}, "tools": ["add", "mul"],
                     "schemas_sha256": "a"},
            "old": {"transport": "sse", "url": "http://h/sse", "tools": [], "schemas_sha256": "b"},
        }
    }  # fmt: skip
    after = json.loads(json.dumps(before))
    after["servers"].pop("old")
    calc = after["servers"]["calc"]
    calc["package"]["version"], calc["server_info"]["version"] = "1.1", "1.1"
    calc["tools"], calc["schemas_sha256"] = ["add", "div"], "c"
    assert changes(before, after) == [
        "MCP server 'old' is gone",
        "MCP server 'calc': package calc 1.0 -> 1.1",
        "MCP server 'calc': it says it is calc 1.0 then, calc 1.1 now",
        "MCP server 'calc': its tool schemas changed (tools gone: mul; new: div)",
    ]
    assert changes(before, before) == []


def test_resuming_against_other_servers_is_noted(tool_data, tiny_model, tmp_path):  # noqa: F811
    from trainctl.checks.tools import probes
    from trainctl.launch.tools import before_launch
    from trainctl.plan import make_plan
    from trainctl.toolenv.identity import environment

    plan = make_plan([*GRPO, "tools=calculator"], native=False)
    assert probes(plan.subject) == []
    run = plan.run_dir
    trained = environment(plan.subject.extra["tools"]["servers"])
    now = trained["servers"]["calculator"]
    assert now["server_info"]["name"] == "calculator" and now["tools"] == ["calculator"]
    assert now["package"]["name"] == "trainctl" and len(now["schemas_sha256"]) == 64
    trained["servers"]["calculator"]["schemas_sha256"] = "0" * 64
    trained["servers"]["calculator"]["server_info"]["version"] = "0.0.1-trained"  # not trainctl's own version
    run.mkdir(parents=True, exist_ok=True)
    (run / "lock.json").write_text(json.dumps({"tools": trained}))
    (note,) = before_launch(plan, run, resume=True)
    assert note.startswith("the tool servers differ from those the run was trained with: ")
    assert "MCP server 'calculator': it says it is calculator 0.0.1-trained then" in note
    assert "MCP server 'calculator': its tool schemas changed" in note
