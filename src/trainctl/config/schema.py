"""trainctl's own config, declared once: the sections every run has, their types, ranges and meaning.

The group files (conf/<group>/*.yaml), recipes and `key=value` overrides fill these sections; after Hydra composes
them, every value is checked against the declaration here (trainctl.config.types) and the result is a `Config`
that code reads as `cfg.hardware.launcher`. A key no declaration names is an error with a did-you-mean; a value of
the wrong type or out of range is an error naming the key, the value and what it must be.

The backend nodes (`verl:`, `trl:`) are not declared here: their keys are the backend's own, checked against the
backend's dataclasses (trainctl.checks.types).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from trainctl.config.fields import doc, opt
from trainctl.config.offpolicy import Offpolicy
from trainctl.config.types import beside, beside_field, type_hints
from trainctl.facts.verl import REWARD_NODE_KEYS

# verl's two trainers, and one family per TRL trainer (trainctl.facts.trl.TRAINERS; a test keeps them equal)
Family = Literal["sft", "ppo", "dpo", "rm", "kto", "orpo", "cpo"]
DataFormat = Literal["rl", "sft", "dpo", "kto"]


@dataclass
class Paths:
    home: str = doc("trainctl's home: pulled models and prepared data (TRAINCTL_HOME, default ~/.trainctl)")
    models: str = doc("where `trainctl model pull` writes models and model options point")
    data: str = doc("where `trainctl data prep` writes datasets and data options point")


@dataclass
class Watch:
    dead: float = opt("seconds the trainer has to end by itself after a process it depends on died (its rollout engine,"
                      " a Ray worker, Ray itself), before trainctl ends the run", 20.0, gt=0, le=600)  # fmt: skip
    stopped: float = opt("seconds a process the run depends on may stay stopped (SIGSTOP, a frozen cgroup) before the "
                         "run is ended", 30.0, gt=0, le=3600)  # fmt: skip
    stall: float | None = opt("seconds without a new training step, after the first, before the run is ended as hung "
                              "(null: never)", 1800.0, gt=0)  # fmt: skip


@dataclass
class Run:
    name: str = doc("names the run folder and the logger's run")
    project: str = doc("the logger's project (wandb project, mlflow experiment)")
    dir: str = doc("the run folder: resolved config, launch script, lockfile, logs, metrics and checkpoints")
    seed: int = doc("the random seed of data order, initialisation and sampling", ge=0)
    epochs: int = doc("passes over the training data", ge=1)
    max_steps: int | None = opt("stop after this many optimizer steps (null: train all epochs)", ge=1)
    save_every: int | None = opt("also save a checkpoint every N steps (null: only at the end)", ge=1)
    val_every: int | None = opt("validate every N steps (null: never during training)", ge=1)
    watch: Watch = opt("what the run's supervisor watches while it trains, and how long it waits", Watch)


@dataclass
class Algorithm:
    name: str = doc("the algorithm's name (the option's file name)")
    family: Family = doc(
        "which trainer runs it: sft (verl sft_trainer), ppo (verl main_ppo), or TRL's: dpo (DPOTrainer), rm "
        "(RewardTrainer), kto (KTOTrainer), orpo (ORPOTrainer), cpo (CPOTrainer: CPO and SimPO)"
    )
    data_format: DataFormat = doc(
        "the data format it reads: rl (prompts and ground truths), sft, dpo (pairs), kto (unpaired, labelled answers)"
    )


@dataclass
class Arch:
    type: str = doc("the transformers architecture class, e.g. Qwen2ForCausalLM")
    hidden_size: int = doc("width of the residual stream", ge=1)
    layers: int = doc("decoder layers", ge=1)
    heads: int = doc("attention heads", ge=1)
    kv_heads: int = doc("key/value heads (grouped-query attention)", ge=1)
    intermediate_size: int = doc("width of the MLP", ge=1)
    vocab_size: int = doc("tokens in the vocabulary", ge=1)
    tie_embeddings: bool = doc("whether the output layer shares the input embedding's weights")


@dataclass
class Model:
    name: str = doc("the model's name (the option's file name)")
    path: str = doc("the local Hugging Face folder training reads (`trainctl model pull NAME` writes it)")
    context_length: int = doc("the longest sequence (prompt + response) the model handles", ge=1)
    kind: Literal["causal_lm", "reward"] = opt(
        "causal_lm (a model to train or a judge) or reward (a classifier with one label that scores responses: "
        "reward=model reward.model=NAME)",
        "causal_lm",
    )
    hf_repo: str | None = opt("Hugging Face repository (`trainctl model pull NAME --source hf`)")
    ms_repo: str | None = opt("ModelScope repository (`--source modelscope`)")
    params: float | None = opt("parameter count, for memory estimates", ge=1)
    arch: Arch | None = opt("architecture, for memory estimates before the model is pulled")


@dataclass
class Splits:
    train: str | None = opt("the source's split for our train split", "train")
    test: str | None = opt("the source's split for our test split (null: hold out every 50th train row)", "test")


@dataclass
class Generate:
    train_rows: int = doc("rows in the generated train split", ge=1)
    test_rows: int = doc("rows in the generated test split", ge=1)
    seed: int = opt("seed of the generator", 0, ge=0)
    tool: Literal["calculator"] | None = opt(
        "rows that use this tool: rl rows for verl's tool agent loop, sft rows demonstrating a call (null: none)"
    )


@dataclass
class Source:
    hf: str | None = opt("Hugging Face dataset (`trainctl data prep NAME`)")
    hf_config: str | None = opt("the dataset's config name on the hub")
    modelscope: str | None = opt("ModelScope dataset (`--source modelscope`)")
    splits: Splits = opt("which source split becomes our train and test split", Splits)
    parser: str | None = opt("a row parser for sources whose rows need one (hh_rlhf)")
    columns: dict[str, str] | None = opt("source column names: prompt_col, response_col, ... (data convert's flags)")
    generate: Generate | None = opt("a generated dataset (arith): no download")


@dataclass
class Data:
    name: str = doc("the dataset's name (the option's file name)")
    dir: str = doc("where `trainctl data prep NAME` writes it")
    train_files: str = doc("the file training reads (the algorithm's format folder)")
    formats: list[DataFormat] = doc("the formats `data prep` writes: rl, sft, dpo, kto")
    max_prompt_length: int = doc("token budget of a prompt; longer prompts are an error (`trainctl data check`)", ge=1)
    max_response_length: int = doc("token budget of a response; generation stops there", ge=1)
    val_files: str | None = opt("the held-out file validation reads")
    source: Source = opt("where `trainctl data prep` reads it", Source)
    data_source: str | None = opt("written into each RL row: picks verl's scorer for it")
    ability: str | None = opt("written into each RL row (verl's `ability` column)")
    instruction: str | None = opt("appended to each RL prompt, so the model answers in the form the scorer reads")
    answer_format: str | None = opt(
        "a regular expression that a well-formed answer contains (gsm8k's `#### N`): `trainctl eval` reports the share "
        "of responses that do as eval/DATA/format, whether or not the answer is right"
    )


@dataclass
class Curriculum:
    """env.curriculum: each task's difficulty follows its own rolling train reward (reasoning-gym's curricula: a task's
    level sets its generator's difficulty settings, `trainctl env show NAME` lists them)."""

    enabled: bool = opt("move each task's level with its reward (false: every task stays at its settings)", False)
    window: int = opt("steps whose rewards a task's rolling mean takes (after a level change it starts over)", 4, ge=1)
    raise_at: float = opt("a task's level goes up when its rolling mean reward reaches this", 0.7, ge=0, le=1)
    lower_at: float | None = opt(
        "and down when it falls to this (null: levels only rise); below raise_at", None, ge=0, le=1
    )
    start_level: int = opt("every task's level at the first step (0: reasoning-gym's easiest)", 0, ge=0)


@dataclass
class Env:
    """A packaged environment (issue 55): it supplies the prompts and the scoring of an RL run, in place of the data
    and reward options (env=NAME chooses data=env and reward=env for the run; trainctl.envs)."""

    name: str = doc("the environment option's name (env=NAME)")
    kind: str = doc(
        "none (the data and reward options score the run), reasoning_gym (its procedural tasks), or verifiers (a "
        "single-turn verifiers taskset, run in verifiers' own interpreter: `trainctl env install verifiers`)"
    )
    tasks: list[Any] = opt(
        "reasoning_gym: the tasks, each a generator name (spell_backward) or {name, weight, settings}: its share of "
        "the rows (weights are relative) and its generator's settings (difficulty: `trainctl env show NAME`)",
        [],
    )
    train_size: int = opt("rows in the generated train split", 512, ge=1)
    test_size: int = opt(
        "rows in the held-out split (validation and `trainctl eval`), drawn from another seed", 64, ge=1
    )
    seed: int = opt("seed of the train split (the held-out split's is seed + 1)", 0, ge=0)
    system_prompt: str | None = opt("a system message before every prompt (null: none)")
    instruction: str | None = opt("appended to every question: the answer form the scorer reads")
    answer_tag: str = opt("the tag the scorer reads the answer from (<answer>...</answer>)", "answer")
    answer_pattern: str | None = opt("instead of the tag: a regular expression whose first group, in the response's "
                                     "last match, is the answer (e.g. '#### (\\S+)'; null: the tag)")  # fmt: skip
    format_score: float = opt("reasoning_gym: the least reward of an answer the scorer could read, right or not "
                              "(verl's gsm8k scorer's format_score), so that a model learns the asked form first",
                              0.0, ge=0.0, le=1.0)  # fmt: skip
    reward_fn: str | None = opt("the scoring function reward=env calls (the kind's own)")
    max_prompt_length: int = opt("token budget of a generated prompt (data=env's)", 256, ge=1)
    max_response_length: int = opt("token budget of a response (data=env's)", 64, ge=1)
    curriculum: Curriculum = opt("raise (or lower) each task's difficulty with its reward", Curriculum)
    id: str | None = opt("verifiers: the taskset's module (importable in verifiers' interpreter, exporting one "
                         "Taskset via __all__)")  # fmt: skip
    args: dict[str, Any] = opt("verifiers: the taskset's config fields (its TasksetConfig), e.g. {size: 100}", {})
    path: list[str] = opt("verifiers: folders on the PYTHONPATH of verifiers' interpreter, where env.id's module is "
                          "(relative to the working directory)", [])  # fmt: skip


@dataclass
class Reward:
    """How RL responses are scored (PPO family): one kind per run. Beside `kind` sit that kind's own settings
    (reward.model, reward.url, ...): each kind declares them (trainctl.backends.rewards), and they are checked against
    that declaration once the kind is known; `trainctl config keys reward` lists every kind's."""

    name: str = doc("the reward option's name")
    kind: str = doc(
        "rule (verl's scorer for each row's data_source), fn (your function), model (a reward model scores each "
        "response), judge (an LLM judge scores or ranks them), or a kind an installed package registers (entry "
        "point group trainctl.reward_kinds)"
    )
    settings: dict[str, Any] = beside(
        "the kind's own settings, written beside kind (reward.model=NAME): declared by the kind", REWARD_NODE_KEYS
    )


@dataclass
class Distillation:
    """On-policy distillation (algorithm=distill, verl main_ppo): the student samples, and a teacher scores every
    token it sampled. verl's own keys for it (the loss: verl.distillation.distillation_loss.*) stay verl's."""

    teacher: str | None = opt(
        "the teacher: a model option, a model folder, or a run (runs/NAME: its latest checkpoint, merged once); it "
        "must share the student's tokenizer (null: no teacher, as every algorithm but distill has)"
    )
    gpus: int = opt("GPUs (on cpu: processes) serving the teacher, beside those that train", 1, ge=1)


# --- tools (issue 11): multi-turn tool calling through verl's tool agent loop ---------------------------------


@dataclass
class ToolServer:
    """One MCP server, as in an mcpServers file; its key under tools.servers is its name.

    A server that tools.servers_file also names takes the file's entry as its base: the keys set here win (null:
    the file's), env names are added to the file's env, and `tools` narrows its tools."""

    transport: Literal["stdio", "sse", "http"] | None = opt(
        "stdio (the run starts `command` and talks over its stdin/stdout), sse or http (streamable HTTP): reach "
        "`url`; null: stdio with a command, sse for a url ending in /sse, http for another url"
    )
    command: str | None = opt("stdio: the program that starts the server, e.g. python or npx")
    args: list[str] | None = opt("stdio: its arguments (null: none, or the servers file's)")
    cwd: str | None = opt("stdio: the folder it starts in (null: the run's)")
    url: str | None = opt("sse/http: where it answers, e.g. http://127.0.0.1:8001/sse or http://127.0.0.1:8001/mcp")
    env: list[str] = opt(
        "stdio: NAMES of environment variables the server gets (their values are read from the environment when "
        "the server starts, never saved or logged; headers with secrets for sse/http: use tools.servers_file)",
        [],
    )
    tools: list[str] | None = opt("the server's tools the model may call (null: every tool it lists)")


@dataclass
class Tools:
    """Tools the model may call during RL rollouts (PPO family): MCP servers and Python functions."""

    name: str = doc("the tools option's name")
    servers: dict[str, ToolServer] = opt("MCP servers by name (tools.servers.NAME.command=...)", {})
    servers_file: str | None = opt(
        "an mcpServers JSON file (Claude Desktop / MCP Inspector format): its servers are added to tools.servers "
        "(tools.servers.NAME.KEY=... changes the file's server NAME)"
    )
    functions: list[str] = opt(
        "Python function tools: path/to/file.py:function or package.module:function (schema from the signature "
        "and the Google-style docstring)",
        [],
    )
    format: str = opt(
        "how the model writes a tool call, verl's parser name: hermes (<tool_call>{json}</tool_call>)", "hermes"
    )
    max_assistant_turns: int = opt("model turns per trajectory (the first answer included)", 4, ge=1)
    max_tool_turns: int | None = opt("turns of tool results per trajectory (null: max_assistant_turns - 1)", ge=1)
    max_parallel_calls: int = opt("tool calls run from one model turn; more are ignored", 1, ge=1)
    max_tool_response_length: int = opt("characters of a tool result the model sees (cut in the middle)", 256, ge=1)
    call_timeout_s: float = opt("seconds a tool call may take; then the model reads an error and goes on", 30.0, gt=0)
    connect_timeout_s: float = opt("seconds an MCP server may take to start or answer its first request", 60.0, gt=0)
    session: Literal["shared", "trajectory"] = opt(
        "shared (one MCP session per server and worker process) or trajectory (a fresh one per trajectory, for "
        "servers that keep per-client state)",
        "shared",
    )


@dataclass
class Slurm:
    """hardware.launcher=slurm: the options of the batch job trainctl submits (trainctl.launchers.slurm). Each
    becomes an `#SBATCH` line of the script written to the run folder (runs/NAME/slurm.sbatch)."""

    partition: str | None = opt("the partition (sbatch --partition; null: the cluster's default)")
    account: str | None = opt("the account the job is charged to (sbatch --account; null: your default)")
    qos: str | None = opt("the quality of service (sbatch --qos; null: the default)")
    time: int | str | None = opt(
        "the job's time limit, as Slurm writes it: MINUTES, HH:MM:SS or DAYS-HH:MM:SS (sbatch --time; null: the "
        "partition's default)"
    )
    cpus_per_node: int | None = opt(
        "CPUs the job takes on each node (sbatch --cpus-per-task, one task a node; null: Slurm's default)", ge=1
    )
    mem: str | None = opt("memory per node, e.g. 64G (sbatch --mem; null: Slurm's default)")
    setup: list[str] = opt(
        "shell lines the job runs before anything starts, e.g. module load cuda or source .venv/bin/activate", []
    )
    extra_args: list[str] = opt(
        "more sbatch options, each as written on sbatch's command line: --exclusive, --constraint=a100", []
    )
    # each node's other Ray ports follow it (a few hundred above), so that nodes sharing a host do not collide
    ray_port: int = opt("the Ray head's port on the first node (PPO family)", 6379, ge=1024, le=60000)
    rdzv_port: int = opt("torchrun's rendezvous port on the first node (SFT and DPO)", 29400, ge=1024, le=65535)


@dataclass
class Hardware:
    name: str = doc("the hardware option's name")
    nnodes: int = doc("machines", ge=1)
    gpus_per_node: int = doc("accelerators per machine; on cpu, training processes on this machine", ge=1)
    device: Literal["cpu", "cuda"] = doc("cpu or cuda")
    # a registered launcher's name (trainctl.launchers): checked against the registry, which plugins extend
    launcher: str = doc(
        "how the run starts: local (this machine), ray_cluster (join a running Ray cluster), ray_job (its Jobs API), "
        "slurm (a batch job: hardware.slurm)"
    )
    rollout_engine: str = doc("the engine that samples RL responses: vllm or sglang on GPUs, hf on cpu")
    gpu_memory_gb: float | None = opt("memory per accelerator in GiB, for fit checks (null: not a GPU)", gt=0)
    ray_address: str | None = opt("the Ray cluster: an address (ray_cluster) or a dashboard URL (ray_job)")
    rollout_tp: int = opt("rollout tensor parallel size: GPUs that hold one copy of the model for sampling", 1, ge=1)
    gpu_memory_utilization: float = opt("share of each GPU's memory the rollout engine may take", 0.5, gt=0, le=1)
    micro_batch_size_per_gpu: int = opt("sequences per forward/backward pass on each device (PPO: at most)", 4, ge=1)
    param_offload: bool = opt("keep parameters in host memory between uses (slower, frees GPU memory)", False)
    optimizer_offload: bool = opt("keep optimizer state in host memory between uses", False)
    ref_param_offload: bool = opt("offload the reference model (it only runs forward passes)", True)
    fsdp_strategy: Literal["fsdp", "fsdp2"] = opt("FSDP version: fsdp (FSDP1, verl's default) or fsdp2", "fsdp")
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2", "flash_attention_3"] | None = opt(
        "attention kernel (null: the model's default, flash_attention_2)"
    )
    torch_compile: bool = opt("compile the model with torch.compile", True)
    remove_padding: bool | None = opt(
        "pack each micro-batch into one sequence with no padding (verl's use_remove_padding; pays off with flash "
        "attention's variable-length kernels; null keeps verl's default, yes)"
    )
    param_dtype: Literal["bf16", "fp16", "fp32"] | None = opt(
        "precision FSDP computes in (its mixed precision's param_dtype); null keeps verl's default, bf16"
    )
    worker_processes: int = opt("worker processes per pool (SFT loaders; PPO reward, agent-loop, storage)", 8, ge=0)
    dataloader_workers: int = opt("PPO data-loading processes beside the trainer (0: in the trainer)", 8, ge=0)
    ray_num_cpus: int | None = opt("CPUs Ray may schedule (null: all of them)", ge=1)
    cpu_threads: int | None = opt(
        "with device cpu, torch's threads in each training and rollout process (null: Ray's default, one)", ge=1
    )
    rollout_threads: int | None = opt("with device cpu, torch's threads in the hf rollout (null: cpu_threads)", ge=1)
    ray_dashboard: bool | None = opt("start Ray's dashboard with a local cluster (null: Ray's default, yes)")
    fork_workers: bool = opt(
        "with device cpu and a Ray of the run's own (launcher local), start the PPO family's Ray workers as forks of "
        "a process that has imported torch, transformers and verl once (trainctl.runtime.forkserver), not as a fresh "
        "Python each",
        False,
    )
    forward_secrets: list[str] = opt(
        "secret environment variables (HF_TOKEN, WANDB_API_KEY, ...) a Ray job carries in its runtime_env; by "
        "default none: the job reads them from the cluster nodes' environment, since Ray shows a job's runtime_env "
        "to every token holder",
        [],
    )
    slurm: Slurm = opt("the batch job's options, with hardware.launcher=slurm (partition, account, time, ...)", Slurm)


# --- lora (issue 14): the `lora` group ---
@dataclass
class Lora:
    """Low-rank adapters instead of full fine-tuning, for every algorithm (verl's keys for SFT and the PPO family's
    actor, PEFT's through TRL for DPO); `quantize: 4bit` is QLoRA: the frozen base held in 4 bits."""

    name: str = doc("the lora option's name")
    rank: int | None = opt("the adapters' rank r (null: no LoRA, every weight trains)", ge=1)
    alpha: int = opt("scaling: the adapter's update is multiplied by alpha / rank", 16, ge=1)
    dropout: float = opt(
        "dropout on the adapter's input (PEFT's lora_dropout; DPO only: verl has none)", 0.0, ge=0, lt=1
    )
    target_modules: str | list[str] = opt(
        "the layers that get adapters: all-linear (every linear layer of the blocks), or a list of their names such "
        "as q_proj,v_proj (`trainctl model info NAME` lists them)",
        "all-linear",
    )
    quantize: Literal["none", "4bit"] = opt(
        "none, or 4bit: QLoRA, the frozen base in 4-bit NF4 (bitsandbytes, a CUDA GPU; DPO only in verl 0.9.1)", "none"
    )

    @property
    def enabled(self) -> bool:
        return self.rank is not None


@dataclass
class Logger:
    # name, backends and env follow from `destinations` (conf/trainctl.yaml); several logger options fill it at once
    name: str = doc("the chosen logger options, e.g. wandb+tensorboard (console: nothing beyond the run folder)")
    backends: list[str] = doc("the loggers the backend writes to (verl's trainer.logger names): console, file, ...")
    env: list[str] = opt("environment variables the loggers read; passed through, never saved", [])
    destinations: dict[str, dict] = opt("where metrics go besides the run folder: name -> {env: [...]}", {})


@dataclass
class Config:
    """A composed, checked trainctl config. The backend nodes hold the backend's own keys, unchecked here."""

    paths: Paths
    run: Run
    algorithm: Algorithm
    model: Model
    data: Data
    reward: Reward
    env: Env
    hardware: Hardware
    tools: Tools
    logger: Logger
    lora: Lora
    distillation: Distillation = field(default_factory=Distillation)
    offpolicy: Offpolicy = field(default_factory=Offpolicy)
    verl: dict = field(default_factory=dict)
    trl: dict = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.algorithm.family

    def to_dict(self, backend_nodes: bool = False) -> dict:
        """The trainctl sections as plain data (what the mapping tables and saved configs read)."""
        out = dataclasses.asdict(self)
        if not backend_nodes:
            out.pop("verl")
            out.pop("trl")
        return out


# the trainctl sections, in the order a person reads them
SECTIONS: tuple[str, ...] = (
    "algorithm",
    "model",
    "data",
    "reward",
    "env",
    "distillation",
    "offpolicy",
    "tools",
    "hardware",
    "logger",
    "lora",
    "run",
    "paths",
)
BACKEND_NODES: tuple[str, ...] = ("verl", "trl")

# keys that moved: old key -> (new key, the overrides that set it; {value} is the old key's value)
MOVED: dict[str, tuple[str, str]] = {
    "data.reward_fn": ("reward.fn", "reward=fn reward.fn={value}"),
    "algorithm.reward_fn": ("reward.fn", "reward=fn reward.fn={value}"),
}


def moved(key: str, value: Any, origin: str | None = None):
    """The Problem for a key that moved to another section (None if it did not): what replaced it, and the fix."""
    from trainctl.errors import Problem

    if key not in MOVED:
        return None
    new, fix = MOVED[key]
    where = f" (set in {origin})" if origin else ""
    if value is None:
        hint = f"remove {key.rsplit('.', 1)[-1]} from {origin}" if origin else f"drop {key}"
    else:
        hint = fix.format(value=value) + (f", and remove {key.rsplit('.', 1)[-1]} from {origin}" if origin else "")
    return Problem(f"{key} moved to {new}{where}: one setting picks how responses are scored.", key=key, hint=hint)


def section_class(name: str) -> type:
    """The dataclass declaring a top-level section."""
    return type_hints(Config)[name]


def declares(key: str) -> bool:
    """Whether trainctl's schema declares a dotted key (`hardware.rollout_tp`, `data.source.columns.prompt_col`)."""
    head, *rest = key.split(".")
    if head not in SECTIONS:
        return False
    cls: type | None = section_class(head)
    skip_name = False
    for part in rest:
        if cls is None:
            return True  # under a declared mapping field: any key
        if skip_name:  # the name of an entry in a dict[str, Cls] field: any name
            skip_name = False
            continue
        hints = type_hints(cls)
        extra = beside_field(cls)
        if extra is not None and (part not in hints or part == extra.name):
            # one level below the section, a key no backend node of the same name has (reward.url, not
            # reward.num_workers or reward.reward_manager.name)
            return part == rest[-1] and part not in extra.metadata["beside"]
        if part not in hints:
            return False
        skip_name = _entry_type(hints[part]) is not None
        cls = _dataclass_type(hints[part])
        if cls is None and typing.get_origin(hints[part]) is None and hints[part] is not dict:
            # a scalar field: nothing below it
            return part == rest[-1]
    return True


def from_dict(cls: type, data: dict) -> Any:
    """Build a (checked) dataclass tree from plain data: nested dataclass fields become instances."""
    hints = type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        entries = _entry_type(hints[f.name])
        if entries is not None and isinstance(value, dict):  # dict[str, Cls]: each entry a Cls
            kwargs[f.name] = {k: from_dict(entries, v) if isinstance(v, dict) else v for k, v in value.items()}
            continue
        target = _dataclass_type(hints[f.name])
        kwargs[f.name] = from_dict(target, value) if target is not None and isinstance(value, dict) else value
    return cls(**kwargs)


def _entry_type(annotation: Any) -> type | None:
    """Cls for a `dict[str, Cls]` annotation (a mapping of named sections), else None."""
    for a in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(a) is dict:
            args = typing.get_args(a)
            if len(args) == 2 and isinstance(args[1], type) and dataclasses.is_dataclass(args[1]):
                return args[1]
    return None


def _dataclass_type(annotation: Any) -> type | None:
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation
    for a in typing.get_args(annotation):
        found = _dataclass_type(a)
        if found is not None:
            return found
    return None


def keys(section: str | None = None) -> list[tuple[str, str, str]]:
    """(dotted key, type and range in words, meaning) of every declared key, in declaration order."""
    return [
        row for name in (SECTIONS if section is None else (section,)) for row in class_keys(section_class(name), name)
    ]


def class_keys(cls: type, prefix: str) -> list[tuple[str, str, str]]:
    """(dotted key, type and range in words, meaning) of every field of a dataclass, below `prefix`."""
    return [(key, kind, doc) for key, kind, doc, _ in class_key_docs(cls, prefix)]


# a declared key whose value every option of its group sets (the field has no default of its own)
SET_BY_OPTION = object()


def class_key_docs(cls: type, prefix: str) -> list[tuple[str, str, str, Any]]:
    """class_keys with each key's default as a fourth item: the value, or SET_BY_OPTION for a key without one (the
    group's options set it). The generated config reference (trainctl.docsgen) reads it."""
    from trainctl.config.types import class_schema, describe

    out: list[tuple[str, str, str, Any]] = []

    def visit(cls: type, prefix: str) -> None:
        schema = class_schema(cls)
        hints = type_hints(cls)
        extra = beside_field(cls)
        defaults = {f.name: f for f in dataclasses.fields(cls)}
        for name, info in schema.fields.items():
            if extra is not None and name == extra.name:
                continue  # their owner lists them (`trainctl config keys reward` adds every reward kind's)
            key = f"{prefix}.{name}"
            if _entry_type(hints[name]) is not None:
                out.append((key, "a mapping of NAME: entries", info.doc, _default(defaults[name])))
                visit(_entry_type(hints[name]), f"{key}.NAME")
                continue
            nested = _dataclass_type(hints[name])
            if nested is not None:
                visit(nested, key)
                continue
            kind = describe(info.spec)
            if info.range is not None:
                kind += f", {info.range.text()}"
            out.append((key, kind, info.doc, _default(defaults[name])))

    visit(cls, prefix)
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return SET_BY_OPTION
