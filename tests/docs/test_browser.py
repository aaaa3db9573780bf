"""The built documentation site in a real browser (Debian's chromium driven by Playwright, as tests/serve's browser
tests: never a downloaded build): every page loads with no console error and no request off this host, every internal
link and anchor resolves, and the in-browser search finds a config key."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from tests.docs.pages import ROOT

CHROMIUM = Path("/usr/bin/chromium")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class _Links(HTMLParser):
    """The hrefs of a page's links and the ids its elements carry."""

    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as `make docs` builds it, served from 127.0.0.1, and a headless chromium page that records every
    request and every console error."""
    if not CHROMIUM.is_file():
        pytest.skip("Debian's chromium is not installed: run `sudo apt-get install -y chromium` (make test does)")
    from playwright.sync_api import sync_playwright

    out = tmp_path_factory.mktemp("docs") / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    pw = sync_playwright().start()
    browser = pw.chromium.launch(
        executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    )
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
    try:
        yield out, url, page, requests, errors
    finally:
        browser.close()
        pw.stop()
        server.shutdown()


def test_every_page_loads_and_every_internal_link_resolves(site):
    out, url, page, requests, errors = site
    pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html") if p.name != "404.html")
    assert len(pages) >= 20
    parsed: dict[str, _Links] = {}
    for name in pages:
        parser = _Links()
        parser.feed((out / name).read_text())
        parsed[name] = parser
    broken = []
    for name, links in parsed.items():
        for href in links.hrefs:
            target = urlsplit(urljoin(url + name, href))
            if target.scheme not in ("http", "https") or target.netloc != urlsplit(url).netloc:
                continue  # a link out (it loads nothing until clicked)
            path = target.path.lstrip("/") or "index.html"
            if path.endswith("/"):
                path += "index.html"
            if not (out / path).is_file():
                broken.append(f"{name}: {href} (no {path})")
            elif target.fragment and path.endswith(".html"):
                ids = parsed[path].ids if path in parsed else set()
                if target.fragment not in ids:
                    broken.append(f"{name}: {href} (no #{target.fragment} in {path})")
    assert not broken, "links that resolve to nothing:\n" + "\n".join(broken)
    for name in pages:
        response = page.goto(url + name)
        assert response is not None and response.ok, name
        assert page.locator("h1").count() >= 1, name
    page.goto(url + "reference/config.html#lora")
    assert page.locator("#lora").is_visible()
    assert not errors, errors
    outside = [u for u in requests if not u.startswith(url) and not u.startswith(("data:", "blob:", "about:"))]
    assert not outside, f"requests off this host: {outside}"


def test_search_finds_a_config_key(site):
    _, url, page, requests, errors = site
    page.goto(url + "index.html")
    box = page.locator("input.md-search__input")
    box.click()  # the header's search box (a wide window shows it; a narrow one, its button)
    # the index loads in a web worker: a query typed before it is ready is dropped
    meta = page.locator(".md-search-result__meta")
    page.wait_for_function(
        "() => !document.querySelector('.md-search-result__meta').textContent.includes('Initializing')",
        timeout=20_000,
    )
    assert "Type to start searching" in meta.inner_text()
    box.press_sequentially("lora.rank")  # typed: the search reads key presses, not a value set at once
    results = page.locator(".md-search-result__item a")
    results.first.wait_for(timeout=20_000)
    hrefs = results.evaluate_all("els => els.map(e => e.href)")
    assert any("reference/config.html" in h for h in hrefs), hrefs
    assert not errors, errors
    outside = [u for u in requests if not u.startswith(url) and not u.startswith(("data:", "blob:", "about:"))]
    assert not outside, f"requests off this host: {outside}"
