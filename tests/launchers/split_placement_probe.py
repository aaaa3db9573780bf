"""Run as `python -m tests.launchers.split_placement_probe ADDRESS` against a two-node Ray cluster: prints, as JSON,
where trainctl.runtime.split_placement puts offpolicy=split's rollout group with no training pool yet, with the
training's group on the head, and with it on the other node (a driver of its own: the test's process stays out of
Ray)."""

from __future__ import annotations

import json
import sys

import ray
from ray.util.placement_group import placement_group, remove_placement_group

from trainctl.runtime.split_placement import TRAINING_POOL, rollout_nodes


def main(address: str) -> None:
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    alive = [n for n in ray.nodes() if n["Alive"]]
    head = next(n["NodeID"] for n in alive if "node:__internal_head__" in n["Resources"])
    other = next(n["NodeID"] for n in alive if n["NodeID"] != head)
    found = {"head": head, "other": other, "alone": rollout_nodes(1, 1)}
    for where, node in (("training_on_head", head), ("training_on_other", other)):
        pg = placement_group([{"CPU": 1}], name=f"{TRAINING_POOL}verl_group_1:0",
                             bundle_label_selector=[{"ray.io/node-id": node}])  # fmt: skip
        ray.get(pg.ready())
        found[where] = rollout_nodes(1, 1)
        remove_placement_group(pg)
    print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1])
