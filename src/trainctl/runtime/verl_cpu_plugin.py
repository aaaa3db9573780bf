"""trainctl's verl plugin (entry point group `verl.plugins`): lets verl 0.9.1 train without a GPU.

verl loads every `verl.plugins` entry point at the end of `import verl`, in each process it starts (torchrun
ranks, Ray workers). This module does nothing unless the process asks for the CPU platform with
VERL_PLATFORM=cpu, which trainctl sets for hardware=cpu: on GPU machines verl is untouched, but for the reward metrics
trainctl adds to the training log when TRAINCTL_REWARD_KIND is set (trainctl.runtime.reward_metrics).
"""

import os

if os.environ.get("TRAINCTL_REWARD_KIND"):
    # reward metrics in the training log (trainctl.runtime.reward_metrics): GPU runs too
    from trainctl.runtime.reward_metrics import install as _install_reward_metrics

    _install_reward_metrics()

if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    try:
        from trainctl.runtime.verl_cpu import install

        install()
    except Exception as e:  # verl swallows plugin errors at debug level: say it where the run's log shows it
        import sys

        print(f"trainctl: could not set up verl's CPU platform: {e}", file=sys.stderr, flush=True)
        raise
