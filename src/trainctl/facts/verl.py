"""What verl 0.9.1 accepts, for the checks verl itself leaves to run time.

Read off verl's registries. Importing verl to ask costs 5-8 s, so the names are kept here and
tests/facts/test_verl.py compares them with the live registries: a verl upgrade that changes them fails
that test instead of silently passing bad configs.
"""

VERL_VERSION = "0.9.1"

# verl.trainer.ppo.core_algos.ADV_ESTIMATOR_REGISTRY
ADV_ESTIMATORS = (
    "gae",
    "grpo",
    "grpo_vectorized",
    "gdpo",
    "grpo_passk",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "rloo",
    "rloo_vectorized",
    "opo",
    "remax",
    "gpg",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
)

# Estimators whose baseline is the other samples of the same prompt: they learn nothing from rollout.n = 1.
GROUP_ESTIMATORS = (
    "grpo",
    "grpo_vectorized",
    "gdpo",
    "grpo_passk",
    "reinforce_plus_plus_baseline",
    "rloo",
    "rloo_vectorized",
    "opo",
    "gpg",
)

# verl.trainer.ppo.core_algos.POLICY_LOSS_REGISTRY
POLICY_LOSSES = (
    "vanilla",
    "dppo_tv",
    "dppo_kl",
    "gspo",
    "sapo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "dro",
    "cispo",
    "bypass_mode",
)

# verl.experimental.reward_loop.reward_manager.REWARD_MANAGER (what main_ppo's reward loop resolves)
REWARD_MANAGERS = ("naive", "dapo", "gdpo", "rate_limited", "remote")

# verl.workers.rollout.replica.RolloutReplicaRegistry (GPU engines) ...
VERL_ROLLOUTS = ("vllm", "sglang", "trtllm")
# ... and the one trainctl's verl plugin registers (trainctl.runtime.verl_cpu_plugin): transformers on CPU
TRAINCTL_ROLLOUTS = ("hf",)

# verl.trainer.ppo.core_algos.kl_penalty (a trailing "+" selects the straight-through variant)
KL_PENALTIES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
KL_CONTROLLERS = ("fixed", "adaptive")
# verl.workers.config.actor.ActorConfig.__post_init__
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# verl.utils.tracking.Tracking.supported_backend
LOGGERS = (
    "wandb",
    "mlflow",
    "swanlab",
    "vemlp_wandb",
    "tensorboard",
    "console",
    "clearml",
    "trackio",
    "file",
    "rl_insight",
)

# data_source values verl.utils.reward_score.default_compute_score grades (prefix match where it uses startswith)
SCORED_DATA_SOURCES = (
    "openai/gsm8k",
    "lighteval/MATH",
    "DigitalLearningGmbH/MATH-lighteval",
    "HuggingFaceH4/MATH-500",
    "math_dapo",
    "math",
    "math_dapo_reasoning",
    "numina_aops_forum",
    "numina_synthetic_math",
    "numina_amc_aime",
    "numina_synthetic_amc",
    "numina_cn_k12",
    "numina_olympiads",
    "codecontests",
    "apps",
    "codeforces",
    "taco",
    "hiyouga/geometry3k",
    "searchR1_nq",
    "searchR1_triviaqa",
    "searchR1_popqa",
    "searchR1_hotpotqa",
    "searchR1_2wikimultihopqa",
    "searchR1_musique",
    "searchR1_bamboogle",
)
SCORED_DATA_SOURCE_PREFIXES = ("aime",)

# The keys directly under verl's `reward` node (its RewardConfig, custom_reward_function and the reward_kwargs main_ppo
# hands the reward manager). trainctl's own `reward` section shares the name: on the command line `reward.KEY=...` is
# a setting of the reward kind unless KEY is one of these (`reward.num_workers=4` is verl's).
REWARD_NODE_KEYS = (
    "num_workers",
    "custom_reward_function",
    "reward_manager",
    "reward_model",
    "reward_kwargs",
    "sandbox_fusion",
)

# Keys main_ppo accepts and silently ignores (only fully_async_main migrates them): the key to use instead.
LEGACY_REWARD_KEYS = {
    "reward_model.num_workers": "reward.num_workers",
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.reward_loop_source": "reward.reward_manager.source",
    "reward_model.reward_loop_module_path": "reward.reward_manager.module.path",
    "reward_model.reward_loop_class_name": "reward.reward_manager.module.name",
    "reward_model.enable": "reward.reward_model.enable",
    "reward_model.enable_resource_pool": "reward.reward_model.enable_resource_pool",
    "reward_model.n_gpus_per_node": "reward.reward_model.n_gpus_per_node",
    "reward_model.nnodes": "reward.reward_model.nnodes",
    "reward_model.model.path": "reward.reward_model.model_path",
    "reward_model.rollout": "reward.reward_model.rollout",
    "custom_reward_function.path": "reward.custom_reward_function.path",
    "custom_reward_function.name": "reward.custom_reward_function.name",
    "sandbox_fusion.url": "reward.sandbox_fusion.url",
    "sandbox_fusion.max_concurrent": "reward.sandbox_fusion.max_concurrent",
    "sandbox_fusion.memory_limit_mb": "reward.sandbox_fusion.memory_limit_mb",
}

# Keys from older verl that 0.9.1 no longer reads, per entry point: (replacement or None, explanation).
OLD_SFT_KEYS = {
    "model.partial_pretrain": ("model.path", "the SFT model is model.path since the engine-based trainer"),
    "data.prompt_key": (None, "verl 0.9.1 SFT reads only a `messages` column"),
    "data.response_key": (None, "verl 0.9.1 SFT reads only a `messages` column"),
    "data.prompt_dict_keys": (None, "verl 0.9.1 SFT reads only a `messages` column"),
    "data.response_dict_keys": (None, "verl 0.9.1 SFT reads only a `messages` column"),
    "data.multiturn": ("data.messages_key", "multi-turn is the only SFT format now"),
    "data.micro_batch_size": ("data.micro_batch_size_per_gpu", "micro batches are per GPU"),
    "model.fsdp_config": ("engine", "FSDP settings moved to the engine group"),
    "model.strategy": ("engine.strategy", "FSDP settings moved to the engine group"),
    "optim.warmup_steps_ratio": ("optim.lr_warmup_steps_ratio", "renamed"),
    "ulysses_sequence_parallel_size": ("engine.ulysses_sequence_parallel_size", "moved to the engine group"),
    "use_remove_padding": ("model.use_remove_padding", "moved to the model group"),
}
OLD_PPO_KEYS = {
    "reward_model.reward_kwargs": ("reward.reward_kwargs", "main_ppo reads the reward manager's kwargs there"),
    "critic.model.fsdp_config": ("critic.fsdp", "critic FSDP settings are critic.fsdp.*"),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "global micro batch sizes are deprecated",
    ),
    "actor_rollout_ref.actor.ppo_micro_batch_size": (
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "global micro batch sizes are deprecated",
    ),
    "algorithm.filter_groups.max_num_gen_batches": (
        "algorithm.filter_groups.max_inflight_gen_batches",
        "main_ppo's sync trainer ignores max_num_gen_batches",
    ),
}

# Nodes whose keys verl reads with .get(): adding keys under them is legitimate, not a typo.
PPO_OPEN_PATHS = (
    "reward.reward_kwargs",
    "reward.custom_reward_function.reward_kwargs",
    "ray_kwargs.ray_init",
    "actor_rollout_ref.model.override_config",
    "critic.model.override_config",
    "actor_rollout_ref.rollout.engine_kwargs",
    "reward.reward_model.rollout.engine_kwargs",
    "data.apply_chat_template_kwargs",
    "data.mm_processor_kwargs",
    "trainer.v1.sampler.sampler_kwargs",
)
SFT_OPEN_PATHS = (
    "model.override_config",
    "data.apply_chat_template_kwargs",
)

# Ranges verl 0.9.1 needs but does not assert (values outside them fail, or silently misbehave, deep inside a run),
# by dataclass and field; a base class's entry holds for its subclasses. The checks verl's __post_init__ does make
# are read from its source (trainctl.config.types.post_init_ranges); this table is only for what it leaves out.
# Bounds: ge / gt / le / lt.
RUNTIME_RANGES: dict[str, dict[str, dict[str, float]]] = {
    # sampling: a negative temperature or a top_p outside (0, 1] breaks vLLM/SGLang sampling at the first rollout
    "RolloutConfig": {
        "temperature": {"ge": 0},
        "top_p": {"gt": 0, "le": 1},
        "gpu_memory_utilization": {"gt": 0, "le": 1},
        "n": {"ge": 1},
        "tensor_model_parallel_size": {"ge": 1},
        "prompt_length": {"ge": 1},
        "response_length": {"ge": 1},
    },
    "SamplingConfig": {"temperature": {"ge": 0}, "top_p": {"gt": 0, "le": 1}, "n": {"ge": 1}},
    "OptimizerConfig": {
        "lr": {"ge": 0},
        "weight_decay": {"ge": 0},
        "lr_warmup_steps_ratio": {"ge": 0, "le": 1},
        "clip_grad": {"gt": 0},
    },
    "ActorConfig": {
        "ppo_epochs": {"ge": 1},
        "ppo_mini_batch_size": {"ge": 1},
        "ppo_micro_batch_size_per_gpu": {"ge": 1},
        "clip_ratio": {"ge": 0},
        "clip_ratio_low": {"ge": 0},
        "clip_ratio_high": {"ge": 0},
        "kl_loss_coef": {"ge": 0},
    },
    "CriticConfig": {"ppo_epochs": {"ge": 1}, "ppo_mini_batch_size": {"ge": 1}, "cliprange_value": {"ge": 0}},
    "AlgoConfig": {"gamma": {"ge": 0, "le": 1}, "lam": {"ge": 0, "le": 1}},
    "KLControlConfig": {"kl_coef": {"ge": 0}},
}

# Keys of verl nodes that no dataclass declares (main_ppo reads them as plain config), with the ranges a run needs:
# a zero or negative size or epoch count makes a run that trains nothing or divides by zero.
NODE_RANGES: dict[str, dict[str, float]] = {
    "trainer.total_epochs": {"ge": 1},
    "trainer.nnodes": {"ge": 1},
    "trainer.n_gpus_per_node": {"ge": 1},
    "trainer.total_training_steps": {"ge": 1},
    "data.train_batch_size": {"ge": 1},
    "data.max_prompt_length": {"ge": 1},
    "data.max_response_length": {"ge": 1},
    "data.micro_batch_size_per_gpu": {"ge": 1},
    "data.max_length": {"ge": 1},
}

# Keys whose default is a number but which take null too (their YAML says what null means): the type check lets it by.
NULLABLE_KEYS: frozenset[str] = frozenset(
    {
        # "null disables off-policy version control entirely" (trainer/config/ppo_trainer.yaml): offpolicy.max_staleness
        "trainer.v1.sampler.max_off_policy_threshold",
    }
)
