"""The call log every tool class writes in a worker (trainctl.runtime.mcp_bridge.MCPTool,
trainctl.runtime.python_tool.PythonFunctionTool): one JSON line per call, in <run>/tools/calls/calls-PID.jsonl, a
file per process (workers never share one). The tool metrics (trainctl.runtime.tool_metrics) and the trajectories
read it."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path


class CallLog:
    """Appends a record per call to this process's file in `folder`."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        path = self.folder / f"calls-{os.getpid()}.jsonl"
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with contextlib.suppress(OSError), self._lock:  # a log that cannot be written must not stop the run
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(line)


def read_call_logs(folder: str | Path) -> list[dict]:
    """Every record in `folder`, file by file (each file in the order its process wrote it)."""
    rows = []
    for path in sorted(Path(folder).glob("calls-*.jsonl")):
        rows.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return rows
