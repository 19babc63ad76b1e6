"""The proven bound (solvers/bound.py) component by component, each against its own truth:

* a round's floor (SCIP's bound on `round_model`): at most the round's cost a (dA_t + dR_t) + xi3 E_t at feasible points with
  m = m_floor and gamma = gamma_min (`system.evaluate`), and independent of gamma_max (the
  floor fixes gamma at gamma_min, where the round's cost is least);
* `ml_floor`: per cell of gbar, at most the ML remainder at the cell's ends and middle, the
  remainder taken at the point that attains its least value for that gbar (equal gammas, every
  m = 1: `system.ml_bound`), exact where the cell is one point, and not far below it;
* `decomposed_bound`'s assembly (min over aggregators, max with the aggregator cuts, least cell,
  min with the incumbent) and status (closed only when every round subproblem is) on a table of
  round floors, and `_scip_lower`'s reading of SCIP's termination.
"""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from cefl_opt import system
from cefl_opt.generator import make_instance
from cefl_opt.solvers import bound as bd
from cefl_opt.solvers.base import solve

REL = 1e-9


# ---------------------------------------------------------------------- a round's floor
def _round_floor(inst, time_limit, *, cap, aggregator):
    """SCIP's bound on round 0's subproblem (`round_model`) with aggregator fixed."""
    m = bd.round_model(inst, 0, A_WEIGHT, inst.m_floor, cap=cap, aggregator=aggregator)
    return bd._scip_lower(m, time_limit)


def _round_instance(gamma_max: float):
    # one BS, one round, narrow f; m_floor 0.2 so that processing weighs in the round's cost
    return make_instance("tiny", seed=0, bss=1, rounds=1, f_min=np.full(2, 0.5e9),
                         gamma_max=gamma_max, m_floor=0.2)


A_WEIGHT = 1.0     # a, the round's delay weight (any positive number)
CLOSES = 1         # the aggregator with which SCIP closes this round in well under a second


def _at_least_processing(inst, sol):
    """`sol` with every gamma at gamma_min and every m at m_floor (in place)."""
    for r in sol.rounds:
        r.gamma_ue[:] = inst.gamma_min
        r.gamma_dc[:] = inst.gamma_min
        r.m_ue[:] = inst.m_floor
        r.m_dc[:] = inst.m_floor
    return sol


def _round_cost(inst, sol):
    ev = system.evaluate(inst, sol)
    assert ev.feasible, ev.violations
    r = ev.rounds[0]
    return A_WEIGHT * (r["dA"] + r["dR"]) + inst.xi3 * r["energy"]


@pytest.fixture(scope="module")
def floors():
    out = {}
    for gm in (5.0, 20.0):
        inst = _round_instance(gm)
        out[gm] = _round_floor(inst, 60, cap=None, aggregator=CLOSES)
    return out


def test_round_floor_is_below_the_round_cost_at_feasible_points(floors):
    inst = _round_instance(5.0)
    lo, tc = floors[5.0]
    assert tc == "convergenceCriteriaSatisfied"
    points = [system.reference_solution(inst, aggregator=CLOSES),
              solve(inst, "fixed", aggregator=CLOSES).solution]
    costs = [_round_cost(inst, _at_least_processing(inst, p)) for p in points]
    assert lo <= min(costs) * (1 + 1e-7)
    assert lo >= min(costs) * (1 - 1e-2)           # SCIP closed it: not a trivial floor


def test_raising_gamma_max_never_raises_the_round_floor(floors):
    (lo5, tc5), (lo20, tc20) = floors[5.0], floors[20.0]
    assert tc5 == tc20 == "convergenceCriteriaSatisfied"
    assert lo20 <= lo5 * (1 + 1e-7)
    assert lo20 == pytest.approx(lo5, rel=1e-6)    # gamma is fixed at gamma_min: no effect


def test_delay_floors_by_hand_where_the_dc_links_are_slowest():
    """DC-to-DC links 20 and 80 s slow (asymmetric): the aggregation floor of aggregator k is
    the other DC's transfer to k, the reception floor k's transfer to the other DC; both hold
    at feasible points with that aggregator (`system.evaluate`)."""
    base = make_instance("tiny", seed=3)
    R = np.array([[[1e9, 2e6], [5e5, 1e9]]] * base.T)
    inst = make_instance("tiny", seed=3, R_ss=R)
    LA, LR = bd.delay_floors(inst)
    bM = inst.beta_M
    for t in range(inst.T):
        for k in range(inst.S):
            o = 1 - k
            assert LA[t, k] == pytest.approx(bM / R[t, o, k], rel=1e-12)
            assert LR[t, k] == pytest.approx(bM / R[t, k, o], rel=1e-12)
    assert LA[0, 0] != LR[0, 0]
    for k in range(inst.S):
        ev = system.evaluate(inst, system.reference_solution(inst, aggregator=k))
        for t, r in enumerate(ev.rounds):
            assert r["dA"] >= LA[t, k] * (1 - 1e-9) and r["dR"] >= LR[t, k] * (1 - 1e-9)


def test_round_floor_caps_the_delays():
    # a cap below the round's least delay leaves no point: SCIP proves it, the floor is +inf
    inst = _round_instance(5.0)
    LA, LR = bd.delay_floors(inst)
    cap = 0.5 * min(LA[0, CLOSES], LR[0, CLOSES])
    lo, tc = _round_floor(inst, 30, cap=cap, aggregator=CLOSES)
    assert lo == math.inf and tc in ("provenInfeasible", "locallyInfeasible")


# ---------------------------------------------------------------------- ml_floor
def _ml_rest(inst, g: float) -> tuple[float, float]:
    """(xi1 times the ML term without its drift, xi1 times c0) at the point with gbar = g that
    attains the least value: every gamma equal (g_max = g / (d T), the least g_max for this
    gbar), every m = 1, equal data shares (`system.ml_bound`)."""
    T, d = inst.T, inst.I
    gam = np.full((T, d), g / (d * T))
    Di = np.repeat(inst.Dbar.sum(axis=1)[:, None] / d, d, axis=1)
    p = system.ml_bound(inst, gam, np.ones((T, d)), np.zeros(T), Di)
    return (inst.xi1 * (p["init"] + p["noise"] + p["local"] + p["hetero"]),
            inst.xi1 * p["init"] / inst.F0_minus_Fstar)


def _breaks_step(inst, g: float) -> bool:
    """Whether the point of `_ml_rest` with gbar = g breaks Theorem 1's step-size row."""
    T, d = inst.T, inst.I
    Di = np.repeat(inst.Dbar.sum(axis=1)[:, None] / d, d, axis=1)
    lhs, rhs = system.step_condition(inst, np.full((T, d), g / (d * T)), Di)
    return lhs > rhs


def _cells(inst, cells):
    d, T = inst.I, inst.T
    return np.geomspace(d * T * inst.gamma_min, d * T * inst.gamma_max, cells + 1)


def _ml_instance(name):
    if name == "hand":       # Theta and sigma differ between the DPUs (the generator's do not)
        from conftest import hand_instance
        return hand_instance()
    preset, seed, T = name
    return make_instance(preset, seed=seed, rounds=T)


@pytest.mark.parametrize("name", [("tiny", 0, 2), ("paper", 0, 3), "hand"], ids=str)
def test_ml_floor_is_below_the_remainder_at_both_ends_and_the_middle_of_each_cell(name):
    inst = _ml_instance(name)
    cells = 50
    F, c0 = bd.ml_floor(inst, cells=cells)
    g = _cells(inst, cells)
    assert len(F) == len(c0) == cells
    for j in range(cells):
        rest = []
        if not np.isfinite(F[j]):       # no point of the cell meets the step-size row
            assert all(_breaks_step(inst, x) for x in (g[j], g[j + 1]))
            continue
        for x in (g[j], math.sqrt(g[j] * g[j + 1]), g[j + 1]):
            r, c = _ml_rest(inst, x)
            assert F[j] <= r * (1 + REL), (j, x)
            assert c0[j] <= c * (1 + REL), (j, x)
            rest.append(r)
        assert c0[j] == pytest.approx(_ml_rest(inst, g[j])[1], rel=1e-12)   # exact at g1
        # tight: below the least remainder over the cell by at most the cell's spread
        assert F[j] >= min(rest) * (1 - 0.05), j


def test_ml_floor_is_tight_at_fine_cells_where_the_dpus_differ():
    """Theta and sigma differ between the hand instance's DPUs; the remainder takes the
    largest of each (`system.ml_bound`), and so must the floor: at 400 cells it lies within
    the cell's spread (about 0.75 %) of the remainder at the cell's ends."""
    inst = _ml_instance("hand")
    F, _c0 = bd.ml_floor(inst, cells=400)
    g = _cells(inst, 400)
    for j in range(0, 400, 7):
        if not np.isfinite(F[j]):       # no point of the cell meets the step-size row
            assert _breaks_step(inst, g[j])
            continue
        r = min(_ml_rest(inst, g[j])[0], _ml_rest(inst, g[j + 1])[0])
        assert r * (1 - 0.01) <= F[j] <= r * (1 + REL), j


def test_ml_floor_of_a_point_cell_is_the_remainder_there():
    inst = make_instance("tiny", seed=0, gamma_max=1.0)       # gamma_min = gamma_max = 1
    F, c0 = bd.ml_floor(inst)
    r, c = _ml_rest(inst, inst.I * inst.T * inst.gamma_min)
    np.testing.assert_allclose(F, r, rtol=1e-12)
    np.testing.assert_allclose(c0, c, rtol=1e-12)


def test_ml_floor_tightens_as_the_cells_shrink():
    inst = make_instance("tiny", seed=0)
    gaps = []
    for cells in (20, 400):
        F, _c0 = bd.ml_floor(inst, cells=cells)
        g = _cells(inst, cells)
        gaps.append(max(_ml_rest(inst, g[j])[0] - F[j] for j in range(cells)))
    assert gaps[0] >= 0 and gaps[1] >= 0
    assert gaps[1] <= 0.25 * gaps[0]


def test_ml_floor_refuses_a_varying_vartheta():
    with pytest.raises(ValueError, match="vartheta_mode 'constant'"):
        bd.ml_floor(make_instance("tiny", seed=0, vartheta_mode="tau_eff"))


# ---------------------------------------------------------------------- assembly and status
CLOSED = "convergenceCriteriaSatisfied"


def _fake_scip_lower(monkeypatch, table):
    """SCIP's bound of each round subproblem replaced by `table[(t, k)]` = (floor, status):
    the round from the `round_instance` the model was built on, the aggregator from the
    model's fixed Is[0, k]. Returns the (t, k) asked for, in order."""
    calls, made = [], {}
    real_round = bd.round_instance

    def round_instance(inst, t):
        r = real_round(inst, t)
        made[id(r)] = t
        return r

    def fake(m, time_limit, seed=0):
        t = made[id(m._inst)]
        k = next(k for k in m.S if m.dc[0].Is[0, k].fixed and m.dc[0].Is[0, k].value > 0.5)
        calls.append((t, k))
        return table[(t, k)]
    monkeypatch.setattr(bd, "round_instance", round_instance)
    monkeypatch.setattr(bd, "_scip_lower", fake)
    return calls


def _by_hand(inst, floors):
    """min over cells j of F[j] + sum_t min_k (max(floor, a_t cut) + (c0[j] - c0[0]) Delta_t cut)
    with cut = LA + LR and a_t = c0[0] Delta_t + xi2, by loops."""
    F, c0 = bd.ml_floor(inst)
    LA, LR = bd.delay_floors(inst)
    best = math.inf
    for j in range(len(F)):
        tot = F[j]
        for t in range(inst.T):
            dl = float(inst.Delta[t].sum())
            a = c0[0] * dl + inst.xi2
            vals = []
            for k in range(inst.S):
                cut = LA[t, k] + LR[t, k]
                lo = floors[(t, k)]
                vals.append((a * cut if lo is None else max(lo, a * cut))
                            + (c0[j] - c0[0]) * dl * cut)
            tot += min(vals)
        best = min(best, tot)
    return best


@pytest.fixture(scope="module")
def tiny():
    return make_instance("tiny", seed=0)        # 2 rounds, 2 DCs


def _floors(inst):
    """Round floors just above the aggregator cuts a_t (LA + LR) in round 0, one below its
    cut and one unproven (None) in round 1."""
    F, c0 = bd.ml_floor(inst)
    LA, LR = bd.delay_floors(inst)
    cut = [[(c0[0] * float(inst.Delta[t].sum()) + inst.xi2) * (LA[t, k] + LR[t, k])
            for k in range(inst.S)] for t in range(inst.T)]
    return {(0, 0): cut[0][0] * 1.03, (0, 1): cut[0][1] * 1.05, (1, 0): 1e-9, (1, 1): None}


def test_decomposed_bound_takes_the_least_aggregator_the_cut_and_the_least_cell(
        monkeypatch, tiny):
    floors = _floors(tiny)
    calls = _fake_scip_lower(monkeypatch, {tk: (v, CLOSED) for tk, v in floors.items()})
    want = _by_hand(tiny, floors)
    # the floors lie below the reference's objective, so no cutoff can be what is reported
    assert want < system.evaluate(tiny, system.reference_solution(tiny)).objective
    db = bd.decomposed_bound(tiny, 60.0)
    assert sorted(calls) == sorted(floors)
    assert db.bound == pytest.approx(want, rel=1e-12)
    assert db.rounds[0] == [floors[(0, 0)], floors[(0, 1)]]          # above their cuts: kept
    assert db.rounds[1][0] > floors[(1, 0)] and db.rounds[1][1] > 0   # below / none: the cuts
    assert db.closed


@pytest.mark.parametrize("scale, below", [(0.5, True), (1.5, False)])
def test_decomposed_bound_is_the_least_of_itself_and_the_incumbent(monkeypatch, tiny, scale,
                                                                   below):
    floors = _floors(tiny)
    _fake_scip_lower(monkeypatch, {tk: (v, CLOSED) for tk, v in floors.items()})
    want = _by_hand(tiny, floors)
    db = bd.decomposed_bound(tiny, 60.0, scale * want)
    assert db.bound == pytest.approx(scale * want if below else want, rel=1e-12)
    assert db.cutoff == pytest.approx(scale * want, rel=1e-12) or not below


@pytest.mark.parametrize("statuses, closed", [
    ((CLOSED, CLOSED, CLOSED, CLOSED), True),
    ((CLOSED, "provenInfeasible", "locallyInfeasible", CLOSED), True),
    ((CLOSED, CLOSED, "maxTimeLimit", CLOSED), False),
    ((CLOSED, "iterationLimit", CLOSED, CLOSED), False),
    (("unknown", CLOSED, CLOSED, CLOSED), False),
])
def test_decomposed_bound_is_closed_only_when_every_round_is(monkeypatch, tiny, statuses,
                                                             closed):
    floors = _floors(tiny)
    keys = sorted(floors)
    _fake_scip_lower(monkeypatch, {tk: (floors[tk], s) for tk, s in zip(keys, statuses)})
    db = bd.decomposed_bound(tiny, 60.0)
    assert db.closed is closed
    assert [db.status[t][k] for t, k in keys] == list(statuses)
    # and the method says so: optimal when closed, time limit otherwise
    from cefl_opt.solvers.options import BoundOptions
    want = _by_hand(tiny, floors)
    res = bd.solve_decomposed_bound(tiny, BoundOptions(time_limit=60, incumbent=2 * want))
    assert res.termination_condition.value == ("optimal" if closed else "time_limit")
    assert res.bound == pytest.approx(want, rel=1e-12)
    assert res.gap == pytest.approx(0.5, rel=1e-9)
    assert res.solution is None and res.solution_status.value == "no_solution"


class _FakeScip:
    """Stands for SCIP's Pyomo interface in `_scip_lower`: a given termination and bound."""
    tc, bound = None, None

    def solve(self, m, **kw):
        from pyomo.contrib.solver.common.results import TerminationCondition as PyoTC
        return SimpleNamespace(termination_condition=getattr(PyoTC, self.tc),
                               objective_bound=self.bound)


@pytest.mark.parametrize("tc, bound, want", [
    ("convergenceCriteriaSatisfied", 1.5, 1.5),
    ("maxTimeLimit", 1.25, 1.25),
    ("maxTimeLimit", -math.inf, None),          # no bound proven yet
    ("provenInfeasible", 0.5, math.inf),        # no point: +inf, whatever the number says
    ("locallyInfeasible", None, math.inf),
    ("error", None, None),
])
def test_scip_lower_reads_the_termination(monkeypatch, tc, bound, want):
    import pyomo.contrib.solver.solvers.scip.scip_direct as sd

    fake = type("F", (_FakeScip,), {"tc": tc, "bound": bound})
    monkeypatch.setattr(sd, "ScipDirect", fake)
    monkeypatch.setattr(bd, "QuietScip", fake)
    got, name = bd._scip_lower(None, 1.0)
    assert name == tc and got == want


def test_the_step_row_leaves_the_cells_of_gbar_up_to_the_common_gamma_cap():
    # with every DPU at one gamma g, gbar = d T g and the step row holds iff g <= the common
    # cap 1 + T^2 / (4 L^2 (2 zeta1^2 + 1)) (`system.common_gamma_step_cap`, by hand here)
    inst = make_instance("small", seed=3)
    d, T = inst.I, inst.T
    cap = 1.0 + T ** 2 / (4.0 * inst.L ** 2 * (2.0 * inst.zeta1 ** 2 + 1.0))
    assert cap < inst.gamma_max
    at = np.array([d * T * cap * (1 - 1e-6), d * T * cap * (1 + 1e-6)])
    assert bd.step_allows(inst, at, at).tolist() == [True, False]
    # a wide cell keeps a point as long as its top allows the least g_max of its bottom
    assert bd.step_allows(inst, [d * T * cap * 1.01], [d * T * cap * 1.2]).tolist() == [True]
    # per cell, by the cap: the row reads d T^2 x (x - 1) / (cap - 1) <= T g2 at the least
    # g_max x = max(gamma_min, g1 / (d T)); +inf exactly where it fails
    F, _ = bd.ml_floor(inst, cells=50)
    g = np.geomspace(d * T * inst.gamma_min, d * T * inst.gamma_max, 51)
    x = np.maximum(inst.gamma_min, g[:-1] / (d * T))
    keeps = x * (x - 1) / (cap - 1) <= g[1:] / (d * T)
    assert keeps[0] and not keeps[-1]
    assert np.isfinite(F).tolist() == keeps.tolist()
