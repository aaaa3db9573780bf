"""Custom reward functions (reward=fn): checked by reading the file, wired into verl's reward.custom_reward_function;
the keys that named them before the reward group (data.reward_fn, algorithm.reward_fn) say where they went."""

from __future__ import annotations


def test_a_good_reward_function_is_wired_in(cli, tmp_path):
    r = tmp_path / "reward.py"
    r.write_text("def score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 1.0\n")
    result = cli("config", "show", "algorithm=grpo", "reward=fn", f"reward.fn={r}:score", "--backend")
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
        (f"{tmp_path}/nope.py:f", f"reward.fn: the reward file {tmp_path}/nope.py does not exist."),
        (
            f"{r}:missing",
            f"reward.fn: {r} has no top-level function 'missing' (it has: fine, needs_more, positional).",
        ),
        (
            f"{r}:positional",
            f"reward.fn: positional() in {r} does not take extra_info (verl passes data_source, "
            "solution_str, ground_truth, extra_info as keywords).",
        ),
        (f"{r}:needs_more", f"reward.fn: needs_more() in {r} requires tokenizer, which verl never passes."),
    ]
    for spec, message in cases:
        result = cli("config", "validate", "algorithm=grpo", "reward=fn", f"reward.fn={spec}")
        assert result.exit_code == 1, spec
        assert message in result.stderr, result.stderr
    ok = cli("train", "algorithm=grpo", "reward=fn", f"reward.fn={r}:fine", "--dry-run")
    assert ok.exit_code == 0, ok.output


def test_the_reward_file_is_never_executed(cli, tmp_path):
    r = tmp_path / "reward.py"
    marker = tmp_path / "ran"
    r.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef compute_score(**kw):\n    return 0\n")
    cli("train", "algorithm=grpo", "reward=fn", f"reward.fn={r}", "--dry-run")
    assert not marker.exists()


def test_the_old_keys_are_refused_with_the_new_spelling(cli, tmp_path):
    r = tmp_path / "reward.py"
    r.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n")
    for key in ("data.reward_fn", "algorithm.reward_fn"):
        result = cli("config", "validate", "algorithm=grpo", f"{key}={r}")
        assert result.exit_code == 1
        assert f"Error: {key} moved to reward.fn: one setting picks how responses are scored." in result.stderr
        assert f"Hint: reward=fn reward.fn={r}" in result.stderr
    # in a user's own data option too
    (tmp_path / "work" / "conf" / "data").mkdir(parents=True)
    mine = tmp_path / "work" / "conf" / "data" / "mine.yaml"
    mine.write_text(f"defaults: [arith, _self_]\nname: mine\nreward_fn: {r}\n")
    result = cli("config", "validate", "algorithm=grpo", "data=mine")
    assert result.exit_code == 1
    assert "data.reward_fn moved to reward.fn (set in" in result.stderr and "conf/data/mine.yaml" in result.stderr
    assert f"Hint: reward=fn reward.fn={r}, and remove reward_fn from" in result.stderr


def test_reward_fn_sets_exactly_what_data_reward_fn_set(tmp_path):
    """reward=fn: the two custom_reward_function keys over the default (rule) config, nothing else."""
    from trainctl.plan import make_plan

    r = tmp_path / "reward.py"
    r.write_text("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n")
    args = ["algorithm=grpo", "model=qwen2.5-7b", "data=gsm8k", "hardware=8gpu"]
    rule = make_plan(args, native=False).built.leaves
    fn = make_plan([*args, "reward=fn", f"reward.fn={r}:score"], native=False).built.leaves
    changed = {k: v for k, v in fn.items() if rule.get(k) != v}
    assert changed == {"reward.custom_reward_function.path": str(r), "reward.custom_reward_function.name": "score"}
    assert set(rule) - set(fn) == set()
