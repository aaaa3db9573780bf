"""`trainctl serve`'s REST API, its live stream and /metrics, over HTTP against the session's real runs; and a real
job (the quickstart SFT, one step) created, started and watched to its end through the API."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.real_runs import AGENT_STEPS, FAST_SFT, GRPO_EVERY, GRPO_STEPS, SFT_EVERY, SFT_STEPS
from tests.serve.conftest import (
    SERVER_SECRET,
    Events,
    copy_run,
    end,
    fake_live_run,
    server_env,
    start_server,
    stop_if_running,
)
from trainctl.metrics import read_metrics
from trainctl.serve.store import run_uuid


@pytest.fixture(scope="module")
def served(sft_run, grpo_run, dpo_run, agent_run, real_home, copies, tmp_path_factory):
    """One server for the module, actions on, over this module's runs folder (first: jobs go there) and the
    folders of the session's SFT, GRPO, DPO and agent runs."""
    live_proc = fake_live_run(sft_run.path, copies / "live")
    with open(copies / "live" / "logs" / "attempt-1.log", "a") as log:
        log.write(f"a line that quotes the server's secret {SERVER_SECRET}\n")
    roots = [copies, *(r.path.parent for r in (sft_run, grpo_run, dpo_run, agent_run))]
    log = tmp_path_factory.mktemp("serve-log") / "server.log"
    server = start_server(roots, server_env(real_home), copies.parent, "--allow-actions", log=log)
    yield server
    server.stop()
    end(live_proc)
    assert SERVER_SECRET not in log.read_text()


@pytest.fixture(scope="module")
def api(served):
    with served.client() as client:
        yield client


def rows(api) -> dict[str, dict]:
    r = api.get("/api/jobs")
    assert r.status_code == 200
    return {row["name"]: row for row in r.json()}


def test_every_run_is_a_job_with_a_stable_uuid_and_the_status_runs_ls_gives(api, sft_run, grpo_run, copies):
    found = rows(api)
    assert {"sft", "grpo", "dpo", "agent", "live"} <= set(found)
    assert found["sft"]["uuid"] == run_uuid(sft_run.path)  # the folder's identity, nothing written into it
    assert found["grpo"]["status"] == "done" and found["grpo"]["steps_done"] == GRPO_STEPS
    assert found["grpo"]["headline"]["name"] == "critic/score/mean"
    assert found["live"]["status"] == "running" and found["live"]["detail"].startswith("PID ")
    assert found["dpo"]["algorithm"] == "dpo" and found["dpo"]["model"] == "tiny"

    one = api.get(f"/api/jobs/{found['grpo']['uuid']}").json()
    assert one["uuid"] == found["grpo"]["uuid"] and one["status"] == "done"
    # the tiny GRPO recipe's entropy is the update's (bypass mode: recipes/grpo-arith-tiny-cpu.yaml)
    assert set(one["key_metrics"]) >= {"critic/score/mean", "actor/entropy_loss", "response_length/mean"}
    assert [a["n"] for a in one["attempts"]] == [1]
    assert one["lineage"]["model"]["name"] == "tiny" and one["lineage"]["created_by"] == "trainctl train"
    assert api.get("/api/jobs/grpo").json()["uuid"] == one["uuid"]  # by name too
    missing = api.get("/api/jobs/no-such-run")
    assert missing.status_code == 404 and "GET /api/jobs" in missing.json()["hint"]


def test_metrics_are_the_runs_own_history_and_since_gives_only_what_is_new(api, sft_run):
    uid = run_uuid(sft_run.path)
    expected = read_metrics(sft_run.path)  # the reader `runs show` and `ckpt ls` use
    r = api.get(f"/api/jobs/{uid}/metrics")
    history = r.json()
    assert [row["step"] for row in history] == sorted(expected)
    assert all(row["train/loss"] == pytest.approx(expected[row["step"]]["train/loss"]) for row in history)
    assert r.headers["x-trainctl-cursor"].startswith("1.")
    newer = api.get(f"/api/jobs/{uid}/metrics", params={"since": 2, "keys": "train/loss"}).json()
    assert [row["step"] for row in newer] == [s for s in sorted(expected) if s > 2]
    assert all(set(row) == {"step", "train/loss"} for row in newer)
    cols = api.get(f"/api/jobs/{uid}/metrics", params={"format": "columns"}).json()
    assert cols["steps"] == sorted(expected) and len(cols["metrics"]["train/loss"]) == len(expected)


def test_checkpoints_with_their_metrics_and_eval_results(api, sft_run, grpo_run):
    ckpts = api.get(f"/api/jobs/{run_uuid(sft_run.path)}/checkpoints").json()
    assert [c["step"] for c in ckpts] == list(range(SFT_EVERY, SFT_STEPS + 1, SFT_EVERY))
    assert ckpts[0]["path"] == f"checkpoints/global_step_{SFT_EVERY}" and ckpts[-1]["latest"]
    assert "train/loss" in ckpts[0]["metrics"] and ckpts[0]["eval_results"] == {}
    grpo = api.get(f"/api/jobs/{run_uuid(grpo_run.path)}/checkpoints").json()
    assert [c["step"] for c in grpo] == [GRPO_EVERY, GRPO_STEPS] and grpo[0]["parts"] == ["actor"]


ACTIONS: dict[str, str] = {}  # the background actions the next test starts, checked at the module's end


def test_checkpoint_actions_start_merge_and_eval_and_prune_shows_then_deletes(api, copies, sft_run, grpo_run):
    """Merge and eval run in the background (`trainctl ckpt merge`, `trainctl eval`) while the module goes on;
    test_checkpoint_actions_finish checks what they wrote. Prune answers at once."""
    copy_run(sft_run.path, copies / "sft-ckpt", checkpoints=True)
    copy_run(grpo_run.path, copies / "grpo-ckpt", checkpoints=True)
    sft, grpo = run_uuid(copies / "sft-ckpt"), run_uuid(copies / "grpo-ckpt")
    merge = api.post(f"/api/jobs/{sft}/checkpoints/merge", json={"step": SFT_EVERY, "dtype": "auto"})
    assert merge.status_code == 202, merge.text
    assert merge.json()["command"].startswith("trainctl ckpt merge ") and merge.json()["state"] == "running"
    evaluate = api.post(f"/api/jobs/{grpo}/checkpoints/eval", json={"step": GRPO_STEPS, "limit": 2})
    assert evaluate.status_code == 202, evaluate.text
    ACTIONS.update(merge=merge.json()["id"], eval=evaluate.json()["id"])
    assert api.post(f"/api/jobs/{sft}/checkpoints/merge", json={"step": 3}).status_code == 404  # no such step
    # a run with no checkpoint yet: none at any step (404), nothing to prune (409); the request was fine
    bare = run_uuid(copies / "live")
    assert api.post(f"/api/jobs/{bare}/checkpoints/merge", json={"step": SFT_EVERY}).status_code == 404
    assert api.post(f"/api/jobs/{bare}/checkpoints/prune", json={"keep_last": 1}).status_code == 409

    prune = copies / "sft-prune"
    copy_run(sft_run.path, prune, checkpoints=True)
    uid = run_uuid(prune)
    older = [f"checkpoints/global_step_{s}" for s in range(SFT_EVERY, SFT_STEPS, SFT_EVERY)]
    shown = api.post(f"/api/jobs/{uid}/checkpoints/prune", json={"keep_last": 1}).json()
    assert [d["path"] for d in shown["delete"]] == older and not shown["deleted"]
    assert (prune / older[0]).is_dir()  # shown, not deleted
    wrong = api.post(f"/api/jobs/{uid}/checkpoints/prune", json={"keep_last": 1, "confirm": []})
    assert wrong.status_code == 409 and (prune / older[0]).is_dir()
    done = api.post(f"/api/jobs/{uid}/checkpoints/prune", json={"keep_last": 1, "confirm": older})
    assert done.json()["deleted"] and not any((prune / path).exists() for path in older)
    assert (prune / "checkpoints" / f"global_step_{SFT_STEPS}").is_dir()


def test_log_config_and_files(api, grpo_run, copies):
    uid = run_uuid(grpo_run.path)
    log = api.get(f"/api/jobs/{uid}/log", params={"tail": 5}).json()
    assert log["attempt"] == 1 and len(log["lines"]) == 5
    cfg = api.get(f"/api/jobs/{uid}/config").json()
    assert "algorithm:" in cfg["trainctl"] and cfg["backend_file"] == "verl_ppo.yaml"
    assert "trainctl command: trainctl train" in cfg["command"]
    text = api.get(f"/files/{uid}/command.sh")
    assert text.status_code == 200 and text.text == (grpo_run.path / "command.sh").read_text()
    # the server's secret is in the live run's log: it never leaves the server
    live = api.get(f"/api/jobs/{run_uuid(copies / 'live')}/log", params={"tail": 3}).text
    assert "***" in live and SERVER_SECRET not in live
    assert SERVER_SECRET not in api.get(f"/files/{run_uuid(copies / 'live')}/logs/attempt-1.log").text


def test_trajectories_as_turns_filtered_by_reward_and_tool_errors(api, agent_run):
    uid = run_uuid(agent_run.path)
    steps = api.get(f"/api/jobs/{uid}/rollouts").json()
    assert [s["step"] for s in steps] == list(range(1, AGENT_STEPS + 1)) and all(s["trajectories"] > 0 for s in steps)
    items = api.get(f"/api/jobs/{uid}/rollouts/1").json()
    assert items and all(t["prompt"] and t["turns"][0]["role"] == "assistant" for t in items)
    calls = [c for t in items for turn in t["turns"] for c in turn.get("tool_calls", [])]
    assert any(c["name"] == "calculator" and isinstance(c["arguments"], dict) for c in calls)
    assert any(turn["role"] == "tool" for t in items for turn in t["turns"])
    errors = api.get(f"/api/jobs/{uid}/rollouts/1", params={"errors": "only"}).json()
    assert all(t["tool_errors"] for t in errors)
    clean = api.get(f"/api/jobs/{uid}/rollouts/1", params={"errors": "none"}).json()
    assert len(errors) + len(clean) == len(items)
    cut = sorted(t["reward"] for t in items)[len(items) // 2]
    high = api.get(f"/api/jobs/{uid}/rollouts/1", params={"min_reward": cut}).json()
    assert high and all(t["reward"] >= cut for t in high)
    same = api.get(f"/api/jobs/{uid}/prompts/{items[0]['prompt_key']}").json()
    assert {t["prompt"] for t in same} == {items[0]["prompt"]} and {t["step"] for t in same} <= set(
        range(1, AGENT_STEPS + 1)
    )


def test_compare_and_gpus(api, sft_run, grpo_run):
    from trainctl.runs.compare import compare
    from trainctl.runs.gpus import gpu_stats
    from trainctl.runs.status import read_run

    c = api.get("/api/compare", params={"runs": f"{run_uuid(sft_run.path)},grpo"}).json()
    assert [r["name"] for r in c["runs"]] == ["sft", "grpo"]
    expected = compare([read_run(sft_run.path), read_run(grpo_run.path)])  # what `runs compare` shows
    assert set(c["differ"]) == set(expected.differ) and c["same"] == expected.same
    assert c["differ"]["algorithm.family"] == ["sft", "ppo"] and "train/loss" in c["metrics"]
    assert api.get("/api/compare", params={"runs": "sft"}).status_code == 422
    gpus = api.get("/api/gpus").json()
    assert gpus["available"] == bool(gpu_stats())
    if not gpus["available"]:
        assert "NVIDIA driver" in gpus["reason"] or "nvidia-ml-py" in gpus["reason"]


def test_prometheus_exposition_parsed_by_prometheus_client(api):
    from prometheus_client.parser import text_string_to_metric_families

    r = api.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    status = {(s.labels["run"], s.labels["status"]) for s in families["trainctl_run_status"].samples}
    assert {("grpo", "done"), ("live", "running")} <= status
    metric = {(s.labels["run"], s.labels["metric"]): s.value for s in families["trainctl_run_metric"].samples}
    assert set(metric) == {("live", "train/loss"), ("live", "train/grad_norm"), ("live", "val/loss")}
    assert {s.labels["run"] for s in families["trainctl_run_step"].samples} == {"live"}
    assert "trainctl_gpu_utilization_ratio" in families


def _append(path: Path, text: str) -> float:
    with open(path, "a") as f:
        f.write(text)
        f.flush()
    return time.monotonic()


def test_the_stream_delivers_a_new_metrics_line_within_a_second_and_resumes_without_repeats(served, api, copies):
    live = copies / "live"
    uid = run_uuid(live)
    metrics = live / "metrics" / "attempt-1.jsonl"
    columns = api.get(f"/api/jobs/{uid}/metrics", params={"format": "columns"}).json()
    cursor, last = columns["cursor"], max(columns["steps"])  # the steps written below come after the copy's
    stream = Events(f"{served.url}/api/jobs/{uid}/events?cursor={cursor}")
    try:
        status = stream.next("status", 10)[1]
        assert status["status"] == "running"
        # a line cut mid-write is held back until it is whole
        _append(metrics, f'{{"step": {last + 1}, "data": {{"train/loss": 0.5')
        time.sleep(0.5)
        written = _append(metrics, ', "train/grad_norm": 1.0}}\n')
        at, data, eid = stream.next("metrics", 5)
        assert data["steps"] == [last + 1] and data["metrics"]["train/loss"] == [0.5]
        assert at - written < 1.0, f"the line took {at - written:.2f} s to arrive"
        assert eid.split(".")[1] == str(metrics.stat().st_size)  # the event id is the file offset
    finally:
        stream.close()
    _append(metrics, f'{{"step": {last + 2}, "data": {{"train/loss": 0.4}}}}\n')
    again = Events(f"{served.url}/api/jobs/{uid}/events", headers={"Last-Event-ID": eid})
    try:
        _, data, _ = again.next("metrics", 5)
        # the step above is not sent again; the one written while away is not skipped
        assert data["steps"] == [last + 2]
        # the live view's alerts and the log, as they happen
        _append(metrics, f'{{"step": {last + 3}, "data": {{"train/loss": null}}}}\n')
        alert = again.next("alert", 5)[1]
        assert alert["kind"] == "nonfinite" and "train/loss" in alert["message"] and alert["hint"]
        _append(live / "logs" / "attempt-1.log", "torch.OutOfMemoryError: CUDA out of memory\n")
        assert again.next("log", 5)[1]["lines"] == ["torch.OutOfMemoryError: CUDA out of memory"]
        assert again.next("alert", 5)[1]["kind"] == "oom"
    finally:
        again.close()


def test_lineage_a_run_trained_from_another_and_the_runs_from_it(api, copies, sft_run):
    """A run started with model=runs/sft (its lock.json records where its model came from, as ckpt.lineage writes
    it): its page links to the source run and step, and the source lists it."""
    copy_run(sft_run.path, copies / "sft-source")
    copy_run(sft_run.path, copies / "from-sft")
    source = copies / "sft-source"
    lock = json.loads((copies / "from-sft" / "lock.json").read_text())
    lock["lineage"] = {"source": "runs/sft-source", "run": str(source.resolve()), "checkpoint":
                       str(source / "checkpoints" / "global_step_4"), "step": 4, "base": "tiny",
                       "merged": "/cache/merged/global_step_4-x", "parent": None}  # fmt: skip
    (copies / "from-sft" / "lock.json").write_text(json.dumps(lock))
    child = api.get(f"/api/jobs/{run_uuid(copies / 'from-sft')}").json()["lineage"]
    assert child["model"]["from"]["run"] == {"uuid": run_uuid(source), "name": "sft-source"}
    assert child["model"]["from"]["describe"] == f"{source.resolve()} step 4 (model=tiny)"
    parent = api.get(f"/api/jobs/{run_uuid(source)}").json()["lineage"]
    assert parent["children"] == [{"uuid": run_uuid(copies / "from-sft"), "name": "from-sft", "step": 4}]


def test_a_ray_job_run_links_to_the_ray_dashboard(api, copies, sft_run):
    status = copy_run(sft_run.path, copies / "on-ray")
    status["attempts"][-1].update(launcher="ray_job", address="http://10.0.0.5:8265", job_id="raysubmit_abc123")
    (copies / "on-ray" / "run.json").write_text(json.dumps(status))
    job = api.get(f"/api/jobs/{run_uuid(copies / 'on-ray')}").json()
    assert job["launcher"] == "ray_job" and job["status"] == "done"
    assert job["links"]["ray_dashboard"] == "http://10.0.0.5:8265/#/jobs/raysubmit_abc123"


def test_a_deleted_run_says_so_and_a_broken_folder_does_not_stop_the_server(served, api, copies, sft_run):
    import shutil

    doomed = copies / "doomed"
    copy_run(sft_run.path, doomed)
    broken = copies / "broken"
    broken.mkdir()
    (broken / "run.json").write_text('{"name": "broken", "attem')  # cut mid-write
    stream = Events(f"{served.url}/api/jobs/{run_uuid(doomed)}/events")
    try:
        stream.next("status", 10)
        shutil.rmtree(doomed)
        assert "gone" in stream.next("gone", 5)[1]["message"]
    finally:
        stream.close()
    found = rows(api)
    assert found["broken"]["status"] == "unreadable" and "doomed" not in found
    assert api.get("/").status_code == 200
    assert api.get(f"/api/jobs/{run_uuid(doomed)}").status_code == 404


def test_stop_and_resume(api, copies):
    uid = run_uuid(copies / "live")
    refused = api.post(f"/api/jobs/{uid}/resume", json={})
    assert refused.status_code == 409 and "stop it before resuming" in refused.json()["error"]
    stopped = api.post(f"/api/jobs/{uid}/stop", json={"grace": 5})
    assert stopped.status_code == 200, stopped.text
    assert "stopped live" in stopped.json()["message"]
    assert api.get(f"/api/jobs/{uid}").json()["status"] == "killed"  # nothing recorded its end: its PID is gone
    again = api.post(f"/api/jobs/{uid}/stop", json={})
    assert again.status_code == 409
    # resume runs `trainctl train --resume runs/NAME ...` detached; a bad override stops it at once, and says so
    bad = api.post(f"/api/jobs/{uid}/resume", json={"overrides": ["run.epochs=0"]})
    assert bad.status_code == 422, bad.text
    assert "stopped before its trainer started" in bad.json()["error"]
    assert any("run.epochs" in line for line in bad.json()["details"])


def test_a_job_with_bad_fields_is_planned_with_its_problems_and_not_started(api):
    r = api.post("/api/jobs", json={"algorithm": "sft", "rollout_n": 4, "kl_coef": 0.1, "model_path": "no-such-model"})
    assert r.status_code == 201
    job = r.json()
    keys = {p["key"] for p in job["problems"]}
    assert keys == {"rollout_n", "kl_coef", "model_path"}
    start = api.post(f"/api/jobs/{job['uuid']}/start", json={})
    assert start.status_code == 409 and "nothing was started" in start.json()["error"]
    typo = api.post("/api/jobs", json={"learning_rat": 0.1})
    assert typo.status_code == 422 and "learning_rat" in typo.text
    # numbers are JSON numbers, as /openapi.json says (pydantic alone read false as 0.0 and "2" as 2)
    for wrong in ({"kl_coef": False}, {"num_epochs": "2"}, {"batch_size": True}):
        r = api.post("/api/jobs", json=wrong)
        assert r.status_code == 422 and "a JSON number is needed" in r.text, (wrong, r.text)


@pytest.mark.slow  # a run of its own (half a minute in the suite); the API's reading and actions: the default suite
def test_a_job_created_started_and_finished_through_the_api(api, copies):
    spec = {
        "name": "api-job",
        "description": "the quickstart, one step",
        "recipe": "quickstart",
        "learning_rate": 0.002,
        "overrides": [*FAST_SFT[1:], "run.max_steps=1"],
    }
    t0 = time.monotonic()
    created = api.post("/api/jobs", json=spec, timeout=600)  # it plans: verl validates the config (seconds)
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["problems"] == [], job["problems"]
    assert job["uuid"] == run_uuid(copies / "api-job")  # the uuid its run folder will have
    assert job["plan"].startswith("Plan: sft on model=tiny") and "optim.lr=0.002" in job["command"]
    assert not (copies / "api-job").exists()  # planned, nothing started
    pending = rows(api)["api-job"]
    assert pending["status"] == "created" and pending["pending"]
    planned = time.monotonic()
    try:
        started = api.post(f"/api/jobs/{job['uuid']}/start", json={}, timeout=600)
        assert started.status_code == 200, started.text
        assert started.json()["trainer_pid"]
        status = None
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            status = api.get(f"/api/jobs/{job['uuid']}").json()
            if status["status"] not in ("running", "queued", "created"):
                break
            time.sleep(1)
    finally:
        stop_if_running(copies / "api-job")
    print(f"api job: planned in {planned - t0:.1f} s, ran in {time.monotonic() - planned:.1f} s")
    assert status["status"] == "done", status
    assert status["steps_done"] == 1 and status["description"] == "the quickstart, one step"
    assert status["lineage"]["created_by"] == "trainctl serve"
    command = (copies / "api-job" / "command.sh").read_text()
    assert f"# trainctl command: trainctl train {job['command'].split(' ', 2)[2]}" in command
    assert [r["step"] for r in api.get(f"/api/jobs/{job['uuid']}/metrics").json()] == [1]
    assert [c["step"] for c in api.get(f"/api/jobs/{job['uuid']}/checkpoints").json()] == [1]
    assert api.post(f"/api/jobs/{job['uuid']}/start", json={}).status_code == 409  # started already


def test_checkpoint_actions_finish(api, copies):
    """The merge and the eval started above: each ran to its end, and wrote what the commands write."""
    states = {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        states = {k: api.get(f"/api/actions/{aid}").json() for k, aid in ACTIONS.items()}
        if all(a["state"] != "running" for a in states.values()):
            break
        time.sleep(1)
    assert states["merge"]["state"] == "done", states["merge"]["output"]
    assert (copies / "sft-ckpt" / "checkpoints" / f"global_step_{SFT_EVERY}-hf" / "config.json").is_file()
    assert states["eval"]["state"] == "done", states["eval"]["output"]
    ckpts = api.get(f"/api/jobs/{run_uuid(copies / 'grpo-ckpt')}/checkpoints").json()
    scores = {c["step"]: c["eval_results"] for c in ckpts}
    assert "eval/arith/acc" in scores[GRPO_STEPS] and scores[GRPO_EVERY] == {}
    assert api.get("/api/actions/nope").status_code == 404
