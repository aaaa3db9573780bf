"""env=verifiers' worker: the program trainctl runs in verifiers' own interpreter (trainctl.envs.verifiers), never in
trainctl's. It imports the standard library and verifiers only: verifiers 0.4.0 pins mcp==2.0.0 and openai<3, which
cannot share an interpreter with trainctl (mcp>=2.3).

    python verifiers_worker.py SPEC inspect    one JSON object: the taskset's rewards, metrics and what it needs
    python verifiers_worker.py SPEC prepare N  that object, then N tasks (or all of a shorter taskset), a line each
    python verifiers_worker.py SPEC serve      scores responses: a JSON request a line in, a JSON answer a line out
    python verifiers_worker.py SPEC tools      the taskset's toolsets as one MCP server on stdio (tools=verifiers)

SPEC is JSON: {"id": the taskset's module, "args": its config's fields, "path": folders to import it from}. A failure
before the command's work prints {"error": ..., "stage": "import" | "config" | "load"} and exits 2. `serve` answers
{"id", "score", "rewards", "metrics"} (or {"id", "error"}) for each request {"id", "data": a task's wire data,
"response": the model's text, "turns": the whole trajectory when there were tool calls}, scoring several at once, in
the order they finish; it ends when its stdin closes.

`tools`: verifiers starts each Toolset as an MCP server over HTTP per rollout (task toolsets) or per worker (taskset
toolsets), with a state channel back to the rollout. A Toolset without per-rollout state (no State subclass, no
setup_task) answers every rollout alike, so one stdio server per agent-loop worker serves them as verifiers would:
each toolset's own `register` on it, its tools named as verifiers' harness names them (`<server>_<tool>`, or bare
for TOOL_PREFIX = None), its `setup()` awaited first. describe() says which toolsets are not of that kind, and the
plan refuses them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import inspect
import json
import sys
import threading
import traceback


def fail(stage: str, error: BaseException | str) -> None:
    message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    print(json.dumps({"error": message, "stage": stage}), flush=True)
    sys.exit(2)


def load(spec: dict):
    """The taskset SPEC names, as verifiers' own loaders build it (its config from the arguments)."""
    if not _findable(_module(spec["id"])):  # a typo answered before verifiers' import (4-5 s of CPU)
        fail("import", f"taskset {spec['id']!r} not found (tried to import {_module(spec['id'])!r})")
    with _collector_paused():
        from verifiers.v1.utils import loaders

    try:
        with _collector_paused():
            loaders.import_taskset(spec["id"])
    except ModuleNotFoundError as e:
        # verifiers says "taskset not found" for any module its import misses: the one the taskset's own import
        # missed (a dependency) is the cause, named as it is, with where
        cause = e.__cause__
        if isinstance(cause, ModuleNotFoundError) and cause.name and cause.name.split(".")[0] != _module(spec["id"]):
            where = traceback.extract_tb(cause.__traceback__)[-1]
            fail("import", f"{type(cause).__name__}: {cause} (at {where.filename}:{where.lineno})")
        fail("import", e)
    except Exception as e:  # the module's own import error, named as it is
        where = traceback.extract_tb(e.__traceback__)[-1]
        fail("import", f"{type(e).__name__}: {e} (at {where.filename}:{where.lineno})")
    try:
        config = loaders.taskset_config_type(spec["id"]).model_validate({**spec.get("args", {}), "id": spec["id"]})
        return loaders.load_taskset(config)
    except Exception as e:  # pydantic's lines but its links
        fail("config", "\n".join(ln for ln in str(e).splitlines() if "errors.pydantic.dev" not in ln))


@contextlib.contextmanager
def _collector_paused():
    """Python's garbage collector off while verifiers and the taskset load, and what they made frozen after: as
    trainctl.import_cost.collector_paused (which this interpreter cannot import), ~0.35 of verifiers' ~3.5 s of CPU."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


atexit.register(gc.unfreeze)  # for the interpreter's last collection


def _findable(module: str) -> bool:
    """Whether verifiers' loaders could find `module`, without importing verifiers: on the path, or one of the tasksets
    verifiers ships (its loaders' rule: verifiers.v1.tasksets.MODULE first)."""
    import importlib.util
    import os

    try:
        if importlib.util.find_spec(module) is not None:
            return True
        package = importlib.util.find_spec("verifiers")
    except ModuleNotFoundError as e:  # a dotted name whose own package is not there
        return e.name != module.split(".")[0]
    except Exception:  # the package is there but its import fails: verifiers' loaders name the cause
        return True
    if package is None or not package.submodule_search_locations:
        return True  # no verifiers to look in: its own import fails and says so
    shipped = os.path.join(next(iter(package.submodule_search_locations)), "v1", "tasksets", *module.split("."))
    return os.path.isfile(shipped + ".py") or os.path.isdir(shipped)


def _module(taskset_id: str) -> str:
    """The module verifiers imports for an id (its loaders' rule: owner/name@version -> name, dashes to underscores)."""
    return taskset_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def requires_runtime(fn) -> bool:
    """verifiers' own test (Task.score): a `runtime` parameter without a default."""
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def describe(taskset) -> dict:
    """What trainctl checks before a run: the rewards and metrics, and what the taskset needs beyond a reply."""
    from verifiers.v1 import Task
    from verifiers.v1.utils import loaders

    try:
        first = next(iter(taskset.take(1)), None)
    except Exception as e:
        fail("load", e)
    cls = taskset.task_type() if first is None else type(first)
    out = {
        "module": getattr(sys.modules.get(type(taskset).__module__), "__file__", None),
        "taskset": type(taskset).__name__,
        "task": cls.__name__,
        "infinite": not taskset.bounded,
        "empty": first is None,
        "rewards": [],
        "metrics": [],
        "judges": [],
        "toolsets": [],
        "needs": [],
    }
    if first is None:
        return out
    for attr in ("reward", "metric"):
        for fn in first.hooks(attr):
            entry = {"name": fn.__name__, "runtime": requires_runtime(fn), "sync": not _is_async(fn)}
            if attr == "reward":
                entry["weight"] = getattr(fn, "_vf_weight", 1.0)
            out[attr + "s"].append(entry)
    out["judges"] = [j.reward_name for j in first.plugged_judges()]
    out["toolsets"] = [toolset_facts(t, scope) for t, scope in toolsets(taskset, first)]
    if cls.NEEDS_CONTAINER:
        out["needs"].append("a container (NEEDS_CONTAINER)")
    for hook in ("setup", "finalize", "stage_verifier"):
        if getattr(cls, hook) is not getattr(Task, hook):
            out["needs"].append(f"a runtime ({cls.__name__}.{hook})")
    env = loaders.environment_class(taskset.config.id)
    if env.__name__ != "SingleAgentEnv":
        out["needs"].append(f"its own environment class ({env.__name__}: several agents or turns)")
    return out


def toolsets(taskset, first) -> list[tuple]:
    """The taskset's toolsets (shared by its tasks) and its tasks' (one per rollout in verifiers), each with that
    scope."""
    shared = [(t, "taskset") for t in type(taskset).toolsets(taskset.config)]
    return shared + [(t, "task") for t in type(first).toolsets(first.config)]


def toolset_facts(toolset, scope: str) -> dict:
    """What decides whether one stdio server can stand for the toolset (trainctl.envs.verifiers refuses the rest)."""
    from verifiers.v1.mcp.server import ServerBase
    from verifiers.v1.runtimes import SubprocessConfig
    from verifiers.v1.state import State

    config, cls = toolset.config, type(toolset)
    runtime = getattr(config, "runtime", None)
    return {
        "class": cls.__name__,
        "server": toolset.server_name,
        "scope": scope,
        # per-rollout state: verifiers syncs it over an HTTP channel to the rollout around every call
        "state": toolset._state_cls is not State,
        # per-task set-up: verifiers calls it with the rollout's task in a task toolset's own server
        "setup_task": scope == "task" and cls.setup_task is not ServerBase.setup_task,
        "url": getattr(config, "url", None),
        "runtime": None if runtime is None or isinstance(runtime, SubprocessConfig) else type(runtime).__name__,
    }


def _is_async(fn) -> bool:
    return inspect.iscoroutinefunction(getattr(fn, "__wrapped__", fn)) or inspect.iscoroutinefunction(fn)


def messages(task) -> list[dict]:
    """The task's opening messages as chat dicts: its system prompt, then its prompt (text or messages)."""
    from verifiers.v1.types import content_text

    data = task.data
    out = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        out.append({"role": "user", "content": data.prompt})
    else:
        out += [{"role": m.role, "content": content_text(m.content)} for m in data.prompt or []]
    return out


def rows(taskset, limit: int) -> None:
    try:
        for task in taskset.take(limit):
            print(
                json.dumps(
                    {
                        "idx": task.data.idx,
                        "key": task.key,
                        "data": task.data.model_dump(mode="json"),
                        "messages": messages(task),
                    }
                ),
                flush=True,
            )
    except Exception as e:
        fail("load", e)


def trace_of(task, response: str, turns: list[dict] | None = None):
    """The trace a rollout records: the task's messages, then the model's reply (sampled); or, for a trajectory with
    tool calls, its `turns` (trainctl.runtime.trajectories: the prompt's messages, each assistant turn with its calls
    as {name, arguments}, each tool result), its assistant turns sampled."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask

    said = turns if turns else [*messages(task), {"role": "assistant", "content": response}]
    nodes = []
    for message in chat_messages(said):
        parent = len(nodes) - 1 if nodes else None
        nodes.append(MessageNode(parent=parent, message=message, sampled=message.role == "assistant"))
    trace = vf.Trace(
        task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=AgentInfo(config=vf.AgentConfig(), name="trainctl"),
        nodes=nodes,
    )
    trace.stop("agent_completed")
    trace.ok = True
    return trace


def chat_messages(turns: list[dict]) -> list:
    """Turns as verifiers' messages. A tool result answers the earliest call not yet answered (verl's tool loop
    appends the results of a turn's calls in their order); calls get ids in the order they were made."""
    import json

    from verifiers.v1.types import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage

    out, waiting, made = [], [], 0
    for t in turns:
        role, content = t.get("role"), t.get("content") or ""
        if role == "assistant":
            calls = []
            for call in t.get("tool_calls") or []:
                arguments = call.get("arguments")
                text = arguments if isinstance(arguments, str) else json.dumps(arguments)
                calls.append(ToolCall(id=f"call_{made}", name=str(call.get("name")), arguments=text))
                made += 1
            waiting += calls
            out.append(AssistantMessage(content=content, tool_calls=calls or None))
        elif role == "tool":
            call = waiting.pop(0) if waiting else None
            out.append(
                ToolMessage(tool_call_id=call.id if call else "", name=call.name if call else None, content=content)
            )
        elif role == "system":
            out.append(SystemMessage(content=content))
        else:
            out.append(UserMessage(content=content))
    return out


def rebuild(taskset, data: dict):
    """The task a row came from, from its wire data (TaskData is the task's data; its class the behaviour)."""
    cls = taskset.task_type()
    return cls(cls.data_type().model_validate(data), taskset.config.task)


async def score(taskset, data: dict, response: str, turns: list[dict] | None = None) -> dict:
    task = rebuild(taskset, data)
    trace = trace_of(task, response, turns)
    await task.score(trace)
    rewards = {name: (r.score if r is not None else None) for name, r in trace.rewards.items()}
    return {"score": trace.reward, "rewards": rewards, "metrics": dict(trace.metrics)}


async def serve(taskset) -> None:
    loop = asyncio.get_running_loop()
    lock = asyncio.Lock()
    pending: set[asyncio.Task] = set()

    async def answer(request: dict) -> None:
        try:
            said = await score(taskset, request["data"], request["response"], request.get("turns"))
            out = {"id": request["id"], **said}
        except Exception as e:
            out = {"id": request.get("id"), "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        async with lock:
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()

    lines: asyncio.Queue = asyncio.Queue()

    def read() -> None:  # stdin on a thread: works whatever stdin is (a pipe, a file)
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    print(json.dumps({"ready": True}), flush=True)
    while (line := await lines.get()) is not None:
        if line.strip():
            t = asyncio.create_task(answer(json.loads(line)))
            pending.add(t)
            t.add_done_callback(pending.discard)
    if pending:
        await asyncio.gather(*pending)


def unservable(d: dict) -> list[str]:
    """What the plan refused in a taskset's description (trainctl.envs.verifiers): never scored or served without it."""
    found = [f["name"] for f in d["rewards"] + d["metrics"] if f["runtime"]] + d["needs"]
    for t in d["toolsets"]:
        if t["state"] or t["setup_task"] or t["url"] or t["runtime"]:
            found.append(t["class"])
    return found


async def tools(taskset) -> None:
    """The taskset's toolsets' tools, named as verifiers' harness names them, on one MCP server over stdio."""
    from mcp.server.mcpserver import MCPServer

    first = next(iter(taskset.take(1)))
    server = MCPServer("verifiers")
    for toolset, _ in toolsets(taskset, first):
        await toolset.setup()
        toolset.register(Prefixed(server, toolset.server_name))
    await server.run_stdio_async()


class Prefixed:
    """An MCP server as one toolset registers on it: its tools' names prefixed with the toolset's server name (as
    verifiers' harness qualifies them: harnesses/utils/mcp.py, connect_mcp)."""

    def __init__(self, server, prefix: str):
        self.server, self.prefix = server, prefix

    def add_tool(self, fn, name: str | None = None, **kwargs):
        name = name or fn.__name__
        return self.server.add_tool(fn, name=f"{self.prefix}_{name}" if self.prefix else name, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.server, name)


def main(argv: list[str]) -> None:
    spec, command = json.loads(argv[0]), argv[1]
    # a stdio tool server starts with MCP's default environment (no PYTHONPATH): the taskset's folders from SPEC
    sys.path[1:1] = [p for p in spec.get("path") or [] if p not in sys.path]
    taskset = load(spec)
    if command == "inspect":
        print(json.dumps(describe(taskset)), flush=True)
    elif command == "prepare":
        print(json.dumps(describe(taskset)), flush=True)
        rows(taskset, int(argv[2]))
    elif command in ("serve", "tools"):
        refused = unservable(describe(taskset))
        if refused:  # the plan refused these: never score or serve without them
            fail("refused", f"needs what trainctl does not provide: {refused}")
        asyncio.run(serve(taskset) if command == "serve" else tools(taskset))
    else:
        fail("usage", f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
