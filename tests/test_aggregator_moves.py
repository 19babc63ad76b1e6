"""Aggregator moves and candidate selection of `decentralized` (solvers/aggregator_moves.py).

Truth: a table of finished objectives per aggregator choice (the search must end at a point no
single-round move improves, accepting only falls of J), brute force over every binary choice
(`centralized.exhaustive`) on tiny instances, and the message accounting."""
import itertools
from pathlib import Path
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

warnings.filterwarnings("ignore", category=UserWarning)

from cefl_opt import system  # noqa: E402
from cefl_opt.generator import make_instance  # noqa: E402
from cefl_opt.solvers import aggregator_moves as agm  # noqa: E402
from cefl_opt.solvers.decentralized import solve_decentralized  # noqa: E402

TOL = 1e-6


def _cand(J, viol=0.0, u=None):
    return agm.Candidate(u=np.zeros(1) if u is None else u, J=J, viol=viol)


# ---------------------------------------------------------------------- the acceptance rule
def test_better_accepts_only_a_fall_of_J_among_feasible_points():
    inc = _cand(2.0)
    assert agm.better(_cand(1.9), inc, TOL)
    assert not agm.better(_cand(2.0), inc, TOL)                   # equal: rejected
    assert not agm.better(_cand(2.1), inc, TOL)                   # higher: rejected
    margin = agm.GAIN_PER_TOL * TOL * 2.0                        # relative to |J| = 2
    assert not agm.better(_cand(2.0 - margin), inc, TOL)          # the margin itself: rejected
    assert not agm.better(_cand(2.0 - 0.5 * margin), inc, TOL)    # below the margin
    assert agm.better(_cand(2.0 - 1.01 * margin), inc, TOL)       # above it
    assert agm.better(_cand(0.5 - 1.01 * agm.GAIN_PER_TOL * TOL), _cand(0.5), TOL)  # |J| < 1
    assert not agm.better(_cand(0.5 - 0.99 * agm.GAIN_PER_TOL * TOL), _cand(0.5), TOL)


def test_better_puts_feasible_before_infeasible():
    assert agm.better(_cand(5.0, viol=TOL), _cand(1.0, viol=2 * TOL), TOL)   # boundary: feasible
    assert not agm.better(_cand(1.0, viol=2 * TOL), _cand(5.0, viol=0.0), TOL)
    assert agm.better(_cand(5.0, viol=1e-3), _cand(1.0, viol=1e-2), TOL)     # less violated
    assert not agm.better(_cand(1.0, viol=1e-2), _cand(5.0, viol=1e-3), TOL)


def test_best_of_is_the_minimum_and_keeps_the_first_on_ties():
    cands = [_cand(3.0), _cand(1.0), _cand(1.0), _cand(0.5, viol=1.0)]
    assert agm.best_of(cands, TOL) is cands[1]
    assert agm.best_of(cands[:1], TOL) is cands[0]


# ---------------------------------------------------------------------- the search on a table
def _fake_structure(T, S):
    """The parts of a DecStructure the search reads: Is indices and the scales."""
    return SimpleNamespace(idx={"Is": np.arange(T * S).reshape(T, S)},
                           scale=np.linspace(0.5, 2.0, T * S))


def _point(st, aggs):
    u = np.zeros(st.scale.size)
    for t, s in enumerate(aggs):
        u = agm.set_aggregator(st, u, t, s)
    return u


def _table_finish(st, table, calls, against=None):
    """finish(u, inc) from a table of J by aggregators; `against` (a list) records each
    call's (aggregators of u, aggregators of the incumbent it must beat, that J)."""
    def finish(u, inc):
        key = tuple(agm.aggregators(st, u))
        calls.append(key)
        if against is not None:
            against.append((key, tuple(agm.aggregators(st, inc.u)), inc.J))
        return _cand(table[key], u=u)
    return finish


@pytest.mark.parametrize("seed", [0, 1])
def test_every_trial_is_finished_against_the_incumbent_it_must_beat(seed):
    """finish(u, inc): each trial, in a visit and in a batch, is handed the incumbent it is
    compared with (its finishing phase may stop once behind it): the point it came from, whose
    aggregators differ from the trial's in the moved rounds only, and whose J is the search's
    incumbent J at that time (it never rises)."""
    T, S = 3, 4
    st = _fake_structure(T, S)
    rng = np.random.default_rng(seed)
    table = {k: float(rng.uniform(1.0, 2.0)) for k in itertools.product(range(S), repeat=T)}
    start = (0, 0, 0)
    calls, against = [], []
    est = lambda u: _cand(table[tuple(agm.aggregators(st, u))] + 0.01, u=u)  # noqa: E731
    best, cnt = agm.aggregator_search(_cand(table[start], u=_point(st, start)),
                                      _table_finish(st, table, calls, against), st, passes=50,
                                      viol_tol=TOL, screen=2, estimate=est)
    assert len(against) == len(calls) == cnt["aggregator_trials"] > 0
    seen = [J for _k, _i, J in against]
    assert seen[0] == table[start] and all(b <= a for a, b in zip(seen, seen[1:]))
    assert all(table[inc] == J for _k, inc, J in against)
    assert all(k != inc for k, inc, _J in against)
    assert best.J == min(seen + [table[tuple(agm.aggregators(st, best.u))]])


def test_set_aggregator_sets_one_round_only():
    st = _fake_structure(3, 4)
    u = _point(st, [0, 1, 2])
    v = agm.set_aggregator(st, u, 1, 3)
    assert agm.aggregators(st, v) == [0, 3, 2]
    x = v * st.scale
    assert np.allclose(x.reshape(3, 4).sum(axis=1), 1.0) and set(np.unique(x)) == {0.0, 1.0}
    assert agm.aggregators(st, u) == [0, 1, 2]                     # u itself unchanged


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_search_ends_at_a_coordinate_minimum_and_every_move_lowers_J(seed):
    T, S = 3, 4
    st = _fake_structure(T, S)
    rng = np.random.default_rng(seed)
    table = {k: float(rng.uniform(1.0, 2.0)) for k in itertools.product(range(S), repeat=T)}
    start = (0, 0, 0)
    calls = []
    inc = _cand(table[start], u=_point(st, start))
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, calls), st, passes=50,
                                      viol_tol=TOL)
    key = tuple(agm.aggregators(st, best.u))
    assert best.J == table[key] <= table[start]
    for t in range(T):               # no single-round move improves the end point
        for s in range(S):
            assert table[key[:t] + (s,) + key[t + 1:]] >= best.J
    assert cnt["aggregator_trials"] == len(calls) == cnt["aggregator_visits"] * (S - 1)
    assert cnt["aggregator_visits"] < 50 * T           # stopped by the quiet rule, not the cap
    assert (cnt["aggregator_moves"] > 0) == (key != start)


def test_search_keeps_the_incumbent_when_no_move_lowers_J():
    T, S = 2, 3
    st = _fake_structure(T, S)
    table = {k: 2.0 for k in itertools.product(range(S), repeat=T)}
    table[(1, 2)] = 1.0
    inc = _cand(1.0, u=_point(st, (1, 2)))
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, []), st, passes=5,
                                      viol_tol=TOL)
    assert best is inc and cnt["aggregator_moves"] == 0 and cnt["aggregator_visits"] == T
    table[(0, 2)] = 0.5                                             # now one move lowers J
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, []), st, passes=5,
                                      viol_tol=TOL)
    assert agm.aggregators(st, best.u) == [0, 2] and best.J == 0.5
    assert cnt["aggregator_moves"] == 1


def test_search_passes_bound_the_work():
    st = _fake_structure(2, 3)
    table = {k: float(-k[0] - k[1]) for k in itertools.product(range(3), repeat=2)}
    calls = []
    inc = _cand(0.0, u=_point(st, (0, 0)))
    _best, cnt = agm.aggregator_search(inc, _table_finish(st, table, calls), st, passes=0,
                                       viol_tol=TOL)
    assert calls == [] and cnt["aggregator_visits"] == 0
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, calls), st, passes=1,
                                      viol_tol=TOL)
    assert cnt["aggregator_visits"] == 2 and len(calls) == 2 * 2     # one visit per round
    assert agm.aggregators(st, best.u) == [2, 2]


# ---------------------------------------------------------------------- the screen
def _table_estimate(st, est, calls):
    def estimate(u):
        key = tuple(agm.aggregators(st, u))
        calls.append(key)
        return _cand(*est[key], u=u) if isinstance(est[key], tuple) else _cand(est[key], u=u)
    return estimate


def test_rank_estimates_puts_feasible_first_by_J_then_infeasible_by_violation():
    ests = [_cand(3.0), _cand(1.0, viol=0.5), _cand(2.0), _cand(0.5, viol=0.1), _cand(2.0)]
    assert agm.rank_estimates(ests, TOL) == [2, 4, 0, 3, 1]        # ties keep the DC order
    assert agm.rank_estimates([_cand(1.0, viol=TOL)], TOL) == [0]  # viol_tol itself: feasible


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_screen_with_exact_estimates_finds_what_the_full_search_finds(seed):
    """With estimates equal to the finished J, the best trial of each visit is among those
    finished, so the screened visits follow the full search move for move (`batch=False`);
    with the batches too the search ends at a coordinate minimum no worse than the start."""
    T, S = 3, 5
    st = _fake_structure(T, S)
    rng = np.random.default_rng(seed)
    table = {k: float(rng.uniform(1.0, 2.0)) for k in itertools.product(range(S), repeat=T)}
    inc = _cand(table[(0, 0, 0)], u=_point(st, (0, 0, 0)))
    full, cnt_f = agm.aggregator_search(inc, _table_finish(st, table, []), st, passes=50,
                                        viol_tol=TOL)
    calls, est_calls = [], []
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, calls), st, passes=50,
                                      viol_tol=TOL, screen=1,
                                      estimate=_table_estimate(st, table, est_calls),
                                      batch=False)
    assert agm.aggregators(st, best.u) == agm.aggregators(st, full.u) and best.J == full.J
    assert cnt["aggregator_visits"] == cnt_f["aggregator_visits"]
    assert len(calls) == cnt["aggregator_trials"] == cnt["aggregator_visits"]   # 1 per visit
    assert len(est_calls) == cnt["aggregator_screened"] == cnt["aggregator_visits"] * (S - 1)
    calls = []
    bat, cnt_b = agm.aggregator_search(inc, _table_finish(st, table, calls), st, passes=50,
                                       viol_tol=TOL, screen=1,
                                       estimate=_table_estimate(st, table, []))
    key = tuple(agm.aggregators(st, bat.u))
    assert bat.J == table[key] <= inc.J and cnt_b["aggregator_trials"] == len(calls)
    for t in range(T):               # no single-round move improves the end point
        for s in range(S):
            assert table[key[:t] + (s,) + key[t + 1:]] >= bat.J


def test_screen_finishes_only_the_best_estimates():
    """A misleading estimate: the visit finishes the trials the estimate ranks first, not
    the trial that would be best finished."""
    T, S = 1, 5
    st = _fake_structure(T, S)
    table = {(0,): 2.0, (1,): 1.0, (2,): 1.5, (3,): 1.8, (4,): 1.9}
    est = {(1,): 3.0, (2,): 1.2, (3,): (0.1, 1.0), (4,): 1.1}   # (3,) infeasible estimate
    calls, est_calls = [], []
    inc = _cand(2.0, u=_point(st, (0,)))
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, calls), st, passes=1,
                                      viol_tol=TOL, screen=2,
                                      estimate=_table_estimate(st, est, est_calls))
    assert calls == [(4,), (2,)] and est_calls == [(1,), (2,), (3,), (4,)]
    assert agm.aggregators(st, best.u) == [2] and best.J == 1.5
    assert cnt == {"aggregator_trials": 2, "aggregator_moves": 1, "aggregator_visits": 1,
                   "aggregator_screened": 4, "aggregator_batches": 0,
                   "aggregator_batch_moves": 0, "aggregator_batch_dropped": 0}


@pytest.mark.parametrize("screen, estimated", [(3, True), (4, False), (9, False)])
def test_screen_estimates_only_when_a_visit_has_more_trials(screen, estimated):
    """S = 5: four trials per visit; a screen of 4 or more finishes them all, unestimated."""
    T, S = 2, 5
    st = _fake_structure(T, S)
    table = {k: 2.0 - 0.1 * k[0] for k in itertools.product(range(S), repeat=T)}
    calls, est_calls = [], []
    inc = _cand(2.0, u=_point(st, (0, 0)))
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, calls), st, passes=1,
                                      viol_tol=TOL, screen=screen,
                                      estimate=_table_estimate(st, table, est_calls))
    assert bool(est_calls) == estimated == (cnt["aggregator_screened"] > 0)
    assert len(calls) == cnt["aggregator_visits"] * min(screen, S - 1)
    assert agm.aggregators(st, best.u)[0] == 4


# ---------------------------------------------------------------------- the whole method
@pytest.mark.xdist_group("enumerated-tiny-2bs")
# seed 0's enumeration takes 30 s of CPU: slow (seed 1 checks the same in the default suite)
@pytest.mark.parametrize("seed", [pytest.param(0, marks=pytest.mark.slow), 1])
def test_tiny_equals_the_enumerated_optimum(seed, enumerated):
    """The binaries found are optimal (Ipopt with them fixed reaches the brute-force optimum);
    the continuous part is the SCA's, within its tolerances."""
    from cefl_opt.solvers.centralized import FixedNLP
    inst, (best, _sol, _count) = enumerated("tiny", seed=seed, bss=2, rounds=1)
    sol, info = solve_decentralized(inst)
    assert info["feasible"] and info["central_steps"] == []
    _s, _status, at_ours = FixedNLP(inst).solve(sol.rounds)
    assert at_ours <= best * (1 + 1e-6)
    assert best * (1 - 1e-6) <= sol.objective <= best * (1 + 1e-3)


@pytest.fixture(scope="module")
def tiny_pair():
    inst = make_instance("tiny", seed=3, rounds=2)
    plain = solve_decentralized(inst, constants={"agg_passes": 0, "candidates": 1})
    full = solve_decentralized(inst)
    return inst, plain, full


def test_search_exchanges_neighbour_messages_only_and_they_are_counted(tiny_pair):
    _inst, (_s0, i0), (_s1, i1) = tiny_pair
    assert i0["aggregator_trials"] == 0 and i1["aggregator_trials"] > 0
    assert i1["central_steps"] == [] and i1["messages"]["neighbours_only"]
    assert i1["messages"]["total_count"] > i0["messages"]["total_count"]
    assert i1["messages"]["total_bytes"] > i0["messages"]["total_bytes"]
    assert i1["outer_iterations"] > i0["outer_iterations"]


def test_search_never_raises_J(tiny_pair):
    inst, (s0, i0), (s1, i1) = tiny_pair
    assert i1["objective_first"] == pytest.approx(i0["objective_first"], rel=1e-12)
    assert s1.objective <= s0.objective * (1 + 1e-9)
    assert min(i1["candidate_objectives"]) <= i1["objective_first"]
    assert system.evaluate(inst, s1).feasible
    assert i1["candidate_chosen"] in ("relaxed", "start")


@pytest.fixture(scope="module")
def tiny_screened():
    """Four DCs (three trials per visit), a screen of 1; every estimate recorded with P's
    objective and feasibility at the estimated point (`system.evaluate`)."""
    from cefl_opt.models import clip_to_bounds
    from cefl_opt.solvers import decentralized as dz
    inst = make_instance("tiny", seed=3, rounds=2, dcs=4)
    seen, orig = [], dz._estimate_point

    def spy(run, u, views, start):
        c = orig(run, u, views, start)
        ev = system.evaluate(inst, clip_to_bounds(run.st.to_solution(c.u, method="x",
                                                                      status="x"), inst,
                                                  "corollary"))
        seen.append((c, ev))
        return c
    mp = pytest.MonkeyPatch()
    mp.setattr(dz, "_estimate_point", spy)
    try:
        out = solve_decentralized(inst, constants={"agg_screen": 1})
    finally:
        mp.undo()
    return inst, out, seen


def test_screen_estimate_is_P_at_the_estimated_point(tiny_screened):
    """The estimate (aggregator set, epigraphs tightened, J by the spanning-tree sum) is P's
    objective at that point, which is feasible."""
    _inst, _out, seen = tiny_screened
    assert len(seen) > 0
    for c, ev in seen:
        assert ev.feasible and c.viol <= TOL
        assert c.J == pytest.approx(ev.objective, rel=1e-9)


def test_screened_search_runs_by_messages_and_finishes_one_trial_per_visit(tiny_screened):
    inst, (sol, info), seen = tiny_screened
    assert info["aggregator_visits"] > 0
    assert info["aggregator_trials"] == info["aggregator_visits"]          # screen = 1
    assert info["aggregator_screened"] == 3 * info["aggregator_visits"] == len(seen)
    assert info["central_steps"] == [] and info["messages"]["neighbours_only"]
    assert system.evaluate(inst, sol).feasible
    assert sol.objective <= info["objective_first"] * (1 + 1e-9)


@pytest.mark.parametrize("name, value", [("candidates", 0), ("candidates", 3),
                                         ("agg_passes", -1), ("refine_rounds", -1),
                                         ("refine_rounds", 1.5), ("agg_screen", 0),
                                         ("agg_screen", 1.5), ("agg_screen", True),
                                         ("search_budget", -1e-9),
                                         ("search_budget", float("nan"))])
def test_bad_search_constants_are_refused(name, value):
    inst = make_instance("tiny", seed=0)
    with pytest.raises(ValueError, match=name):
        solve_decentralized(inst, constants={name: value})


@pytest.mark.parametrize("name, value, ok", [("candidates", 0, False), ("candidates", 3, False),
                                             ("agg_passes", -1, False),
                                             ("refine_rounds", -1, False),
                                             ("agg_screen", 0, False),
                                             ("candidates", 1, True), ("agg_passes", 0, True),
                                             ("refine_rounds", 0, True),
                                             ("agg_screen", 1, True)])
def test_search_constants_on_the_command_line(tmp_path, capsys, name, value, ok):
    """`solve --set` accepts the range ends and refuses the values past them with exit 2 (in
    process: the command line's checks, one outer iteration of the solve)."""
    from cefl_opt import cli
    inst = make_instance("tiny", seed=0, rounds=1)
    path = tmp_path / "inst.json"
    inst.save(path)
    out_path = tmp_path / "sol.json"
    rc = cli.main(["solve", str(path), "--method", "decentralized", "--set", f"{name}={value}",
                   "--max-outer", "1", "--no-progress", "--out", str(out_path)])
    err = capsys.readouterr().err
    if ok:
        assert rc == 0, err[-2000:]
        assert out_path.exists()
    else:
        assert rc == 2, err[-2000:]
        assert "cefl-opt: error:" in err and name in err
        assert "Traceback" not in err and not out_path.exists()


# ------------------------------------------------------------ the search's stages
def _stage_harness(monkeypatch, starts, refine_gain, agg, refine_rounds=3, budget=25.0):
    """`decentralized._finish_and_search` with its steps replaced by tables: the finished
    starts have J = starts["relaxed"], starts["start"]; `_refine` lowers J by
    refine_gain[start]; `aggregator_search` moves agg[start][0] aggregators and lowers J by
    agg[start][1]. Returns the chosen candidate, the calls in order and `run.info`."""
    from cefl_opt.solvers import decentralized as dz
    calls = []

    def finish_point(run, u, views, start, record=False, against=None):
        return agm.Candidate(u=np.zeros(1), J=starts[start], viol=0.0, start=start)

    def refine(run, inc, views):
        calls.append(("refine", inc.start, inc.J))
        return (agm.Candidate(u=inc.u, J=inc.J - refine_gain[inc.start], viol=0.0,
                              start=inc.start), {"refine_rounds": 1})

    def search(inc, finish, st, **kw):
        calls.append(("aggregators", inc.start, inc.J))
        moved, gain = agg[inc.start]
        return (agm.Candidate(u=inc.u, J=inc.J - gain, viol=0.0, start=inc.start),
                {"aggregator_moves": moved, "aggregator_trials": 2})
    monkeypatch.setattr(dz, "_finish_point", finish_point)
    monkeypatch.setattr(dz, "_rounding", lambda run, u: (u, None))
    monkeypatch.setattr(dz, "_refine", refine)
    monkeypatch.setattr(dz, "aggregator_search", search)
    monkeypatch.setattr(dz, "fix_indicators_at", lambda st, u: None)
    run = SimpleNamespace(st=SimpleNamespace(u0=np.zeros(1)), info={}, dec=False, msg_hist=[],
                          finished=[], search_times={}, relaxed_passes=100, budget=None,
                          k=SimpleNamespace(candidates=2, refine_rounds=refine_rounds,
                                            agg_passes=3, agg_screen=3, viol_tol=TOL,
                                            search_budget=budget))
    chosen = dz._finish_and_search(run, np.zeros(1), None, 0.0)
    return chosen, calls, run.info


def test_the_search_refines_every_start_before_any_aggregator_move(monkeypatch):
    """Stage 1 refines both starts; stage 2 visits the starts from the least J up (here the
    start, refined to 1.4, before the relaxed rounding at 1.8), each refined again only when an
    aggregator moved; the least J is chosen and the counts are summed over the starts."""
    chosen, calls, info = _stage_harness(
        monkeypatch, {"relaxed": 2.0, "start": 2.5}, {"relaxed": 0.2, "start": 1.1},
        {"relaxed": (1, 0.1), "start": (0, 0.0)})
    assert calls == [("refine", "relaxed", 2.0), ("refine", "start", 2.5),
                     ("aggregators", "start", 1.4), ("aggregators", "relaxed", 1.8),
                     ("refine", "relaxed", pytest.approx(1.7))]
    assert chosen.start == "start" and chosen.J == 1.4
    assert info["candidate_objectives"] == [pytest.approx(1.5), 1.4]
    assert info["refine_rounds"] == 3 and info["aggregator_moves"] == 1
    assert info["aggregator_trials"] == 4 and info["search_stop"] == "completed"


def test_the_search_without_refinement_visits_the_starts_by_J(monkeypatch):
    chosen, calls, _info = _stage_harness(
        monkeypatch, {"relaxed": 2.0, "start": 1.9}, {"relaxed": 0.0, "start": 0.0},
        {"relaxed": (1, 0.5), "start": (1, 0.0)}, refine_rounds=0)
    assert calls == [("aggregators", "start", 1.9), ("aggregators", "relaxed", 2.0)]
    assert chosen.start == "relaxed" and chosen.J == 1.5


# ------------------------------------------------------------ refinement at finished points
def _refine_harness(monkeypatch, Js, moves, rounds, exact=None, group=None, budget=None):
    """`decentralized._refine` with its steps replaced by a table: the k-th finishing phase
    after a move gives J = Js[k]; the priced moves at the k-th point move moves[k] UEs, the
    exact trials exact[k] and the group moves group[k] groups (0 if not given)."""
    from cefl_opt.solvers import decentralized as dz
    calls = {"moves": 0, "finish": 0}

    def fake_moves(st, u, free, **kw):
        m = moves[calls["moves"]]
        calls["moves"] += 1
        return u + 1.0, {"association_moves": m}

    def fake_finish(run, u, against=None):
        calls["finish"] += 1
        return u.copy(), [], "converged"

    monkeypatch.setattr(dz, "association_moves", fake_moves)
    monkeypatch.setattr(dz, "exact_top_moves", lambda st, u, free, **kw:
                        (u, {"exact_moves": (exact or [0] * 9)[calls["moves"] - 1],
                             "exact_trials": 2}))
    monkeypatch.setattr(dz, "exact_group_moves", lambda st, u, free, **kw:
                        (u, {"group_moves": (group or [0] * 9)[calls["moves"] - 1],
                             "group_trials": 3}))
    monkeypatch.setattr(dz, "fix_indicators_at", lambda st, u: None)
    monkeypatch.setattr(dz, "_finishing_phase", fake_finish)
    def fake_finished(run, u, records, reason, start, views):
        c = agm.Candidate(u=u, J=Js[int(u[0]) - 1], viol=0.0, records=records, reason=reason,
                          start=start)
        run.finished.append(c)
        return c
    monkeypatch.setattr(dz, "_finished", fake_finished)
    monkeypatch.setattr(dz, "_refine_subsets", lambda run, inc, u, views, cnt: (inc, []))
    run = SimpleNamespace(st=SimpleNamespace(n_rows=2, force_rows=np.array([], int)),
                          k=SimpleNamespace(refine_rounds=rounds, move_passes=5, viol_tol=TOL,
                                            move_screen=1),
                          dec=False, finished=[], budget=budget,
                          timed=lambda _kind, fn, *a, **kw: fn(*a, **kw))
    run.st.linearise = run.st.values = None
    return dz._refine(run, _cand(2.0, u=np.zeros(1)), None), calls, run


def test_refine_keeps_a_round_only_when_J_falls(monkeypatch):
    (best, cnt), calls, run = _refine_harness(monkeypatch, [1.9, 1.8, 1.85], [2, 1, 1], 5)
    assert best.J == 1.8 and best.u[0] == 2.0                    # the third round rose: undone
    assert cnt == {"refine_rounds": 3, "refine_moves": 4, "refine_accepted": 2,
                   "group_moves": 0, "group_trials": 9, "exact_trials": 6, "exact_screened": 0,
                   "refine_subsets": 0, "refine_subset_moves": 0}
    assert calls == {"moves": 3, "finish": 3} and len(run.finished) == 3


def test_refine_rejects_an_equal_J_and_stops_when_nothing_moves(monkeypatch):
    (best, cnt), _calls, _run = _refine_harness(monkeypatch, [2.0], [1], 5)
    assert best.J == 2.0 and best.u[0] == 0.0 and cnt["refine_accepted"] == 0
    (best, cnt), calls, _run = _refine_harness(monkeypatch, [1.0], [0], 5)
    assert best.J == 2.0 and calls == {"moves": 1, "finish": 0}   # no move: no finishing phase
    assert cnt == {"refine_rounds": 1, "refine_moves": 0, "refine_accepted": 0,
                   "group_moves": 0, "group_trials": 3, "exact_trials": 2, "exact_screened": 0,
                   "refine_subsets": 0, "refine_subset_moves": 0}


def test_refine_rounds_bound_the_work(monkeypatch):
    (best, cnt), calls, _run = _refine_harness(monkeypatch, [1.9, 1.8, 1.7], [1, 1, 1], 2)
    assert best.J == 1.8 and calls == {"moves": 2, "finish": 2} and cnt["refine_rounds"] == 2


def test_refine_finishes_again_after_an_exact_move_alone(monkeypatch):
    (best, cnt), calls, _run = _refine_harness(monkeypatch, [1.5, 1.6], [0, 0], 5, exact=[1, 2])
    assert best.J == 1.5 and calls == {"moves": 2, "finish": 2}
    assert cnt == {"refine_rounds": 2, "refine_moves": 3, "refine_accepted": 1,
                   "group_moves": 0, "group_trials": 6, "exact_trials": 4, "exact_screened": 0,
                   "refine_subsets": 0, "refine_subset_moves": 0}


def test_refine_finishes_again_after_a_group_move_alone(monkeypatch):
    (best, cnt), calls, _run = _refine_harness(monkeypatch, [1.5, 1.6], [0, 0], 5, group=[1, 2])
    assert best.J == 1.5 and calls == {"moves": 2, "finish": 2}
    assert cnt == {"refine_rounds": 2, "refine_moves": 3, "refine_accepted": 1,
                   "group_moves": 3, "group_trials": 6, "exact_trials": 4, "exact_screened": 0,
                   "refine_subsets": 0, "refine_subset_moves": 0}


# ------------------------------------------------------------ the screen and groups over MPI
_BIN = Path(sys.executable).parent


@pytest.mark.skipif(not (_BIN / "mpiexec").exists(), reason="mpiexec not in the venv")
@pytest.mark.xdist_group("mpi")      # the mpiexec launches run on one xdist worker
@pytest.mark.slow
def test_screen_and_group_moves_over_mpi_equal_one_process(tmp_path):
    """Four DCs, a screen of 1 (the estimates' collectives, a batch of two rounds' moves), the
    exact moves' prefilter and the group moves of `_refine` (3 outer iterations per phase),
    over 2 processes and over 1: the same decisions and the same objective, bit for bit. The
    association moves (solvers/assoc_moves.py) run here too, with moves and vetoes, and their
    counts agree."""
    import json
    import os
    inst = make_instance("small", seed=3, rounds=2, dcs=4)
    net = tmp_path / "small.json"
    inst.save(net)
    _sol, local = solve_decentralized(inst, constants={"agg_screen": 1}, max_outer=3)
    assert local["aggregator_screened"] > 0 and local["group_trials"] > 0
    assert local["association_moves"] > 0 and local["association_vetoed"] > 0
    assert local["aggregator_batch_moves"] > 0 and local["exact_screened"] > 0
    out = tmp_path / "sol.json"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI", "PMIX", "HYDRA", "OMPI_", "MPI_LOCAL"))}
    p = subprocess.run([str(_BIN / "mpiexec"), "-n", "2", str(_BIN / "cefl-opt"), "solve",
                        str(net), "--method", "decentralized", "--out", str(out), "--backend",
                        "mpi", "--set", "agg_screen=1", "--max-outer", "3"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    got = json.loads(out.read_text())
    assert got["objective"] == local["objective"]
    for key in ("aggregator_screened", "aggregator_trials", "group_trials", "group_moves",
                "aggregators_final", "search_stop", "search_passes", "search_finishing_phases",
                "association_moves", "association_passes", "association_vetoed",
                "aggregator_batches", "aggregator_batch_moves", "aggregator_batch_dropped",
                "exact_screened", "exact_trials", "refine_subsets", "refine_subset_moves"):
        assert got["info"][key] == local[key], key


# ---------------------------------------------------------------------- the search's budget
def test_budget_charges_and_stops_for_good_at_its_limit():
    from cefl_opt.solvers.decentralized import SearchBudget
    b = SearchBudget(limit=10)
    assert b.afford(9) and b.spent == 9 and not b.stopped
    assert not b.afford(1) and b.stopped                  # 10 passes spent: the limit
    b.spent = 0                                           # once stopped it stays stopped
    assert not b.afford() and SearchBudget(limit=0).afford() is False


def test_budget_stops_the_aggregator_search_before_a_trial():
    st = _fake_structure(2, 3)
    table = {k: float(-k[0] - k[1]) for k in itertools.product(range(3), repeat=2)}
    calls = []
    inc = _cand(0.0, u=_point(st, (0, 0)))
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, calls), st, passes=5,
                                      viol_tol=TOL, afford=lambda: len(calls) < 3)
    assert len(calls) == cnt["aggregator_trials"] == 3          # the 4th trial is not paid
    assert agm.aggregators(st, best.u) == [2, 1] and best.J == -3.0   # best finished kept
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, []), st, passes=5,
                                      viol_tol=TOL, afford=lambda: False)
    assert best is inc and cnt["aggregator_visits"] == 0


def _grants(n, log):
    """A budget that affords its first n requests."""
    def afford(passes=0):
        log.append(passes)
        return len(log) <= n
    return SimpleNamespace(afford=afford)


def test_budget_stops_refine_before_a_round_and_before_an_unpaid_finishing_phase(monkeypatch):
    # two grants: round 1 moves and is finished (J falls); round 2 is refused at its start
    (best, cnt), calls, _run = _refine_harness(monkeypatch, [1.9, 1.8], [1, 1], 5,
                                               budget=_grants(2, []))
    assert best.J == 1.9 and calls == {"moves": 1, "finish": 1} and cnt["refine_rounds"] == 1
    # one grant: round 1 moves, but its finishing phase is not paid: the incumbent stays
    (best, cnt), calls, _run = _refine_harness(monkeypatch, [1.9], [1], 5,
                                               budget=_grants(1, []))
    assert best.J == 2.0 and calls == {"moves": 1, "finish": 0} and cnt["refine_accepted"] == 0


@pytest.mark.parametrize("preset, seed", [("tiny", 3), ("tiny", 8),
                                          pytest.param("small", 8, marks=pytest.mark.slow)])
def test_default_is_never_worse_than_the_search_free_run_and_a_zero_budget_is_that_run(preset,
                                                                                       seed):
    """The search starts from the search-free run's finished point and accepts only falls of
    J: the default is at or below it; with no budget the search stops at once ("search
    budget") and returns exactly that point; an ample one lets it complete."""
    inst = make_instance(preset, seed=seed, rounds=2)
    free_k = {"agg_passes": 0, "candidates": 1, "refine_rounds": 0}
    s0, i0 = solve_decentralized(inst, constants=free_k)
    s1, i1 = solve_decentralized(inst)
    assert s1.objective <= s0.objective * (1 + 1e-12) and system.evaluate(inst, s1).feasible
    assert i1["search_stop"] in ("completed", "search budget")
    from cefl_opt.solvers.primal_dual import TUNED
    relaxed = [r for r in i1["trace"] if r["phase"] == "relaxed"]
    assert i1["search_budget_passes"] == TUNED.search_budget * (
        len(relaxed) + sum(r["inner_iters"] for r in relaxed))
    sz, iz = solve_decentralized(inst, constants={"search_budget": 0.0})
    assert iz["search_stop"] == "search budget" and iz["search_finishing_phases"] == 0
    assert sz.objective == s0.objective and iz["aggregator_trials"] == 0
    _sb, ib = solve_decentralized(inst, constants={"search_budget": 1e9})
    assert ib["search_stop"] == "completed"


# ---------------------------------------------------------------------- batches of moves
def _batch_case(table, own_bad=(), afford=lambda: True):
    """Rounds 0 and 1 of a 2 x 3 fake structure from (0, 0): the good move puts round 0 on
    DC 1, the bad one round 1 on DC 1; `own_bad` lists the rounds whose own test fails."""
    st = _fake_structure(2, 3)
    calls, tally = [], agm.BatchTally()
    inc = _cand(table[(0, 0)], u=_point(st, (0, 0)))
    batch = agm.non_conflicting([agm._agg_move(st, 0, 1), agm._agg_move(st, 1, 1)])
    out, acc = agm.take_batch(inc, batch, _table_finish(st, table, calls), viol_tol=TOL,
                              tally=tally, keeps=lambda m, c: m.key[0] not in own_bad,
                              afford=afford)
    return st, inc, out, [m.key for m in acc], calls, tally


def test_two_non_conflicting_moves_are_accepted_in_one_finishing_phase():
    table = {(0, 0): 2.0, (1, 0): 1.8, (0, 1): 1.9, (1, 1): 1.5}
    st, inc, out, acc, calls, tally = _batch_case(table)
    assert calls == [(1, 1)] and tally.phases == 1 and tally.trials == 2
    assert acc == [(0, 1), (1, 1)] and agm.aggregators(st, out.u) == [1, 1] and out.J == 1.5


def test_a_conflicting_pair_is_not_batched():
    st = _fake_structure(2, 3)
    a, b, c = agm._agg_move(st, 0, 1), agm._agg_move(st, 0, 2), agm._agg_move(st, 1, 2)
    assert agm.conflict(a, b) and not agm.conflict(a, c)          # one round: one region
    assert [m.key for m in agm.non_conflicting([a, b, c])] == [(0, 1), (1, 2)]
    assert [m.key for m in agm.non_conflicting([b, a, c])] == [(0, 2), (1, 2)]   # first kept
    ue = agm.Move(key=("ue", 3), region=frozenset({(0, "ue3"), (0, "bs1")}), apply=None)
    bs = agm.Move(key=("bs", 1), region=frozenset({(0, "bs1"), (0, "bs2")}), apply=None)
    later = agm.Move(key=("bs", 1), region=frozenset({(1, "bs1")}), apply=None)
    assert agm.conflict(ue, bs) and not agm.conflict(ue, later)


def test_a_worse_batch_is_bisected_and_keeps_only_the_good_move():
    """Every own test passes but the batch's point is worse than the incumbent: the halves
    are finished one after the other; only the good move stays."""
    table = {(0, 0): 2.0, (1, 0): 1.5, (0, 1): 2.5, (1, 1): 2.2}
    st, inc, out, acc, calls, tally = _batch_case(table)
    assert calls == [(1, 1), (1, 0), (1, 1)] and tally.phases == 3
    assert acc == [(0, 1)] and agm.aggregators(st, out.u) == [1, 0] and out.J == 1.5


def test_a_move_that_fails_its_own_test_is_dropped_and_the_rest_finished_again():
    """The batch's point is better than the incumbent, but the bad move fails its own test:
    the good one is finished alone and kept, being better still; when the whole batch is
    better than the good move alone, the batch is kept (the better finished point)."""
    table = {(0, 0): 2.0, (1, 0): 1.5, (0, 1): 2.5, (1, 1): 1.8}
    st, inc, out, acc, calls, tally = _batch_case(table, own_bad=(1,))
    assert calls == [(1, 1), (1, 0)] and tally.phases == 2 and tally.dropped == 1
    assert acc == [(0, 1)] and out.J == 1.5
    table[(1, 1)] = 1.2
    st, inc, out, acc, calls, tally = _batch_case(table, own_bad=(1,))
    assert calls == [(1, 1), (1, 0)] and acc == [(0, 1), (1, 1)] and out.J == 1.2
    table[(1, 1)], table[(1, 0)] = 2.1, 2.05          # nothing beats the incumbent
    st, inc, out, acc, calls, tally = _batch_case(table, own_bad=(1,))
    assert out is inc and acc == [] and tally.phases == 2
    st, inc, out, acc, calls, tally = _batch_case(table, own_bad=(0, 1))   # all dropped
    assert out is inc and acc == [] and calls == [(1, 1)]


def test_a_batch_asks_the_budget_before_every_finishing_phase():
    table = {(0, 0): 2.0, (1, 0): 1.5, (0, 1): 2.5, (1, 1): 2.2}
    log = []
    st, inc, out, acc, calls, tally = _batch_case(
        table, afford=lambda: log.append(0) or len(log) <= 1)
    assert calls == [(1, 1)] and out is inc and acc == []       # the halves are not paid
    st, inc, out, acc, calls, tally = _batch_case(table, afford=lambda: False)
    assert calls == [] and out is inc


def test_the_search_batches_the_rounds_promising_moves():
    """Exact estimates that promise a gain in both rounds: the cycle starts with one batch of
    both moves (one finishing phase), then visits each round once more, and ends at a
    coordinate minimum; without estimates there is no batch."""
    T, S = 2, 4
    st = _fake_structure(T, S)
    table = {k: 2.0 - 0.2 * (k[0] == 2) - 0.3 * (k[1] == 3) for k in
             itertools.product(range(S), repeat=T)}
    inc = _cand(2.0, u=_point(st, (0, 0)))
    calls = []
    best, cnt = agm.aggregator_search(inc, _table_finish(st, table, calls), st, passes=5,
                                      viol_tol=TOL, screen=1,
                                      estimate=_table_estimate(st, table, []))
    assert calls[0] == (2, 3) and agm.aggregators(st, best.u) == [2, 3] and best.J == 1.5
    assert cnt["aggregator_batches"] == 1 and cnt["aggregator_batch_moves"] == 2
    assert cnt["aggregator_moves"] == 2 and cnt["aggregator_trials"] == len(calls) == 1 + T
    _b, plain = agm.aggregator_search(inc, _table_finish(st, table, []), st, passes=5,
                                      viol_tol=TOL)
    assert plain["aggregator_batches"] == 0


@pytest.mark.parametrize("seed", [3, 6])
def test_batched_search_is_never_worse_than_the_search_free_run(seed):
    """Four DCs, a screen of 1, 3 outer iterations per phase and no refinement (the aggregator
    moves start from the finished points themselves): the estimates promise gains, so the
    rounds' moves are batched (seed 3: two moves in one finishing phase); the end is feasible
    and at or below the search-free run's objective."""
    inst = make_instance("small", seed=seed, rounds=2, dcs=4)
    free_k = {"agg_passes": 0, "candidates": 1, "refine_rounds": 0}
    s0, _i0 = solve_decentralized(inst, constants=free_k, max_outer=3)
    s1, i1 = solve_decentralized(inst, constants={"agg_screen": 1, "refine_rounds": 0},
                                 max_outer=3)
    assert s1.objective <= s0.objective * (1 + 1e-12) and system.evaluate(inst, s1).feasible
    assert i1["aggregator_batches"] > 0 and i1["central_steps"] == []
    if seed == 3:
        assert i1["aggregator_batch_moves"] == 2
