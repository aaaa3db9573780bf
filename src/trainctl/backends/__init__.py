"""Translation of the trainctl config into each backend's own config: verl (PPO family, SFT) and TRL (DPO, reward
models, KTO, ORPO, CPO/SimPO)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainctl.facts.trl import TRAINERS

if TYPE_CHECKING:
    from trainctl.backends.base import Backend


def backend_for(family: str) -> Backend:
    """The backend that runs an algorithm family: verl main_ppo (ppo), verl sft_trainer (sft), TRL (one family per
    TRL trainer: trainctl.facts.trl.TRAINERS)."""
    if family in TRAINERS:
        from trainctl.backends.trl import TrlBackend

        return TrlBackend(family)
    from trainctl.backends.verl import VerlPPO, VerlSFT

    return VerlPPO() if family == "ppo" else VerlSFT()
