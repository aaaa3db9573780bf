"""verl's vLLM rollout on vLLM's CPU build: the pieces that make it run (the whole rollout runs in
tests/launch/test_vllm_rollout.py)."""

from __future__ import annotations

import subprocess
import sys


def test_the_cpu_build_answers_for_vllm_at_the_version_vllm_gives_it():
    # a fresh interpreter: verl's check runs once, at import (verl/third_party/vllm)
    code = """
import importlib.metadata as m
from trainctl.runtime.vllm_cpu import alias_cpu_build
alias_cpu_build()
print(m.version("vllm"))
from vllm.platforms import vllm_version_matches_substr
print(vllm_version_matches_substr("cpu"))
import verl.third_party.vllm as v
print(v.vllm_version)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0.31.0+cpu", "True", "0.31.0+cpu"]


def test_without_the_alias_verl_refuses_the_cpu_build():
    out = subprocess.run(
        [sys.executable, "-c", "import verl.third_party.vllm"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode != 0
    assert "vllm version None not supported" in out.stderr


def test_the_cpu_replica_is_registered_on_the_cpu_platform_only():
    code = """
import os, sys
os.environ["VERL_PLATFORM"] = sys.argv[1]
from verl.workers.rollout.replica import RolloutReplicaRegistry
loader = RolloutReplicaRegistry._registry["vllm"]
print(loader.args[0] if hasattr(loader, "args") else loader.__module__)
"""
    names = [
        subprocess.run([sys.executable, "-c", code, p], capture_output=True, text=True, timeout=300).stdout.strip()
        for p in ("cpu", "")
    ]
    assert names == ["CPUvLLMReplica", "verl.workers.rollout.replica"]
