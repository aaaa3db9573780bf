"""Every backend key in conf/ and recipes/ is documented, as verl's tests/special_sanity/test_config_docs.py does for
verl's own YAML.

The rule, for every key under a file's top-level `verl:` or `trl:` node that holds a value (a scalar, a list, or a
mapping written on one line; a mapping written as a block is a section and its keys are checked instead):
  - the line directly above the key is a comment with text, indented exactly as the key (a blank line in between, a
    comment at another indentation, or a bare `#` does not count);
  - no comment follows the value on the key's own line (it goes above, where the next reader looks).
A comment above a section documents the section, never the keys inside it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BACKEND_NODES = ("verl", "trl")


def config_files() -> list[Path]:
    """Every YAML file under conf/ and recipes/, each once (conf/recipe is a link to recipes/)."""
    found: dict[str, Path] = {}
    for top in (REPO / "recipes", REPO / "conf"):
        for root, _dirs, names in os.walk(top, followlinks=True):
            for name in sorted(names):
                if name.endswith(".yaml"):
                    path = Path(root, name)
                    found.setdefault(os.path.realpath(path), path)
    return sorted(found.values())


def _leaves(node: yaml.MappingNode, prefix: str):
    """(dotted key, key node, value node) for every key holding a value under a block mapping."""
    for key, value in node.value:
        dotted = f"{prefix}.{key.value}"
        if isinstance(value, yaml.MappingNode) and not value.flow_style and value.value:
            yield from _leaves(value, dotted)
        else:
            yield dotted, key, value


def undocumented(path: Path) -> tuple[list[str], int]:
    """The rule's violations in one file, as `file:line: key: why`, and how many backend keys it checked."""
    text = path.read_text()
    lines = text.splitlines()
    root = yaml.compose(text)
    errors: list[str] = []
    checked = 0
    if not isinstance(root, yaml.MappingNode):
        return errors, checked
    for top_key, top_value in root.value:
        if top_key.value not in BACKEND_NODES or not isinstance(top_value, yaml.MappingNode):
            continue
        for dotted, key, value in _leaves(top_value, top_key.value):
            checked += 1
            line, col = key.start_mark.line, key.start_mark.column
            where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{line + 1}: {dotted}"
            above = lines[line - 1] if line > 0 else ""
            indent = len(above) - len(above.lstrip(" "))
            if not above.strip().startswith("#"):
                errors.append(f"{where}: no comment directly above it")
            elif indent != col:
                errors.append(f"{where}: the comment above it is indented {indent}, the key {col}")
            elif not above.strip().lstrip("#").strip():
                errors.append(f"{where}: the comment above it is empty")
            if value.end_mark.line == line:
                rest = lines[line][value.end_mark.column :].strip()
                if rest.startswith("#"):
                    errors.append(f"{where}: an inline comment; put it on the line above")
    return errors, checked


def test_every_backend_key_in_conf_and_recipes_has_a_comment_above_it():
    errors: list[str] = []
    checked: dict[Path, int] = {}
    for path in config_files():
        found, n = undocumented(path)
        errors += found
        if n:
            checked[path] = n
    assert not errors, "backend keys without a comment above them:\n" + "\n".join(errors)
    # the check saw what it is meant to: the algorithm files (the PPO-family base included) and every recipe
    names = {p.relative_to(REPO).as_posix() for p in checked}
    assert {f"conf/algorithm/{n}.yaml" for n in ("_ppo", "dapo", "dpo", "grpo", "ppo", "sft")} <= names
    assert {p.relative_to(REPO).as_posix() for p in (REPO / "recipes").glob("*.yaml")} <= names
    assert sum(checked.values()) > 100


GOOD = """\
# @package _global_
algorithm:
  name: x
verl:
  # a section's comment is optional
  algorithm:
    # what it does and why this value
    adv_estimator: grpo
  actor_rollout_ref:
    rollout:
      # several lines of comment:
      # the last one sits directly above the key
      n: 5
      # a mapping written on one line is one value
      val_kwargs: {n: 1, do_sample: false}
      # so is a list
      stop: [a, b]
trl:
  # a value with a hash inside quotes is not an inline comment
  run_name: "run #1"
"""

BAD = """\
verl:
  algorithm:
    adv_estimator: grpo
    # a comment that a blank line separates from its key

    use_kl_in_reward: false
  # outdented: it documents nothing below it
    gamma: 1.0
    #
    lam: 0.95
  actor_rollout_ref:
    actor:
      # commented above, and inline too
      entropy_coeff: 0  # no bonus
      # a comment above a section
      optim:
        lr: 1.0e-6
trl:
  beta: 0.1
"""


def test_the_rule_passes_documented_keys_and_names_every_undocumented_one(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    assert undocumented(good) == ([], 5)

    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    errors, checked = undocumented(bad)
    assert checked == 7
    assert [e.removeprefix(f"{bad}:") for e in errors] == [
        "3: verl.algorithm.adv_estimator: no comment directly above it",
        "6: verl.algorithm.use_kl_in_reward: no comment directly above it",
        "8: verl.algorithm.gamma: the comment above it is indented 2, the key 4",
        "10: verl.algorithm.lam: the comment above it is empty",
        "14: verl.actor_rollout_ref.actor.entropy_coeff: an inline comment; put it on the line above",
        "17: verl.actor_rollout_ref.actor.optim.lr: no comment directly above it",
        "19: trl.beta: no comment directly above it",
    ]


@pytest.mark.parametrize("text", ["", "# only a comment\n", "- a list\n", "verl: {}\n", "name: x\n"])
def test_files_without_backend_keys_pass(tmp_path, text):
    f = tmp_path / "x.yaml"
    f.write_text(text)
    assert undocumented(f) == ([], 0)


def test_an_uncommented_key_in_a_shipped_file_fails_the_check(tmp_path):
    """The check reads real option files: a copy of one with a key's comment removed fails."""
    source = REPO / "conf" / "algorithm" / "grpo.yaml"
    lines = source.read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("kl_loss_type:"))
    copy = tmp_path / "grpo.yaml"
    copy.write_text("".join(lines[: at - 1] + lines[at:]))
    errors, _ = undocumented(copy)
    assert errors == [f"{copy}:{at}: verl.actor_rollout_ref.actor.kl_loss_type: no comment directly above it"]
