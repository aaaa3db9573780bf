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
