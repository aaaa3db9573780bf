"""`trainctl data prep`: every data option, from a local copy in its hub's shape (no hub is reachable here)."""

from __future__ import annotations

import json
import socket

import pyarrow.parquet as pq

from tests.data.conftest import QA, write_jsonl, write_parquet


def _rows(path):
    return pq.read_table(path).to_pylist()


def test_prep_arith_writes_every_format(cli, isolated):
    result = cli("data", "prep", "arith")
    assert result.exit_code == 0, result.output
    base = isolated / "data" / "arith"
    for fmt in ("rl", "sft", "dpo"):
        assert f"wrote 512 rows to {base / fmt / 'train.parquet'}" in result.stdout
        assert f"wrote 64 rows to {base / fmt / 'test.parquet'}" in result.stdout
    train = {json.dumps(r["prompt"]) for r in _rows(base / "rl" / "train.parquet")}
    test = {json.dumps(r["prompt"]) for r in _rows(base / "rl" / "test.parquet")}
    assert len(train) == 512 and not train & test, "distinct problems, none shared between train and test"


def test_prep_gsm8k_from_a_local_copy(cli, isolated, tmp_path):
    copy = tmp_path / "gsm8k" / "main"
    copy.mkdir(parents=True)
    write_parquet(copy / "train-00000-of-00001.parquet", QA)
    write_parquet(copy / "test-00000-of-00001.parquet", QA[:1])
    result = cli("data", "prep", "gsm8k", "--from", str(tmp_path / "gsm8k"))
    assert result.exit_code == 0, result.output
    rl = _rows(isolated / "data" / "gsm8k" / "rl" / "train.parquet")
    assert rl[0]["data_source"] == "openai/gsm8k" and rl[0]["reward_model"]["ground_truth"] == "5"
    assert (
        rl[0]["prompt"][0]["content"]
        == 'What is 2 + 3? Let\'s think step by step and output the final answer after "####".'
    )
    assert rl[0]["extra_info"] == {
        "split": "train",
        "index": 0,
        "question": QA[0]["question"],
        "answer": QA[0]["answer"],
    }
    sft = _rows(isolated / "data" / "gsm8k" / "sft" / "test.parquet")
    assert sft == [
        {
            "messages": [
                {"role": "user", "content": QA[0]["question"]},
                {"role": "assistant", "content": QA[0]["answer"]},
            ]
        }
    ]


def test_prep_math_takes_the_boxed_answer(cli, isolated, tmp_path):
    rows = [{"problem": "Compute 1/2 + 1/2.", "solution": "It is $\\boxed{1}$.", "level": "Level 1", "type": "Algebra"}]
    src = write_jsonl(tmp_path / "math_train.jsonl", rows * 3)
    result = cli("data", "prep", "math", "--from", str(src))
    assert result.exit_code == 0, result.output
    rl = _rows(isolated / "data" / "math" / "rl" / "train.parquet")
    assert rl[0]["reward_model"]["ground_truth"] == "1"
    assert rl[0]["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert rl[0]["extra_info"]["level"] == "Level 1"


def test_prep_hh_rlhf_splits_the_transcripts(cli, isolated, tmp_path):
    chosen = "\n\nHuman: Hi!\n\nAssistant: Hello.\n\nHuman: Tell me a joke.\n\nAssistant: Why did the chicken..."
    rejected = "\n\nHuman: Hi!\n\nAssistant: Hello.\n\nHuman: Tell me a joke.\n\nAssistant: No."
    bad = {"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: c\n\nAssistant: d"}
    d = tmp_path / "hh"
    d.mkdir()
    write_jsonl(d / "train.jsonl", [{"chosen": chosen, "rejected": rejected}] * 3 + [bad])
    write_jsonl(d / "test.jsonl", [{"chosen": chosen, "rejected": rejected}])
    result = cli("data", "prep", "hh-rlhf", "--from", str(d))
    assert result.exit_code == 0, result.output
    dpo = _rows(isolated / "data" / "hh-rlhf" / "dpo" / "train.parquet")
    assert len(dpo) == 3
    assert dpo[0]["prompt"] == [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Tell me a joke."},
    ]
    assert dpo[0]["chosen"] == [{"role": "assistant", "content": "Why did the chicken..."}]
    assert dpo[0]["rejected"] == [{"role": "assistant", "content": "No."}]
    assert "dropped 1 rows: the two transcripts do not share a prompt" in result.stdout
    sft = _rows(isolated / "data" / "hh-rlhf" / "sft" / "train.parquet")
    assert sft[0]["messages"][-1] == {"role": "assistant", "content": "Why did the chicken..."}


def test_prep_ultrafeedback_uses_its_own_split_names(cli, isolated, tmp_path):
    pair = {
        "prompt": "Name a colour.",
        "chosen": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}],
        "rejected": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Seven."}],
    }
    d = tmp_path / "uf" / "data"
    d.mkdir(parents=True)
    write_parquet(d / "train_prefs-00000.parquet", [pair] * 4)
    write_parquet(d / "train_sft-00000.parquet", [{"prompt": "x", "chosen": "y", "rejected": "z"}] * 9)
    write_parquet(d / "test_prefs-00000.parquet", [pair])
    result = cli("data", "prep", "ultrafeedback", "--from", str(tmp_path / "uf"))
    assert result.exit_code == 0, result.output
    dpo = _rows(isolated / "data" / "ultrafeedback" / "dpo" / "train.parquet")
    assert len(dpo) == 4, "train_prefs only, not train_sft"
    assert dpo[0] == {
        "prompt": [{"role": "user", "content": "Name a colour."}],
        "chosen": [{"role": "assistant", "content": "Blue."}],
        "rejected": [{"role": "assistant", "content": "Seven."}],
    }


def test_prep_alpaca_holds_out_a_test_split(cli, isolated, tmp_path):
    rows = [{"instruction": f"Say {i}.", "input": "", "output": str(i)} for i in range(100)]
    src = tmp_path / "alpaca_data.json"
    src.write_text(json.dumps(rows))
    result = cli("data", "prep", "alpaca", "--from", str(src))
    assert result.exit_code == 0, result.output
    train = _rows(isolated / "data" / "alpaca" / "sft" / "train.parquet")
    test = _rows(isolated / "data" / "alpaca" / "sft" / "test.parquet")
    assert (len(train), len(test)) == (98, 2)
    assert test[0]["messages"][-1]["content"] == "49"


def test_limit(cli, isolated, tmp_path):
    src = write_jsonl(tmp_path / "train.jsonl", QA * 10)
    result = cli("data", "prep", "gsm8k", "--from", str(src), "--limit", "4")
    assert result.exit_code == 0, result.output
    assert len(_rows(isolated / "data" / "gsm8k" / "rl" / "train.parquet")) == 4


def test_unreachable_hub_says_so_and_writes_nothing(cli, isolated, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    result = cli("data", "prep", "gsm8k")
    assert result.exit_code == 1
    assert f"Error: cannot reach the Hugging Face hub at http://127.0.0.1:{port} to read openai/gsm8k." in result.stderr
    assert "pass --from PATH, set HF_ENDPOINT to a mirror, or try --source modelscope" in result.stderr
    assert not (isolated / "data" / "gsm8k").exists()


def test_gated_and_missing_datasets_say_how_to_fix_it(isolated, monkeypatch):
    """A hub that answers 401 / 404 to everything; a real `trainctl` process (datasets reads HF_* at import)."""
    import http.server
    import os
    import subprocess
    import sys
    import threading

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(self.server.code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": "nope"}')

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_do_not_print")
    for code, line in [
        (401, "Error: openai/gsm8k on {url} needs a token (it is gated or private)."),
        (404, "Error: openai/gsm8k was not found on {url}."),
    ]:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
        server.code = code
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        env = {**os.environ, "HF_ENDPOINT": url}
        result = subprocess.run(
            [sys.executable, "-m", "trainctl", "data", "prep", "gsm8k"], env=env, capture_output=True, text=True
        )
        server.shutdown()
        assert result.returncode == 1, result.stderr
        assert line.format(url=url) in result.stderr
        assert "hf_secret" not in result.stderr + result.stdout
        assert not (isolated / "data" / "gsm8k").exists()


def test_modelscope_offline_says_so(cli, monkeypatch):
    monkeypatch.setenv("MODELSCOPE_DOMAIN", "http://127.0.0.1:9")
    result = cli("data", "prep", "gsm8k", "--source", "modelscope")
    assert result.exit_code == 1
    assert "Error: cannot reach ModelScope at http://127.0.0.1:9 to read modelscope/gsm8k." in result.stderr


def test_unknown_dataset_gets_did_you_mean(cli):
    result = cli("data", "prep", "gsm8")
    assert result.exit_code == 1
    assert "Error: unknown data 'gsm8'." in result.stderr and "Did you mean 'gsm8k'?" in result.stderr


def test_data_ls(cli, isolated):
    cli("data", "prep", "arith")
    out = cli("data", "ls").stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("arith"))
    assert "rl 512/64, sft 512/64, dpo 512/64" in line
    assert any(ln.startswith("gsm8k") and "rl -/-" in ln for ln in out.splitlines())


def test_a_full_disk_leaves_the_prepared_data_as_it_was(tmp_path):
    """A small tmpfs (tests/full_disk.py) holds arith prepared with --limit 8; preparing all of it there fills the
    disk: a clear error, and every file is the one that was there before (none replaced, no staging left)."""
    import os
    import sys

    from tests.full_disk import run_on_small_disk

    prep = f"{sys.executable} -m trainctl data prep arith --out $DISK/arith"
    hashes = "(cd $DISK && find . -type f | sort | xargs sha256sum)"
    before, after = tmp_path / "before.txt", tmp_path / "after.txt"
    script = (
        f"{prep} --limit 8 > /dev/null || exit 7\n"
        f"{hashes} > {before}\n"
        f"{prep}; code=$?\n"
        f"{hashes} > {after}\n"
        "exit $code\n"
    )
    # 80k: before the staging folder, the train files were replaced and the test files not (measured)
    disk = run_on_small_disk(tmp_path / "disk", "80k", script, dict(os.environ))
    assert disk.returncode == 1, disk.output
    assert "Error: data prep arith: the disk filled up writing into " in disk.output, disk.output
    assert "nothing was written: " in disk.output and "is as it was." in disk.output
    assert "Hint: free some space there, or prepare it on another disk: trainctl data prep arith --out DIR" in (
        disk.output
    )
    assert after.read_text() == before.read_text(), "the same files, unchanged"
    assert not [f for f in disk.files if ".prep-" in f or ".tmp-" in f], disk.files
    assert "arith/rl/train.parquet" in disk.files
