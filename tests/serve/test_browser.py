"""`trainctl serve` in a real browser: Debian's headless Chromium driven by Playwright (never a downloaded browser
build). The runs table, a run page with its charts drawn, the agent run's trajectories, and a quickstart launched
from the launch form and watched to its end; no page may request anything from outside 127.0.0.1.

TRAINCTL_SCREENSHOTS=docs/serve pytest tests/serve/test_browser.py writes the screenshots of docs/guides/platform.md
there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.real_runs import FAST_SFT, GRPO_STEPS
from tests.serve.conftest import end, fake_live_run, server_env, start_server, stop_if_running
from trainctl.serve.store import run_uuid
from trainctl.serve.trajectories import step_summary

CHROMIUM = Path("/usr/bin/chromium")
# uPlot draws the first series in this colour (static/app.js COLORS[0]): its pixels on a canvas are the curve
SERIES_RGB = (47, 111, 223)
SHOTS = os.environ.get("TRAINCTL_SCREENSHOTS")


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def _browser_or_skip():
    if not CHROMIUM.is_file():
        pytest.skip(
            "Debian's chromium is not installed: run `sudo apt-get install -y chromium` (make test installs it when "
            "it runs as root with apt-get)"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: pip install -e '.[test]' (never `playwright install`)")
    return sync_playwright


@pytest.fixture(scope="module")
def site(sft_run, grpo_run, agent_run, real_home, copies, tmp_path_factory):
    """One server (actions on) and one headless Chromium for the module; every request the pages make is kept."""
    sync_playwright = _browser_or_skip()
    sleeper = fake_live_run(sft_run.path, copies / "sft-live")  # a running run in the table
    roots = [copies, *(r.path.parent for r in (sft_run, grpo_run, agent_run))]
    log = tmp_path_factory.mktemp("serve-browser") / "server.log"
    server = start_server(roots, server_env(real_home), copies.parent, "--allow-actions", log=log)
    pw = sync_playwright().start()
    browser = pw.chromium.launch(
        executable_path=str(CHROMIUM),
        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
    )
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    requests: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 500 else None)
    try:
        yield server, page, requests, problems
    finally:
        browser.close()
        pw.stop()
        server.stop()
        end(sleeper)
    outside = [u for u in requests if not u.startswith(server.url + "/") and not u.startswith(("data:", "about:"))]
    assert not outside, f"the pages requested from outside this server: {outside}"


def _shot(page, name: str, tmp: Path, readme: bool = True) -> None:
    """A screenshot in the test's folder; with TRAINCTL_SCREENSHOTS, the docs' ones there too."""
    for folder in [tmp, *([Path(SHOTS)] if SHOTS and readme else [])]:
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"{name}.png"))


def _curve_pixels(page, selector: str) -> list[int]:
    """For each canvas under `selector`: how many of its pixels are the first series' colour (the curve, points)."""
    return page.evaluate(
        """([selector, rgb]) => Array.from(document.querySelectorAll(selector + ' canvas')).map((c) => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4) {
                if (d[i + 3] > 200 && Math.abs(d[i] - rgb[0]) < 25 && Math.abs(d[i + 1] - rgb[1]) < 25
                    && Math.abs(d[i + 2] - rgb[2]) < 25) n++;
            }
            return n;
        })""",
        [selector, list(SERIES_RGB)],
    )


def test_the_runs_table_sorts_and_filters(site, tmp_path):
    server, page, _, problems = site
    page.goto(server.url + "/")
    names = lambda: page.locator("#runs tbody tr:visible td:nth-child(2)").all_inner_texts()  # noqa: E731
    assert {"sft", "grpo", "agent", "sft-live"} <= set(names())
    statuses = dict(zip(names(), page.locator("#runs tbody tr .status").all_inner_texts(), strict=True))
    assert statuses["grpo"] == "done" and statuses["sft-live"] == "running"
    page.click("th[data-key=name]")
    assert names() == sorted(names(), key=str.lower)
    page.click("th[data-key=name]")
    assert names() == sorted(names(), key=str.lower, reverse=True)
    _shot(page, "runs", tmp_path)
    page.fill("#filter", "live")  # (not "grpo": the agent run is a GRPO run too, and the filter reads every column)
    assert names() == ["sft-live"]
    page.fill("#filter", "")
    assert not problems


def test_a_run_with_an_environment_gets_a_chart_per_task(site, grpo_run, copies):
    """A run with env=... logs env/TASK/reward and env/TASK/level (trainctl.runtime.env_metrics): charted per task as
    they arrive, labelled by the task (a copy of the real GRPO run, its steps given two tasks' figures)."""
    import json

    from tests.serve.conftest import copy_run

    server, page, _, problems = site
    copy_run(grpo_run.path, copies / "grpo-env")
    for log in (copies / "grpo-env" / "metrics").glob("*.jsonl"):
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        for r in records:
            r["data"].update(
                {f"env/{t}/{w}": r["step"] / 10 for t in ("spell_backward", "gcd") for w in ("reward", "level")}
            )
        log.write_text("".join(json.dumps(r) + "\n" for r in records))
    page.goto(f"{server.url}/runs/grpo-env")
    page.wait_for_selector(".chart[data-metric='env/spell_backward/level'] canvas")
    charts = page.locator(".chart").evaluate_all("els => els.map(e => [e.dataset.metric, e.innerText])")
    env = [(m, label.splitlines()[0]) for m, label in charts if m.startswith("env/")]
    assert [m for m, _ in env] == [f"env/{t}/{w}" for t in ("gcd", "spell_backward") for w in ("reward", "level")], env
    assert env[0][1].startswith("gcd reward"), env
    assert not problems


def test_a_run_page_draws_its_charts(site, grpo_run, tmp_path):
    server, page, _, problems = site
    page.goto(f"{server.url}/runs/grpo")
    page.wait_for_selector(".chart canvas")
    expect(page.locator("#log")).not_to_be_empty()
    charts = page.locator(".chart").evaluate_all("els => els.map(e => e.dataset.metric)")
    assert charts[:2] == ["critic/score/mean", "actor/kl_loss"]
    drawn = _curve_pixels(page, ".chart[data-metric='critic/score/mean']")
    assert drawn and drawn[0] > 50, f"no curve on the reward chart ({drawn} pixels of its colour)"
    # the run's details arrive with their own request, after the charts': expect() waits for them
    expect(page.locator("#attempts tbody tr")).to_have_count(1)
    expect(page.locator("#status")).to_have_text("done")
    expect(page.locator("#steps")).to_have_text(f"{GRPO_STEPS}/{GRPO_STEPS}")
    page.locator("details").first.evaluate("d => d.open = true")
    assert "algorithm:" in page.inner_text("#cfg-trainctl")
    _shot(page, "run", tmp_path)
    assert not problems


def test_the_agent_runs_trajectories(site, agent_run, tmp_path):
    server, page, _, problems = site
    page.goto(f"{server.url}/runs/{run_uuid(agent_run.path)}/trajectories")
    page.wait_for_selector(".traj")
    assert page.locator(".traj").count() > 0
    assert page.locator(".call", has_text="calculator(").count() > 0  # a tool call with its arguments
    assert page.locator(".turn.tool").count() > 0  # a tool's result
    _shot(page, "trajectories", tmp_path)
    # the step with the most trajectories with a tool error (a learning run may have none at its last step)
    worst = max(step_summary(agent_run.path), key=lambda s: s["with_errors"])
    page.select_option("#step", str(worst["step"]))
    expect(page.locator("#traj-count")).to_have_text(f"{worst['trajectories']} trajectories at step {worst['step']}")
    page.select_option("#errors", "only")
    expect(page.locator("#traj-count")).to_have_text(f"{worst['with_errors']} trajectories at step {worst['step']}")
    counts = page.locator(".traj .head span.muted:has-text('tool call')").all_inner_texts()
    assert len(counts) == worst["with_errors"] and all(" 0 error" not in c for c in counts)
    page.select_option("#errors", "")
    page.locator(".same-prompt").first.click()
    expect(page.locator("#traj-count")).to_contain_text("every step")
    assert not problems


@pytest.mark.slow  # a run of its own (half a minute in the suite); the form's checks are in the default suite
def test_a_quickstart_launched_from_the_form_and_watched_to_done(site, copies, tmp_path):
    server, page, _, problems = site
    page.goto(f"{server.url}/launch")
    page.select_option("select[data-group=recipe]", "quickstart")
    page.fill("input[name=name]", "browser-job")
    page.fill("textarea[name=overrides]", "\n".join([*FAST_SFT[1:], "run.max_steps=1"]))
    t0 = time.monotonic()
    page.click("#plan")
    page.wait_for_selector("#plan-text:not([hidden])", timeout=600_000)
    assert page.inner_text("#plan-text").startswith("Plan: sft on model=tiny")
    assert page.locator(".problem:not(.warning)").count() == 0
    _shot(page, "launch", tmp_path)
    page.click("#start")
    try:
        page.wait_for_url(f"{server.url}/runs/browser-job", timeout=600_000)
        expect(page.locator("#status")).to_have_text("done", timeout=600_000)
    finally:
        stop_if_running(copies / "browser-job")
    print(f"browser job: planned, started and done in {time.monotonic() - t0:.1f} s")
    page.wait_for_selector(".chart[data-metric='train/loss'] canvas")
    assert _curve_pixels(page, ".chart[data-metric='train/loss']")[0] > 0  # the one step's point
    assert (copies / "browser-job" / "command.sh").is_file()
    _shot(page, "run-launched", tmp_path, readme=False)
    assert not problems
