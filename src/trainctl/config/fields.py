"""How a section's fields are declared: each with its documentation and bounds (trainctl.config.schema and every
module that declares settings: the offpolicy section, the reward kinds)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from trainctl.config.types import bounds


def doc(text: str, **limits) -> Any:
    """A required field with its documentation (and bounds: ge=, gt=, le=, lt=)."""
    return field(metadata=bounds(doc=text, **limits))


def opt(text: str, default: Any = None, **limits) -> Any:
    """A field with a default, its documentation and bounds."""
    if isinstance(default, type):  # a nested section: its own defaults
        return field(default_factory=default, metadata=bounds(doc=text, **limits))
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=bounds(doc=text, **limits))
    return field(default=default, metadata=bounds(doc=text, **limits))
