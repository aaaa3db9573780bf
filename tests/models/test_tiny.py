from __future__ import annotations

import hashlib


def _digest(folder):
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir()) if f.is_file()}


def test_tiny_model_is_identical_every_time(tiny_model_dir, tmp_path):
    from trainctl.models.tiny import init_tiny

    again = init_tiny(tmp_path / "tiny")
    assert _digest(again) == _digest(tiny_model_dir)


def test_tiny_model_loads_and_round_trips_ids(tiny_model_dir):
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainctl.models.tiny import build_tokenizer
    from trainctl.paths import builtin_conf_dir

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 3 + 4?"}, {"role": "assistant", "content": "3 + 4 = 7\n#### 7"}],
        tokenize=False,
    )
    assert text == "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n3 + 4 = 7\n#### 7<|im_end|>\n"
    ids = tok(text)["input_ids"]
    assert build_tokenizer()(text)["input_ids"] == ids, "AutoTokenizer re-applies Qwen2's pre-tokenizer"
    assert tok.decode(ids) == text
    declared = yaml.safe_load((builtin_conf_dir() / "model" / "tiny.yaml").read_text())
    params = sum(p.numel() for p in model.parameters())
    assert abs(params - declared["params"]) / params < 0.01
    assert model.config.num_hidden_layers == declared["arch"]["layers"]


def test_the_tool_model_warm_start_stopped_on_its_held_out_probe(tiny_tools_dir):
    """tiny-tools (the session's, `trainctl model init tiny-tools`) trained until, on the 32 held-out questions, it
    copied the expression into its calls and wrote the calculator's answer for TARGET of them each and greedily called
    for GREEDY_CALLS of them, well short of the step cap; it still answers without a call in some samples (GRPO's
    room)."""
    import json

    from trainctl.models.tool_warm_start import CALL_SHARE_MAX, GREEDY_CALLS, MAX_STEPS, PROBED, TARGET

    warm = json.loads((tiny_tools_dir / "trainctl-model.json").read_text())["warm_start"]
    # the copying never set in before step 400 in the warm starts measured (several seeds, two question sets)
    assert warm["probed"] == PROBED and 300 <= warm["steps"] < MAX_STEPS and warm["steps"] % 25 == 0, warm
    assert min(warm["calls_right"], warm["answers_right"]) >= TARGET * PROBED, warm
    assert warm["calls_greedy"] >= GREEDY_CALLS * PROBED and 0.5 < warm["call_share"] <= CALL_SHARE_MAX, warm


def test_the_warm_start_leaves_a_third_of_its_demonstrations_without_a_call():
    from trainctl.data.tools import arith_rows
    from trainctl.models.tool_warm_start import direct

    row = next(arith_rows("tool_sft", "warmup", 1, 0))
    answered = direct(row)
    assert [m["role"] for m in answered["messages"]] == ["user", "assistant"]
    final = row["messages"][3]["content"]
    assert answered["messages"][1]["content"] == final and "####" in final
    assert answered["tools"] == row["tools"], "the calculator is offered, not used"


def test_a_warm_start_that_misses_its_target_stops_at_the_cap(tiny_model_dir, tmp_path):
    from trainctl.data.tools import arith_rows
    from trainctl.models.tool_warm_start import warm_start

    rows = list(arith_rows("tool_sft", "warmup", 20, 0))
    steps = []
    warm = warm_start(tiny_model_dir, rows[:16], rows[16:], tmp_path / "out", max_steps=3, probe_every=2,
                      progress=steps.append)  # fmt: skip
    assert (warm.steps, warm.probed, steps) == (3, 4, [1, 1, 1])
    assert (warm.calls_right, warm.answers_right, warm.calls_greedy) == (0, 0, 0), "3 steps teach no calls"
    assert 0 <= warm.call_share < 0.5
    assert (tmp_path / "out" / "model.safetensors").is_file() and (tmp_path / "out" / "tokenizer.json").is_file()
