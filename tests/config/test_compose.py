"""Composition: every shipped option and recipe composes and validates; overrides land where they should."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf, open_dict

from trainctl.config.search import SearchPath
from trainctl.errors import ConfigProblems
from trainctl.plan import make_plan

SEARCH = SearchPath.default()
ALGORITHMS = list(SEARCH.options("algorithm"))
HARDWARE = list(SEARCH.options("hardware"))
RECIPES = list(SEARCH.options("recipe"))


# the TRL algorithms' backend: trl-<their trainer's family>
TRL_BACKEND = {"dpo": "trl-dpo", "rm": "trl-rm", "kto": "trl-kto", "orpo": "trl-orpo", "simpo": "trl-cpo"}


def _data_for(algorithm: str) -> str:
    return "hh-rlhf" if algorithm in TRL_BACKEND else "arith"


def test_shipped_groups_are_all_there():
    assert set(ALGORITHMS) >= {"sft", "dpo", "ppo", "grpo", "gspo", "dapo", "drgrpo", "rloo", "reinforce_pp", "remax"}
    assert set(ALGORITHMS) >= set(TRL_BACKEND)
    assert set(HARDWARE) == {"cpu", "1gpu", "8gpu", "2x8gpu", "4x8gpu"}
    assert set(SEARCH.options("logger")) == {"console", "wandb", "tensorboard", "file", "mlflow"}
    assert set(SEARCH.options("tools")) >= {"none", "calculator", "calculator-fn"}
    assert set(SEARCH.options("data")) >= {"gsm8k", "math", "hh-rlhf", "arith"}
    models = set(SEARCH.options("model"))
    assert {f"qwen2.5-{s}" for s in ("0.5b", "1.5b", "3b", "7b", "14b", "32b", "72b")} <= models
    assert {f"qwen3-{s}" for s in ("0.6b", "1.7b", "4b", "8b", "14b", "32b")} <= models
    assert {"deepseek-llm-7b-chat", "llama3-8b-instruct", "tiny"} <= models
    assert {"quickstart", "grpo-gsm8k-qwen2.5-7b", "dapo-math-qwen2.5-32b-4x8gpu"} <= set(RECIPES)


# every algorithm on every hardware: each algorithm on one hardware, each hardware under two algorithms, in `make
# test`; the whole matrix (0.7 s of CPU a combination, verl's own validation included) with the slow tests
DIAGONAL = {(a, HARDWARE[i % len(HARDWARE)]) for i, a in enumerate(ALGORITHMS)}
MATRIX = [
    pytest.param(a, h, marks=() if (a, h) in DIAGONAL else pytest.mark.slow, id=f"{a}-{h}")
    for a in ALGORITHMS
    for h in HARDWARE
]


@pytest.mark.parametrize(("algorithm", "hardware"), MATRIX)
def test_every_algorithm_on_every_hardware_validates(algorithm, hardware, tiny_model):
    # verl's own validation runs too (native=True), with the model present so its model sections are checked
    # distillation needs a teacher: the tiny model itself (the student's tokenizer)
    teacher = ["distillation.teacher=tiny"] if algorithm == "distill" else []
    plan = make_plan([f"algorithm={algorithm}", f"hardware={hardware}", f"data={_data_for(algorithm)}", *teacher])
    assert plan.errors == []
    assert plan.backend.name == {"sft": "verl-sft", **TRL_BACKEND}.get(algorithm, "verl-ppo")
    assert plan.numbers, "the plan shows derived numbers"


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_validates(recipe, tiny_model):
    plan = make_plan([f"recipe={recipe}"])
    assert plan.errors == []
    first = (SEARCH.options("recipe")[recipe]).read_text().splitlines()[0]
    # the command, maybe with what the recipe starts from (model=runs/NAME: another recipe's run)
    assert re.fullmatch(rf"# trainctl train recipe={recipe}( model=runs/[\w.-]+)?", first), (
        "a recipe starts with the command that runs it"
    )


@pytest.mark.parametrize(
    "group", ["algorithm", "model", "data", "reward", "env", "tools", "hardware", "logger", "lora", "offpolicy"]
)
def test_every_option_file_is_documented(group):
    from trainctl.config.search import describe

    for name, file in SEARCH.options(group).items():
        assert describe(file), f"{file} has no description comment"
        if group == "logger":
            # several loggers combine (logger=[wandb,tensorboard]): each adds itself under `destinations`
            assert f"\n  {name}:" in file.read_text() or name in ("console", "file"), file
            continue
        # quoted where YAML would read the bare word otherwise (offpolicy's off: false)
        assert f"name: {name}" in file.read_text() or f'name: "{name}"' in file.read_text() or group == "algorithm"


def test_recipe_chooses_groups_and_command_line_wins():
    plan = make_plan(["recipe=grpo-gsm8k-qwen2.5-7b", "model=qwen3-8b"], native=False)
    assert plan.cfg.algorithm.name == "grpo"
    assert plan.cfg.hardware.name == "8gpu"
    assert plan.cfg.model.name == "qwen3-8b"
    assert plan.value("actor_rollout_ref.model.path").endswith("/models/qwen3-8b")


def test_keys_route_to_trainctl_or_backend():
    plan = make_plan(
        [
            "algorithm=grpo",
            "data.max_prompt_length=256",  # a trainctl key (the data group has it) ...
            "data.train_batch_size=64",  # ... a verl key under the same section name
            "actor_rollout_ref.actor.ppo_mini_batch_size=16",
            "actor_rollout_ref.actor.optim.lr=3e-6",
            "verl.trainer.val_before_train=false",  # an explicit prefix works too
            "hardware.micro_batch_size_per_gpu=4",
        ],
        native=False,
    )
    assert plan.cfg.data.max_prompt_length == 256
    assert plan.value("data.max_prompt_length") == 256
    assert plan.value("data.train_batch_size") == 64
    assert plan.value("actor_rollout_ref.actor.optim.lr") == 3e-6
    assert plan.value("trainer.val_before_train") is False
    assert plan.value("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu") == 4
    assert plan.comp.cfg.verl.data.train_batch_size == 64


def test_mapping_lands_groups_on_backend_keys():
    plan = make_plan(["algorithm=ppo", "model=qwen2.5-3b", "hardware=8gpu", "logger=tensorboard"], native=False)
    assert plan.value("trainer.n_gpus_per_node") == 8
    assert plan.value("actor_rollout_ref.rollout.tensor_model_parallel_size") == 2
    assert plan.value("critic.model.path") == plan.value("actor_rollout_ref.model.path")
    assert plan.value("trainer.logger") == ["console", "file", "tensorboard"]
    # null in trainctl means "leave verl's default": no attention override on GPUs
    assert plan.value("actor_rollout_ref.model.override_config") == {}
    cpu = make_plan(["algorithm=ppo", "hardware=cpu"], native=False)
    assert cpu.value("actor_rollout_ref.model.override_config.attn_implementation") == "sdpa"
    assert cpu.value("actor_rollout_ref.actor.strategy") == "fsdp2"


def test_dpo_maps_onto_trl_keys():
    plan = make_plan(["algorithm=dpo", "data=hh-rlhf", "hardware=cpu", "logger=wandb", "beta=0.3"], native=False)
    assert plan.value("use_cpu") is True and plan.value("bf16") is False
    assert plan.value("beta") == 0.3
    assert plan.value("report_to") == ["wandb"]
    assert plan.value("max_length") == 1024
    gpu = make_plan(["algorithm=dpo", "data=hh-rlhf", "hardware=8gpu"], native=False)
    assert gpu.value("bf16") is True and gpu.value("use_cpu") is False


def test_adding_and_deleting_backend_keys():
    plan = make_plan(
        ["algorithm=grpo", "+data.my_custom_field=7", "+ray_kwargs.ray_init.address=auto", "~trainer.rollout_data_dir"],
        native=False,
    )
    assert plan.value("data.my_custom_field") == 7
    assert plan.value("ray_kwargs.ray_init.address") == "auto"
    assert "rollout_data_dir" not in plan.backend_cfg.trainer
    assert "+data.my_custom_field=7" in plan.built.raw_overrides()


def test_backend_values_may_interpolate_trainctl_keys():
    plan = make_plan(["algorithm=dapo", "data.max_response_length=200"], native=False)
    assert plan.value("reward.reward_kwargs.max_resp_len") == 200
    assert plan.value("reward.reward_kwargs.overlong_buffer_cfg.len") == 50


def test_user_conf_folder_is_searched_first(tmp_path):
    conf = tmp_path / "work" / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "qwen2.5-7b.yaml").write_text(
        "# our mirror of Qwen2.5-7B\nname: qwen2.5-7b\nhf_repo: Qwen/Qwen2.5-7B-Instruct\nms_repo: null\n"
        "path: /mnt/models/qwen7b\nparams: 7.6e+9\ncontext_length: 32768\n"
    )
    (conf / "hardware").mkdir()
    src = SEARCH.options("hardware")["8gpu"].read_text().replace("name: 8gpu", "name: h100-box")
    (conf / "hardware" / "h100-box.yaml").write_text(src)
    plan = make_plan(["algorithm=grpo", "model=qwen2.5-7b", "hardware=h100-box"], native=False)
    assert plan.cfg.model.path == "/mnt/models/qwen7b"
    assert plan.cfg.hardware.name == "h100-box"


# trainctl composes through Hydra's loader without Hydra's own app config (trainctl.config.compose: half the time of
# each composition): against Hydra's compose API, the same config and group choices, and the same refusals
AS_HYDRA_COMPOSES = [
    ["recipe@_global_=agent-arith-tiny-cpu"],
    ["recipe@_global_=dapo-math-qwen2.5-32b-4x8gpu", "model=qwen3-8b"],
    ["algorithm=dpo", "model=qwen2.5-7b", "data=hh-rlhf", "hardware=1gpu", "lora=qlora-r16", "logger=[wandb,file]"],
    ["algorithm=grpo", "env=reasoning_gym", "offpolicy=split", "tools=calculator", "reward=model"],
    ["algorithm=grpo", "model=ours", "recipe@_global_=ours"],  # a user's folder: its own option and recipe
]


@pytest.mark.parametrize("overrides", AS_HYDRA_COMPOSES, ids=lambda o: " ".join(o))
def test_a_composition_is_hydras_less_its_own_node(overrides, tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainctl.config import compose as composing

    mine = tmp_path / "conf"
    (mine / "model").mkdir(parents=True)
    (mine / "model" / "ours.yaml").write_text("defaults: [_base]\nname: ours\nparams: 1.0e+8\n")
    (mine / "recipe").mkdir()
    (mine / "recipe" / "ours.yaml").write_text("defaults:\n  - override /hardware: 8gpu\nrun:\n  name: ours\n")
    search = SearchPath.default([mine])
    cfg, choices = composing._hydra_compose(search, overrides)
    GlobalHydra.instance().clear()
    composing._USER_DIRS[:] = search.user_dirs
    composing._COMPOSING[0] = True
    try:
        with initialize_config_dir(config_dir=str(search.builtin), version_base="1.3"):
            hydras = compose(composing.PRIMARY, overrides=overrides, return_hydra_config=True)
    finally:
        composing._USER_DIRS.clear()
        composing._COMPOSING[0] = False
        GlobalHydra.instance().clear()
    chosen = {k: v for k, v in hydras.hydra.runtime.choices.items() if v is not None and "hydra" not in k}
    with open_dict(hydras):
        del hydras["hydra"]
    assert OmegaConf.to_container(cfg) == OmegaConf.to_container(hydras)
    assert choices == chosen and {"algorithm", "model", "hardware"} <= set(choices), choices
    for refused in (["algorithm=grpo,dapo"], ["model=nosuch"], ["nosuch=1"]):  # a sweep, an option, a group
        with pytest.raises(ConfigProblems):
            composing._hydra_compose(search, refused)


def test_config_dir_option(tmp_path):
    mine = tmp_path / "team-conf"
    (mine / "recipe").mkdir(parents=True)
    (mine / "recipe" / "ours.yaml").write_text(
        "# trainctl train recipe=ours --config-dir team-conf\ndefaults:\n  - override /algorithm: rloo\n"
        "run:\n  name: ours\n"
    )
    plan = make_plan(["recipe=ours"], SearchPath.default([mine]), native=False)
    assert plan.cfg.algorithm.name == "rloo" and plan.cfg.run.name == "ours"


def test_a_recipe_edited_behind_a_folder_link_is_composed_afresh(tmp_path):
    """Compositions are cached by the config files' times and sizes; the repository's conf/recipe is a link to
    recipes/, so the files behind a link must count too."""
    shared = tmp_path / "team-recipes"
    shared.mkdir()
    recipe = shared / "ours.yaml"
    (tmp_path / "work" / "conf").mkdir()
    (tmp_path / "work" / "conf" / "recipe").symlink_to(shared, target_is_directory=True)
    (shared / "loop").symlink_to(tmp_path / "work" / "conf", target_is_directory=True)  # walked once, not forever
    for name in ("first", "second-and-longer"):
        recipe.write_text(f"# trainctl train recipe=ours\nrun:\n  name: {name}\n")
        assert make_plan(["recipe=ours"], native=False).cfg.run.name == name


def test_origins_name_the_file_or_override():
    plan = make_plan(["recipe=quickstart", "run.seed=7", "optim.weight_decay=0.0"], native=False)
    comp = plan.comp
    assert comp.origin("run.seed") == "command line"
    assert comp.origin("run.epochs") == "recipes/quickstart.yaml"
    assert comp.origin("model.path") == "conf/model/_base.yaml"  # ${paths.models}/${model.name}
    assert comp.origin("model.context_length") == "conf/model/tiny.yaml"
    assert comp.origin("hardware.fsdp_strategy") == "conf/hardware/cpu.yaml"
    assert comp.origin("verl.optim.lr") == "recipes/quickstart.yaml"
    assert comp.origin("verl.optim.weight_decay") == "command line"


def test_backend_yaml_round_trips_through_verl_compose(tiny_model):
    """What trainctl writes for verl is what verl's own Hydra loads back."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    plan = make_plan(["algorithm=grpo", "hardware=8gpu"], native=False)
    folder = tiny_model.parent.parent / "run"
    folder.mkdir()
    (folder / "verl_ppo.yaml").write_text(plan.backend_yaml())
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        loaded = compose("verl_ppo")
    GlobalHydra.instance().clear()
    assert OmegaConf.to_container(loaded, resolve=True) == OmegaConf.to_container(plan.backend_cfg, resolve=True)


def test_every_problem_is_reported_together():
    with pytest.raises(ConfigProblems) as e:
        make_plan(["algorithm=grpo", "hardware=2x8gpu", "data.train_batch_size=100", "trainer.totl_epochs=3"])
    messages = [p.message for p in e.value.problems]
    assert any("unknown config key 'trainer.totl_epochs'" in m for m in messages)
    assert any("do not divide across data-parallel ranks" in m for m in messages)


def test_algorithm_and_data_options_inherit_their_base():
    """The bases carry what options share: the PPO family's trainer, data format and shared verl keys (_ppo over
    _base), and every dataset's folder and files (data/_base); each option then sets what differs."""
    from trainctl.config.load import load
    from trainctl.config.origins import merge_order

    def merged(choices: dict[str, str]) -> list[str]:
        return [SEARCH.label(f) for f, _ in merge_order(SEARCH, choices)]

    for name in ALGORITHMS:
        files = merged({"algorithm": name})
        mine = files.index(f"conf/algorithm/{name}.yaml")
        bases = ["_base", "_ppo"] if name not in ("sft", *TRL_BACKEND) else ["_base"]
        assert files[mine - len(bases) : mine] == [f"conf/algorithm/{b}.yaml" for b in bases], files
    for name in SEARCH.options("data"):
        files = merged({"data": name})
        assert files[files.index(f"conf/data/{name}.yaml") - 1] == "conf/data/_base.yaml", files

    comp = load(["algorithm=grpo", "data=gsm8k"]).comp
    assert comp.origin("algorithm.name") == "conf/algorithm/grpo.yaml"
    assert comp.origin("algorithm.family") == "conf/algorithm/_ppo.yaml"
    assert comp.origin("verl.actor_rollout_ref.actor.entropy_coeff") == "conf/algorithm/_ppo.yaml"
    assert comp.origin("verl.actor_rollout_ref.actor.use_kl_loss") == "conf/algorithm/grpo.yaml"  # GRPO turns it on
    assert comp.origin("data.dir") == "conf/data/_base.yaml"
    assert comp.cfg.data.dir.endswith("/data/gsm8k")


def test_a_users_algorithm_inherits_the_ppo_family_base(tmp_path, monkeypatch):
    """A `./conf/algorithm/NAME.yaml` of the user's inherits `_ppo` from the built-in folder, as the shipped ones do."""
    from trainctl.config.load import load

    folder = tmp_path / "work" / "conf" / "algorithm"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text(
        "# @package _global_\n# mine: GRPO with a bigger group\ndefaults:\n  - _ppo\n  - _self_\n"
        "algorithm:\n  name: mine\nverl:\n  algorithm:\n    adv_estimator: grpo\n"
        "  actor_rollout_ref:\n    rollout:\n      n: 12\n"
    )
    monkeypatch.chdir(tmp_path / "work")
    loaded = load(["algorithm=mine"])
    assert (loaded.cfg.algorithm.family, loaded.cfg.algorithm.data_format) == ("ppo", "rl")
    verl = loaded.comp.cfg.verl
    assert verl.actor_rollout_ref.rollout.n == 12 and verl.algorithm.adv_estimator == "grpo"
    assert verl.actor_rollout_ref.actor.optim.lr == 1e-6  # from _ppo
    options = SearchPath.default().options("algorithm")
    assert "mine" in options and "_ppo" not in options and "_base" not in options
