"""Checks for SFT (verl sft_trainer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainctl.checks.arith import divisors_near, fix, neighbours
from trainctl.checks.base import Number
from trainctl.checks.common import check_logger_names, check_verl_device, micro_fix_key, nodes_text
from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject


def _ranks(s: Subject) -> tuple[int, int, int]:
    nodes, per_node = s.value("trainer.nnodes"), s.value("trainer.n_gpus_per_node")
    sp = s.value("engine.ulysses_sequence_parallel_size") or 1
    return nodes, per_node, max(1, nodes * per_node // sp)


def batch(s: Subject) -> list[Problem]:
    B = s.value("data.train_batch_size")
    if not isinstance(B, int) or B < 1:
        return [Problem(f"data.train_batch_size must be a positive integer, not {B!r}.", key="data.train_batch_size")]
    nodes, per_node, dp = _ranks(s)
    problems = []
    if B % dp:
        # sft_trainer computes the per-rank batch as B // dp and silently drops the remainder
        problems.append(
            Problem(
                "The batch does not divide across data-parallel ranks (verl would silently drop the remainder):",
                key="data.train_batch_size",
                details=[
                    f"data.train_batch_size = {B}; {nodes_text(nodes)} x {per_node} = {dp} ranks; {B} % {dp} = {B % dp}"
                ],
                hint=fix("data.train_batch_size", neighbours(B, dp)),
            )
        )
    elif not s.value("data.use_dynamic_bsz"):
        u = s.value("data.micro_batch_size_per_gpu")
        per_rank = B // dp
        if isinstance(u, int) and u > 0 and per_rank % u:
            problems.append(
                Problem(
                    "The per-rank batch does not split into micro-batches:",
                    key="data.micro_batch_size_per_gpu",
                    details=[
                        f"data.train_batch_size / ranks = {B} / {dp} = {per_rank}; {per_rank} % {u} = {per_rank % u}"
                    ],
                    hint=fix(micro_fix_key(s, "data.micro_batch_size_per_gpu"), divisors_near(per_rank, u)),
                )
            )
    rows = s.rows("train")
    if rows is not None and rows < B:
        problems.append(
            Problem(
                f"The training file has fewer rows than one step takes: {rows} rows < data.train_batch_size = {B} "
                "(an epoch would have no steps).",
                key="data.train_batch_size",
                hint=f"data.train_batch_size={max(dp, rows // dp * dp)}",
            )
        )
    return problems


def lengths(s: Subject) -> list[Problem]:
    L = s.value("data.max_length")
    ctx = s.cfg.model.context_length
    if isinstance(L, int) and ctx < L:
        return [
            Problem(
                "SFT samples may be longer than the model's context:",
                key="data.max_length",
                details=[f"data.max_length = {L} > {ctx} (model.context_length of model={s.cfg.model.name})"],
                hint=f"data.max_length={ctx}",
            )
        ]
    return []


def seed(s: Subject) -> list[Problem]:
    """verl 0.9.1's SFT trainer never reads trainer.seed: its DistributedSampler shuffles with seed 0 and the model's
    init is the checkpoint's, so a run.seed the user chose changes nothing (measured: seeds 0-2 gave the same run)."""
    where = s.comp.origin("run.seed")
    if where is None or where.startswith("conf/trainctl.yaml"):
        return []
    return [
        Problem(
            f"run.seed={s.cfg.run.seed} ({where}) changes nothing in an SFT run: verl's SFT trainer never reads "
            "trainer.seed (its data order is shuffled with seed 0).",
            key="run.seed",
            hint="drop run.seed for SFT; to vary the data order, shuffle the training file itself",
            severity="warning",
        )
    ]


def checks(s: Subject) -> list[Problem]:
    return [
        *batch(s),
        *lengths(s),
        *seed(s),
        *check_logger_names(s, "trainer.logger"),
        *check_verl_device(s, "engine.strategy", "model.override_config.attn_implementation"),
    ]


def numbers(s: Subject) -> list[Number]:
    B = s.value("data.train_batch_size")
    nodes, per_node, dp = _ranks(s)
    out = [
        Number("sequences per step", B, "data.train_batch_size"),
        Number("data-parallel ranks", dp, f"{nodes_text(nodes)} x {per_node}"),
        Number("sequences per rank per step", B // dp, f"{B} / {dp}"),
    ]
    if s.value("data.use_dynamic_bsz"):
        tokens = s.value("data.max_token_len_per_gpu")
        out.append(Number("micro-batch per GPU", f"dynamic, <= {tokens} tokens", "data.use_dynamic_bsz"))
    else:
        u = s.value("data.micro_batch_size_per_gpu")
        out.append(Number("micro-batch per GPU", u, "data.micro_batch_size_per_gpu"))
        out.append(Number("gradient accumulation steps", B // dp // u, f"{B // dp} / {u}"))
    rows = s.rows("train")
    if rows is not None:
        steps = rows // B
        total = s.value("trainer.total_training_steps") or steps * s.value("trainer.total_epochs")
        out.append(Number("steps per epoch", steps, f"{rows} rows // {B} (last partial batch dropped)"))
        out.append(Number("total steps", total, f"{steps} x {s.value('trainer.total_epochs')} epochs"))
    return out
