"""`trainctl jobs ...` (trainctl.cli.jobs): which cluster, before any connection is tried."""

from __future__ import annotations


def test_without_an_address_it_asks_which_cluster(cli, no_processes):
    result = cli("jobs", "ls")
    assert result.exit_code == 1
    assert "Error: which cluster? No --address, RAY_ADDRESS or hardware option with a ray_address." in result.stderr
    assert "Hint: trainctl jobs ls --address http://HEAD_IP:8265" in result.stderr


def test_the_address_comes_from_a_hardware_option(cli, monkeypatch):
    from trainctl.cli import jobs

    monkeypatch.setenv("RAY_ADDRESS", "http://10.1.2.3:8265")
    assert jobs._address(None, "4x8gpu") == "http://10.1.2.3:8265"
    result = cli("jobs", "ls", "--hardware", "4x8gpuu")
    assert result.exit_code == 1 and "Did you mean '4x8gpu'?" in result.stderr
