"""The multi-machine recipe of docs/scale-mpi.md ("Predicting larger runs", "Several
machines"): `mpiexec -f hosts -n R cefl-opt solve NET ... --backend mpi --out SOL` with a host
file. Here the host file names this machine (`localhost:2`), so hydra starts both ranks
locally; the instance and the solution are at absolute paths as on a shared file system.
Truth: the same solve in one process (`--backend local`): one summation order makes the two
equal bit for bit (`tests/test_mpi_solve.py`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cefl_opt.generator import make_instance

MPIEXEC = Path(sys.executable).parent / "mpiexec"
CLI = Path(sys.executable).parent / "cefl-opt"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not in the venv")
# under pytest-xdist the mpiexec launches run on one worker, one at a time (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("mpi")


def _env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI", "PMIX", "HYDRA", "OMPI_", "MPI_LOCAL"))}


def _solve(prefix, net: Path, out: Path, backend: str, cwd: Path):
    return subprocess.run([*prefix, str(CLI), "solve", str(net), "--method", "decentralized",
                           "--max-outer", "2", "--backend", backend, "--out", str(out)],
                          capture_output=True, text=True, timeout=400, env=_env(), cwd=cwd)


@needs_mpiexec
@pytest.mark.slow
def test_host_file_run_equals_one_process(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    net = shared / "net.json"
    make_instance("tiny", seed=0).save(net)
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    work = tmp_path / "elsewhere"        # the ranks read and write absolute paths only
    work.mkdir()
    mpi = _solve([str(MPIEXEC), "-f", str(hosts), "-n", "2"], net, shared / "sol_mpi.json",
                 "mpi", work)
    assert mpi.returncode == 0, mpi.stdout + mpi.stderr
    assert mpi.stdout.count("wrote ") == 1            # rank 0 alone writes
    local = _solve([], net, shared / "sol_local.json", "local", work)
    assert local.returncode == 0, local.stdout + local.stderr
    got = json.loads((shared / "sol_mpi.json").read_text())
    ref = json.loads((shared / "sol_local.json").read_text())
    assert got["info"]["backend"] == "mpi" and got["info"]["ranks"] == 2
    assert ref["info"]["backend"] == "local"
    assert got["objective"] == ref["objective"]
    assert got["rounds"] == ref["rounds"]             # every decision, bit for bit
    for key in ("outer_iterations", "inner_iterations", "stop_reason"):
        assert got["info"][key] == ref["info"][key], key
    assert sorted(p.name for p in shared.iterdir()) == ["net.json", "sol_local.json",
                                                        "sol_mpi.json"]
    assert list(work.iterdir()) == []                 # nothing left behind elsewhere

