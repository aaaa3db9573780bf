"""Real CPU training runs made once per session and shared by every test that reads them (each costs 20-100 s).

Each is started the way a user starts one: `python -m trainctl train ...` in a fresh working directory (which must
hold only runs/ afterwards), SFT and GRPO under a pseudo-terminal (the live view draws), DPO and the two-process SFT
run with stdout a pipe (plain progress lines). Tests read the run folders; they must not change them (copy what they
damage).
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.shared import once
from trainctl.facts.vllm import CACHE_FOLDER as VLLM_CACHE
from trainctl.launchers.local import DATASETS_CACHE, WANDB_CACHE

REWARD = Path(__file__).parent / "launch" / "partial_reward.py"
# 128 rows / batch 32 = 4 steps per epoch; one micro-batch of 8 per step
FAST_SFT = ["recipe=quickstart", "data.train_max_samples=128", "hardware.micro_batch_size_per_gpu=8", "run.epochs=1"]
FAST_DPO = ["recipe=dpo-arith-tiny-cpu", "run.max_steps=16"]
# the session's reward model (TRL's RewardTrainer through the TRL registry): RM_STEPS steps of the recipe, held-out
# pairs evaluated before training and every RM_EVERY steps, a checkpoint every RM_EVERY
RM_STEPS = 8
RM_EVERY = 4
# the GRPO recipe at 4 samples per prompt and a learning rate of 1e-4, 2 steps: the other PPO-family algorithms' runs
# (tests/launch/test_ppo.py, slow)
FAST_RL = [
    "recipe=grpo-arith-tiny-cpu", "run.max_steps=2", "reward=fn", f"reward.fn={REWARD}:compute_score",
    "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.optim.lr=1e-4",
]  # fmt: skip
# the session's SFT run: `trainctl train recipe=quickstart` as the README shows it (3 epochs of 16 steps, validation
# after each), with a checkpoint after each epoch too
SFT_STEPS = 48
SFT_EVERY = 16
# the session's GRPO run: the recipe as shipped (reward=arith, lr 1e-2, 8 samples per prompt), GRPO_STEPS steps, a
# checkpoint and verl's validation every GRPO_EVERY
GRPO_STEPS = 12
GRPO_EVERY = 6
# the session's agent run: the agent recipe as shipped (AGENT_STEPS steps, validated after its last step) on vLLM's
# CPU build, but for verl's validation before training (the same agent-loop validation as after it; ~12 s of CPU):
# the learning test evaluates the model before training itself. The same recipe on trainctl's sampler is the slow
# suite's (agent_hf_run)
AGENT_STEPS = 10
TERMINAL = (40, 120)  # rows, columns of the pseudo-terminal
# failed_run's HF_TOKEN and run.project: it must appear in none of its files
SECRET = "hf_secretvalue123456"


@dataclass
class RealRun:
    work: Path  # the working directory it was started from
    path: Path  # its run folder
    output: str  # everything trainctl printed (a terminal's bytes, control codes included, for a pty run)
    exit_code: int
    seconds: float


@dataclass
class Home:
    root: Path
    cache: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "TRAINCTL_HOME": str(self.root / "home"),
            "TRAINCTL_CACHE": str(self.cache),
            "HOME": str(self.root),
            "WANDB_MODE": "offline",
            "HF_HUB_OFFLINE": "1",
            "TERM": "xterm-256color",
        }
        # (TMPDIR: the runs' temporary files go where trainctl puts them, as a user's without one do)
        for var in (
            "WANDB_API_KEY",
            "RAY_ADDRESS",
            "HF_TOKEN",
            "TRAINCTL_DEBUG",
            "COLUMNS",
            "LINES",
            "WANDB_DIR",
            "TMPDIR",
        ):
            env.pop(var, None)
        env.update(extra)
        return env


def trainctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainctl", *args]


def run_in_terminal(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run a command with a pseudo-terminal as its stdin, stdout and stderr; returns (exit code, what it drew)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *TERMINAL, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal's other side has exited
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(), b"".join(chunks).decode("utf-8", errors="replace")


def dry_run(home: Home, work: Path, args: list[str], env: dict[str, str]) -> None:
    """`trainctl train ARGS --dry-run` in this process, as a user checks a run before launching it: the launch then
    reuses the backend's verdict on the same config (trainctl.checks.native), so its process does not import verl
    or TRL only to validate (about 6 s of CPU a launch on 2 cores; this worker has imported them once)."""
    from tests.conftest import invoke

    saved_env, saved_cwd, launch_env = dict(os.environ), Path.cwd(), home.env(**env)
    os.environ.clear()
    os.environ.update(launch_env)  # the launch's environment: the same config, so the same verdict
    os.chdir(work)
    try:
        result = invoke("train", *args, "--dry-run")
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    assert result.exit_code == 0, (
        f"trainctl train {' '.join(args)} --dry-run exited {result.exit_code}:\n" + result.output
    )


def train(
    home: Home, name: str, *args: str, terminal: bool = False, expect: int = 0, check_first: bool = True,
    recheck: tuple[str, ...] = (), **env: str,
) -> RealRun:  # fmt: skip
    """`trainctl train ARGS run.name=NAME` in a new working directory, after its dry run here (`check_first`). The
    launch may cache the answers of the checks in `recheck` (cache folders) that its dry run could not keep."""
    work = home.root / f"work-{name}"
    work.mkdir()
    # a cache of the run's own: the verdicts below are this run's, whatever the other worker launches meanwhile
    env = {"TRAINCTL_CACHE": str(home.root / f"cache-{name}"), **env}
    cache = Path(env["TRAINCTL_CACHE"])
    if check_first:
        dry_run(home, work, [*args, f"run.name={name}"], env)
    before = _files(cache)
    argv = trainctl("train", *args, f"run.name={name}")
    start = time.monotonic()
    if terminal:
        code, output = run_in_terminal(argv, work, home.env(**env))
    else:
        proc = subprocess.run(argv, cwd=work, env=home.env(**env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        code, output = proc.returncode, proc.stdout.decode("utf-8", errors="replace")
    run = RealRun(work, work / "runs" / name, output, code, time.monotonic() - start)
    (home.root / f"{name}.out").write_text(output)  # beside, not inside, the working directory: for a failure's reader
    assert code == expect, f"trainctl train {' '.join(args)} exited {code}:\n{output[-4000:]}"
    if check_first:  # the launch reused what its dry run cached (the verdict, the backend defaults): it built nothing
        written = sorted(
            str(f.relative_to(cache))
            for f, stamp in _files(cache).items()
            # the trainer's own: the datasets library's Arrow copies of the data and wandb's logs
            # (trainctl.launchers.local), what vLLM caches when its engine starts (trainctl.facts.vllm)
            if before.get(f) != stamp
            and not {DATASETS_CACHE, WANDB_CACHE, VLLM_CACHE, *recheck} & set(f.relative_to(cache).parts)
        )
        assert any(f.parent.name == "validated" for f in before), f"the dry run of {name} left no verdict"
        assert not written, f"the launch of {name} cached what its dry run had not: {written}"
    return run


def _files(folder: Path) -> dict[Path, int]:
    """Every file under `folder`, with the time it was last written."""
    return {f: f.stat().st_mtime_ns for f in folder.rglob("*") if f.is_file()} if folder.is_dir() else {}


@pytest.fixture(scope="session")
def real_home(tmp_path_factory, tiny_model_dir, arith_data_dir) -> Home:
    """A trainctl home with the tiny model and the arith data in place, outside every run's working directory; one
    for the session, whichever pytest-xdist worker made it."""
    import shutil

    def make(root: Path) -> Home:
        shutil.copytree(tiny_model_dir, root / "home" / "models" / "tiny")
        shutil.copytree(arith_data_dir, root / "home" / "data" / "arith")
        return Home(root, root / "cache")

    return once(tmp_path_factory, "real", make)


def shared_train(tmp_path_factory, home: Home, name: str, *args: str, **kwargs) -> RealRun:
    """train(...) once for the session, whichever pytest-xdist worker asks first."""
    return once(tmp_path_factory, f"{name}-run", lambda _: train(home, name, *args, **kwargs))


@pytest.fixture(scope="session")
def sft_run(real_home, tmp_path_factory) -> RealRun:
    """verl SFT: `trainctl train recipe=quickstart` (SFT_STEPS steps, validation every SFT_EVERY) with a checkpoint
    every SFT_EVERY, logger=console, in a terminal (the live view). Issue 29's SFT learning run
    (tests/launch/test_learning.py), the checkpoints the ckpt tests read, the run the docs tour's SFT commands
    find."""
    return shared_train(
        tmp_path_factory, real_home, "sft", "recipe=quickstart", f"run.save_every={SFT_EVERY}", "logger=console",
        terminal=True,
    )  # fmt: skip


@pytest.fixture(scope="session")
def grpo_run(real_home, tmp_path_factory) -> RealRun:
    """verl main_ppo GRPO: the GRPO recipe as shipped, 12 steps (issue 29's GRPO learning run:
    tests/launch/test_learning.py), checkpoints at 6 and 12, logger=console, in a terminal (the live view); verl
    validates before training and at 6 and 12 and dumps its validation samples to validation_dir(grpo_run) (the eval
    tests compare `trainctl eval` with them, sample for sample)."""
    return shared_train(
        tmp_path_factory, real_home, "grpo", "recipe=grpo-arith-tiny-cpu", f"run.max_steps={GRPO_STEPS}",
        f"run.save_every={GRPO_EVERY}", f"run.val_every={GRPO_EVERY}",
        f"trainer.validation_data_dir={real_home.root / 'grpo-validation'}", "logger=console", terminal=True,
    )  # fmt: skip


def validation_dir(run: RealRun) -> Path:
    """Where the session's GRPO run dumped verl's validation samples (one {step}.jsonl per validation)."""
    return run.work.parent / f"{run.path.name}-validation"


@pytest.fixture(scope="session")
def dpo_run(real_home, tmp_path_factory) -> RealRun:
    """TRL DPO, 16 steps, checkpoints at 8 and 16, held-out pairs evaluated before training and at 8 and 16 (the
    learning test's), logger=console, stdout a pipe (plain progress lines)."""
    return shared_train(
        tmp_path_factory, real_home, "dpo", *FAST_DPO, "run.save_every=8", "run.val_every=8", "logger=console",
        TRAINCTL_PROGRESS_EVERY="0",
    )  # fmt: skip


@pytest.fixture(scope="session")
def sft_ws2_run(real_home, tmp_path_factory) -> RealRun:
    """verl SFT with two processes (world size 2), 4 steps: sharded checkpoints and validation at 2 and 4, logged to
    wandb (offline) and TensorBoard besides the run folder; stdout a pipe (plain progress lines)."""
    return shared_train(
        tmp_path_factory, real_home, "sft-ws2", *FAST_SFT, "hardware.gpus_per_node=2", "run.save_every=2",
        "run.val_every=2", "logger=[wandb,tensorboard]", TRAINCTL_PROGRESS_EVERY="0",
    )  # fmt: skip


@pytest.fixture(scope="session")
def dpo_lora_run(real_home, tmp_path_factory) -> RealRun:
    """TRL DPO with lora=r8 (rank 8, alpha 16), 16 steps, adapter checkpoints at 8 and 16; stdout a pipe."""
    return shared_train(
        tmp_path_factory, real_home, "dpo-lora", *FAST_DPO, "lora=r8", "run.save_every=8", TRAINCTL_PROGRESS_EVERY="0"
    )


@pytest.fixture(scope="session")
def rm_run(real_home, tmp_path_factory) -> RealRun:
    """TRL reward model: `trainctl train recipe=rm-arith-tiny-cpu` for RM_STEPS steps, checkpoints and held-out
    pair accuracy every RM_EVERY (and before training); stdout a pipe. The run `eval runs/rm`, `ckpt merge` and
    `reward=model reward.model=runs/rm` read (tests/launch/test_trl_methods.py)."""
    return shared_train(
        tmp_path_factory, real_home, "rm", "recipe=rm-arith-tiny-cpu", f"run.max_steps={RM_STEPS}",
        f"run.save_every={RM_EVERY}", f"run.val_every={RM_EVERY}", TRAINCTL_PROGRESS_EVERY="0",
    )  # fmt: skip


def tools_home(home: Home, tiny_tools_dir: Path, tmp_path_factory) -> None:
    """tiny-tools and the arith-tools data in the session's home, once for the runs that read them."""
    import shutil

    def make(_) -> bool:
        shutil.copytree(tiny_tools_dir, home.root / "home" / "models" / "tiny-tools")
        prep = subprocess.run(trainctl("data", "prep", "arith-tools"), env=home.env(), cwd=home.root)
        assert prep.returncode == 0, "trainctl data prep arith-tools failed"
        return True

    once(tmp_path_factory, "tools-home", make)


def _agent(home: Home, tiny_tools_dir: Path, tmp_path_factory, name: str, engine: str) -> RealRun:
    def make(_) -> RealRun:
        tools_home(home, tiny_tools_dir, tmp_path_factory)
        # no dry run first: the launch's tokenization preflight imports verl all the same
        return train(
            home, name, "recipe=agent-arith-tiny-cpu", f"hardware.rollout_engine={engine}",
            "trainer.val_before_train=false", f"trainer.validation_data_dir={home.root / f'{name}-validation'}",
            check_first=False,
        )  # fmt: skip

    return once(tmp_path_factory, f"{name}-run", make)


@pytest.fixture(scope="session")
def agent_run(real_home, tiny_tools_dir, tmp_path_factory) -> RealRun:
    """The agent recipe as shipped (GRPO through verl's tool agent loop, the calculator MCP server over stdio, model
    tiny-tools, data arith-tools, reward=arith-tools), AGENT_STEPS steps, its turns sampled by verl's vLLM rollout on
    vLLM's CPU build (hardware.rollout_engine=vllm): issue 29's agent learning run, issue 43's GRPO and agent runs on
    vLLM (tests/launch/test_vllm_rollout.py), the run the agent tests read. verl validates at the end (not before
    training) on the test split and dumps it to validation_dir(agent_run) (agent eval's comparison); stdout a
    pipe."""
    return _agent(real_home, tiny_tools_dir, tmp_path_factory, "agent", "vllm")


@pytest.fixture(scope="session")
def agent_hf_run(real_home, tiny_tools_dir, tmp_path_factory) -> RealRun:
    """agent_run on trainctl's CPU sampler (hardware.rollout_engine=hf): the slow suite's agent learning run."""
    return _agent(real_home, tiny_tools_dir, tmp_path_factory, "agent-hf", "hf")


@pytest.fixture(scope="session")
def failed_run(real_home, tmp_path_factory) -> RealRun:
    """verl SFT whose dataset class raises once the trainer has started: trainctl exits 3. Its run folder is also
    the one checked for what a run saves and for secrets: HF_TOKEN is set, and run.project looks like a token."""

    def make(_: Path) -> RealRun:
        boom = real_home.root / "boom.py"
        boom.write_text(
            "import json, os, tempfile\n\n\n"
            "class Boom:\n"
            "    def __init__(self, *a, **k):\n"
            "        # where the trainer's temporary files go (TMPDIR), for tests/launch/test_sft.py\n"
            "        seen = {v: os.environ.get(v) for v in ('TMPDIR', 'RAY_TMPDIR', 'TORCHINDUCTOR_CACHE_DIR')}\n"
            "        with open(os.path.join(os.path.dirname(__file__), 'boom-tmp.json'), 'w') as f:\n"
            "            json.dump({'tempdir': tempfile.gettempdir(), 'env': seen}, f)\n"
            "        raise RuntimeError('boom: bad dataset')\n"
        )
        return train(
            real_home, "boom", *FAST_SFT, "run.max_steps=1", f"run.project={SECRET}", f"data.custom_cls.path={boom}",
            "data.custom_cls.name=Boom", expect=3, HF_TOKEN=SECRET,
        )  # fmt: skip

    return once(tmp_path_factory, "boom-run", make)


@pytest.fixture(scope="session")
def grpo_vllm_run(real_home, tmp_path_factory) -> RealRun:
    """The session's GRPO run again with hardware.rollout_engine=vllm: verl's own vLLM rollout (its servers, agent
    loop and weight sync) on vLLM's CPU build, GRPO_STEPS steps, no validation, in a terminal (the live view). Issue
    43's single-turn learning run (tests/launch/test_vllm_rollout.py, slow)."""
    return shared_train(
        tmp_path_factory, real_home, "grpo-vllm", "recipe=grpo-arith-tiny-cpu", "hardware.rollout_engine=vllm",
        f"run.max_steps={GRPO_STEPS}", "logger=console", terminal=True,
    )  # fmt: skip


# the LoRA run on vLLM's CPU build: its steps
LORA_VLLM_STEPS = 3


@pytest.fixture(scope="session")
def grpo_lora_vllm_run(real_home, sft_run, tmp_path_factory) -> RealRun:
    """Issue 60: GRPO with lora=r8 on vLLM's CPU build (verl's rollout; the adapters folded into the weights each
    sync sends), LORA_VLLM_STEPS steps from the session's SFT run (a model whose probabilities a stale rollout would
    miss by more than the gap bound), a checkpoint each step, the rollouts dumped (tests/launch/test_vllm_rollout.py,
    slow)."""
    return shared_train(
        tmp_path_factory, real_home, "grpo-lora-vllm", "recipe=grpo-arith-tiny-cpu", f"model={sft_run.path}",
        "lora=r8", "hardware.rollout_engine=vllm", f"run.max_steps={LORA_VLLM_STEPS}", "run.save_every=1",
        f"trainer.rollout_data_dir={real_home.root / 'grpo-lora-vllm-rollouts'}", "logger=console",
        TRAINCTL_PROGRESS_EVERY="0",
    )  # fmt: skip
