"""The built-in calculator's arithmetic: Python's parser, a whitelist of nodes, bounded sizes."""

from __future__ import annotations

import pytest

from tests.shared import processes_with
from trainctl.runtime.tools.calculator import CalculatorError, calculate


@pytest.mark.parametrize(
    "expression,value",
    [
        ("6 * 7", "42"),
        ("12 * (3 + 4)", "84"),
        ("-3 - -4", "1"),
        ("7 / 2", "3.5"),
        ("8 / 4", "2"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2 ** 10", "1024"),
        ("1 / 3", "0.3333333333"),
        (" 1.5e3 + 1 ", "1501"),
    ],
)
def test_arithmetic(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize(
    "expression,reason",
    [
        ("__import__('os').system('true')", "unsupported syntax"),
        ("(1).__class__", "unsupported syntax"),
        ("x + 1", "unsupported syntax: 'x'"),
        ("[1, 2][0]", "unsupported syntax"),
        ("True + 1", "unsupported syntax: 'True'"),
        ("'a' * 3", "unsupported syntax"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("9 ** 9 ** 9", "exponent 387420489 is too large"),
        ("10 ** 60 * 10 ** 60", "the result is too large"),
        ("(-8) ** 0.5", "not a real number"),
        ("1 +", "not an arithmetic expression"),
        ("", "the expression is empty"),
        ("1" * 201, "too long (201 characters"),
    ],
)
def test_what_it_refuses(expression, reason):
    with pytest.raises(CalculatorError, match=reason.replace("(", r"\(").replace("*", r"\*")):
        calculate(expression)


def test_over_stdio_it_answers_a_burst_of_calls_without_worker_threads():
    """A run's calls arrive in bursts (every trajectory's turn ends together): the calculator reads and writes its
    pipes on its event loop, where the SDK's stdio transport hops to a worker thread for each line (3 a call)."""
    import asyncio
    import subprocess
    import sys
    import time

    import psutil

    from trainctl.mcp.connection import Connection
    from trainctl.mcp.results import result_text
    from trainctl.mcp.specs import ServerSpec
    from trainctl.runtime.tools import calculator

    spec = ServerSpec(name="calculator", transport="stdio", command=sys.executable, args=(calculator.__file__,))

    # calculators this worker's earlier tests left running (their own to stop) are not this test's server
    before = {p.pid for p in processes_with(psutil.Process().children(), calculator.__file__)}

    async def burst():
        conn = Connection(spec)
        await conn.open(60)
        try:
            results = await asyncio.gather(
                *(conn.call("calculator", {"expression": f"{i} * 3 + 4"}, 30) for i in range(48)),
                conn.call("calculator", {"expression": "1 / 0"}, 30),
            )
            (server,) = [
                p for p in processes_with(psutil.Process().children(), calculator.__file__) if p.pid not in before
            ]
            return [result_text(r) for r in results], server.num_threads()
        finally:
            await conn.close()

    # an earlier test's exited child that nobody reaped yet, as CI's worker had: its command line is unreadable
    unreaped = subprocess.Popen(["true"])
    while psutil.Process(unreaped.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    try:
        texts, threads = asyncio.run(burst())
    finally:
        unreaped.wait()
    assert texts[:48] == [(str(i * 3 + 4), False) for i in range(48)]
    assert texts[48][1] is True and "division by zero" in texts[48][0]
    assert threads == 1
