"""The backend's own validation: its verdicts are cached per config, whatever the run is named, with their warnings."""

from __future__ import annotations

import warnings

import pytest

from trainctl.checks.native import _container, _fingerprint
from trainctl.plan import resolve


@pytest.mark.parametrize(
    "args",
    [
        ["recipe=agent-arith-tiny-cpu"],  # the PPO family; its tool config lives in the run folder
        ["recipe=quickstart"],
        ["recipe=dpo-arith-tiny-cpu"],
    ],
)
def test_a_verdict_holds_for_another_run_of_the_same_config_but_not_for_another_config(args, isolated):
    def key(*more: str) -> str:
        subject = resolve([*args, *more]).subject
        return _fingerprint(subject, _container(subject))

    one = key("run.name=one")
    assert key("run.name=two") == one
    assert key("run.name=one", "run.dir=elsewhere/one") == one
    assert key("run.name=one", "run.seed=7") != one


@pytest.mark.parametrize(
    "args",
    [
        ["algorithm=grpo"],
        ["algorithm=ppo"],
        ["algorithm=grpo", "actor_rollout_ref.actor.use_kl_loss=false"],
        ["algorithm=grpo", "actor_rollout_ref.actor.use_kl_loss=false", "algorithm.use_kl_in_reward=true"],
        ["algorithm=ppo", "critic.enable=false"],
        ["algorithm=grpo", "critic.enable=true"],
    ],
)
def test_the_reference_and_critic_are_decided_as_main_ppo_decides_them(args, isolated):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    from trainctl.checks.native import needs

    cfg = OmegaConf.create(_container(resolve(args).subject))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # need_critic's "Disabled critic as algorithm.adv_estimator != gae"
        assert needs(cfg) == (need_reference_policy(cfg), need_critic(cfg))


def test_a_verdict_keeps_its_warnings_and_a_damaged_one_is_validated_again(isolated, monkeypatch, tmp_path):
    from trainctl.checks import native

    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "cache"))
    subject = resolve(["algorithm=grpo", "model=qwen2.5-7b"]).subject  # no model files: a warning
    calls = []
    real = native.BY_BACKEND["verl-ppo"]
    monkeypatch.setitem(native.BY_BACKEND, "verl-ppo", lambda s, r: calls.append(1) or real(s, r))
    first = native.validate(subject)
    assert [p.severity for p in first] == ["warning"]
    assert native.validate(subject) == first and len(calls) == 1
    (verdict,) = (tmp_path / "cache" / "validated").iterdir()
    verdict.write_text("{damaged")
    assert native.validate(subject) == first and len(calls) == 2
    assert native.validate(subject, use_cache=False) == first and len(calls) == 3
