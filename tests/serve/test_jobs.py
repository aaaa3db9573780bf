"""What the server's actions leave behind when the server dies: `kill -9` of `trainctl serve` in the middle of a
checkpoint merge it started through its API. The merge stops as Ctrl-C stops it (no half-written model anywhere),
and the next server over the same runs shows the action failed."""

from __future__ import annotations

import os
import signal
import time

import psutil

from tests.real_runs import SFT_EVERY
from tests.serve.conftest import copy_run, server_env, start_server
from tests.shared import processes_with
from trainctl.serve.store import run_uuid


def _merge_of(server_pid: int) -> psutil.Process:
    found = processes_with(psutil.Process(server_pid).children(), "ckpt merge")
    assert found, "the server started no merge process"
    return found[0]


def test_kill_9_of_the_server_mid_merge_leaves_no_half_written_model_and_the_next_server_says_it_failed(
    sft_run, real_home, copies, tmp_path
):
    run = copies / "sft-merge"
    copy_run(sft_run.path, run, checkpoints=True)
    uid, ckpts = run_uuid(run), run / "checkpoints"
    env = server_env(real_home)
    server = start_server([copies], env, copies.parent, "--allow-actions", log=tmp_path / "server.log")
    try:
        with server.client() as api:
            started = api.post(f"/api/jobs/{uid}/checkpoints/merge", json={"step": SFT_EVERY})
        assert started.status_code == 202, started.text
        aid = started.json()["id"]
        merge = _merge_of(server.proc.pid)
        # its half-written model: the merge writes a hidden folder, renamed into place once verified
        deadline = time.monotonic() + 300
        while not (partial := list(ckpts.glob(f".global_step_{SFT_EVERY}-hf.partial-*"))):
            assert time.monotonic() < deadline and merge.is_running(), "the merge never started writing"
            time.sleep(0.005)
        merge.suspend()  # held mid-write while its server dies
        t0 = time.monotonic()
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        merge.resume()
        merge.wait(120)
        print(f"the merge ended {time.monotonic() - t0:.1f} s after its server was killed")
    finally:
        server.stop()
    assert partial[0].name.endswith(f"partial-{merge.pid}")
    assert not list(copies.rglob("*partial*")), list(copies.rglob("*partial*"))
    assert not (ckpts / f"global_step_{SFT_EVERY}-hf").exists()

    again = start_server([copies], env, copies.parent, log=tmp_path / "server2.log")
    try:
        with again.client() as api:
            action = api.get(f"/api/actions/{aid}").json()
            listed = api.get(f"/api/jobs/{uid}/actions").json()
    finally:
        again.stop()
    assert action["state"] == "failed" and action["kind"] == "merge", action
    assert "stopped before it ended" in action["reason"]
    assert action["command"].startswith("trainctl ckpt merge ") and action["output"][0].startswith("Merging")
    assert [a["id"] for a in listed] == [aid]
