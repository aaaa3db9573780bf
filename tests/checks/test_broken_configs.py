"""A table of broken configs: each gets its exact message and fix, and nothing is started.

Every case runs the real CLI (`trainctl train ... --dry-run`) with the tiny model present, so only the
problem under test is reported (the data files are absent: warnings on --dry-run).
"""

from __future__ import annotations

import re

import pytest

R = "actor_rollout_ref"
M = f"{R}.model"

# (id, arguments, exit code, lines that must appear in stderr exactly)
CASES = [
    # -- the command line itself (exit 2) --
    ("option typo", ["--dryrun"], 2, ["Error: no such option: --dryrun", "Hint: did you mean --dry-run?"]),
    ("bare option name", ["grpo"], 2, ["Error: 'grpo' is not an override.", "Hint: did you mean algorithm=grpo?"]),
    (
        "bare group name",
        ["algorithm"],
        2,
        [
            "Error: 'algorithm' is not an override.",
            "Hint: choose an option: algorithm=OPTION (one of: dapo, distill, dpo, drgrpo, grpo, gspo, kto, orpo, ppo, "
            "reinforce_pp, remax, rloo, rm, sft, simpo)",
        ],
    ),
    (
        "sweep without -m",
        ["algorithm=grpo,dapo"],
        2,
        [
            "Error: 'algorithm=grpo,dapo' gives 2 values.",
            "Hint: add -m to sweep (2 runs), or write a list in brackets: algorithm=[...]",
        ],
    ),
    (
        "malformed override",
        ["a.b=[1,2"],
        2,
        ["Error: malformed override 'a.b=[1,2': no viable alternative at input '[1,2'."],
    ),
    ("missing config dir", ["--config-dir", "/nonexistent"], 2, ["Error: --config-dir /nonexistent: no such folder."]),
    # -- group options --
    ("unknown algorithm", ["algorithm=grpoo"], 1, ["Error: unknown algorithm 'grpoo'.", "  Did you mean 'grpo'?"]),
    (
        "unknown model",
        ["model=qwen2.5-7bb"],
        1,
        ["Error: unknown model 'qwen2.5-7bb'.", "  Did you mean 'qwen2.5-7b'?"],
    ),
    ("unknown data", ["data=gsm8"], 1, ["Error: unknown data 'gsm8'.", "  Did you mean 'gsm8k'?"]),
    (
        "unknown hardware",
        ["hardware=16gpu"],
        1,
        [
            "Error: unknown hardware '16gpu'.",
            "Hint: available hardware options: 1gpu, 2x8gpu, 4x8gpu, 8gpu, cpu "
            "(your own go in ./conf/hardware/NAME.yaml)",
        ],
    ),
    ("unknown logger", ["logger=wandbb"], 1, ["Error: unknown logger 'wandbb'.", "  Did you mean 'wandb'?"]),
    (
        "unknown recipe",
        ["recipe=quickstrat"],
        1,
        ["Error: unknown recipe 'quickstrat'.", "  Did you mean 'quickstart'?"],
    ),
    # -- keys --
    (
        "verl key typo",
        ["algorithm=grpo", "algorithm.kl_ctrl.kl_coeff=0.01"],
        1,
        [
            "Error: unknown config key 'algorithm.kl_ctrl.kl_coeff'.",
            "  Did you mean 'algorithm.kl_ctrl.kl_coef'?",
            "Hint: to add a new key on purpose, use +algorithm.kl_ctrl.kl_coeff=0.01",
        ],
    ),
    (
        "deep verl key typo",
        ["algorithm=grpo", f"{R}.actor.optim.lrr=1e-6"],
        1,
        [f"Error: unknown config key '{R}.actor.optim.lrr'.", f"  Did you mean '{R}.actor.optim.lr'?"],
    ),
    (
        "key missing its prefix",
        ["algorithm=grpo", "actor.optim.lr=1e-6"],
        1,
        ["Error: unknown config key 'actor.optim.lr'.", f"  Did you mean '{R}.actor.optim.lr'?"],
    ),
    (
        "trainctl key typo",
        ["hardware.gpus_per_nod=4"],
        1,
        [
            "Error: unknown config key 'hardware.gpus_per_nod'.",
            "  Did you mean 'hardware.gpus_per_node'?",
            "Hint: `trainctl config show` lists the hardware.* keys",
        ],
    ),
    ("run key typo", ["run.epoch=2"], 1, ["Error: unknown config key 'run.epoch'.", "  Did you mean 'run.epochs'?"]),
    (
        "explicit verl prefix typo",
        ["algorithm=grpo", "verl.trainer.totl_epochs=1"],
        1,
        ["Error: unknown config key 'trainer.totl_epochs'.", "  Did you mean 'trainer.total_epochs'?"],
    ),
    (
        "trl key on a verl algorithm",
        ["algorithm=grpo", "trl.beta=0.1"],
        1,
        [
            "Error: 'trl.beta=0.1' sets a trl key, but algorithm=grpo runs on verl.",
            "Hint: drop it, or choose an algorithm that runs on trl",
        ],
    ),
    (
        "trl key typo",
        ["algorithm=dpo", "data=hh-rlhf", "betaa=0.1"],
        1,
        [
            "Error: unknown config key 'betaa'.",
            "  Did you mean 'beta'?",
            "Hint: to add a new key on purpose, use +betaa=0.1",
        ],
    ),
    (
        "section set as a value",
        ["run=3"],
        1,
        [
            "Error: 'run=3': run is a section, not a value.",
            "Hint: set one of its keys, e.g. run.KEY=VALUE (see `trainctl config show`)",
        ],
    ),
    (
        "trainctl key deleted",
        ["~run.epochs"],
        1,
        ["Error: '~run.epochs': trainctl keys cannot be deleted.", "Hint: set it instead: run.epochs=null"],
    ),
    (
        "bad interpolation",
        ["run.name=${model.nam}"],
        1,
        ["Error: run.name = '${model.nam}' cannot be resolved: Interpolation key 'model.nam' not found"],
    ),
    (
        "unknown verl group option",
        ["algorithm=grpo", "model_engine=megatronn"],
        1,
        ["Error: verl has no model_engine option 'megatronn'.", "Hint: available: dp, megatron, torchtitan, veomni"],
    ),
    # -- batch arithmetic --
    (
        "sequences do not divide across ranks",
        ["algorithm=grpo", "hardware=2x8gpu", "data.train_batch_size=100", f"{R}.actor.ppo_mini_batch_size=20"],
        1,
        [
            "Error: Sequences per step do not divide across data-parallel ranks:",
            "  data.train_batch_size x rollout.n = 100 x 5 = 500; 2 nodes x 8 GPUs = 16 ranks; 500 % 16 = 4",
            "Hint: smallest fix: data.train_batch_size=96 or 112",
        ],
    ),
    (
        "mini batch larger than the step",
        ["algorithm=grpo", f"{R}.actor.ppo_mini_batch_size=2048"],
        1,
        [
            "Error: A policy update needs more prompts than a step has:",
            f"  {R}.actor.ppo_mini_batch_size = 2048 > data.train_batch_size = 1024",
            f"Hint: smallest fix: {R}.actor.ppo_mini_batch_size=1024",
        ],
    ),
    (
        "mini batch does not divide the step",
        ["algorithm=grpo", "data.train_batch_size=96", f"{R}.actor.ppo_mini_batch_size=64"],
        1,
        [
            "Error: Each step's prompts do not split into whole policy updates:",
            f"  data.train_batch_size % {R}.actor.ppo_mini_batch_size = 96 % 64 = 32",
            f"Hint: smallest fix: {R}.actor.ppo_mini_batch_size=48 or 96",
        ],
    ),
    (
        "update does not divide across ranks",
        [
            "algorithm=grpo",
            "hardware=8gpu",
            f"{R}.rollout.n=3",
            "data.train_batch_size=96",
            f"{R}.actor.ppo_mini_batch_size=12",
        ],
        1,
        [
            "Error: A policy update's sequences do not divide across data-parallel ranks:",
            f"  {R}.actor.ppo_mini_batch_size x rollout.n = 12 x 3 = 36; 8 ranks; 36 % 8 = 4",
            f"Hint: smallest fix: {R}.actor.ppo_mini_batch_size=8 or 16",
        ],
    ),
    (
        "micro batch does not divide the per-GPU update",
        ["algorithm=grpo", "hardware=8gpu", "hardware.micro_batch_size_per_gpu=3"],
        1,
        [
            "Error: A policy update's per-GPU sequences do not split into micro-batches:",
            f"  {R}.actor.ppo_mini_batch_size x rollout.n / ranks = 256 x 5 / 8 = 160; "
            f"160 % {R}.actor.ppo_micro_batch_size_per_gpu (3) = 1",
            "Hint: smallest fix: hardware.micro_batch_size_per_gpu=2 or 4",
        ],
    ),
    (
        "critic micro batch",
        ["algorithm=ppo", "hardware=8gpu", "critic.ppo_micro_batch_size_per_gpu=3"],
        1,
        [
            "Error: A critic update's per-GPU sequences do not split into micro-batches:",
            "Hint: smallest fix: critic.ppo_micro_batch_size_per_gpu=2 or 4",
        ],
    ),
    (
        "sequence parallel does not divide GPUs",
        ["algorithm=grpo", "hardware=8gpu", f"{R}.actor.ulysses_sequence_parallel_size=3"],
        1,
        [
            "Error: Sequence parallelism does not divide the GPUs:",
            "  1 node x 8 GPUs = 8; 8 % ulysses_sequence_parallel_size (3) = 2",
        ],
    ),
    (
        "group estimator with one sample",
        ["algorithm=grpo", f"{R}.rollout.n=1"],
        1,
        [
            f"Error: algorithm.adv_estimator = grpo compares the samples of each prompt, but {R}.rollout.n = 1: "
            "every advantage would be 0.",
            f"Hint: {R}.rollout.n=5",
        ],
    ),
    (
        "sft batch does not divide ranks",
        ["algorithm=sft", "hardware=8gpu", "data.train_batch_size=30"],
        1,
        [
            "Error: The batch does not divide across data-parallel ranks (verl would silently drop the remainder):",
            "  data.train_batch_size = 30; 1 node x 8 = 8 ranks; 30 % 8 = 6",
            "Hint: smallest fix: data.train_batch_size=24 or 32",
        ],
    ),
    (
        "sft micro batch",
        [
            "algorithm=sft",
            "hardware=8gpu",
            "data.use_dynamic_bsz=false",
            "data.train_batch_size=48",
            "hardware.micro_batch_size_per_gpu=4",
        ],
        1,
        [
            "Error: The per-rank batch does not split into micro-batches:",
            "  data.train_batch_size / ranks = 48 / 8 = 6; 6 % 4 = 2",
            "Hint: smallest fix: hardware.micro_batch_size_per_gpu=3 or 6",
        ],
    ),
    # -- names verl looks up only inside workers --
    (
        "unknown advantage estimator",
        ["algorithm=grpo", "algorithm.adv_estimator=grpoo"],
        1,
        [
            "Error: algorithm.adv_estimator = 'grpoo' is not an advantage estimator verl 0.9.1 knows.",
            "  Did you mean 'grpo'?",
            "Hint: algorithm.adv_estimator=grpo",
        ],
    ),
    (
        "unknown policy loss",
        ["algorithm=grpo", f"{R}.actor.policy_loss.loss_mode=gpso"],
        1,
        [
            f"Error: {R}.actor.policy_loss.loss_mode = 'gpso' is not a policy loss verl 0.9.1 knows.",
            "  Did you mean 'gspo'?",
        ],
    ),
    (
        "unknown reward manager",
        ["algorithm=grpo", "reward.reward_manager.name=dapoo"],
        1,
        [
            "Error: reward.reward_manager.name = 'dapoo' is not a reward manager verl 0.9.1 knows.",
            "  Did you mean 'dapo'?",
        ],
    ),
    (
        "unknown rollout engine",
        ["algorithm=grpo", "hardware=8gpu", "hardware.rollout_engine=vlm"],
        1,
        [f"Error: {R}.rollout.name = 'vlm' is not a rollout engine verl 0.9.1 knows.", "  Did you mean 'vllm'?"],
    ),
    (
        "unknown KL controller",
        ["algorithm=ppo", "algorithm.kl_ctrl.type=adaptiv"],
        1,
        [
            "Error: algorithm.kl_ctrl.type = 'adaptiv' is not a KL controller verl 0.9.1 knows.",
            "  Did you mean 'adaptive'?",
        ],
    ),
    (
        "unknown KL estimator",
        ["algorithm=rloo", "algorithm.kl_penalty=low_var"],
        1,
        [
            "Error: algorithm.kl_penalty = 'low_var' is not a KL estimator verl knows.",
            "Hint: algorithm.kl_penalty=low_var_kl",
        ],
    ),
    (
        "unknown loss aggregation",
        ["algorithm=grpo", f"{R}.actor.loss_agg_mode=token_mean"],
        1,
        [
            f"Error: {R}.actor.loss_agg_mode = 'token_mean' is not a loss aggregation mode verl 0.9.1 knows.",
            "  Did you mean 'token-mean'?",
        ],
    ),
    (
        "unknown logger name",
        ["algorithm=grpo", "trainer.logger=[console,wandbb]"],
        1,
        ["Error: trainer.logger has 'wandbb', which verl's tracker does not know.", "  Did you mean 'wandb'?"],
    ),
    # -- parallelism and lengths --
    (
        "rollout tensor parallel does not fit a node",
        ["algorithm=grpo", "hardware=8gpu", "hardware.rollout_tp=3"],
        1,
        [
            "Error: The rollout's tensor-parallel group does not fit a node:",
            f"  {R}.rollout.tensor_model_parallel_size = 3; 8 GPUs per node; 8 % 3 = 2",
            "Hint: smallest fix: hardware.rollout_tp=2 or 4",
        ],
    ),
    (
        "lengths beyond the context",
        ["algorithm=grpo", "data.max_response_length=2000"],
        1,
        [
            "Error: Prompt and response budgets exceed the model's context:",
            "  data.max_prompt_length + data.max_response_length = 128 + 2000 = 2128 > 1024 "
            "(model.context_length of model=tiny)",
            "Hint: data.max_response_length=896",
        ],
    ),
    (
        "rollout max_model_len too short",
        ["algorithm=grpo", f"{R}.rollout.max_model_len=100"],
        1,
        [
            f"Error: {R}.rollout.max_model_len = 100 is shorter than a prompt and its response (128 + 64).",
            f"Hint: {R}.rollout.max_model_len=192",
        ],
    ),
    (
        "DAPO overlong buffer",
        ["algorithm=dapo", "reward.reward_kwargs.overlong_buffer_cfg.len=0"],
        1,
        [
            "Error: DAPO's overlong buffer must be positive and fit in the response budget:",
            "  overlong_buffer_cfg.len = 0; max_resp_len = 64",
            "Hint: reward.reward_kwargs.overlong_buffer_cfg.len=16",
        ],
    ),
    # -- keys verl silently ignores, and keys from older verl --
    (
        "legacy reward manager key",
        ["algorithm=grpo", "reward_model.reward_manager=dapo"],
        1,
        [
            "Error: reward_model.reward_manager is accepted but silently ignored by verl 0.9.1's main_ppo.",
            "Hint: use reward.reward_manager.name=dapo",
        ],
    ),
    (
        "legacy custom reward key",
        ["algorithm=grpo", "custom_reward_function.path=/x/reward.py"],
        1,
        [
            "Error: custom_reward_function.path is accepted but silently ignored by verl 0.9.1's main_ppo.",
            "Hint: use reward.custom_reward_function.path=/x/reward.py",
        ],
    ),
    (
        "old SFT model key",
        ["algorithm=sft", "model.partial_pretrain=/x"],
        1,
        [
            "Error: 'model.partial_pretrain' is a key from older verl: the SFT model is model.path since the "
            "engine-based trainer.",
            "Hint: use model.path=/x",
        ],
    ),
    (
        "old SFT data key",
        ["algorithm=sft", "data.prompt_key=question"],
        1,
        [
            "Error: 'data.prompt_key' is a key from older verl: verl 0.9.1 SFT reads only a `messages` column.",
            "Hint: convert the data: trainctl data convert FILE --to sft",
        ],
    ),
    # -- devices --
    (
        "GPU rollout on cpu",
        ["algorithm=grpo", "hardware=cpu", "hardware.rollout_engine=sglang"],
        1,
        [
            f"Error: {R}.rollout.name = sglang needs a GPU, but trainer.device = cpu.",
            "Hint: hardware.rollout_engine=hf (trainctl's transformers rollout runs on CPU), "
            "or vllm (vLLM's CPU build)",
        ],
    ),
    (
        "sleep mode on vLLM's CPU build",
        ["algorithm=grpo", "hardware=cpu", "hardware.rollout_engine=vllm", f"{R}.rollout.enable_sleep_mode=true"],
        1,
        [
            f"Error: {R}.rollout.enable_sleep_mode = true: vLLM's CPU build has no sleep mode ('Sleep mode is not "
            "supported on current platform', once its server has started).",
            f"Hint: {R}.rollout.enable_sleep_mode=false",
        ],
    ),
    (
        "separate LoRA adapters on vLLM's CPU build",
        ["algorithm=grpo", "hardware=cpu", "hardware.rollout_engine=vllm", "lora=r8", f"{M}.lora.merge=false"],
        1,
        [
            f"Error: {M}.lora.merge = false with {M}.lora_rank = 8: verl 0.9.1 loads separate LoRA adapters into "
            "vLLM through WeightsMapper.get_unstacked_mapper, which vLLM's CPU build (0.31.0) does not have: its "
            "engine dies at the first weight sync.",
            f"Hint: {M}.lora.merge=true (the adapters folded into the weights each sync sends: trainctl's default on "
            "cpu)",
        ],
    ),
    (
        "remax on the v1 trainer",
        ["algorithm=remax", "trainer.use_v1=true"],
        1,
        [
            "Error: algorithm.adv_estimator = remax needs verl's legacy trainer, but trainer.use_v1 = true.",
            "Hint: trainer.use_v1=false",
        ],
    ),
    (
        "FSDP1 on cpu",
        ["algorithm=grpo", "hardware=cpu", "hardware.fsdp_strategy=fsdp"],
        1,
        [f"Error: {R}.actor.strategy = fsdp: only FSDP2 runs without a GPU.", "Hint: hardware.fsdp_strategy=fsdp2"],
    ),
    (
        "flash attention on cpu",
        ["algorithm=sft", "hardware=cpu", "hardware.attn_implementation=flash_attention_2"],
        1,
        [
            "Error: model.override_config.attn_implementation = flash_attention_2: it needs a GPU.",
            "Hint: hardware.attn_implementation=sdpa",
        ],
    ),
    (
        "bf16 DPO on cpu",
        ["algorithm=dpo", "data=hh-rlhf", "hardware=cpu", "bf16=true"],
        1,
        ["Error: bf16/fp16 training needs a GPU, but hardware.device = cpu.", "Hint: bf16=false fp16=false"],
    ),
    # -- trainctl values --
    ("epochs out of range", ["run.epochs=0"], 1, ["Error: run.epochs = 0 is out of range: it must be at least 1."]),
    (
        "not a number",
        ["hardware.gpus_per_node=abc"],
        1,
        ["Error: hardware.gpus_per_node must be an integer, not 'abc'."],
    ),
    ("unknown device", ["hardware.device=tpu"], 1, ["Error: hardware.device = 'tpu' is not one of: cpu, cuda."]),
    (
        "data without the algorithm's format",
        ["algorithm=grpo", "data=hh-rlhf"],
        1,
        [
            "Error: data=hh-rlhf has no rl format (it has dpo, sft, kto); algorithm=grpo reads rl data.",
            "Hint: choose data=arith or data=arith-tools or data=gsm8k or data=math",
        ],
    ),
    (
        "run name that cannot name a folder",
        ["run.name=my run"],
        1,
        [
            "Error: run.name = 'my run' cannot name a folder (use letters, digits and . _ - + = @).",
            "Hint: run.name=my-run",
        ],
    ),
    (
        "data source without a scorer",
        ["algorithm=grpo", "data.data_source=my/dataset"],
        1,
        ["Error: data.data_source = 'my/dataset' has no built-in reward function in verl, and no custom one is set."],
    ),
    # -- TRL --
    (
        "unknown DPO loss",
        ["algorithm=dpo", "data=hh-rlhf", "loss_type=[sigmoidd]"],
        1,
        ["Error: loss_type has 'sigmoidd', which TRL's DPOTrainer does not know.", "  Did you mean 'sigmoid'?"],
    ),
    (
        "DPO beta zero",
        ["algorithm=dpo", "data=hh-rlhf", "beta=0"],
        1,
        ["Error: beta = 0: DPO's KL strength must be a positive number.", "Hint: beta=0.1"],
    ),
    (
        "unknown SimPO loss",
        ["algorithm=simpo", "data=hh-rlhf", "loss_type=simpoo"],
        1,
        ["Error: loss_type has 'simpoo', which TRL's CPOTrainer does not know.", "  Did you mean 'simpo'?"],
    ),
    (
        "KTO with one row per micro-batch",
        ["algorithm=kto", "data=arith", "hardware=cpu", "hardware.micro_batch_size_per_gpu=1"],
        1,
        [
            "Error: per_device_train_batch_size = 1: KTO estimates its KL term by pairing each row's prompt with "
            "another row's answer in the same micro-batch, so it needs at least 2 rows there.",
            "Hint: hardware.micro_batch_size_per_gpu=2 (or loss_type=apo_zero_unpaired, which needs no KL estimate)",
        ],
    ),
]


def test_the_table_is_large():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


def _norm(line: str) -> str:
    """A message line without its layout: one problem prints `Error: msg`, several print `  1. msg`."""
    return re.sub(r"^\s*(Error: |\d+\. )?", "", line).strip()


@pytest.mark.parametrize(("args", "code", "lines"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_broken_config(args, code, lines, cli, tiny_model, no_processes):
    result = cli("train", *args, "--dry-run")
    assert result.exit_code == code, result.output
    got = {_norm(line) for line in result.stderr.splitlines()}
    for line in lines:
        assert _norm(line) in got, f"missing line:\n{line}\n--- stderr ---\n{result.stderr}"
    assert "Dry run: nothing was started." not in result.stdout
    assert not no_processes


def test_problems_in_a_users_recipe_name_the_file(cli, tiny_model, tmp_path):
    recipes = tmp_path / "work" / "conf" / "recipe"
    recipes.mkdir(parents=True)
    (recipes / "typo.yaml").write_text(
        "# trainctl train recipe=typo\ndefaults:\n  - override /algorithm: grpo\n"
        "verl:\n  trainer:\n    total_epoch: 3\n"
    )
    result = cli("train", "recipe=typo", "--dry-run")
    assert result.exit_code == 1
    where = str(recipes / "typo.yaml")
    assert f"Error: unknown config key 'trainer.total_epoch' (set in {where})." in result.stderr
    assert f"Hint: fix or remove it in {where}" in result.stderr


def test_a_malformed_yaml_file_is_named(cli, tmp_path):
    models = tmp_path / "work" / "conf" / "model"
    models.mkdir(parents=True)
    (models / "broken.yaml").write_text("name: broken\npath: [unclosed\n")
    result = cli("train", "model=broken", "--dry-run")
    assert result.exit_code == 1
    assert f"Error: {models / 'broken.yaml'}, line 3 is not valid YAML" in result.stderr
