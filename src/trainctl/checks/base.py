"""What every check looks at: the typed trainctl config and the backend config built from it.

Checks are functions `Subject -> list[Problem]`; they never import the plan that runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainctl.backends.base import BuiltConfig
    from trainctl.config.compose import Composition
    from trainctl.config.schema import Config


@dataclass
class Number:
    """A derived figure for the plan, with the arithmetic that produced it."""

    label: str
    value: Any
    how: str = ""


@dataclass
class Subject:
    cfg: Config  # trainctl's config, checked against its schema
    comp: Composition  # where each value came from
    backend: str  # verl-ppo | verl-sft | trl-<family> (trl-dpo, trl-rm, ...: trainctl.facts.trl)
    built: BuiltConfig  # the backend's config, as the trainer will read it
    launching: bool = False  # a real launch (missing files are errors) rather than a dry run
    extra: dict = field(default_factory=dict)

    def value(self, path: str, default: Any = None) -> Any:
        """A backend config value, resolved."""
        from trainctl.backends.base import get

        return get(self.built.cfg, path, default)

    @cached_property
    def _rows(self) -> dict[str, int | None]:
        from trainctl.data.readers import parquet_rows

        return {"train": parquet_rows(self.cfg.data.train_files), "val": parquet_rows(self.cfg.data.val_files)}

    def rows(self, split: str) -> int | None:
        """Rows in the train or val file, when it exists (read from the parquet footer, not the data)."""
        return self._rows[split]
