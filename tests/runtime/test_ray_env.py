"""trainctl.runtime.ray_env: Ray's runtime-environment hook gives a cluster's workers the variables the run names."""

from __future__ import annotations

from trainctl.runtime.ray_env import hook


def test_the_named_variables_that_are_set_join_the_drivers_runtime_env(monkeypatch):
    monkeypatch.setenv("TRAINCTL_RAY_ENV", "VERL_PLATFORM,TRAINCTL_METRICS_PATH,TRAINCTL_NOT_SET")
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    monkeypatch.setenv("TRAINCTL_METRICS_PATH", "/runs/x/metrics/attempt-1.jsonl")
    monkeypatch.delenv("TRAINCTL_NOT_SET", raising=False)
    # main_ppo's own runtime_env: its variables win over the run's, the rest of it is kept
    given = {"env_vars": {"TOKENIZERS_PARALLELISM": "true", "VERL_PLATFORM": "mine"}, "working_dir": None}
    assert hook(given) == {
        "env_vars": {
            "VERL_PLATFORM": "mine",
            "TRAINCTL_METRICS_PATH": "/runs/x/metrics/attempt-1.jsonl",
            "TOKENIZERS_PARALLELISM": "true",
        },
        "working_dir": None,
    }
    # sft_trainer_ray's ray.init() gives none
    metrics = "/runs/x/metrics/attempt-1.jsonl"
    assert hook(None) == {"env_vars": {"VERL_PLATFORM": "cpu", "TRAINCTL_METRICS_PATH": metrics}}


def test_without_names_nothing_is_added(monkeypatch):
    monkeypatch.delenv("TRAINCTL_RAY_ENV", raising=False)
    assert hook({"pip": ["x"]}) == {"pip": ["x"], "env_vars": {}}
