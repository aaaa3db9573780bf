"""Ray's setup_worker.py for a run whose workers are forked (trainctl.runtime.forkserver): the standard library only.

Ray starts every worker as `PYTHON setup_worker.py default_worker.py ARGS --serialized-runtime-env-context=JSON
--language=PYTHON`: a Python that imports Ray (0.46 s of CPU on the 2-core machine, a dozen times a run, mostly one
after another as verl creates its actors) only to set the runtime environment's variables and run `bash -c "exec
<py_executable> default_worker.py ARGS"`. The driver of a run trainctl's fork server serves points Ray here instead
(forkserver.run_driver: ray_constants.SETUP_WORKER_FILENAME). For a Python worker whose py_executable is the fork
server's client, with no command prefix or entrypoint of its own, this sets the variables as Ray's
RuntimeEnvContext.exec_worker does (ray._private.utils.update_envs) and becomes the client (in this process: no bash,
no second Python); anything else goes to Ray's own setup_worker.py, unchanged.
"""

import importlib.util
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "forkserver_client.py")
CONTEXT, LANGUAGE = "--serialized-runtime-env-context", "--language"


def split(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """Ray's two setup arguments (wherever the raylet put them) and the worker's own, in their order."""
    found: dict[str, str | None] = {CONTEXT: None, LANGUAGE: None}
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        name, eq, value = arg.partition("=")
        if name in found:
            found[name] = value if eq else next(args, None)
        else:
            rest.append(arg)
    return found[CONTEXT], found[LANGUAGE], rest


def update_envs(env_vars: dict[str, str]) -> None:
    """ray._private.utils.update_envs: ${X} expanded from this environment, and left out where X is unset."""
    for key, value in (env_vars or {}).items():
        os.environ[key] = re.sub(r"\$\{[A-Z0-9_]+\}", "", os.path.expandvars(value))


def forked_worker(context: dict, language: str | None, rest: list[str]) -> bool:
    """Whether the worker is one the fork server's client starts, as Ray would start it."""
    return (
        language == "PYTHON"
        and not context.get("command_prefix")
        and not context.get("override_worker_entrypoint")
        and context.get("py_executable") == f"{sys.executable} -S {CLIENT}"
        and bool(rest)
        and not rest[0].startswith("-")  # Ray's worker script first, no interpreter flags before it
    )


def _ray_setup_worker() -> str:
    spec = importlib.util.find_spec("ray")  # found, not imported
    return os.path.join(os.path.dirname(spec.origin), "_private", "workers", "setup_worker.py")


def main(argv: list[str]) -> None:
    context_json, language, rest = split(argv)
    try:
        context = json.loads(context_json or "{}")
    except ValueError:
        context = None
    if not isinstance(context, dict) or not forked_worker(context, language, rest):
        os.execv(sys.executable, [sys.executable, _ray_setup_worker(), *argv])
    update_envs(context.get("env_vars") or {})
    sys.path.insert(0, HERE)
    import forkserver_client

    forkserver_client.main(rest)


if __name__ == "__main__":
    main(sys.argv[1:])
