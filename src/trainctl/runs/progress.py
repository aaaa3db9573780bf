"""Where a run stands, from what it writes: steps done of the total, time per step, ETA, throughput, the key
metrics with their recent trend, and alerts. Fed by the metrics JSONL as it grows and by the log's lines."""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from trainctl.runs.alerts import Alert, check_line, check_step
from trainctl.runs.keys import KeyMetric, key_metrics
from trainctl.runs.tail import console_metrics

# the trainer's own count of its steps: verl's SFT ("Total steps: 8") and main_ppo ("Total training steps: 8")
_TOTAL = re.compile(r"Total (?:training )?steps: (\d+)\b")
# how many recent step intervals the time per step is the median of
RECENT = 8
# an alert of one kind is shown again only after this many steps (a run where every step has it says so once)
REPEAT_EVERY = 10


@dataclass
class Shown:
    label: str
    name: str
    value: float | None
    trend: list[float]
    lower_is_better: bool | None


@dataclass
class Progress:
    family: str | None
    total: int | None = None
    started: float = field(default_factory=time.time)  # wall-clock start of the attempt
    metrics: dict[int, dict] = field(default_factory=dict)
    arrived: dict[int, float] = field(default_factory=dict)  # step -> wall time it was seen
    backlog: set[int] = field(default_factory=set)  # steps read at once when attaching: no timing from them
    alerts: list[Alert] = field(default_factory=list)
    phase: str = "starting"
    on_alert: Callable[[Alert], None] | None = None
    # take metrics from verl's console lines in the log: when the metrics file is not here (a Ray job's node)
    console_source: bool = True
    _last_alert: dict[str, int] = field(default_factory=dict)

    # -- feeding ------------------------------------------------------------------------------------------------

    def add_metrics(self, records: list[tuple[int, dict]], now: float | None = None, backlog: bool = False) -> None:
        now = time.time() if now is None else now
        for step, data in records:
            new = step not in self.metrics
            self.metrics.setdefault(step, {}).update(data)
            if new:
                self.arrived[step] = now
                if backlog:
                    self.backlog.add(step)
                self.phase = "training"
                for alert in check_step(self.family, step, self.metrics):
                    self._alert(alert, step)

    def add_line(self, line: str, now: float | None = None, backlog: bool = False) -> None:
        m = _TOTAL.search(line)
        if m and int(m.group(1)) > 0:
            self.total = int(m.group(1))
        alert = check_line(line)
        if alert:
            self._alert(alert, self.done)
        if self.console_source:
            rec = console_metrics(line)
            if rec:
                self.add_metrics([rec], now, backlog=backlog)

    def _alert(self, alert: Alert, step: int | None) -> None:
        last = self._last_alert.get(alert.kind)
        if last is not None and (step or 0) - last < REPEAT_EVERY:
            return
        self._last_alert[alert.kind] = step or 0
        self.alerts.append(alert)
        if self.on_alert:
            self.on_alert(alert)

    # -- reading ------------------------------------------------------------------------------------------------

    @property
    def done(self) -> int:
        return max(self.metrics) if self.metrics else 0

    @property
    def first(self) -> int:
        return min(self.metrics) if self.metrics else 0

    def elapsed(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.started)

    def seconds_per_step(self, now: float | None = None) -> float | None:
        """The recent median time per step: the trainer's own timing where it logs one (verl's PPO family),
        else the time between steps as they arrived (never the first step's, which includes the start-up)."""
        steps = sorted(self.metrics)
        timed = [self.metrics[s].get("timing_s/step") for s in steps[-RECENT:]]
        timed = [t for t in timed if isinstance(t, int | float) and t > 0]
        if timed:
            # the first step's includes warm-up: left out once there are others
            return statistics.median(timed[1:] if len(timed) > 1 and steps[0] == self.first else timed)
        live = [s for s in steps if s not in self.backlog]
        if len(live) >= 2:
            # the rate over the recent steps: the files are read every half second, so several steps may arrive
            # at once; from the last step back to the newest one that arrived earlier, at least RECENT steps back
            last = live[-1]
            earlier = [s for s in live[:-1] if self.arrived[s] < self.arrived[last]]
            if earlier:
                start = min(earlier[-1], live[max(0, len(live) - 1 - RECENT)])
                return (self.arrived[last] - self.arrived[start]) / (last - start)
        if self.backlog and self.done:
            # attached to a running run: its average so far (start-up included) until steps arrive live
            return self.elapsed(now) / max(1, len(self.metrics))
        return None

    def eta(self, now: float | None = None) -> float | None:
        per = self.seconds_per_step(now)
        if per is None or not self.total:
            return None
        return max(0, self.total - self.done) * per

    def tokens_per_second(self, now: float | None = None) -> float | None:
        if not self.metrics:
            return None
        steps = sorted(self.metrics)
        last = self.metrics[steps[-1]]
        per = self.seconds_per_step(now)
        if isinstance(last.get("perf/total_num_tokens"), int | float):  # verl PPO family: tokens this step
            timing = last.get("timing_s/step")
            seconds = timing if isinstance(timing, int | float) and timing > 0 else per
            return last["perf/total_num_tokens"] / seconds if seconds else None
        if per is None:
            return None
        if isinstance(last.get("train/global_tokens"), int | float):  # verl SFT: tokens this step
            return last["train/global_tokens"] / per
        tokens = [
            (s, self.metrics[s]["train/num_tokens"])
            for s in steps[-RECENT:]
            if isinstance(self.metrics[s].get("train/num_tokens"), int | float)
        ]
        if len(tokens) >= 2 and tokens[-1][0] > tokens[0][0]:  # TRL: a running total
            return (tokens[-1][1] - tokens[0][1]) / (tokens[-1][0] - tokens[0][0]) / per
        return None

    def shown(self, width: int = 12) -> list[Shown]:
        """The family's key metrics present in this run: latest value and recent values (oldest first)."""
        present = {k for m in self.metrics.values() for k in m}
        out = []
        for km in key_metrics(self.family, present):
            name = km.pick(present)
            if name is None:
                continue
            out.append(self._shown(km, name, width))
        return out

    def _shown(self, km: KeyMetric, name: str, width: int) -> Shown:
        values = [self.metrics[s][name] for s in sorted(self.metrics) if name in self.metrics[s]]
        numbers = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
        latest = values[-1] if values else None
        latest = latest if isinstance(latest, int | float) else None
        return Shown(km.label, name, latest, numbers[-width:], km.lower_is_better)


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fmt_value(value: float | None) -> str:
    if value is None:
        return "nan"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def trend_arrow(values: list[float]) -> str:
    """↑, ↓ or → comparing the recent values' last third with their first third."""
    if len(values) < 2:
        return " "
    third = max(1, len(values) // 3)
    a, b = sum(values[:third]) / third, sum(values[-third:]) / third
    scale = max(abs(a), abs(b), 1e-12)
    if abs(b - a) / scale < 0.01:
        return "→"
    return "↑" if b > a else "↓"
