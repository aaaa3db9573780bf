"""The live view: drawn on a terminal for a real SFT and a real GRPO run, plain lines when stdout is a pipe."""

from __future__ import annotations

import re

from tests.real_runs import GRPO_STEPS, SFT_STEPS

# colours and styles, removed; cursor movement (the view redrawing itself), a line break
STYLE = re.compile(r"\x1b\[[0-9;]*m")
MOVE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[=>]|\r")
# what verl prints that the view must keep in the log only: its whole config as a dict, its console logger, bars
RAW = ("'_target_'", "step:1 - ", "Loading weights", "Training Progress", "Epoch 1/")


def _screen(output: str) -> list[str]:
    return [line.strip() for line in MOVE.sub("\n", STYLE.sub("", output)).splitlines() if line.strip()]


def _etas(lines: list[str], total: int) -> list[str]:
    """The ETAs shown while the run was not finished."""
    found = []
    for line in lines:
        m = re.search(rf"step (\d+)/{total}\b.*ETA (\d+:\d\d)", line)
        if m and int(m.group(1)) < total:
            found.append(m.group(2))
    return found


def test_sft_in_a_terminal_shows_steps_eta_and_the_loss(sft_run):
    out = sft_run.output
    assert "\x1b[" in out, "a live view is drawn (cursor movement, colours)"
    lines = _screen(out)
    text = "\n".join(lines)
    assert "sft · sft · verl sft_trainer" in text
    assert any(f"step {SFT_STEPS}/{SFT_STEPS}" in line and "100%" in line for line in lines), text[-3000:]
    assert [e for e in _etas(lines, SFT_STEPS) if e != "0:00"], "an ETA is shown while it runs"
    for label, name in (("loss", "train/loss"), ("grad norm", "train/grad_norm")):
        assert any(line.startswith(label) and line.endswith(name) for line in lines), (label, text[-3000:])
    assert "s/step" in text and "tokens/s" in text
    for raw in RAW:
        assert raw not in text, f"{raw!r} is verl's raw stream: it belongs in the log"
    log = (sft_run.path / "logs" / "attempt-1.log").read_text()
    assert "'_target_'" in log and f"step:{SFT_STEPS} - " in log, "the raw stream is kept in the log"


def test_grpo_in_a_terminal_shows_reward_kl_entropy_and_response_length(grpo_run):
    lines = _screen(grpo_run.output)
    text = "\n".join(lines)
    assert "grpo · grpo · verl main_ppo" in text
    assert any(f"step {GRPO_STEPS}/{GRPO_STEPS}" in line for line in lines), text[-3000:]
    assert [e for e in _etas(lines, GRPO_STEPS) if e != "0:00"], "an ETA is shown while it runs"
    for label, name in (
        ("reward", "critic/score/mean"),
        ("KL", "actor/kl_loss"),
        # the recipe runs verl's bypass mode in sync (recipes/grpo-arith-tiny-cpu.yaml): its entropy is the update's,
        # and verl has no rollout gap to log (the vLLM run's live view shows it: tests/launch/test_vllm_rollout.py)
        ("entropy", "actor/entropy_loss"),
        ("response len", "response_length/mean"),
    ):
        assert any(line.startswith(label) and line.endswith(name) for line in lines), (label, text[-3000:])
    assert "tokens/s" in text
    for raw in (*RAW, "TaskRunner", "WorkerDict"):
        assert raw not in text, f"{raw!r} is verl's raw stream: it belongs in the log"


def test_a_pipe_gets_plain_lines_without_control_codes(dpo_run):
    out = dpo_run.output
    assert "\x1b" not in out and "\r" not in out
    steps = [int(m.group(1)) for m in re.finditer(r"^step (\d+)/16 \(\d+%\) \| elapsed \S+ \| ETA \S+", out, re.M)]
    # a line per poll of the metrics (TRAINCTL_PROGRESS_EVERY=0): how many steps land between two polls depends on
    # the machine's load, but the first step's line and the last one's are always there
    assert steps == sorted(steps) and len(steps) >= 2 and steps[-1] == 16, out[-3000:]
    last = next(line for line in out.splitlines() if line.startswith("step 16/16"))
    assert "| loss " in last and "| accuracy " in last and "s/step" in last, last
    assert "{'loss'" not in out and "Loading weights" not in out, "TRL's own output stays in the log"
