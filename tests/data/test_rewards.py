"""Custom reward functions: checked by reading the file, wired into verl's reward.custom_reward_function."""

from __future__ import annotations


def test_a_good_reward_function_is_wired_in(cli, tmp_path):
    r = tmp_path / "reward.py"
    r.write_text("def score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 1.0\n")
    result = cli("config", "show", "algorithm=grpo", f"data.reward_fn={r}:score", "--backend")
    assert result.exit_code == 0, result.output
    assert f"    path: {r}" in result.stdout and "    name: score" in result.stdout


def test_reward_function_problems(cli, tmp_path):
    r = tmp_path / "reward.py"
    r.write_text(
        "import os\n"
        "def positional(data_source, solution_str, ground_truth):\n    return 0\n"
        "def needs_more(data_source, solution_str, ground_truth, extra_info, tokenizer):\n    return 0\n"
        "def fine(**kwargs):\n    return 0\n"
    )
    cases = [
        (f"{tmp_path}/nope.py:f", f"data.reward_fn: the reward file {tmp_path}/nope.py does not exist."),
        (
            f"{r}:missing",
            f"data.reward_fn: {r} has no top-level function 'missing' (it has: fine, needs_more, positional).",
        ),
        (
            f"{r}:positional",
            f"data.reward_fn: positional() in {r} does not take extra_info (verl passes data_source, "
            "solution_str, ground_truth, extra_info as keywords).",
        ),
        (f"{r}:needs_more", f"data.reward_fn: needs_more() in {r} requires tokenizer, which verl never passes."),
    ]
    for spec, message in cases:
        result = cli("config", "validate", "algorithm=grpo", f"data.reward_fn={spec}")
        assert result.exit_code == 1, spec
        assert message in result.stderr, result.stderr
    ok = cli("train", "algorithm=grpo", f"data.reward_fn={r}:fine", "--dry-run")
    assert ok.exit_code == 0, ok.output


def test_the_reward_file_is_never_executed(cli, tmp_path):
    r = tmp_path / "reward.py"
    marker = tmp_path / "ran"
    r.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef compute_score(**kw):\n    return 0\n")
    cli("train", "algorithm=grpo", f"data.reward_fn={r}", "--dry-run")
    assert not marker.exists()


def test_an_algorithm_can_name_the_scorer_and_data_wins(cli, tmp_path):
    a, d = tmp_path / "algo.py", tmp_path / "data.py"
    for f in (a, d):
        f.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n")
    result = cli("config", "show", "algorithm=grpo", f"algorithm.reward_fn={a}", "--backend")
    assert result.exit_code == 0, result.output
    assert f"    path: {a}" in result.stdout and "    name: compute_score" in result.stdout
    both = cli("config", "show", "algorithm=grpo", f"algorithm.reward_fn={a}", f"data.reward_fn={d}", "--backend")
    assert f"    path: {d}" in both.stdout
    bad = cli("config", "validate", "algorithm=grpo", f"algorithm.reward_fn={tmp_path}/none.py")
    assert bad.exit_code == 1
    assert f"algorithm.reward_fn: the reward file {tmp_path}/none.py does not exist." in bad.stderr
