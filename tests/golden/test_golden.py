"""Each algorithm preset's resolved backend config matches its golden file (regenerate with `make golden`)."""

from __future__ import annotations

import pytest

from tests.golden.regenerate import HERE, algorithms, render


@pytest.mark.parametrize("algorithm", algorithms())
def test_backend_config_matches_golden(algorithm):
    golden = HERE / f"{algorithm}.yaml"
    assert golden.is_file(), f"no golden file for {algorithm}: run `make golden`"
    assert render(algorithm) == golden.read_text(), f"{algorithm} changed: review, then `make golden`"
