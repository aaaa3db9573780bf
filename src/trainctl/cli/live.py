"""The live view of a run: on a terminal a rich panel (progress bar with step/total, elapsed and ETA, the
algorithm's key metrics with their trend, throughput, GPU memory and utilisation), elsewhere (CI, pipes) plain
lines every so often, without control codes. Alerts (NaN loss, gradient spikes, reward collapse, same reward for
every sample, out of memory) are printed as one line each, with a hint.

It reads only the run folder, as it grows: the attempt's log (logs/attempt-N.log) and metrics
(metrics/attempt-N.jsonl). `trainctl train` shows it while its trainer runs; `trainctl runs show --follow`
attaches it to a run started elsewhere.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from trainctl.metrics import sparkline
from trainctl.runs.alerts import Alert
from trainctl.runs.gpus import gpu_stats
from trainctl.runs.progress import Progress, fmt_seconds, fmt_value, trend_arrow
from trainctl.runs.tail import JsonlTail, LineTail

# how often the files are read and the panel redrawn
POLL_SECONDS = 0.5
GPU_SECONDS = 2.0
# plain output: a line at most this often (besides the first and the last step); TRAINCTL_PROGRESS_EVERY changes it
PLAIN_EVERY_SECONDS = 30.0


def _relative(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def plain_every() -> float:
    try:
        return float(os.environ.get("TRAINCTL_PROGRESS_EVERY", PLAIN_EVERY_SECONDS))
    except ValueError:
        return PLAIN_EVERY_SECONDS


class RunView:
    """Watches one attempt of a run and shows where it stands, until stop()."""

    def __init__(
        self,
        run_dir: Path,
        attempt: dict,
        family: str | None,
        title: str,
        out: TextIO | None = None,
        terminal: bool | None = None,
        attach: bool = False,
        started: float | None = None,
        width: int | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.out = out or sys.stdout
        self.terminal = self.out.isatty() if terminal is None else terminal
        self.title = title
        self.log_name = attempt.get("log", "")
        self.log = LineTail(self.run_dir / attempt["log"])
        self.metrics = JsonlTail(self.run_dir / attempt["metrics"])
        self.progress = Progress(family, total=attempt.get("steps_total"), started=started or time.time())
        self.progress.on_alert = self._on_alert
        self.attach = attach  # what is there already arrived before we looked: no timing from it
        self.every = plain_every()
        self.width = width
        self.gpus: list = []
        self._gpu_at = 0.0
        self._printed_step = 0
        self._printed_at = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live = None
        self._pending_alerts: list[Alert] = []
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def __enter__(self) -> RunView:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.terminal:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.out, force_terminal=True, width=self.width, highlight=False)
            self._live = Live(self.render(), console=console, refresh_per_second=4, transient=False)
            self._live.start()
        self.poll(first=True)
        self._thread = threading.Thread(target=self._loop, name="trainctl-live-view", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Read what is left, draw the final state, and stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.poll()
            if self._live is not None:
                self._live.update(self.render(), refresh=True)
            elif self.progress.done and self._printed_step != self.progress.done:
                self._plain_line()
        except Exception as e:  # the run's own outcome matters more than the view's last frame
            self._write(f"(live view: {e!r})\n")
        finally:
            if self._live is not None:
                self._live.stop()

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.poll()
            except Exception as e:  # the view must never take the run down with it
                self._write(f"(live view stopped: {e!r}; the log has everything)\n")
                return

    # -- reading ------------------------------------------------------------------------------------------------

    def poll(self, first: bool = False) -> None:
        with self._lock:
            now = time.time()
            backlog = first and self.attach
            self.progress.add_metrics(self.metrics.read(), now, backlog=backlog)
            # verl's console lines are the metrics' only source where the file is not here (a Ray job's node)
            self.progress.console_source = not self.metrics.path.exists()
            for line in self.log.read():
                self.progress.add_line(line, now, backlog=backlog)
            if time.monotonic() - self._gpu_at > GPU_SECONDS:
                self.gpus = gpu_stats()
                self._gpu_at = time.monotonic()
            alerts, self._pending_alerts = self._pending_alerts, []
            for alert in alerts:
                self._print_alert(alert)
            if self._live is not None:
                self._live.update(self.render())
            else:
                self._maybe_plain()

    def _on_alert(self, alert: Alert) -> None:
        self._pending_alerts.append(alert)

    # -- terminal -----------------------------------------------------------------------------------------------

    def render(self):
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        p = self.progress
        total, done = p.total, p.done
        if total:
            counts = f"step {done}/{total}  {100 * min(done, total) / total:.0f}%"
        else:
            counts = f"step {done}" if done else "waiting for the first step"
        eta = fmt_seconds(p.eta()) if total and done < total else ("0:00" if total else "-")
        bar = Table.grid(padding=(0, 1))
        bar.add_column(width=36)
        bar.add_column()
        bar.add_row(
            ProgressBar(total=float(total), completed=float(min(done, total)), width=36)
            if total
            else ProgressBar(total=None, width=36),
            Text.assemble((counts, "bold"), ("  elapsed ", "dim"), fmt_seconds(p.elapsed()), ("  ETA ", "dim"), eta),
        )
        rows = Table.grid(padding=(0, 2))
        rows.add_column(style="cyan", min_width=12)
        rows.add_column(justify="right", min_width=9)
        rows.add_column(min_width=14)
        rows.add_column(style="dim")
        for s in p.shown():
            rows.add_row(s.label, fmt_value(s.value), f"{trend_arrow(s.trend)} {sparkline(s.trend, 12)}", s.name)
        for g in self.gpus:
            rows.add_row(
                f"GPU {g.index}", f"{g.utilization}%", f"{g.used / 2**30:.1f}/{g.total / 2**30:.1f} GiB", g.name
            )
        parts = [Text(self.title, style="bold"), bar, rows]
        speed = self._speed()
        if speed:
            parts.append(Text.assemble(("speed         ", "cyan"), speed))
        parts.append(Text(f"log: {_relative(self.log.path)}  (trainctl train -v streams it)", style="dim"))
        return Group(*parts)

    def _speed(self) -> str:
        per = self.progress.seconds_per_step()
        if per is None:
            return ""
        tokens = self.progress.tokens_per_second()
        return f"{per:.2f} s/step" + (f" · {tokens:,.0f} tokens/s" if tokens else "")

    def _print_alert(self, alert: Alert) -> None:
        line = f"Warning: {alert.message} Hint: {alert.hint}"
        if self._live is not None:
            from rich.text import Text

            self._live.console.print(Text(line, style="yellow"))
        else:
            self._write(line + "\n")

    # -- plain --------------------------------------------------------------------------------------------------

    def _maybe_plain(self) -> None:
        p = self.progress
        now = time.monotonic()
        if p.done == self._printed_step:
            if not p.done and now - self._printed_at >= max(self.every, PLAIN_EVERY_SECONDS):
                self._write(f"{self.title}: starting ({fmt_seconds(p.elapsed())} elapsed)\n")
                self._printed_at = now
            return
        last = bool(p.total) and p.done >= p.total
        if self._printed_step == 0 or last or now - self._printed_at >= self.every:
            self._plain_line()

    def _plain_line(self) -> None:
        p = self.progress
        parts = [f"step {p.done}/{p.total}" if p.total else f"step {p.done}"]
        if p.total:
            parts[0] += f" ({100 * min(p.done, p.total) / p.total:.0f}%)"
        parts.append(f"elapsed {fmt_seconds(p.elapsed())}")
        parts.append(f"ETA {fmt_seconds(p.eta())}")
        parts += [f"{s.label} {fmt_value(s.value)}{trend_arrow(s.trend).strip()}" for s in p.shown()[:4]]
        speed = self._speed()
        if speed:
            parts.append(speed)
        parts += [f"GPU{g.index} {g.utilization}% {g.used / 2**30:.1f}GiB" for g in self.gpus]
        self._write(" | ".join(parts) + "\n")
        self._printed_step = p.done
        self._printed_at = time.monotonic()

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):
            pass


def follow(run_dir: Path, out: TextIO | None = None, terminal: bool | None = None):
    """Attach the live view to a run started elsewhere until it stops running; returns its final RunInfo."""
    from trainctl.runs.status import read_run

    info = read_run(run_dir)
    attempt = info.attempts[-1] if info.attempts else None
    if attempt is None:
        return info
    started = info.started.timestamp() if info.started else None
    last_start = attempt.get("started")
    if last_start:
        from trainctl.runs.status import parse_time

        t = parse_time(last_start)
        started = t.timestamp() if t else started
    title = f"{info.name} · {info.algorithm} · attempt {attempt['n']}"
    view = RunView(run_dir, attempt, info.family, title, out=out, terminal=terminal, attach=True, started=started)
    with view:
        while info.alive:
            time.sleep(1.0)
            info = read_run(run_dir)
    return info
