"""Whether a cluster can host a run: enough nodes, each with the GPUs (or, on cpu, the CPUs) the run puts on it.

The launchers that start on a cluster ask it for its nodes (a Ray cluster's GCS, a Slurm partition) and check them
here before anything starts; `trainctl doctor` shows the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainctl.errors import Problem


@dataclass
class Node:
    name: str
    cpus: int
    gpus: int


def problems(hw, nodes: list[Node], where: str, cpus: int | None = None, beside: int = 0) -> list[Problem]:
    """What keeps `where` from hosting hardware `hw`: hw.nnodes nodes, each with hw.gpus_per_node GPUs (cuda) or CPUs
    for as many training processes (cpu) and `beside` more, and `cpus` CPUs a node when the run asks for them."""
    gpu = hw.device == "cuda"
    kind = "GPU" if gpu else "CPU"
    want = hw.gpus_per_node + (0 if gpu else beside)
    if len(nodes) < hw.nnodes:
        return [
            Problem(
                f"hardware.nnodes = {hw.nnodes}: {where} has {len(nodes)} node(s) up.",
                key="hardware.nnodes",
                hint=f"hardware.nnodes={max(1, len(nodes))}, or a larger cluster",
            )
        ]
    have = [n.gpus if gpu else n.cpus for n in nodes]
    fit = [h for h in have if h >= want]
    out = []
    if len(fit) < hw.nnodes:
        most = max(have, default=0)
        out.append(
            Problem(
                f"hardware={hw.name} puts {hw.gpus_per_node} {'GPU' if gpu else 'training process'}(es) on each of "
                f"{hw.nnodes} node(s){_beside(gpu, beside)}; {where} has {len(fit)} node(s) with {want} {kind}s or "
                f"more ({kind}s a node: {', '.join(map(str, have))}).",
                key="hardware.gpus_per_node",
                hint=f"hardware.gpus_per_node={most - (0 if gpu else beside)}"
                if most - (0 if gpu else beside) >= 1
                else f"nodes with more {kind}s (Ray counts what `ray start --num-cpus` gives)",
            )
        )
    if cpus and sum(n.cpus >= cpus for n in nodes) < hw.nnodes:
        out.append(
            Problem(
                f"hardware.slurm.cpus_per_node = {cpus}: {where} has {sum(n.cpus >= cpus for n in nodes)} node(s) "
                f"with that many CPUs (CPUs a node: {', '.join(str(n.cpus) for n in nodes)}).",
                key="hardware.slurm.cpus_per_node",
                hint=f"hardware.slurm.cpus_per_node={max(n.cpus for n in nodes)}",
            )
        )
    return out


def _beside(gpu: bool, beside: int) -> str:
    if gpu or not beside:
        return ""
    return f", and verl's other actors need {beside} CPUs beside them on any node"


def describe(nodes: list[Node]) -> str:
    """The nodes in one line, for doctor: '2 node(s): node1 (2 CPUs), node2 (2 CPUs, 8 GPUs)'."""

    def one(n: Node) -> str:
        return f"{n.name} ({n.cpus} CPUs" + (f", {n.gpus} GPUs)" if n.gpus else ")")

    return f"{len(nodes)} node(s): " + ", ".join(one(n) for n in nodes)


def ray_nodes(address: str) -> list[Node]:
    """A running Ray cluster's alive nodes, from its GCS at HOST:PORT (Ray's own client: no driver, no dashboard)."""
    from ray._raylet import GcsClient

    found = GcsClient(address=address.removeprefix("ray://")).get_all_node_info(timeout=15)
    alive = [n for n in found.values() if n.state == 0]  # GcsNodeInfo.ALIVE
    return [
        Node(n.node_manager_address or n.node_id.hex()[:8], int(dict(n.resources_total).get("CPU", 0)),
             int(dict(n.resources_total).get("GPU", 0)))
        for n in alive
    ]  # fmt: skip
