"""The decomposed bound's subproblems on several workers (solvers/bound.py, option `workers`):
the option's bounds, the bound with two workers below the enumerated optimum and equal to
one worker's where every subproblem closes, each share the time left times the workers over
the jobs, and a crashed subproblem stops the bound with no child left behind."""
import os
import time
from pathlib import Path

import pytest

from conftest import live_children
from cefl_opt.generator import make_instance
from cefl_opt.solvers import bound as bd
from cefl_opt.solvers.isolation import NativeCrash
from cefl_opt.solvers.options import WORKERS_MAX, BoundOptions, OptionError

CLOSED = "convergenceCriteriaSatisfied"


@pytest.mark.parametrize("value, ok", [(None, True), (1, True), (WORKERS_MAX, True),
                                       (0, False), (WORKERS_MAX + 1, False), (1.5, False)])
def test_workers_is_checked_at_both_ends(value, ok):
    if ok:
        assert BoundOptions(workers=value).workers == value
    else:
        with pytest.raises(OptionError, match=r"option 'workers'"):
            BoundOptions(workers=value)


@pytest.mark.xdist_group("enumerated-tiny")
def test_two_workers_bound_below_the_enumerated_optimum(enumerated):
    inst, (best, _sol, _count) = enumerated("tiny", seed=0)
    db = bd.decomposed_bound(inst, 6, incumbent=best, m_levels=1, workers=2)
    assert 0.8 * best <= db.bound <= best * (1 + 1e-6)
    assert {s for lv in db.levels for row in lv.status for s in row} <= {
        CLOSED, "maxTimeLimit", bd.NOT_RUN, bd.NOT_NEEDED}


def test_two_workers_prove_one_workers_floors_where_every_subproblem_closes():
    # SCIP closes each subproblem of this instance (T = 1, S = 2) in well under a second: the
    # floors do not depend on which process proved them
    inst = make_instance("tiny", seed=3, rounds=1)
    one = bd.decomposed_bound(inst, 60, workers=1)
    two = bd.decomposed_bound(inst, 60, workers=2)
    assert one.closed and two.closed
    assert two.rounds[0] == pytest.approx(one.rounds[0], rel=1e-5)
    assert two.bound == pytest.approx(one.bound, rel=1e-5)


def _shares(tmp_path, monkeypatch, workers):
    """The seconds each subproblem of the first level was given, in the order they started."""
    log = tmp_path / f"shares{workers}"

    def fake(inst, t, a, mu, cap, weights, k, seconds, seed):
        with open(log, "a") as f:          # in the child: the parent reads the file
            f.write(f"{seconds}\n")
        return None, "maxTimeLimit"
    monkeypatch.setattr(bd, "_round_floor", fake)
    inst = make_instance("tiny", seed=0)
    bd.decomposed_bound(inst, 20, workers=workers)
    return [float(x) for x in log.read_text().split()], inst.T * inst.S


@pytest.mark.parametrize("workers", [1, 2])
def test_a_share_is_the_time_left_times_the_workers_over_the_jobs(tmp_path, monkeypatch,
                                                                   workers):
    shares, jobs = _shares(tmp_path, monkeypatch, workers)
    # the first of the first pass: 20 s, T S jobs; then the second pass of the same jobs
    assert len(shares) == 2 * jobs
    assert shares[0] == pytest.approx(bd.SCIP_PART * 20 * workers / jobs, rel=0.05)


def _abort(*args):
    os.abort()


def test_a_crashed_subproblem_stops_the_bound_and_leaves_no_child(monkeypatch):
    monkeypatch.setattr(bd, "_round_floor", _abort)
    with pytest.raises(NativeCrash, match="SCIP"):
        bd.decomposed_bound(make_instance("tiny", seed=0), 20, workers=2)
    end = time.monotonic() + 5
    while live_children(os.getpid()) and time.monotonic() < end:
        time.sleep(0.05)
    assert live_children(os.getpid()) == []
