"""Errors the library raises. The CLI turns them into `Error:` / `Hint:` lines and an exit code.

The library never prints or exits: every user-facing failure is one of these, carrying a message that names the
key, file or value, and a hint that is a runnable fix where one exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Exit codes scripts can rely on.
EXIT_OK = 0
EXIT_PROBLEM = 1  # a problem with the user's config, data, model or checkpoint
EXIT_USAGE = 2  # the command line itself is malformed
EXIT_RUN_FAILED = 3  # the trainer (or the Ray job) failed; its own exit code is in the message
EXIT_TOOL_ERROR = 4  # `trainctl tools call`: the tool answered with an error
EXIT_NO_ANSWER = 5  # `trainctl tools call`: no answer (the call timed out, the server went away)
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM

# what each exit code means, in the words the generated reference shows (trainctl.docsgen: docs/reference/metrics.md)
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done",
    EXIT_PROBLEM: "a problem with the config, data, model or checkpoint (a training run: nothing was started)",
    EXIT_USAGE: "a usage error: the command line itself is malformed (a misspelt option, a malformed override)",
    EXIT_RUN_FAILED: "the trainer (or the Ray or Slurm job) failed after it started: its exit code and the end of its "
    "log are shown",
    EXIT_TOOL_ERROR: "`trainctl tools call`: the tool answered with an error",
    EXIT_NO_ANSWER: "`trainctl tools call`: no answer (the call timed out, the server went away)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C, SIGTERM, SIGHUP): every process the run started is stopped",
}


class TrainctlError(Exception):
    """A failure the user can act on: a message, optional detail lines and a hint."""

    exit_code = EXIT_PROBLEM

    def __init__(self, message: str, hint: str | None = None, details: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = list(details or [])

    def __str__(self) -> str:
        lines = [self.message, *self.details]
        if self.hint:
            lines.append(f"Hint: {self.hint}")
        return "\n".join(lines)


class UsageError(TrainctlError):
    """The command line cannot be understood (a misspelt option, a malformed override)."""

    exit_code = EXIT_USAGE


class RunFailed(TrainctlError):
    """The training process (or Ray job) failed after starting."""

    exit_code = EXIT_RUN_FAILED


class RunInterrupted(TrainctlError):
    """Ctrl-C or SIGTERM stopped a run."""

    exit_code = EXIT_INTERRUPTED


@dataclass
class Problem:
    """One thing wrong with a config, found before anything starts."""

    message: str
    key: str | None = None
    details: list[str] = field(default_factory=list)
    hint: str | None = None
    severity: str = "error"  # or "warning": reported, but does not stop a run

    @property
    def is_error(self) -> bool:
        return self.severity == "error"


class ConfigProblems(TrainctlError):
    """Every error found in a config, reported together."""

    def __init__(self, problems: list[Problem], warnings: list[Problem] | None = None):
        self.problems = problems
        self.warnings = list(warnings or [])
        n = len(problems)
        super().__init__(f"{n} problem{'s' if n != 1 else ''} in this config")

    def __str__(self) -> str:
        lines = [f"{self.message}:"]
        for i, p in enumerate(self.problems, 1):
            lines.append(f"  {i}. {p.message}")
            lines.extend(f"     {d}" for d in p.details)
            if p.hint:
                lines.append(f"     Hint: {p.hint}")
        return "\n".join(lines)
