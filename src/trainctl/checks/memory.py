"""Whether the run fits in GPU memory, by trainctl's estimate (trainctl.models.memory): a warning in every GPU plan
that does not, with the cheapest change that makes it fit. An estimate cannot prove an OOM, so never an error."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject


def checks(s: Subject) -> list[Problem]:
    from trainctl.models.catalog import ModelError
    from trainctl.models.info import from_folder, from_option
    from trainctl.models.memory import GiB, estimate, fixes, setup_from, size

    if s.cfg.hardware.device != "cuda" or not s.cfg.hardware.gpu_memory_gb:
        return []
    model = s.cfg.model
    folder = Path(model.path).expanduser()
    try:
        info = from_folder(model.name, folder) if (folder / "config.json").is_file() else from_option(model.name, model)
    except (ModelError, KeyError, ValueError, OSError):
        return []  # nothing to estimate from
    setup = setup_from(s.cfg, s.value)
    e = estimate(info, setup)
    if e.fits is not False:
        return []
    found = fixes(info, setup)
    details = [*e.problems]
    if found:
        details.append(f"with {found[0].text}: {size(found[0].estimate.peak)}")
    return [
        Problem(
            f"this run may not fit in GPU memory: about {size(e.peak)} per GPU of {setup.budget / GiB:.0f} GiB "
            "(trainctl's estimate)",
            key="hardware",
            details=details,
            hint=f"trainctl model info {model.name} ... (the same settings) for the breakdown and every fix",
            severity="warning",
        )
    ]
