"""hardware.launcher=ray_cluster: supervised here like a local run; the trainer joins a running Ray cluster.

verl's main_ppo (and sft_trainer_ray, and trainctl's TRL entry point with --ray) call ray.init(), which joins the
cluster named by RAY_ADDRESS. Only the driver runs here: stopping the run stops the driver, and Ray ends the
driver's workers on the cluster with it.
"""

from __future__ import annotations

from trainctl.launchers import register
from trainctl.launchers.local import Local


@register("ray_cluster")
class RayCluster(Local):
    description = "join a running Ray cluster (hardware.ray_address: its GCS address, HEAD_IP:6379)"
    ray = "join"
    address_example = "HEAD_IP:6379"

    def trainer_env(self, hw) -> dict[str, str]:
        # the driver's ray.init() joins the cluster named by RAY_ADDRESS
        return {"RAY_ADDRESS": str(hw.ray_address)} if hw.ray_address else {}

    def preflight(self, plan) -> list:
        return []  # the devices and the rollout engine are the cluster's
