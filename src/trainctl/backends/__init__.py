"""Translation of the trainctl config into each backend's own config: verl (PPO family, SFT) and TRL (DPO)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainctl.backends.base import Backend


def backend_for(family: str) -> Backend:
    """The backend that runs an algorithm family: verl main_ppo (ppo), verl sft_trainer (sft), TRL (dpo)."""
    if family == "dpo":
        from trainctl.backends.trl_dpo import TrlDPO

        return TrlDPO()
    from trainctl.backends.verl import VerlPPO, VerlSFT

    return VerlPPO() if family == "ppo" else VerlSFT()
