"""Fixtures: every path trainctl touches points into a temporary folder; the tiny model and arith data are real."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.shared import once, shared_dir
from trainctl.import_cost import pause_collector_for_heavy_loads

# pytest keeps the test modules it rewrites (for its assertion messages) in __pycache__ only when bytecode may be
# written: with PYTHONDONTWRITEBYTECODE set (this machine and CI set it), each xdist worker rewrote all ~240 test
# modules on every run, about 4 s of CPU each before the first test. Set for this process only (the test modules
# after this file); the processes tests start keep the environment's setting.
sys.dont_write_bytecode = False

# One OpenMP thread per process, for this process and every trainer, Ray worker and server the tests start. Two
# xdist workers each running a training (of several processes) share two cores: with torch's default of one thread
# per core, the threads outnumber the cores and OpenMP's spin-waiting burns what is left. Measured on the 2-core
# machine: the suite in 10.3 min of pytest instead of 11.5-12.6, with 11.4 CPU-minutes of user time instead of
# 13.6-15.5. Set here, before pytest-xdist starts its workers, so that they and all they start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Each worker loads torch, transformers, verl, Ray, vLLM, ... as its tests first import them (in-process CLI calls,
# fixtures): with Python's collector paused, as the CLI does (trainctl.import_cost).
pause_collector_for_heavy_loads()

# real training runs shared by the session (sft_run, grpo_run, dpo_run, agent_run, ...), and a real pretrained model
# (smollm2: SmolLM2-135M-Instruct imported from its GGUF file)
pytest_plugins = ["tests.real_runs", "tests.real_model"]

# pytest-xdist hands whole files to its workers in collection order (pyproject's --no-loadscope-reorder keeps ours;
# xdist's default puts files with the most tests first, which left the 1-test training files for the end): the files
# that train for real go first, the longest first (`pytest --durations` on this machine), each session run's maker
# before the files that only read it, so that no worker waits for a run the other is making. Then files that mostly
# wait (for servers, runs, timeouts: their processes use less than a core) alternate with files that compute in the
# worker, so that while one worker waits the other computes: on 2 cores the suite is CPU-bound, and with the waiting
# files together (as they were) both cores idled for a quarter of a minute-long stretch. The quick files fill in at
# the end, where their small size lets both workers finish together.
HEAVY_FIRST = (
    # the longest session run (10 agent steps on vLLM's CPU build, from tiny-tools): one worker's first
    "tests/launch/test_agent_grpo.py",
    "tests/launch/test_faults.py",  # (slow suite) the longest test there: a GRPO run in four attempts
    "tests/eval/test_eval.py",  # the GRPO run: the other worker's first
    "tests/launch/test_reward.py",  # (slow suite) the reward-model and judge runs
    "tests/ckpt/test_merge.py",  # the DPO, DPO LoRA, SFT and two-process SFT runs
    "tests/launch/test_ray_jobs.py",
    "tests/test_readme_tour.py",
    "tests/launch/test_lora.py",
    "tests/launch/test_run_record.py",  # the wandb run
    "tests/launch/test_sft.py",  # the failing run
    # issue 45: SFT across two Slurm nodes (compared with sft-ws2), a cluster that cannot host a run
    "tests/launchers/test_ray_cluster.py",
    "tests/launchers/test_slurm.py",
    # issue 43: eval, model serve and chat on vLLM's CPU build (the SFT run's)
    "tests/inference/test_vllm_engine.py",
    # issue 44: the session's import of SmolLM2-135M from its GGUF file (~40 s of CPU), then an eval of it
    "tests/models/test_importer.py",
    # issue 55: GRPO on a reasoning-gym mix for 8 steps, resumed to a 9th, then eval (~100 s); issue 56: the overlap
    # learning run and a split run (~90 s). Left to the end (as they were), either was a worker's last minute and a
    # half while the other had finished
    "tests/envs/test_reasoning_gym.py",
    "tests/launch/test_offpolicy.py",
    "tests/envs/",  # verifiers' own interpreter: ~60 s, its work in subprocesses
    # waiting, computing, waiting, ... (seconds on this machine: wall / CPU of the worker and what it started)
    "tests/runs/test_status.py",  # 36 / 23
    "tests/config/test_compose.py",  # 47 / 46
    "tests/runtime/test_mcp_bridge.py",  # 52 / 35
    "tests/checks/test_tools.py",  # 31 / 30
    "tests/launch/test_interrupt.py",
    "tests/checks/test_broken_configs.py",  # 18 / 18
    "tests/mcp/",  # 13 / 9
    "tests/checks/test_lora.py",  # 17 / 17
    "tests/runtime/test_verl_patches.py",  # 21 / 21, in processes that mostly wait
    "tests/models/test_catalog.py",  # 13 / 13
    "tests/launch/test_ppo.py",  # reads the GRPO and agent runs
    "tests/serve/test_api.py",  # 19 / 22: a real job through the API
    "tests/checks/test_reward.py",  # 14 / 13
    "tests/serve/test_browser.py",  # 8 / 6: a real job from the launch form
    "tests/serve/test_app.py",  # schemathesis twice (25 + 27 s), jobs started through the API: waits on servers
    "tests/serve/test_events.py",  # 300 SSE clients in the worker against a server: 29 s, computes
    "tests/serve/test_jobs.py",  # kill -9 of the server mid-merge: ~20 s, waits
    "tests/checks/test_memory.py",  # 10 / 10
    "tests/launch/",  # test_learning reads every session run, test_vllm_rollout the agent run
    "tests/cli/test_main.py",  # 10 / 9
    "tests/runtime/test_judge.py",  # 15 / 10
    "tests/config/test_schema.py",  # 7 / 7
    "tests/inference/",  # 28 / 31
    "tests/backends/rewards/test_model.py",  # 7 / 7
    "tests/launchers/",  # 15 / 4
    "tests/cli/test_train.py",  # 6 / 6
    "tests/runtime/test_tool_agent_loop.py",  # 16 / 16, in processes that mostly wait
    "tests/cli/test_config.py",  # 6 / 6
    "tests/models/test_pull.py",  # 15 / 7
    "tests/checks/",  # 8 / 8
    "tests/cli/test_tools.py",  # 13 / 12
    "tests/data/test_rewards.py",  # 5 / 5
    "tests/toolenv/",  # 12 / 10
    "tests/golden/",  # 5 / 5
    "tests/eval/",  # 25 / 20
    "tests/data/test_gen_tasks.py",  # 11 / 10
    "tests/runtime/",  # 30 / 20
    "tests/backends/",  # 12 / 12
    "tests/serve/test_security.py",  # 5 / 3
    "tests/ckpt/",
    "tests/runs/",
)


# session fixtures that take minutes (the agent run)
LONG_SETUP = {"agent_run"}


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        return next((i for i, prefix in enumerate(HEAVY_FIRST) if item.nodeid.startswith(prefix)), len(HEAVY_FIRST))

    items.sort(key=rank)  # stable: the order within a rank is pytest's
    for item in items:
        if LONG_SETUP.intersection(getattr(item, "fixturenames", ())):
            # the test that makes the session's agent run, or waits for it on another worker, spends 5-8 minutes
            # in setup on this machine: the suite's timeout (pyproject: 600 s, a hang guard) would cut it
            item.add_marker(pytest.mark.timeout(1800))


# Every 50 tests a worker collects its garbage and freezes what survives (gc.freeze: moved out of the collector's
# generations). A worker holds torch, verl, transformers and Ray once a test has imported them, and the compositions'
# OmegaConf nodes set off full collections that walked all of it: 27 s of the two workers' CPU in a suite. Frozen,
# they are skipped; objects made after a freeze are collected as before.
FREEZE_EVERY = 50
_tests_done = [0]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    _tests_done[0] += 1
    if _tests_done[0] % FREEZE_EVERY == 0:
        gc.collect()
        gc.freeze()


# Credentials and cluster addresses from the developer's shell must not leak into tests.
_SCRUBBED = ("WANDB_API_KEY", "RAY_ADDRESS", "HF_TOKEN", "HF_ENDPOINT", "TRAINCTL_DEBUG", "MLFLOW_TRACKING_URI")


# A suite started in the background from a script (`pytest ... &`: no job control) starts with Ctrl-C ignored, and
# the processes tests start inherit that: a served model then exits 0 rather than 130 on SIGINT and an MCP bridge
# sleeps through it. Tests that stop a child with Ctrl-C test trainctl, not the shell that started pytest.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def ctrl_c_as_found(request):
    """Each test leaves Ctrl-C as it found it in this worker (its handler, and SIGINT unblocked): children inherit
    both, so a test that changed them would break every later test that stops a child with SIGINT."""
    handler = signal.getsignal(signal.SIGINT)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    now = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
    if now != (handler, blocked):
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        pytest.fail(f"{request.node.nodeid} changed SIGINT: {now} (was {(handler, blocked)})")


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("session")


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """The cache folder of every test that does not choose its own: one for the session, shared by the pytest-xdist
    workers as users' processes share theirs (its files are written to a temporary name and renamed). A composition,
    a verdict or a backend's defaults one worker made, the other reads: 52 of the two workers' ~360 compositions
    were the same."""
    return shared_dir(tmp_path_factory) / "cache"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch, session_cache) -> Path:
    """TRAINCTL_HOME and the working directory in tmp; the cache is shared by the session."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("TRAINCTL_HOME", str(home))
    monkeypatch.setenv("TRAINCTL_CACHE", str(session_cache))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in _SCRUBBED:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(work)
    return home


# The tiny models and the arith data are made once for the session, shared by every pytest-xdist worker (once()):
# the shared runs train from them, and tests compare those runs' weights with them.
@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from trainctl.models.tiny import init_tiny

    return once(tmp_path_factory, "tiny-model", lambda d: init_tiny(d / "tiny"))


@pytest.fixture(scope="session")
def tiny_reward_model_dir(tmp_path_factory) -> Path:
    """A tiny reward model: the tiny model's tokenizer and shape, random weights, a one-label classification head."""
    from trainctl.models.tiny import init_tiny

    return once(tmp_path_factory, "tiny-rm-model", lambda d: init_tiny(d / "tiny-rm", name="tiny-rm"))


@pytest.fixture(scope="session")
def tiny_tools_dir(tmp_path_factory) -> Path:
    """`trainctl model init tiny-tools` (the tiny model warm-started on calculator calls: the warm start trainctl
    ships, copied), once per session: the agent run trains it."""
    from trainctl.models.tiny import init_tiny

    return once(tmp_path_factory, "tiny-tools", lambda d: init_tiny(d / "tiny-tools", name="tiny-tools"))


@pytest.fixture(scope="session")
def arith_data_dir(tmp_path_factory) -> Path:
    from trainctl.data.arith import rows
    from trainctl.data.writer import write_rows

    def make(d: Path) -> Path:
        for fmt in ("rl", "sft", "dpo", "kto"):
            for split, n in (("train", 512), ("test", 64)):
                write_rows(d / fmt / f"{split}.parquet", rows(fmt, split, n, 0))
        return d

    return once(tmp_path_factory, "arith-data", make)


@pytest.fixture
def tiny_model(isolated, tiny_model_dir) -> Path:
    """The tiny model where model=tiny looks for it (a copy: tests may write next to it)."""
    target = isolated / "models" / "tiny"
    shutil.copytree(tiny_model_dir, target)
    return target


@pytest.fixture
def tiny_tools(isolated, tiny_tools_dir) -> Path:
    """The tiny tool-calling model where model=tiny-tools looks for it."""
    target = isolated / "models" / "tiny-tools"
    shutil.copytree(tiny_tools_dir, target)
    return target


@pytest.fixture
def arith_data(isolated, arith_data_dir) -> Path:
    target = isolated / "data" / "arith"
    shutil.copytree(arith_data_dir, target)
    return target


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def invoke(*args: str) -> Result:
    """Run the real CLI entry point in-process (main(), with its error boundary) and capture what it prints."""
    from trainctl.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return invoke


@pytest.fixture
def no_processes(monkeypatch):
    """Fail if anything starts a process or a Ray cluster."""
    import subprocess

    started: list[str] = []

    def refuse(*args, **kwargs):
        started.append(repr(args[:2]))
        raise AssertionError(f"a process was started: {args[:2]}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(os, "posix_spawn", refuse, raising=False)
    yield started
    import sys

    if "ray" in sys.modules:
        import ray

        assert not ray.is_initialized(), "a Ray cluster was started"


# The `plugin_probe` fixture: what trainctl's verl plugin does in a fresh process, per environment (the plugin's tests,
# tests/runtime/, and what a launched process imports, tests/test_import_cost.py).
ZYGOTE = Path(__file__).parent / "runtime" / "probe_zygote.py"
# what tells the plugin what to do: scrubbed, then set as each probe asks
PLUGIN_ENV = ("VERL_PLATFORM", "TRAINCTL_LAUNCHED", "TRAINCTL_REWARD_KIND", "TRAINCTL_TOOL_CALLS")


class Zygote:
    """tests/runtime/probe_zygote.py, started on the first probe: it pays for torch, tensordict and transformers
    once, and each probe imports verl (and the plugin) in a fork of it: about 2 s a probe instead of 11."""

    def __init__(self, stderr: Path):
        self.stderr = stderr
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def _started(self) -> subprocess.Popen:
        if self.proc is None:
            clean = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV}
            self.proc = subprocess.Popen(
                [sys.executable, str(ZYGOTE), ",".join(PLUGIN_ENV)], env=clean, text=True, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self.stderr.open("w"),
            )  # fmt: skip
            assert json.loads(self.proc.stdout.readline() or "{}").get("ready"), self._why()
        return self.proc

    def _why(self) -> str:
        return self.stderr.read_text()[-3000:]

    def run(self, env: dict[str, str], out: Path, script: Path | None = None, argv: tuple[str, ...] = ()) -> str:
        """What `script` (tests/runtime/plugin_probe.py by default) printed, run with `argv` in a fork of the zygote
        with `env`."""
        request = {"env": env, "out": str(out), "argv": list(argv), **({"script": str(script)} if script else {})}
        with self.lock:
            proc = self._started()
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            answer = json.loads(proc.stdout.readline() or "{}")
        assert answer.get("exit") == 0, f"the probe failed ({answer}):\n{self._why()}"
        return out.read_text()

    def probe(self, env: dict[str, str], out: Path) -> dict:
        return json.loads(self.run(env, out).strip().splitlines()[-1])

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def probe_zygote(tmp_path_factory):
    """The worker's zygote (tests/runtime/probe_zygote.py), started by its first probe, for tests whose probe must
    import verl in a fresh process."""
    zygote = Zygote(tmp_path_factory.mktemp("zygote") / "zygote.err")
    yield zygote
    zygote.close()


@pytest.fixture(scope="session")
def plugin_probe(tmp_path_factory, probe_zygote):
    """probe(**env) -> the facts tests/runtime/plugin_probe.py prints in a process with that environment, which
    imports verl for the first time (a fork of a zygote that imported verl's heavy dependencies, not verl). Each
    environment is probed once per session, for every test that asks."""
    base = tmp_path_factory.mktemp("plugin-probes")

    def probe(**env: str) -> dict:
        name = "plugin-probe-" + "-".join(f"{k}={v}" for k, v in sorted(env.items())).replace("/", "_")
        return once(tmp_path_factory, name, lambda folder: probe_zygote.probe(env, base / f"{name}.json"))

    return probe
