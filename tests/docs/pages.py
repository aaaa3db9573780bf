"""The documentation's pages in the order a reader meets them: the README, then docs/ in mkdocs.yml's nav order."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def nav_pages() -> list[Path]:
    """Every page of the site's nav, in its order."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    found: list[Path] = []

    def walk(entries) -> None:
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            if isinstance(value, list):
                walk(value)
            else:
                found.append(DOCS / value)

    walk(nav)
    return found


def written_pages() -> list[Path]:
    """The pages people wrote (the generated references left out), in nav order."""
    return [p for p in nav_pages() if p.parent.name != "reference"]


def label(page: Path) -> str:
    return str(page.relative_to(ROOT))
