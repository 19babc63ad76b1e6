"""`benchmarks.common.run_child`: its child, in a session of its own, is killed with it when
the benchmark that started it dies, so that no worker outlives an interrupted benchmark."""
import os
import signal
import subprocess
import sys
import time

from benchmarks import common

PARENT = """
import sys
from benchmarks import common
common.run_child([sys.executable, "-c",
                  "import os, time; print(os.getpid(), flush=True); time.sleep(120)"], 300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:                  # a zombie is gone for our purpose
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _child_of(pid: int) -> int | None:
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[1]) == pid:
            return int(entry)
    return None


def test_the_child_dies_with_the_benchmark_that_started_it():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=common.ROOT)
    deadline, child = time.monotonic() + 60, None
    while child is None and time.monotonic() < deadline:
        child = _child_of(parent.pid)
        time.sleep(0.1)
    try:
        assert child is not None and _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:                                   # a failure leaves nothing running either
        parent.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_preexec_function_still_runs_in_the_child():
    run = common.run_child([sys.executable, "-c", "import os; print(os.environ['MARK'])"], 60,
                           preexec_fn=lambda: os.environ.__setitem__("MARK", "set"))
    assert run.rc == 0 and run.output.strip() == "set"
