"""The field declarations trainctl ships for the verl and TRL it pins are what those packages declare."""

from __future__ import annotations

import json
import subprocess
import sys

from trainctl.backends import schemas


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
