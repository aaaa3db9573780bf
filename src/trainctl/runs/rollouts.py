"""A run's trajectories (rollouts/N.jsonl) as turns: what `trainctl runs rollouts` shows.

verl writes each step's trajectories as flat text (`input`, `output`) with their `score`; in a run with tools,
trainctl adds `turns` to each line (trainctl.runtime.trajectories): the user's question, each assistant turn with
its tool calls, each tool result. A line without turns (a run without tools, an older run) is shown as verl's text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.errors import TrainctlError

ROLLOUTS = "rollouts"
# what verl's tool loop, or trainctl's tools, answer the model when a call failed
ERROR_STARTS = ("Error:", "Error executing tool", "Unknown function", "Invalid JSON in arguments")


@dataclass
class Trajectory:
    step: int
    index: int  # its line in the step's file
    score: float | None
    uid: str | None
    turns: list[dict] = field(default_factory=list)  # empty: verl's flattened text only
    prompt: str = ""
    response: str = ""
    ground_truth: object = None

    @property
    def tool_errors(self) -> int:
        return sum(
            1 for t in self.turns if t.get("role") == "tool" and str(t.get("content", "")).startswith(ERROR_STARTS)
        )

    @property
    def tool_calls(self) -> int:
        return sum(len(t.get("tool_calls") or []) for t in self.turns)


def steps(run_dir: Path) -> list[int]:
    """The steps with a rollout dump, in order."""
    folder = Path(run_dir) / ROLLOUTS
    return sorted(int(p.stem) for p in folder.glob("*.jsonl") if p.stem.isdigit())


def read_step(run_dir: Path, step: int | None = None) -> list[Trajectory]:
    """The trajectories of one step (the last dumped when `step` is None); a line cut mid-write is skipped."""
    found = steps(run_dir)
    if not found:
        raise TrainctlError(
            f"{run_dir} has no trajectories: no {ROLLOUTS}/N.jsonl.",
            hint="runs with tools dump them (trainer.rollout_data_dir); any PPO-family run can: "
            f"trainer.rollout_data_dir={Path(run_dir) / ROLLOUTS}",
        )
    if step is None:
        step = found[-1]
    if step not in found:
        raise TrainctlError(
            f"{run_dir} has no trajectories of step {step}.",
            hint=f"steps with trajectories: {', '.join(map(str, found))}",
        )
    out = []
    path = Path(run_dir) / ROLLOUTS / f"{step}.jsonl"
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        score = row.get("score")
        out.append(
            Trajectory(
                step=int(row.get("step", step)),
                index=i,
                score=float(score) if isinstance(score, int | float) else None,
                uid=row.get("uid"),
                turns=list(row.get("turns") or []),
                prompt=str(row.get("input", "")),
                response=str(row.get("output", "")),
                ground_truth=row.get("gts"),
            )
        )
    return out


def select(
    trajectories: list[Trajectory], best: bool = False, worst: bool = False, errors: bool = False
) -> list[Trajectory]:
    """The trajectories to show: those with a failed tool call (`errors`), sorted by reward (`best` first or
    `worst` first), or as dumped."""
    chosen = [t for t in trajectories if t.tool_errors] if errors else list(trajectories)
    if best or worst:
        chosen.sort(key=lambda t: (t.score is None, -(t.score or 0.0) if best else (t.score or 0.0)))
    return chosen


def call_text(call: dict) -> str:
    """A tool call as `name(key=value, ...)`."""
    arguments = call.get("arguments")
    if isinstance(arguments, dict):
        inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    else:
        inner = json.dumps(arguments, ensure_ascii=False) if arguments is not None else ""
    return f"{call.get('name')}({inner})"
