"""The lazy verl-class factory: modules that subclass verl's classes import without verl, and each class is built
once, on first access, under the dotted name verl (and pickle) find it by."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from trainctl.runtime.lazy import lazy_classes

# module -> (class verl loads from it, verl's base class)
LAZY = {
    "trainctl.runtime.reward_model": (
        "SequenceClassifierRewardManager",
        "verl.experimental.reward_loop.reward_manager.base.RewardManagerBase",
    ),
    "trainctl.runtime.judge": (
        "JudgeRewardManager",
        "verl.experimental.reward_loop.reward_manager.base.RewardManagerBase",
    ),
    "trainctl.runtime.hf_rollout": ("HFServerAdapter", "verl.workers.rollout.base.BaseRollout"),
    "trainctl.runtime.verl_cpu": ("PlatformCPU", "verl.plugin.platform.PlatformBase"),
}


def test_a_class_is_built_once_on_first_access():
    built = []

    class Base:
        pass

    def factory():
        built.append(1)

        class Made(Base):
            pass

        return Made

    getattr_ = lazy_classes(__name__, {"Made": factory})
    assert built == []
    first, second = getattr_("Made"), getattr_("Made")
    assert first is second and built == [1]
    assert (first.__module__, first.__qualname__) == (__name__, "Made")
    with pytest.raises(AttributeError, match="has no attribute 'Other'"):
        getattr_("Other")


def test_the_modules_import_without_verl():
    """Plan-time checks read these modules' constants: importing them must not cost verl's import."""
    code = (
        "import sys\n"
        f"for m in {sorted(LAZY)!r}:\n"
        "    __import__(m)\n"
        "print(sorted(k for k in sys.modules if k == 'verl' or k.startswith('verl.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", sorted(LAZY))
def test_verl_finds_each_class_by_its_dotted_name_and_pickle_finds_it_again(module):
    import importlib

    name, base = LAZY[module]
    base_module, base_name = base.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, getattr(importlib.import_module(base_module), base_name))
    assert getattr(importlib.import_module(module), name) is cls
    assert pickle.loads(pickle.dumps(cls)) is cls
