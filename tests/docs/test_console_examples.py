"""The troubleshooting page's errors are the ones trainctl prints: each `$ trainctl ...` of its console blocks is run
through the real CLI, exits 1 or 2, and prints every line shown below it (a line ending in `...` is shown cut)."""

from __future__ import annotations

import shlex

import pytest

from tests.docs.pages import DOCS

PAGE = DOCS / "troubleshooting.md"


def examples() -> list[tuple[str, list[str]]]:
    """(command, the output lines shown) of each console block of the page."""
    found, block = [], None
    for line in PAGE.read_text().splitlines():
        if line.startswith("```"):
            if block is None and line.strip() == "```console":
                block = []
            elif block is not None:
                found.append((block[0].removeprefix("$ "), block[1:]))
                block = None
            continue
        if block is not None:
            block.append(line)
    return found


def test_the_page_has_examples():
    assert len(examples()) >= 3


@pytest.mark.parametrize("command, shown", examples(), ids=[command for command, _ in examples()])
def test_each_error_is_printed_as_shown(command, shown, cli, tiny_model):
    words = shlex.split(command)
    assert words[0] == "trainctl"
    result = cli(*words[1:])
    assert result.exit_code in (1, 2), result.output
    printed = [line.rstrip() for line in result.output.splitlines()]
    for line in shown:
        if line.endswith("..."):
            assert any(p.startswith(line[:-3]) for p in printed), (line, result.output)
        else:
            assert line in printed, (line, result.output)
