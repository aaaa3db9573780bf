"""hardware.launcher=ray_cluster: supervised here like a local run; the trainer joins a running Ray cluster.

verl's main_ppo (and sft_trainer_ray, and trainctl's TRL entry point with --ray) call ray.init(), which joins the
cluster named by RAY_ADDRESS. Only the driver runs here: stopping the run stops the driver, and Ray ends the
driver's workers on the cluster with it.
"""

from __future__ import annotations

import re
import time

from trainctl.errors import Problem
from trainctl.launchers import register
from trainctl.launchers.local import Local

# the trainer's words when a peer of the run went away, with its node or its process (Ray's actor errors; gloo's and
# NCCL's when a collective's peer is gone): then the cluster's GCS is asked which node died, if one did
_UNREACHABLE = re.compile(
    r"ActorUnavailableError|ActorDiedError|RayActorError|NodeDiedError|Socket closed|Connection closed by peer"
    r"|Connection reset by peer|NCCL error|collective operation timeout"
)
# how long the cluster's GCS may take to mark a lost node dead (Ray's health check: 16 s measured, 3 s x 5 misses)
NODE_DEATH_WAIT = 30.0


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

    def explain(self, job, started: float, tail: list[str]) -> tuple[str, str, str] | None:
        """A run that failed because an actor went away: the cluster's nodes that died since the attempt started,
        as its GCS records them (waiting for its health check to notice, up to NODE_DEATH_WAIT seconds)."""
        address = (job.env.get("RAY_ADDRESS") or "").removeprefix("ray://")
        if not address or not _UNREACHABLE.search("\n".join(tail)):
            return None
        deadline = time.monotonic() + NODE_DEATH_WAIT
        while True:
            lost = lost_nodes(address, started)
            if lost or time.monotonic() >= deadline:
                break
            time.sleep(2)
        if not lost:
            return None
        return (
            f"a node of the Ray cluster at {address} was lost, with the run's workers on it: " + "; ".join(lost),
            "`ray status` on the head shows the nodes that are left; resume when the cluster has what the run needs "
            "(or on another cluster: hardware.ray_address=...)",
            "a Ray node was lost",
        )


def lost_nodes(address: str, since: float) -> list[str]:
    """The cluster's nodes that died since `since` (epoch seconds), in words, from its GCS; [] if it cannot say."""
    try:
        from ray._raylet import GcsClient

        found = GcsClient(address=address).get_all_node_info(timeout=10)
    except Exception:  # Ray's client: a connection error, a timeout (the head itself may be gone)
        return []
    out = []
    for n in found.values():
        if n.state != 1 or n.end_time_ms / 1000 < since:  # GcsNodeInfo.DEAD, since the attempt started
            continue
        when = time.strftime("%H:%M:%S", time.localtime(n.end_time_ms / 1000))
        why = n.death_info.reason_message or "its raylet stopped"
        out.append(f"{n.node_manager_address} (node {n.node_id.hex()[:8]}) at {when}: {why}")
    return out
