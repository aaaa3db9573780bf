"""The call log the worker-side tool classes write: a file per process, whole lines, never an exception."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from trainctl.runtime.tool_calls import CallLog, read_call_logs


def test_threads_append_whole_lines_and_each_process_has_its_file(tmp_path):
    log = CallLog(tmp_path / "calls")

    def calls(i: int) -> None:
        for n in range(50):
            log.write({"tool": f"t{i}", "n": n, "result": "é" * 50})

    threads = [threading.Thread(target=calls, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    child = "import sys; from trainctl.runtime.tool_calls import CallLog; CallLog(sys.argv[1]).write({'tool': 'child'})"
    subprocess.run([sys.executable, "-c", child, str(tmp_path / "calls")], check=True)

    files = sorted(p.name for p in (tmp_path / "calls").iterdir())
    assert len(files) == 2 and f"calls-{os.getpid()}.jsonl" in files
    records = read_call_logs(tmp_path / "calls")
    assert len(records) == 201 and sum(r["tool"] == "child" for r in records) == 1
    for i in range(4):
        assert [r["n"] for r in records if r["tool"] == f"t{i}"] == list(range(50)), "each thread's calls in order"


def test_a_log_that_cannot_be_written_does_not_stop_the_call(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    CallLog(blocker / "calls").write({"tool": "x"})  # the folder cannot be made: the call goes on
    assert read_call_logs(tmp_path / "nowhere") == []
