"""The field declarations of the backends' config dataclasses, as trainctl.config.types schemas.

verl declares every field of its config nodes in dataclasses (`verl.workers.config.*`, `verl.trainer.config.*`,
named by each node's `_target_`); TRL declares each trainer's in its config (DPOConfig, RewardConfig, ...) and
ModelConfig. Importing them costs seconds
(verl and TRL import torch), so their schemas are read once per installed version and kept on disk as JSON; the
checks then run in milliseconds.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from trainctl import paths
from trainctl.config.types import ClassSchema, Range, schemas_of
from trainctl.facts import verl as verl_facts
from trainctl.facts.trl import DATA_KEYS, TRAINERS

_SCHEMA_VERSION = "1"  # bump when the cached format changes


@dataclass
class BackendSchemas:
    """Schemas by dataclass name, and which dataclass each `_target_` string (as the YAML writes it) names."""

    classes: dict[str, ClassSchema] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)

    def for_target(self, target: str) -> ClassSchema | None:
        name = self.targets.get(target, target)
        return self.classes.get(name)

    @property
    def by_name(self) -> dict[str, ClassSchema]:
        """Schemas by qualified name and by every `_target_` spelling that names them."""
        return {**self.classes, **{t: self.classes[q] for t, q in self.targets.items() if q in self.classes}}

    def to_json(self) -> dict:
        return {"classes": {k: v.to_json() for k, v in self.classes.items()}, "targets": self.targets}

    @classmethod
    def from_json(cls, data: dict) -> BackendSchemas:
        return cls({k: ClassSchema.from_json(v) for k, v in data["classes"].items()}, dict(data["targets"]))


def _ranges(table: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, Range]]:
    def one(b: dict[str, float]) -> Range:
        lo, lo_open = (b["gt"], True) if "gt" in b else (b.get("ge"), False)
        hi, hi_open = (b["lt"], True) if "lt" in b else (b.get("le"), False)
        return Range(lo, lo_open, hi, hi_open)

    return {cls: {f: one(b) for f, b in fields.items()} for cls, fields in table.items()}


# Schemas of the backend versions trainctl pins, shipped with it (written by `make schemas`, compared with a fresh
# read by tests/backends/test_schemas.py): the first check on a new machine needs no import of verl or TRL.
SHIPPED = Path(__file__).resolve().parent.parent / "facts" / "schemas"


def shipped_file(name: str, portable_key: str) -> Path:
    return SHIPPED / f"{name}-{hashlib.sha1(portable_key.encode()).hexdigest()[:12]}.json"


def _cached(name: str, key: str, portable_key: str, build) -> BackendSchemas:
    cache = paths.cache_dir() / f"schema-{name}-{hashlib.sha1(key.encode()).hexdigest()[:16]}.json"
    for f in (cache, shipped_file(name, portable_key)):
        if f.is_file():
            try:
                return BackendSchemas.from_json(json.loads(f.read_text()))
            except (ValueError, KeyError, TypeError):
                pass  # a damaged cache is rebuilt
    schemas = build()
    paths.atomic_write_text(cache, json.dumps(schemas.to_json()))
    return schemas


_TARGET = re.compile(r"^\s*_target_:\s*([\w.]+)\s*$", re.M)


def _locate(dotted: str):
    """The object a `_target_` names (module path, then attributes), as Hydra's instantiate finds it."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


_MEMO: dict[str, BackendSchemas] = {}
_BY_FILES: dict[tuple[str, int], BackendSchemas] = {}  # (verl's config folder, its newest file's time) -> schemas


def verl_config_dir() -> Path:
    """The installed verl's own config folder (its Hydra YAML: the defaults trainctl.backends.verl composes, and the
    `_target_`s that name the dataclasses read here), found without importing verl."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        from trainctl.errors import TrainctlError

        raise TrainctlError("verl is not installed.", hint="pip install 'verl[verl-core]==0.9.1' (or: make install)")
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def installed_version(package: str) -> str:
    """An installed package's version, from the name of the .dist-info folder beside it (where importlib.metadata
    reads it) without importing importlib.metadata (~10 ms of the 0.3 s a config error may take); from
    importlib.metadata where there is no one such folder (an editable or unusual install)."""
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        site = Path(next(iter(spec.submodule_search_locations))).parent
        prefix = f"{package.replace('-', '_')}-"
        found = [p.name for p in site.glob(f"{prefix}*.dist-info")]
        if len(found) == 1:
            return found[0][len(prefix) : -len(".dist-info")]
    from importlib import metadata

    return metadata.version(package)


def verl_schemas() -> BackendSchemas:
    """Every dataclass a `_target_` in verl's config folder names, with the ones their fields name."""
    d = verl_config_dir()
    stamp = max(f.stat().st_mtime_ns for f in d.rglob("*.yaml"))
    known = _BY_FILES.get((str(d), stamp))
    if known is not None:
        # read in this process for these files (another verl writes other files): a plan asks once per key it
        # checks, and reading verl's version from its metadata costs more than the rest (~1.5 ms)
        return known
    portable = repr((_SCHEMA_VERSION, installed_version("verl"), verl_facts.RUNTIME_RANGES))
    key = repr((portable, str(d), stamp))
    if key not in _MEMO:

        def build() -> BackendSchemas:
            import dataclasses

            from trainctl.silence import quiet

            targets = sorted({t for f in d.rglob("*.yaml") for t in _TARGET.findall(f.read_text())})
            out = BackendSchemas()
            extra = _ranges(verl_facts.RUNTIME_RANGES)
            with quiet():
                for target in targets:
                    try:
                        cls = _locate(target)
                    except (ImportError, AttributeError):
                        continue  # an optional engine (megatron, veomni, ...) that is not installed
                    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
                        continue
                    found = schemas_of(cls, extra)
                    out.classes.update(found)
                    out.targets[target] = f"{cls.__module__}.{cls.__qualname__}"
            return out

        _MEMO[key] = _cached("verl", key, portable, build)
    _BY_FILES[(str(d), stamp)] = _MEMO[key]
    return _MEMO[key]


def trl_root(family: str) -> str:
    """The flat schema of one TRL trainer's backend config: its config's and ModelConfig's fields side by side, and
    the data keys."""
    return f"trl-{family}"


# each flat root -> the names of the dataclasses it merges, the first declaring first (naming a field's class)
TRL_ROOTS: dict[str, tuple[str, ...]] = {
    trl_root(t.family): (t.config.split(":")[1], "ModelConfig") for t in TRAINERS.values()
}


def trl_schemas() -> BackendSchemas:
    """Every TRL trainer's config (DPOConfig, RewardConfig, ...) with ModelConfig, as one flat schema per trainer (the
    trl backend config is flat)."""
    key = _trl_key()
    if key not in _MEMO:

        def build() -> BackendSchemas:
            from trainctl.config.types import FieldInfo, Spec
            from trainctl.runtime.trl_args import load_class
            from trainctl.silence import quiet

            with quiet():
                from trl import ModelConfig

                out = BackendSchemas()
                for trainer in TRAINERS.values():
                    root = ClassSchema(trl_root(trainer.family))
                    for cls in (load_class(trainer.config), ModelConfig):
                        found = schemas_of(cls)
                        out.classes.update(found)
                        for field_name, info in found[f"{cls.__module__}.{cls.__qualname__}"].fields.items():
                            root.fields.setdefault(field_name, info)
                    for name in DATA_KEYS:
                        root.fields[name] = FieldInfo(Spec("union", of=(Spec("str"), Spec("none"))))
                    out.classes[root.name] = root
            return out

        _MEMO[key] = _cached("trl", key, key, build)
    return _MEMO[key]


def _trl_key() -> str:
    # TRL's arguments embed accelerate's config dataclasses: accelerate 1.16.0 added fields to them
    versions = (installed_version(p) for p in ("trl", "transformers", "accelerate"))
    return repr((_SCHEMA_VERSION, *versions))


def _portable_keys() -> dict[str, str]:
    return {
        "verl": repr((_SCHEMA_VERSION, installed_version("verl"), verl_facts.RUNTIME_RANGES)),
        "trl": _trl_key(),
    }


def write_shipped() -> list[Path]:
    """Read the installed verl's and TRL's schemas afresh and write them where trainctl ships them."""
    import shutil

    _MEMO.clear()
    with _fresh_cache():
        found = {"verl": verl_schemas(), "trl": trl_schemas()}
    shutil.rmtree(SHIPPED, ignore_errors=True)
    written = []
    for name, key in _portable_keys().items():
        f = shipped_file(name, key)
        paths.atomic_write_text(f, json.dumps(found[name].to_json(), indent=0, sort_keys=True) + "\n")
        written.append(f)
    return written


def _fresh_cache():
    """A context with an empty cache and no shipped files in the way (so the schemas are read, not loaded)."""
    import contextlib
    import os
    import tempfile

    @contextlib.contextmanager
    def ctx():
        global SHIPPED
        shipped, old = SHIPPED, os.environ.get("TRAINCTL_CACHE")
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["TRAINCTL_CACHE"] = tmp
            SHIPPED = Path(tmp) / "none"
            _MEMO.clear()
            _BY_FILES.clear()
            try:
                yield
            finally:
                SHIPPED = shipped
                if old is None:
                    os.environ.pop("TRAINCTL_CACHE", None)
                else:
                    os.environ["TRAINCTL_CACHE"] = old
                _MEMO.clear()
                _BY_FILES.clear()

    return ctx()


if __name__ == "__main__":
    for f in write_shipped():
        print(f"wrote {f}")
