"""hardware.launcher=ray_cluster: supervised here like a local run; the trainer joins a running Ray cluster.

verl's main_ppo (and sft_trainer_ray, and trainctl's TRL entry point with --ray) call ray.init(), which joins the
cluster named by RAY_ADDRESS. Only the driver runs here: stopping the run stops the driver, and Ray ends the
driver's workers on the cluster with it.
"""

from __future__ import annotations

from trainctl.errors import Problem
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

    def preflight(self, plan) -> list[Problem]:
        """The cluster's alive nodes can host the run: hardware.nnodes of them, each with the GPUs (on cpu, the
        CPUs) it puts there, and on cpu the CPUs a PPO-family run's TransferQueue actors hold on the head
        (trainctl.launchers.capacity.place). The rollout engine is the cluster's."""
        from trainctl.launchers.capacity import beside, problems, ray_nodes

        hw = plan.cfg.hardware
        if not hw.ray_address:
            return []  # config_problems says so
        try:
            nodes = ray_nodes(str(hw.ray_address))
        except Exception as e:  # Ray's client: a connection error, a timeout
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            return [
                Problem(
                    f"cannot reach the Ray cluster at {hw.ray_address}: {first}",
                    key="hardware.ray_address",
                    hint=f"`ray status` on the head node shows it; the address is its GCS's ({self.address_example})",
                )
            ]
        return problems(hw, nodes, f"the Ray cluster at {hw.ray_address}", beside=beside(plan.cfg))
