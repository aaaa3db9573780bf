"""reward=judge: translated into trainctl's reward manager and the settings it reads inside the run (never a key)."""

from __future__ import annotations

from pathlib import Path

from trainctl.backends.rewards.judge import TEMPLATES_DIR
from trainctl.plan import resolve

GRPO = ["recipe=grpo-arith-tiny-cpu"]


def test_an_endpoint_judge_is_named_as_the_endpoint_serves_it(monkeypatch):
    monkeypatch.setenv("JUDGE_API_KEY", "sk-never-saved")
    plan = resolve([*GRPO, "reward=judge", "reward.judge=gpt-4.1-mini", "reward.url=https://api.openai.com/v1",
                    "reward.key_env=JUDGE_API_KEY", "reward.mode=single", "reward.timeout_s=30"])  # fmt: skip
    leaves = plan.built.leaves
    assert leaves["reward.reward_manager.name"] == "JudgeRewardManager"
    assert leaves["reward.reward_manager.module.path"] == "pkg://trainctl.runtime.judge"
    settings = {k.removeprefix("reward.reward_kwargs.trainctl."): v for k, v in leaves.items() if ".trainctl." in k}
    assert settings["model"] == "gpt-4.1-mini" and settings["serve"] is False
    assert settings["key_env"] == "JUDGE_API_KEY" and settings["timeout_s"] == 30
    assert settings["template"] == str(TEMPLATES_DIR / "single.jinja")
    assert "sk-never-saved" not in plan.backend_yaml()


def test_a_local_judge_is_served_from_its_folder(tmp_path):
    template = tmp_path / "mine.jinja"
    template.write_text("{{ response }}")
    plan = resolve([*GRPO, "reward=judge", "reward.judge=qwen3-0.6b", f"reward.template={template}"])
    leaves = plan.built.leaves
    assert leaves["reward.reward_kwargs.trainctl.serve"] is True
    assert Path(leaves["reward.reward_kwargs.trainctl.model"]).name == "qwen3-0.6b"
    assert leaves["reward.reward_kwargs.trainctl.template"] == str(template)
    assert TEMPLATES_DIR.is_dir() and sorted(p.name for p in TEMPLATES_DIR.iterdir()) == ["group.jinja", "single.jinja"]
