"""`trainctl data ...` (trainctl.cli.data): exit codes and output of each command."""

from __future__ import annotations

import json


def test_prep_then_check_then_ls(cli, tiny_model, isolated):
    result = cli("data", "prep", "arith")
    assert result.exit_code == 0, result.output
    assert (isolated / "data" / "arith" / "rl" / "train.parquet").is_file()
    result = cli("data", "check", str(isolated / "data" / "arith" / "rl" / "train.parquet"))
    assert result.exit_code == 0, result.output
    assert "512" in result.stdout
    result = cli("data", "ls")
    assert result.exit_code == 0 and "arith" in result.stdout


def test_convert_writes_the_format_and_refuses_a_bad_target(cli, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    out = tmp_path / "out.parquet"
    result = cli("data", "convert", str(src), "--to", "sft", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.is_file()
    result = cli("data", "convert", str(src), "--to", "sftt", "--out", str(out))
    assert result.exit_code in (1, 2) and "sftt" in result.stderr


def test_check_of_a_missing_file_names_it(cli, tmp_path):
    result = cli("data", "check", str(tmp_path / "nope.parquet"))
    assert result.exit_code == 1 and "nope.parquet" in result.stderr
