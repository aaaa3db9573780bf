"""trainctl.backends.schemas: the field declarations of verl's and TRL's config dataclasses, shipped for the versions
trainctl pins (and equal to what those packages declare), cached, found by the `_target_` verl's YAML names."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from trainctl import paths
from trainctl.backends import schemas
from trainctl.config.types import ClassSchema, FieldInfo, Spec
from trainctl.facts.trl import DATA_KEYS, TRAINERS


def test_the_shipped_schemas_are_the_installed_ones():
    shipped = {}
    for name, key in schemas._portable_keys().items():
        f = schemas.shipped_file(name, key)
        assert f.is_file(), f"no shipped {name} schema for the installed version: run `make schemas`"
        shipped[name] = json.loads(f.read_text())
    with schemas._fresh_cache():
        fresh = {"verl": schemas.verl_schemas().to_json(), "trl": schemas.trl_schemas().to_json()}
    for name in ("verl", "trl"):
        assert json.loads(json.dumps(fresh[name], sort_keys=True)) == shipped[name], f"{name} changed: make schemas"


def test_a_cold_cache_needs_no_import_of_verl_or_trl(tmp_path):
    code = (
        "import sys\n"
        "from trainctl.backends.schemas import trl_schemas, verl_schemas\n"
        "v, t = verl_schemas(), trl_schemas()\n"
        "heavy = [m for m in ('verl', 'trl', 'torch') if m in sys.modules]\n"
        "print(len(v.classes) > 40, 'trl-dpo' in t.classes, heavy)\n"
    )
    env = {"TRAINCTL_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "True True []", out


def test_verls_config_folder_is_found_without_importing_verl():
    folder = schemas.verl_config_dir()
    assert (folder / "ppo_trainer.yaml").is_file() and (folder / "sft_trainer_engine.yaml").is_file()
    assert folder == Path(importlib.util.find_spec("verl").submodule_search_locations[0]) / "trainer" / "config"


def test_an_installed_version_is_what_importlib_metadata_reads_without_importing_it():
    from importlib import metadata

    for package in ("verl", "trl", "transformers", "accelerate", "typing_extensions"):
        assert schemas.installed_version(package) == metadata.version(package), package
    code = "import sys\nfrom trainctl.backends import schemas\nschemas.installed_version('verl')\n"
    code += "print('importlib.metadata' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_target_finds_its_dataclass_however_the_yaml_spells_it():
    found = schemas.verl_schemas()
    actor = found.for_target("verl.workers.config.FSDPActorConfig")
    assert actor is not None and "ppo_mini_batch_size" in actor.fields
    # every spelling of a _target_ in verl's YAML names a dataclass that was read
    assert found.targets and all(found.for_target(t) is not None for t in found.targets)
    assert found.for_target("no.such.Config") is None
    assert set(found.by_name) == set(found.classes) | set(found.targets)


def test_trls_schema_is_one_flat_root_with_the_data_keys():
    root = schemas.trl_schemas().classes[schemas.trl_root("dpo")]
    assert {"beta", "learning_rate", "model_name_or_path", "lora_r", *DATA_KEYS} <= set(root.fields)
    for family in TRAINERS:  # one flat root per TRL trainer, each with the data keys
        fields = schemas.trl_schemas().classes[schemas.trl_root(family)].fields
        assert {"learning_rate", "lora_r", *DATA_KEYS} <= set(fields)


def test_backend_schemas_round_trip_through_json():
    one = schemas.BackendSchemas(
        {"a.B": ClassSchema("a.B", {"x": FieldInfo(Spec("int"), default=3)})}, {"a.b_alias.B": "a.B"}
    )
    back = schemas.BackendSchemas.from_json(json.loads(json.dumps(one.to_json())))
    assert back.to_json() == one.to_json() and back.for_target("a.b_alias.B").fields["x"].default == 3


def test_a_damaged_cache_is_rebuilt_and_a_good_one_is_read(tmp_path):
    built = []

    def build():
        built.append(1)
        return schemas.BackendSchemas({"a.B": ClassSchema("a.B")}, {})

    key = f"test-key {tmp_path}"  # one cache file of its own
    first = schemas._cached("test", key, "no shipped file", build)
    assert built == [1] and "a.B" in first.classes
    schemas._cached("test", key, "no shipped file", build)
    assert built == [1]  # read from the cache
    cache = paths.cache_dir() / f"schema-test-{hashlib.sha1(key.encode()).hexdigest()[:16]}.json"
    assert cache.is_file()
    cache.write_text("{damaged")
    assert "a.B" in schemas._cached("test", key, "no shipped file", build).classes and built == [1, 1]
