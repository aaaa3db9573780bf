"""verl's vLLM rollout on vLLM's CPU build: the pieces that make it run (the whole rollout runs in
tests/launch/test_vllm_rollout.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBE = Path(__file__).parent / "vllm_cpu_probe.py"


@pytest.fixture(scope="module")
def vllm_probe(probe_zygote, tmp_path_factory):
    """probe(platform) -> what tests/runtime/vllm_cpu_probe.py printed on that platform: one process a platform,
    whichever test asks first."""
    done: dict[str, list[str]] = {}

    def probe(platform: str) -> list[str]:
        if platform not in done:
            out = tmp_path_factory.mktemp("vllm-probe") / "out.txt"
            done[platform] = probe_zygote.run({}, out, PROBE, (platform,)).split()
        return done[platform]

    return probe


def test_on_the_cpu_platform_the_cpu_build_answers_for_vllm_and_its_replica_is_registered(vllm_probe):
    """vLLM's CPU build answers as `vllm`, trainctl's plugin has it inspect models in the process and sample a small
    vocabulary without compiling, the rollout's server forks its engine's process rather than spawn it, and verl's
    replica is trainctl's."""
    assert vllm_probe("cpu") == [
        "0.31.0+cpu", "True", "0.31.0+cpu", "True", "True,2,512,0", "spawn,fork,spawn", "CPUvLLMReplica",
    ]  # fmt: skip


def test_without_the_alias_verl_refuses_the_cpu_build(vllm_probe):
    assert vllm_probe("")[0] == "refused:vllm_version_None_not_supported"


def test_on_another_platform_verls_own_replica_stays(vllm_probe):
    assert vllm_probe("")[1:] == ["verl.workers.rollout.replica"]
