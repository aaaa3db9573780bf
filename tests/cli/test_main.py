"""The root command: help with examples everywhere, version, exit codes for usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# the console script beside this interpreter: CI does not put the virtual environment on PATH
TRAINCTL = str(Path(sys.executable).parent / "trainctl")


def _commands() -> list[list[str]]:
    """Every command and group the CLI has, read from the app itself (a new command is covered unasked)."""
    import typer.main

    from trainctl.cli.main import app

    found = []

    def walk(cmd, path):
        found.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _commands()


def test_the_command_tree_is_the_documented_one():
    names = {" ".join(c) for c in COMMANDS}
    assert {"train", "config show", "data prep", "data convert", "data check", "data ls", "jobs ls"} <= names
    assert {"model pull", "model ls", "model info", "model init", "model rm"} <= names
    assert {"ckpt ls", "ckpt show", "ckpt merge", "ckpt best", "ckpt prune"} <= names
    assert {"tools ls", "tools call", "runs rollouts"} <= names


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "trainctl")
def test_help_on_every_command(command, cli):
    result = cli(*command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage: trainctl" in result.stdout


@pytest.mark.parametrize(
    "command",
    [c for c in COMMANDS if c and c not in (["config"], ["model"], ["data"], ["jobs"], ["ckpt"])],
    ids=" ".join,
)
def test_every_command_shows_examples(command, cli):
    out = cli(*command, "--help").stdout
    assert "Example" in out
    assert "[bold]" not in out and "[cyan]" not in out, "help is plain text: no markup shown literally"


def test_the_root_builds_each_command_when_asked_as_typer_builds_them_all():
    """command() builds the root's commands one by one, on demand: every command's help is the same as in the tree
    Typer builds at once, and the root's own help builds none of them."""
    import typer.main

    from trainctl.cli.main import app, command

    def helps(cmd, path, out):
        ctx = cmd.make_context(" ".join(["trainctl", *path]), [], resilient_parsing=True)
        out[" ".join(path)] = cmd.get_help(ctx)
        for name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []:
            helps(cmd.get_command(ctx, name), [*path, name], out)
        return out

    lazy = command.__wrapped__()  # a root of its own: this process's may have built some already
    ctx = lazy.make_context("trainctl", [], resilient_parsing=True)
    root_help = lazy.get_help(ctx)
    assert not lazy.commands.built, "the root's help built a command"
    assert helps(lazy, [], {}) == helps(typer.main.get_command(app), [], {})
    assert root_help == lazy.get_help(ctx)


def test_version(cli):
    from trainctl import __version__

    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"trainctl {__version__}"


def test_unknown_command_is_a_usage_error_with_a_suggestion(cli):
    result = cli("trian")
    assert result.exit_code == 2
    assert "No such command 'trian'. Did you mean 'train'?" in result.output


def test_help_does_not_import_the_heavy_stack():
    """`trainctl --help` must stay instant: no torch, verl, ray, transformers or hydra."""
    code = (
        "import sys\n"
        "from trainctl.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'verl', 'ray', 'transformers', 'hydra', 'omegaconf') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_config_errors_do_not_import_verl_or_torch():
    # verl's field declarations ship with trainctl for the verl it pins: a cold cache is fine
    code = (
        "import sys\n"
        "from trainctl.cli.main import main\n"
        "try:\n    main(['train', 'algorithm=grpo', 'algorithm.kl_ctrl.kl_coeff=1', '--dry-run'])\n"
        "except SystemExit as e:\n    print('exit', e.code)\n"
        "print([m for m in ('torch', 'verl', 'ray', 'transformers') if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = proc.stdout.strip().splitlines()
    assert lines[-2:] == ["exit 1", "[]"], proc.stdout + proc.stderr
    assert "unknown config key 'algorithm.kl_ctrl.kl_coeff'" in proc.stderr


def test_console_script_is_installed():
    proc = subprocess.run([TRAINCTL, "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("trainctl ")


def test_completion_offers_groups_and_options():
    from trainctl.cli.common import complete_overrides

    assert "algorithm=" in complete_overrides(None, "alg")
    assert complete_overrides(None, "hardware=2") == ["hardware=2x8gpu"]
    assert "model=qwen3-8b" in complete_overrides(None, "model=qwen3")
    assert "run.epochs=" in complete_overrides(None, "run.ep")


def test_shell_completion_through_the_real_protocol():
    import os

    def complete(words: str, cword: int) -> list[str]:
        env = {**os.environ, "_TRAINCTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
        return subprocess.run([TRAINCTL], env=env, capture_output=True, text=True).stdout.split()

    assert complete("trainctl tr", 1) == ["train"]
    assert complete("trainctl train algorithm=g", 2) == ["algorithm=grpo", "algorithm=gspo"]
    assert "hardware=2x8gpu" in complete("trainctl config show hardware=", 3)


def test_matplotlibs_font_list_goes_to_trainctls_cache_not_home(tmp_path):
    """reasoning-gym imports matplotlib, whose font manager writes its font list under ~/.cache/matplotlib on first
    use: a trainctl process (and each process it starts) has it in trainctl's cache, unless MPLCONFIGDIR is chosen."""
    import os

    from trainctl.paths import library_cache_env

    home, cache = tmp_path / "user", tmp_path / "tc-cache"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), TRAINCTL_HOME=str(tmp_path / "tc-home"), TRAINCTL_CACHE=str(cache))
    shown = subprocess.run(
        [sys.executable, "-m", "trainctl", "env", "show", "spell_backward", "-n", "1"], env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert list((cache / "matplotlib").glob("fontlist-*.json")), sorted(cache.rglob("*"))
    assert list(home.rglob("*")) == []
    assert library_cache_env({"MPLCONFIGDIR": str(tmp_path / "mine")}) == {}  # the user's choice stands
