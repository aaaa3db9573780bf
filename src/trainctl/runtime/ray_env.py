"""Ray's runtime-environment hook (RAY_RUNTIME_ENV_HOOK=trainctl.runtime.ray_env.hook) for a trainer whose driver
joins a running Ray cluster (hardware.launcher=ray_cluster, slurm).

The cluster's workers were started elsewhere (`ray start`) and do not inherit the driver's environment, as the
workers of a Ray the driver starts itself do: without the run's own variables (VERL_PLATFORM, the metrics file,
trainctl's reward and tool metrics) verl's task runner on a CPU cluster said "Total available GPUs 0 is less than total
desired GPUs 2". ray.init() passes the driver's runtime_env through this hook; it adds the variables TRAINCTL_RAY_ENV
names (those set, and never over one the trainer set itself), for every trainer alike: verl's main_ppo and
sft_trainer_ray, TRL under Ray Train. No secret is among them (trainctl.launch.runner leaves secrets out: Ray shows
a job's runtime_env to every holder of the cluster's token).
"""

from __future__ import annotations

import os
from typing import Any

NAMES = "TRAINCTL_RAY_ENV"


def hook(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(runtime_env or {})
    names = [n for n in os.environ.get(NAMES, "").split(",") if n and n in os.environ]
    given = dict(out.get("env_vars") or {})
    out["env_vars"] = {**{n: os.environ[n] for n in names}, **given}
    return out
