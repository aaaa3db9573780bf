"""The metric examples of the README and the docs pages name metrics the runs they show really log (checked on the
session's real runs)."""

from __future__ import annotations

import re

from tests.docs.pages import README, label, written_pages
from trainctl.metrics import read_metrics

# the run folders the examples name -> the session run of the same algorithm family
FAMILY_RUN = {"quickstart": "sft_run", "grpo": "grpo_run", "dapo": "grpo_run", "dpo": "dpo_run"}
_METRIC = re.compile(r"(?:-m|--metric|--keep-best) (\S+)")


def examples() -> list[tuple[str, str, str]]:
    """(page: line, run name, metric) for every `trainctl ckpt|runs ...` example line that names a metric."""
    found = []
    for page in (README, *written_pages()):
        for line in page.read_text().splitlines():
            if not re.match(r"trainctl (ckpt|runs) ", line):
                continue
            command = line.split("#")[0]
            for metric in _METRIC.findall(command):
                if metric.startswith("eval/"):
                    continue  # written by `trainctl eval`, not by training: the docs tour runs that example
                for run in re.findall(r"runs/([\w.-]+)", command):
                    found.append((f"{label(page)}: {line}", run, metric))
    return found


def test_the_docs_name_metrics_their_runs_log(request):
    cases = examples()
    assert len(cases) >= 5 and {r for _, r, _ in cases} >= {"grpo", "quickstart"}
    logged = {}
    for line, run, metric in cases:
        fixture = FAMILY_RUN[run]
        if fixture not in logged:
            path = request.getfixturevalue(fixture).path
            logged[fixture] = {k for m in read_metrics(path).values() for k in m}
        assert metric in logged[fixture], f"`{line}`: a {run} run never logs {metric}"
