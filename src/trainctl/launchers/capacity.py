"""Whether a cluster can host a run: its training processes placed on nodes of their own, with the GPUs (or, on cpu,
the CPUs) each group takes, and on cpu the CPUs verl's TransferQueue actors hold, on the head: as the run places them.

The launchers that start on a cluster ask it for its nodes (a Ray cluster's GCS, a Slurm partition) and check them
here before anything starts; `trainctl doctor` shows the same answer. A PPO-family run on cpu pins TransferQueue's
actors to the head and its training groups to nodes by place() (trainctl.runtime.verl_patches), so the check and
the run agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainctl.errors import Problem


def beside(cfg) -> int:
    """The CPUs a PPO-family run on cpu holds on the head beside its training processes: TransferQueue's controller
    and its storage units (transfer_queue.backend.SimpleStorage.num_data_storage_units: hardware.worker_processes),
    one CPU each, which verl creates before the training's placement groups. Ray put such an actor on either node of
    a two-node cluster on loopback (3 of 6 on the head), and a training group pinned to a node they had filled waited
    forever: on cpu the run pins them to the head (trainctl.runtime.verl_patches), and the check counts them there.
    verl's other actors (task runner, reward, agent loop, rollout servers) hold no CPU once started."""
    if cfg.hardware.device != "cpu" or cfg.family != "ppo":
        return 0
    return 1 + int(cfg.hardware.worker_processes or 1)


@dataclass
class Node:
    name: str
    cpus: int
    gpus: int
    id: str = ""  # Ray's node id (hex); empty for a Slurm node
    head: bool = False  # Ray's head node

    def label(self, *more: str) -> str:
        """'192.0.2.2 (head, 8ee14346, 3 CPUs)': several Ray nodes may share an address (one machine, as in the
        tests), so Ray's id tells them apart."""
        tags = [t for t in ("head" if self.head else "", self.id[:8], *more) if t]
        return f"{self.name} ({', '.join(tags)})" if tags else self.name


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else ('es' if what.endswith('s') else 's')}"


@dataclass
class Slot:
    """What the run puts on one node."""

    node: Node
    processes: int = 0  # training processes (GPUs on cuda)
    beside: int = 0  # CPUs TransferQueue's actors hold (on the head)

    def need(self, gpu: bool) -> int:
        return self.processes if gpu else self.processes + self.beside

    def has(self, gpu: bool) -> int:
        return self.node.gpus if gpu else self.node.cpus

    def words(self, gpu: bool) -> str:
        parts = [_count(self.processes, "GPU" if gpu else "training process")] if self.processes else []
        if self.beside:
            parts.append(f"TransferQueue's actors ({_count(self.beside, 'CPU')})")
        short = "" if self.need(gpu) <= self.has(gpu) else f", {self.need(gpu) - self.has(gpu)} short"
        kind = "GPU" if gpu else "CPU"
        return (
            f"{self.node.label()}: {' + '.join(parts)} = {self.need(gpu)} of its {_count(self.has(gpu), kind)}{short}"
        )


@dataclass
class Placement:
    slots: list[Slot] = field(default_factory=list)  # the nodes that get something, the extras' node first
    fits: bool = False

    def words(self, gpu: bool) -> str:
        return "; ".join(s.words(gpu) for s in self.slots)


def _order(nodes: list[Node]) -> list[Node]:
    """The order training groups take nodes in (the runtime's too): the head first, then by id or name (stable)."""
    return sorted(nodes, key=lambda n: (not n.head, n.id or n.name))


def place(nodes: list[Node], groups: int, per: int, beside: int = 0, gpu: bool = False) -> Placement:
    """Where the run goes: `groups` groups of `per` training processes, each on a node of its own, and on cpu
    `beside` CPUs of TransferQueue's actors on one node: the head, where the run pins them (a cluster without a head,
    as a Slurm partition's list: whichever node has room). Without room, the placement shown is the one that comes
    closest (`fits` False)."""
    beside = 0 if gpu else beside

    def has(n: Node) -> int:
        return n.gpus if gpu else n.cpus

    heads = [n for n in nodes if n.head]
    hosts = (heads[:1] or sorted(nodes, key=lambda n: -has(n))) if beside else [None]
    best: Placement | None = None
    for host in hosts or [None]:
        room = {id(n): has(n) - (beside if n is host else 0) for n in nodes}
        train = [n for n in _order(nodes) if room[id(n)] >= per][:groups]
        if len(train) < groups:  # the closest: the nodes with the most room, however short
            rest = sorted((n for n in nodes if n not in train), key=lambda n: -room[id(n)])
            train += rest[: groups - len(train)]
        slots = {id(n): Slot(n, processes=per) for n in train}
        if host is not None:
            slots.setdefault(id(host), Slot(host)).beside = beside
        ordered = sorted(slots.values(), key=lambda s: (not s.beside, _order(nodes).index(s.node)))
        found = Placement(ordered, all(s.need(gpu) <= s.has(gpu) for s in ordered) and len(train) == groups)
        if found.fits:
            return found
        short = sum(max(0, s.need(gpu) - s.has(gpu)) for s in ordered)
        if best is None or short < sum(max(0, s.need(gpu) - s.has(gpu)) for s in best.slots):
            best = found
    return best or Placement()


def problems(hw, nodes: list[Node], where: str, cpus: int | None = None, beside: int = 0) -> list[Problem]:
    """What keeps `where` from hosting hardware `hw`: hw.nnodes nodes, each with hw.gpus_per_node GPUs (cuda) or CPUs
    for as many training processes (cpu), `beside` CPUs more on one node (place()), and `cpus` CPUs a node when the
    run asks for them."""
    gpu = hw.device == "cuda"
    if len(nodes) < hw.nnodes:
        return [
            Problem(
                f"hardware.nnodes = {hw.nnodes}: {where} has {len(nodes)} node(s) up.",
                key="hardware.nnodes",
                hint=f"hardware.nnodes={max(1, len(nodes))}, or a larger cluster",
            )
        ]
    out = []
    placed = place(nodes, hw.nnodes, hw.gpus_per_node, beside, gpu)
    if not placed.fits:
        others = (
            f", and verl's TransferQueue actors ({_count(beside, 'CPU')}) on the head" if beside and not gpu else ""
        )
        fewer = next((k for k in range(hw.gpus_per_node - 1, 0, -1) if place(nodes, hw.nnodes, k, beside, gpu).fits), 0)
        out.append(
            Problem(
                f"hardware={hw.name} puts {hw.gpus_per_node} {'GPU' if gpu else 'training process'}(es) on each of "
                f"{hw.nnodes} node(s){others}; {where} cannot host them. Placed as the run places them: "
                f"{placed.words(gpu)}.",
                key="hardware.gpus_per_node",
                hint=f"hardware.gpus_per_node={fewer}" if fewer else _more("GPU" if gpu else "CPU", beside, gpu),
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


def _more(kind: str, beside: int, gpu: bool) -> str:
    if gpu or not beside:
        return f"nodes with more {kind}s (Ray counts what `ray start --num-{kind.lower()}s` gives)"
    return (
        f"more CPUs on the head (its training processes + {beside}; Ray counts what `ray start --num-cpus` gives), "
        "or hardware.nnodes=1"
    )


def describe(nodes: list[Node]) -> str:
    """The nodes in one line, for doctor: '2 node(s): node1 (2 CPUs), node2 (2 CPUs, 8 GPUs)'."""

    def one(n: Node) -> str:
        return n.label(_count(n.cpus, "CPU"), _count(n.gpus, "GPU") if n.gpus else "")

    return f"{len(nodes)} node(s): " + ", ".join(one(n) for n in nodes)


def ray_nodes(address: str) -> list[Node]:
    """A running Ray cluster's alive nodes, from its GCS at HOST:PORT (Ray's own client: no driver, no dashboard)."""
    from ray._raylet import GcsClient

    found = GcsClient(address=address.removeprefix("ray://")).get_all_node_info(timeout=15)
    alive = [n for n in found.values() if n.state == 0]  # GcsNodeInfo.ALIVE
    return [
        Node(n.node_manager_address or n.node_id.hex()[:8], int(dict(n.resources_total).get("CPU", 0)),
             int(dict(n.resources_total).get("GPU", 0)), id=n.node_id.hex(), head=n.is_head_node)
        for n in alive
    ]  # fmt: skip
