"""`trainctl runs compare` and `runs plot` on two real SFT runs that differ in known settings."""

from __future__ import annotations

import re

from tests.real_runs import SFT_STEPS
from trainctl.metrics import read_metrics, series


def test_compare_shows_exactly_the_keys_that_differ_and_the_metrics(cli, sft_run, sft_ws2_run):
    # sft: recipe=quickstart run.save_every=16 logger=console; sft-ws2: recipe=quickstart data.train_max_samples=128
    # hardware.micro_batch_size_per_gpu=8 run.epochs=1 hardware.gpus_per_node=2 run.save_every=2 run.val_every=2
    # logger=[wandb,tensorboard]
    result = cli("runs", "compare", str(sft_run.path), str(sft_ws2_run.path))
    assert result.exit_code == 0, result.output
    out = result.stdout
    table = out.split("\n\n")[0].splitlines()
    assert re.match(r"\d+ config keys differ \(\d+ are the same\):", table[0]), table[0]
    assert table[1].split() == ["config", "key", "sft", "sft-ws2"]
    keys = {line.split()[0] for line in table[2:] if not line.startswith("Also different")}
    assert keys == {
        "hardware.gpus_per_node",
        "hardware.micro_batch_size_per_gpu",
        "logger.name",
        "logger.backends",
        "logger.env",
        "logger.destinations",  # {} in sft; sft-ws2 has the two below
        "logger.destinations.wandb.env",
        "logger.destinations.tensorboard.env",
        "run.epochs",
        "run.save_every",
        "run.val_every",
        "verl.data.micro_batch_size_per_gpu",
        "verl.data.train_max_samples",
        "verl.trainer.logger",
        "verl.trainer.n_gpus_per_node",
        "verl.trainer.total_epochs",
        "verl.trainer.save_freq",
        "verl.trainer.test_freq",
    }, table
    row = next(line for line in table if line.startswith("run.epochs"))
    assert row.split()[1:] == ["3", "1"]
    by_name = next(line for line in out.splitlines() if line.startswith("Also different"))
    for key in ("run.name", "run.dir", "verl.trainer.experiment_name", "verl.trainer.default_local_dir"):
        assert key in by_name
    metrics = out.split("\n\n")[1]
    loss = next(line for line in metrics.splitlines() if line.startswith("train/loss"))
    last = [series(read_metrics(r.path), "train/loss")[-1][1] for r in (sft_run, sft_ws2_run)]
    assert loss.split()[1:] == [f"{v:.4g}" for v in last]
    assert re.search(rf"^steps\s+{SFT_STEPS}/{SFT_STEPS}\s+4/4$", metrics, re.M), metrics


def test_plot_writes_a_png_with_both_runs_and_a_terminal_chart(cli, sft_run, sft_ws2_run, tmp_path):
    from PIL import Image

    out = tmp_path / "loss.png"
    result = cli("runs", "plot", str(sft_run.path), str(sft_ws2_run.path), "-m", "train/loss", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert f"Wrote {out}" in result.stdout
    image = Image.open(out).convert("RGB")
    assert image.size == (800, 320)
    pixels = list(image.getdata())
    assert sum(p != (255, 255, 255) for p in pixels) > 5000, "axes, labels and lines are drawn"
    # matplotlib's first two colours: one line per run
    blue, orange = (31, 119, 180), (255, 127, 14)
    near = lambda p, c: sum(abs(a - b) for a, b in zip(p, c, strict=True)) < 30  # noqa: E731
    assert sum(near(p, blue) for p in pixels) > 100 and sum(near(p, orange) for p in pixels) > 100

    chart = cli("runs", "plot", str(sft_run.path), str(sft_ws2_run.path), "-m", "train/loss")
    assert chart.exit_code == 0, chart.output
    lines = chart.stdout.splitlines()
    assert lines[0] == "train/loss" and "● sft" in chart.stdout and "x sft-ws2" in chart.stdout
    plotted = lines[1:-4]  # the rows, without the axis, its labels and the legend
    # the 4 steps of sft-ws2 fall in the first columns, where sft's line may cover some of them
    assert 1 <= sum(line.count("x") for line in plotted) <= 4 and sum(line.count("●") for line in plotted) >= 10

    wrong = cli("runs", "plot", str(sft_run.path), "-m", "train/los")
    assert wrong.exit_code == 1
    assert "Error: sft never logged the metric 'train/los'." in wrong.stderr
    assert "Did you mean 'train/loss'?" in wrong.stderr
