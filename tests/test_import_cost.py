"""trainctl's processes do not import scikit-learn, which transformers would load for nothing trainctl uses (2.4 s of
CPU each): the CLI, and every process of a verl run trainctl launched (its plugin loads at the end of `import verl`)."""

from __future__ import annotations

import os
import subprocess
import sys

ASKS = "import transformers.generation.candidate_generator as g, sys; print('sklearn' in sys.modules, g.__name__)"


def _run(code: str, **env: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def test_transformers_generation_loads_without_scikit_learn_once_skipped():
    # that it loads scikit-learn otherwise: the untouched verl process below (verl imports it through transformers)
    skipped = _run(f"from trainctl.import_cost import skip_sklearn; skip_sklearn(); {ASKS}")
    assert skipped == ["False", "transformers.generation.candidate_generator"]


def test_a_verl_process_trainctl_launched_skips_it_and_one_it_did_not_does_not(plugin_probe):
    # verl loads transformers' generation code either way; only the process trainctl launched does it without
    # scikit-learn (each a fresh verl process: a fork of a process that imported torch and transformers, not verl,
    # and not transformers' generation code)
    assert plugin_probe(TRAINCTL_LAUNCHED="1")["sklearn_with_generation"] == [False, True]
    assert plugin_probe()["sklearn_with_generation"] == [True, True]
