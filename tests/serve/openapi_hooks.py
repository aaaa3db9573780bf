"""Schemathesis hooks for tests/serve/test_app.py's runs with actions on (SCHEMATHESIS_HOOKS names this module): a
job the tester creates trains one step on one process at most, whatever it generated. The fields whose random
values cannot name something that exists (a recipe, a model, a file, an override's key) are left out of the bodies
meant to be accepted, so that the jobs it creates plan cleanly and really start; the others stay as generated."""

from __future__ import annotations

import itertools

import schemathesis

CHEAP = ["run.max_steps=1", "hardware.gpus_per_node=1", "hardware.nnodes=1"]
KEEP = ("name", "description", "num_epochs", "learning_rate")
NAMES = itertools.count(1)


@schemathesis.hook("map_case").apply_to(method="POST", path="/api/jobs")
def one_step_jobs(ctx, case):
    negative = case.meta is not None and case.meta.generation.mode.is_negative
    if isinstance(case.body, dict) and not negative:  # a body meant to be refused is sent as generated
        # a job of its own (the default name is taken once a job so named started): each can start
        name = case.body.get("name") or f"st-{next(NAMES)}"
        case.body = {**{k: v for k, v in case.body.items() if k in KEEP}, "name": name, "overrides": CHEAP}
    return case
