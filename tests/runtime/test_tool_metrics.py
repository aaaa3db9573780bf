"""The tool metrics: the step's call figures, added to the training log by trainctl.runtime.verl_patches for runs
with tools (the hook's pins and installation are tested in tests/runtime/test_verl_patches.py;
tests/runtime/test_python_tool.py checks the figures from a real tool loop's calls)."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

from trainctl.runtime import verl_patches
from trainctl.runtime.reward_metrics import RewardMetrics
from trainctl.runtime.tool_metrics import ToolMetrics


def test_the_step_gets_its_calls_and_validation_keeps_its_own(tmp_path, monkeypatch):
    class Trainer:
        def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
            metrics["verl"] = 1.0

        def _validate(self):
            (tmp_path / "calls-9.jsonl").open("a").write(json.dumps({"tool": "c", "error": True}) + "\n")
            return {"val-core/acc": 0.5}

    monkeypatch.delenv(RewardMetrics.ENV, raising=False)
    monkeypatch.setenv(ToolMetrics.ENV, str(tmp_path))
    # this process's patches and metric sets, fresh for the test and restored after it
    monkeypatch.setattr(verl_patches, "_APPLIED", {})
    monkeypatch.setattr(verl_patches, "metric_sets", functools.cache(verl_patches.metric_sets.__wrapped__))
    module = SimpleNamespace(PPOTrainer=Trainer)
    wanted = tuple((verl_patches.TRAINER, func) for func in ToolMetrics.WRAPS)
    verl_patches._patch_module(module, wanted, name=verl_patches.TRAINER)
    (tmp_path / "calls-1.jsonl").write_text(json.dumps({"tool": "c", "error": False, "trajectory": "t1"}) + "\n")
    trainer = Trainer()
    val = trainer._validate()
    assert val["val-tool/calls"] == 1.0 and val["val-tool/error_share"] == 1.0
    metrics: dict = {}
    batch = SimpleNamespace(tags=[{}, {}, {}, {"is_padding": True}])
    trainer._compute_metrics(batch, metrics, {}, 1, 0)
    assert metrics["verl"] == 1.0
    assert metrics["tool/calls"] == 1.0 and metrics["tool/calls_per_trajectory"] == 1 / 3
    assert metrics["tool/error_share"] == 0.0
