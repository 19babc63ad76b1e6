"""`cefl-opt solve --method decentralized --backend mpi` under `mpiexec` (docs/scale-mpi.md,
'MPI backend').

Truth: the local backend (every node in one process, `LocalComm`) on the same instance and
options. The MPI ranks evaluate only their own nodes' providers and take every decision from
collectives, so the iterates agree to rounding (partial sums in another order): the objective
to 1e-9 relative, every decision variable to 1e-6. The runs are `mpiexec` subprocesses with a
timeout, so a hang fails the test instead of blocking the suite.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import live, live_children

from cefl_opt.generator import make_instance
from cefl_opt.solvers.decentralized import solve_decentralized

MPIEXEC = Path(sys.executable).parent / "mpiexec"
CLI = Path(sys.executable).parent / "cefl-opt"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not in the venv")
# under pytest-xdist the mpiexec launches run on one worker, one at a time (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("mpi")
MAX_OUTER = 3


def _env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI", "PMIX", "HYDRA", "OMPI_", "MPI_LOCAL"))}


def _solve(cmd_prefix, net, out, *extra, timeout=400):
    return subprocess.run([*cmd_prefix, str(CLI), "solve", str(net), "--method",
                           "decentralized", "--out", str(out), "--max-outer", str(MAX_OUTER),
                           *extra], capture_output=True, text=True, timeout=timeout, env=_env())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("mpi_solve")
    inst = make_instance("tiny", seed=0)
    net = d / "tiny.json"
    inst.save(net)
    sol, info = solve_decentralized(inst, max_outer=MAX_OUTER)
    return d, net, sol, info


def _values(sol_json):
    """Every decision value of a saved solution, flattened in a fixed order."""
    out = []
    for r in sol_json["rounds"]:
        for k in sorted(r):
            out.extend(np.ravel(np.asarray(r[k], dtype=float)).tolist())
    return np.array(out)


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.slow       # one process against MPI bit for bit: test_full_mpi_run_equals_local_bit_for_bit
def test_mpi_solve_equals_local_backend(tiny, ranks):
    """2 or 3 ranks against one process on tiny, every decision to 1e-6. On 2 ranks a slow
    test: `test_full_mpi_run_equals_local_bit_for_bit` compares a whole 2-rank run bit for bit."""
    d, net, sol_local, info_local = tiny
    out = d / f"sol{ranks}.json"
    p = _solve([str(MPIEXEC), "-n", str(ranks)], net, out, "--backend", "mpi")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("wrote ") == 1          # only rank 0 writes
    got = json.loads(out.read_text())
    assert got["info"]["backend"] == "mpi" and got["info"]["ranks"] == ranks
    assert info_local["backend"] == "local" and info_local["ranks"] == 1
    assert abs(got["objective"] - info_local["objective"]) <= 1e-9 * abs(info_local["objective"])
    assert got["info"]["outer_iterations"] == info_local["outer_iterations"]
    assert got["info"]["inner_iterations"] == info_local["inner_iterations"]
    assert got["info"]["aggregators_final"] == info_local["aggregators_final"]
    local_path = d / "local.json"
    sol_local.save(local_path)
    ref = json.loads(local_path.read_text())
    a, b = _values(ref), _values(got)
    assert a.shape == b.shape and np.allclose(a, b, rtol=1e-6, atol=1e-9)


def test_backend_mpi_outside_mpiexec_exits_2(tiny, tmp_path):
    _d, net, *_ = tiny
    out = tmp_path / "s.json"
    p = _solve([], net, out, "--backend", "mpi", timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "needs an MPI launch" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()


def test_backend_mpi_refuses_other_methods(tiny, tmp_path):
    _d, net, *_ = tiny
    p = subprocess.run([str(CLI), "solve", str(net), "--method", "centralized-pd", "--out",
                        str(tmp_path / "s.json"), "--backend", "mpi"], capture_output=True,
                       text=True, timeout=120, env=_env())
    assert p.returncode == 2, p.stdout + p.stderr
    assert "runs method 'decentralized' only" in p.stderr


@needs_mpiexec
def test_mpi_solve_more_ranks_than_nodes_exits_2(tiny, tmp_path):
    _d, net, *_ = tiny
    out = tmp_path / "s.json"
    p = _solve([str(MPIEXEC), "-n", "6"], net, out, "--backend", "mpi", timeout=240)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "6 MPI ranks for 5 network nodes" in p.stderr
    assert not out.exists()


@needs_mpiexec
@pytest.mark.slow
def test_mpi_association_moves_equal_local_backend(tmp_path):
    """The moves' collectives (solvers/assoc_moves.py) over 2 processes: paper network, T = 2,
    3 outer iterations per phase (the rounding of a relaxed point leaves moves to make). Slow:
    `test_aggregator_moves.py::test_screen_and_group_moves_over_mpi_equal_one_process` checks
    the same counts (moves, passes, vetoes) and the objective bit for bit on a small network."""
    inst = make_instance("paper", seed=0, rounds=2)
    net = tmp_path / "paper.json"
    inst.save(net)
    _sol, info_local = solve_decentralized(inst, max_outer=MAX_OUTER)
    assert info_local["association_moves"] > 0
    out = tmp_path / "sol.json"
    p = _solve([str(MPIEXEC), "-n", "2"], net, out, "--backend", "mpi", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    got = json.loads(out.read_text())["info"]
    for key in ("association_moves", "association_passes", "association_vetoed"):
        assert got[key] == info_local[key], key
    assert abs(got["objective"] - info_local["objective"]) <= 1e-9 * abs(info_local["objective"])


@needs_mpiexec
def test_full_mpi_run_equals_local_bit_for_bit(tmp_path):
    """A whole run (relaxed phase, moves, finishing phase to its own stop) over 2 processes
    and over 1: every reduce adds its tree's raw entries at the root in entry order
    (`dec_comm.Comm.reduce`), so the sums and with them the iterates are the same bit for bit
    whatever the partition. (With partial sums added per rank the runs parted at rounding
    level and, at 200 UEs, ended 0.9 % apart.)"""
    inst = make_instance("small", seed=3, rounds=2)
    net = tmp_path / "small.json"
    inst.save(net)
    _sol, info_local = solve_decentralized(inst)
    out = tmp_path / "sol.json"
    p = subprocess.run([str(MPIEXEC), "-n", "2", str(CLI), "solve", str(net), "--method",
                        "decentralized", "--out", str(out), "--backend", "mpi"],
                       capture_output=True, text=True, timeout=600, env=_env())
    assert p.returncode == 0, p.stdout + p.stderr
    got = json.loads(out.read_text())
    assert got["objective"] == info_local["objective"]
    for key in ("outer_iterations", "inner_iterations", "stop_reason", "association_moves"):
        assert got["info"][key] == info_local[key], key


@needs_mpiexec
def test_a_fault_on_one_rank_ends_every_rank(tiny, tmp_path):
    """An exception on rank 1 only (injected in its 5th exchange) must not leave rank 0 waiting
    in a collective: the failing rank prints its one error line and ends the launch, and
    mpiexec exits with the CLI's code (70, an internal error) well inside the timeout; nothing
    is written, and mpiexec leaves no file in /tmp (its MPI_Abort path would)."""
    _d, net, _sol, _info = tiny
    out = tmp_path / "sol.json"
    script = tmp_path / "inject.py"
    script.write_text(
        "import sys\n"
        "from mpi4py import MPI\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n"
        "    from cefl_opt.solvers import mpi_backend as mb\n"
        "    real, n = mb.MpiComm._alltoallv, [0]\n"
        "    def boom(self, *a, **k):\n"
        "        n[0] += 1\n"
        "        if n[0] == 5:\n"
        "            raise RuntimeError('injected fault on rank 1')\n"
        "        return real(self, *a, **k)\n"
        "    mb.MpiComm._alltoallv = boom\n"
        "import cefl_opt._entry as entry\n"
        "sys.argv = ['cefl-opt', *sys.argv[1:]]\n"
        "sys.exit(entry.main())\n")
    before = _hydra_files()
    p = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script), "solve", str(net),
                        "--method", "decentralized", "--backend", "mpi", "--out", str(out)],
                       capture_output=True, text=True, timeout=120, env=_env())
    assert p.returncode == 70, (p.stdout, p.stderr)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("cefl-opt: error:")]
    assert errors == ["cefl-opt: error: internal error: RuntimeError: injected fault on rank 1 "
                      "(set CEFL_OPT_DEBUG=1 for the traceback)"]
    assert "Traceback" not in p.stderr
    assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["inject.py"]
    assert _eventually(lambda: _hydra_files() <= before), "mpiexec left its topology file in /tmp"


def _eventually(cond, seconds: float = 60.0) -> bool:
    """cond(), polled until it holds or `seconds` pass: hydra's proxies end, and remove the
    launch's topology file, after mpiexec itself, on a busy host seconds later."""
    import time
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        time.sleep(0.1)
    return cond()


def _hydra_files() -> set[str]:
    """Hydra's (`mpiexec`'s) topology files in /tmp: one per launch, removed when the launch
    ends unless a rank called MPI_Abort. The tests run one launch at a time."""
    return {p.name for p in Path("/tmp").glob("hydra_hwloc_xmlfile_*")}


@needs_mpiexec
@pytest.mark.parametrize("sig,code,line", [
    pytest.param("SIGINT", 130, "cefl-opt: interrupted", marks=pytest.mark.slow),
    ("SIGTERM", 143, "cefl-opt: terminated")])
def test_a_signal_ends_every_rank_and_leaves_nothing(tmp_path, paper_net, sig, code, line):
    """Ctrl-C at a terminal (SIGINT to the launch's process group) or SIGTERM to `mpiexec`
    (which forwards it) during a 2-rank solve: mpiexec exits with the CLI's code, each rank
    says the one line, no traceback, no solution, trace or temporary file, no process left,
    and no file of mpiexec's left in /tmp."""
    import signal
    import time
    from benchmarks.bench_interrupts import processes_naming
    net, tmp = tmp_path / "net.json", tmp_path / "tmpdir"
    net.write_bytes(paper_net.read_bytes())
    tmp.mkdir()
    before = _hydra_files()
    p = subprocess.Popen([str(MPIEXEC), "-n", "2", str(CLI), "solve", str(net), "--method",
                          "decentralized", "--backend", "mpi", "--out", str(tmp_path / "s.json"),
                          "--trace", str(tmp_path / "t.csv")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env={**_env(), "TMPDIR": str(tmp)})
    time.sleep(8.0)                       # both ranks past start-up, even on a busy machine
    assert p.poll() is None, "the solve ended before the signal"
    proxies = live_children(p.pid)   # mpiexec's hydra proxies: sessions of their own
    if sig == "SIGINT":
        os.killpg(p.pid, signal.SIGINT)
    else:
        p.send_signal(signal.SIGTERM)
    _out, err = p.communicate(timeout=120)
    assert p.returncode == code, err
    assert [ln for ln in err.splitlines() if ln.startswith("cefl-opt")] == [line, line], err
    assert "Traceback" not in err and "MPI_Abort" not in err
    _eventually(lambda: not (processes_naming(str(tmp_path)) or live(proxies))
                and _hydra_files() <= before)   # the ranks and proxies go soon after
    assert processes_naming(str(tmp_path)) == [] and live(proxies) == []
    assert sorted(x.name for x in tmp_path.iterdir()) == ["net.json", "tmpdir"]
    assert list(tmp.iterdir()) == []
    assert _hydra_files() <= before, "mpiexec left its topology file in /tmp"

