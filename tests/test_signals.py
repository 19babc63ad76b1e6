"""SIGINT and SIGTERM sent to a real `cefl-opt` process at several points of a solve or a run:
exit 130 (SIGINT) or 143 (SIGTERM), one line on stderr, nothing written, no temporary file or
report folder left, and no solver child process left running."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from benchmarks.bench_interrupts import signal_run

CODE = {signal.SIGINT: (130, "cefl-opt: interrupted\n"),
        signal.SIGTERM: (143, "cefl-opt: terminated\n")}


def _signal_after(argv: list[str], sig: int, delay: float, folder: Path):
    """Start the CLI, send `sig` after `delay` s; (returncode, stderr) once nothing is left."""
    r = signal_run(argv, sig, delay, folder)
    assert r["running_at_signal"], f"the command ended before the signal at {delay} s: {r}"
    assert r["processes_left"] == [], "a solver process outlived the command"
    assert r["temporaries_left"] == [], "a trace temporary was left"
    return r["returncode"], r["stderr"]


# (method, extra flags): each takes well over 10 s on the paper instance, loaded or not
SOLVES = [("scip", ["--time-limit", "120"]), ("ipopt-enum", ["--sweeps", "3"]),
          ("decentralized", [])]
POINTS = [(signal.SIGTERM, 0.5), (signal.SIGTERM, 2.5), (signal.SIGINT, 2.5)]


def _solve_points():
    """Every (solve, signal point) pair; in the default suite each solve meets one point and
    each point one solve (the diagonal), the other pairs are `slow`."""
    for i, (method, flags) in enumerate(SOLVES):
        for j, (sig, delay) in enumerate(POINTS):
            yield pytest.param(method, flags, sig, delay,
                               id=f"{signal.Signals(sig).name}@{delay}s-{method}",
                               marks=() if i == j else pytest.mark.slow)


@pytest.mark.parametrize("method,flags,sig,delay", list(_solve_points()))
def test_a_signal_during_a_solve_exits_cleanly(tmp_path, paper_net, method, flags, sig, delay):
    net = tmp_path / "net.json"
    net.write_bytes(paper_net.read_bytes())
    argv = ["solve", str(net), "--method", method, "--out", str(tmp_path / "s.json"), *flags]
    if method == "decentralized":
        argv += ["--trace", str(tmp_path / "t.csv")]
    code, err = _signal_after(argv, sig, delay, tmp_path)
    assert (code, err) == CODE[sig]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["net.json"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_command_line_loads_ends_it_cleanly(tmp_path, paper_net, sig):
    """The console script notes a signal from its first statement; one that arrives before the
    command line has loaded ends the command with its code and one line, having done nothing."""
    import subprocess
    import sys
    net = tmp_path / "net.json"
    net.write_bytes(paper_net.read_bytes())
    argv = ["solve", str(net), "--method", "decentralized", "--out", str(tmp_path / "s.json")]
    script = ("import os, signal, sys\n"
              "import cefl_opt._entry as entry\n"
              f"os.kill(os.getpid(), {int(sig)})\n"
              f"sys.argv = ['cefl-opt', *{argv!r}]\n"
              "sys.exit(entry.main())\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (p.returncode, p.stderr) == CODE[sig]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["net.json"]


def test_interrupt_summary_counts_only_clean_runs_as_expected():
    import pandas as pd
    from benchmarks.bench_interrupts import summarise
    base = {"method": "scip", "expected": 130, "exit": 130, "stderr_lines": 1,
            "traceback": False, "files_left": "", "temporaries_left": "", "processes_left": 0,
            "running_at_signal": True}
    bad = [{"exit": 0}, {"stderr_lines": 2}, {"traceback": True}, {"files_left": "s.json"},
           {"temporaries_left": "/tmp/x"}, {"processes_left": 1}]
    df = pd.DataFrame([base] + [{**base, **b} for b in bad])
    s = summarise(df).iloc[0]
    assert (s["runs"], s["interrupted"], s["as_expected"], s["files_left"],
            s["processes_left"]) == (7, 7, 1, 1, 1)
    assert s["exit_codes"] == "0x1 130x6"


def test_sigterm_during_run_leaves_no_report_folder(tmp_path):
    out = tmp_path / "report"
    argv = ["run", "--out", str(out), "--preset", "paper", "--rounds", "2",
            "--methods", "ipopt-enum", "--skip-training", "--placeholder-constants",
            "--no-progress"]
    code, err = _signal_after(argv, signal.SIGTERM, 5.0, tmp_path)
    assert (code, err) == CODE[signal.SIGTERM]
    assert list(tmp_path.iterdir()) == []           # no report, no hidden staging folder
