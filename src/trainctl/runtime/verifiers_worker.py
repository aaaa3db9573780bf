"""env=verifiers' worker: the program trainctl runs in verifiers' own interpreter (trainctl.envs.verifiers), never in
trainctl's. It imports the standard library and verifiers only: verifiers 0.4.0 pins mcp==2.0.0 and openai<3, which
cannot share an interpreter with trainctl (mcp>=2.3).

    python verifiers_worker.py SPEC inspect    one JSON object: the taskset's rewards, metrics and what it needs
    python verifiers_worker.py SPEC prepare N  that object, then N tasks (or all of a shorter taskset), a line each
    python verifiers_worker.py SPEC serve      scores responses: a JSON request a line in, a JSON answer a line out

SPEC is JSON: {"id": the taskset's module, "args": its config's fields}. A failure before the command's work prints
{"error": ..., "stage": "import" | "config" | "load"} and exits 2. `serve` answers {"id", "score", "rewards",
"metrics"} (or {"id", "error"}) for each request {"id", "data": a task's wire data, "response": the model's text},
scoring several at once, in the order they finish; it ends when its stdin closes.
"""

from __future__ import annotations

import asyncio
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
    from verifiers.v1.utils import loaders

    try:
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
    out["toolsets"] = [type(t).__name__ for t in (*type(taskset).toolsets(taskset.config), *cls.toolsets(first.config))]
    if cls.NEEDS_CONTAINER:
        out["needs"].append("a container (NEEDS_CONTAINER)")
    for hook in ("setup", "finalize", "stage_verifier"):
        if getattr(cls, hook) is not getattr(Task, hook):
            out["needs"].append(f"a runtime ({cls.__name__}.{hook})")
    env = loaders.environment_class(taskset.config.id)
    if env.__name__ != "SingleAgentEnv":
        out["needs"].append(f"its own environment class ({env.__name__}: several agents or turns)")
    return out


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


def trace_of(task, response: str):
    """A trace of one turn: the task's messages, then the model's reply (sampled), as a rollout records it."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask
    from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

    kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
    nodes = []
    for m in messages(task):
        nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None, message=kinds[m["role"]](**m)))
    nodes.append(
        MessageNode(parent=len(nodes) - 1 if nodes else None, message=AssistantMessage(content=response), sampled=True)
    )
    trace = vf.Trace(
        task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=AgentInfo(config=vf.AgentConfig(), name="trainctl"),
        nodes=nodes,
    )
    trace.stop("agent_completed")
    trace.ok = True
    return trace


def rebuild(taskset, data: dict):
    """The task a row came from, from its wire data (TaskData is the task's data; its class the behaviour)."""
    cls = taskset.task_type()
    return cls(cls.data_type().model_validate(data), taskset.config.task)


async def score(taskset, data: dict, response: str) -> dict:
    task = rebuild(taskset, data)
    trace = trace_of(task, response)
    await task.score(trace)
    rewards = {name: (r.score if r is not None else None) for name, r in trace.rewards.items()}
    return {"score": trace.reward, "rewards": rewards, "metrics": dict(trace.metrics)}


async def serve(taskset) -> None:
    loop = asyncio.get_running_loop()
    lock = asyncio.Lock()
    pending: set[asyncio.Task] = set()

    async def answer(request: dict) -> None:
        try:
            out = {"id": request["id"], **await score(taskset, request["data"], request["response"])}
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


def main(argv: list[str]) -> None:
    spec, command = json.loads(argv[0]), argv[1]
    taskset = load(spec)
    if command == "inspect":
        print(json.dumps(describe(taskset)), flush=True)
    elif command == "prepare":
        print(json.dumps(describe(taskset)), flush=True)
        rows(taskset, int(argv[2]))
    elif command == "serve":
        d = describe(taskset)
        skipped = [f["name"] for f in d["rewards"] + d["metrics"] if f["runtime"]]
        if skipped or d["toolsets"] or d["needs"]:  # the plan refused these: never score without them
            fail("refused", f"needs what trainctl does not provide: {skipped + d['toolsets'] + d['needs']}")
        asyncio.run(serve(taskset))
    else:
        fail("usage", f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
