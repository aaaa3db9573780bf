from __future__ import annotations

import hashlib

import pytest


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


def _stopped_on_its_probe(warm: dict) -> None:
    """A warm start that trained until, on the 32 held-out questions, it copied the expression into its calls and
    wrote the calculator's answer for TARGET of them each and greedily called for GREEDY_CALLS of them, well short of
    the step cap; it still answers without a call in some samples (GRPO's room)."""
    from trainctl.models.tool_warm_start import CALL_SHARE_MAX, GREEDY_CALLS, MAX_STEPS, PROBED, TARGET

    # the copying never set in before step 400 in the warm starts measured (several seeds, two question sets)
    assert warm["probed"] == PROBED and 300 <= warm["steps"] < MAX_STEPS and warm["steps"] % 25 == 0, warm
    assert min(warm["calls_right"], warm["answers_right"]) >= TARGET * PROBED, warm
    assert warm["calls_greedy"] >= GREEDY_CALLS * PROBED and 0.5 < warm["call_share"] <= CALL_SHARE_MAX, warm


def test_the_shipped_tool_model_is_of_this_trainctls_warm_start_and_probes_as_it_ended(tiny_tools_dir, tiny_model_dir):
    """tiny-tools (the session's, `trainctl model init tiny-tools`) is the warm start trainctl ships: made from what
    this checkout's warm start reads (the base model, the demonstrations and probe questions, the module's source), and
    its weights answer the probe as its record says the warm start ended."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainctl.models import tool_warm_start as ws

    warm = json.loads((tiny_tools_dir / "trainctl-model.json").read_text())["warm_start"]
    assert warm["shipped"] is True and warm["seed"] == 0, warm
    rows, probe = ws.demonstrations(0)
    assert ws.inputs_digest(tiny_model_dir, rows, probe) == ws.shipped_record()["inputs"], (
        "the warm start's inputs changed since its model was made: python -m trainctl.models.tiny (1-3 min) remakes it"
    )
    _stopped_on_its_probe(warm)
    model = AutoModelForCausalLM.from_pretrained(tiny_tools_dir)
    calls, answers, greedy, share = ws.probe(model, AutoTokenizer.from_pretrained(tiny_tools_dir), probe)
    # greedy decoding on another CPU may round a near tie the other way: a question or two
    assert abs(calls - warm["calls_right"]) <= 2 and abs(answers - warm["answers_right"]) <= 2, (calls, answers, warm)
    assert abs(greedy - warm["calls_greedy"]) <= 2 and abs(share - warm["call_share"]) < 0.02, (greedy, share, warm)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_warm_start_run_here_stops_on_its_held_out_probe(isolated, cli):
    """`model init tiny-tools --train`: seed 0's warm start run on this machine, not copied (1-3 min)."""
    import json

    result = cli("model", "init", "tiny-tools", "--train")
    assert result.exit_code == 0, result.output
    assert "the one trainctl ships" not in result.stdout and "Warm start: " in result.stdout
    record = json.loads((isolated / "models" / "tiny-tools" / "trainctl-model.json").read_text())
    assert record["warm_start"]["shipped"] is False
    _stopped_on_its_probe(record["warm_start"])


def test_the_shipped_warm_start_is_copied_only_for_its_own_inputs(tiny_model_dir, tmp_path, monkeypatch):
    """Seed 0's warm start is copied when what it would read is what the shipped one read; another seed, `train`, or
    a different base model run it (here a stand-in for the minutes of training)."""
    import json
    import shutil

    from trainctl.models import tool_warm_start as ws

    ran = []

    def warm_start(base, rows, probe, out, seed, progress):
        ran.append(seed)
        shutil.copytree(base, out)
        return ws.WarmStart(400, 16, 16, 30, 0.7, len(probe))

    monkeypatch.setattr(ws, "warm_start", warm_start)
    copied = ws.init_tiny_tools(tiny_model_dir, tmp_path / "copied")
    assert copied.shipped and not ran
    assert (tmp_path / "copied" / "model.safetensors").read_bytes() == (ws.SHIPPED / "model.safetensors").read_bytes()
    assert (tmp_path / "copied" / "tokenizer.json").read_bytes() == (tiny_model_dir / "tokenizer.json").read_bytes()
    assert not ws.init_tiny_tools(tiny_model_dir, tmp_path / "seed1", seed=1).shipped
    assert not ws.init_tiny_tools(tiny_model_dir, tmp_path / "train", train=True).shipped
    other = tmp_path / "other-base"
    shutil.copytree(tiny_model_dir, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "rope_theta": 5000.0}))
    assert not ws.init_tiny_tools(other, tmp_path / "other").shipped
    assert ran == [1, 0, 0]


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
