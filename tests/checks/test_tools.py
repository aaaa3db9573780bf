"""The tools group before anything starts: each check through `trainctl config validate` (exit 1, the message, the
fix), against real MCP server processes (stdio ones the check starts, SSE / streamable-HTTP ones on 127.0.0.1)."""

from __future__ import annotations

import json
import shutil
import sys

import pyarrow.parquet as pq
import pytest

from tests.runtime.mcp_fixtures import calculator_file, free_port, http_server, wait_gone
from trainctl.mcp.discovery import forget_discovered
from trainctl.plan import make_plan

# small enough for grpo's batch checks on the generated data; the tools' own settings come from the option
GRPO = [
    "algorithm=grpo",
    "data=arith-tools",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
]
SECRET = "s3cr3t-token-0123456789"


@pytest.fixture(autouse=True)
def fresh_listings():
    forget_discovered()
    yield
    forget_discovered()


@pytest.fixture
def tool_data(isolated, cli):
    prep = cli("data", "prep", "arith-tools")
    assert prep.exit_code == 0, prep.output
    return isolated / "data" / "arith-tools"


def _validate(cli, *args):
    result = cli("config", "validate", *args)
    return result, " ".join(result.output.split())  # the renderer wraps long lines


# --- options compose, translate and validate -------------------------------------------------------------------


@pytest.mark.parametrize("option", ["calculator", "calculator-fn"])
def test_shipped_tools_options_set_verls_multi_turn_keys(option, tiny_model, tool_data):
    plan = make_plan([*GRPO, "model=tiny", f"tools={option}"])
    assert plan.errors == []
    run = plan.run_dir
    assert plan.value("actor_rollout_ref.rollout.multi_turn.enable") is True
    assert plan.value("actor_rollout_ref.rollout.multi_turn.format") == "hermes"
    assert plan.value("actor_rollout_ref.rollout.multi_turn.tool_config_path") == str(run / "tools.yaml")
    assert plan.value("actor_rollout_ref.rollout.multi_turn.max_assistant_turns") == 3
    assert plan.value("actor_rollout_ref.rollout.multi_turn.max_user_turns") == 2
    assert plan.value("actor_rollout_ref.rollout.multi_turn.max_tool_response_length") == 64
    assert plan.value("actor_rollout_ref.rollout.agent.default_agent_loop") == "tool_agent"
    assert plan.value("trainer.rollout_data_dir") == str(run / "rollouts")
    # what the probes found: the calculator's schema, by the server or by the function's docstring, rendered alike
    (entry,) = plan.subject.extra["tools"]["document"]["tools"]
    from trainctl.data.tools import calculator_schema

    assert entry["tool_schema"] == calculator_schema()
    assert {n.label for n in plan.numbers} >= {"tools the model may call", "tool schema tokens per prompt"}


def test_no_tools_leaves_verls_defaults(arith_data):
    plan = make_plan(["algorithm=grpo", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"])
    assert plan.value("actor_rollout_ref.rollout.multi_turn.enable") is False
    assert plan.value("actor_rollout_ref.rollout.agent.default_agent_loop") == "single_turn_agent"
    assert plan.value("trainer.rollout_data_dir") is None


# --- checks that start nothing -------------------------------------------------------------------------------


def test_tools_with_sft_is_refused(cli, no_processes):
    result, text = _validate(cli, "algorithm=sft", "tools=calculator")
    assert result.exit_code == 1
    assert "tools=calculator gives the model tools during RL rollouts, but algorithm=sft" in text
    assert "choose a PPO-family algorithm: algorithm=grpo" in text


def test_budgets_that_do_not_fit_the_response(cli, no_processes):
    result, text = _validate(cli, *GRPO, "tools=calculator", "data.max_response_length=64")
    assert result.exit_code == 1
    assert "1 x 64 = 64 characters of results, plus ~16 tokens for the call, against data.max_response_length" in text
    assert "tools.max_tool_response_length=32, or data.max_response_length=128" in text
    result, text = _validate(cli, *GRPO, "tools=calculator", "data.max_response_length=24")
    assert "data.max_response_length = 24 tokens leaves no room for a tool round" in text


def test_a_stdio_server_without_command_an_unknown_format_and_an_unset_env_name(cli, no_processes, monkeypatch):
    monkeypatch.delenv("CALC_TOKEN", raising=False)
    result, text = _validate(
        cli,
        *GRPO,
        "tools=calculator",
        "tools.servers.calculator.command=null",
        "tools.format=hermess",
        "tools.servers.calculator.env=[CALC_TOKEN]",
    )
    assert result.exit_code == 1
    assert "tools.servers.calculator is a stdio server with no command to start it" in text
    assert "tools.format = 'hermess' is not a tool-call parser verl knows" in text and "tools.format=hermes" in text
    assert "tools.servers.calculator.env names CALC_TOKEN, which is not set" in text
    assert "export CALC_TOKEN=..." in text
    result, text = _validate(cli, *GRPO, "tools=calculator", f"tools.servers.calculator.env=['CALC_TOKEN={SECRET}']")
    assert "tools.servers.calculator.env lists 'CALC_TOKEN=***', which is not an environment variable name" in text
    assert SECRET not in result.output


def test_an_env_value_is_never_shown_or_saved(cli, monkeypatch, tool_data, tiny_model):
    monkeypatch.setenv("CALC_TOKEN", SECRET)
    args = [*GRPO, "model=tiny", "tools=calculator", "tools.servers.calculator.env=[CALC_TOKEN]"]
    result = cli("train", *args, "--dry-run")
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    plan = make_plan(args)
    assert SECRET not in json.dumps(plan.subject.extra["tools"]["document"])
    assert plan.subject.extra["tools"]["document"]["tools"][0]["config"]["server_spec"]["env"] == {
        "CALC_TOKEN": "${CALC_TOKEN}"
    }


def test_rows_for_another_agent_loop_or_other_tools(cli, tool_data, no_processes):
    import pyarrow as pa

    table = pq.read_table(tool_data / "rl" / "train.parquet")
    single = table.set_column(
        table.schema.get_field_index("agent_name"), "agent_name", pa.array(["single_turn_agent"] * len(table))
    )
    pq.write_table(single, tool_data / "rl" / "train.parquet")
    result, text = _validate(cli, *GRPO, "tools=calculator")
    assert result.exit_code == 1
    assert "has rows with agent_name = 'single_turn_agent'" in text and "never calls tools" in text
    assert "drop the agent_name column" in text


def test_a_function_spec_that_names_no_file(cli, no_processes):
    result, text = _validate(cli, *GRPO, "tools=calculator-fn", "tools.functions=[tools/nowhere.py:search]")
    assert result.exit_code == 1
    assert "tools.functions[0] = 'tools/nowhere.py:search': tools/nowhere.py does not exist" in text
    result, text = _validate(cli, *GRPO, "tools=calculator-fn", "tools.functions=[search]")
    assert "'search' is not path/to/file.py:function or package.module:function" in text


# --- probes: servers really started or reached ---------------------------------------------------------------


def test_an_unknown_tool_name_is_checked_against_what_the_server_lists(cli, tool_data):
    result, text = _validate(cli, *GRPO, "tools=calculator", "tools.servers.calculator.tools=[calculater]")
    assert result.exit_code == 1
    assert "tools.servers.calculator.tools names 'calculater', which MCP server 'calculator' does not list" in text
    assert "(it lists: calculator)" in text and "Did you mean 'calculator'?" in text
    assert "tools.servers.calculator.tools=[calculator]" in text


def test_a_server_that_fails_to_start(cli, tool_data, tmp_path):
    crash = tmp_path / "crash_server.py"
    crash.write_text("import sys\nprint('loading the index', file=sys.stderr)\nsys.exit('index.db: no such table')\n")
    result, text = _validate(
        cli, *GRPO, "tools=calculator", f"tools.servers.calculator.command={sys.executable}",
        f"tools.servers.calculator.args=[{crash}]",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "MCP server 'calculator' could not be started" in text
    assert "its last lines on stderr: loading the index index.db: no such table" in text
    assert f"run it by hand to see it start: {sys.executable} {crash}" in text
    assert not wait_gone(str(crash), timeout=5)
    result, text = _validate(cli, *GRPO, "tools=calculator", "tools.servers.calculator.command=no-such-mcp-server")
    assert "MCP server 'calculator' could not be started: the command 'no-such-mcp-server' was not found" in text


def test_a_function_without_a_schema(cli, tool_data, tmp_path):
    tools = tmp_path / "my_tools.py"
    tools.write_text("def lookup(word):\n    return word\n")
    result, text = _validate(cli, *GRPO, "tools=calculator-fn", f"tools.functions=[{tools}:lookup]")
    assert result.exit_code == 1
    assert f"tools.functions: '{tools}:lookup' has no schema a model can read" in text
    assert "give every parameter a type hint" in text
    result, text = _validate(cli, *GRPO, "tools=calculator-fn", f"tools.functions=[{tools}:lokup]")
    assert f"{tools} has no function 'lokup'" in text and "functions there: lookup" in text


def test_a_chat_template_that_cannot_render_tools(cli, tool_data, tiny_model, tmp_path):
    plain = tmp_path / "plain-template"
    shutil.copytree(tiny_model, plain)
    # a ChatML template that ignores `tools`: the model would never see the calculator
    (plain / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    result, text = _validate(cli, *GRPO, "tools=calculator", f"model.path={plain}")
    assert result.exit_code == 1
    assert "the chat template ignores tools: the schema of 'calculator' is not in the rendered prompt" in text
    assert "choose a model whose chat template renders tools" in text


def _sse_args(port: int, *extra: str) -> list[str]:
    calc = "tools.servers.calculator"
    url = f"http://127.0.0.1:{port}/sse"
    return [
        *GRPO,
        "tools=calculator",
        f"{calc}.transport=sse",
        f"{calc}.url={url}",
        f"{calc}.command=null",
        f"{calc}.args=[]",
        *extra,
    ]


def test_an_sse_server_the_test_started_and_then_stopped(cli, tool_data):
    port = free_port()
    with http_server([sys.executable, str(calculator_file()), "--transport", "sse", "--port", str(port)], port):
        result, text = _validate(cli, *_sse_args(port))
        assert result.exit_code == 0, text
    # the same URL with nothing listening: asked again (a URL's listing is never reused)
    result, text = _validate(cli, *_sse_args(port, "tools.connect_timeout_s=5"))
    assert result.exit_code == 1
    assert "MCP server 'calculator' could not be reached: nothing answers at" in text
    assert f"curl -sN http://127.0.0.1:{port}/sse" in text


def test_a_streamable_http_server_from_an_mcpservers_file(tool_data, tmp_path):
    from trainctl.checks.tools import probes

    port = free_port()
    calc = [sys.executable, str(calculator_file()), "--transport", "streamable-http", "--port", str(port)]
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"remote": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}}}))
    with http_server(calc, port):
        args = [*GRPO, "tools=none", f"tools.servers_file={servers}", "tools.max_tool_response_length=64"]
        plan = make_plan(args, native=False)
        assert probes(plan.subject) == []
    (entry,) = plan.subject.extra["tools"]["document"]["tools"]
    # the run's tool config names the file (its env and headers stay there), not a copy of the entry
    assert entry["config"]["server"] == "remote" and entry["config"]["servers_file"] == str(servers)
    assert "server_spec" not in entry["config"]
    assert entry["tool_schema"]["function"]["name"] == "calculator"


def test_an_mcpservers_file_that_is_not_json(cli, tmp_path, no_processes):
    servers = tmp_path / "mcp.json"
    servers.write_text('{"mcpServers": {\n  "calc": {"command": "python",}\n}}\n')
    result, text = _validate(cli, *GRPO, f"tools.servers_file={servers}")
    assert result.exit_code == 1
    assert f"MCP servers file {servers} is not valid JSON" in text and "at line 2" in text


def test_a_server_entry_is_checked_against_its_schema(cli, no_processes):
    result, text = _validate(cli, *GRPO, "tools=calculator", "tools.servers.calculator.comand=python")
    assert result.exit_code == 1
    assert "unknown config key 'tools.servers.calculator.comand'" in text
    assert "Did you mean 'tools.servers.calculator.command'?" in text
    result, text = _validate(cli, *GRPO, "tools=calculator", "tools.servers.calculator.transport=websocket")
    assert "tools.servers.calculator.transport = 'websocket' is not one of: stdio, sse, http" in text
    result, text = _validate(cli, *GRPO, "tools=calculator", "tools.servers.calculator=5")
    assert "tools.servers must be a mapping (key: value), not {'calculator': 5}" in text


def test_every_mistake_in_a_server_entry_is_found_before_anything_starts(cli, tmp_path, no_processes, monkeypatch):
    """What a worker could trip over in a server entry is a plan-time problem: `config validate` exits 1 naming
    the file, the server and the key; the run's workers get checked entries (tests/runtime/test_mcp_bridge.py)."""
    monkeypatch.delenv("SEARCH_TOKEN", raising=False)
    servers = tmp_path / "mcp.json"
    servers.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "socket": {"type": "websocket", "url": "http://127.0.0.1:9/ws"},
                    "ftp": {"url": "ftp://127.0.0.1/mcp"},
                    "nocommand": {"type": "stdio", "args": ["server.py"]},
                }
            }
        )
    )
    result, text = _validate(cli, *GRPO, "tools=none", f"tools.servers_file={servers}")
    assert result.exit_code == 1
    assert f"{servers}: server 'socket': unknown \"type\" 'websocket'." in text
    assert f"{servers}: {servers}" not in text, "the file is named once"
    assert "one of stdio, sse, streamable-http" in text
    assert f'{servers}: server \'ftp\' has neither a "command" (stdio) nor an http(s) "url"' in text
    assert f"{servers}: server 'nocommand' has no \"command\" to start it with." in text

    servers.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "search": {
                        "command": sys.executable,
                        "args": ["search.py"],
                        "env": {"SEARCH_TOKEN": "${SEARCH_TOKEN}", "OTHER_TOKEN": SECRET},
                        "cwd": str(tmp_path / "no-such-folder"),
                    },
                    "remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"}},
                }
            }
        )
    )
    result, text = _validate(cli, *GRPO, "tools=none", f"tools.servers_file={servers}")
    assert result.exit_code == 1
    assert (
        f"{servers}: server 'search': env.SEARCH_TOKEN refers to ${{SEARCH_TOKEN}}, which is not set in this "
        "environment." in text
    )
    assert f"{servers}: server 'search': cwd '{tmp_path / 'no-such-folder'}' is not a folder." in text
    assert f"{servers}: server 'remote': headers.Authorization refers to ${{SEARCH_TOKEN}}" in text
    assert "in mcpServers.remote.headers.Authorization" in text and "export SEARCH_TOKEN=..." in text
    assert SECRET not in result.output

    result, text = _validate(cli, *GRPO, "tools=calculator", f"tools.servers.calculator.cwd={tmp_path / 'nowhere'}")
    assert result.exit_code == 1
    assert f"tools.servers.calculator.cwd = '{tmp_path / 'nowhere'}' is not a folder" in text
    assert "tools.servers.calculator.cwd=null" in text


# --- a servers file's server changed by tools.servers.NAME (issue 30) -------------------------------------------


def test_a_servers_file_server_is_narrowed_and_changed_by_overrides(tool_data, tmp_path, monkeypatch):
    """The file's entry is the base and the override wins: `tools` narrows what the model gets, `args` and `env`
    change how the server starts; the run's tools.yaml names the file and carries the changed keys (no values),
    and a worker applies them to the file's entry again."""
    from tests.runtime.mcp_fixtures import probe_server_entry
    from trainctl.checks.tools import probes
    from trainctl.runtime.mcp_bridge import worker_spec

    monkeypatch.setenv("PROBE_TOKEN", SECRET)
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"probe": probe_server_entry(env={"FILE_ONLY": SECRET})}}))
    base = [*GRPO, "tools=none", f"tools.servers_file={servers}", "tools.max_tool_response_length=64"]
    plan = make_plan([*base, "tools.servers.probe.tools=[pid,sleep]"], native=False)
    assert plan.errors == [] and probes(plan.subject) == []
    entries = plan.subject.extra["tools"]["document"]["tools"]
    assert [e["tool_schema"]["function"]["name"] for e in entries] == ["sleep", "pid"], "the server's order"
    assert {e["config"]["servers_file"] for e in entries} == {str(servers)}
    assert all("server_overrides" not in e["config"] for e in entries), "only the tools were narrowed"

    # args and env change how it starts: the file's entry with the override applied, here and in a worker
    from trainctl.config.load import load
    from trainctl.mcp.specs import file_overrides, server_specs

    script = probe_server_entry()["args"][0]
    cfg = load([*base, f"tools.servers.probe.args=[-u,{script}]", "tools.servers.probe.env=[PROBE_TOKEN]"]).cfg
    inline, from_file = server_specs(cfg.tools)
    assert inline == {} and from_file["probe"].args == ("-u", script)
    overrides = file_overrides(cfg.tools)["probe"]
    assert overrides == {"args": ["-u", script], "env": {"PROBE_TOKEN": "${PROBE_TOKEN}"}}, "names, never values"
    spec = worker_spec({"server": "probe", "servers_file": str(servers), "server_overrides": overrides})
    assert spec == from_file["probe"]
    assert dict(spec.env) == {"FILE_ONLY": SECRET, "PROBE_TOKEN": "${PROBE_TOKEN}"}


def test_an_override_that_names_no_server_of_the_file_or_breaks_one(cli, tmp_path, no_processes):
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"probe": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}}))
    result, text = _validate(cli, *GRPO, "tools=none", f"tools.servers_file={servers}", "tools.servers.prob.tools=[x]")
    assert result.exit_code == 1
    assert "tools.servers.prob is a stdio server with no command to start it" in text
    assert "tools.servers_file names 'probe': did you mean 'probe'?" in text
    result, text = _validate(
        cli, *GRPO, "tools=none", f"tools.servers_file={servers}", "tools.servers.probe.transport=stdio"
    )
    assert result.exit_code == 1
    assert f"{servers} with tools.servers.probe: server 'probe' has no \"command\" to start it with." in text


def test_library_warnings_go_to_the_debug_log(cli, tool_data, tiny_model, tmp_path, monkeypatch):
    """Schemas longer than the tokenizer's model_max_length made transformers print "Token indices sequence length
    is longer than the specified maximum ..." through `config validate`: it belongs in the debug log."""
    import io
    import logging

    wordy = tmp_path / "wordy.py"
    wordy.write_text(
        f'def lookup(word: str) -> str:\n    """{"Look the word up in a very long glossary. " * 10}\n\n'
        '    Args:\n        word: the word\n    """\n    return word\n'
    )
    args = ["config", "validate", *GRPO, "tools=calculator-fn", f"tools.functions=[{wordy}:lookup]"]
    args += ["data.max_prompt_length=512"]  # the schema's ~300 tokens fit
    config = tiny_model / "tokenizer_config.json"  # ... but the tokenizer says it takes 256 at most
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_max_length": 256}))
    # what transformers' own handlers would print (on the terminal, outside tests)
    printed = io.StringIO()
    handler = logging.StreamHandler(printed)
    logging.getLogger("transformers").addHandler(handler)
    try:
        quiet = cli(*args)
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert quiet.exit_code == 0, quiet.output
    assert "Token indices" not in printed.getvalue() + quiet.output, printed.getvalue()
    monkeypatch.setenv("TRAINCTL_DEBUG", "1")
    shown = cli(*args)
    assert "debug: transformers" in shown.stderr and "Token indices sequence length" in shown.stderr
