"""Native solvers in a child process (`cefl_opt.solvers.isolation`): outcomes and exceptions come
back, a crash becomes a NativeCrash naming the solver, the signal and the last progress, and an
interrupted or dying parent leaves no child behind. The CLI turns an abort injected inside SCIP,
Ipopt or PyNumero into exit 4 with one message and nothing written."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import live

from cefl_opt.solvers.base import SolverError
from cefl_opt.solvers.isolation import (Isolated, NativeCrash, call_isolated, in_child,
                                        report_progress, run_together)


def _gone(pid: int, wait: float = 10.0) -> bool:
    """True once `pid` no longer exists (or is a zombie of another parent, reaped soon)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if not live([pid]):
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------------- outcomes
def test_the_childs_return_value_comes_back():
    assert call_isolated(lambda a, b: {"sum": a + b, "child": in_child()}, 2, 3,
                         label="x") == {"sum": 5, "child": True}
    assert not in_child()


def test_the_childs_exception_is_raised_with_its_type():
    def fail():
        raise ValueError("option 'gap' must be a finite number, got nan")
    with pytest.raises(ValueError, match="option 'gap' must be a finite number"):
        call_isolated(fail, label="x")


def test_an_unpicklable_exception_becomes_a_solver_error_naming_its_type():
    class Local(Exception):     # a local class cannot be pickled
        pass

    def fail():
        raise Local("deep inside")
    with pytest.raises(SolverError, match="Local: deep inside"):
        call_isolated(fail, label="x")


def test_a_large_result_comes_back_whole():
    import numpy as np
    a = call_isolated(lambda: np.arange(2_000_000, dtype=float), label="x")  # 16 MB > a pipe
    assert a.shape == (2_000_000,) and a[-1] == 1_999_999.0


# ---------------------------------------------------------------------- crashes
def test_an_abort_becomes_a_native_crash_with_signal_and_time():
    with pytest.raises(NativeCrash) as e:
        call_isolated(os.abort, label="SCIP")
    assert e.value.signal_name == "SIGABRT"
    assert str(e.value).startswith("no solution: SCIP aborted (SIGABRT) after ")
    assert isinstance(e.value, SolverError)     # the CLI's exit 4


def test_a_crash_message_quotes_the_last_progress():
    def work():
        report_progress(incumbent=1.5, bound=0.25, at_s=1.0)
        report_progress(incumbent=1.25, at_s=2.0)      # bound kept from the first report
        os.kill(os.getpid(), signal.SIGSEGV)
    with pytest.raises(NativeCrash) as e:
        call_isolated(work, label="SCIP")
    assert e.value.signal_name == "SIGSEGV"
    assert e.value.progress == {"incumbent": 1.25, "bound": 0.25, "at_s": 2.0}
    assert "last reported: incumbent 1.25, bound 0.25, at_s 2" in str(e.value)


def test_an_exit_without_outcome_is_a_crash_too():
    with pytest.raises(NativeCrash, match=r"Ipopt exited with status 3 and no result") as e:
        call_isolated(lambda: os._exit(3), label="Ipopt")
    assert e.value.signal_name is None


def test_progress_outside_a_child_is_a_no_op():
    report_progress(incumbent=1.0)          # nothing to send to, nothing raised


# ---------------------------------------------------------------------- the parent's signals
def test_an_interrupt_while_waiting_kills_the_child(tmp_path):
    pidfile = tmp_path / "pid"

    def sleeper():
        pidfile.write_text(str(os.getpid()))
        time.sleep(60)

    _interrupted_after(1.0, lambda: call_isolated(sleeper, label="x"))
    assert _gone(int(pidfile.read_text()), wait=1.0)


def _interrupted_after(seconds: float, call) -> None:
    """`call()` interrupted by a KeyboardInterrupt raised in this process after `seconds`
    (SIGALRM, as Ctrl-C would): it must end by raising it."""
    def ring(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGALRM, ring)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        with pytest.raises(KeyboardInterrupt):
            call()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_the_child_dies_with_its_parent(tmp_path):
    pidfile = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import os, time
        from cefl_opt.solvers.isolation import call_isolated
        def sleeper():
            open({str(pidfile)!r}, "w").write(str(os.getpid()))
            time.sleep(60)
        call_isolated(sleeper, label="x")
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        end = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < end:
            time.sleep(0.05)
        child = int(pidfile.read_text())
    finally:
        parent.kill()
        parent.wait()
    assert _gone(child)


# ---------------------------------------------------------------------- several children
def _meet(here: Path, there: Path, patience: float):
    """Announce `here`, then wait up to `patience` s for `there`: it succeeds only if the
    other child runs at the same time."""
    here.touch()
    end = time.monotonic() + patience
    while not there.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"{there.name} never came")
        time.sleep(0.02)
    return here.name


def test_children_run_together_up_to_at_once_and_come_back_in_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ended = run_together([lambda: Isolated(_meet, a, b, 60.0, label="x"),
                          lambda: Isolated(_meet, b, a, 60.0, label="x")], at_once=2)
    assert [c.result() for c in ended] == ["a", "b"]
    assert all(c.done and c.seconds > 0 for c in ended)


def test_at_once_1_runs_one_child_at_a_time(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ended = run_together([lambda: Isolated(_meet, a, b, 1.0, label="x"),
                          lambda: Isolated(_meet, b, a, 1.0, label="x")], at_once=1)
    with pytest.raises(TimeoutError, match="b never came"):
        ended[0].result()             # the second had not started
    assert ended[1].result() == "b"   # the first had ended: its file was there


def test_a_start_that_returns_none_runs_nothing_and_keeps_its_place():
    ended = run_together([lambda: None, lambda: Isolated(lambda: 7, label="x"), lambda: None,
                          lambda: None], at_once=1)
    assert ended[0] is None and ended[2] is None and ended[3] is None
    assert ended[1].result() == 7
    assert run_together([lambda: None], at_once=2) == [None]     # nothing to wait for


def test_one_childs_crash_or_exception_leaves_the_others_results():
    def fail():
        raise ValueError("bad")
    ended = run_together([lambda: Isolated(os.abort, label="SCIP"),
                          lambda: Isolated(lambda: 7, label="x"),
                          lambda: Isolated(fail, label="x"),
                          lambda: Isolated(lambda: 8, label="x")], at_once=2)
    with pytest.raises(NativeCrash, match="SCIP aborted"):
        ended[0].result()
    with pytest.raises(ValueError, match="bad"):
        ended[2].result()
    assert ended[1].result() == 7 and ended[3].result() == 8


def test_an_interrupt_kills_every_child_running_together(tmp_path):
    def sleeper(name):
        (tmp_path / name).write_text(str(os.getpid()))
        time.sleep(60)

    _interrupted_after(1.5, lambda: run_together(
        [lambda: Isolated(sleeper, "p1", label="x"), lambda: Isolated(sleeper, "p2", label="x"),
         lambda: Isolated(sleeper, "p3", label="x")], at_once=2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p1", "p2"]   # the third never began
    assert all(_gone(int((tmp_path / n).read_text()), wait=1.0) for n in ("p1", "p2"))


def test_a_start_that_fails_kills_the_children_started_before_it(tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real, forks = os.fork, []

    def fork():
        if forks:
            raise OSError(11, "Resource temporarily unavailable")
        forks.append(real())
        return forks[-1]

    monkeypatch.setattr(os, "fork", fork)
    with pytest.raises(OSError, match="Resource temporarily unavailable"):
        run_together([lambda: Isolated(time.sleep, 60, label="x"),
                      lambda: Isolated(time.sleep, 60, label="x")], at_once=2)
    assert _gone(forks[0], wait=1.0)
    assert list(tmp_path.iterdir()) == []          # neither scratch folder is left


def test_a_signal_while_a_child_starts_acts_once_it_is_registered(tmp_path, monkeypatch):
    """Ctrl-C right after the fork (before the parent holds the child's pipe) is acted on once
    the child is registered, so the child is killed and its scratch folder removed."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real, forks = os.fork, []

    def fork():
        pid = real()
        if pid:                       # the parent, just after the fork
            forks.append(pid)
            os.kill(os.getpid(), signal.SIGINT)
        return pid
    monkeypatch.setattr(os, "fork", fork)
    with pytest.raises(KeyboardInterrupt):
        call_isolated(time.sleep, 60, label="x")
    assert _gone(forks[0], wait=1.0)
    assert list(tmp_path.iterdir()) == []


def test_a_held_sigterm_acts_as_its_handler_says(monkeypatch):
    from cefl_opt.solvers import isolation

    class Terminated(Exception):
        pass

    def handler(n, f):
        raise Terminated
    old = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(Terminated):
            with isolation._signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                done = True                # the block runs to its end first
        assert done and signal.getsignal(signal.SIGTERM) is handler
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with isolation._signals_held():    # an ignored signal stays ignored
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, old)


# ---------------------------------------------------------------------- the command line
# Each script patches a native call so that it aborts the process from inside the solver, then
# runs the CLI; the fork makes the child inherit the patch.
INJECT = {
    # inside SCIP: its first progress report (an event callback called by SCIP's C code)
    "scip": "import cefl_opt.solvers.scip as s\n"
            "real = s.report_progress\n"
            "def boom(**kw):\n"
            "    real(**kw); os.abort()\n"
            "s.report_progress = boom\n",
    # inside Ipopt: its intermediate callback (called by Ipopt's C++ code every iteration)
    "greedy-rate": "from pyomo.contrib.pynumero.interfaces import cyipopt_interface as c\n"
                   "c.CyIpoptNLP.intermediate = lambda *a, **k: os.abort()\n",
    # inside the AMPL Solver Library's derivatives (PyNumero), which decentralized uses,
    # as the node NLPs bind them (`node_structure._direct_calls`)
    "decentralized": "from cefl_opt.solvers import node_structure as n\n"
                     "def bind(asl):\n"
                     "    asl.eval_jac_g = lambda *a, **k: os.abort()\n"
                     "n._direct_calls = bind\n",
}
NATIVE = {"scip": "SCIP", "greedy-rate": "Ipopt", "decentralized": "PyNumero"}


@pytest.mark.parametrize("method", sorted(INJECT))
def test_cli_turns_an_injected_native_abort_into_exit_4(tmp_path, method):
    from cefl_opt.generator import make_instance
    net = tmp_path / "net.json"
    make_instance("tiny", rounds=2, seed=3).save(net)
    before = sorted([p.name for p in tmp_path.iterdir()] + ["tmp"])
    out, trace = tmp_path / "sol.json", tmp_path / "trace.csv"
    argv = ["solve", str(net), "--method", method, "--out", str(out)]
    argv += ["--time-limit", "30"] if method == "scip" else []
    argv += ["--trace", str(trace)] if method == "decentralized" else []
    script = "import os, sys\n" + INJECT[method] + \
             f"from cefl_opt.cli import main\nsys.exit(main({argv!r}))\n"
    tmpdir = tmp_path / "tmp"             # the child's own temporary folder: other tests,
    tmpdir.mkdir()                        # running in parallel, use /tmp
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "TMPDIR": str(tmpdir)})
    assert p.returncode == 4, p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("cefl-opt:")]
    assert len(err) == 1 and err[0].startswith(
        f"cefl-opt: error: no solution: {NATIVE[method]}"), p.stderr
    assert "aborted (SIGABRT) after" in err[0]
    if method == "scip":          # the abort came after SCIP's first report: it is quoted
        assert "last reported: incumbent" in err[0]
    assert "Traceback" not in p.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before        # nothing written
    assert os.listdir(tmpdir) == []                                     # nor left behind


def test_the_childs_temporaries_are_removed_however_it_ends(tmp_path, monkeypatch):
    """The child writes its temporary files (Pyomo's .nl files, say) to a folder of its own,
    which the parent removes: after a result, an exception and a crash alike."""
    import tempfile
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)

    def leave(then):
        fd, path = tempfile.mkstemp(suffix="pynumero.nl")
        os.close(fd)
        assert Path(path).parent.parent == tmp_path       # inside the child's own folder
        return then()

    assert call_isolated(leave, lambda: 1, label="x") == 1
    with pytest.raises(ValueError):
        call_isolated(leave, lambda: (_ for _ in ()).throw(ValueError("x")), label="x")
    with pytest.raises(NativeCrash):
        call_isolated(leave, os.abort, label="x")
    assert list(tmp_path.iterdir()) == []
