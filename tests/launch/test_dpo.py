"""DPO for real: TRL's DPOTrainer on CPU, full fine-tuning (LoRA: tests/launch/test_lora.py)."""

from __future__ import annotations

from trainctl.metrics import read_metrics, series


def test_dpo_trains_and_the_output_loads(ready, dpo_run):
    run = dpo_run.path  # the session's full DPO run (tests/real_runs.py), shared
    losses = [v for _, v in series(read_metrics(run), "train/loss")]
    assert len(losses) == 16
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.02, losses
    final = run / "checkpoints" / "checkpoint-16"
    assert (final / "trainer_state.json").is_file() and (final / "tokenizer.json").is_file()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(ready[0])
    model = AutoModelForCausalLM.from_pretrained(final)
    changed = any(
        not torch.equal(a, b) for a, b in zip(model.state_dict().values(), base.state_dict().values(), strict=True)
    )
    assert changed, "the trained model must differ from the base"
    tok = AutoTokenizer.from_pretrained(final)
    out = model.generate(**tok("What is 2 + 3?", return_tensors="pt"), max_new_tokens=4, do_sample=False)
    assert out.shape[1] > 0
