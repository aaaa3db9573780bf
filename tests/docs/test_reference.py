"""The generated reference pages (docs/reference/, trainctl.docsgen) are what the code says now, and list everything:
every command and option of the CLI, every config key and group option, every recipe."""

from __future__ import annotations

import difflib

import pytest

from trainctl import docsgen


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    docsgen.write(out)
    return out


def test_the_committed_reference_pages_are_current(generated):
    """Regenerated into a temporary folder, each page equals the committed one; else the diff and the command."""
    stale = []
    for name in docsgen.PAGES:
        committed = docsgen.REFERENCE_DIR / name
        new = (generated / name).read_text()
        old = committed.read_text() if committed.is_file() else ""
        if new != old:
            diff = difflib.unified_diff(
                old.splitlines(), new.splitlines(), f"docs/reference/{name}", "generated", lineterm="", n=0
            )
            stale.append("\n".join(list(diff)[:12]))
    assert not stale, f"stale reference pages; run: {docsgen.REGENERATE}\n\n" + "\n\n".join(stale)


def test_the_cli_reference_lists_every_command_and_option(generated):
    import typer

    from trainctl.cli.main import app

    page = (generated / "cli.md").read_text()
    for path, cmd in docsgen._commands(typer.main.get_command(app), ("trainctl",)):
        assert f"\n## {' '.join(path)}\n" in page
        for param in cmd.params:
            if param.param_type_name == "option" and param.name != "help":
                assert f"`{', '.join([*param.opts, *param.secondary_opts])}`" in page, (path, param.opts)
    assert "trainctl config keys hardware" in page  # an epilog's examples


def test_the_config_reference_lists_every_key_group_option_and_recipe(generated):
    from trainctl.config.schema import keys
    from trainctl.config.search import GROUPS, SearchPath

    config = (generated / "config.md").read_text()
    for key, _, _ in keys():
        assert f"| `{key}` |" in config, key
    assert "| `reward.judge` |" in config and "| `reward.fn` |" in config  # the reward kinds' own settings
    search = SearchPath(user_dirs=[])
    for group in GROUPS:
        for option in search.options(group):
            assert f"| `{option}` |" in config, (group, option)
    # a key with the backend keys the mappings set from it
    row = next(line for line in config.splitlines() if line.startswith("| `hardware.rollout_tp` |"))
    assert "`actor_rollout_ref.rollout.tensor_model_parallel_size`" in row
    recipes = (generated / "recipes.md").read_text()
    for option in search.options("recipe"):
        assert f"\n## {option}\n" in recipes and f"trainctl train recipe={option}" in recipes


def test_the_metrics_reference_has_alerts_series_and_exit_codes(generated):
    from trainctl.errors import EXIT_CODES
    from trainctl.runs.alerts import KINDS

    page = (generated / "metrics.md").read_text()
    assert "| rollout gap | `training/rollout_probs_diff_mean` | lower |" in page
    for kind in KINDS:
        assert f"| `{kind}` |" in page
    assert "`trainctl_run_metric`" in page
    for code in EXIT_CODES:
        assert f"\n| {code} |" in page


def test_check_names_the_command_when_a_page_is_stale(tmp_path, capsys):
    docsgen.write(tmp_path)
    assert docsgen.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "cli.md").write_text("old\n")
    assert docsgen.main(["--check", "--out", str(tmp_path)]) == 1
    assert f"run: {docsgen.REGENERATE}" in capsys.readouterr().err


def test_every_commands_help_names_its_reference_section(generated, cli):
    """`--help` ends with the section of docs/reference/cli.md that documents the command, and that section is there."""
    import re

    import typer

    from trainctl.cli.main import REFERENCE, app, reference_anchor

    headings = {"-".join(m.split()) for m in re.findall(r"^## (.+)$", (generated / "cli.md").read_text(), re.M)}
    for path, _ in docsgen._commands(typer.main.get_command(app), ("trainctl",)):
        anchor = reference_anchor(list(path[1:]))
        assert anchor in headings, path
        assert f"Reference: {REFERENCE}#{anchor}" in cli(*path[1:], "--help").stdout, path
    assert "docs/reference/cli.md" in cli("--help").stdout
