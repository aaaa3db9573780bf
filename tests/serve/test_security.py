"""`trainctl serve`'s security, against the real server: refused at start without a token off loopback, the token
on every route (Bearer, or the login page's cookie), actions off without --allow-actions, POST rules, the Host
header, no CORS, no docs from a CDN, files confined to the run folders, and no secret in any answer or log line."""

from __future__ import annotations

import http.client
import json
import os

import httpx
import pytest

from tests.serve.conftest import SERVER_SECRET, TOKEN, copy_run, server_env, start_server
from trainctl.serve.store import run_uuid

MCP_SECRET = "mcp-env-value-9f8e7d6c5b4a"


@pytest.fixture(scope="module")
def guarded(sft_run, real_home, copies, tmp_path_factory):
    """A server with a token and without actions, over a copy of the SFT run that holds the secrets a careless
    server could leak: its log quotes the server's token and an MCP server's env value, its config names that env
    variable as an MCP server's."""
    run = copies / "sft-copy"
    copy_run(sft_run.path, run)
    with open(run / "logs" / "attempt-1.log", "a") as log:
        log.write(f"token {TOKEN} mcp {MCP_SECRET} hf {SERVER_SECRET}\n")
    with open(run / "trainctl.yaml", "a") as cfg:
        cfg.write("tools:\n  servers:\n    calc:\n      command: python\n      env:\n      - CALC_SETTING\n")
    (run / "outside.log").symlink_to("/etc/passwd")
    (copies / "secret.txt").write_text("beside the run folders, not in one\n")
    log = tmp_path_factory.mktemp("serve-sec") / "server.log"
    env = server_env(real_home, SERVE_TEST_TOKEN=TOKEN, CALC_SETTING=MCP_SECRET)
    server = start_server([copies], env, copies.parent, "--token-env=SERVE_TEST_TOKEN", "--log-level=info",
                          log=log, token=TOKEN)  # fmt: skip
    yield server, run
    server.stop()
    text = log.read_text()
    assert TOKEN not in text and SERVER_SECRET not in text and MCP_SECRET not in text


def test_a_public_host_is_refused_without_a_token(cli, monkeypatch, tmp_path):
    (tmp_path / "runs").mkdir()
    r = cli("serve", "--runs", str(tmp_path / "runs"), "--host", "0.0.0.0")
    assert r.exit_code == 1
    assert "--host 0.0.0.0 would let other machines reach this server" in r.stderr
    assert "--token-env TRAINCTL_SERVE_TOKEN" in r.stderr and "secrets.token_urlsafe" in r.stderr
    r = cli("serve", "--runs", str(tmp_path / "runs"), "--host", "0.0.0.0", "--token-env", "NOT_SET_ANYWHERE")
    assert r.exit_code == 1 and "NOT_SET_ANYWHERE is not set" in r.stderr
    monkeypatch.setenv("SHORT_TOKEN", "abc")
    r = cli("serve", "--runs", str(tmp_path / "runs"), "--host", "0.0.0.0", "--token-env", "SHORT_TOKEN")
    assert r.exit_code == 1 and "at least 16" in r.stderr
    r = cli("serve", "--runs", str(tmp_path / "nowhere"))
    assert r.exit_code == 1 and "no such folder" in r.stderr


ROUTES = [
    "/", "/runs/sft-copy", "/compare", "/gpus", "/launch", "/api/jobs", "/api/gpus", "/metrics", "/openapi.json",
    "/static/app.js", "/static/vendor/uplot/uPlot.iife.min.js", "/api/jobs/sft-copy/metrics",
    "/api/jobs/sft-copy/events", "/files/sft-copy/command.sh",
]  # fmt: skip


def test_every_route_needs_the_token(guarded):
    server, _ = guarded
    with server.client(token=False) as anon, server.client() as auth:
        for route in ROUTES:
            r = anon.get(route)
            assert r.status_code == 401, route
            assert r.headers["www-authenticate"] == "Bearer"
            wrong = anon.get(route, headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"})
            assert wrong.status_code == 401, route
        page = anon.get("/runs/sft-copy", headers={"Accept": "text/html"})
        assert page.status_code == 401 and 'action="/login"' in page.text  # a browser gets the login page
        for route in ROUTES:
            if route.endswith("/events"):
                with auth.stream("GET", route) as r:
                    assert r.status_code == 200
                continue
            assert auth.get(route).status_code == 200, route


def test_the_login_page_sets_a_cookie_that_is_not_the_token(guarded):
    server, _ = guarded
    with httpx.Client(base_url=server.url) as browser:
        bad = browser.post("/login", data={"token": "guess-guess-guess", "next": "/"})
        assert bad.status_code == 401 and "not this server's" in bad.text
        ok = browser.post("/login", data={"token": TOKEN, "next": "//evil.example/"})
        assert ok.status_code == 303 and ok.headers["location"] == "/"  # no open redirect
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert TOKEN not in cookie
        assert browser.get("/api/jobs").status_code == 200  # the cookie is enough
        browser.cookies.clear()
        assert browser.get("/api/jobs").status_code == 401


def test_actions_are_refused_without_allow_actions_and_posts_must_be_json(guarded):
    server, run = guarded
    uid = run_uuid(run)
    with server.client() as auth:
        for route, body in [
            ("/api/jobs", {"recipe": "quickstart"}),
            (f"/api/jobs/{uid}/start", {}),
            (f"/api/jobs/{uid}/stop", {}),
            (f"/api/jobs/{uid}/resume", {}),
            (f"/api/jobs/{uid}/checkpoints/merge", {"step": 2}),
            (f"/api/jobs/{uid}/checkpoints/eval", {"step": 2}),
            (f"/api/jobs/{uid}/checkpoints/prune", {"keep_last": 1}),
        ]:
            r = auth.post(route, json=body)
            assert r.status_code == 403, route
            assert "--allow-actions" in r.json()["hint"]
        form = auth.post(f"/api/jobs/{uid}/stop", data={"grace": "1"})
        assert form.status_code == 415  # a cross-site form cannot post JSON
        foreign = auth.post(f"/api/jobs/{uid}/stop", json={}, headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403 and "cross-origin" in foreign.json()["error"]
        # GET never changes anything; other methods are not served, and the answer says which are (Allow)
        for method, route, allow in [
            ("GET", f"/api/jobs/{uid}/stop", "POST"),
            ("DELETE", f"/api/jobs/{uid}", "GET"),
            ("PUT", "/api/jobs", "GET, POST"),
            ("POST", "/api/gpus", "GET"),  # 405 before the POST rules (no JSON body here)
            ("TRACE", "/metrics", "GET"),
        ]:
            r = auth.request(method, route)
            assert (r.status_code, r.headers.get("allow")) == (405, allow), (method, route)


def test_host_header_no_cors_no_cdn_docs(guarded):
    server, _ = guarded
    with server.client() as auth:
        rebound = auth.get("/api/jobs", headers={"Host": f"evil.example:{server.port}"})
        assert rebound.status_code == 400  # DNS rebinding: a page on evil.example that resolves to 127.0.0.1
        assert auth.get("/api/jobs", headers={"Host": f"localhost:{server.port}"}).status_code == 200
        pre = auth.request(
            "OPTIONS", "/api/jobs", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
        )
        assert pre.status_code == 405 and "access-control-allow-origin" not in pre.headers
        r = auth.get("/api/jobs", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in r.headers
        assert "default-src 'self'" in r.headers["content-security-policy"]
        assert auth.get("/docs").status_code == 404 and auth.get("/redoc").status_code == 404
        spec = auth.get("/openapi.json").json()
        assert {"/api/jobs", "/api/jobs/{uuid}/metrics", "/api/jobs/{uuid}/events", "/api/gpus"} <= set(spec["paths"])


def _raw_get(server, path: str) -> int:
    """A request sent as written: no client-side normalisation of `..` or percent-escapes."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest("GET", path, skip_host=True)
    conn.putheader("Host", f"127.0.0.1:{server.port}")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


def test_only_files_under_the_runs_folders_are_served(guarded):
    server, run = guarded
    uid = run_uuid(run)
    assert _raw_get(server, f"/files/{uid}/command.sh") == 200
    assert _raw_get(server, f"/files/{uid}/logs/attempt-1.log") == 200
    for path in [
        f"/files/{uid}/../secret.txt",
        f"/files/{uid}/../../../../etc/passwd",
        f"/files/{uid}/%2e%2e/secret.txt",
        f"/files/{uid}/..%2fsecret.txt",
        f"/files/{uid}/logs%2fattempt-1.log",
        f"/files/{uid}//etc/passwd",
        f"/files/{uid}/%2Fetc%2Fpasswd",
        f"/files/{uid}/outside.log",  # a symlink out of the run folder
        f"/files/{uid}/logs\\attempt-1.log",
        f"/files/{uid}/run.json%00.log",
        f"/files/{uid}/checkpoints",
        "/files/../etc/passwd",
    ]:
        assert _raw_get(server, path) == 404, path


def test_no_secret_reaches_an_answer_a_page_or_a_stream(guarded):
    server, run = guarded
    uid = run_uuid(run)
    with server.client() as auth:
        answers = [
            auth.get(f"/api/jobs/{uid}/log", params={"tail": 5}).text,
            auth.get(f"/files/{uid}/logs/attempt-1.log").text,
            auth.get(f"/runs/{uid}").text,
            auth.get(f"/api/jobs/{uid}").text,
            auth.get("/api/jobs", params={"q": SERVER_SECRET}).text,
        ]
        with auth.stream("GET", f"/api/jobs/{uid}/events") as r:
            chunks: list[str] = []
            for line in r.iter_lines():
                chunks.append(line)
                if len(chunks) > 1 and chunks[-2] == "event: log":  # its data line
                    break
        answers.append("\n".join(chunks))
    for text in answers:
        assert TOKEN not in text and SERVER_SECRET not in text and MCP_SECRET not in text
    assert "token *** mcp *** hf ***" in answers[0]
    assert json.loads(answers[0])["lines"][-1] == "token *** mcp *** hf ***"
    assert os.environ.get("CALC_SETTING") is None  # the value lived only in the server's environment
