"""trainctl's verl plugin (entry point group `verl.plugins`): lets verl 0.9.1 train without a GPU.

verl loads every `verl.plugins` entry point at the end of `import verl`, in each process it starts (torchrun
ranks, Ray workers). This module does nothing unless the process asks for the CPU platform with
VERL_PLATFORM=cpu, which trainctl sets for hardware=cpu: on GPU machines verl is untouched.
"""

import os

if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    try:
        from trainctl.runtime.verl_cpu import install

        install()
    except Exception as e:  # verl swallows plugin errors at debug level: say it where the run's log shows it
        import sys

        print(f"trainctl: could not set up verl's CPU platform: {e}", file=sys.stderr, flush=True)
        raise
