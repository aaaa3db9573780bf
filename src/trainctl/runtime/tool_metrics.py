"""Tool metrics in verl's training log (tools=...): per step, from the calls the run's tools recorded.

verl 0.9.1 logs the turns of each trajectory (`num_turns/mean|max|min`: assistant turns + tool-result turns + 1) and
the time spent in tools (`timing_s/agent_loop/tool_calls/*`), but drops what a tool returns beside its answer, so
it never says how many calls were made or how many failed. trainctl's tools (the MCP bridge and the Python function
tool) write one JSON line per call under <run>/tools/calls/ (one file per process); trainctl.runtime.verl_patches
wraps the trainer's `_compute_metrics` and `_validate` (pinned there with the other patches) and asks ToolMetrics
for, each step:

  tool/calls                    calls made while generating the step's batch
  tool/calls_per_trajectory     calls / trajectories in the batch
  tool/trajectories_with_calls  share of trajectories that called a tool at least once
  tool/errors, tool/error_share calls whose answer was an error (the tool raised, timed out, the server failed)
  tool/seconds_mean             mean time of a call, as the caller saw it
  tool/server_restarts          MCP servers started again (stdio) or reconnected (network) after they went away
  tool/<name>/calls             calls per tool

Calls made during validation are reported with the validation metrics (val-tool/*), not with the next step.
trainctl sets TRAINCTL_TOOL_CALLS (the calls folder) for runs with tools; its verl plugin applies the patch then.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path


class CallReader:
    """The call records appended to a folder's calls-*.jsonl files since the last read (whole lines only)."""

    def __init__(self, folder: str | Path, skip_existing: bool = False):
        self.folder = Path(folder)
        self._offsets: dict[Path, int] = {}
        self._lock = threading.Lock()
        if skip_existing:  # a resumed run: the calls of earlier attempts belong to their own steps
            for path in self.folder.glob("calls-*.jsonl"):
                with contextlib.suppress(OSError):
                    self._offsets[path] = path.stat().st_size

    def new_records(self) -> list[dict]:
        out: list[dict] = []
        with self._lock:
            for path in sorted(self.folder.glob("calls-*.jsonl")):
                start = self._offsets.get(path, 0)
                try:
                    with open(path, "rb") as f:
                        f.seek(start)
                        data = f.read()
                except OSError:
                    continue
                end = data.rfind(b"\n") + 1  # a line still being written is read next time
                self._offsets[path] = start + end
                for line in data[:end].splitlines():
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        continue
        return out


def call_metrics(records: list[dict], trajectories: int, prefix: str = "tool") -> dict[str, float]:
    """The figures of one step's calls (zeros when the model called nothing: a figure that disappears from the
    log would hide a model that stopped calling tools)."""
    calls = len(records)
    errors = sum(1 for r in records if r.get("error"))
    called = {r.get("trajectory") for r in records if r.get("trajectory") is not None}
    out = {
        f"{prefix}/calls": float(calls),
        f"{prefix}/calls_per_trajectory": calls / trajectories if trajectories else 0.0,
        f"{prefix}/trajectories_with_calls": len(called) / trajectories if trajectories else 0.0,
        f"{prefix}/errors": float(errors),
        f"{prefix}/error_share": errors / calls if calls else 0.0,
        f"{prefix}/seconds_mean": sum(float(r.get("seconds") or 0) for r in records) / calls if calls else 0.0,
        f"{prefix}/server_restarts": float(sum(1 for r in records if r.get("server_restart"))),
    }
    for name in sorted({str(r.get("tool")) for r in records}):
        out[f"{prefix}/{name}/calls"] = float(sum(1 for r in records if str(r.get("tool")) == name))
    return out


def _trajectories(batch) -> int:
    tags = getattr(batch, "tags", None)
    if tags:
        return sum(1 for tag in tags if not (isinstance(tag, dict) and tag.get("is_padding", False)))
    try:
        return len(batch)
    except TypeError:
        return 0


class ToolMetrics:
    """The tool set of figures trainctl.runtime.verl_patches adds to the training log: the calls recorded under
    `folder` since the last report (a resumed run's earlier calls belong to earlier steps)."""

    ENV = "TRAINCTL_TOOL_CALLS"
    # the verl functions whose output it adds to (trainctl.runtime.verl_patches.METRIC_PATCHES)
    WRAPS = ("PPOTrainer._compute_metrics", "PPOTrainer._validate")
    name = "tool"

    def __init__(self, folder: str | Path):
        self.reader = CallReader(folder, skip_existing=True)
        self.pending: list[dict] = []  # the training step's calls, read before a validation ran

    def step_metrics(self, batch, global_steps: int, metrics: dict) -> dict[str, float]:
        records = self.pending + self.reader.new_records()
        self.pending.clear()
        return call_metrics(records, _trajectories(batch))

    def before_validation(self) -> None:
        self.pending.extend(self.reader.new_records())

    def validation_metrics(self) -> dict[str, float]:
        # the validation batch's size is not known here: only the counts
        figures = call_metrics(self.reader.new_records(), 0, prefix="val-tool")
        return {k: v for k, v in figures.items() if "trajector" not in k}
