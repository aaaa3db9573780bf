"""How much memory training a model takes on each device, and what to change when it does not fit.

An estimate from first principles, computed from the run's own config (the same plan `trainctl train` would run):

  training phase, per device
    weights      verl trains in fp32 (its FSDP engine forces model_dtype fp32 for training): 4 B/param,
                 sharded over every rank (FSDP); TRL's DPO runs under DDP: a whole copy per rank, in bf16 on GPUs.
                 LoRA adds its adapters (fp32, 4 B each: r x (in + out) per adapted layer). QLoRA (lora.quantize=4bit)
                 holds the blocks' linear layers in 4-bit NF4: 0.5 B/param plus one fp32 scale per block of 64
                 (bitsandbytes' default blocksize), 0.5625 B/param; embeddings, norms and the output layer stay bf16
    gradients    4 B per trainable param, sharded like the weights (LoRA: only the adapters train)
    optimizer    AdamW: two fp32 moments, 8 B per trainable param, sharded; 0 on the device with optimizer offload
    reference    PPO with a KL term and DPO without LoRA: a frozen bf16 copy, 2 B/param, sharded; 0 when offloaded
    critic       PPO with GAE: weights, gradients and optimizer again
    gathered     FSDP gathers one layer (and prefetches the next) in bf16 to compute with it; the embedding too
    activations  the micro batch at full length (prompt + response; DPO: chosen and rejected). With gradient
                 checkpointing each layer keeps its bf16 input (2h B/token) and one layer is recomputed at a time
                 (17h + 6i B/token, flash attention, SwiGLU); without, every layer keeps all of it
    logits       fp32 logits and their gradient: 8 B per token per vocabulary entry
    overhead     CUDA context, NCCL buffers and allocator fragmentation: 2 GiB (measured values are 1-3 GiB)
  rollout phase (PPO family with vLLM/SGLang), per device
    resident     what training leaves on the device while sampling: sharded weights and optimizer unless offloaded,
                 reference and critic weights, overhead
    engine       vLLM/SGLang take gpu_memory_utilization of the device: their bf16 weights (2 B/param / TP) and
                 the KV cache in it

It is an upper bound for the activations (every sequence at maximum length; verl's remove-padding and dynamic batch
sizes make real batches smaller) and ignores fragmentation spikes. On a CPU run, the budget is the machine's memory
shared by its training processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainctl.facts.trl import TRAINERS
from trainctl.models.info import ModelInfo

if TYPE_CHECKING:
    from trainctl.config.schema import Config

GiB = 2**30
OVERHEAD = 2 * GiB
# bitsandbytes NF4: 4 bits a weight and an fp32 absmax per block of 64 weights (no nested quantization)
NF4_BYTES = 0.5 + 4 / 64


@dataclass(frozen=True)
class Setup:
    """The settings of a run that decide its memory, read from its plan."""

    family: str  # sft, ppo, dpo (every TRL trainer)
    world: int
    gpus_per_node: int
    device: str
    budget: float | None  # bytes per device
    micro: int
    seq: int
    lora_rank: int
    param_offload: bool
    optimizer_offload: bool
    grad_ckpt: bool
    reference: bool
    ref_offload: bool
    critic: bool
    rollout_engine: str | None
    rollout_util: float
    rollout_tp: int
    sharded: bool = True  # FSDP (verl); False: DDP replicas (TRL)
    weight_bytes: int = 4
    token_budget: int | None = None  # use_dynamic_bsz: tokens per micro-batch, in place of micro x seq
    sp: int = 1  # Ulysses sequence parallelism: each GPU holds 1/sp of a sequence's activations
    lora_targets: tuple[str, ...] | None = None  # the adapted layers' names; None: all-linear
    quantized: bool = False  # QLoRA: the blocks' linear layers in 4-bit NF4


@dataclass
class Part:
    what: str
    bytes: float
    how: str


@dataclass
class Estimate:
    setup: Setup
    train: list[Part]
    rollout: list[Part] = field(default_factory=list)
    # limits broken other than the total (the rollout engine's share too small for its weights)
    problems: list[str] = field(default_factory=list)

    @property
    def train_total(self) -> float:
        return sum(p.bytes for p in self.train)

    @property
    def rollout_total(self) -> float:
        return sum(p.bytes for p in self.rollout)

    @property
    def peak(self) -> float:
        return max(self.train_total, self.rollout_total)

    @property
    def fits(self) -> bool | None:
        return None if self.setup.budget is None else self.peak <= self.setup.budget and not self.problems


@dataclass
class Fix:
    words: list[str]
    estimate: Estimate

    @property
    def text(self) -> str:
        return " ".join(self.words)


def size(n: float) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB / 10 or n == 0 else f"{n / 2**20:.1f} MiB"


def count(n: float) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.2f}{unit}" if unit == "B" else f"{n / div:.0f}{unit}"
    return str(int(n))


def block_linears(info: ModelInfo) -> dict[str, tuple[int, int]]:
    """(in, out) of each linear layer of a dense decoder block, by the names Qwen and Llama give them."""
    h, i = info.hidden_size, info.intermediate_size
    kv = info.kv_heads * (h // max(info.heads, 1))
    return {
        "q_proj": (h, h),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (h, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def lora_params(info: ModelInfo, rank: int, targets: tuple[str, ...] | None = None) -> int:
    """Adapter parameters: r x (in + out) per adapted layer, in every block. targets None: all-linear (verl's and
    PEFT's default: every linear layer of the blocks); names outside the blocks (lm_head) are not counted."""
    shapes = block_linears(info)
    names = list(shapes) if targets is None else [t for t in targets if t in shapes]
    return info.layers * rank * sum(sum(shapes[t]) for t in names)


def linear_params(info: ModelInfo) -> int:
    """Weights of the blocks' linear layers: what a 4-bit base quantizes."""
    return info.layers * sum(a * b for a, b in block_linears(info).values())


def estimate(info: ModelInfo, s: Setup) -> Estimate:
    P = info.params
    n = s.world if s.sharded else 1
    trainable = lora_params(info, s.lora_rank, s.lora_targets) if s.lora_rank else P
    shard = f"/ {n} ranks" if n > 1 else "(one rank)"
    train: list[Part] = []
    if s.quantized:
        linear = linear_params(info)
        base = NF4_BYTES * linear + s.weight_bytes * (P - linear)
        base_how = f"{count(linear)} in 4-bit NF4 x {NF4_BYTES} B + {count(P - linear)} x {s.weight_bytes} B"
    else:
        base, base_how = s.weight_bytes * P, f"{count(P)} params x {s.weight_bytes} B"
    adapters = 4 * trainable if s.lora_rank else 0
    if adapters:
        base_how += f" + {count(trainable)} LoRA params x 4 B"
    weights = 0.0 if s.param_offload else (base + adapters) / n
    train.append(
        Part(
            "weights", weights, "offloaded to host memory (param_offload)" if s.param_offload else f"{base_how} {shard}"
        )
    )
    how_trainable = f"{count(trainable)} LoRA params (rank {s.lora_rank})" if s.lora_rank else "every param"
    train.append(Part("gradients", 4 * trainable / n, f"fp32, {how_trainable} {shard}"))
    train.append(
        Part(
            "optimizer",
            0.0 if s.optimizer_offload else 8 * trainable / n,
            "offloaded to host memory (optimizer_offload)"
            if s.optimizer_offload
            else f"AdamW fp32 moments, 8 B x {how_trainable} {shard}",
        )
    )
    if s.reference:
        train.append(
            Part(
                "reference model",
                0.0 if s.ref_offload else 2 * P / n,
                "offloaded to host memory" if s.ref_offload else f"frozen bf16 copy, 2 B/param {shard}",
            )
        )
    if s.critic:
        critic = (0 if s.param_offload else 4 * P / n) + 4 * P / n + (0 if s.optimizer_offload else 8 * P / n)
        train.append(Part("critic", critic, f"a second model trained with GAE: weights, gradients, optimizer {shard}"))
    if s.sharded and s.world > 1:
        unit = max(2 * 2 * info.layer_params, 2 * info.vocab_size * info.hidden_size)
        train.append(Part("gathered layers", unit, "FSDP all-gathers a layer (and prefetches the next) in bf16"))
    if s.token_budget:
        tokens, what = s.token_budget, f"{s.token_budget:,} tokens/micro-batch (dynamic batch size)"
    else:
        tokens = s.micro * s.seq * (2 if s.family == "dpo" else 1)
        what = f"{tokens:,} tokens/micro-batch"
    if s.sp > 1:
        tokens //= s.sp
        what += f", / sequence parallel {s.sp}"
    h, i = info.hidden_size, info.intermediate_size
    full_layer = (17 * h + 6 * i) * tokens
    if s.grad_ckpt:
        acts = info.layers * 2 * h * tokens + full_layer
        how = f"{what}; checkpointed: 2h B/token/layer + one layer recomputed"
    else:
        acts = info.layers * full_layer
        how = f"{what}; every layer's activations kept (no gradient checkpointing)"
    train.append(Part("activations", acts, how))
    train.append(Part("logits", 8 * tokens * info.vocab_size, f"fp32 logits + gradient, {info.vocab_size:,} vocab"))
    if s.device == "cuda":
        train.append(Part("overhead", OVERHEAD, "CUDA context, NCCL, fragmentation"))

    rollout: list[Part] = []
    problems: list[str] = []
    if s.family == "ppo" and s.device == "cuda" and s.rollout_engine in ("vllm", "sglang"):
        resident = weights + (0.0 if s.optimizer_offload else 8 * trainable / n)
        if s.reference and not s.ref_offload:
            resident += 2 * P / n
        if s.critic:
            resident += (0 if s.param_offload else 4 * P / n) + (0 if s.optimizer_offload else 8 * P / n)
        rollout.append(Part("training state kept", resident, "weights, optimizer, reference and critic not offloaded"))
        share = s.rollout_util * (s.budget or 0)
        engine_weights = 2 * P / s.rollout_tp
        rollout.append(
            Part(
                f"{s.rollout_engine}",
                share,
                f"gpu_memory_utilization {s.rollout_util} of the device (its weights: "
                f"{engine_weights / GiB:.1f} GiB at TP {s.rollout_tp}, the rest KV cache)",
            )
        )
        rollout.append(Part("overhead", OVERHEAD, "CUDA context, NCCL, fragmentation"))
        # the engine needs its weights and room for a KV cache (a tenth of its share, at the least) in its share
        if s.budget and engine_weights > 0.9 * share:
            problems.append(
                f"{s.rollout_engine}'s share (gpu_memory_utilization {s.rollout_util} = {share / GiB:.1f} GiB) cannot "
                f"hold its bf16 weights ({engine_weights / GiB:.1f} GiB at tensor parallel {s.rollout_tp}) and a KV "
                "cache"
            )
    elif s.family == "ppo" and s.device == "cpu":
        rollout.append(Part("hf rollout copy", 4 * P, "trainctl's transformers rollout: an fp32 copy per replica"))
        rollout.append(Part("training state", sum(p.bytes for p in train[:3]), "weights, gradients, optimizer"))
    return Estimate(s, train, rollout, problems)


def setup_from(cfg: Config, value: Callable[..., Any]) -> Setup:
    """The settings that decide a run's memory: trainctl's config, and `value(path, default)` of its backend config."""
    import psutil

    hw = cfg.hardware
    family = cfg.algorithm.family
    world = hw.nnodes * hw.gpus_per_node
    device = hw.device
    budget = hw.gpu_memory_gb
    budget = budget * GiB if budget else (psutil.virtual_memory().total / hw.gpus_per_node if device == "cpu" else None)
    v = value
    common = dict(world=world, gpus_per_node=hw.gpus_per_node, device=device, budget=budget)
    if family == "ppo":
        AR = "actor_rollout_ref"
        adv = v("algorithm.adv_estimator")
        lora = v(f"{AR}.model.lora_rank") or 0
        return Setup(
            family="ppo",
            lora_targets=_targets(v(f"{AR}.model.target_modules")),
            micro=v(f"{AR}.actor.ppo_micro_batch_size_per_gpu") or 1,
            seq=(v("data.max_prompt_length") or 0) + (v("data.max_response_length") or 0),
            lora_rank=lora,
            param_offload=bool(v(f"{AR}.actor.fsdp_config.param_offload")),
            optimizer_offload=bool(v(f"{AR}.actor.fsdp_config.optimizer_offload")),
            grad_ckpt=bool(v(f"{AR}.model.enable_gradient_checkpointing", True)),
            # with LoRA verl's reference is the actor with its adapters off
            reference=not lora and bool(v(f"{AR}.actor.use_kl_loss") or v("algorithm.use_kl_in_reward")),
            ref_offload=bool(v(f"{AR}.ref.fsdp_config.param_offload")),
            critic=adv == "gae",
            rollout_engine=v(f"{AR}.rollout.name"),
            rollout_util=float(v(f"{AR}.rollout.gpu_memory_utilization") or 0.5),
            rollout_tp=int(v(f"{AR}.rollout.tensor_model_parallel_size") or 1),
            token_budget=v(f"{AR}.actor.ppo_max_token_len_per_gpu") if v(f"{AR}.actor.use_dynamic_bsz") else None,
            sp=int(v(f"{AR}.actor.ulysses_sequence_parallel_size") or 1),
            **common,
        )
    if family == "sft":
        return Setup(
            family="sft",
            micro=v("data.micro_batch_size_per_gpu") or 1,
            seq=v("data.max_length") or 0,
            token_budget=v("data.max_token_len_per_gpu") if v("data.use_dynamic_bsz") else None,
            sp=int(v("engine.ulysses_sequence_parallel_size") or 1),
            lora_rank=v("model.lora_rank") or 0,
            lora_targets=_targets(v("model.target_modules")),
            param_offload=bool(v("engine.param_offload")),
            optimizer_offload=bool(v("engine.optimizer_offload")),
            grad_ckpt=bool(v("model.enable_gradient_checkpointing", True)),
            reference=False,
            ref_offload=False,
            critic=False,
            rollout_engine=None,
            rollout_util=0.0,
            rollout_tp=1,
            **common,
        )
    use_peft = bool(v("use_peft"))
    trainer = TRAINERS.get(family, TRAINERS["dpo"])
    return Setup(
        family="dpo",  # every TRL trainer: DDP replicas, two sequences a row (a pair, or KTO's answer and KL sample)
        micro=v("per_device_train_batch_size") or 1,
        seq=v("max_length") or 0,
        lora_rank=(v("lora_r") or 16) if use_peft else 0,
        lora_targets=_targets(v("lora_target_modules")) if use_peft else None,
        quantized=use_peft and bool(v("load_in_4bit")),
        param_offload=False,
        optimizer_offload=False,
        grad_ckpt=bool(v("gradient_checkpointing")),
        # DPO and KTO keep a frozen copy (with LoRA: the base with the adapters off); ORPO, SimPO and reward models none
        reference=trainer.reference and not use_peft,
        ref_offload=False,
        critic=False,
        rollout_engine=None,
        rollout_util=0.0,
        rollout_tp=1,
        sharded=False,
        # trainctl's TRL entry point loads the model in bf16/fp16 when training in it, else fp32
        weight_bytes=2 if v("bf16") or v("fp16") else 4,
        **common,
    )


def _targets(value: Any) -> tuple[str, ...] | None:
    """The adapted layers' names from a backend's target_modules (None: all-linear, or a pattern)."""
    if isinstance(value, str) or not value:
        return None
    names = tuple(str(t) for t in value)
    return None if names == ("all-linear",) else names


def candidate_fixes(s: Setup) -> list[tuple[list[str], dict]]:
    """Changes that lower the peak, each as the words to add to the command line and the Setup fields they change;
    cheapest first (offloading costs speed; LoRA and more machines change the experiment)."""
    out: list[tuple[list[str], dict]] = []
    if s.family != "dpo" and not s.optimizer_offload:
        out.append((["hardware.optimizer_offload=true"], {"optimizer_offload": True}))
    if s.family != "dpo" and not s.param_offload:
        out.append((["hardware.param_offload=true"], {"param_offload": True}))
    if s.micro > 1 and not s.token_budget:
        out.append((["hardware.micro_batch_size_per_gpu=1"], {"micro": 1}))
    if s.token_budget and s.token_budget > 2048:
        key = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu" if s.family == "ppo" else "data.max_token_len_per_gpu"
        out.append(([f"{key}={s.token_budget // 2}"], {"token_budget": s.token_budget // 2}))
    if not s.grad_ckpt:
        key = "gradient_checkpointing=true" if s.family == "dpo" else "model.enable_gradient_checkpointing=true"
        if s.family == "ppo":
            key = "actor_rollout_ref." + key
        out.append(([key], {"grad_ckpt": True}))
    if s.family == "ppo" and s.rollout_engine in ("vllm", "sglang"):
        if s.rollout_tp * 2 <= s.gpus_per_node:
            out.append(([f"hardware.rollout_tp={s.rollout_tp * 2}"], {"rollout_tp": s.rollout_tp * 2}))
        if s.rollout_util > 0.3:
            lower = round(s.rollout_util - 0.2, 2)
            out.append(([f"hardware.gpu_memory_utilization={lower}"], {"rollout_util": lower}))
    if not s.lora_rank:
        # with LoRA the reference is the base model with the adapters switched off: no second copy
        out.append((["lora=r32"], {"lora_rank": 32, "reference": False}))
    if s.family == "dpo" and s.device == "cuda" and not s.quantized:
        # QLoRA: only TRL's DPO loads a 4-bit base in verl 0.9.1's time
        out.append((["lora=qlora-r16"], {"lora_rank": 16, "lora_targets": None, "quantized": True, "reference": False}))
    if s.device == "cuda":
        for nodes in (2, 4, 8):
            world = s.gpus_per_node * nodes
            if world > s.world:
                out.append(([f"hardware.nnodes={nodes}"], {"world": world}))
                break
    return out


def fixes(info: ModelInfo, s: Setup) -> list[Fix]:
    """Single changes that make it fit; if none does alone, the first combination (in the order above) that does."""
    found = []
    candidates = candidate_fixes(s)
    for words, change in candidates:
        e = estimate(info, dataclasses.replace(s, **change))
        if e.fits:
            found.append(Fix(words, e))
    if found:
        return sorted(found, key=lambda f: f.estimate.peak)
    # none alone: add them in order until it fits, then drop each one it still fits without
    chosen: list[tuple[list[str], dict]] = []
    for candidate in candidates:
        chosen.append(candidate)
        if _apply(info, s, chosen).fits:
            break
    else:
        return []
    for candidate in reversed(list(chosen)):
        rest = [c for c in chosen if c is not candidate]
        if rest and _apply(info, s, rest).fits:
            chosen = rest
    return [Fix([w for words, _ in chosen for w in words], _apply(info, s, chosen))]


def _apply(info: ModelInfo, s: Setup, changes: list[tuple[list[str], dict]]) -> Estimate:
    for _, change in changes:
        s = dataclasses.replace(s, **change)
    return estimate(info, s)
