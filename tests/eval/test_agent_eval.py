"""Agent eval (issue 30): `trainctl eval MODEL tools=...` runs the test split through verl's own tool agent loop with
the real calculator MCP server (stdio), scores it with the training reward, and saves each trajectory as turns with
the calls it made. The greedy eval of an agent run's checkpoint is verl's validation of the same step, response for
response (the session's agent run, tests/real_runs.py, validates after its last step and dumps the samples)."""

from __future__ import annotations

import itertools
import json
import shutil

import pytest
import yaml

from tests.real_runs import AGENT_STEPS, validation_dir
from tests.real_runs import REWARD as PARTIAL_REWARD
from trainctl.eval.passk import pass_at_k
from trainctl.metrics import read_jsonl, read_metrics

PARTIAL = ["reward=fn", f"reward.fn={PARTIAL_REWARD}:compute_score"]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _calculator_answers(folder) -> dict[str, str]:
    """What the calculator process itself answered (its own --log), by expression."""
    return {c["expression"]: c.get("result") for c in _lines(folder / "tools" / "calculator.jsonl")}


def test_agent_eval_samples_trajectories_whose_calls_the_calculator_log_confirms(cli, tiny_tools, tmp_path):
    assert cli("data", "prep", "arith-tools").exit_code == 0
    out = tmp_path / "out"
    args = ["tiny-tools", "data=arith-tools", "tools=calculator", *PARTIAL, "n=4", "temperature=1.0", "seed=5"]
    result = cli("eval", *args, "threshold=0.1", "--limit", "8", "--out", str(out))
    assert result.exit_code == 0, result.output[-3000:]
    header = next(line for line in result.stdout.splitlines() if line.startswith("model")).split()
    assert {"pass@4", "turns", "calls"} <= set(header), header
    assert "tool agent loop with calculator" in result.stderr
    assert "Failed to decode tool call" not in result.output, "verl's parser logs go to the debug log"

    samples = _lines(out / "samples" / "arith-tools" / "tiny-tools.jsonl")
    assert len(samples) == 8 * 4
    answers = _calculator_answers(out)
    confirmed = 0
    for s in samples:
        turns = s["turns"]
        assert turns[0]["role"] == "user" and turns[-1]["role"] == "assistant", turns
        assert s["num_turns"] == len(turns), "verl's count: the prompt, each assistant turn, each tool turn"
        asked = [c for t in turns for c in t.get("tool_calls") or [] if c["name"] == "calculator"]
        for call in s["tool_calls"]:
            # every call the bridge made was one the model wrote, and the server process answered it so
            assert {"name": call["tool"], "arguments": call["arguments"]} in asked, (call, asked)
            if not call["error"]:
                assert answers[call["arguments"]["expression"]] == call["result"]
                confirmed += 1
        # the tool turn the model read next is the call's answer (answers, not errors: those are cut at 64 chars)
        results = [b["content"] for a, b in itertools.pairwise(turns) if a.get("tool_calls") and b["role"] == "tool"]
        for call, read in zip(s["tool_calls"], results, strict=False):
            assert call["error"] or read == call["result"], (call, read)
    assert confirmed >= 8, f"only {confirmed} calls confirmed by the calculator's log"

    metrics = read_jsonl(out / "metrics.jsonl")[0]  # a model by name: step 0
    by_row: dict[int, list[bool]] = {}
    for s in samples:
        by_row.setdefault(s["row"], []).append(s["acc"] >= 0.1)
    for k in (1, 2, 4):
        expected = sum(pass_at_k(4, sum(v), k) for v in by_row.values()) / len(by_row)
        assert metrics[f"eval/arith-tools/pass@{k}"] == pytest.approx(expected)
    calls = [c for s in samples for c in s["tool_calls"]]
    assert metrics["eval/arith-tools/tool/calls_per_trajectory"] == pytest.approx(len(calls) / len(samples))
    assert metrics["eval/arith-tools/tool/calculator/calls"] == len(calls)
    called = sum(1 for s in samples if s["tool_calls"]) / len(samples)
    assert 0 < metrics["eval/arith-tools/tool/trajectories_with_calls"] == pytest.approx(called)
    assert metrics["eval/arith-tools/turns"] == pytest.approx(sum(s["num_turns"] for s in samples) / len(samples))
    assert len({s["response"] for s in samples}) > 4, "sampling draws different trajectories"


def test_greedy_agent_eval_of_a_checkpoint_is_verl_validation_response_for_response(agent_run, cli, tmp_path):
    validation = validation_dir(agent_run)
    run = shutil.copytree(agent_run.path, tmp_path / "agent")  # eval writes into the run folder
    # the run's engine is the eval's: both verl's validation and this eval sample through vLLM's CPU build
    assert yaml.safe_load((run / "trainctl.yaml").read_text())["hardware"]["rollout_engine"] == "vllm"
    assert cli("data", "prep", "arith-tools").exit_code == 0  # the test split, in this test's home
    result = cli("eval", str(run / "checkpoints" / f"global_step_{AGENT_STEPS}"))
    assert result.exit_code == 0, result.output[-3000:]
    assert "differ from those" not in result.output, "the same calculator as the run's (lock.json)"

    dumped = _lines(validation / f"{AGENT_STEPS}.jsonl")
    ours = _lines(run / "eval" / "samples" / "arith-tools" / f"step-{AGENT_STEPS}.jsonl")
    assert len(dumped) == len(ours) == 64
    for theirs in dumped:
        (mine,) = [s for s in ours if s["prompt"][0]["content"] in theirs["input"]]
        assert (mine["response"], mine["reward"]) == (theirs["output"], pytest.approx(theirs["score"]))
    matched = [s for s in ours if any(s["prompt"][0]["content"] in t["input"] for t in dumped)]
    logged = read_metrics(run)[AGENT_STEPS]
    assert sum(s["acc"] for s in matched) / len(matched) == pytest.approx(logged["val-core/openai/gsm8k/acc/mean@1"])
    assert sum(len(s["tool_calls"]) for s in matched) == logged["val-tool/calls"], "the same calls as validation's"

    scores = read_jsonl(run / "eval" / "metrics.jsonl")[AGENT_STEPS]
    assert scores["eval/arith-tools/tool/calculator/calls"] > 0 and scores["eval/arith-tools/turns"] > 2
    picked = cli("ckpt", "best", str(run), "--metric", "eval/arith-tools/acc")
    assert picked.exit_code == 0 and f"global_step_{AGENT_STEPS}" in picked.stdout, picked.output


# slow: the default suite's agent eval on vLLM is the one above (the session's agent run samples on vLLM, and so
# does the eval of its checkpoint, against verl's vLLM validation); single-turn greedy eval compares the two engines
# in the default suite (tests/inference/test_vllm_engine.py)
@pytest.mark.slow
def test_greedy_agent_eval_on_vllm_answers_as_on_trainctls_sampler(cli, tiny_tools, tmp_path):
    """hardware.rollout_engine=vllm: verl's tool agent loop on vLLM's async engine (vLLM's CPU build), the same
    calculator; greedy answers and calls as with trainctl's sampler, but for a near tie now and then."""
    assert cli("data", "prep", "arith-tools").exit_code == 0
    args = ["tiny-tools", "data=arith-tools", "tools=calculator", *PARTIAL, "--limit", "8"]
    results = {}
    for engine in ("hf", "vllm"):
        out = tmp_path / engine
        result = cli("eval", *args, f"hardware.rollout_engine={engine}", "--out", str(out))
        assert result.exit_code == 0, result.output[-3000:]
        results[engine] = _lines(out / "samples" / "arith-tools" / "tiny-tools.jsonl")
    pairs = list(zip(results["hf"], results["vllm"], strict=True))
    differ = [(a["response"], b["response"]) for a, b in pairs if a["response"] != b["response"]]
    assert len(differ) <= 2, differ
    assert sum(len(b["tool_calls"]) for _, b in pairs) > 0, "the model called the calculator through vLLM's turns"
