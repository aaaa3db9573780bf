"""trainctl's processes do not import scikit-learn, which transformers would load for nothing trainctl uses (2.4 s of
CPU each): the CLI, and every process of a verl run trainctl launched (its plugin loads at the end of `import verl`);
nor vLLM where the run has no vLLM engine, nor TRL in a verl SFT run (trainctl.import_cost)."""

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


# a model's code loads the object-detection losses, which import SciPy's optimizer when asked whether SciPy is there
LOSSES = (
    "import transformers.modeling_utils, transformers.loss.loss_for_object_detection as d; "
    "print('scipy.optimize' in sys.modules, sys.modules['transformers.utils'].is_scipy_available(), d.__name__)"
)


def test_transformers_generation_and_model_code_load_without_scikit_learn_and_scipy_once_skipped():
    # that they load them otherwise: the untouched verl process below (verl imports both through transformers)
    skipped = _run(f"from trainctl.import_cost import skip_unused; skip_unused(); {ASKS}; {LOSSES}")
    assert skipped[:2] == ["False", "transformers.generation.candidate_generator"]
    # only while the losses loaded: transformers still answers that SciPy is there
    assert skipped[2:] == ["False", "True", "transformers.loss.loss_for_object_detection"]


def test_a_verl_process_trainctl_launched_skips_it_and_one_it_did_not_does_not(plugin_probe):
    # verl loads transformers' generation code either way; only the process trainctl launched does it without
    # scikit-learn (each a fresh verl process: a fork of a process that imported torch and transformers, not verl,
    # and not transformers' generation code)
    assert plugin_probe(TRAINCTL_LAUNCHED="1")["sklearn_with_generation"] == [False, True]
    untouched = plugin_probe()
    assert untouched["sklearn_with_generation"] == [True, True]
    # and SciPy's optimizer with a model's code (the probes' zygote loaded that before any hook: see the test above)
    assert untouched["scipy_with_losses"] == [True, True]


HIDDEN = "import importlib.util as u; from trainctl.import_cost import skip_for_run; skip_for_run(); " + (
    "print(*(u.find_spec(p) is not None for p in ('trl', 'vllm', 'torch')))"
)


def test_a_run_trainctl_launched_hides_what_its_environment_says_it_does_not_use():
    assert _run(HIDDEN, TRAINCTL_LAUNCHED="1", TRAINCTL_NO_TRL="1", TRAINCTL_NO_VLLM="1") == ["False", "False", "True"]
    assert _run(HIDDEN, TRAINCTL_LAUNCHED="1", TRAINCTL_NO_VLLM="1") == ["True", "False", "True"]
    # a process trainctl did not launch (the variables alone, say from a user's shell, hide nothing)
    assert _run(HIDDEN, TRAINCTL_NO_TRL="1", TRAINCTL_NO_VLLM="1") == ["True", "True", "True"]


def test_the_session_sft_and_grpo_runs_loaded_their_models_without_trl(sft_run, grpo_run):
    """verl says when it patches TRL's value-head model, which it does as it loads a model wherever TRL is there;
    the SFT run's rank and the GRPO run's training worker, with TRL hidden (neither has a critic), never did."""
    import inspect

    from verl.models.transformers import monkey_patch

    said = "Monkey patch state_dict in AutoModelForCausalLMWithValueHead."
    assert said in inspect.getsource(monkey_patch.apply_monkey_patch)
    for run in (sft_run, grpo_run):
        log = (run.path / "logs" / "attempt-1.log").read_text()
        assert "step:1 - " in log, f"{run.path.name}: its trainer's own output is in the log"
        assert said not in log, run.path.name


PAUSED = """
import gc, sys
from trainctl.import_cost import collector_paused
gc.disable()
with collector_paused():
    pass
print(gc.isenabled(), gc.get_freeze_count())
gc.enable()
with collector_paused():
    print(gc.isenabled())
    import email.mime.multipart
print(gc.isenabled(), gc.get_freeze_count() > 1000)
frozen = gc.get_freeze_count()
with collector_paused():
    garbage = [[]]
    garbage[0].append(garbage)
del garbage
print(gc.get_freeze_count() == frozen, gc.collect() > 0)
"""


def test_the_collector_is_paused_while_libraries_load_and_what_they_made_is_frozen():
    """trainctl.import_cost.collector_paused, for the fork server's imports, the TRL entry point's and the backend's
    own validation: the collector off in the block and as found after it; what a block that loaded modules made is
    frozen; a block that loaded none freezes nothing (its garbage is collected as before)."""
    lines = _run(PAUSED)
    assert lines[:2] == ["False", "0"], "left off as found, nothing frozen"
    assert lines[2] == "False", "off while the block runs"
    assert lines[3:5] == ["True", "True"], "on again after, the import's objects frozen"
    assert lines[5:7] == ["True", "True"], "no import: nothing more frozen, the block's cycle collected"


def test_the_cli_loads_heavy_libraries_with_the_collector_paused():
    """The CLI's hook (import_cost.pause_collector_for_heavy_loads): a HEAVY library's first import, wherever it
    happens, runs with the collector paused and leaves what it made frozen; a process without the hook freezes
    nothing."""
    code = "import gc, gguf; print(gc.isenabled(), gc.get_freeze_count() > 1000)"
    hooked = _run(f"from trainctl.import_cost import pause_collector_for_heavy_loads as p; p(); {code}")
    assert hooked == ["True", "True"]
    assert _run(code) == ["True", "False"]
