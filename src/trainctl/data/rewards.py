"""Custom reward functions: `path/to/file.py:function`, checked by reading the file, never by running it."""

from __future__ import annotations

import ast
from pathlib import Path

from trainctl.errors import Problem

# verl's reward managers call compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)
VERL_KWARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
EXAMPLE = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs): ..."


def check_reward_fn(path: str | None, name: str | None, key: str = "reward.fn") -> list[Problem]:
    if not path:
        return []
    file = Path(path).expanduser()
    name = name or "compute_score"
    if not file.is_file():
        return [Problem(f"{key}: the reward file {file} does not exist.", key=key, hint=f"write it: {EXAMPLE}")]
    try:
        tree = ast.parse(file.read_text(), filename=str(file))
    except SyntaxError as e:
        return [Problem(f"{key}: {file}:{e.lineno} is not valid Python ({e.msg}).", key=key)]
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    if name not in funcs:
        known = ", ".join(sorted(funcs)) or "none"
        return [
            Problem(
                f"{key}: {file} has no top-level function {name!r} (it has: {known}).",
                key=key,
                hint=f"{key}={file}:FUNCTION",
            )
        ]
    args = funcs[name].args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    takes_any = args.kwarg is not None
    missing = [k for k in VERL_KWARGS if k not in names and not takes_any]
    positional_only = [a.arg for a in args.posonlyargs if a.arg in VERL_KWARGS]
    n_defaults = len(args.defaults)
    plain = [*args.posonlyargs, *args.args]
    required = [a.arg for a in plain[: len(plain) - n_defaults]] + [
        a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None
    ]
    unknown_required = [r for r in required if r not in VERL_KWARGS]
    problems = []
    if missing or positional_only:
        problems.append(
            Problem(
                f"{key}: {name}() in {file} does not take {', '.join(missing or positional_only)} "
                f"(verl passes {', '.join(VERL_KWARGS)} as keywords).",
                key=key,
                hint=EXAMPLE,
            )
        )
    if unknown_required:
        problems.append(
            Problem(
                f"{key}: {name}() in {file} requires {', '.join(unknown_required)}, which verl never passes.",
                key=key,
                hint="give them defaults, or read them from reward.custom_reward_function.reward_kwargs",
            )
        )
    return problems
