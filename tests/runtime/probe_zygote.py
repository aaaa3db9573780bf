"""A zygote for tests/runtime/plugin_probe.py (and vllm_cpu_probe.py): imports what verl imports (torch, tensordict,
transformers, ray: six of a probe's eight seconds) but neither verl nor trainctl, then forks one child per request,
which sets the request's environment and runs the probe. verl, and with it trainctl's plugin (entry point group
verl.plugins), is first imported in the child, under that environment: what the probe reports is what a fresh verl
process does.

Protocol, one JSON line each way: {"env": {...}, "out": PATH, "script": PATH, "argv": [...]} -> {"exit": CODE}; the
child's stdout goes to PATH; script (plugin_probe.py unless given) runs with sys.argv [script, *argv].
"""

import atexit
import gc
import json
import os
import sys

gc.disable()  # while the libraries load, frozen after: as trainctl's fork server does (trainctl.import_cost)
import omegaconf  # noqa: E402, F401
import ray  # noqa: E402, F401
import tensordict  # noqa: E402, F401  (imports torch and torch._dynamo)
import transformers  # noqa: E402
import transformers.modeling_utils  # noqa: E402, F401

gc.freeze()
gc.enable()
atexit.register(gc.unfreeze)  # for the last collection, as trainctl.import_cost does (else triton's bindings warn)

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugin_probe.py")
PLUGIN_ENV = sys.argv[1].split(",")

assert not any(name == "verl" or name.startswith(("verl.", "trainctl")) for name in sys.modules), "imported too much"
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for name in PLUGIN_ENV:
                os.environ.pop(name, None)
            os.environ.update(request["env"])
            fd = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            sys.stdout = os.fdopen(1, "w", buffering=1)
            import runpy

            script = request.get("script", PROBE)
            sys.argv = [script, *request.get("argv", [])]
            runpy.run_path(script, run_name="__main__")
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)
