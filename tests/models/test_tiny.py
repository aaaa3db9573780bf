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


def test_a_probe_stops_at_the_first_count_short_of_what_the_warm_start_needs(tiny_model_dir):
    """The warm start trains on whatever the rest of a probe would say once the copied calls or the final answers
    fall short (most probes before the copying sets in): those are not probed. A whole probe counts the same."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainctl.data.tools import arith_rows
    from trainctl.models.tool_warm_start import probe

    rows = list(arith_rows("tool_sft", "warmup", 4, 0))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    whole = probe(model, tokenizer, rows)
    assert whole[0] == whole[1] == 0 and whole[2] is not None and 0 <= whole[3] < 0.5, "a random model copies nothing"
    assert probe(model, tokenizer, rows, needed=2) == (0, None, None, None)
    assert model.training, "left training, as the warm start found it"


def test_the_warm_starts_shared_prefix_is_the_full_forward_pass_of_every_row(tiny_model_dir):
    """The warm start computes the rows' shared prefix once a step (tool_warm_start.prefixed_loss): its loss and
    gradients are those of the full rows, each through the model on its own, to fp32 rounding."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainctl.data.tools import arith_rows
    from trainctl.models.tool_warm_start import direct, encode, prefixed_loss, shared_prefix

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    pick = random.Random(1)
    rows = [direct(r) if pick.random() < 0.4 else r for r in arith_rows("tool_sft", "warmup", 6, 0)]
    encoded = [encode(tok, r) for r in rows]
    assert len({len(ids) for ids, _ in encoded}) > 1, "rows of different lengths: padding is exercised"
    prefix = shared_prefix(encoded)
    assert len(prefix) > 50 and all(ids[: len(prefix)] == prefix for ids, _ in encoded)
    width = max(len(ids) for ids, _ in encoded)
    full_ids = torch.full((len(encoded), width), tok.pad_token_id)
    full_mask = torch.zeros(full_ids.shape)
    for i, (ids, mask) in enumerate(encoded):
        full_ids[i, : len(ids)], full_mask[i, : len(ids)] = torch.tensor(ids), torch.tensor(mask, dtype=torch.float)

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa", dtype=torch.float32)
    # each row alone, whole: no padding, no sharing
    losses = []
    for ids, mask in encoded:
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
        nll = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none")
        losses.append(nll * torch.tensor(mask[1:], dtype=torch.float))
    want = torch.cat(losses).sum() / full_mask[:, 1:].sum()
    want.backward()
    want_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    got = prefixed_loss(model, torch.tensor([prefix]), full_ids[:, len(prefix) :], full_mask[:, len(prefix) :])
    got.backward()
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (float(got), float(want))
    for (name, p), grad in zip(model.named_parameters(), want_grads, strict=True):
        assert torch.allclose(p.grad, grad, rtol=1e-4, atol=1e-6), name
