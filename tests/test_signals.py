"""SIGINT and SIGTERM sent to a real `cefl-opt` process at several points of a solve or a run:
exit 130 (SIGINT) or 143 (SIGTERM), one line on stderr, nothing written, no temporary file or
report folder left, and no solver child process left running."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cefl_opt.generator import make_instance

EXE = Path(sys.executable).with_name("cefl-opt")
CODE = {signal.SIGINT: (130, "cefl-opt: interrupted\n"),
        signal.SIGTERM: (143, "cefl-opt: terminated\n")}


def _processes_naming(marker: str) -> list[int]:
    """Pids of live processes whose command line contains `marker` (a unique tmp path)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            pids.append(int(d.name))
    return pids


def _signal_after(argv: list[str], sig: int, delay: float, folder: Path):
    """Start the CLI, send `sig` after `delay` s, return (returncode, stderr)."""
    trace_tmp = set(Path("/tmp").glob("cefl-opt-trace.*"))
    p = subprocess.Popen([str(EXE), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(delay)
    still_running = p.poll() is None
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert still_running, f"the command ended before the signal at {delay} s: {out} {err}"
    end = time.monotonic() + 10
    while _processes_naming(str(folder)) and time.monotonic() < end:
        time.sleep(0.1)
    assert _processes_naming(str(folder)) == [], "a solver process outlived the command"
    assert set(Path("/tmp").glob("cefl-opt-trace.*")) <= trace_tmp, "a trace temporary was left"
    return p.returncode, err


@pytest.fixture(scope="module")
def small_net(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("signals")
    net = folder / "net.json"
    make_instance("small", rounds=2, seed=11).save(net)
    return net


# (method, extra flags): each takes well over 6 s on the small instance
SOLVES = [("scip", ["--time-limit", "120"]), ("ipopt-enum", ["--sweeps", "3"]),
          ("decentralized", [])]
POINTS = [(signal.SIGTERM, 0.5), (signal.SIGTERM, 4.0), (signal.SIGINT, 4.0)]


@pytest.mark.parametrize("method,flags", SOLVES, ids=[m for m, _ in SOLVES])
@pytest.mark.parametrize("sig,delay", POINTS, ids=[f"{signal.Signals(s).name}@{d}s"
                                                   for s, d in POINTS])
def test_a_signal_during_a_solve_exits_cleanly(tmp_path, small_net, method, flags, sig, delay):
    net = tmp_path / "net.json"
    net.write_bytes(small_net.read_bytes())
    argv = ["solve", str(net), "--method", method, "--out", str(tmp_path / "s.json"), *flags]
    if method == "decentralized":
        argv += ["--trace", str(tmp_path / "t.csv")]
    code, err = _signal_after(argv, sig, delay, tmp_path)
    assert (code, err) == CODE[sig]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["net.json"]


def test_sigterm_during_run_leaves_no_report_folder(tmp_path):
    out = tmp_path / "report"
    argv = ["run", "--out", str(out), "--preset", "small", "--rounds", "2",
            "--methods", "ipopt-enum", "--skip-training", "--placeholder-constants"]
    code, err = _signal_after(argv, signal.SIGTERM, 5.0, tmp_path)
    assert (code, err) == CODE[signal.SIGTERM]
    assert list(tmp_path.iterdir()) == []           # no report, no hidden staging folder
