"""`trainctl doctor`: what this machine (or cluster) offers against what a hardware option asks for."""

from __future__ import annotations

import importlib.util
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl import launchers
from trainctl.errors import TrainctlError
from trainctl.launch.lock import versions

if TYPE_CHECKING:
    from trainctl.config.schema import Config
    from trainctl.plan import Plan


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | info
    detail: str


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def local_devices() -> tuple[int, list[str], str | None]:
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = [torch.cuda.get_device_name(i) for i in range(n)]
    return n, names, torch.version.cuda


def cluster_nodes(address: str) -> list[dict]:
    """Alive nodes of a Ray cluster, through its dashboard's state API (with the token a launch sends)."""
    from ray.util.state.common import ListApiOptions, StateResource

    from trainctl.launchers import ray_jobs

    options = ListApiOptions(filters=[("state", "=", "ALIVE")])
    client = ray_jobs.state_client(address)
    # a cluster that answers has a head node at least: none alive is the dashboard not yet (or too busy to be) caught
    # up with the GCS's node table (seen under load, on a cluster started seconds before), so it is asked again
    deadline = time.monotonic() + NODES_PATIENCE_S
    while True:
        nodes = client.list(StateResource.NODES, options=options, raise_on_missing_output=False)
        if nodes or time.monotonic() > deadline:
            return [{"ip": n.node_ip, "resources": dict(n.resources_total or {})} for n in nodes]
        time.sleep(1)


NODES_PATIENCE_S = 15


def _trl_has_ppo() -> bool:
    """trl.experimental.ppo is there (verl 0.9.1 imports it). Finding it imports trl.experimental, which warns
    (TRLExperimentalWarning) on stderr: routed to trainctl's debug log (TRAINCTL_DEBUG=1 shows it)."""
    from trainctl.silence import library_logs

    with library_logs():
        return importlib.util.find_spec("trl.experimental.ppo") is not None


def run_checks(plan: Plan) -> list[Check]:
    cfg = plan.cfg
    hw, model = cfg.hardware, cfg.model
    checks: list[Check] = []
    v = versions()
    checks.append(Check("versions", "info", ", ".join(f"{k} {x}" for k, x in v.items() if x)))
    for pkg in ("verl", "torch", "transformers", "trl", "ray"):
        if not v.get(pkg):
            checks.append(Check(pkg, "fail", "not installed"))
    if not _trl_has_ppo():
        checks.append(
            Check("trl", "fail", "verl 0.9.1 needs trl.experimental.ppo (TRL <= 1.12): pip install 'trl<1.13'")
        )
    from importlib.metadata import entry_points

    plugin = any(e.value == "trainctl.runtime.verl_cpu_plugin" for e in entry_points(group="verl.plugins"))
    checks.append(Check("verl CPU plugin", "ok" if plugin else "warn", "registered" if plugin else "not registered"))

    n, names, cuda = local_devices()
    if n:
        checks.append(Check("GPUs here", "ok", f"{n} x {names[0]} (CUDA {cuda})"))
    else:
        checks.append(Check("GPUs here", "info", "none: hardware=cpu runs here"))
    for engine in ("vllm", "sglang"):
        found = importlib.util.find_spec(engine) is not None
        checks.append(Check(engine, "ok" if found else "info", "importable" if found else "not installed"))

    want = f"{hw.nnodes} node(s) x {hw.gpus_per_node} {'process(es)' if hw.device == 'cpu' else 'GPU(s)'}"
    launcher = launchers.get(hw.launcher)
    if hw.launcher == "slurm":
        checks += slurm_checks(cfg)
    elif launcher.ray == "own":
        if hw.device == "cuda":
            ok = n >= hw.gpus_per_node
            checks.append(Check(f"hardware={hw.name}", "ok" if ok else "fail", f"wants {want}; this machine has {n}"))
        else:
            checks.append(Check(f"hardware={hw.name}", "ok", f"wants {want} on this machine's CPU"))
    elif not hw.ray_address:
        checks.append(Check(f"hardware={hw.name}", "fail", f"wants {want} on a Ray cluster; set RAY_ADDRESS"))
    elif launcher.ray == "join":
        checks += join_checks(plan)
    else:
        try:
            nodes = cluster_nodes(str(hw.ray_address))
            key = "GPU" if hw.device == "cuda" else "CPU"
            per_node = [int(nd["resources"].get(key, 0)) for nd in nodes]
            ok = len(nodes) >= hw.nnodes and sum(p >= hw.gpus_per_node for p in per_node) >= hw.nnodes
            detail = f"wants {want}; cluster has {len(nodes)} node(s) with {key}: {per_node}"
            checks.append(Check(f"hardware={hw.name}", "ok" if ok else "fail", detail))
        except Exception as e:
            text = e.message if isinstance(e, TrainctlError) else str(e).strip().splitlines()[0]
            checks.append(Check(f"hardware={hw.name}", "fail", f"cannot reach {hw.ray_address}: {text}"))
        if launcher.ray == "inside":
            checks += job_checks(plan)

    for label, folder in (
        ("disk for runs", Path(cfg.run.dir).parent),
        ("disk for models", Path(model.path).parent),
    ):
        folder = folder.expanduser().resolve()
        probe = folder
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        need = float(model.params or 0) * 2 * (3 if label == "disk for runs" else 1)
        status = "ok" if free > need else "warn"
        checks.append(
            Check(label, status, f"{_gib(free)} free at {folder}" + (f"; ~{_gib(need)} needed" if need else ""))
        )
    return checks


def job_checks(plan: Plan) -> list[Check]:
    """A Ray-job cluster: its authentication, the job's interpreter there, and whether its nodes hold the secrets
    the run reads there."""
    from trainctl.checks.environment import job_secrets
    from trainctl.launchers import ray_jobs

    cfg = plan.cfg
    address = str(cfg.hardware.ray_address)
    mode = ray_jobs.auth_mode(address)
    token, where = ray_jobs.auth_token()
    if mode == "token":
        ok = token is not None
        detail = f"token authentication; the token from {where}" if ok else f"token authentication; none in {where}"
        out = [Check("Ray auth", "ok" if ok else "fail", detail + ("" if ok else f" ({ray_jobs.TOKEN_HINT})"))]
    else:
        out = [Check("Ray auth", "warn" if mode == "disabled" else "info", f"{mode}")]
        if mode == "disabled":
            out[-1].detail = "disabled: anyone who reaches the dashboard can run code on the cluster"
    out.append(python_check(plan))
    needed = {k: why for k, why in job_secrets(cfg).items() if k not in cfg.hardware.forward_secrets}
    if not needed:
        return out
    try:
        found = ray_jobs.node_env(address, sorted(needed))
    except TrainctlError as e:
        return [*out, Check("secrets on the nodes", "warn", f"could not ask the nodes: {e.message}")]
    for name, why in needed.items():
        missing = [node for node, have in found.items() if not have.get(name)]
        status = "fail" if missing else "ok"
        detail = f"{why}: " + (f"not set on {', '.join(missing)}" if missing else f"set on all {len(found)} node(s)")
        out.append(Check(name, status, detail))
    return out


def python_check(plan: Plan) -> Check:
    """The cluster's answer (a tiny job, trainctl.launchers.job_python): does the job's interpreter there have the
    run's packages at this environment's versions."""
    from trainctl.launchers import job_python

    address = str(plan.cfg.hardware.ray_address)
    want = job_python.needs(plan)
    try:
        verdict = job_python.ask(address, want)
    except TrainctlError as e:
        return Check("job python", "fail", f"could not ask the cluster: {e.message}")
    if not verdict.ok:
        p = job_python.problem(address, verdict, want)
        return Check(
            "job python",
            "fail",
            " ".join([p.message, *(f"{d[0].upper()}{d[1:]}." for d in p.details)]) + f" Fix: {p.hint}",
        )
    wanted = ", ".join(f"{n} {v}" for n, v in want.versions.items())
    return Check("job python", "ok", f"{verdict.executable} has {wanted}" + (" (cached)" if verdict.cached else ""))


def slurm_checks(cfg: Config) -> list[Check]:
    """hardware.launcher=slurm: Slurm's commands, the partition (its state, nodes, MaxNodes, MaxTime) against what the
    run asks for (hardware.nnodes, gpus_per_node, slurm.time, slurm.cpus_per_node)."""
    from trainctl.launchers.slurm import check_cluster

    hw = cfg.hardware
    summary, problems = check_cluster(hw)
    want = f"{hw.nnodes} node(s) x {hw.gpus_per_node} {'process(es)' if hw.device == 'cpu' else 'GPU(s)'}"
    out = [Check("Slurm", "ok", summary)] if summary else []
    for p in problems:
        out.append(Check(p.key or "Slurm", "fail", p.message + (f" ({p.hint})" if p.hint else "")))
    if summary and not problems:
        limit = f", time {hw.slurm.time}" if hw.slurm.time is not None else ""
        out.append(Check(f"hardware={hw.name}", "ok", f"wants {want}{limit}: the partition has room"))
    return out


def join_checks(plan: Plan) -> list[Check]:
    """A cluster the driver joins (ray_cluster): its alive nodes, from its GCS, against what the run puts on each (the
    launch's own check, trainctl.launchers.ray_cluster)."""
    from trainctl.launchers.capacity import beside, describe, place, ray_nodes

    hw = plan.cfg.hardware
    problems = launchers.get(hw.launcher).preflight(plan)
    if problems and problems[0].key == "hardware.ray_address":  # unreachable
        return [Check(f"hardware={hw.name}", "fail", problems[0].message)]
    nodes = ray_nodes(str(hw.ray_address))
    out = [Check("Ray cluster", "ok", f"{hw.ray_address}: {describe(nodes)}")]
    for p in problems:
        out.append(Check(p.key or f"hardware={hw.name}", "fail", p.message + (f" ({p.hint})" if p.hint else "")))
    if not problems:
        gpu = hw.device != "cpu"
        want = f"{hw.nnodes} node(s) x {hw.gpus_per_node} {'GPU(s)' if gpu else 'process(es)'}"
        placed = place(nodes, hw.nnodes, hw.gpus_per_node, beside(plan.cfg), gpu).words(gpu)
        out.append(Check(f"hardware={hw.name}", "ok", f"wants {want}: the cluster has room ({placed})"))
    return out
