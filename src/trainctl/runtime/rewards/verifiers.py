"""env=verifiers' scorer (reward=env): the taskset's own rewards, through verifiers' Task.score, in verifiers' own
interpreter.

verl's reward loop calls compute_score in the trainer's interpreter, which cannot import verifiers (trainctl.envs.
verifiers says why). Each process that scores keeps one worker (trainctl.runtime.verifiers_worker `serve`) per
taskset, started at its first response and ended with the process (its stdin closes, or atexit closes it): a JSON
request a line in, a JSON answer a line out. verl scores a batch's responses concurrently (its naive manager runs
compute_score on a thread pool), so several requests are in flight at once, each answered by id; the worker scores
them concurrently too (verifiers' rewards are coroutines).

Each row (trainctl.envs.verifiers.rows) carries the task's wire data and how to reach the taskset; the worker rebuilds
the task, records the response as the trace's one sampled reply and awaits Task.score. The score is verifiers'
trace.reward (each reward's score times its weight, summed); `rewards/NAME` is each reward's own score and
`metrics/NAME` each @vf.metric, which verl keeps per response (validation reports their means per data_source, and
trainctl.runtime.env_metrics logs them per step: env/TASK/rewards/NAME).
"""

from __future__ import annotations

import atexit
import itertools
import json
import subprocess
import threading
from concurrent.futures import Future

from trainctl.runtime.trajectories import REWARD_KEY

# seconds to wait for one response's scores (the worker's start included, ~3 s of verifiers' import)
TIMEOUT = 300


class Worker:
    """One scoring worker in verifiers' interpreter, shared by the threads of this process."""

    def __init__(self, spec: dict):
        from trainctl.envs.verifiers import worker_argv, worker_env

        self.spec = spec
        self.proc = subprocess.Popen(
            worker_argv(spec["python"], spec, "serve"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=worker_env(spec.get("path") or []), text=True, bufsize=1,
        )  # fmt: skip
        first = self.proc.stdout.readline()  # {"ready": true}, or why it could not start
        said = json.loads(first) if first.startswith("{") else {"error": first.strip() or "no output"}
        if not said.get("ready"):
            self.proc.wait(timeout=10)
            raise RuntimeError(
                f"verifiers' worker for taskset {spec['id']!r} did not start ({said.get('stage', 'start')}): "
                f"{said.get('error')}"
            )
        self.ids = itertools.count()
        self.pending: dict[int, Future] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, name="verifiers-scores", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            answer = json.loads(line)
            with self.lock:
                future = self.pending.pop(answer.get("id"), None)
            if future is None:
                continue
            if "error" in answer:
                future.set_exception(RuntimeError(f"verifiers' Task.score failed: {answer['error']}"))
            else:
                future.set_result(answer)
        with self.lock:  # it ended: every response still waiting fails, naming it
            left, self.pending = list(self.pending.values()), {}
        for future in left:
            future.set_exception(RuntimeError(f"verifiers' worker ended (exit {self.proc.wait()}) before scoring"))

    def score(self, data: dict, response: str, turns: list[dict] | None = None) -> dict:
        future: Future = Future()
        request = {"data": data, "response": response, **({"turns": turns} if turns else {})}
        with self.lock:
            request_id = next(self.ids)
            self.pending[request_id] = future
            self.proc.stdin.write(json.dumps({"id": request_id, **request}) + "\n")
            self.proc.stdin.flush()
        return future.result(timeout=TIMEOUT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # its cue to finish what it has and end
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# spec (JSON) -> its worker in this process
_WORKERS: dict[str, Worker] = {}
_STARTING = threading.Lock()


def worker(spec_json: str) -> Worker:
    with _STARTING:
        found = _WORKERS.get(spec_json)
        if found is None or found.proc.poll() is not None:
            found = _WORKERS[spec_json] = Worker(json.loads(spec_json))
        return found


@atexit.register
def close_all() -> None:
    for w in list(_WORKERS.values()):
        w.close()
    _WORKERS.clear()


def score(solution_str: str, extra_info: dict) -> dict:
    """verifiers' scores of a response to the row `extra_info` describes: {score, rewards, metrics}. A trajectory
    with tools is scored whole: its turns (trainctl.runtime.trajectories) become the trace, tool calls and results
    included; verl's flattened response stands for a single reply."""
    turns = extra_info.get(REWARD_KEY)
    turns = json.loads(turns) if isinstance(turns, str) else None
    return worker(extra_info["spec"]).score(json.loads(extra_info["data"]), solution_str, turns)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    out = score(solution_str, extra_info or {})
    return {
        "score": float(out["score"]),
        **{f"rewards/{name}": float(value) for name, value in sorted(out["rewards"].items())},
        **{f"metrics/{name}": float(value) for name, value in sorted(out["metrics"].items()) if value is not None},
    }
