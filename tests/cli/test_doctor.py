from __future__ import annotations


def test_doctor_on_this_machine(cli):
    result = cli("doctor")
    assert result.exit_code == 0, result.output
    assert "verl CPU plugin  registered" in result.stdout
    assert "hardware=cpu" in result.stdout


def test_doctor_says_what_is_missing(cli):
    import torch

    result = cli("doctor", "hardware=8gpu")
    if torch.cuda.device_count() >= 8:
        assert result.exit_code == 0
        return
    assert result.exit_code == 1
    assert f"wants 1 node(s) x 8 GPU(s); this machine has {torch.cuda.device_count()}" in result.stdout
    assert "Error: 1 check(s) failed: hardware=8gpu." in result.stderr


def test_doctor_piped_prints_its_lines_and_nothing_else(tmp_path):
    """As a user pipes it (`trainctl doctor | grep ...`), in a fresh process (TRL warns once a process, when
    trainctl.doctor finds trl.experimental): no library warning on stderr (trainctl's debug log has it), and each line
    as long as its text, the longest (the versions) padding none of the others."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TRAINCTL_DEBUG", "TRL_EXPERIMENTAL_SILENCE")}
    proc = subprocess.run(
        [sys.executable, "-m", "trainctl", "doctor"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.split()[:3] == ["ok", "verl", "CPU"] for line in lines), proc.stdout
    assert [line for line in lines if line != line.rstrip()] == [], "trailing spaces"
    versions = next(line for line in lines if line.split()[0] == "versions")
    assert all(len(line) < len(versions) for line in lines if line is not versions)
