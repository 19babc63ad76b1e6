"""The `--progress` bar of the decentralised methods: a tqdm bar of the outer iterations on
stderr, off by default, shown by process 0 only, and without effect on the results."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from cefl_opt import cli
from cefl_opt.generator import make_instance
from cefl_opt.solvers.dec_comm import LocalComm
from cefl_opt.solvers.decentralized import METHODS, solve_decentralized

warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture(scope="module")
def tiny():
    return make_instance("tiny", seed=0)


def _without_wall(rows):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_progress_bar_shows_the_phases_and_leaves_the_results_unchanged(tiny, capsys):
    capsys.readouterr()
    sol0, info0 = solve_decentralized(tiny, max_outer=3, progress=False)
    quiet = capsys.readouterr().err
    sol1, info1 = solve_decentralized(tiny, max_outer=3, progress=True)
    shown = capsys.readouterr().err
    assert "outer" not in quiet and "relaxed" not in quiet
    assert "decentralized relaxed" in shown and "decentralized fixed" in shown
    assert "outer" in shown
    assert sol1.objective == sol0.objective
    assert _without_wall(info1["trace"]) == _without_wall(info0["trace"])


class _RankOneComm(LocalComm):
    """Every node in this process, but reporting MPI rank 1 (not process 0)."""
    rank = 1


def test_progress_bar_is_shown_by_process_zero_only(tiny, capsys):
    comm = _RankOneComm(tiny.graph(), tiny.node_names())
    capsys.readouterr()
    sol, _info = solve_decentralized(tiny, max_outer=2, progress=True, comm=comm)
    assert sol is not None
    assert "outer" not in capsys.readouterr().err


@pytest.mark.parametrize("method", METHODS)
def test_cli_progress_option_of_each_method(tmp_path, capfd, method):
    net = tmp_path / "net.json"
    make_instance("tiny", seed=0).save(net)
    errs, objs = {}, {}
    for flag in ("--progress", "--no-progress"):
        out = tmp_path / f"sol{flag}.json"
        rc = cli.main(["solve", str(net), "--method", method, "--max-outer", "2", flag,
                       "--out", str(out)])
        errs[flag] = capfd.readouterr().err
        assert rc == 0, errs[flag]
        objs[flag] = json.loads(out.read_text())["objective"]
    assert f"{method} relaxed" in errs["--progress"]
    assert "relaxed" not in errs["--no-progress"]
    assert np.float64(objs["--progress"]) == np.float64(objs["--no-progress"])
