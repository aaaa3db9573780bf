"""The documentation site builds with warnings as errors (`make docs`: every page in the nav, every link and anchor
resolved), offline, and the README links into it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.docs.pages import DOCS, README, ROOT, nav_pages


def test_the_site_builds_strictly(tmp_path):
    """mkdocs build --strict, as `make docs` runs it: a page left out of the nav, a broken link or anchor fails."""
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for page in nav_pages():
        html = site / page.relative_to(DOCS).with_suffix(".html")
        assert html.is_file(), html
    # offline: no web fonts, no scripts or styles from elsewhere (links out are fine: they load nothing)
    for html in site.rglob("*.html"):
        text = html.read_text()
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, html
        outside = re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?://[^"]+)"', text)
        assert not outside, (html, outside)


def test_every_docs_page_is_in_the_nav():
    pages = set(nav_pages())
    assert set(DOCS.rglob("*.md")) == pages, set(DOCS.rglob("*.md")) ^ pages


def test_the_readme_is_a_landing_page_whose_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert len(local) >= 20
    for link in local:
        assert (ROOT / link).is_file(), f"README links to {link}, which is not there"
