"""The tool metrics hook: pinned to the verl source it wraps, installed only for runs with tools, and adding the
step's call figures (tests/runtime/test_python_tool.py checks the figures from a real tool loop's calls)."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from types import SimpleNamespace

from trainctl.runtime import tool_metrics

# sha256 of the source of what the hook wraps, in verl 0.9.1
PINNED = {
    "PPOTrainer._compute_metrics": "9c5c555787889555c5bd77e59f57b87d03a08e0449903a63e26186d6f511fcec",
    "PPOTrainer._validate": "f1d58a70e91d7883d78f827c5fb583094ae307c85f6e50ec7a6b4e44092f5bfa",
}


def _source(name: str) -> str:
    owner = importlib.import_module(tool_metrics.MODULE)
    *path, attr = name.split(".")
    for p in path:
        owner = getattr(owner, p)
    fn = tool_metrics.original(name) or getattr(owner, attr)
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()


def test_what_the_hook_wraps_is_what_it_was_written_for():
    assert set(PINNED) == set(tool_metrics.WRAPPED)
    for name, digest in PINNED.items():
        assert _source(name) == digest, f"verl changed {name}: review the tool metrics"


def test_the_step_gets_its_calls_and_validation_keeps_its_own(tmp_path, monkeypatch):
    class Trainer:
        def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
            metrics["verl"] = 1.0

        def _validate(self):
            (tmp_path / "calls-9.jsonl").open("a").write(json.dumps({"tool": "c", "error": True}) + "\n")
            return {"val-core/acc": 0.5}

    monkeypatch.setenv(tool_metrics.ENV, str(tmp_path))
    monkeypatch.setattr(tool_metrics, "_INSTALLED", {})
    module = SimpleNamespace(PPOTrainer=Trainer)
    tool_metrics._patch(module)
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


def test_the_plugin_wraps_the_trainer_only_for_runs_with_tools(plugin_probe):
    assert plugin_probe()["validate"] == "verl.trainer.ppo.v1.trainer_base"
    assert plugin_probe(**{tool_metrics.ENV: "calls"})["validate"] == "trainctl.runtime.tool_metrics"
