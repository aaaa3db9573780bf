"""`trainctl chat` for real, with the tiny tool-calling model: in a pseudo-terminal (a person typing) with
`tools=calculator` (trainctl's calculator MCP server started and really called through the bridge, its results shown
as they happen), and through a pipe (a script) with the same calculator as a Python function tool."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

from trainctl.runtime.tools.calculator import calculate

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """A command in a pseudo-terminal that the test types into."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.screen = ""

    def read_until(self, text: str, after: int = 0, timeout: float = 180) -> str:
        """What the terminal showed from `after` on, once it shows `text` there."""
        end = time.monotonic() + timeout
        while text not in self.screen[after:]:
            assert time.monotonic() < end, f"no {text!r} within {timeout} s; the terminal shows:\n{self.screen}"
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    self.screen += ANSI.sub("", os.read(self.master, 65536).decode("utf-8", errors="replace"))
                except OSError:  # the command exited
                    assert text in self.screen[after:], f"exited before showing {text!r}:\n{self.screen}"
        return self.screen[after:]

    def type(self, line: str) -> str:
        """Type a line and wait for the next prompt; returns what was shown meanwhile."""
        mark = len(self.screen)
        os.write(self.master, (line + "\n").encode())
        return self.read_until("you> ", after=mark + len(line))

    def close(self, timeout: float = 60) -> int:
        """Ctrl-D; the exit code once the command has stopped its tools and exited (what it shows meanwhile is
        read, so that it never waits on a full terminal)."""
        # a Ctrl-D typed before readline has put the terminal in raw mode (it does at each prompt) is lost by the
        # terminal's switch of modes; a person cannot type that fast
        end = time.monotonic() + 30
        while termios.tcgetattr(self.master)[3] & termios.ICANON and time.monotonic() < end:
            time.sleep(0.05)
        os.write(self.master, b"\x04")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            ready, _, _ = select.select([self.master], [], [], 0.5)
            try:
                if ready:
                    self.screen += ANSI.sub("", os.read(self.master, 65536).decode("utf-8", errors="replace"))
            except OSError:  # every holder of the terminal has exited
                break
        os.close(self.master)
        return self.proc.wait(10)


def _calls(text: str) -> list[tuple[str, str]]:
    """(expression, result) of each calculator call and result the chat showed."""
    found = re.findall(r"→ calculator\((\{.*?\})\)\s*\n\s*← (\S+)", text)
    return [(json.loads(args)["expression"], result) for args, result in found]


def test_chat_in_a_terminal_calls_the_calculator_and_takes_commands(tiny_tools, tool_question):
    term = Terminal([sys.executable, "-m", "trainctl", "chat", "tiny-tools", "tools=calculator"], dict(os.environ))
    try:
        banner = " ".join(term.read_until("you> ").split())  # long lines wrap at the terminal's width
        assert "trainctl chat" in banner and "tools: calculator" in banner and "greedy" in banner, banner
        shown = term.type(tool_question)
        calls = _calls(shown)
        assert calls, f"no calculator call shown:\n{shown}"
        for expression, result in calls:  # the real server's answer to what the model asked
            assert result == calculate(expression)
        assert "model>" in shown.split("←")[-1], "the model went on after the result"
        assert "temperature 0.5" in term.type("/temp 0.5")
        assert "/temp x: not a number" in term.type("/temp x")
        assert "system prompt set" in term.type("/system Answer with the number only.")
        assert "conversation reset" in term.type("/reset")
        assert "unknown command /nope" in term.type("/nope")
    finally:
        code = term.close()
    assert code == 0, term.screen[-3000:]


def test_chat_through_a_pipe_answers_one_line_per_question(cli, tiny_tools, tool_question, monkeypatch):
    # the calculator as a Python function (tools=calculator-fn): the function tools' path, with no server to start
    read, write = os.pipe()
    os.write(write, f"{tool_question}\n/reset\n\n{tool_question}\n".encode())
    os.close(write)
    with os.fdopen(read) as pipe:
        monkeypatch.setattr(sys, "stdin", pipe)
        result = cli("chat", "tiny-tools", "tools=calculator-fn", "--json")
    assert result.exit_code == 0, result.output[-3000:]
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["input"] for a in answers] == [tool_question, tool_question]
    assert answers[0] == answers[1], "after /reset the same question gets the same (greedy) answer"
    calls = answers[0]["tool_calls"]
    assert calls and all(c["name"] == "calculator" and not c["error"] for c in calls), calls
    assert all(c["result"] == calculate(c["arguments"]["expression"]) for c in calls)
    assert _calls(result.stderr) == [(c["arguments"]["expression"], c["result"]) for c in calls] * 2
    assert "conversation reset" in result.stderr
