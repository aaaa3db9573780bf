"""verl's vLLM rollout on vLLM's CPU build, probed in a process that imports verl for the first time (a fork of the
tests' zygote, tests/runtime/probe_zygote.py: verl's version check runs once, at import (verl/third_party/vllm), and
the replica registry is filled as verl.workers.rollout.replica is imported). argv[1]: the platform (VERL_PLATFORM);
one line per fact (tests/runtime/test_vllm_cpu.py)."""

import importlib.metadata as m
import os
import sys

os.environ["VERL_PLATFORM"] = sys.argv[1]
if sys.argv[1] != "cpu":
    # without trainctl's alias, verl's version check finds no `vllm` distribution (the CPU build is `vllm-cpu`)
    try:
        import verl.third_party.vllm  # noqa: F401  (its version check is what is probed)

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
    import vllm.model_executor.models.registry as registry
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    print(registry._run_in_subprocess(os.getpid) == os.getpid())
    # its sampler's compiled functions run eagerly for a small vocabulary: the draw (a 50/50 choice in every other
    # row) and the ranks of the sampled tokens compile nothing
    import torch
    import torch._dynamo.utils as dynamo_utils
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
