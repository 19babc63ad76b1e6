"""`benchmarks.common.run_child`: its child, in a session of its own, is killed with it when
the benchmark that started it dies, so that no worker outlives an interrupted benchmark."""
import os
import signal
import subprocess
import sys
import time

from conftest import live, live_children

from benchmarks import common

PARENT = """
import sys
from benchmarks import common
common.run_child([sys.executable, "-c",
                  "import os, time; print(os.getpid(), flush=True); time.sleep(120)"], 300)
"""


def test_the_child_dies_with_the_benchmark_that_started_it():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=common.ROOT)
    deadline, child = time.monotonic() + 60, None
    while child is None and time.monotonic() < deadline:
        child = next(iter(live_children(parent.pid)), None)
        time.sleep(0.1)
    try:
        assert child is not None and live([child])
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while live([child]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert live([child]) == []
    finally:                                   # a failure leaves nothing running either
        parent.kill()
        if child is not None and live([child]):
            os.kill(child, signal.SIGKILL)


def test_a_preexec_function_still_runs_in_the_child():
    run = common.run_child([sys.executable, "-c", "import os; print(os.environ['MARK'])"], 60,
                           preexec_fn=lambda: os.environ.__setitem__("MARK", "set"))
    assert run.rc == 0 and run.output.strip() == "set"
