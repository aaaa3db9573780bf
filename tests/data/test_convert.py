"""`trainctl data convert`: every input shape into every format, read back by the real consumers."""

from __future__ import annotations

import itertools
import json

import pyarrow.parquet as pq
import pytest

from tests.data.conftest import QA, write_jsonl


def _rows(path):
    return pq.read_table(path).to_pylist()


@pytest.mark.parametrize("shape", ["question_answer", "messages", "prompt_response", "alpaca", "sharegpt"])
def test_every_shape_converts_to_sft_and_rl(shape, shapes, cli, tmp_path):
    src = shapes[shape]
    sft = cli("data", "convert", str(src), "--to", "sft", "--out", str(tmp_path / "sft.parquet"))
    assert sft.exit_code == 0, sft.output
    assert f"detected: {shape}" in sft.stdout
    assert f"wrote 3 rows to {tmp_path / 'sft.parquet'}" in sft.stdout
    rows = _rows(tmp_path / "sft.parquet")
    assert rows[0]["messages"][-1] == {"role": "assistant", "content": QA[0]["answer"]}
    assert rows[0]["messages"][0]["role"] == "user" and QA[0]["question"] in rows[0]["messages"][0]["content"]

    rl = cli("data", "convert", str(src), "--to", "rl", "--out", str(tmp_path / "rl.parquet"))
    assert rl.exit_code == 0, rl.output
    rows = _rows(tmp_path / "rl.parquet")
    assert rows[1]["data_source"] == "openai/gsm8k"  # the answers end in #### <n>: gsm8k's scorer fits
    assert rows[1]["reward_model"] == {"style": "rule", "ground_truth": "42"}
    # like verl's gsm8k example, the source's question and answer columns travel along
    kept = {"question": QA[1]["question"], "answer": QA[1]["answer"]} if shape == "question_answer" else {}
    assert rows[1]["extra_info"] == {"split": "train", "index": 1, **kept}
    assert rows[1]["prompt"] == [{"role": "user", "content": QA[1]["question"]}]


def test_preference_pairs_convert_to_dpo_and_sft(shapes, cli, tmp_path):
    out = tmp_path / "dpo.parquet"
    result = cli("data", "convert", str(shapes["preference"]), "--to", "dpo", "--out", str(out))
    assert result.exit_code == 0, result.output
    row = _rows(out)[0]
    assert row == {
        "prompt": [{"role": "user", "content": QA[0]["question"]}],
        "chosen": [{"role": "assistant", "content": QA[0]["answer"]}],
        "rejected": [{"role": "assistant", "content": "I do not know."}],
    }
    sft = cli("data", "convert", str(shapes["preference"]), "--to", "sft", "--out", str(tmp_path / "s.parquet"))
    assert sft.exit_code == 0
    assert _rows(tmp_path / "s.parquet")[0]["messages"][-1]["content"] == QA[0]["answer"]


def test_rl_instruction_data_source_and_column_flags(cli, tmp_path):
    src = write_jsonl(tmp_path / "odd.jsonl", [{"q": "Capital of France?", "a": "Paris", "extra": 1}])
    out = tmp_path / "rl.parquet"
    result = cli(
        "data",
        "convert",
        str(src),
        "--to",
        "rl",
        "--out",
        str(out),
        "--prompt-col",
        "q",
        "--response-col",
        "a",
        "--data-source",
        "my/geo",
        "--instruction",
        "Answer in one word.",
        "--ability",
        "geo",
    )
    assert result.exit_code == 0, result.output
    row = _rows(out)[0]
    assert row["prompt"] == [{"role": "user", "content": "Capital of France? Answer in one word."}]
    assert (row["data_source"], row["ability"], row["reward_model"]["ground_truth"]) == ("my/geo", "geo", "Paris")


def test_read_back_by_verls_rl_and_sft_datasets(shapes, cli, tmp_path, tiny_model_dir):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    cli("data", "convert", str(shapes["question_answer"]), "--to", "rl", "--out", str(tmp_path / "rl.parquet"))
    cli("data", "convert", str(shapes["sharegpt"]), "--to", "sft", "--out", str(tmp_path / "sft.parquet"))
    rl = RLHFDataset(
        str(tmp_path / "rl.parquet"),
        tok,
        OmegaConf.create({"max_prompt_length": 128, "filter_overlong_prompts": False, "cache_dir": str(tmp_path)}),
    )
    assert len(rl) == 3
    item = rl[0]
    assert item["raw_prompt"][0]["content"] == QA[0]["question"]
    assert item["reward_model"]["ground_truth"] == "5" and item["data_source"] == "openai/gsm8k"
    sft = MultiTurnSFTDataset(
        str(tmp_path / "sft.parquet"), tok, OmegaConf.create({"max_length": 192, "pad_mode": "no_padding"})
    )
    assert len(sft) == 3
    sample = sft[0]
    assert int(sample["loss_mask"].sum()) > 0, "the assistant answer is learned"


def test_read_back_by_trls_dpo_data_path(shapes, cli, tmp_path, tiny_model_dir):
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    out = tmp_path / "dpo.parquet"
    cli("data", "convert", str(shapes["preference"]), "--to", "dpo", "--out", str(out))
    ds = load_dataset("parquet", data_files=str(out), split="train")
    trainer = DPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        args=DPOConfig(output_dir=str(tmp_path / "o"), use_cpu=True, bf16=False, report_to="none", max_steps=1),
        train_dataset=ds,
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    prepared = trainer.train_dataset
    assert len(prepared) == 3
    assert {"prompt_ids", "chosen_ids", "rejected_ids"} <= set(prepared.column_names)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    # TRL applied the chat template to the conversational rows
    assert (
        tok.decode(prepared[0]["prompt_ids"])
        == f"<|im_start|>user\n{QA[0]['question']}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.decode(prepared[0]["rejected_ids"]) == "I do not know.<|im_end|>\n"


def test_preference_pairs_convert_to_kto_rows_no_two_neighbours_sharing_a_prompt(shapes, cli, tmp_path):
    """KTO's unpaired rows: each pair's chosen answer desirable, its rejected one not, the rejected row held back one
    pair (TRL's KTOTrainer reads rows in order and estimates its KL term from each row's neighbour's answer)."""
    out = tmp_path / "kto.parquet"
    result = cli("data", "convert", str(shapes["preference"]), "--to", "kto", "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = _rows(out)
    assert f"wrote {len(rows)} rows to {out}" in result.stdout and len(rows) == 6  # 3 pairs
    question = [r["prompt"][0]["content"] for r in rows]
    assert [q == QA[i]["question"] for q, i in zip(question, (0, 1, 0, 2, 1, 2), strict=True)] == [True] * 6
    assert [r["label"] for r in rows] == [True, True, False, True, False, False]
    assert rows[0]["completion"] == [{"role": "assistant", "content": QA[0]["answer"]}]
    assert rows[2]["completion"] == [{"role": "assistant", "content": "I do not know."}]
    assert all(a != b for a, b in itertools.pairwise(question)), question


def test_kto_rows_convert_back_and_the_wrong_shape_is_skipped(cli, tmp_path):
    """A file of labelled answers (KTO's own shape) converts to kto as it is, and its desirable answers to sft."""
    src = write_jsonl(
        tmp_path / "kto.jsonl",
        [
            {"prompt": "2 + 2?", "completion": "4", "label": True},
            {"prompt": "3 + 3?", "completion": "7", "label": "false"},
            {"prompt": "4 + 4?", "completion": "8", "label": "maybe"},
        ],
    )
    result = cli("data", "convert", str(src), "--to", "kto", "--out", str(tmp_path / "k.parquet"))
    assert result.exit_code == 0, result.output
    assert "detected: unpaired (prompt=prompt, completion=completion, label=label)" in result.stdout
    assert "dropped 1 rows: label is not true or false" in result.stdout
    rows = _rows(tmp_path / "k.parquet")
    assert [(r["completion"][0]["content"], r["label"]) for r in rows] == [("4", True), ("7", False)]
    sft = cli("data", "convert", str(src), "--to", "sft", "--out", str(tmp_path / "s.parquet"))
    assert sft.exit_code == 0, sft.output
    assert [r["messages"][-1]["content"] for r in _rows(tmp_path / "s.parquet")] == ["4"]
    dpo = cli("data", "convert", str(src), "--to", "dpo", "--out", str(tmp_path / "d.parquet"))
    assert dpo.exit_code == 1 and "no rows to write" in dpo.stderr


def test_read_back_by_trls_kto_trainer(shapes, cli, tmp_path, tiny_model_dir):
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import KTOConfig, KTOTrainer

    out = tmp_path / "kto.parquet"
    cli("data", "convert", str(shapes["preference"]), "--to", "kto", "--out", str(out))
    ds = load_dataset("parquet", data_files=str(out), split="train")
    trainer = KTOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        args=KTOConfig(output_dir=str(tmp_path / "o"), use_cpu=True, bf16=False, report_to="none", max_steps=1),
        train_dataset=ds,
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
    )
    prepared = trainer.train_dataset
    assert len(prepared) == 6 and list(prepared["label"]) == [True, True, False, True, False, False]
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert tok.decode(prepared[2]["completion_ids"]) == "I do not know.<|im_end|>\n"


# -- bad input: one clear message, nothing written ---------------------------------------------------------------


def test_malformed_jsonl_line_is_named_and_nothing_is_written(cli, tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps(QA[0]) + "\n" + '{"question": "x", "answer": }\n')
    out = tmp_path / "out.parquet"
    result = cli("data", "convert", str(src), "--to", "sft", "--out", str(out))
    assert result.exit_code == 1
    assert f"Error: {src}:2: not valid JSON (Expecting value at column 29)." in result.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.parquet*"))


def test_a_bad_line_after_whole_batches_were_written_leaves_nothing(cli, tmp_path):
    (tmp_path / "in").mkdir()
    src = tmp_path / "in" / "big.jsonl"
    good = json.dumps(QA[0]) + "\n"
    src.write_bytes(good.encode() * 25_000 + b'{"question": "caf\xe9", "answer": "#### 1"}\n')
    out = tmp_path / "in" / "out.parquet"
    result = cli("data", "convert", str(src), "--to", "rl", "--out", str(out))
    assert result.exit_code == 1
    assert f"Error: {src}:25001: not valid JSON (not UTF-8 at byte 17)." in result.stderr
    assert [p.name for p in (tmp_path / "in").iterdir()] == ["big.jsonl"], "no output, no temporary file"


def test_what_json_reads_jsonl_reads(cli, tmp_path):
    """Blank lines, a byte-order mark, NaN and integers over 64 bits: json accepts them, so trainctl does."""
    src = tmp_path / "odd.jsonl"
    src.write_text(
        "\ufeff" + json.dumps(QA[0]) + "\n\n"
        '{"question": "q", "answer": "#### 2", "score": NaN, "id": 123456789012345678901234567890}\n'
    )
    out = tmp_path / "o.parquet"
    result = cli("data", "convert", str(src), "--to", "sft", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert len(_rows(out)) == 2


def test_unknown_columns_name_the_flags(cli, tmp_path):
    src = write_jsonl(tmp_path / "x.jsonl", [{"foo": 1, "bar": 2}])
    result = cli("data", "convert", str(src), "--to", "sft", "--out", str(tmp_path / "o.parquet"))
    assert result.exit_code == 1
    assert "Error: cannot tell what these rows are: columns bar, foo." in result.stderr
    assert "--prompt-col and --response-col" in result.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_empty_result_is_an_error(cli, tmp_path):
    src = write_jsonl(tmp_path / "e.jsonl", [{"question": "q", "answer": ""}, {"question": "", "answer": "a"}])
    out = tmp_path / "o.parquet"
    result = cli("data", "convert", str(src), "--to", "sft", "--out", str(out))
    assert result.exit_code == 1
    assert f"Error: no rows to write to {out}: empty answer (1 rows); empty question (1 rows)." in result.stderr
    assert not out.exists()


def test_rl_needs_a_data_source_when_none_can_be_inferred(cli, tmp_path):
    src = write_jsonl(tmp_path / "geo.jsonl", [{"question": "Capital of France?", "answer": "Paris"}])
    result = cli("data", "convert", str(src), "--to", "rl", "--out", str(tmp_path / "o.parquet"))
    assert result.exit_code == 1
    assert "Error: RL rows need a data_source: verl picks the reward function by it." in result.stderr
    assert "Hint: --data-source openai/gsm8k" in result.stderr


def test_preference_pairs_have_no_ground_truth(shapes, cli, tmp_path):
    result = cli(
        "data",
        "convert",
        str(shapes["preference"]),
        "--to",
        "rl",
        "--out",
        str(tmp_path / "o.parquet"),
        "--data-source",
        "x",
    )
    assert result.exit_code == 1
    assert "a preference pair has no ground truth to reward (3 rows)" in result.stderr


def test_dropped_rows_are_counted_with_examples(cli, tmp_path):
    src = write_jsonl(tmp_path / "mixed.jsonl", [*QA, {"question": "q", "answer": "   "}])
    result = cli("data", "convert", str(src), "--to", "sft", "--out", str(tmp_path / "o.parquet"))
    assert result.exit_code == 0
    assert f"dropped 1 rows: empty answer (e.g. {src}:4)" in result.stdout
