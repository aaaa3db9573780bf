"""An import trainctl's processes skip: transformers imports scikit-learn whenever it is installed (lm-eval, a
dependency since issue 46, installs it), for roc_curve, which only assisted generation with a confidence threshold
uses; trainctl never does. The import costs about 2.4 s of CPU in every process that loads transformers' generation
code (measured here: `import verl.workers.engine` 10.8 -> 8.4 s): the CLI's, and each Ray worker and torchrun rank
of a run (seven processes for a GRPO run on the CPU).

skip_sklearn() installs an import hook that tells transformers scikit-learn is absent just before its generation code
asks; it imports nothing itself. skip_scipy() does the same for SciPy's optimizer, which transformers' object-detection
losses import whenever SciPy is installed (vLLM and lm-eval install it) and modeling_utils loads them: ~0.5 s of CPU
in every process that loads a model. trainctl's entry points call both (skip_unused): the CLI, the verl plugin (in
every process of a verl run trainctl launched), the TRL entry point.

hide_vllm() does the same for vLLM in a verl run that uses no vLLM engine (trainctl sets TRAINCTL_NO_VLLM=1 for it):
verl's checkpoint engines import `vllm.distributed` wherever vLLM is installed (vLLM's CPU build is, here), ~1 s of
CPU (torch._inductor with it) in the driver's task runner, the training worker and the agent-loop worker, for an
engine a CPU run never uses, and in each rank of a verl SFT run. verl imports those engines under `except
ImportError`, verl and TRL ask for vLLM with `importlib.util.find_spec`: hidden, it is absent to both.

hide_trl() hides TRL from a verl run without a critic (TRAINCTL_NO_TRL=1: SFT, and the PPO family but PPO itself):
as verl loads a model it imports TRL's PPO trainer (wandb with it), where TRL is installed, to patch the value-head
model a critic may be (verl.models.transformers.monkey_patch, under `is_trl_available()`: find_spec again). Each SFT
rank spent 1.2 s of CPU on a busy host on it (and 1.9 s on vLLM); a GRPO run's training worker ~1 s, and its fork
server another second preloading TRL.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.abc
import importlib.machinery
import os
import sys

# the one transformers module that imports scikit-learn on load (in transformers 5: `from sklearn.metrics import
# roc_curve`)
ASKS = "transformers.generation.candidate_generator"


def _absent() -> bool:
    return False


class _SklearnAbsent(importlib.abc.MetaPathFinder):
    """Finds nothing: on the way to the module that asks, it answers transformers' question in advance."""

    def find_spec(self, name, path=None, target=None):
        if name == ASKS:
            # `from ..utils import is_sklearn_available` reads the package's name; the module's for the rest
            for module in ("transformers.utils", "transformers.utils.import_utils"):
                if module in sys.modules:
                    sys.modules[module].is_sklearn_available = _absent
        return None


def skip_sklearn() -> None:
    if not any(isinstance(finder, _SklearnAbsent) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SklearnAbsent())


def _hide(package: str) -> None:
    """`package` absent to this process: importing it raises ModuleNotFoundError and `importlib.util.find_spec`
    answers None, as without it installed (Python's meaning of None in sys.modules)."""
    sys.modules.setdefault(package, None)


def hide_vllm() -> None:
    _hide("vllm")


def hide_trl() -> None:
    _hide("trl")


def skip_for_run() -> None:
    """What a process of a verl run trainctl launched leaves out (the verl plugin, in every such process, and the fork
    server, before it imports for the run's workers): scikit-learn and SciPy's optimizer always, vLLM where the run
    uses none, TRL in a run without a critic."""
    launched = os.environ.get("TRAINCTL_LAUNCHED") == "1"
    if launched or os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
        skip_unused()
    if launched and os.environ.get("TRAINCTL_NO_VLLM") == "1":
        hide_vllm()
    if launched and os.environ.get("TRAINCTL_NO_TRL") == "1":
        hide_trl()


# the transformers module that loads the object-detection losses (modeling_utils imports it: every process that loads
# a model); four of them import scipy.optimize on load when SciPy is installed (vLLM and lm-eval install it)
LOSSES = "transformers.loss.loss_utils"


class _DetectionLossesWithoutScipy(importlib.abc.MetaPathFinder):
    """Loads LOSSES with transformers' is_scipy_available() answering False while it and the losses it imports load
    (never after): SciPy's optimizer, ~0.5 s of CPU, is for matching boxes in object detection, which trainctl never
    trains (such a loss would then fail for want of linear_sum_assignment)."""

    def find_spec(self, name, path=None, target=None):
        if name != LOSSES or "transformers.utils" not in sys.modules:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            utils = sys.modules["transformers.utils"]
            available = utils.is_scipy_available
            utils.is_scipy_available = _absent
            try:
                load(module)
            finally:
                utils.is_scipy_available = available

        spec.loader.exec_module = exec_module
        return spec


def skip_scipy() -> None:
    if not any(isinstance(finder, _DetectionLossesWithoutScipy) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DetectionLossesWithoutScipy())


def skip_unused() -> None:
    """What no trainctl process uses: scikit-learn's metrics and SciPy's optimizer, both through transformers."""
    skip_sklearn()
    skip_scipy()


@contextlib.contextmanager
def collector_paused():
    """Python's garbage collector off while a block loads libraries, and what it made frozen after (gc.freeze: out of
    the collector's generations, as Python's documentation advises for a process that forks without exec). Each full
    collection walks every object the process holds, ~0.3 s of CPU once torch, transformers, Ray and verl are loaded
    (665k objects), and the collector runs one again each time a load grows the heap by a quarter: `import
    verl.utils.config` took 4.4 s of CPU with it and 3.6 s without (medians of four, a busy host). Frozen, a fork's
    collections (Ray asks its workers for them) walk only what the fork made, rather than reading and writing every
    inherited page; the libraries' objects live as long as the process anyway. Nothing is frozen when the block loaded
    no module (a long-lived process, such as `trainctl serve`, would keep its young garbage for good each time). At
    exit they are unfrozen: the interpreter's last collection frees them, as it did before (frozen, triton's bindings
    print a page of "nanobind: leaked" warnings as the process ends)."""
    enabled, loaded = gc.isenabled(), len(sys.modules)
    gc.disable()
    try:
        yield
    finally:
        if len(sys.modules) != loaded:
            freeze_loaded()
        if enabled:
            gc.enable()


def freeze_loaded() -> None:
    """gc.freeze() what the process holds now (the libraries it loaded), unfrozen at exit (collector_paused)."""
    gc.freeze()
    if not _unfreeze_at_exit:
        import atexit

        atexit.register(gc.unfreeze)
        _unfreeze_at_exit.append(True)


_unfreeze_at_exit: list[bool] = []  # registered once a process


# the libraries whose first import is seconds of CPU (each imports most of the others it needs under it)
HEAVY = ("torch", "transformers", "verl", "vllm", "ray", "datasets", "trl", "peft", "lm_eval", "gguf", "mcp")


class _HeavyLoadsWithCollectorPaused(importlib.abc.MetaPathFinder):
    """Loads each HEAVY package with the collector paused (collector_paused), and all it imports in turn."""

    def find_spec(self, name, path=None, target=None):
        if name not in HEAVY:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None  # not installed here, or not a plain package: the other finders answer as before
        load = spec.loader.exec_module

        def exec_module(module):
            with collector_paused():
                load(module)

        spec.loader.exec_module = exec_module
        return spec


def pause_collector_for_heavy_loads() -> None:
    """For a process that imports the HEAVY libraries as its commands need them (the CLI): each loads with the
    collector paused, wherever it is first imported (`trainctl eval` of the tiny model: 8.9-9.7 -> 8.0-8.7 s of CPU,
    three interleaved pairs)."""
    if not any(isinstance(finder, _HeavyLoadsWithCollectorPaused) for finder in sys.meta_path):
        sys.meta_path.insert(0, _HeavyLoadsWithCollectorPaused())
