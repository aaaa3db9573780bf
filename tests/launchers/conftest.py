"""The real clusters the launcher tests run on, one each for a pytest worker's session: a Slurm (munged, slurmctld and
two slurmd on this host: tests/launchers/slurm_daemons.py) and a two-node Ray cluster on loopback
(tests/launchers/ray_nodes.py). Both are stopped by PID: the Slurm when the session ends, the Ray nodes when the module
that uses them does."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.launchers import ray_nodes, slurm_daemons


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real Slurm with partition debug (node1 and node2, MaxNodes 2, MaxTime 1 hour). Its folder is outside pytest's
    (mode 700: munged refuses a socket folder others cannot traverse)."""
    why = slurm_daemons.unavailable()
    if why:
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="trainctl-slurm-"))
    cluster = slurm_daemons.start(root)
    yield cluster
    slurm_daemons.stop(cluster)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm(slurm_cluster, monkeypatch):
    """The test's Slurm is the one Slurm's commands (and the jobs' processes) find: SLURM_CONF."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster


# module: only test_ray_cluster.py uses the nodes, and an idle Ray cluster is not free (its GCS, raylets, agents and
# log monitors poll: ~25 s of CPU over the 8 minutes a session-long one outlived that file by)
@pytest.fixture(scope="module")
def ray_two_nodes(tmp_path_factory):
    """Two Ray nodes on this host (4 logical CPUs each): hardware.ray_address for hardware.launcher=ray_cluster."""
    nodes = ray_nodes.start(tmp_path_factory.mktemp("ray-two-nodes"))
    yield nodes
    ray_nodes.stop(nodes)
