"""A reward kind from outside trainctl (toy_kind.py), installed the way a user's package is: a distribution whose
entry point in the group trainctl.reward_kinds names the module, and a reward option in the user's ./conf that
chooses the kind. Driven through the real CLI: config validate, config show, train --dry-run, config keys."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.shared import install_entry_point
from trainctl.backends.rewards import registry

GRPO = ["recipe=grpo-arith-tiny-cpu"]
MODULE = "tests.backends.rewards.toy_kind"
OPTION = """\
# length: responses closer to reward.target_chars characters score higher (the toy_rewards package's kind)
defaults:
  - _base
  - _self_

name: length
kind: length
target_chars: 12
"""


def install(site: Path, entry: str = MODULE) -> None:
    """What `pip install` of a package declaring the entry point leaves in site-packages."""
    install_entry_point(site, "toy-rewards", "trainctl.reward_kinds", "length", entry)


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as a new process has it: the toy module not imported, its kind not registered (and so again
    after the test)."""
    registry.names()  # trainctl's own kinds registered, before the copy that the test may add to
    monkeypatch.setattr(registry, "KINDS", dict(registry.KINDS))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield
    sys.modules.pop(MODULE, None)


@pytest.fixture
def length_option(isolated):
    """The user's reward option, in ./conf/reward/ (the working folder is the test's)."""
    folder = Path.cwd() / "conf" / "reward"
    folder.mkdir(parents=True)
    (folder / "length.yaml").write_text(OPTION)


@pytest.fixture
def installed(tmp_path, monkeypatch, fresh_registry):
    site = tmp_path / "site"
    install(site)
    monkeypatch.syspath_prepend(str(site))


def test_an_installed_kind_validates_translates_and_plans(
    cli, tiny_model, arith_data, length_option, installed, no_processes
):
    result = cli("config", "validate", *GRPO, "reward=length")
    assert result.exit_code == 0, result.output
    shown = cli("config", "show", *GRPO, "reward=length", "reward.target_chars=20", "--backend")
    assert shown.exit_code == 0, shown.output
    backend = shown.stdout
    assert f"path: {Path(__file__).with_name('toy_kind.py')}" in backend
    assert "name: length_score" in backend and "target_chars: 20" in backend
    planned = cli("train", *GRPO, "reward=length", "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert "Dry run: nothing was started." in planned.stdout


def test_its_settings_are_checked_against_its_declaration(cli, tiny_model, arith_data, length_option, installed):
    out_of_range = cli("train", *GRPO, "reward=length", "reward.target_chars=0", "--dry-run")
    assert out_of_range.exit_code == 1
    assert "Error: reward.target_chars = 0 is out of range: it must be at least 1." in out_of_range.stderr
    misspelt = cli("config", "validate", *GRPO, "reward=length", "reward.target_char=3")
    assert misspelt.exit_code == 1
    assert "Error: unknown config key 'reward.target_char'." in misspelt.stderr
    assert "Did you mean 'reward.target_chars'?" in misspelt.stderr
    # the kind's own check: 24 tokens (the recipe's data.max_response_length) hold no 4000 characters
    too_long = cli("config", "validate", *GRPO, "reward=length", "reward.target_chars=4000")
    assert too_long.exit_code == 1
    assert "Error: reward.target_chars = 4000: a response is at most data.max_response_length = 24" in (too_long.stderr)
    assert "Hint: reward.target_chars=96" in too_long.stderr


def test_its_settings_are_listed_with_trainctls(cli, installed):
    keys = cli("config", "keys", "reward")
    assert keys.exit_code == 0, keys.output
    rows = {line.split()[0]: line for line in keys.stdout.splitlines()[1:] if line.strip()}
    assert "length: the response length, in characters, that scores 1" in " ".join(rows["reward.target_chars"].split())
    assert "reward.url" in rows and "reward.model" in rows


def test_a_misspelt_kind_names_the_installed_one(cli, tiny_model, arith_data, installed):
    result = cli("config", "validate", *GRPO, "reward.kind=lenght")
    assert result.exit_code == 1
    assert "Error: unknown reward kind 'lenght'." in result.stderr
    assert "Did you mean 'length'?" in result.stderr


def test_without_its_package_the_kind_is_unknown(cli, tiny_model, arith_data, length_option, fresh_registry):
    result = cli("config", "validate", *GRPO, "reward=length")
    assert result.exit_code == 1
    assert "Error: unknown reward kind 'length' (set in " in result.stderr
    assert "conf/reward/length.yaml)." in result.stderr
    assert "(a package adds its own through the entry point group trainctl.reward_kinds)" in result.stderr


def test_a_package_whose_module_does_not_import(cli, tiny_model, arith_data, length_option, tmp_path, monkeypatch):
    site = tmp_path / "site"
    install(site, "toy_rewards_missing.length")
    monkeypatch.syspath_prepend(str(site))
    result = cli("config", "validate", *GRPO, "reward=length")
    assert result.exit_code == 1
    assert (
        "Error: reward kind 'length' does not import: ModuleNotFoundError: No module named 'toy_rewards_missing'"
        in (result.stderr)
    )
    assert "Hint: fix the package, or uninstall it: pip uninstall toy-rewards" in result.stderr
