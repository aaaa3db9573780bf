"""The arith data with a calculator: rows verl's tool agent loop reads, and SFT demonstrations verl's SFT dataset
loads (with the tiny model's chat template)."""

from __future__ import annotations

import pytest

from trainctl.data.arith import problems
from trainctl.data.tools import FORMATS, TOOL_AGENT, arith_rows, write_arith_tool_data


def test_rows_follow_the_arith_problems():
    rl = list(arith_rows("tool_rl", "train", 20, 0))
    sft = list(arith_rows("tool_sft", "train", 20, 0))
    assert rl == list(arith_rows("tool_rl", "train", 20, 0))
    for rl_row, sft_row, p in zip(rl, sft, problems(20, 0, "train"), strict=True):
        assert rl_row["agent_name"] == TOOL_AGENT
        assert rl_row["reward_model"]["ground_truth"] == str(p.answer)
        assert rl_row["extra_info"]["tools_kwargs"] == {
            "calculator": {"create_kwargs": {"ground_truth": str(p.answer)}}
        }
        assert rl_row["prompt"] == sft_row["messages"][:1]
        call = sft_row["messages"][1]["tool_calls"][0]["function"]
        assert call["name"] == "calculator" and call["arguments"] == f'{{"expression": "{p.a} {p.op} {p.b}"}}'
        assert sft_row["messages"][2] == {"role": "tool", "content": str(p.answer)}
    with pytest.raises(ValueError, match="unknown tool data format 'rl'"):
        next(arith_rows("rl", "train", 1, 0))


def test_verls_scorer_grades_a_demonstrated_trajectory():
    """verl scores the whole multi-turn response (tool call and tool answer included): the demonstration gets 1."""
    from verl.utils.reward_score import default_compute_score

    for rl_row, sft_row in zip(
        arith_rows("tool_rl", "test", 10, 0), arith_rows("tool_sft", "test", 10, 0), strict=True
    ):
        call, answer, final = sft_row["messages"][1:]
        response = f"<tool_call>{call['tool_calls'][0]['function']['arguments']}</tool_call>\n{answer['content']}\n"
        response += final["content"]
        truth = rl_row["reward_model"]["ground_truth"]
        assert default_compute_score(rl_row["data_source"], response, truth) == 1.0


def test_files_load_in_verls_datasets(tiny_model_dir, tmp_path):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
    from verl.utils.dataset.rl_dataset import RLHFDataset

    files = write_arith_tool_data(tmp_path, train_rows=16, test_rows=4)
    assert sorted(files) == [f"{fmt}/{split}" for fmt in FORMATS for split in ("test", "train")]
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)

    rl = RLHFDataset(str(files["tool_rl/train"]), tok, OmegaConf.create({"max_prompt_length": 160}))
    item = rl[0]
    assert item["agent_name"] == TOOL_AGENT and item["tools_kwargs"]["calculator"]["create_kwargs"]["ground_truth"]
    assert item["raw_prompt"][0]["role"] == "user"

    # verl's SFT dataset tokenizes message by message and checks the result against the whole conversation
    # rendered at once (its sanity check raises on a mismatch); the loss covers the assistant turns only
    sft = MultiTurnSFTDataset(str(files["tool_sft/train"]), tok, OmegaConf.create({"max_length": 256}))
    sample = sft[0]
    ids, mask = sample["input_ids"], sample["loss_mask"]
    learned = tok.decode(ids[mask.bool()])
    row = next(arith_rows("tool_sft", "train", 1, 0))
    call = row["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert learned == (
        f'<tool_call>\n{{"name": "calculator", "arguments": {call}}}\n</tool_call><|im_end|>\n'
        f"{row['messages'][3]['content']}<|im_end|>\n"
    )
    assert "<tools>" in tok.decode(ids[: int(mask.nonzero()[0])]), "the tool schema is in the system turn"
