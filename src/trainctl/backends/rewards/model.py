"""reward=model: a reward model (a sequence classifier with one label) scores each prompt and response.

verl 0.9.1's reward-model path (`reward.reward_model.enable`) serves the model with the rollout engine (vLLM's
/classify, SGLang's embeddings) beside training, so it needs a GPU engine. On trainctl's CPU rollout (hf) the model
runs with transformers inside each reward worker instead: trainctl's reward manager
(trainctl.runtime.reward_model.SequenceClassifierRewardManager), which verl loads with importlib and which reads
`reward.reward_kwargs.trainctl`.

Before anything starts: the model is there, is a one-label classifier whose head is in its weights (a causal LM is
an error), and fits where it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.backends.rewards.base import (
    NamedModel,
    RewardKind,
    architecture,
    has_chat_template,
    model_config,
    named_model,
    only_reward_metric,
    run_dir,
)
from trainctl.backends.rewards.registry import register
from trainctl.config.schema import opt
from trainctl.errors import Problem
from trainctl.facts.verl import TRAINCTL_ROLLOUTS

if TYPE_CHECKING:
    from trainctl.checks.base import Subject

MANAGER = ("pkg://trainctl.runtime.reward_model", "SequenceClassifierRewardManager")
# where a classification head's weights are, by the names transformers gives them
HEAD_NAMES = ("score.weight", "classifier.weight", "classifier.out_proj.weight", "v_head.weight", "value_head.weight")


@dataclass
class ModelSettings:
    model: str | None = opt(
        "the reward model, a model option of kind reward (`trainctl model pull NAME` puts it there) or a folder"
    )
    micro_batch_size: int = opt("sequences the reward model scores in one forward pass", 8, ge=1)
    max_length: int | None = opt(
        "tokens of prompt and response it reads, cut from the left (null: its context length)", ge=1
    )
    offload: bool = opt("release the reward model's GPU memory between steps (vllm/sglang)", True)
    tp: int = opt("GPUs that hold one copy of the reward model (vllm/sglang)", 1, ge=1)
    gpu_memory_utilization: float = opt("the share of a GPU its server may take (vllm/sglang)", 0.5, gt=0, le=1)


def on_servers(hw) -> bool:
    """verl's reward-model servers score (a GPU engine); on trainctl's CPU rollout, and on the CPU whatever samples
    (vLLM's CPU build serves generation, not classifier heads), trainctl's manager does."""
    return hw.rollout_engine not in TRAINCTL_ROLLOUTS and hw.device != "cpu"


@register("model")
class RewardModel(RewardKind):
    summary = "a reward model scores each response"
    Settings = ModelSettings
    needs = {"model": "tiny-rm"}
    scores_every_row = True
    needs_ground_truth = False

    def verl(self, cfg, search):
        s = self.settings(cfg.reward)
        engine = cfg.hardware.rollout_engine
        folder = str(named_model("reward.model", s.model, cfg.paths.models, search).folder) if s.model else None
        if on_servers(cfg.hardware):
            rollout = {
                "name": engine,
                "tensor_model_parallel_size": s.tp,
                "gpu_memory_utilization": s.gpu_memory_utilization,
                "free_cache_engine": s.offload,
                "max_num_seqs": s.micro_batch_size,
                "prompt_length": cfg.data.max_prompt_length,
                "response_length": cfg.data.max_response_length,
            }
            return {"reward_model": {"enable": True, "model_path": folder, "rollout": rollout}}
        module, name = MANAGER
        # what the manager reads inside the run: plain values
        settings = {
            "kind": self.name,
            "run_dir": run_dir(cfg),
            "model_path": folder,
            "micro_batch_size": s.micro_batch_size,
            "max_length": s.max_length,
        }
        return {
            "reward_manager": {"source": "importlib", "name": name, "module": {"path": module}},
            "reward_kwargs": {"trainctl": settings},
        }

    def manager(self, cfg):
        return None if on_servers(cfg.hardware) else MANAGER

    def checks(self, s: Subject) -> list[Problem]:
        settings = self.settings(s.cfg.reward)
        problems = self._filter_groups(s)
        if settings.model:
            problems += self._model(s, settings)
        return problems

    def eval_problems(self, cfg):
        if not on_servers(cfg.hardware):
            return []
        # verl's reward-model path serves the model with vLLM/SGLang as a Ray service; eval scores in its process
        return [
            Problem(
                "eval scores in this process; reward=model on vllm/sglang is served by verl's reward-model servers.",
                key="hardware.rollout_engine",
                hint="score with transformers in this process: add hardware.rollout_engine=hf",
            )
        ]

    # -- checks ---------------------------------------------------------------------------------------------------

    def _filter_groups(self, s: Subject) -> list[Problem]:
        """DAPO's dynamic sampling reads each group's metric while sampling (verl's replay buffer)."""
        if not s.value("algorithm.filter_groups.enable"):
            return []
        if on_servers(s.cfg.hardware) and not s.value("reward.reward_model.enable_resource_pool"):
            return [
                Problem(
                    "algorithm.filter_groups needs each group's reward while sampling; verl scores with a colocated "
                    "reward model only after sampling.",
                    key="algorithm.filter_groups.enable",
                    hint="algorithm.filter_groups.enable=false, or give the reward model GPUs of its own: "
                    "reward.reward_model.enable_resource_pool=true reward.reward_model.n_gpus_per_node=N "
                    "reward.reward_model.nnodes=1",
                )
            ]
        return only_reward_metric(s)

    def _model(self, s: Subject, settings: ModelSettings) -> list[Problem]:
        named = named_model("reward.model", settings.model, s.cfg.paths.models, s.comp.search)
        missing = named.problem(s.launching, s.comp.search)
        if missing is not None:
            # not pulled yet: its option's size still says whether it will fit
            option = named.option
            fits = self._fits(s, settings, int(option.params), 2) if option is not None and option.params else []
            return [missing, *fits]
        problems = classifier_problems(named)
        if named.option is not None and named.option.kind != "reward" and not problems:
            problems.append(
                Problem(
                    f"reward.model = {named.name}: its model option says kind {named.option.kind}.",
                    key="reward.model",
                    hint=f"set kind: reward in its option (conf/model/{named.name}.yaml)",
                    severity="warning",
                )
            )
        return problems or self._fits(s, settings, *_params(named.folder))

    def _fits(self, s: Subject, r: ModelSettings, params: int, width: int) -> list[Problem]:
        """Where the reward model runs, its weights fit: a GPU engine's share of a GPU, or the host's memory."""
        from trainctl.models.memory import GiB

        hw = s.cfg.hardware
        if not params:
            return []
        if on_servers(hw):
            problems = []
            gpus = hw.nnodes * hw.gpus_per_node
            if r.tp > hw.gpus_per_node:
                problems.append(
                    Problem(
                        f"reward.tp = {r.tp} GPUs per reward-model server, but a node has {hw.gpus_per_node}.",
                        key="reward.tp",
                        hint=f"reward.tp={hw.gpus_per_node}",
                    )
                )
            if hw.gpu_memory_gb:
                weights = params * 2 / r.tp  # the engine loads bf16
                share = r.gpu_memory_utilization * hw.gpu_memory_gb * GiB
                if weights > share:
                    need = weights / (hw.gpu_memory_gb * GiB)
                    tp = next((t for t in (2, 4, 8) if t > r.tp and params * 2 / t <= share and t <= gpus), None)
                    problems.append(
                        Problem(
                            "The reward model's weights do not fit in its server's share of a GPU:",
                            key="reward.gpu_memory_utilization",
                            details=[
                                f"{params / 1e9:.1f}B params x 2 bytes / tp {r.tp} = {weights / GiB:.1f} GiB; "
                                f"reward.gpu_memory_utilization {r.gpu_memory_utilization} x {hw.gpu_memory_gb:g} "
                                f"GiB = {share / GiB:.1f} GiB"
                            ],
                            hint=f"reward.tp={tp}"
                            if tp
                            else f"reward.gpu_memory_utilization={min(0.9, need + 0.1):.2f}",
                        )
                    )
            return problems
        # in each reward worker, at the weights' own dtype (transformers loads dtype="auto")
        import psutil

        copies = max(1, hw.worker_processes)
        need = copies * params * width
        total = psutil.virtual_memory().total
        if need > total / 2:
            return [
                Problem(
                    f"the reward model runs in each of {copies} reward workers: {copies} x {params / 1e9:.2f}B params "
                    f"x {width} bytes = {need / GiB:.1f} GiB of this machine's {total / GiB:.0f} GiB.",
                    key="reward.model",
                    hint="hardware.worker_processes=1, or a GPU machine (verl's reward-model servers)",
                    severity="warning",
                )
            ]
        return []


def _labels(config: dict) -> int:
    # transformers' default is 2 labels when the config names none: a causal LM loaded as a classifier gets 2
    return len(config.get("id2label") or {}) or int(config.get("num_labels", 2))


def _tensors(folder: Path) -> dict[str, list[int]]:
    """Tensor name -> shape, from the safetensors headers."""
    from trainctl.ckpt.safetensors import safetensors_header

    shapes: dict[str, list[int]] = {}
    for f in sorted(folder.glob("*.safetensors")):
        shapes.update({k: v["shape"] for k, v in safetensors_header(f).items()})
    return shapes


def classifier_problems(named: NamedModel) -> list[Problem]:
    """A reward model loads with AutoModelForSequenceClassification, with one label and its trained head."""
    key, name, folder = named.key, named.name, named.folder
    config = model_config(folder)
    arch = architecture(config)
    if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
        return [
            Problem(
                f"{key} = {name} is a causal LM ({arch}), not a reward model: a reward model is a classifier with one "
                "label (…ForSequenceClassification, num_labels 1) trained to score responses.",
                key=key,
                details=[f"{folder}/config.json: architectures = [{arch}]"],
                hint="a reward model: trainctl model ls (kind reward); to have an LLM grade responses, "
                f"reward=judge reward.judge={name}",
            )
        ]
    if not arch.endswith("ForSequenceClassification"):
        return [
            Problem(
                f"{key} = {name} is a {arch}, not a sequence classifier: trainctl loads reward models with "
                "AutoModelForSequenceClassification.",
                key=key,
                hint="a reward model: trainctl model ls (kind reward)",
            )
        ]
    problems = []
    labels = _labels(config)
    if labels != 1:
        problems.append(
            Problem(
                f"{key} = {name} has {labels} labels; a reward model has one (its logit is the reward).",
                key=key,
                details=[f"{folder}/config.json: id2label has {labels} entries"],
                hint="a reward model trained with one label (trainctl model ls, kind reward)",
            )
        )
    from trainctl.ckpt.layout import CheckpointError

    try:
        shapes = _tensors(folder)
    except CheckpointError as e:  # a damaged or truncated weights file
        return [*problems, Problem(f"{key} = {name}: {e.message}.", key=key, hint=e.hint)]
    heads = {k: v for k, v in shapes.items() if k.endswith(HEAD_NAMES)}
    if shapes and not heads:
        problems.append(
            Problem(
                f"{key} = {name} has no classification head in its weights: transformers would start it at random "
                "and every reward would be noise.",
                key=key,
                details=[f"none of {', '.join(HEAD_NAMES)} in {folder}/*.safetensors"],
                hint="a reward model whose weights hold its trained head",
            )
        )
    elif any(v and v[0] != 1 for v in heads.values()):
        rows = next(v[0] for v in heads.values() if v)
        problems.append(
            Problem(
                f"{key} = {name}: its head's weights have {rows} outputs; a reward model has one.",
                key=key,
                hint="a reward model trained with one label",
            )
        )
    if not has_chat_template(folder):
        problems.append(
            Problem(
                f"{key} = {name} has no chat template: trainctl cannot write a conversation the way it reads one.",
                key=key,
                hint=f"add the chat template it was trained with to {folder}/tokenizer_config.json",
            )
        )
    return problems


def _params(folder: Path) -> tuple[int, int]:
    """(parameters, bytes per parameter on disk)."""
    from trainctl.models.info import DTYPE_BYTES, safetensors_params

    params, dtype = safetensors_params(folder)
    names = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
    return params, DTYPE_BYTES.get(names.get(dtype or "", ""), 2)
