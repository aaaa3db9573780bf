"""`trainctl runs ls` and `runs show [--follow]` on real runs: finished, failed, running, and killed with SIGKILL."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import psutil

from tests.real_runs import FAST_SFT, SFT_STEPS, dry_run, trainctl


def _row(stdout: str, name: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith(name + " "))


def _wait(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _steps(run) -> int:
    f = run / "metrics" / "attempt-1.jsonl"
    return len(f.read_text().splitlines()) if f.is_file() else 0


class Lines:
    """A process's stdout lines as they arrive, each with the time it arrived."""

    def __init__(self, proc: subprocess.Popen):
        self.got: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc) -> None:
        for line in proc.stdout:
            self.got.append((time.monotonic(), line.rstrip("\n")))

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.got)


def test_ls_show_and_follow_report_each_state_and_a_killed_run(real_home, sft_run, failed_run, cli, tmp_path):
    work = tmp_path / "work"
    runs = work / "runs"
    shutil.copytree(sft_run.path, runs / "sft")  # finished
    shutil.copytree(failed_run.path, runs / "boom")  # the trainer exited 1
    env = real_home.env(TRAINCTL_PROGRESS_EVERY="0")
    args = [*FAST_SFT, "run.epochs=50", "run.name=long"]
    dry_run(real_home, work, args, {"TRAINCTL_PROGRESS_EVERY": "0"})  # its launch reuses the verdict (~6 s of CPU)

    long = subprocess.Popen(
        trainctl("train", *args),
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    trainer = None
    follower = None
    try:
        _wait(lambda: _steps(runs / "long") >= 1, 300, "the long run's first step")
        status = json.loads((runs / "long" / "run.json").read_text())
        assert status["live"]["pid"] == long.pid
        trainer = status["live"]["trainer_pid"]

        listed = cli("runs", "ls", "--dir", str(runs))
        assert listed.exit_code == 0, listed.output
        assert re.search(r"running \(PID \d+\)\s+\d+/200", _row(listed.stdout, "long")), listed.stdout
        sft = _row(listed.stdout, "sft")
        assert re.search(rf"sft\s+tiny\s+arith\s+done\s+{SFT_STEPS}/{SFT_STEPS}\s+train/loss=\d", sft), sft
        assert "failed (exit 1)" in _row(listed.stdout, "boom")

        follower = subprocess.Popen(
            trainctl("runs", "show", "long", "--follow"),
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines = Lines(follower)
        first = _wait(lambda: re.search(r"^step (\d+)/200", lines.text, re.M), 60, "the follower's first line")
        attached_at = int(first.group(1))
        # a step the follower prints while the run is still running, after it attached: steps as they happen
        newer = _wait(
            lambda: [int(s) for s in re.findall(r"^step (\d+)/200", lines.text, re.M) if int(s) > attached_at],
            180,
            "a step printed live",
        )
        assert long.poll() is None, "the run was still running when its step was shown"
        assert newer == sorted(newer)
        assert re.search(r"^step \d+/200 \(\d+%\) \| elapsed \S+ \| ETA [\d:]+ \| loss ", lines.text, re.M)

        long.send_signal(signal.SIGKILL)
        long.wait(timeout=10)
        follower.wait(timeout=30)
        lines.thread.join(timeout=5)
        # "is gone" until the attempt's watchdog has stopped what trainctl left and recorded the kill
        killed = r"^long: killed \(trainctl \(PID \d+\) (is gone|was killed; its watchdog stopped the \d+ processes)"
        assert re.search(killed, lines.text, re.M), lines.text[-2000:]

        after = cli("runs", "ls", "--dir", str(runs))
        row = _row(after.stdout, "long")
        assert "killed" in row and "running" not in row.split("killed")[0], row

        shown = cli("runs", "show", str(runs / "long"))
        assert shown.exit_code == 0, shown.output
        assert "status      killed (trainctl (PID" in shown.stdout
        assert "  1  " in shown.stdout and "log: logs/attempt-1.log" in shown.stdout
        assert re.search(r"^  train/loss\s+\d", shown.stdout, re.M)

        done = cli("runs", "show", "sft")  # a name under ./runs (the working directory here)
        assert done.exit_code == 0 and "status      done" in done.stdout and f"step {SFT_STEPS} *" in done.stdout
        missing = cli("runs", "show", "nope")
        assert missing.exit_code == 1 and "Error: nope: no run there (no run.json)." in missing.stderr
    finally:
        for proc in (long, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
        if trainer:
            # SIGKILL left the supervisor no chance to stop its trainer: `runs ls` says so, and the test cleans up
            # (the trainer leads its own process group, torchrun's workers included)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(trainer, signal.SIGKILL)
            _wait(lambda: _gone(trainer), 20, "the trainer's exit")


def test_a_metrics_line_cut_mid_write_hides_nothing_else(sft_run, cli, tmp_path):
    """The trainer was killed while it wrote a metrics line: every reader takes the lines that are whole."""
    runs = tmp_path / "work" / "runs"
    shutil.copytree(sft_run.path, runs / "cut")
    metrics = runs / "cut" / "metrics" / "attempt-1.jsonl"
    lines = metrics.read_text().splitlines()
    # a cut line in the middle (a later attempt appended after it) and one at the end, without its newline
    metrics.write_text("\n".join([*lines[:2], lines[2][: len(lines[2]) // 2], *lines[2:]]) + "\n" + lines[3][:40])

    listed = cli("runs", "ls", "--dir", str(runs))
    # (run.json keeps the run's name: sft)
    done = rf"done\s+{SFT_STEPS}/{SFT_STEPS}\s+train/loss=\d"
    assert listed.exit_code == 0 and re.search(done, _row(listed.stdout, "sft")), listed.output
    shown = cli("runs", "show", "cut", "--all")
    assert shown.exit_code == 0 and f"Last metrics (step {SFT_STEPS}):" in shown.stdout, shown.output
    ckpts = cli("ckpt", "ls", "runs/cut", "-m", "train/loss")
    assert ckpts.exit_code == 0, ckpts.output
    assert re.search(rf"^\s*{SFT_STEPS} \*.*train/loss=\d", ckpts.stdout, re.M), ckpts.stdout
    plotted = cli("runs", "plot", "runs/cut", "-m", "train/loss", "-o", str(tmp_path / "loss.png"))
    assert plotted.exit_code == 0 and (tmp_path / "loss.png").stat().st_size > 1000, plotted.output
