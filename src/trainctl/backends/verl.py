"""verl as a backend: main_ppo for the PPO family, sft_trainer for SFT.

verl's defaults are its own Hydra YAML, composed from the installed package's config folder without importing verl
(importing it costs 5-8 s; composing costs ~0.5 s, and the result is cached per verl version).
"""

from __future__ import annotations

import hashlib
import pickle
import shlex
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from trainctl import launchers, paths
from trainctl.backends.base import (
    Backend,
    BuiltConfig,
    Command,
    key_paths,
    local_launch,
    python_for,
    set_path,
    torchrun_for,
)
from trainctl.backends.schemas import installed_version, verl_config_dir
from trainctl.config.resolvers import RUN_RECORD_LOGGERS
from trainctl.errors import ConfigProblems, Problem
from trainctl.facts import verl as verl_facts

if TYPE_CHECKING:
    from trainctl.config.compose import Composition
    from trainctl.config.schema import Config


def verl_keys(config_name: str, overrides: tuple[str, ...] = ()) -> set[str]:
    """Every key path of verl's default config (inner nodes included)."""
    return _verl_defaults(config_name, overrides)[1]


def verl_defaults(config_name: str, overrides: tuple[str, ...] = ()) -> DictConfig:
    """verl's composed default config (interpolations kept): a fresh copy the caller may change.

    Cached on disk per verl version and file times as a pickled DictConfig: unpickling one takes ~6 ms,
    building one from a dict ~80 ms, composing it with Hydra ~500 ms.
    """
    return pickle.loads(_verl_defaults(config_name, overrides)[0])


def verl_default_tree(config_name: str, overrides: tuple[str, ...] = ()) -> dict:
    """verl's composed defaults as plain data (interpolations kept). Shared: do not change it."""
    return _verl_defaults(config_name, overrides)[2]


def _verl_defaults(config_name: str, overrides: tuple[str, ...]) -> tuple[bytes, set[str], dict]:
    """verl's composed defaults, from this process's memory or the cache folder (kept in the folder either way)."""
    found = _verl_defaults_cached(config_name, overrides)
    paths.keep_cached(paths.cache_dir() / found[0], lambda: pickle.dumps(found[1:]))
    return found[1:]


@lru_cache(maxsize=16)
def _verl_defaults_cached(config_name: str, overrides: tuple[str, ...]) -> tuple[str, bytes, set[str], dict]:
    """(the cache file's name, the defaults as a pickled DictConfig, their key paths, the plain tree)."""
    d = verl_config_dir()
    stamp = max(f.stat().st_mtime_ns for f in d.rglob("*.yaml"))
    key = repr((installed_version("verl"), str(d), stamp, config_name, overrides, "dictconfig+keys+tree"))
    name = f"verl-{config_name}-{hashlib.sha1(key.encode()).hexdigest()[:16]}.pkl"
    cache = paths.cache_dir() / name
    if cache.is_file():
        try:
            blob, keys, tree = pickle.loads(cache.read_bytes())
            return name, blob, keys, tree
        except Exception:  # a damaged cache is rebuilt
            pass
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(d), version_base=None):
            cfg = compose(config_name, overrides=list(overrides))
    except HydraException as e:
        group, _, choice = overrides[0].partition("=") if overrides else ("", "", "")
        options = sorted(f.stem for f in (d / group).glob("*.yaml")) if group else []
        raise ConfigProblems(
            [
                Problem(
                    f"verl has no {group} option '{choice}'." if group else str(e).splitlines()[0],
                    key=group or None,
                    hint=f"available: {', '.join(options)}" if options else None,
                )
            ]
        ) from None
    finally:
        GlobalHydra.instance().clear()
    container = OmegaConf.to_container(cfg, resolve=False)
    blob = pickle.dumps(OmegaConf.create(container))  # without Hydra's struct flags
    keys = key_paths(container)
    paths.atomic_write_bytes(cache, pickle.dumps((blob, keys, container)))
    return name, blob, keys, container


def _overrides(group_choices: dict[str, str]) -> tuple[str, ...]:
    return tuple(f"{k}={v}" for k, v in sorted(group_choices.items()))


def _run_dir(cfg: Config) -> Path:
    return Path(cfg.run.dir).expanduser().resolve()


class _Verl(Backend):
    node = "verl"
    entry = ""

    def build(self, cfg: Config, comp: Composition, problems: list[Problem]) -> BuiltConfig:
        """verl's config; its file logger is always on: a logger set by hand adds destinations, never removes the
        run folder's metrics record (metrics/attempt-N.jsonl, which `trainctl runs` and `ckpt` read)."""
        built = super().build(cfg, comp, problems)
        loggers = built.leaves.get("trainer.logger")
        if loggers is not None:
            names = [loggers] if isinstance(loggers, str) else list(loggers)
            missing = [n for n in RUN_RECORD_LOGGERS if n not in names]
            if missing:
                built.leaves["trainer.logger"] = [*missing, *names]
                OmegaConf.update(built.cfg, "trainer.logger", built.leaves["trainer.logger"], merge=False)
        return built

    def hydra_args(self, cfg: Config, config_dir: str | None) -> list[str]:
        """verl's trainers are Hydra apps: without these, each run writes outputs/<date>/<time>/ (a copy of the
        config and a log) into the folder trainctl was started from. The run folder already has both."""
        where = config_dir or str(_run_dir(cfg))
        return [f"hydra.run.dir={where}", "hydra.output_subdir=null", "hydra/job_logging=stdout"]

    def declares(self, defaults: dict, path: str) -> bool:
        """Walk `path` through verl's defaults; below the last node with a `_target_`, ask its dataclass."""
        from trainctl.backends.schemas import verl_schemas

        found = verl_schemas()
        node: object = defaults
        schema = None
        parts = path.split(".")
        for i, part in enumerate(parts):
            if isinstance(node, dict) and node.get("_target_"):
                schema = found.for_target(str(node["_target_"]))
            if isinstance(node, dict) and part in node:
                node = node[part]
                continue
            if schema is None or part not in schema.fields:
                return False
            spec = schema.fields[part].spec
            kinds = {s.kind for s in (spec.of if spec.kind == "union" else (spec,))}
            if "dict" in kinds or "any" in kinds:
                return True  # a mapping field: any key below it
            return i == len(parts) - 1  # a declared scalar field
        return False

    def env(self, cfg: Config) -> dict[str, str]:
        # what the driver's ray.init() needs to find its cluster (RAY_ADDRESS for ray_cluster)
        return launchers.get(cfg.hardware.launcher).trainer_env(cfg.hardware)

    def config_args(self, cfg: Config, config_dir: str | None) -> list[str]:
        return [
            f"--config-path={config_dir or _run_dir(cfg)}",
            f"--config-name={Path(self.config_file).stem}",
            *self.hydra_args(cfg, config_dir),
        ]


def forks_workers(cfg: Config) -> bool:
    """Whether a PPO-family run's Ray workers are forked by trainctl's fork server: hardware.fork_workers on the CPU,
    in a Ray the run starts itself (on one machine: the server forks on the driver's)."""
    hw = cfg.hardware
    return hw.fork_workers and hw.device == "cpu" and launchers.get(hw.launcher).ray == "own"


AR = "actor_rollout_ref"
MICRO_ORIGIN = "hardware.micro_batch_size_per_gpu: at most a rank's share (trainctl.backends.verl)"


def _micro_batch_shares(built: DictConfig) -> dict[str, int | None]:
    """What one rank holds of each pass that verl splits into micro-batches of a `*micro_batch_size_per_gpu`: a policy
    or critic update's share of its mini-batch (ppo_mini_batch_size x rollout.n / data-parallel ranks), and a
    log-prob pass's share of the step's batch (train_batch_size x rollout.n / ranks); None where it does not divide.

    hardware.micro_batch_size_per_gpu is an upper bound: a key the mapping set above its pass's share gets the share
    (one pass of everything the rank holds), since verl's engine asserts that the micro-batch divides what the rank
    holds (verl/workers/engine/utils.py prepare_micro_batches). A recipe's "the step in one pass" then holds with any
    rollout.n, GPU count or off-policy split; a smaller one that does not divide is still the checks' to report."""
    value = lambda key: OmegaConf.select(built, key, default=None)  # noqa: E731
    P, n = value("data.train_batch_size"), value(f"{AR}.rollout.n")
    world = (value("trainer.nnodes") or 0) * (value("trainer.n_gpus_per_node") or 0)
    if not all(isinstance(v, int) and v > 0 for v in (P, n, world)):
        return {}

    def share(sequences, sp_key: str) -> int | None:
        dp = world // (value(sp_key) or 1)
        return sequences // dp if isinstance(sequences, int) and dp > 0 and sequences % dp == 0 else None

    actor_mini, critic_mini = value(f"{AR}.actor.ppo_mini_batch_size"), value("critic.ppo_mini_batch_size")
    sp = f"{AR}.actor.ulysses_sequence_parallel_size"
    return {
        f"{AR}.actor.ppo_micro_batch_size_per_gpu": share(actor_mini * n if isinstance(actor_mini, int) else None, sp),
        "critic.ppo_micro_batch_size_per_gpu": share(
            critic_mini * n if isinstance(critic_mini, int) else None, "critic.ulysses_sequence_parallel_size"
        ),
        f"{AR}.ref.log_prob_micro_batch_size_per_gpu": share(P * n, f"{AR}.ref.ulysses_sequence_parallel_size"),
        f"{AR}.rollout.log_prob_micro_batch_size_per_gpu": share(P * n, sp),
    }


def teacher_keys(cfg: Config, search) -> dict:
    """verl's distillation keys for the teacher trainctl's distillation section names (algorithm=distill): its model
    folder, and its pool of distillation.gpus GPUs (processes on cpu) on one node, served with the rollout engine's
    tensor parallelism where it divides them."""
    import math

    from trainctl.backends.rewards.base import named_model

    d = cfg.distillation
    folder = named_model("distillation.teacher", str(d.teacher), cfg.paths.models, search).folder
    tp = math.gcd(cfg.hardware.rollout_tp, d.gpus)
    teacher = {"model_path": str(folder), "inference": {"tensor_model_parallel_size": tp}}
    return {"distillation": {"n_gpus_per_node": d.gpus, "teacher_models": {"teacher_model": teacher}}}


class VerlPPO(_Verl):
    name = "verl-ppo"
    title = "verl main_ppo"
    mapping = "verl_ppo"
    config_file = "verl_ppo.yaml"
    entry = "verl.trainer.main_ppo"
    open_paths = verl_facts.PPO_OPEN_PATHS
    group_keys = ("model_engine",)
    old_keys = verl_facts.OLD_PPO_KEYS

    def defaults(self, group_choices: dict[str, str]) -> DictConfig:
        return verl_defaults("ppo_trainer", _overrides(group_choices))

    def build(self, cfg: Config, comp: Composition, problems: list[Problem]) -> BuiltConfig:
        built = super().build(cfg, comp, problems)
        for path, share in _micro_batch_shares(built.cfg).items():
            value = built.leaves.get(path)
            mapped = (built.origins.get(path) or "").startswith("conf/mapping/")
            if mapped and isinstance(value, int) and isinstance(share, int) and 0 < share < value:
                built.leaves[path] = share
                built.origins[path] = MICRO_ORIGIN
                OmegaConf.update(built.cfg, path, share, merge=False)
        return built

    def translate(self, cfg: Config, comp: Composition) -> list[tuple[dict, str]]:
        """The reward kind's keys (how verl scores responses: trainctl.backends.rewards), the tools section's
        (multi_turn, the agent loop, the trajectory dump: trainctl.backends.tools), and no CPU count for a Ray that
        main_ppo joins (a cluster, or a job's): ray.init() refuses num_cpus there ("When connecting to an existing
        cluster, num_cpus and num_gpus must not be provided")."""
        from trainctl.backends.rewards import kind_of
        from trainctl.backends.tools import verl_keys as tool_keys

        out = []
        kind = kind_of(cfg)
        keys = kind.verl(cfg, comp.search)
        if keys:
            out.append(({"reward": keys}, kind.origin))
        tools = tool_keys(cfg.tools, cfg.run.dir)
        if tools:
            tree: dict = {}
            for path, value in tools.items():
                set_path(tree, path, value)
            out.append((tree, f"tools={cfg.tools.name} (trainctl.backends.tools)"))
        if launchers.get(cfg.hardware.launcher).ray != "own":
            out.append(({"ray_kwargs": {"ray_init": {"num_cpus": None}}}, f"hardware.launcher={cfg.hardware.launcher}"))
        if forks_workers(cfg):
            from trainctl.runtime.forkserver import py_executable

            # Ray starts each worker with this program: it asks the run's fork server for one (without the server,
            # as in the raw verl command, it starts Python as Ray would)
            runtime_env = {"py_executable": py_executable(python_for(None))}
            out.append(({"ray_kwargs": {"ray_init": {"runtime_env": runtime_env}}}, "hardware.fork_workers"))
        if cfg.distillation.teacher:
            out.append((teacher_keys(cfg, comp.search), "distillation.teacher (trainctl.backends.verl)"))
        if cfg.offpolicy.mode == "split" and cfg.offpolicy.sync_every is None:
            # the one value verl's separate_async accepts: an update per mini-batch, a sync per step's batch
            per_step, mini = (
                OmegaConf.select(comp.cfg, f"verl.{k}", default=None)
                for k in ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size")
            )
            if isinstance(per_step, int) and isinstance(mini, int) and 0 < mini <= per_step:
                sync = {"trainer": {"v1": {"separate_async": {"parameter_sync_step": per_step // mini}}}}
                out.append((sync, "offpolicy.sync_every: null (data.train_batch_size / ppo_mini_batch_size)"))
        return out

    def known_keys(self, group_choices: dict[str, str]) -> set[str]:
        return verl_keys("ppo_trainer", _overrides(group_choices))

    def default_tree(self, group_choices: dict[str, str]) -> dict:
        return verl_default_tree("ppo_trainer", _overrides(group_choices))

    def env(self, cfg: Config) -> dict[str, str]:
        if launchers.get(cfg.hardware.launcher).ray == "own":
            # a Ray of its own: never a cluster from the caller's RAY_ADDRESS or a stale /tmp/ray session file
            # (ray.init() would then refuse num_cpus: "When connecting to an existing cluster ..."), and no idle
            # workers started with main_ppo's connection: they lack the runtime environment (env_vars) it gives
            # every actor, so none is ever used (two a run here, ~1.3 s of CPU each)
            return {"RAY_ADDRESS": "local", "RAY_prestart_worker_first_driver": "0"}
        return super().env(cfg)

    def command(self, cfg: Config, built: BuiltConfig, config_dir: str | None = None) -> Command:
        # main_ppo starts (or joins) Ray itself
        python = python_for(config_dir)
        # the fork server starts first and becomes the driver (trainctl.runtime.forkserver)
        server = [python, "-m", "trainctl.runtime.forkserver", "--"] if forks_workers(cfg) else []
        return Command(
            argv=[*server, python, "-m", self.entry, *self.config_args(cfg, config_dir)],
            env=self.env(cfg),
            launcher=cfg.hardware.launcher,
            raw_argv=[python, "-m", self.entry, *built.raw_overrides(), *self.hydra_args(cfg, config_dir)],
        )


class VerlSFT(_Verl):
    name = "verl-sft"
    title = "verl sft_trainer"
    mapping = "verl_sft"
    config_file = "verl_sft.yaml"
    entry = "verl.trainer.sft_trainer"
    open_paths = verl_facts.SFT_OPEN_PATHS
    group_keys = ("model", "engine", "optim", "profiler")
    old_keys = verl_facts.OLD_SFT_KEYS

    def defaults(self, group_choices: dict[str, str]) -> DictConfig:
        return verl_defaults("sft_trainer_engine", _overrides(group_choices))

    def known_keys(self, group_choices: dict[str, str]) -> set[str]:
        return verl_keys("sft_trainer_engine", _overrides(group_choices))

    def default_tree(self, group_choices: dict[str, str]) -> dict:
        return verl_default_tree("sft_trainer_engine", _overrides(group_choices))

    def command(self, cfg: Config, built: BuiltConfig, config_dir: str | None = None) -> Command:
        hw = cfg.hardware
        mode = launchers.get(hw.launcher).torchrun_mode()
        env = self.env(cfg)
        if mode == "standalone":
            # one process per device; torchrun wires the process group of several (verl ignores trainer.nnodes here)
            launch, one = local_launch(config_dir, hw.gpus_per_node, self.entry)
            env = {**one, **env}
        elif mode == "rendezvous":
            # one torchrun agent per node, started by the launcher, which sets their endpoint (PET_RDZV_ENDPOINT)
            launch = [*torchrun_for(config_dir), f"--nnodes={hw.nnodes}", "--rdzv_backend=c10d"]
            launch += [f"--nproc_per_node={hw.gpus_per_node}", "-m", self.entry]
        else:
            # on a Ray cluster: one controller sized by trainer.nnodes x n_gpus_per_node
            launch = [python_for(config_dir), "-m", "verl.trainer.sft_trainer_ray"]
        return Command(
            argv=[*launch, *self.config_args(cfg, config_dir)],
            env=env,
            launcher=hw.launcher,
            raw_argv=[*launch, *built.raw_overrides(), *self.hydra_args(cfg, config_dir)],
        )


def shell_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    """A command as one shell line."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + " ".join(shlex.quote(a) for a in argv)
