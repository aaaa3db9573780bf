"""`trainctl ckpt ...` (trainctl.cli.ckpt): what each command says about folders without checkpoints."""

from __future__ import annotations


def test_ls_of_a_folder_that_is_not_a_run(cli, tmp_path):
    result = cli("ckpt", "ls", str(tmp_path / "missing"))
    assert result.exit_code == 1 and "missing" in result.stderr


def test_merge_refuses_what_is_not_a_checkpoint(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    result = cli("ckpt", "merge", str(tmp_path / "empty"))
    assert result.exit_code == 1
    assert "Error:" in result.stderr


def test_export_refuses_what_is_not_a_checkpoint_and_needs_a_format(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    result = cli("ckpt", "export", str(tmp_path / "empty"), "--to", "gguf")
    assert result.exit_code == 1 and "is not a checkpoint trainctl knows" in result.stderr
    no_format = cli("ckpt", "export", str(tmp_path / "empty"))
    assert no_format.exit_code == 2 and "--to" in no_format.stderr
