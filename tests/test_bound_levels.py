"""The partition of m_min in the decomposed bound (solvers/bound.py, `m_levels`): the ML floor
with m_min <= m_hi lies below the ML parts of feasible points with that m_min, the partition
is the hand formula over its cells, it never lies below the single cell, the levels are chosen
deterministically, and the bound with levels lies below the enumerated optimum and below every
feasible objective found on the kept instances."""
import copy
import math
from pathlib import Path

import numpy as np
import pytest

from cefl_opt import system
from cefl_opt.generator import make_instance
from cefl_opt.instance import Instance
from cefl_opt.solution import Solution
from cefl_opt.solvers import bound as bd
from cefl_opt.solvers.base import solve

DATA = Path(__file__).parent / "data"
CLOSED = "convergenceCriteriaSatisfied"


@pytest.fixture(scope="module")
def tiny():
    return make_instance("tiny", seed=0)        # 2 rounds, 2 DCs


def _with_m(sol: Solution, m: float) -> Solution:
    out = copy.deepcopy(sol)
    for r in out.rounds:
        r.m_ue[:] = m
        r.m_dc[:] = m
    return out


@pytest.mark.parametrize("m", [1.0, 0.5, 0.2])
def test_ml_floor_with_m_hi_lies_below_points_with_that_m_min(tiny, m):
    # every DPU at mini-batch ratio m: the point's m_min is m, so the floor with m_hi = m holds
    sol = _with_m(solve(tiny, "fixed", aggregator=0).solution, m)
    ev = system.evaluate(tiny, sol)
    assert ev.feasible and ev.ml_info["m_min"] == pytest.approx(m)
    p = ev.ml_parts
    rest = tiny.xi1 * (p["init"] + p["noise"] + p["local"] + p["hetero"])
    F, _ = bd.ml_floor(tiny, m_hi=m)
    assert F.min() <= rest * (1 + 1e-9)
    # and it is the floor at m_hi = 1 with the noise and local terms divided by m (by hand)
    # (on the cells that the step-size row leaves, the same for every m_hi)
    F1, _ = bd.ml_floor(tiny)
    F2, _ = bd.ml_floor(tiny, m_hi=0.5)
    kept = np.isfinite(F1)
    assert kept.any() and (np.isfinite(F) == kept).all() and (np.isfinite(F2) == kept).all()
    lin = F2[kept] - F1[kept]                   # = (1/0.5 - 1) (noise + local)
    np.testing.assert_allclose(F[kept], F1[kept] + lin * (1 / m - 1), rtol=1e-10)


def _fake_levels(monkeypatch, floor):
    """SCIP's bound of round t with aggregator k at mini-batch level mu replaced by
    floor(t, k, mu) (closed); returns the (t, k, mu) asked for."""
    calls, made = [], {}
    real_round = bd.round_instance

    def round_instance(inst, t):
        r = real_round(inst, t)
        made[id(r)] = t
        return r

    def fake(m, time_limit, seed=0):
        t = made[id(m._inst)]
        k = next(k for k in m.S if m.dc[0].Is[0, k].fixed and m.dc[0].Is[0, k].value > 0.5)
        mu = float(m.ue[0].m[0].value)
        assert m.ue[0].m[0].fixed and all(blk.m[0].value == mu for blk in m.dc.values())
        calls.append((t, k, mu))
        return floor(t, k, mu), CLOSED
    monkeypatch.setattr(bd, "round_instance", round_instance)
    monkeypatch.setattr(bd, "_scip_lower", fake)
    return calls


def _rising(inst):
    """Floors above the cuts that grow linearly with mu (the rounds' processing energy)."""
    F, c0 = bd.ml_floor(inst)
    LA, LR = bd.delay_floors(inst)

    def floor(t, k, mu):
        a = c0[0] * float(inst.Delta[t].sum()) + inst.xi2
        return a * (LA[t, k] + LR[t, k]) * (1.02 + 0.01 * k) + 0.4 * mu
    return floor


def _by_hand(inst, levels):
    """min over the cells [mu_j, mu_j+1] of m_min and the cells c of gbar of F(c, m_min <=
    mu_j+1) + sum_t min_k (max over levels i <= j of floor_i[t][k] + rise), by loops."""
    levels = sorted(levels, key=lambda lv: lv.mu)
    LA, LR = bd.delay_floors(inst)
    best = math.inf
    for j, lv in enumerate(levels):
        hi = levels[j + 1].mu if j + 1 < len(levels) else 1.0
        F, c0 = bd.ml_floor(inst, m_hi=hi)
        for c in range(len(F)):
            tot = F[c]
            for t in range(inst.T):
                dl = float(inst.Delta[t].sum())
                tot += min(max(levels[i].floors[t][k] for i in range(j + 1))
                           + (c0[c] - c0[0]) * dl * (LA[t, k] + LR[t, k])
                           for k in range(inst.S))
            best = min(best, tot)
    return best


def test_the_partition_is_the_hand_formula_and_lies_above_the_single_cell(monkeypatch, tiny):
    calls = _fake_levels(monkeypatch, _rising(tiny))
    one = bd.decomposed_bound(tiny, 60.0, m_levels=0)
    assert [c[2] for c in calls] == [tiny.m_floor] * (tiny.T * tiny.S)
    assert len(one.levels) == 1 and one.m_cell == (tiny.m_floor, 1.0)
    assert one.bound == pytest.approx(_by_hand(tiny, one.levels), rel=1e-12)
    calls.clear()
    three = bd.decomposed_bound(tiny, 60.0, m_levels=2)
    mus = [lv.mu for lv in three.levels]
    assert len(mus) == 3 and mus[0] == tiny.m_floor and len(set(mus)) == 3
    assert all(tiny.m_floor < mu < 1.0 for mu in mus[1:])
    assert sorted(set(c[2] for c in calls)) == sorted(mus)
    floor = _rising(tiny)
    for lv in three.levels[1:]:
        asked = [(t, k) for t, k, mu in calls if mu == lv.mu]
        assert tiny.T <= len(asked) <= tiny.T * tiny.S
        for t in range(tiny.T):
            # the aggregators asked: the first in the order of the floors below; the least
            # over k is what asking every aggregator gives
            assert min(lv.floors[t]) == pytest.approx(min(floor(t, k, lv.mu)
                                                          for k in range(tiny.S)), rel=1e-12)
            assert all(st in (CLOSED, bd.NOT_NEEDED) for st in lv.status[t])
            assert [k for k in range(tiny.S) if lv.status[t][k] == CLOSED] == sorted(
                k for tt, k in asked if tt == t)
    assert three.bound == pytest.approx(_by_hand(tiny, three.levels), rel=1e-12)
    # the same level-0 floors with more cells: never less (monotone), here strictly more
    assert three.levels[0].floors == one.levels[0].floors
    assert three.bound > one.bound
    assert three.m_cell[0] in mus and three.m_cell[0] > tiny.m_floor
    assert three.closed


def test_floors_that_do_not_grow_with_m_add_no_level(monkeypatch, tiny):
    # with the rounds' floors flat in mu, a second level predicts no gain: the chooser stops
    flat = _rising(tiny)
    calls = _fake_levels(monkeypatch, lambda t, k, mu: flat(t, k, 0.0))
    db = bd.decomposed_bound(tiny, 60.0, m_levels=3)
    assert len(db.levels) == 2                  # m_floor, then one guess; no third
    assert len(calls) <= 2 * tiny.T * tiny.S
    one = bd.decomposed_bound(tiny, 60.0, m_levels=0)
    assert db.bound == pytest.approx(one.bound, rel=1e-12)


def test_a_lower_levels_floor_holds_at_a_higher_one(monkeypatch, tiny):
    # a floor that SCIP proves lower at a higher level (time-limited) is raised to the lower
    # level's: the cells use the greatest floor at or below their mu
    rise = _rising(tiny)
    _fake_levels(monkeypatch, lambda t, k, mu: rise(t, k, mu) if mu == tiny.m_floor
                 else 0.5 * rise(t, k, 0.0))
    db = bd.decomposed_bound(tiny, 60.0, m_levels=1)
    assert db.bound == pytest.approx(_by_hand(tiny, db.levels), rel=1e-12)
    one = bd.decomposed_bound(tiny, 60.0, m_levels=0)
    assert db.bound >= one.bound * (1 - 1e-12)


def test_the_levels_are_chosen_deterministically(tiny):
    lv = bd.Level(tiny.m_floor, [[1.0] * tiny.S] * tiny.T, [[CLOSED] * tiny.S] * tiny.T)
    a = bd._next_level(tiny, None, [lv], 3.0)
    assert a == bd._next_level(tiny, None, [lv], 3.0) and tiny.m_floor < a < 1.0
    # at m_floor = 1 there is no cell to split
    flat = Instance.from_dict({**tiny.to_dict(), "m_floor": 1.0})
    assert bd._next_level(flat, None, [bd.Level(1.0, lv.floors, lv.status)], 3.0) is None


@pytest.mark.xdist_group("enumerated-tiny")
@pytest.mark.parametrize("seed", [1])
def test_the_bound_with_levels_is_below_the_enumerated_optimum(seed, enumerated):
    inst, (best, _sol, _count) = enumerated("tiny", seed=seed)
    r = bd.decomposed_bound(inst, 10, incumbent=best, m_levels=2)
    assert 2 <= len(r.levels) <= 3       # the second level: only where a gain is predicted
    assert 0 < r.bound <= best * (1 + 1e-6)


def test_the_bound_with_levels_is_below_the_edge_instances_points():
    inst = Instance.load(DATA / "edge_capacity_1ue_2bs.json")
    objs = [system.evaluate(inst, Solution.load(DATA / f"edge_capacity_1ue_2bs.{n}.json")
                            ).objective for n in ("scip", "ipopt-enum")]
    for inc in (None, max(objs)):
        r = bd.decomposed_bound(inst, 5, incumbent=inc, m_levels=2)
        assert 0 < r.bound <= min(objs) * (1 + 1e-6)


def test_the_bound_with_levels_is_below_the_campaigns_stored_point():
    inst = Instance.load(DATA / "campaign" / "capacity-edge-1ue-2bs.json")
    ev = system.evaluate(inst, Solution.load(DATA / "campaign" / "capacity-edge-1ue-2bs.point.json",
                                             inst))
    assert ev.feasible
    for inc in (None, ev.objective):
        r = bd.decomposed_bound(inst, 5, incumbent=inc, m_levels=2)
        assert 0 < r.bound <= ev.objective * (1 + 1e-6)


@pytest.mark.parametrize("rho, want", [(0.4, 1.0), (0.5, 1.0), (0.8, 0.5), (0.9, 1 / 3)])
def test_the_dc_speed_floor_by_hand_and_raising_z_to_it_lowers_the_objective(tiny, rho, want):
    inst = Instance.from_dict({**tiny.to_dict(), "rho_idle": rho})
    assert bd.dc_speed_floor(inst) == pytest.approx(want, rel=1e-12)
    # a feasible point with every DC slower than the floor: raising z to it keeps it
    # feasible and lowers the objective; going past it (rho > 1/2) raises it again
    sol = solve(inst, "fixed", aggregator=0).solution
    objs = []
    for frac in (0.5 * want, want, min(1.0, 1.5 * want)):
        s = copy.deepcopy(sol)
        for r in s.rounds:
            r.z[:] = frac * inst.C
        ev = system.evaluate(inst, s)
        assert ev.feasible
        objs.append(ev.objective)
    assert objs[1] < objs[0]
    assert objs[2] > objs[1] if want < 1 / 1.5 else objs[2] == objs[1]


def _consensus_dual(inst, levels, nu):
    """The Lagrangian dual of m_min = mu_t (each round's copy of m_min) with multipliers
    nu >= 0, on the same floors: min over cells c of gbar of [min over m-cells j of F(c, m_min
    <= hi_j) + sum_t nu_t lo_j] + sum_t min over (j, k) of [floor_j[t][k] + rise_ctk
    - nu_t hi_j]."""
    levels = sorted(levels, key=lambda lv: lv.mu)
    his = [lv.mu for lv in levels[1:]] + [1.0]
    LA, LR = bd.delay_floors(inst)
    eff, effs = None, []
    for lv in levels:
        eff = np.array(lv.floors) if eff is None else np.maximum(eff, lv.floors)
        effs.append(eff)
    Fs = [bd.ml_floor(inst, m_hi=h)[0] for h in his]
    c0 = bd.ml_floor(inst)[1]
    drift = np.array([float(inst.Delta[t].sum()) for t in range(inst.T)])
    best = math.inf
    for c in range(len(c0)):
        ml = min(Fs[j][c] + sum(nu) * levels[j].mu for j in range(len(levels)))
        rounds = sum(min(effs[j][t][k] + (c0[c] - c0[0]) * drift[t] * (LA[t, k] + LR[t, k])
                         - nu[t] * his[j] for j in range(len(levels)) for k in range(inst.S))
                     for t in range(inst.T))
        best = min(best, ml + rounds)
    return best


def test_the_consensus_dual_at_any_multipliers_lies_below_the_partition(monkeypatch, tiny):
    # weak duality on the same floors: the dual at zero is the single cell's bound, and at
    # random multipliers (seeded) never above the partition, which is what the method reports
    _fake_levels(monkeypatch, _rising(tiny))
    db = bd.decomposed_bound(tiny, 60.0, m_levels=2)
    one = bd.decomposed_bound(tiny, 60.0, m_levels=0)
    assert _consensus_dual(tiny, db.levels, [0.0] * tiny.T) == pytest.approx(one.bound,
                                                                             rel=1e-12)
    rng = np.random.default_rng(20)
    duals = [_consensus_dual(tiny, db.levels, rng.uniform(0, 2, tiny.T)) for _ in range(5)]
    assert max(duals) <= db.bound * (1 + 1e-12)


@pytest.mark.xdist_group("enumerated-tiny")
def test_the_consensus_dual_lies_below_every_feasible_point(enumerated):
    inst, (best, sol, _count) = enumerated("tiny", seed=0)
    db = bd.decomposed_bound(inst, 4, incumbent=best, m_levels=1)   # valid at any limit
    points = [sol] + [solve(inst, "fixed", aggregator=k).solution for k in range(inst.S)]
    objs = [system.evaluate(inst, p).objective for p in points]
    rng = np.random.default_rng(21)
    for nu in [np.zeros(inst.T)] + [rng.uniform(0, 1, inst.T) for _ in range(4)]:
        assert _consensus_dual(inst, db.levels, nu) <= min(objs) * (1 + 1e-6)
    assert db.bound <= min(objs) * (1 + 1e-6)


@pytest.mark.parametrize("value, ok", [(0, True), (20, True), (-1, False), (21, False),
                                       (2.5, False)])
def test_m_levels_is_checked_at_both_ends(value, ok):
    from cefl_opt.solvers.options import BoundOptions, OptionError
    if ok:
        assert BoundOptions(m_levels=value).m_levels == value
    else:
        with pytest.raises(OptionError, match=r"option 'm_levels'"):
            BoundOptions(m_levels=value)


def test_m_levels_is_listed_under_search(capsys):
    from cefl_opt.cli import main
    assert main(["solve", "x.json", "--method", "decomposed-bound", "--out", "y.json",
                 "--list-options"]) == 0
    out = capsys.readouterr().out
    assert "m_levels" in out and out.index("search") < out.index("m_levels")


def test_the_second_pass_takes_the_lowest_level_first(monkeypatch, tiny):
    # every subproblem runs out of time: the second pass asks m_floor's first, whose floors
    # hold in every cell
    calls = []

    def fake(m, time_limit, seed=0):
        calls.append(float(m.ue[0].m[0].value))
        return None, "maxTimeLimit"
    monkeypatch.setattr(bd, "_scip_lower", fake)
    monkeypatch.setattr(bd, "_next_level", lambda inst, w, levels, top, left: 0.5)
    db = bd.decomposed_bound(tiny, 60.0, m_levels=1)
    first = tiny.T * tiny.S + tiny.T                # level 0 whole, one aggregator per round
    assert calls[:first] == [tiny.m_floor] * (tiny.T * tiny.S) + [0.5] * tiny.T
    assert calls[first:] == [tiny.m_floor] * (tiny.T * tiny.S) + [0.5] * tiny.T
    assert db.bound > 0 and not db.closed


def test_the_method_with_levels_at_m_floor_1_writes_one_level_and_a_bound_below(tmp_path):
    import subprocess
    import sys
    inst = Instance.load(DATA / "campaign" / "capacity-edge-1ue-2bs.json")
    ev = system.evaluate(inst, Solution.load(
        DATA / "campaign" / "capacity-edge-1ue-2bs.point.json", inst))
    out = tmp_path / "bound.json"
    p = subprocess.run([sys.executable, "-m", "cefl_opt.cli", "solve",
                        str(DATA / "campaign" / "capacity-edge-1ue-2bs.json"), "--method",
                        "decomposed-bound", "--time-limit", "10", "--set",
                        f"incumbent={ev.objective!r}", "--set", "m_levels=1", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    import json
    rep = json.loads(out.read_text())
    assert rep["bound"] <= ev.objective * (1 + 1e-6)
    levels = rep["m_levels"]
    assert levels[0]["m_min"] == inst.m_floor and levels[0]["floors"] == [
        r["floors"] for r in rep["rounds"]]
    # m_floor = 1 here (its regime draws m_floor at its limit): no cell to split, one level
    assert inst.m_floor == 1.0 and len(levels) == 1 and rep["m_cell"] == [1.0, 1.0]
