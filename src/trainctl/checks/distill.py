"""Checks for on-policy distillation (algorithm=distill: verl main_ppo's distillation, with trainctl's distillation
section): a teacher is named and there, it writes answers (a causal LM, not a reward model's classifier), it speaks
the student's tokenizer (verl compares the two models' log-probabilities of the same token ids), and it fits where it
is served. All before anything starts; verl would find a wrong teacher only once its servers are up, or never (a
different vocabulary trains on nonsense without an error)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.backends.rewards.base import NamedModel
    from trainctl.checks.base import Subject

KEY = "distillation.teacher"


def enabled(s: Subject) -> bool:
    return s.backend == "verl-ppo" and bool(s.value("distillation.enabled"))


def checks(s: Subject) -> list[Problem]:
    from trainctl.backends.rewards.base import named_model

    teacher = s.cfg.distillation.teacher
    if not enabled(s):
        if not teacher:
            return []
        return [
            Problem(
                f"{KEY} = {teacher} but algorithm={s.cfg.algorithm.name} does not distil: nothing would read it.",
                key=KEY,
                hint="algorithm=distill, or drop distillation.teacher",
            )
        ]
    if not teacher:
        return [
            Problem(
                f"algorithm={s.cfg.algorithm.name} needs a teacher to score the student's tokens.",
                key=KEY,
                hint="distillation.teacher=runs/NAME (a run's latest checkpoint), a model option or a folder, with the "
                "student's tokenizer",
            )
        ]
    named = named_model(KEY, str(teacher), s.cfg.paths.models, s.comp.search)
    missing = named.problem(s.launching, s.comp.search)
    if missing is not None:
        if not s.launching and named.as_folder:  # a run a recipe names may be trained after the dry run
            missing.severity = "warning"
            missing.hint = f"train that run first, or set {KEY} to a model folder or option (trainctl model ls)"
        return [missing]
    problems = _writes_answers(named) + _same_tokenizer(s, named)
    return problems or _fits(s, named)


def _writes_answers(named: NamedModel) -> list[Problem]:
    from trainctl.backends.rewards.base import architecture, model_config

    arch = architecture(model_config(named.folder))
    if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
        return []
    return [
        Problem(
            f"{KEY} = {named.name} is a {arch}, not a model that writes answers: a teacher gives the log-probability "
            "of every token the student samples.",
            key=KEY,
            details=[f"{named.folder}/config.json: architectures = [{arch}]"],
            hint="a causal LM with the student's tokenizer (a reward model scores answers: reward=model)",
        )
    ]


def vocabulary(folder: Path) -> dict[int, str] | None:
    """Token id -> token of a fast tokenizer's tokenizer.json (its model's vocabulary and its added tokens), read as
    JSON; None when the folder has none."""
    try:
        data = json.loads((folder / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return None
    vocab = (data.get("model") or {}).get("vocab")
    out: dict[int, str] = {}
    if isinstance(vocab, dict):
        out = {int(i): t for t, i in vocab.items()}
    elif isinstance(vocab, list):  # unigram: [token, score] pairs in id order
        out = {i: (v[0] if isinstance(v, list) else str(v)) for i, v in enumerate(vocab)}
    for added in data.get("added_tokens") or []:
        out[int(added["id"])] = added["content"]
    return out


def _same_tokenizer(s: Subject, named: NamedModel) -> list[Problem]:
    student_dir = Path(s.cfg.model.path).expanduser()
    student, teacher = vocabulary(student_dir), vocabulary(named.folder)
    if student is None or teacher is None:
        # no tokenizer.json on one side: the sizes of the embeddings are what can be compared
        from trainctl.backends.rewards.base import model_config

        sizes = [model_config(d).get("vocab_size") for d in (student_dir, named.folder)]
        if None in sizes or sizes[0] == sizes[1]:
            return []
        return [_tokenizer_problem(s, named, [f"vocab_size {sizes[0]} (the student) and {sizes[1]} (the teacher)"])]
    differ = sorted(i for i in set(student) | set(teacher) if student.get(i) != teacher.get(i))
    if not differ:
        return []
    shown = ", ".join(f"{i}: {student.get(i)!r} vs {teacher.get(i)!r}" for i in differ[:3])
    return [
        _tokenizer_problem(
            s,
            named,
            [
                f"{len(differ)} of {len(set(student) | set(teacher))} token ids name different tokens (student vs "
                f"teacher), e.g. {shown}",
                f"student: {student_dir}/tokenizer.json; teacher: {named.folder}/tokenizer.json",
            ],
        )
    ]


def _tokenizer_problem(s: Subject, named: NamedModel, details: list[str]) -> Problem:
    return Problem(
        f"{KEY} = {named.name} does not share model={s.cfg.model.name}'s tokenizer: on-policy distillation compares "
        "the two models' log-probabilities of the same token ids.",
        key=KEY,
        details=details,
        hint="a teacher of the student's family (the same tokenizer), e.g. a larger model of the same series or a run "
        "that started from the student's model",
    )


def _fits(s: Subject, named: NamedModel) -> list[Problem]:
    """The teacher's weights fit where it is served: a GPU engine's share of a GPU (bf16, split over its tensor
    parallelism), or on cpu trainctl's transformers server (an fp32 copy per replica) in this machine's memory."""
    from trainctl.models.info import safetensors_params
    from trainctl.models.memory import GiB

    params, _ = safetensors_params(named.folder)
    if not params:
        return []
    hw, d = s.cfg.hardware, s.cfg.distillation
    tp = int(s.value("distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size") or 1)
    if hw.device == "cuda":
        share = float(s.value("distillation.teacher_models.teacher_model.inference.gpu_memory_utilization") or 0.5)
        if not hw.gpu_memory_gb:
            return []
        weights, room = params * 2 / tp, share * hw.gpu_memory_gb * GiB
        if weights <= room:
            return []
        more = next((g for g in (2, 4, 8) if g > tp and params * 2 / g <= room), None)
        return [
            Problem(
                "The teacher's weights do not fit in its server's share of a GPU:",
                key="distillation.gpus",
                details=[
                    f"{_count(params)} params x 2 bytes / tensor parallel {tp} = {weights / GiB:.3g} GiB; "
                    f"gpu_memory_utilization {share} x {hw.gpu_memory_gb:g} GiB = {room / GiB:.3g} GiB"
                ],
                hint=f"distillation.gpus={more} hardware.rollout_tp={more}" if more else "a smaller teacher",
            )
        ]
    import psutil

    copies = d.gpus // tp
    need, total = copies * params * 4, psutil.virtual_memory().total
    if need <= total / 2:
        return []
    return [
        Problem(
            f"the teacher is served in {copies} process(es) of {_count(params)} params in fp32: "
            f"{need / GiB:.1f} GiB of this machine's {total / GiB:.0f} GiB.",
            key=KEY,
            hint="distillation.gpus=1, a smaller teacher, or a GPU machine",
            severity="warning",
        )
    ]


def _count(params: int) -> str:
    return f"{params / 1e9:.1f}B" if params >= 1e8 else f"{params / 1e6:.2f}M"
