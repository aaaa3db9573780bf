"""trainctl's verl plugin (entry point group `verl.plugins`): lets verl 0.9.1 train without a GPU.

verl loads every `verl.plugins` entry point at the end of `import verl`, in each process it starts (torchrun
ranks, Ray workers). This module does nothing unless trainctl launched the process: with VERL_PLATFORM=cpu (which
trainctl sets for hardware=cpu) it installs the CPU platform; in a GPU run trainctl launched (TRAINCTL_LAUNCHED=1)
without the flash-attn package, it only lets verl's critic load with the attention the model asks for. A verl run
trainctl did not start is untouched, but for the reward metrics trainctl adds to the training log when
TRAINCTL_REWARD_KIND is set (trainctl.runtime.reward_metrics) and the tool metrics when TRAINCTL_TOOL_CALLS is
set (trainctl.runtime.tool_metrics), an environment's figures and curriculum when TRAINCTL_ENV is set
(trainctl.runtime.env_metrics) and an off-policy run's when TRAINCTL_OFFPOLICY is (trainctl.runtime.offpolicy_metrics),
with the trajectories' turns in the rollout dumps
(trainctl.runtime.trajectories).
"""

import os

# scikit-learn, which transformers imports for nothing trainctl uses (2.4 s in each of a run's processes), and vLLM in
# a run with no vLLM engine (trainctl.import_cost)
from trainctl.import_cost import skip_for_run as _skip_for_run

_skip_for_run()

_METRIC_SETS = ("TRAINCTL_REWARD_KIND", "TRAINCTL_TOOL_CALLS", "TRAINCTL_ENV", "TRAINCTL_OFFPOLICY")
if any(os.environ.get(v) for v in _METRIC_SETS):
    # reward, tool, environment and off-policy metrics in the training log (trainctl.runtime.reward_metrics,
    # .tool_metrics, .env_metrics, which moves an environment's curriculum too, .offpolicy_metrics): GPU runs too
    from trainctl.runtime.verl_patches import apply_metrics as _apply_metrics

    _apply_metrics()

if os.environ.get("TRAINCTL_TOOL_CALLS"):
    # trajectories as turns in the rollout dumps (trainctl.runtime.trajectories): runs with tools
    from trainctl.runtime.verl_patches import apply_trajectories as _apply_trajectories

    _apply_trajectories()

if os.environ.get("TRAINCTL_LAUNCHED") == "1":
    # torch, transformers and verl are loaded by now (verl loads its plugins last): out of the collector's way, so each
    # full collection (verl's aggressive_empty_cache runs one at each epoch and checkpoint) walks only what the run made
    # since, and what the process loads later loads with the collector paused (trainctl.import_cost)
    from trainctl.import_cost import freeze_loaded, pause_collector_for_heavy_loads

    freeze_loaded()
    pause_collector_for_heavy_loads()

if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    try:
        from trainctl.runtime.verl_cpu import install

        install()
    except Exception as e:  # verl swallows plugin errors at debug level: say it where the run's log shows it
        import sys

        print(f"trainctl: could not set up verl's CPU platform: {e}", file=sys.stderr, flush=True)
        raise
elif os.environ.get("TRAINCTL_LAUNCHED") == "1":
    from trainctl.runtime import verl_patches

    if not verl_patches.flash_attn_installed():
        verl_patches.apply(only=verl_patches.GPU_WITHOUT_FLASH_ATTN)
