"""Ray workers forked from a process that has imported what they import, for a CPU run's own Ray (issue 54).

A GRPO run on the CPU starts nine Ray workers (verl's TaskRunner, the training worker, the rollout server, the
agent-loop, reward, load-balancer and TransferQueue workers), one after another, and each was a fresh Python that
imported torch, transformers and verl: 6-9 s of CPU each, most of a minute before the first step. Ray lets a run
choose the program that starts its workers (runtime_env `py_executable`: verl's ray_kwargs.ray_init.runtime_env.
py_executable). A CPU run's is trainctl.runtime.forkserver_client: it asks this server, started beside verl's driver,
for a worker forked from a process that imported those modules once; the fork then runs Ray's default_worker.py with
the worker's own arguments, environment, working directory and standard streams, as a fresh one would.

    python -m trainctl.runtime.forkserver -- python -m verl.trainer.main_ppo ...

forks the server and becomes the driver (exec: the driver keeps the PID trainctl started). The server dies with the
driver (PR_SET_PDEATHSIG); the workers it forked end with Ray's raylet, as Ray's own do.

The server loads in two stages:
1. the libraries (torch, tensordict, transformers, peft, datasets, ...), and never Ray: Ray's C++ config reads a
   worker's job id and raylet PID from the environment once, when Ray is imported, and neither exists before Ray has
   started. Those the driver imports too are imported by the driver before it forks the server, which inherits them;
   the others by the server at once, while the driver imports verl and starts Ray;
2. as soon as the driver's raylet is up (ray.init() takes seconds more): Ray, verl (with trainctl's plugin) and the
   modules of verl's workers (verl's vLLM server's too, in a run that uses vLLM), imported under the environment the
   workers will have: the driver's, with that raylet's PID and the job id of the cluster's first driver (Ray's own
   numbering). A worker that asks first waits for them
   (the server's imports serve every worker, a worker's own only itself); one that asks before the server has seen a
   raylet is forked without them and imports them itself, and the server then imports them under its environment.
   Later workers start with nothing left to import.
A worker whose environment differs from the server's in what those imports read (RUN_ENV: its job, raylet, Python
path, trainctl's plugin settings) is declined, and so is any worker when the server is not there (a raw verl command
with the same config): the client then starts Python as Ray would have.

Wire format (trainctl.runtime.forkserver_client speaks it): the client sends a 4-byte length and a JSON request
{argv, env, cwd, sigmask} with its stdin, stdout and stderr attached (SCM_RIGHTS); the server answers a 4-byte pid (0:
declined, start it yourself), then the worker's exit code when it ends.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import socket
import struct
import sys
import time
import uuid

SERVER_VAR = "TRAINCTL_FORKSERVER"

# the client, run by Ray as `<python> -S <this file> default_worker.py ARGS`: standard library only
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forkserver_client.py")
# Ray's setup_worker.py for the driver's workers (trainctl.runtime.forkserver_setup: standard library only too)
SETUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forkserver_setup.py")
# seconds the driver waits after its module returns, as ray.shutdown() does at exit, before ending Ray's processes
LAST_LINES_S = 0.5

# stage 1: what a run's workers import, but Ray; the slowest first (seconds of CPU on the 2-core machine, each alone).
# The driver's own imports (verl.trainer.main_ppo's: 5.9 s of CPU) include DRIVER_LIBRARIES: it imports them before it
# forks the server, which inherits them, rather than the server importing them again beside it (4-5 s of CPU a run,
# the suite's and any busy machine's); the server imports the rest
DRIVER_LIBRARIES = (
    "torch",  # 1.3
    "tensordict",  # 2.6 with torch: torch._dynamo
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "transformers.generation.utils",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "datasets",  # verl's RL dataset
    "pandas",
    "pyarrow.parquet",
    "accelerate",
    "omegaconf",
    "hydra",
    "codetiming",
    "zmq",  # TransferQueue
    "msgspec",
)
LIBRARIES = (
    *DRIVER_LIBRARIES,
    "peft",  # verl.utils.fsdp_utils
    "torch.distributed.checkpoint",
    "torchdata.stateful_dataloader",
    "trl",
    "fastapi",  # verl's rollout servers
    "uvicorn",
    "aiohttp",
    "networkx",
)

# stage 2: Ray, verl and the modules that define verl's workers (the actors of a run)
WORKER_MODULES = (
    "ray",
    "verl",
    "verl.single_controller.ray.base",
    "verl.workers.engine_workers",
    "verl.workers.rollout.router",
    "verl.experimental.agent_loop.agent_loop",
    "verl.experimental.reward_loop.reward_loop",
    "verl.trainer.ppo.v1.trainer_base",
    "verl.trainer.ppo.v1.agent_loop_tq",
    "verl.trainer.main_ppo",
    "transfer_queue",
    "trainctl.runtime.hf_rollout",
)
# and in a run that uses vLLM (trainctl.launch.runner sets TRAINCTL_NO_VLLM=1 in one that does not): verl's
# vLLM server and the part of vLLM it imports, which the rollout server, the agent-loop workers, the request load
# balancer, the training worker and the TaskRunner each imported for themselves (2.4 s of CPU each on 2 cores)
VLLM_WORKER_MODULES = ("verl.workers.rollout.vllm_rollout.vllm_async_server",)
# and in a run with MCP servers (TRAINCTL_MCP_SERVERS=1, trainctl.launch.tools): the MCP SDK, which each agent-loop
# worker's bridge imported as it opened its first connection (~0.6 s of CPU each on a quiet machine: its pydantic
# types; the agent recipe runs two workers)
MCP_WORKER_MODULES = ("mcp", "mcp.client.stdio", "trainctl.runtime.mcp_bridge")

# what the server's imports read from the environment: a worker whose values differ gets a fresh Python
RUN_ENV = (
    "RAY_JOB_ID",  # read once by Ray's C++ config (ray_internal_flag_def.h), as Ray is imported
    "RAY_RAYLET_PID",  # the same
    "PYTHONPATH",
    "PYTHONHOME",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS",  # read by OpenMP as torch loads it
    "VERL_PLATFORM",  # trainctl's verl plugin (trainctl.runtime.verl_cpu_plugin), run as verl is imported
    "TRAINCTL_LAUNCHED",
    "TRAINCTL_REWARD_KIND",
    "TRAINCTL_TOOL_CALLS",
    "TRAINCTL_ENV",
    "TRAINCTL_OFFPOLICY",
    "TRAINCTL_NO_VLLM",
    "TRAINCTL_NO_TRL",
    "VERL_USE_EXTERNAL_MODULES",
    "VERL_USE_EXTERNAL_PLUGINS",
)

# seconds between checks for ended workers (and, before stage 2, for the raylet) while no request comes
_POLL_S = 0.1
# the job id of a new cluster's first driver (Ray numbers jobs from 1, in 4 little-endian bytes): the run's driver
FIRST_JOB_ID = "01000000"


def py_executable(python: str = sys.executable) -> str:
    """Ray's runtime_env py_executable for a run whose workers may be forked (a command prefix: Ray appends
    default_worker.py and its arguments)."""
    return f"{python} -S {CLIENT}"


def _log(message: str) -> None:
    print(f"trainctl forkserver: {message}", file=sys.stderr, flush=True)


def _die_with_parent() -> None:
    """Ask Linux to end this process when the driver (its parent) ends, however it ends."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the driver ended before the request above
        os._exit(0)


def _import(names: tuple[str, ...]) -> list[str]:
    """Import what can be imported, with the collector paused (trainctl.import_cost.collector_paused: the forks then
    leave the imports' objects alone); the names that failed (a worker imports those itself, and fails as it
    would)."""
    from trainctl.import_cost import collector_paused

    failed = []
    with collector_paused():
        for name in names:
            if name.partition(".")[0] in sys.modules and sys.modules[name.partition(".")[0]] is None:
                continue  # hidden from the run's processes (trainctl.import_cost.skip_for_run): never imported
            try:
                importlib.import_module(name)
            except Exception as e:  # an optional library missing, or broken: not the server's to report
                failed.append(f"{name} ({type(e).__name__}: {e})")
    return failed


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    msg, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(msg) < 4:
        raise ConnectionError("no request")
    (size,) = struct.unpack("!I", msg[:4])
    body = msg[4:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("request cut short")
        body += chunk
    return json.loads(body), fds


class Server:
    """Forks Ray workers on request; see the module's docstring."""

    def __init__(
        self,
        listener: socket.socket,
        libraries: tuple[str, ...] = LIBRARIES,
        workers: tuple[str, ...] = WORKER_MODULES,
        vllm_workers: tuple[str, ...] = VLLM_WORKER_MODULES,
    ):
        self.listener = listener
        self.libraries, self.workers, self.vllm_workers = libraries, workers, vllm_workers
        self.waiting: dict[int, socket.socket] = {}  # worker pid -> its client's connection, told when it ends
        # the environment the imports read (RUN_ENV's values); Ray's entries are fixed once Ray is imported
        self.run_env = {k: os.environ.get(k) for k in RUN_ENV if not k.startswith("RAY_")}
        self.loaded = False  # stage 2 done (or given up)

    def serve(self) -> None:
        from trainctl.import_cost import skip_for_run

        skip_for_run()  # what the run's processes leave out (verl's plugin does the same in each)
        failed = _import(self.libraries)
        if failed:
            _log("not preloaded: " + "; ".join(failed))
        while True:
            ready, _, _ = select.select([self.listener], [], [], _POLL_S)
            self._reap()
            if not self.loaded and (raylet := _raylet_pid()):
                # before any worker: the first then needs no imports of its own either
                self._load_workers({**os.environ, "RAY_RAYLET_PID": str(raylet), "RAY_JOB_ID": FIRST_JOB_ID})
            if ready:
                self._answer()

    def _answer(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            conn.settimeout(10.0)  # a client that sends nothing must not hold up the others
            request, fds = _read_request(conn)
            conn.settimeout(None)
            env = request["env"]
            differs = [k for k, v in self.run_env.items() if env.get(k) != v]
            if len(fds) != 3 or differs:
                _log(f"declined a worker ({', '.join(differs) or 'no streams'} differs): it starts as a fresh Python")
                conn.sendall(struct.pack("!i", 0))
                conn.close()
                return
            pid = self._fork(request, fds, conn)
            conn.sendall(struct.pack("!i", pid))
            self.waiting[pid] = conn
        except (OSError, ValueError, KeyError, ConnectionError) as e:
            _log(f"a request failed: {e}")
            with contextlib.suppress(OSError):
                conn.close()
            return
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if not self.loaded:
            self._load_workers(env)

    def _load_workers(self, env: dict[str, str]) -> None:
        """Stage 2, under the environment of the run's workers: Ray and verl, whose imports read it."""
        self.loaded = True
        os.environ.clear()
        os.environ.update(env)
        self.run_env.update({k: env.get(k) for k in RUN_ENV})
        started = time.monotonic()
        names = stage_two(env, self.workers, self.vllm_workers)
        with _ray_ids_from_urandom():
            failed = _import(names)
        if failed:
            _log("not preloaded: " + "; ".join(failed))
        if "ray._raylet" in sys.modules and not _ray_ids_differ_across_forks():
            self.run_env["RAY_JOB_ID"] = "(Ray's ID generator was seeded before forking)"  # declines every worker
            _log("Ray's ID generator was seeded in the server: its workers would share IDs; each starts fresh")
        among = [
            what
            for what, modules in (("vLLM's", self.vllm_workers), ("the MCP SDK's", MCP_WORKER_MODULES))
            if modules and set(modules) <= set(names)
        ]
        listed = f" ({' and '.join(among)} among them)" if among else ""
        _log(f"the workers' modules preloaded in {time.monotonic() - started:.1f}s{listed}")

    def _fork(self, request: dict, fds: list[int], conn: socket.socket) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()  # and what the server made since: the fork's collections leave that alone too
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            self.listener.close()
            conn.close()
            for other in self.waiting.values():
                other.close()
            _become_worker(request, fds)
            import runpy

            runpy.run_path(request["argv"][0], run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.waiting.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
                conn.close()


@contextlib.contextmanager
def _ray_ids_from_urandom():
    """Ray's random IDs drawn from os.urandom while the server imports: its own generator (absl's, in C++) is seeded
    once a process from a pool that forks copy, so workers forked after the server drew one would draw the same IDs
    (two agent-loop workers' calls then collide in the actor they both call: "Check failed: erased == 1"). Each
    `@ray.remote` class defined by a module draws one (ray.actor: ActorClassID.from_random())."""
    import ray.actor

    real = ray.actor.ActorClassID

    class ActorClassID:
        @staticmethod
        def from_random():
            return real(os.urandom(real.size()))

    ray.actor.ActorClassID = ActorClassID
    try:
        yield
    finally:
        ray.actor.ActorClassID = real


def _ray_ids_differ_across_forks() -> bool:
    """Whether two forks of this process draw different Ray IDs (they do unless this process has drawn one)."""
    from ray._raylet import ObjectID

    drawn = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, ObjectID.from_random().binary())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        drawn.append(os.read(read, 64))
        os.close(read)
    return drawn[0] != drawn[1]


def _raylet_pid() -> int | None:
    """The raylet the driver (this server's parent) has started, once it has."""
    import psutil

    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(os.getppid()).children():
            if child.name() == "raylet":
                return child.pid
    return None


def _become_worker(request: dict, fds: list[int]) -> None:
    """In the fork: the worker's streams, environment, directory and arguments, and what a fresh process would have
    fresh (random state, Ray's config)."""
    import random
    import signal

    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [signal.Signals(s) for s in request.get("sigmask", [])])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    if "ray._raylet" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")  # Ray's config entries from this worker's environment (its internal flags match)
        AuthenticationTokenLoader.instance().reset_cache()
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        _follow_omp_threads(sys.modules["torch"])
    argv = request["argv"]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))


def _follow_omp_threads(torch) -> None:
    """torch's thread count as a fresh worker's: torch fixed it as the server imported it, and reads no later
    OMP_NUM_THREADS, which Ray sets for each worker before its first task (one thread for an actor with no CPUs of its
    own) where the environment has none (ray._private.utils.set_omp_num_threads_if_unset)."""
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
        return
    import ray._private.utils as ray_utils

    set_if_unset = ray_utils.set_omp_num_threads_if_unset

    def set_omp_num_threads_if_unset() -> bool:
        changed = set_if_unset()
        if changed:
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        return changed

    ray_utils.set_omp_num_threads_if_unset = set_omp_num_threads_if_unset


def preload_driver(libraries: tuple[str, ...] = DRIVER_LIBRARIES) -> None:
    """Import, in the driver before it forks the server, the libraries both import (see DRIVER_LIBRARIES); never Ray
    (the server imports it once the raylet is up)."""
    from trainctl.import_cost import skip_for_run

    skip_for_run()  # as the server and verl's plugin do, before any of them is imported
    failed = _import(libraries)  # the driver imports a failed one again in its own place, and fails there as it would
    if failed:
        _log("not preloaded in the driver: " + "; ".join(failed))
    assert "ray" not in sys.modules, "the driver's preload imported Ray: the server must import it after the raylet"


def stage_two(env: dict[str, str], workers: tuple[str, ...], vllm_workers: tuple[str, ...]) -> tuple[str, ...]:
    """The modules of stage 2 for workers with environment `env`: vLLM's too unless the run uses no vLLM, the MCP
    SDK's where it has MCP servers."""
    names = workers if env.get("TRAINCTL_NO_VLLM") == "1" else (*workers, *vllm_workers)
    return (*names, *MCP_WORKER_MODULES) if env.get("TRAINCTL_MCP_SERVERS") == "1" else names


def start(
    libraries: tuple[str, ...] = LIBRARIES,
    workers: tuple[str, ...] = WORKER_MODULES,
    vllm_workers: tuple[str, ...] = VLLM_WORKER_MODULES,
) -> str:
    """Fork the server, which ends with this process; its name, set in this process's environment (TRAINCTL_FORKSERVER)
    for the processes it starts (the raylet, and Ray's clients through it)."""
    name = f"trainctl-forkserver-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)  # abstract: nothing on disk
    listener.listen(64)
    os.environ[SERVER_VAR] = name
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
        # in this process's group, as Ray's raylet and workers are: what stops the run's group stops it too
        _die_with_parent()
        try:
            Server(listener, libraries, workers, vllm_workers).serve()
        finally:
            os._exit(0)
    listener.close()
    return name


def _python_module(argv: list[str]) -> str | None:
    """The module of `PYTHON -m MODULE ARGS...` where PYTHON is this interpreter; None for any other command."""
    if len(argv) < 3 or argv[1] != "-m":
        return None
    with contextlib.suppress(OSError):
        if os.path.samefile(argv[0], sys.executable):
            return argv[2]
    return None


def run_driver(module: str, args: list[str]) -> None:
    """Run the driver's module as `python -m` would, in this process (the PID trainctl started), then end Ray's
    processes together and exit with the module's code.

    In this process, before the driver starts Ray: Ray starts its workers through trainctl.runtime.forkserver_setup
    rather than its setup_worker.py (see there), and its head without the autoscaler (lean_head). And at the end:
    Ray's own shutdown at exit (ray.shutdown) stops its processes one after another, up to a second each, and the
    interpreter then unloads torch: 2-3 s after the last step of a tiny run, where terminating them all at once takes
    the slowest one's time."""
    import ray._private.ray_constants as ray_constants  # Ray is the driver's first import anyway

    # an absolute name: ray._private.node joins it to Ray's workers folder, which keeps an absolute path whole
    ray_constants.SETUP_WORKER_FILENAME = SETUP
    lean_head()
    # its imports with the collector off and frozen after (_import); run_module then runs it as __main__ with them
    # loaded (a failed one fails again there, in its place)
    _import((module,))
    import runpy

    sys.argv = [module, *args]
    code: int | str | None = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:
        _end_descendants()
        import signal

        signal.signal(signal.SIGINT, signal.SIG_DFL)  # ends as Python does on an uncaught interrupt
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    # Ray's own pause before its shutdown, for the workers' last lines to reach this process's output
    time.sleep(LAST_LINES_S)
    _end_descendants()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(0 if code is None else code & 0xFF)


def lean_head() -> None:
    """The run's own Ray (ray.init() in this driver, a cluster of one node that lives as long as the run) without the
    autoscaler's monitor: a Python importing Ray's autoscaler beside the driver's own imports (~0.6 s of CPU a run),
    with nothing to scale. The dashboard process stays even with hardware.ray_dashboard=false (Ray then loads only its
    usage-stats module): without it the raylet's dashboard agent asks Ray's GCS for its address every second and logs
    an error each time."""
    import ray._private.parameter as ray_parameter

    params_init = ray_parameter.RayParams.__init__

    def init(self, *args, **kwargs):
        params_init(self, *args, **kwargs)
        self.no_monitor = True

    ray_parameter.RayParams.__init__ = init


def _end_descendants(grace_s: float = 0.5) -> None:
    """SIGTERM to every process this one started and theirs (Ray's, the fork server and its workers), together; SIGKILL
    to those still there after grace_s (Ray's GCS and raylet take seconds to end gracefully, with nothing left to
    keep: the run has ended)."""
    import psutil

    from trainctl.launchers.tree import wait_exited

    procs = psutil.Process().children(recursive=True)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    alive = wait_exited(procs, grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    wait_exited(alive, 1.0)


def main(argv: list[str]) -> None:
    """`python -m trainctl.runtime.forkserver -- COMMAND...`: start the server, then become COMMAND (a driver run as
    `python -m MODULE` with this Python runs in this process: run_driver)."""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise SystemExit("usage: python -m trainctl.runtime.forkserver -- COMMAND [ARGS...]")
    module = _python_module(argv)
    if module is not None:
        preload_driver()
    start()
    if module is None:
        os.execvp(argv[0], argv)
    run_driver(module, argv[3:])


if __name__ == "__main__":
    main(sys.argv[1:])
