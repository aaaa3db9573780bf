"""trainctl.runtime.agent_loop_speed: each sample's agent loop built without Hydra's config where that makes the same
object (a bare class target, as verl's @register writes), by Hydra otherwise."""

from __future__ import annotations

import hydra
import pytest

from trainctl.runtime import agent_loop_speed


class Loop:
    def __init__(self, trainer_config, server_manager, tokenizer=None, **kwargs):
        self.args = (trainer_config, server_manager, tokenizer, kwargs)


TARGET = {"_target_": f"{__name__}.Loop"}


def _hydra_must_not_run(*args, **kwargs):
    raise AssertionError("Hydra was called")


def test_a_bare_class_target_is_the_object_hydra_makes_without_hydra():
    """The same class and arguments, each the very object passed (Hydra keeps objects as they are: allow_objects)."""
    config, manager, extra = object(), object(), object()
    by_hydra = hydra.utils.instantiate(TARGET, trainer_config=config, server_manager=manager, tokenizer=None, x=extra)
    fast = agent_loop_speed.instantiate(
        _hydra_must_not_run, TARGET, trainer_config=config, server_manager=manager, tokenizer=None, x=extra
    )
    assert type(fast) is type(by_hydra) is Loop
    assert fast.args == by_hydra.args and all(a is b for a, b in zip(fast.args[:2], by_hydra.args[:2], strict=True))
    assert fast.args[3]["x"] is extra


@pytest.mark.parametrize(
    "config",
    [{**TARGET, "tokenizer": "from the config"}, {"_target_": f"{__name__}.TARGET.get"}],
    ids=["arguments of its own", "not a class"],
)
def test_anything_else_goes_to_hydra(config):
    calls = []

    def original(*args, **kwargs):
        calls.append((args, kwargs))
        return "hydra's"

    assert agent_loop_speed.instantiate(original, config, trainer_config=1) == "hydra's"
    assert calls == [((config,), {"trainer_config": 1})]


def test_the_module_stands_in_for_hydra_and_verl_still_registers_bare_targets():
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    assert _agent_loop_registry["single_turn_agent"] == {
        "_target_": f"{SingleTurnAgentLoop.__module__}.{SingleTurnAgentLoop.__qualname__}"
    }
    stand_in = agent_loop_speed.wrap_hydra(hydra)
    assert stand_in.utils.get_class is hydra.utils.get_class and stand_in.main is hydra.main
    assert type(stand_in.utils.instantiate(TARGET, trainer_config=1, server_manager=2)) is Loop


def test_a_cpu_process_gets_the_stand_in_once_it_imports_the_agent_loop(plugin_probe):
    assert plugin_probe(VERL_PLATFORM="cpu")["agent_loop_hydra"] == "trainctl.runtime.agent_loop_speed"
