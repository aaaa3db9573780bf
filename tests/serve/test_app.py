"""`trainctl serve`'s API against its own /openapi.json: schemathesis (its CLI, `--checks all`, a fixed seed, bounded
examples) driven by the document the server serves, against the real server on loopback: with a token and actions
off (every phase), and with actions on (the stateful phase: jobs created, started and stopped through the links the
document declares); 0 failures. And a job's live stream opened before the job starts, as a page does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.real_runs import FAST_SFT
from tests.serve.conftest import (
    TOKEN,
    Events,
    copy_run,
    end,
    fake_live_run,
    server_env,
    start_server,
    stop_if_running,
)
from tests.shared import processes_with
from trainctl.serve.store import run_uuid

ROOT = Path(__file__).resolve().parents[2]
SEED = 48
# the live stream never ends: the tester would wait on it (test_api and test_events read it)
NOT_TESTED = "/events$"


def schemathesis(server, tmp_path: Path, *args: str, config: str | None = None, timeout: float = 600) -> str:
    """`schemathesis run URL/openapi.json --checks all ARGS` (tests.serve.openapi_hooks loaded, `config` a settings
    file beside this one); its summary is printed; fails unless it found nothing."""
    settings = ["--config-file", str(Path(__file__).parent / config)] if config else []
    argv = [
        sys.executable, "-m", "schemathesis.cli", *settings, "run", f"{server.url}/openapi.json", "--checks", "all",
        "--seed", str(SEED), "--exclude-path-regex", NOT_TESTED, "--no-color",
        # plans and starts on a busy 2-core machine take seconds; the limit is a hang guard, not a target
        "--request-timeout", "300", "--max-response-time", "300", *args,
    ]  # fmt: skip
    if server.token:
        argv += ["-H", f"Authorization: Bearer {server.token}"]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.serve.openapi_hooks", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)
    out = proc.stdout + proc.stderr
    summary = out[out.rfind("SUMMARY") :] if "SUMMARY" in out else out[-3000:]
    print(summary)
    assert proc.returncode == 0, out[-8000:]
    assert re.search(r"(\d+) generated, \1 passed", out), summary
    return out


@pytest.fixture(scope="module")
def runs(sft_run, copies) -> Path:
    """This module's runs: a copy of the session's SFT run with its checkpoints, and one that says it runs."""
    copy_run(sft_run.path, copies / "sft", checkpoints=True)
    return copies


@pytest.fixture(scope="module")
def live(sft_run, runs):
    proc = fake_live_run(sft_run.path, runs / "live")
    yield runs / "live"
    end(proc)


def test_the_api_matches_its_document_with_a_token_and_actions_off(runs, live, real_home, tmp_path):
    """Every operation but the stream, every phase: status codes (404 for unknown uuids, 403 for actions, 415, 422),
    content types (/metrics' text), bodies, 405 with an Allow header for every undeclared method, schema-valid
    queries accepted (GET /api/compare), the token required (401)."""
    env = server_env(real_home, SERVE_TEST_TOKEN=TOKEN)
    server = start_server([runs], env, runs.parent, "--token-env=SERVE_TEST_TOKEN", log=tmp_path / "server.log",
                          token=TOKEN)  # fmt: skip
    try:
        out = schemathesis(server, tmp_path, "--max-examples", "10")
    finally:
        server.stop()
    assert "Stateful" in out and "Coverage" in out and "Fuzzing" in out


@pytest.fixture(scope="module")
def acting(runs, real_home, tmp_path_factory):
    """A server with actions on over this module's runs; every run it started is stopped at the end."""
    log = tmp_path_factory.mktemp("serve-app") / "server.log"
    server = start_server([runs], server_env(real_home), runs.parent, "--allow-actions", "--log-level=info", log=log)
    yield server
    server.stop()
    for run in runs.iterdir():
        if (run / "job.json").is_file():
            stop_if_running(run)


def test_a_created_job_s_stream_opens_before_it_starts_and_follows_it_once_started(acting, runs):
    """POST /api/jobs, GET .../events, POST .../start: the order a page follows. The stream answers at once with
    the job's status (created); once the job starts, it sends its attempt, its status and its log from the start."""
    with acting.client() as api:
        spec = {"name": "streamed", "recipe": "quickstart", "overrides": [*FAST_SFT[1:], "run.max_steps=1"]}
        created = api.post("/api/jobs", json=spec, timeout=600)
        assert created.status_code == 201, created.text
        job = created.json()
        assert job["problems"] == [] and job["uuid"] == run_uuid(runs / "streamed")
        assert api.get(f"/api/jobs/{job['uuid']}/metrics").json() == []  # known, no history yet
        stream = Events(f"{acting.url}/api/jobs/{job['uuid']}/events")
        try:
            assert stream.next("status", 10)[1]["status"] == "created"
            started = api.post(f"/api/jobs/{job['uuid']}/start", json={}, timeout=600)
            assert started.status_code == 200, started.text
            assert started.json()["uuid"] == job["uuid"]
            attempt = stream.next("attempt", 30)[1]
            assert attempt["n"] == 1
            while (status := stream.next("status", 30)[1])["status"] not in ("running", "done"):
                pass
            first = stream.next("log", 120)[1]
            assert first["lines"] and not first.get("tail")  # from its first line, not a tail
        finally:
            stream.close()
            stopped = api.post(f"/api/jobs/{job['uuid']}/stop", json={"grace": 5})
        assert stopped.status_code in (200, 409), stopped.text  # 409: its one step was done already
    print(f"the stream of job {job['name']}: created, then attempt 1, {status['status']}, its log")


# the job's life, and the links between its steps (POST /api/jobs -> start_job -> stop_job)
LIFECYCLE = ("create_job", "start_job", "stop_job")


def test_the_api_matches_its_document_with_actions_on_through_a_job_s_life(acting, runs, tmp_path):
    """The stateful phase over the job's life: the jobs it creates plan cleanly and start for real (one step each:
    tests.serve.openapi_hooks), and it stops them, following the links the document declares."""
    only = [arg for op in LIFECYCLE for arg in ("--include-operation-id", op)]
    before = _planners(acting)
    seen = len(acting.log.read_text())
    try:
        schemathesis(acting, tmp_path, "--phases", "stateful", "--max-examples", "3", *only)
    finally:
        for run in runs.iterdir():
            if (run / "job.json").is_file():
                stop_if_running(run)
    log = acting.log.read_text()[seen:]
    steps = [("created", "", 201), ("started", "/[^/ ]+/start", 200), ("stopped", "/[^/ ]+/stop", 200)]
    done = {step: len(re.findall(rf'"POST /api/jobs{path} HTTP/1.1" {code}', log)) for step, path, code in steps}
    print(f"the tester's jobs: {done}")
    assert all(done.values()), done
    # one planner process made every plan (the first imported verl; the others reused it)
    assert len(_planners(acting)) == 1 and _planners(acting) == (before or _planners(acting))


@pytest.mark.slow  # every operation with actions on (the merges, evals and resumes it starts: minutes)
@pytest.mark.timeout(3600)
def test_the_api_matches_its_document_with_actions_on(acting, runs, live, tmp_path):
    try:
        schemathesis(acting, tmp_path, "--max-examples", "10", config="schemathesis-actions.toml", timeout=3000)
    finally:
        for run in runs.iterdir():
            if (run / "job.json").is_file():
                stop_if_running(run)


def _planners(server) -> list[int]:
    import psutil

    return [p.pid for p in processes_with(psutil.Process(server.proc.pid).children(), "trainctl.serve.planner")]
