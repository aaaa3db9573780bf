"""trainctl.cli.common: what the commands share, driven through the real CLI: the override preamble (option typos
refused, --config-dir checked), --dry-run with one meaning, and the Error:/Hint: rendering."""

from __future__ import annotations

import pytest

# every command that takes overrides, with what it needs beside them
OVERRIDE_COMMANDS = [
    ("train",),
    ("config", "show"),
    ("config", "validate"),
    ("doctor",),
    ("eval", "tiny"),
    ("data", "check", "x.parquet"),
    ("model", "info", "tiny"),
]


@pytest.mark.parametrize("command", OVERRIDE_COMMANDS, ids=" ".join)
def test_an_option_typo_among_the_overrides_is_refused_with_a_guess(cli, command, no_processes):
    result = cli(*command, "algorithm=grpo", "--explian" if command[0] == "model" else "--dryrun")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Error: no such option: --")
    if command[0] == "model":
        assert lines[1] == "Hint: did you mean --explain?"
    elif command == ("train",):
        assert lines[1] == "Hint: did you mean --dry-run?"
    else:
        assert lines[1].startswith("Hint: ")


@pytest.mark.parametrize("command", [c for c in OVERRIDE_COMMANDS if c[0] in ("train", "config", "doctor", "eval")])
def test_a_config_dir_that_is_not_there_is_a_usage_error(cli, command, tmp_path, no_processes):
    missing = tmp_path / "no-such-conf"
    result = cli(*command, "--config-dir", str(missing))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"Error: --config-dir {missing}: no such folder."


def test_dry_run_says_the_same_thing_on_every_command(cli):
    helps = {}
    for command in (("train",), ("model", "pull"), ("ckpt", "merge")):
        out = " ".join(cli(*command, "--help").stdout.split())
        start = out.index("--dry-run", out.index("Options:"))
        helps[command] = out[start : out.index("written", start)]
    assert len(set(helps.values())) == 1, helps
    assert "nothing is started, downloaded or" in next(iter(helps.values()))


def test_a_problem_is_rendered_as_error_details_and_hint_on_stderr(cli, no_processes):
    result = cli("config", "validate", "algorithm=grpo", "data.train_batch_size=abc")
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Error: ") and "data.train_batch_size" in lines[0]
