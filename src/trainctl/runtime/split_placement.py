"""Where verl's resource pools go on a cluster of cpu nodes, offpolicy=split's rollout pool included.

trainctl.runtime.verl_patches pins each node group of a training pool to a node of its own (cpu_nodes: on CPUs several
groups fit one node, and a run across nodes would not be). offpolicy=split adds verl's standalone rollout pools
(RolloutReplica.init_standalone: `rollout_pool_<replica>`, created after the training's): left to Ray, a rollout
group lands on any node with a CPU free, the training's node too, and split's layout (trainctl.config.offpolicy.
split_layout: on several nodes the rollout takes whole nodes of its own) would hold only when the cluster has no room
elsewhere. On a cluster of more than one node each rollout group is pinned to a node the training's groups do not use,
the one with the most CPUs left first.
"""

from __future__ import annotations

from collections.abc import Callable

ROLLOUT_POOL = "rollout_pool_"  # verl's standalone replicas' pools (verl/workers/rollout/replica.py)
TRAINING_POOL = "global_pool"  # the training's (verl/trainer/ppo/v1/trainer_base.py)


def pinned_nodes(pool, cpu_nodes: Callable[[int, int], list[str]]) -> list[str] | None:
    """Node ids for `pool`'s node groups, one a group; None: verl places it as it would (a one-node pool on a one-node
    cluster, or a training pool of one node group)."""
    store = list(pool._store)
    if str(pool.name_prefix).startswith(ROLLOUT_POOL):
        return rollout_nodes(len(store), max(store))
    return cpu_nodes(len(store), max(store)) if len(store) >= 2 else None


def rollout_nodes(groups: int, per_group: int) -> list[str] | None:
    """Nodes for a rollout pool's `groups` groups of `per_group` processes, away from the training's nodes; None on a
    one-node cluster, or where no such node has room (Ray then places it where it can)."""
    import ray
    from ray._private.state import available_resources_per_node
    from ray.util import placement_group_table

    alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    if len(alive) < 2:
        return None
    training = {
        node
        for pg in placement_group_table().values()
        if str(pg.get("name", "")).startswith(TRAINING_POOL) and pg.get("state") != "REMOVED"
        for node in (pg.get("bundles_to_node_id") or {}).values()
    }
    left = available_resources_per_node()
    room = sorted(
        (n for n in alive if n not in training and left.get(n, {}).get("CPU", 0) >= per_group),
        key=lambda n: -left.get(n, {}).get("CPU", 0),
    )
    return room[:groups] if len(room) >= groups else None
