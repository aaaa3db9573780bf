"""Metrics over steps as a picture: a PNG (matplotlib) with several runs on one chart, or a chart in text."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

Series = list[tuple[int, float]]


def write_png(charts: dict[str, dict[str, Series]], out: Path) -> Path:
    """One panel per metric (charts: metric -> run name -> points), each run a line of its own colour."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(len(charts), 1, figsize=(8, 3.2 * len(charts)), squeeze=False)
    for ax, (metric, runs) in zip(axes[:, 0], charts.items(), strict=True):
        for name, points in runs.items():
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o" if len(points) < 30 else None, markersize=3, linewidth=1.5, label=name)
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


MARKS = "●x+o*#@%"


def text_chart(metric: str, runs: dict[str, Series], width: int = 70, height: int = 15) -> list[str]:
    """A chart in plain characters, one mark per run (written here: a terminal chart of a few lines needs no
    plotting library, and plain characters survive pipes and CI logs)."""
    points = [(x, y) for pts in runs.values() for x, y in pts if math.isfinite(y)]
    if not points:
        return [f"{metric}: no values"]
    x0, x1 = min(x for x, _ in points), max(x for x, _ in points)
    y0, y1 = min(y for _, y in points), max(y for _, y in points)
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    xspan = (x1 - x0) or 1
    grid = [[" "] * width for _ in range(height)]

    def cell(x: float, y: float) -> tuple[int, int]:
        col = round((x - x0) / xspan * (width - 1))
        row = height - 1 - round((y - y0) / (y1 - y0) * (height - 1))
        return row, col

    for mark, pts in zip(MARKS, runs.values(), strict=False):
        pts = sorted((x, y) for x, y in pts if math.isfinite(y))
        # the line between consecutive points, one value per column, then the points themselves on top
        for (xa, ya), (xb, yb) in itertools.pairwise(pts):
            ca, cb = cell(xa, ya)[1], cell(xb, yb)[1]
            for c in range(ca + 1, cb):
                x = x0 + c / (width - 1) * xspan
                r, _ = cell(x, ya + (yb - ya) * (x - xa) / ((xb - xa) or 1))
                if grid[r][c] == " ":
                    grid[r][c] = "·"
        for x, y in pts:
            r, c = cell(x, y)
            grid[r][c] = mark
    label_w = max(len(f"{y1:.4g}"), len(f"{y0:.4g}"))
    lines = [metric]
    for i, row in enumerate(grid):
        label = f"{y1:.4g}" if i == 0 else f"{y0:.4g}" if i == height - 1 else ""
        lines.append(f"{label:>{label_w}} ┤{''.join(row)}")
    lines.append(" " * label_w + " └" + "─" * width)
    right = f"step {x1}"
    lines.append(" " * (label_w + 2) + f"step {x0}".ljust(width - len(right)) + right)
    for mark, name in zip(MARKS, runs, strict=False):
        lines.append(f"  {mark} {name}")
    return lines
