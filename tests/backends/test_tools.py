"""The tools section translated for verl: the keys the verl backend sets, and the tool config document (tools.yaml)
built from listings. Listings here are real mcp.types.Tool objects (no server needed: discovery has its own tests
in tests/mcp/test_discovery.py)."""

from __future__ import annotations

import pytest
import yaml
from mcp.types import Tool

from trainctl.backends import tools as verl_tools
from trainctl.config.load import load
from trainctl.errors import TrainctlError
from trainctl.mcp.discovery import Discovered
from trainctl.mcp.specs import ServerSpec
from trainctl.plan import resolve

MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"
GRPO = ["algorithm=grpo", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]


def _tool(name: str, *params: str) -> Tool:
    properties = {p: {"type": "string", "description": p} for p in params}
    return Tool(name=name, description=f"{name} tool", inputSchema={"type": "object", "properties": properties})


def _listing(name: str, *tools: Tool, **spec) -> Discovered:
    return Discovered(ServerSpec(name, "stdio", command="srv", **spec), list(tools), 0.1)


# --- the keys verl gets --------------------------------------------------------------------------------------


def test_the_keys_a_tools_choice_sets_and_where_they_come_from(no_processes):
    plan = resolve([*GRPO, "tools=calculator"])
    run = plan.run_dir
    expected = {
        "actor_rollout_ref.rollout.agent.default_agent_loop": "tool_agent",
        f"{MULTI_TURN}.enable": True,
        f"{MULTI_TURN}.format": "hermes",
        f"{MULTI_TURN}.tool_config_path": str(run / "tools.yaml"),
        f"{MULTI_TURN}.max_assistant_turns": 3,
        f"{MULTI_TURN}.max_user_turns": 2,
        f"{MULTI_TURN}.max_parallel_calls": 1,
        f"{MULTI_TURN}.max_tool_response_length": 64,
        "trainer.rollout_data_dir": str(run / "rollouts"),
    }
    assert verl_tools.verl_keys(plan.cfg.tools, plan.cfg.run.dir) == expected
    for path, value in expected.items():
        assert plan.value(path) == value
        assert plan.built.origins[path] == "tools=calculator (trainctl.backends.tools)"

    # a key set under verl: wins over the computed one, as over the mapping table's
    mine = resolve([*GRPO, "tools=calculator", f"{MULTI_TURN}.max_user_turns=5"])
    assert mine.value(f"{MULTI_TURN}.max_user_turns") == 5
    assert mine.built.origins[f"{MULTI_TURN}.max_user_turns"] == "command line"

    none = resolve(GRPO)
    assert verl_tools.verl_keys(none.cfg.tools, none.cfg.run.dir) == {}
    assert not any(path.startswith(MULTI_TURN) for path in none.built.leaves), "tools=none leaves verl's defaults"


@pytest.mark.parametrize(("turns", "tool_turns", "user_turns"), [(4, None, 3), (1, None, 1), (4, 2, 2)])
def test_tool_results_count_as_user_turns(turns, tool_turns, user_turns, no_processes):
    overrides = ["tools=calculator", f"tools.max_assistant_turns={turns}"]
    if tool_turns is not None:
        overrides.append(f"tools.max_tool_turns={tool_turns}")
    tools = load(overrides).cfg.tools
    assert verl_tools.verl_keys(tools, "run")[f"{MULTI_TURN}.max_user_turns"] == user_turns


# --- the document verl reads ---------------------------------------------------------------------------------


def test_the_document_narrows_servers_adds_functions_and_refuses_clashes(tmp_path, no_processes):
    tools = load(["tools=calculator", "tools.functions=[pkg.mod:lookup]"]).cfg.tools
    listing = _listing("calculator", _tool("calculator", "expression"), _tool("memory"))
    lookup = {"type": "function", "function": {"name": "lookup", "description": "d", "parameters": {}}}
    document = verl_tools.tool_config_document(tools, {"calculator": listing}, {}, {"pkg.mod:lookup": lookup}, "r")
    mcp, function = document["tools"]
    assert mcp["class_name"] == "trainctl.runtime.mcp_bridge.MCPTool"
    assert mcp["tool_schema"]["function"]["name"] == "calculator", "only the tools the server entry allows"
    assert mcp["config"] == {
        "type": "native",
        "server": "calculator",
        "server_spec": {"command": "srv", "args": []},
        "mcp_tool": "calculator",
        "timeout": 10.0,
        "connect_timeout": 60.0,
        "session": "shared",
        "call_log_dir": str(verl_tools.run_path("r", verl_tools.CALLS_DIR)),
    }
    assert function["class_name"] == "trainctl.runtime.python_tool.PythonFunctionTool"
    assert function["config"]["function"] == "pkg.mod:lookup" and function["tool_schema"] == lookup

    clash = {"type": "function", "function": {"name": "calculator", "description": "d", "parameters": {}}}
    with pytest.raises(TrainctlError, match=r"tool name 'calculator' is given by both 'calculator' and 'pkg\.mod:x'"):
        verl_tools.tool_config_document(tools, {"calculator": listing}, {}, {"pkg.mod:x": clash}, "r")

    path = verl_tools.write_tool_config(tmp_path / "run" / "tools.yaml", document)
    assert yaml.safe_load(path.read_text()) == document
    assert [p.name for p in path.parent.iterdir()] == ["tools.yaml"], "written whole, no temporary file left"


def test_mcp_entries_name_each_tool_once_and_keep_secrets_out(tmp_path, no_processes):
    a = _listing("a", _tool("search", "q"), env=(("TOKEN", "${TOKEN}"),))
    b = _listing("b", _tool("search", "query"))
    with pytest.raises(TrainctlError, match="MCP tool name 'search' is listed by both server 'a' and server 'b'"):
        verl_tools.tool_config({"a": a, "b": b})
    prefixed = verl_tools.tool_config({"a": a, "b": b}, prefix_names=True, timeout=5)["tools"]
    assert [e["tool_schema"]["function"]["name"] for e in prefixed] == ["a__search", "b__search"]
    assert [e["config"]["mcp_tool"] for e in prefixed] == ["search", "search"]
    assert prefixed[0]["config"]["server_spec"]["env"] == {"TOKEN": "${TOKEN}"}, "a reference, never a value"
    assert prefixed[0]["config"]["timeout"] == 5.0

    servers_file = tmp_path / "mcp.json"
    by_file = verl_tools.tool_config({"b": b}, servers_file=servers_file)["tools"][0]["config"]
    assert by_file["servers_file"] == str(servers_file) and "server_spec" not in by_file
    with pytest.raises(TrainctlError, match="MCP session scope 'process' is not one of shared, trajectory"):
        verl_tools.tool_config({"b": b}, session="process")


def test_what_a_ray_job_carries(tmp_path, no_processes):
    """The job's tool config (issue 30): a servers file's server inline (its env as references only), the built-in
    calculator and a function file staged in the working dir, this machine's Python replaced by the job's."""
    import json
    import sys

    from trainctl.runtime.tools import calculator

    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"remote": {"command": "npx", "args": ["-y", "srv"],
                                                             "env": {"TOKEN": "${TOKEN}"}}}}))  # fmt: skip
    functions = tmp_path / "my_tools.py"
    functions.write_text("def lookup(word: str) -> str:\n    return word\n")
    calc = {"command": sys.executable, "args": [calculator.__file__, "--log", "/runs/a/tools/calculator.jsonl"]}
    document = {
        "tools": [
            {"class_name": "x", "config": {"server": "calculator", "server_spec": calc}, "tool_schema": {}},
            {"class_name": "x", "config": {"server": "remote", "servers_file": str(servers),
                                           "server_overrides": {"args": ["-y", "srv@2.0"]}}, "tool_schema": {}},
            {"class_name": "y", "config": {"function": f"{functions}:lookup"}, "tool_schema": {}},
        ]
    }  # fmt: skip
    job, staged = verl_tools.job_document(document, "python")
    calc_job, remote, function = (e["config"] for e in job["tools"])
    assert calc_job["server_spec"] == {
        "command": "python", "args": ["calculator.py", "--log", "/runs/a/tools/calculator.jsonl"]
    }  # fmt: skip
    assert remote == {
        "server": "remote",
        "server_spec": {"command": "npx", "args": ["-y", "srv@2.0"], "env": {"TOKEN": "${TOKEN}"}},
    }
    assert function["function"] == "tool_fn_my_tools.py:lookup"
    assert staged == {"calculator.py": __import__("pathlib").Path(calculator.__file__).resolve(),
                      "tool_fn_my_tools.py": functions.resolve()}  # fmt: skip
    assert document["tools"][0]["config"]["server_spec"]["command"] == sys.executable, "the run's own is untouched"
