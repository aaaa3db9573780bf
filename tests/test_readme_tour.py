"""The documentation as a tested contract: every command in the shell blocks of its pages (docs/, in mkdocs.yml's nav
order: the order a reader follows) is run, in that order, through the real CLI, and every command the README shows is
one of them.

Twice: in a fresh home (before the demo's set-up) and after it (the tiny model and the arith data made by the tour's own
`model init tiny` / `data prep arith`). Each command must exit 0 with no traceback. The commands are read from the pages
themselves, so the test follows them when they change; the few that cannot run here are listed below with the reason.
The generated references (docs/reference/) show `--help`'s examples in text blocks: not run. Training on CPU runs for
real in the `slow` variant; the default one runs each training command as a dry run (every check, verl's own validation
included) and finds the run folders the later commands read (runs/grpo, runs/quickstart, ...) made by the session's real
runs (tests/real_runs.py), which train the same recipes.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.docs.pages import README, label, written_pages

# what cannot run on this machine (no GPU, no internet), matched against the start of a command
CANNOT_RUN = {
    "make demo": "its three commands are below in the tour (model init tiny, data prep arith, train recipe=quickstart)",
    "make test": "it is the suite this test is part of",
    "trainctl data prep gsm8k": "downloads from the Hugging Face hub or ModelScope (no internet here)",
    "trainctl model pull": "downloads from the Hugging Face hub or ModelScope (no internet here)",
    "trainctl model rm qwen2.5-7b": "removes a model only `model pull` could have fetched",
    "trainctl train algorithm=grpo data=gsm8k reward=judge": "its judge is api.openai.com (no internet here)",
    "trainctl train recipe=grpo-arith-tiny-cpu reward=judge reward.judge=qwen3-0.6b": (
        "the run serves qwen3-0.6b, which `model pull` would download (no internet here)"
    ),
    "trainctl ckpt merge out/dpo-lora/checkpoint-500": "an example path: a PEFT checkpoint of the user's own",
    "trainctl data gen-tasks calc-tasks": "its generator is api.openai.com (no internet here)",
    "trainctl train algorithm=grpo data=calc-tasks": "its data is what the gen-tasks example above would write",
}
# the training commands of the tour, on CPU: run for real in the slow variant, as dry runs otherwise
_COMMAND = re.compile(r"^([A-Z_]+=\S*\s+)*(trainctl|make)\s")
_TRAIN = re.compile(r"^trainctl train (?!.*--dry-run)")
# a training command for GPUs (and a model only `model pull` fetches): a dry run in both variants
_GPU = re.compile(r"\bhardware=\S*gpu\b")


REPO = Path(__file__).resolve().parents[1]
VERIFIERS_TASKSET = REPO / "tests" / "envs" / "fixtures" / "verifiers" / "vf_arith.py"


def _users_files(work: Path, home: Path) -> None:
    """The files of the user's own that the docs' examples name: a QA file to convert, a reward function, a verifiers
    taskset, a local copy of gsm8k (the columns of openai/gsm8k)."""
    import json

    rows = [
        {"question": f"What is {a} + {b}?", "answer": f"{a} plus {b} is {a + b}.\n#### {a + b}"}
        for a in range(9)
        for b in range(9)
    ]
    (work / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "rewards").mkdir(exist_ok=True)
    (work / "rewards" / "partial.py").write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return float(ground_truth in solution_str)\n"
    )
    # a verifiers taskset of the user's own (the guide's my_taskset in tasksets/): the tests' own
    (work / "tasksets").mkdir(exist_ok=True)
    shutil.copy(VERIFIERS_TASKSET, work / "tasksets" / "my_taskset.py")
    mirror = home / "mirror" / "gsm8k"
    mirror.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", rows[:60]), ("test", rows[60:])):
        (mirror / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))


def _verifiers_made(monkeypatch) -> None:
    """verifiers' interpreter: the one `make install` made (.venv-verifiers), which `env install verifiers` then finds
    made, rather than a minute of pip in the tour's fresh home."""
    from trainctl.envs import verifiers

    if verifiers.ready(REPO / ".venv-verifiers"):
        monkeypatch.setenv(verifiers.VENV_VAR, str(REPO / ".venv-verifiers"))


def commands() -> list[str]:
    """Every command line of the docs pages' shell blocks, in nav order."""
    return [c for page in written_pages() for c in page_commands(page)]


def page_commands(page: Path) -> list[str]:
    """Every command line of a page's shell blocks, in order (continuations joined, comments and outputs dropped,
    `a && b` split)."""
    found, fence, lines = [], None, page.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("```"):
            fence = line.strip()[3:] if fence is None else None  # the block's language while inside one
            continue
        if fence not in ("", "bash", "sh", "shell"):
            continue
        # a command starts with make or trainctl, maybe after VAR=value words; anything else is shown output
        if not _COMMAND.match(line):
            continue
        while line.rstrip().endswith("\\") and i < len(lines):
            line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
        words = shlex.split(line, comments=True)
        for part in " ".join(shlex.quote(w) for w in words).split(" '&&' "):
            found.append(part)
    return found


def cannot_run(command: str) -> str | None:
    bare = " ".join(w for w in shlex.split(command) if not re.match(r"^[A-Z_]+=", w))
    return next((why for start, why in CANNOT_RUN.items() if bare.startswith(start)), None)


def test_the_docs_have_a_tour():
    found = commands()
    assert len(found) >= 40, found
    assert "trainctl model init tiny" in found and "trainctl train recipe=quickstart" in found
    # every entry of CANNOT_RUN still names a docs command: the list shrinks when the docs do
    for start in CANNOT_RUN:
        assert any(" ".join(shlex.split(c)).find(start) >= 0 for c in found), f"no docs command starts {start!r}"


def test_every_readme_command_is_one_the_tour_runs():
    """The README's commands are the docs' (the tour runs them in the order a reader meets them there)."""
    shown = page_commands(README)
    assert "make demo" in shown and "trainctl train recipe=quickstart" in shown
    tour = set(commands())
    missing = [c for c in shown if c not in tour]
    assert not missing, f"README commands that no docs page shows ({label(written_pages()[1])}: the tour): {missing}"


# which session run stands in for a training command's run folder, by the backend its dry run names
# (the first that fits: a reward model's run is the session's reward model, which `reward.model=runs/NAME` reads)
STAND_INS = {
    "verl sft_trainer": "sft_run",
    "verl main_ppo": "grpo_run",
    "TRL RewardTrainer": "rm_run",
    "TRL": "dpo_run",
}
_FOLDER = re.compile(r"^Backend: (.+?); run folder: (\S+)$", re.M)


def _stand_in(request, backend: str, folder: Path, args: list[str]) -> None:
    """Put a session run where the dry-run training command would have made its run (with the command's arguments
    as its saved arguments, which is what the run would have saved)."""
    import json

    fixture = next(f for b, f in STAND_INS.items() if backend.startswith(b))
    if "--resume" in args or folder.exists():
        return
    shutil.copytree(request.getfixturevalue(fixture).path, folder, symlinks=True)
    run_file = folder / "run.json"
    status = json.loads(run_file.read_text())
    saved = [a for a in args[1:] if a != "--dry-run"]  # the arguments after `train`, as a run saves them
    run_file.write_text(json.dumps({**status, "args": saved}, indent=2))


SETUP = ("trainctl model init tiny", "trainctl data prep arith")


def _run_tour(cli, monkeypatch, request=None, planned: dict | None = None, until_set_up: bool = False) -> list[str]:
    """The tour in docs order; with `request`, training commands are dry runs and session runs stand in.

    `planned` maps a training command to the backend and run folder its dry run named, once the tour's set-up
    commands have run (from then on the home holds what it holds after `make demo`): filled when empty, and used
    when not, to put the stand-in run in place without planning the same command again. `until_set_up` stops the
    tour once its set-up commands have run."""
    failures, set_up, fill = [], set(), planned is not None and not planned
    for command in commands():
        if until_set_up and set_up == set(SETUP):
            break
        if cannot_run(command):
            continue
        words = shlex.split(command)
        env = [w for w in words if re.match(r"^[A-Z_]+=", w)]
        args = words[len(env) + 1 :]
        training = _TRAIN.match(" ".join(words[len(env) :])) is not None
        dry = training and (request is not None or _GPU.search(command) is not None)
        if dry and not fill and planned and command in planned:
            backend, folder = planned[command]
            _stand_in(request, backend, Path.cwd() / folder, args)
            continue
        with monkeypatch.context() as m:
            for assignment in env:
                m.setenv(*assignment.split("=", 1))
            result = cli(*args, *(["--dry-run"] if dry else []))
        if result.exit_code != 0 or "Traceback" in result.output:
            failures.append(f"$ {shlex.join(args)}\nexit {result.exit_code}\n{result.output[-1500:]}")
            continue
        set_up |= {command} & set(SETUP)
        if dry and request is not None:
            backend, folder = _FOLDER.search(result.stdout).groups()
            _stand_in(request, backend, Path(folder), args)
            if fill and set_up == set(SETUP) and Path(folder).is_relative_to(Path.cwd()):
                planned[command] = (backend, Path(folder).relative_to(Path.cwd()))
    return failures


def test_every_docs_command_works_before_and_after_the_demo_set_up(cli, tmp_path, monkeypatch, request):
    """Once from a fresh home (the tour's own set-up commands make the model and data), then the commands the docs
    show before its set-up again, after `make demo`'s set-up, in a new working directory (the commands after the
    set-up ran in that state the first time)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    _verifiers_made(monkeypatch)
    (tmp_path / "first").mkdir()
    monkeypatch.chdir(tmp_path / "first")
    _users_files(tmp_path / "first", tmp_path)  # HOME is tmp_path (the isolated fixture)
    planned: dict = {}
    first = _run_tour(cli, monkeypatch, request, planned)
    assert planned, "the tour's training commands after its set-up were planned"
    assert not first, "docs commands that fail in a fresh home:\n\n" + "\n\n".join(first)
    (tmp_path / "after-demo").mkdir()
    monkeypatch.chdir(tmp_path / "after-demo")
    _users_files(tmp_path / "after-demo", tmp_path)
    for setup in ("model init tiny", "data prep arith"):
        assert cli(*setup.split()).exit_code == 0
    # the commands before the set-up again; a training command planned in the first pass once its set-up had run is
    # not planned again: with the same home, its plan is the same (its stand-in run is put in place all the same)
    again = _run_tour(cli, monkeypatch, request, planned, until_set_up=True)
    assert not again, "docs commands that fail after the demo's set-up:\n\n" + "\n\n".join(again)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # every training of the tour, one after another (the agent recipe's warm start among them)
def test_the_docs_tour_trains_for_real(cli, isolated, monkeypatch):
    """The whole tour after the set-up, every CPU training command run as written (27 minutes on 2 cores)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    _verifiers_made(monkeypatch)
    _users_files(Path.cwd(), Path.home())
    for setup in ("model init tiny", "data prep arith"):
        assert cli(*setup.split()).exit_code == 0
    failures = _run_tour(cli, monkeypatch)
    assert not failures, "docs commands that fail:\n\n" + "\n\n".join(failures)
