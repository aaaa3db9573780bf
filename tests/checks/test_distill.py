"""algorithm=distill's checks (trainctl.checks.distill), through the CLI's dry run: the teacher is named and there,
writes answers, shares the student's tokenizer and fits; a good one becomes verl's distillation keys."""

from __future__ import annotations

import json
import shutil

import pytest

# a few prompts a step so that the tiny data divides into steps (the PPO family's defaults are 7B ones)
SMALL = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]


def _dry(cli, *args):
    return cli("train", "algorithm=distill", *SMALL, *args, "--dry-run")


def test_a_teacher_with_the_students_tokenizer_becomes_verls_distillation_keys(cli, tiny_model, tmp_path):
    teacher = tmp_path / "teacher"
    shutil.copytree(tiny_model, teacher)
    result = _dry(cli, f"distillation.teacher={teacher}", "distillation.gpus=2")
    assert result.exit_code == 0, result.output
    assert f"distillation.teacher_models.teacher_model.model_path={teacher}" in result.stdout
    assert "distillation.n_gpus_per_node=2" in result.stdout and "distillation.enabled=true" in result.stdout
    assert "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1" in result.stdout


def test_distill_without_a_teacher_and_a_teacher_without_distill_are_refused(cli, tiny_model):
    result = _dry(cli)
    assert result.exit_code == 1
    assert "algorithm=distill needs a teacher to score the student's tokens." in result.stderr
    assert "Hint: distillation.teacher=runs/NAME (a run's latest checkpoint)" in result.stderr
    other = cli("train", "algorithm=grpo", *SMALL, "distillation.teacher=tiny", "--dry-run")
    assert other.exit_code == 1
    assert "distillation.teacher = tiny but algorithm=grpo does not distil: nothing would read it." in other.stderr


def test_a_teacher_with_another_tokenizer_is_refused_with_the_ids_that_differ(cli, tiny_model, tmp_path):
    teacher = tmp_path / "other"
    shutil.copytree(tiny_model, teacher)
    data = json.loads((teacher / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    a, b = list(vocab)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (teacher / "tokenizer.json").write_text(json.dumps(data))
    result = _dry(cli, f"distillation.teacher={teacher}")
    assert result.exit_code == 1
    assert f"distillation.teacher = {teacher} does not share model=tiny's tokenizer" in result.stderr
    assert "2 of 438 token ids name different tokens (student vs teacher), e.g. 100: " in result.stderr


def test_a_reward_model_is_no_teacher(cli, tiny_model, tiny_reward_model_dir, tmp_path):
    result = _dry(cli, f"distillation.teacher={tiny_reward_model_dir}")
    assert result.exit_code == 1
    assert "is a Qwen2ForSequenceClassification, not a model that writes answers" in result.stderr
    # a run that trained one is refused before its checkpoint is merged
    run = tmp_path / "work" / "runs" / "rm"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"name": "rm", "algorithm": "rm", "family": "rm"}))
    result = _dry(cli, "distillation.teacher=runs/rm")
    assert result.exit_code == 1
    assert "Error: distillation.teacher=runs/rm: that run trained a reward model (algorithm=rm)" in result.stderr


@pytest.mark.parametrize(("hardware", "gpus"), [("1gpu", 1), ("8gpu", 8)])
def test_a_teacher_that_does_not_fit_its_share_of_a_gpu_is_refused(hardware, gpus, cli, tiny_model, tmp_path):
    result = cli(
        "train", "algorithm=distill", f"hardware={hardware}", *SMALL, f"distillation.teacher={tiny_model}",
        "hardware.gpu_memory_gb=0.00001", f"distillation.gpus={gpus}", f"hardware.rollout_tp={gpus}", "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "The teacher's weights do not fit in its server's share of a GPU:" in result.stderr
    assert f"params x 2 bytes / tensor parallel {gpus} = " in result.stderr
