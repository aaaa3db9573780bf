"""`trainctl eval --tasks` for real (issue 46): lm-evaluation-harness on local tasks (tests/eval/lm_tasks: a
multiple-choice task and a generate task over arith questions, offline), on the tiny model and on the session's SFT
run, gets exactly the numbers lm-eval's own CLI (`python -m lm_eval --model hf`) gets on the same folder (run on the
SFT run's checkpoint); the same multiple-choice task through lm-eval's `local-completions` against `model serve` gets
the same accuracy; the metrics land where `ckpt best --metric`, `ckpt ls -m`, `runs show` and the server's
checkpoints page read them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.inference.conftest import served_here
from tests.real_runs import SFT_EVERY, SFT_STEPS
from trainctl.eval.harness import datasets_cache, metric_names
from trainctl.metrics import read_jsonl

TASKS = Path(__file__).with_name("lm_tasks")


@pytest.fixture
def lm_tasks(tmp_path) -> Path:
    """The task folder with each YAML's data file as an absolute path (lm-eval reads it from the working
    directory)."""
    folder = tmp_path / "lm_tasks"
    folder.mkdir()
    for spec in TASKS.glob("*.yaml"):
        config = yaml.safe_load(spec.read_text())
        files = config["dataset_kwargs"]["data_files"]
        files["test"] = str(shutil.copy(TASKS / files["test"], folder))
        (folder / spec.name).write_text(yaml.safe_dump(config, sort_keys=False))
    return folder


def lm_eval_cli(folder: Path, tasks: Path, out: Path, *extra: str) -> dict[str, float]:
    """`python -m lm_eval --model hf` on a model folder, as a user runs it: its results as trainctl names them."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(out / "datasets")}
    argv = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={folder},dtype=float32",
            "--tasks", "arith_mc,arith_gen", "--include_path", str(tasks), "--device", "cpu",
            "--output_path", str(out / "results.json"), *extra]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=out.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = out.glob("results_*.json")
    return metric_names(json.loads(results.read_text()))


def _served_accuracy(url: str, tokenizer: Path, tasks: Path) -> dict:
    """lm-eval's local-completions model (tokenized requests, echo and logprobs) on the multiple-choice task."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    args = {"base_url": f"{url}/completions", "model": "tiny", "tokenizer_backend": "huggingface",
            "tokenizer": str(tokenizer), "num_concurrent": 8, "max_retries": 1}  # fmt: skip
    manager = TaskManager(include_path=str(tasks), include_defaults=False)
    with datasets_cache():  # trainctl's (the session's), not ~/.cache/huggingface
        return lm_eval.simple_evaluate(model="local-completions", model_args=args, tasks=["arith_mc"],
                                       task_manager=manager)["results"]["arith_mc"]  # fmt: skip


def test_tasks_on_the_tiny_model_are_lm_evals_numbers_and_the_served_model_scores_the_same(
    cli, tiny_model, lm_tasks, tmp_path
):
    out = tmp_path / "out"
    result = cli("eval", "tiny", "--tasks", "arith_mc,arith_gen", "--include-path", str(lm_tasks), "--out", str(out))
    assert result.exit_code == 0, result.output[-3000:]
    assert "Evaluating 1 model on arith_mc, arith_gen (lm-eval's hf model on cpu, batch size 1)" in result.stderr
    assert "Running loglikelihood requests" in result.stderr  # lm-eval's progress
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:]}
    assert set(rows) == {"eval/arith_mc/acc", "eval/arith_mc/acc_norm", "eval/arith_gen/exact_match"}, result.stdout
    ours = read_jsonl(out / "metrics.jsonl")[0]
    assert float(rows["eval/arith_mc/acc"][0]) == pytest.approx(ours["eval/arith_mc/acc"], abs=1e-4)
    # lm-eval's own results file and per-sample logs, beside the metrics
    logs = out / "lm-eval" / "tiny"
    (saved,) = logs.glob("results_*.json")
    assert metric_names(json.loads(saved.read_text())) == ours
    samples = {p.name.split("_2")[0]: p for p in logs.glob("samples_*.jsonl")}
    assert sorted(samples) == ["samples_arith_gen", "samples_arith_mc"]
    assert len(samples["samples_arith_mc"].read_text().splitlines()) == 24

    # the lm-eval CLI command that gets the same numbers (run, and compared to the last digit, on the SFT run's
    # checkpoint below: one CLI run of ~17 s of CPU for the suite)
    command = next(line for line in result.stderr.splitlines() if line.startswith("The same with lm-eval's CLI: "))
    assert f"pretrained={tiny_model},dtype=float32" in command and "--batch_size 1" in command

    # the multiple-choice task through local-completions against model serve: the same accuracy
    with served_here("tiny") as server:
        served = _served_accuracy(server.url, tiny_model, lm_tasks)
        assert not server.service.engine.batch.busy
    assert (served["acc,none"], served["acc_norm,none"]) == (ours["eval/arith_mc/acc"], ours["eval/arith_mc/acc_norm"])


def test_tasks_on_each_checkpoint_of_a_run_and_ckpt_best_picks_by_them(cli, sft_run, lm_tasks, tmp_path):
    from trainctl.metrics import held_out
    from trainctl.serve.views import checkpoints

    run = shutil.copytree(sft_run.path, tmp_path / "runs" / "sft")  # eval writes into the run: a copy
    result = cli("eval", str(run), "--tasks", "arith_mc,arith_gen", "--include-path", str(lm_tasks),
                 "--each-checkpoint", "--batch-size", "4")  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    steps = list(range(SFT_EVERY, SFT_STEPS + 1, SFT_EVERY))
    header = result.stdout.splitlines()[0].split()
    assert header[:2] == ["metric", "base"] and "best" in header, result.stdout
    scores = read_jsonl(run / "eval" / "metrics.jsonl")
    assert sorted(scores) == [0, *steps]

    # lm-eval's CLI on the folder the latest checkpoint was merged into: the same numbers
    (saved,) = (run / "eval" / "lm-eval" / f"step-{SFT_STEPS}").glob("results_*.json")
    folder = Path(json.loads(saved.read_text())["config"]["model_args"]["pretrained"])
    assert folder != run and (folder / "config.json").is_file()
    assert lm_eval_cli(folder, lm_tasks, tmp_path / "cli", "--batch_size", "4") == scores[SFT_STEPS]

    # ckpt best and ckpt ls read them; runs show's held-out metrics and the server's checkpoints page too
    metric = "eval/arith_mc/acc"
    by_step = {s: scores[s][metric] for s in steps}
    best = max(steps, key=lambda s: (by_step[s], -s))  # the earliest of equals, as ckpt best picks
    picked = cli("ckpt", "best", str(run), "--metric", metric)
    assert picked.exit_code == 0 and picked.stdout.strip().endswith(f"global_step_{best}"), picked.output
    best_row = next(line for line in result.stdout.splitlines() if line.startswith(metric))
    assert best_row.split()[-2:] == ["step", str(best)], best_row
    listed = cli("ckpt", "ls", str(run), "-m", metric, "-m", "eval/arith_gen/exact_match")
    assert listed.exit_code == 0 and listed.stdout.count(f"{metric}=") == len(steps), listed.stdout
    shown = held_out(run)  # what runs show prints as before -> after
    assert {s: v[metric] for s, v in shown.items() if metric in v} == {0: scores[0][metric], **by_step}
    assert all("eval/arith_gen/exact_match" in shown[s] and "eval/arith_mc/acc_norm" in shown[s] for s in steps)
    page = {c["step"]: c["eval_results"] for c in checkpoints(run)}
    assert {s: page[s][metric] for s in steps} == by_step


def test_a_dataset_that_cannot_be_had_offline_is_one_error_before_any_model_loads(
    cli, tiny_model, lm_tasks, monkeypatch
):
    """A task whose data is on the Hub, on a machine that reads datasets offline (the suite sets HF_HUB_OFFLINE):
    one error naming the dataset and how to provide it; nothing loaded."""
    import datasets.config
    import huggingface_hub.constants

    # read when they were imported, which in this test process may have been before the suite set HF_HUB_OFFLINE
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    spec = yaml.safe_load((lm_tasks / "arith_mc.yaml").read_text())
    spec.update(task="hub_mc", dataset_path="someone/arith-mc", dataset_name="main")
    del spec["dataset_kwargs"]
    (lm_tasks / "hub_mc.yaml").write_text(yaml.safe_dump(spec))
    result = cli("eval", "tiny", "--tasks", "arith_mc,hub_mc", "--include-path", str(lm_tasks))
    assert result.exit_code == 1, result.output
    assert "--tasks hub_mc needs the dataset someone/arith-mc (main), which is not in the datasets cache" in (
        result.stderr
    )
    assert "HF_HUB_OFFLINE is set" in result.stderr and "HF_DATASETS_CACHE=" in result.stderr
    assert "datasets.load_dataset('someone/arith-mc', 'main')" in result.stderr
    assert "dataset_path: json" in result.stderr  # or a local copy
    assert "Evaluating" not in result.stderr


def test_flags_that_need_tasks_and_settings_tasks_do_not_take(cli, tiny_model):
    result = cli("eval", "tiny", "--num-fewshot", "5")
    assert result.exit_code == 2 and "--num-fewshot goes with --tasks" in result.stderr
    result = cli("eval", "tiny", "--tasks", "arith_mc", "temperature=0.7")
    assert result.exit_code == 2 and "each task's own YAML says how it generates" in result.stderr
    result = cli("eval", "tiny", "--tasks", " , ")
    assert result.exit_code == 2 and "names no task" in result.stderr
    result = cli("eval", "tiny", "--tasks", "arith_mc", "--include-path", "nowhere", "--batch-size", "0")
    assert result.exit_code == 1
    assert "--include-path" in result.stderr and "is not a folder" in result.stderr
    assert "--batch-size 0: a number >= 1, or auto" in result.stderr


@pytest.mark.slow  # lm-eval's own index of thousands of task files, twice (~10 s of CPU each)
def test_lm_evals_own_tasks_a_misspelt_one_and_one_whose_dataset_is_not_here(cli, tiny_model, monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # as a process started with HF_HUB_OFFLINE=1 reads it
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    result = cli("eval", "tiny", "--tasks", "arc_easyy")
    assert result.exit_code == 1 and "--tasks arc_easyy: no such task, group or tag" in result.stderr, result.output
    assert "did you mean: arc_easy" in result.stderr and "lm_eval ls tasks" in result.stderr
    result = cli("eval", "tiny", "--tasks", "hellaswag")
    assert result.exit_code == 1, result.output
    assert "--tasks hellaswag needs the dataset Rowan/hellaswag" in result.stderr
    assert "datasets.load_dataset('Rowan/hellaswag')" in result.stderr


def test_ckpt_best_knows_which_way_lm_evals_metrics_go():
    from trainctl.ckpt.select import default_mode

    for metric in ("eval/arc_easy/acc", "eval/hellaswag/acc_norm", "eval/gsm8k/exact_match/strict-match"):
        assert default_mode(metric) == "max", metric
    for metric in ("eval/wikitext/word_perplexity", "eval/wikitext/byte_perplexity", "eval/wikitext/bits_per_byte"):
        assert default_mode(metric) == "min", metric


def test_a_reward_model_option_is_no_model_for_lm_evals_tasks(cli):
    result = cli("eval", "tiny-rm", "--tasks", "arith_mc")
    assert result.exit_code == 1 and "model=tiny-rm is a reward model (a score head)" in result.stderr, result.output
    assert "Finding" in result.stderr and "Evaluating" not in result.stderr


@pytest.mark.slow  # vLLM's CPU build: ~25 s to start, and its first requests warm it up (3-4 minutes on 2 busy cores)
def test_tasks_with_vllms_engine_score_what_the_hf_model_scores(cli, tiny_model, lm_tasks, tmp_path):
    """hardware.rollout_engine=vllm: lm-eval's vllm model (the engine settings model serve and eval give vLLM, here
    its CPU build) gets hf's accuracy, the same greedy answers, and log-likelihoods within float rounding."""
    runs = {}
    for engine in ("hf", "vllm"):
        out = tmp_path / engine
        result = cli("eval", "tiny", "--tasks", "arith_mc,arith_gen", "--include-path", str(lm_tasks), "--out",
                     str(out), f"hardware.rollout_engine={engine}")  # fmt: skip
        assert result.exit_code == 0, result.output[-3000:]
        assert f"lm-eval's {engine} model" in result.stderr
        samples = {}
        for task in ("arith_mc", "arith_gen"):
            (log,) = (out / "lm-eval" / "tiny").glob(f"samples_{task}_*.jsonl")
            samples[task] = {s["doc_id"]: s["filtered_resps"] for s in map(json.loads, log.read_text().splitlines())}
        runs[engine] = read_jsonl(out / "metrics.jsonl")[0], samples
    (hf, hf_samples), (vllm, vllm_samples) = runs["hf"], runs["vllm"]
    for metric in ("eval/arith_mc/acc", "eval/arith_mc/acc_norm", "eval/arith_gen/exact_match"):
        assert vllm[metric] == hf[metric], metric
    assert vllm_samples["arith_gen"] == hf_samples["arith_gen"]
    for doc, choices in hf_samples["arith_mc"].items():
        theirs = [float(c[0]) for c in vllm_samples["arith_mc"][doc]]
        assert [float(c[0]) for c in choices] == pytest.approx(theirs, abs=1e-4)
