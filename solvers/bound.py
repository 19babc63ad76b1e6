"""Proven lower bounds on P (`eqn: optimization objective text`) for benchmarks.

`decomposed_bound` (method `decomposed-bound`): P decomposed over rounds and aggregators, an
ML floor plus SCIP's bound of each round with its aggregator fixed (its docstring says why
that is valid). The method `scip` (its option `incumbent`) gives SCIP's dual bound on the
whole binary model. Both use the cuts that every feasible point satisfies and an objective
cutoff, valid as below.

The rows that couple the rounds (eq:convSpecial and Theorem 1's step-size row, corollary form):

* gbar = d sum_t sum_i p_ti gamma_ti, read by the ML term's init, drift, noise, local and
  hetero parts and by the step-size row;
* m_min <= m_ti for every DPU i and round t (`m_min_epi`), read by the noise and local parts;
* g_max >= gamma_ti (`g_max_epi`), read by the local and hetero parts and the step-size row;
* the step-size row 4 d L^2 g_max (g_max - 1)(2 zeta1^2 + 1) <= gbar T;
* the drift part xi1 c0(gbar) sum_t tau_t Delta_t, a product of gbar and every round's delay.

How `decomposed_bound` relaxes them: the ML part takes gbar per cell, g_max at its least
(max(gamma_min, gbar / (d T))) and m_min at most the top of its cell of m_min (`ml_floor`);
the step-size row only removes the cells of gbar where no g_max can meet it (`step_allows`).
The rounds see none of them: gamma_ti = gamma_min (the rounds'
objective grows with gamma), so the gbar and g_max coupling is dropped whole; m_ti = the bottom
of the cell of m_min (the same argument), so the m_min coupling is kept to within one cell
(`m_levels` cells; with none, m_ti = m_floor against m_min <= 1 in the ML part, the whole
coupling dropped); the drift's factor is c0 at the cell's least gbar, its excess over the
least cell's bounded by the aggregator cuts (`_cells`).

Why the bound is valid:

* The aggregator cuts (`add_bound_cuts`) hold at every feasible point of P, so P's feasible set
  and optimum are unchanged. In round t with aggregator k (I_s[t, k] = 1):
  - `delay_agg_UE_mainpaper`: dA_t >= delta^A_n >= dM_nb + beta_M / R_bs[b, k] for UE n's upload
    BS b (`sum_b I_nb = 1`), and R_bs <= Rmax_bs, so dA_t >= max_n min_b (dM_nb +
    beta_M / Rmax_bs[b, k]);
  - `delay_agg_servers_mainpaper`: dA_t >= delta^A_s = dM_{s k} for every DC s;
  - `delay_BS_Reception_mainpaper`: dR_t >= dM_{k b} + delta^B_b >= dM_{k b} + dM_bn for the BS b
    that sends UE n the model (`sum_b I_bn = 1`), so dR_t >= max_n min_b (dM_kb + dM_bn);
  - `delay_server_Reception`: dR_t >= delta^R_s = dM_{k s} for every DC s.
  Exactly one I_s[t, k] is 1, so dA_t >= sum_k LA[t, k] I_s[t, k] (and the same for dR) holds
  at every binary point; its continuous relaxation is what SCIP's LP sees.
* The cutoff U (any number; usually a known feasible objective): every feasible x has either
  J(x) >= U, or J(x) <= U, and then x is feasible for P with the row J <= U, whose optimum SCIP
  bounds below by its dual bound L_U. Hence min P >= min(U, L_U). Under the row, every part of
  the objective is >= 0, so each delay variable is at most U / xi2: the box that the spatial
  branch and bound needs. The same holds with U the objective of a point that `system.evaluate`
  finds feasible (`cap_objective`), and only then: an objective that is not a feasible point's
  may lie below min P, and a box or cap built on it cuts every optimum off. Where SCIP finds no
  point under such a cap, what is proven is min P >= U, not that P is infeasible.
"""
from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo

from cefl_opt import system
from cefl_opt.instance import Instance
from cefl_opt.models import build_problem

from .base import Results, SolutionStatus, TerminationCondition, solve
from .isolation import Isolated, cores, die_with_parent, run_together
from .options import BoundOptions, OptionError
from .scip_interface import QuietScip, finite, scip_params


def delay_floors(inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """Per round t and aggregator k, lower bounds LA[t, k] on dA_t and LR[t, k] on dR_t (in s)
    that every feasible point of P with aggregator k in round t satisfies (module docstring;
    `delay_agg_UE_mainpaper`, `delay_agg_servers_mainpaper`, `delay_BS_Reception_mainpaper`,
    `delay_server_Reception`)."""
    T, S = inst.T, inst.S
    Lu = inst.ue_links()
    dM_ss = inst.beta_M / inst.R_ss
    dM_sb = inst.beta_M / inst.R_sb                       # [T, S, B]
    path = inst.beta_M / inst.Rmax_bs                     # [B, S]: fastest BS -> DC gradient
    LA, LR = np.zeros((T, S)), np.zeros((T, S))
    for t in range(T):
        ss = dM_ss[t].copy()
        np.fill_diagonal(ss, 0.0)
        for k in range(S):
            up = max(min(inst.beta_M / inst.R_nb[t, n, b] + path[b, k] for b in Lu[n])
                     for n in range(inst.N))
            down = max(min(dM_sb[t, k, b] + inst.beta_M / inst.R_bn[t, b, n] for b in Lu[n])
                       for n in range(inst.N))
            LA[t, k] = max(up, float(ss[:, k].max()))
            LR[t, k] = max(down, float(ss[k, :].max()))
    return LA, LR


def add_bound_cuts(m, inst: Instance) -> None:
    """The aggregator cuts dA_t >= sum_k LA[t, k] I_s[t, k], dR_t >= sum_k LR[t, k] I_s[t, k]
    (`delay_floors`) as `m.bound_cuts`, and min_k of each as the lower bound of dA_t, dR_t.
    Valid for every feasible point (module docstring): P's feasible set does not change. On the
    compact model (`build_problem(copies=False)`), whose dA, dR, I_s are dc[0]'s."""
    LA, LR = delay_floors(inst)
    own = m.dc[0]
    m.bound_cuts = pyo.Block()
    m.bound_cuts.dA = pyo.Constraint(m.T, rule=lambda c, t: own.dA[t] >= sum(
        float(LA[t, k]) * own.Is[t, k] for k in m.S))
    m.bound_cuts.dR = pyo.Constraint(m.T, rule=lambda c, t: own.dR[t] >= sum(
        float(LR[t, k]) * own.Is[t, k] for k in m.S))
    for t in m.T:
        for v, lo in ((own.dA[t], LA[t].min()), (own.dR[t], LR[t].min())):
            v.setlb(max(float(lo), v.lb or 0.0))


def cap_objective(inst: Instance, incumbent: float | None = None, *,
                  bound: str = "corollary", weights: dict[str, float] | None = None
                  ) -> tuple[float | None, str | None]:
    """(U, its source) for the cutoff, the delay cap and the box (module docstring): the least
    of the given `incumbent` ("incumbent") and the objectives of the reference orchestrations
    with their rates within both capacities, one per aggregator, that `system.evaluate` finds
    feasible ("reference"); (None, None) when there is neither."""
    best, src = (incumbent, "incumbent") if incumbent is not None else (None, None)
    ref = verified_reference(inst, bound=bound, weights=weights)
    if ref is not None and (best is None or ref[1] < best):
        best, src = ref[1], "reference"
    return best, src


def verified_reference(inst: Instance, *, bound: str = "corollary",
                       weights: dict[str, float] | None = None):
    """(solution, objective) of the best reference orchestration (`system.reference_solution`
    with `within_capacity`, over the aggregators) that `system.evaluate` finds feasible; None
    when none is."""
    best = None
    for k in range(inst.S):
        sol = system.reference_solution(inst, k, within_capacity=True)
        ev = system.evaluate(inst, sol, bound=bound, weights=weights)
        if ev.feasible and math.isfinite(ev.objective) and (best is None or ev.objective < best[1]):
            best = (sol, float(ev.objective))
    return best


# ---------------------------------------------------------------------- decomposition
def round_instance(inst: Instance, t: int) -> Instance:
    """Round t of `inst` as a one-round instance (every per-round field sliced)."""
    from cefl_opt.instance import FIELDS
    d = inst.to_dict()
    for name, spec in FIELDS.items():
        if spec.shape.startswith("T"):
            d[name] = d[name][t:t + 1]
    if d.get("ue_labels"):
        d["ue_labels"] = d["ue_labels"][t:t + 1]
    return Instance.from_dict(d)


def _scip_lower(m, time_limit: float, seed: int = 0) -> tuple[float | None, str]:
    """SCIP's proven lower bound on model `m` (its active objective) within `time_limit` s,
    and SCIP's termination ('provenInfeasible': no point, the bound is +inf)."""
    params = scip_params(float(time_limit), 1e-6, seed)
    res = QuietScip().solve(m, tee=False, solver_options=params, load_solutions=False,
                             raise_exception_on_nonoptimal_result=False)
    tc = res.termination_condition.name
    if tc in ("provenInfeasible", "locallyInfeasible"):
        return math.inf, tc
    return finite(res.objective_bound), tc


def round_model(inst: Instance, t: int, a: float, mu: float, *, cap: float | None,
                weights: dict[str, float] | None = None, aggregator: int | None = None):
    """Round t's subproblem: a * (dA_t + dR_t) + xi3 * E_t (round t's delay, weighted by a,
    and energy) over round t's feasible points with every mini-batch ratio m_i >= mu and
    dA_t, dR_t <= cap. The objective is nondecreasing in every gamma_i and m_i (dP and EP grow
    with gamma m, and the delay rows only loosen when they fall), so gamma = gamma_min and
    m = mu attain its minimum and are fixed; the bound's rows (m_min, g_max epigraphs, the
    step-size row) are dropped, which only relaxes. The aggregator cuts are added.

    Each DC's speed z_s is raised to at least `dc_speed_floor` (`const: Data Center data
    capacity 2 1 main`): z_s enters only the DC's processing delay dP_s, which falls as z_s
    grows, and its energy EP_s = gamma m D_s Pbar (rho_idle z_s / C^2 + (1 - rho_idle) / z_s),
    which falls up to that speed; so raising z_s to it keeps a point feasible and its objective
    no higher, and some minimiser lies above it."""
    r = round_instance(inst, t)
    m = build_problem(r, binaries="binary", bound="corollary", weights=weights, copies=False,
                      delay_cap=cap)
    add_bound_cuts(m, r)
    for blk in list(m.ue.values()) + list(m.dc.values()):
        for k in m.T:
            blk.gamma[k].fix(r.gamma_min)
            blk.m[k].fix(mu)
    zlo = dc_speed_floor(r)
    for blk in m.dc.values():
        blk.z[0].setlb(max(float(blk.z[0].lb), zlo))
    own = m.dc[0]
    own.coupling.step.deactivate()
    for blk in list(m.ue.values()) + list(m.dc.values()):
        blk.coupling.m_min_epi.deactivate()
        blk.coupling.g_max_epi.deactivate()
    own.m_min.fix(r.m_floor)
    own.g_max.fix(r.gamma_min)
    if aggregator is not None:
        for k in m.S:
            own.Is[0, k].fix(1.0 if k == aggregator else 0.0)
    m.obj.deactivate()
    xi3 = m._weights["xi3"]
    m.round_obj = pyo.Objective(expr=a * (own.dA[0] + own.dR[0]) + xi3 * m.energy_term)
    return m


def dc_speed_floor(inst: Instance) -> float:
    """z / C from which a DC's processing energy per data point, Pbar (rho_idle z / C^2 +
    (1 - rho_idle) / z), stops falling: sqrt((1 - rho_idle) / rho_idle), at most 1 (z <= C);
    1 when rho_idle <= 1/2 (`round_model`)."""
    rho = float(inst.rho_idle)
    return min(1.0, math.sqrt((1.0 - rho) / rho))


def ml_floor(inst: Instance, weights: dict[str, float] | None = None,
             cells: int = 400, m_hi: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(F, c0) per cell [g1, g2] of gbar: F a lower bound on xi1 times the part of the ML term
    of eq:convSpecial without its drift, c0 (F0 - F*) + 16 L vt Theta sigma^2 sqrt(d/T) /
    (m_min sqrt(gbar)) + 12 L^2 d Theta sigma^2 g_max / (gbar m_min T)
    + 12 L^2 zeta2 d g_max^2 / (gbar T), and c0 a lower bound on xi1 times the drift's
    factor c0 = 4 sqrt(gbar) / (vt sqrt(d T)), over the cell. gbar = d sum_t sum_i p_ti
    gamma_ti lies in [d T gamma_min, d T gamma_max] and g_max >= max(gamma_min, gbar / (d T))
    (the shares p_ti of a round sum to 1); m_min <= m_hi (1: every point); each term is
    bounded by its monotone end of the cell. The cells are `cells` geometric ones. The
    corollary form with a constant vartheta only (ValueError otherwise)."""
    if inst.vartheta_mode != "constant":
        raise ValueError(f"the decomposed bound needs vartheta_mode 'constant', got "
                         f"{inst.vartheta_mode!r}")
    T, d = inst.T, inst.I
    xi1 = (weights or {}).get("xi1", inst.xi1)
    vt, L, F0, z2 = float(inst.vartheta), inst.L, inst.F0_minus_Fstar, inst.zeta2
    ts = float(inst.Theta.max()) * float(inst.sigma.max()) ** 2
    gmin, gcap = inst.gamma_min, inst.gamma_max
    g = np.geomspace(d * T * gmin, d * T * gcap, cells + 1) if gcap > gmin \
        else np.array([d * T * gmin] * 2)
    g1, g2 = g[:-1], g[1:]
    c0 = 4.0 * np.sqrt(g1) / (vt * math.sqrt(d * T))
    noise = 16.0 * L * vt * ts * math.sqrt(d / T) / np.sqrt(g2) / m_hi
    local = 12.0 * L ** 2 * d * ts / T * np.maximum(gmin / g2, 1.0 / (d * T)) / m_hi
    hetero = 12.0 * L ** 2 * z2 * d / T * np.maximum(gmin ** 2 / g2, g1 / (d * T) ** 2)
    F = xi1 * (c0 * F0 + noise + local + hetero)
    return np.where(step_allows(inst, g1, g2), F, np.inf), xi1 * c0


def step_allows(inst: Instance, g1: np.ndarray, g2: np.ndarray) -> np.ndarray:
    """Per cell [g1, g2] of gbar, whether some point in it can meet Theorem 1's step-size row
    4 d L^2 g_max (g_max - 1)(2 zeta1^2 + 1) <= gbar T (`models.problem._step_row`): its left
    side grows with g_max from 1/2 on, and g_max >= max(gamma_min, gbar / (d T)) >=
    max(gamma_min, g1 / (d T)), while gbar T <= g2 T. A cell where even that least left side
    exceeds g2 T holds no feasible point of P (`ml_floor` gives it +inf)."""
    d, T = inst.I, inst.T
    g = np.maximum(np.maximum(inst.gamma_min, np.asarray(g1) / (d * T)), 0.5)
    lhs = 4.0 * d * inst.L ** 2 * g * (g - 1.0) * (2.0 * inst.zeta1 ** 2 + 1.0)
    return lhs <= np.asarray(g2) * T * (1.0 + 1e-12)


#: SCIP's termination names under which a round's floor is all that SCIP can give
CLOSED = ("convergenceCriteriaSatisfied", "provenInfeasible", "locallyInfeasible")
#: the status of a subproblem that the time limit left no time for (its floor: the cuts)
NOT_RUN = "notRun"
#: the status of a subproblem above the first level that the least over the aggregators did
#: not need (its floor: the levels' below)
NOT_NEEDED = "notNeeded"
#: the status of a subproblem while its solve runs
RUNNING = "running"
#: the least time worth giving SCIP for one subproblem (s); with less left, the cuts only
MIN_SHARE = 0.05
#: the part of each share that SCIP gets; the rest covers loading the model into SCIP
SCIP_PART = 0.8


@dataclass
class Level:
    """One level of the mini-batch partition: `floors[t][k]`, a lower bound on round t's
    subproblem with aggregator k over the points with every m_i >= `mu` (SCIP's bound of
    `round_model` with m = mu, or the cuts'), and `status[t][k]`, SCIP's termination there."""
    mu: float
    floors: list[list[float]]
    status: list[list[str]]


@dataclass
class DecomposedBound:
    """What `decomposed_bound` proved: `bound` (a lower bound on min P; +inf: P has no point),
    its parts (`ml`: the ML floor of the least cell; `rounds[t][k]`: round t's floor with
    aggregator k at m = m_floor, +inf where SCIP proved no point under the cap, `status[t][k]`
    SCIP's termination there, `NOT_RUN` where no time was left; `cells`: the bound per cell of
    gbar, whose edges are `cell_edges`; `levels`: every level of the mini-batch partition,
    the first at m_floor; `m_cell`: the cell of m_min with the least bound), the cutoff U used
    (None: none) and where it came from ("incumbent", "reference"), the wall time, and
    `closed`: every round floor closed by SCIP."""
    bound: float
    ml: float
    rounds: list[list[float]]
    status: list[list[str]]
    cutoff: float | None
    wall_s: float
    closed: bool
    cutoff_source: str | None = None
    cells: list[float] | None = None
    cell_edges: list[float] | None = None
    levels: list[Level] | None = None
    m_cell: tuple[float, float] | None = None


class _Rounds:
    """The round subproblems of `decomposed_bound` under one deadline, up to `workers` at a
    time, each SCIP solve in a child process of its own (`isolation.Isolated`). Each keeps the
    cuts' floor `cut[t][k]` (or a lower level's) where SCIP proves less or no time is left."""

    def __init__(self, inst: Instance, weights, seed: int, deadline: float, a, caps, cut, bar,
                 workers: int = 1):
        self.inst, self.weights, self.seed, self.deadline = inst, weights, seed, deadline
        self.a, self.caps, self.cut, self.bar, self.workers = a, caps, cut, bar, workers

    def first(self, mu: float, reserve: int) -> Level:
        """Every round subproblem with m = mu (`_run`)."""
        T, S = self.inst.T, self.inst.S
        lv = Level(mu, [row[:] for row in self.cut], [[NOT_RUN] * S for _ in range(T)])
        self._run([(lv, t, k) for t in range(T) for k in range(S)], reserve)
        return lv

    def above(self, mu: float, below: list[list[float]], reserve: int) -> Level:
        """The level at mu over the greatest floors `below` of the levels under it. Each
        round's aggregators go in the order of their floors, the rounds taking turns; one is
        skipped (status `NOT_NEEDED`) when its floor is at least the least that this level has
        proved for its round: the least over k cannot change then."""
        T, S = self.inst.T, self.inst.S
        lv = Level(mu, [row[:] for row in below], [[NOT_NEEDED] * S for _ in range(T)])
        order = [sorted(range(S), key=lambda k, t=t: below[t][k]) for t in range(T)]

        def least(t: int) -> float:
            return min((lv.floors[t][j] for j in range(S)
                        if lv.status[t][j] not in (NOT_NEEDED, RUNNING)), default=math.inf)

        def needed(t: int, k: int) -> bool:
            return below[t][k] < least(t)

        def expected(pending) -> int:
            """One job for a round with none proved yet, else its jobs still needed."""
            todo = {t for _, t, _ in pending if least(t) == math.inf}
            return len(todo) + sum(1 for _, t, k in pending if t not in todo and needed(t, k))
        self._run([(lv, t, order[t][i]) for i in range(S) for t in range(T)], reserve, needed,
                  expected)
        return lv

    def rerun(self, levels: list[Level]) -> None:
        """Those that ran out of time, again, with what the others left: the lowest level
        first, since its floors hold in every cell of m_min above it."""
        self._run([(lv, t, k) for lv in sorted(levels, key=lambda lv: lv.mu)
                   for t, row in enumerate(lv.status) for k, st in enumerate(row)
                   if st == "maxTimeLimit"], 0, tick=False)

    def _run(self, jobs: list[tuple[Level, int, int]], reserve: int, needed=None,
             expected=len, *, tick: bool = True) -> None:
        """SCIP on each job (lv, t, k) that `needed(t, k)` (when given) still asks for when
        its turn comes: one after the other in this process with one worker, else `workers`
        at a time, each in a child process (`isolation.run_together`). A job gets `SCIP_PART`
        of its share: the time left times `workers` over the jobs `expected` to run of itself
        and those still to start, and `reserve` more to come, at most the time left; one whose
        share is below `MIN_SHARE` does not run. Each floor is raised to SCIP's bound as its
        solve ends."""
        pending, live = list(jobs), []

        def take():
            """The next job to run and its seconds for SCIP; None when none is left."""
            while pending:
                lv, t, k = pending.pop(0)
                if tick and self.bar is not None:
                    self.bar.update(1)
                if needed is not None and not needed(t, k):
                    continue
                left = self.deadline - _now()
                n = max(1, expected([(lv, t, k)] + pending) + reserve)
                share = SCIP_PART * min(left, self.workers * left / n)
                if share < MIN_SHARE:
                    lv.status[t][k] = NOT_RUN
                    continue
                lv.status[t][k] = RUNNING
                return lv, t, k, (self.inst, t, self.a[t], lv.mu, self.caps[t], self.weights,
                                  k, share, self.seed)
            return None

        def start():
            self._collect(live)
            job = take()
            if job is not None:
                live.append((*job[:3], Isolated(_round_floor, *job[3], label="SCIP")))
                return live[-1][3]
            return None
        if self.workers == 1:
            while (job := take()) is not None:
                _raise(*job[:3], _round_floor(*job[3]))
            return
        run_together([start] * len(jobs), self.workers)
        self._collect(live)

    @staticmethod
    def _collect(live: list) -> None:
        """Raise each ended child's floor to SCIP's bound and take it out of `live`; a crashed
        solve raises."""
        for job in [job for job in live if job[3].done]:
            live.remove(job)
            _raise(*job[:3], job[3].result())


def _raise(lv: Level, t: int, k: int, outcome: tuple[float | None, str]) -> None:
    """Raise lv's floor of round t with aggregator k to SCIP's bound `outcome[0]` (None: no
    bound) and keep SCIP's termination `outcome[1]`."""
    lo, lv.status[t][k] = outcome
    lv.floors[t][k] = lv.floors[t][k] if lo is None else max(lo, lv.floors[t][k])


def _round_floor(inst: Instance, t: int, a: float, mu: float, cap: float | None, weights,
                 k: int, seconds: float, seed: int) -> tuple[float | None, str]:
    """SCIP's lower bound on `round_model` (round t, aggregator k, m = mu) within `seconds`,
    and its termination: the work of one child of `_Rounds`."""
    m = round_model(inst, t, a, mu, cap=cap, weights=weights, aggregator=k)
    return _scip_lower(m, seconds, seed)


def _now() -> float:
    import time
    return time.monotonic()


def decomposed_bound(inst: Instance, time_limit: float, incumbent: float | None = None, *,
                     weights: dict[str, float] | None = None, seed: int = 0,
                     progress: bool = False, m_levels: int = 0,
                     workers: int = 1) -> DecomposedBound:
    """A proven lower bound on P (`eqn: optimization objective text`, corollary form with a
    constant vartheta) by decomposing it over rounds and aggregators, within `time_limit`
    seconds of wall time (each subproblem gets an equal share of what is left, and those that
    run out of it a second share of what the others left; one with no time left keeps the
    cuts' floor).

    Writing J = xi1 (c0 (F0 - F*) + noise + local + hetero) + xi1 c0 sum_t tau_t Delta_t
    + xi2 sum_t tau_t + xi3 sum_t E_t (eq:convSpecial, tau_t = dA_t + dR_t), the first part
    depends only on gbar, m_min, g_max and is at least `ml_floor`'s F, and c0 >= c0_lo; what
    is left, sum_t (a_t tau_t + xi3 E_t) with a_t = c0_lo Delta_t + xi2, separates by round
    once the coupling through gbar, m_min, g_max and the step-size row is dropped (a
    relaxation; the row only removes the cells of gbar it leaves no point in, `step_allows`).
    Round t's part is at least min_k of SCIP's bound on `round_model` with aggregator k fixed
    (m_i >= m_floor); where SCIP proves no bound in its share of the time, the aggregator cuts
    give a_t (LA[t, k] + LR[t, k]) (`delay_floors`). Per cell of gbar
    (`ml_floor`), min P >= F + sum_t min_k (floor[t][k] + (c0 - c0_lo) Delta_t (LA + LR)[t, k]),
    and the bound is the least cell.

    The coupling through m_min is put back by a partition (`m_levels` > 0): m_min <= m_i for
    every i and t, so on the points with m_min in [mu_j, mu_j+1] every round has m_i >= mu_j,
    whose floors come from `round_model` with m = mu_j (its objective grows with every m_i),
    while the ML floor takes m_min <= mu_j+1 (`ml_floor`'s m_hi). The levels mu_0 = m_floor <
    mu_1 < ... are chosen one after the other (`_next_level`); each costs T S subproblems,
    a floor at a lower level holds at a higher one, and the bound is the least over the cells
    of m_min and gbar. m_levels = 0 is the single cell [m_floor, 1] above.

    With a cutoff U (`cap_objective`: the given `incumbent`, or a reference orchestration that
    `system.evaluate` finds feasible, whichever is less) the delays of round t are capped at
    (U - min F) / a_t (J >= min F + a_t tau_t) and the result is min(U, that bound):
    min P >= min(U, min{J : J <= U}) (module docstring). With neither, there is no cap, and
    +inf (no cell with a point) proves that P has none. The tighter U, the better SCIP bounds
    each round: pass the best known objective.
    """
    import time
    if not _positive(time_limit):
        raise ValueError(f"option 'time_limit' must be a positive number of seconds, got "
                         f"{time_limit!r}")
    if incumbent is not None and not _positive(incumbent):
        raise ValueError(f"option 'incumbent' must be a positive finite objective, got "
                         f"{incumbent!r}")
    t0 = time.monotonic()
    F, c0 = ml_floor(inst, weights)
    w = {"xi2": inst.xi2, **(weights or {})}
    top, source = cap_objective(inst, incumbent, weights=weights)
    LA, LR = delay_floors(inst)
    T, S = inst.T, inst.S
    a = [c0[0] * float(inst.Delta[t].sum()) + w["xi2"] for t in range(T)]
    # J >= F + a tau_t >= min F + a dA_t (every part >= 0), J <= top: a delay cap
    caps = [(top - float(F.min())) / a[t] if top is not None and a[t] > 0 else None
            for t in range(T)]
    cut = [[a[t] * float(LA[t, k] + LR[t, k]) for k in range(S)] for t in range(T)]
    bar = _bar(progress, T * S * (1 + m_levels))
    rounds = _Rounds(inst, weights, seed, t0 + time_limit, a, caps, cut, bar, workers)
    levels = [rounds.first(inst.m_floor, m_levels * T)]
    for r in range(m_levels):
        mu = _next_level(inst, weights, levels, top, m_levels - r)
        if mu is None:
            break
        below = np.max([lv.floors for lv in levels if lv.mu < mu], axis=0).tolist()
        levels.append(rounds.above(mu, below, (m_levels - 1 - r) * T))
    rounds.rerun(levels)
    if bar is not None:
        bar.close()
    total, ml, cell = _partition(inst, weights, levels, LA + LR)
    j = int(np.argmin(total))
    b = float(total[j]) if top is None else min(float(total[j]), top)
    g = np.geomspace(inst.I * T * inst.gamma_min, inst.I * T * inst.gamma_max, len(F) + 1)
    return DecomposedBound(bound=b, ml=float(ml[j]), rounds=levels[0].floors,
                           status=levels[0].status, cutoff=top, cutoff_source=source,
                           wall_s=time.monotonic() - t0,
                           closed=all(s in CLOSED + (NOT_NEEDED,) for lv in levels
                                      for row in lv.status for s in row),
                           cells=[float(x) for x in total], cell_edges=[float(x) for x in g],
                           levels=levels, m_cell=cell[j])


def _partition(inst: Instance, weights, levels: list[Level], tau_lo: np.ndarray):
    """Per cell of gbar: the bound, least over the cells [mu_j, mu_j+1] of m_min (the last up
    to 1) of `_cells` with F for m_min <= mu_j+1 and level j's floors, each raised to the
    greatest floor of the levels below it (a floor at m_i >= mu holds at every higher mu); the
    F of that least cell; and that cell (`decomposed_bound`)."""
    order, raised = _raised(levels)
    tops = [lv.mu for lv in order[1:]] + [1.0]
    best = ml = cell = None
    for lv, hi, eff in zip(order, tops, raised):
        F, c0 = ml_floor(inst, weights, m_hi=hi)
        tot = _cells(inst, F, c0, eff, tau_lo)
        if best is None:
            best, ml, cell = tot, F, [(lv.mu, hi)] * len(F)
            continue
        won = tot < best
        best, ml = np.where(won, tot, best), np.where(won, F, ml)
        cell = [(lv.mu, hi) if x else c for x, c in zip(won, cell)]
    return best, ml, cell


def _raised(levels: list[Level]) -> tuple[list[Level], np.ndarray]:
    """The levels in the order of mu, and their floors [level, t, k], each raised to the
    greatest of the levels at or below it (a floor at m_i >= mu holds at every higher mu)."""
    order = sorted(levels, key=lambda lv: lv.mu)
    return order, np.maximum.accumulate(np.array([lv.floors for lv in order], float), axis=0)


#: levels of m_min that `_next_level` considers: this many evenly spaced in (m_floor, 1)
CANDIDATES = 200
#: with one level and no cutoff, the gain that `_next_level` guesses for the rounds at m = 1
#: (a share of their floor at m_floor); only where to branch depends on it
FIRST_GUESS = 0.05


def _next_level(inst: Instance, weights, levels: list[Level], top: float | None,
                left: int = 1):
    """The next level of the mini-batch partition (`decomposed_bound`): the lowest of the
    `left` new levels, placed together on `CANDIDATES` evenly spaced mu in (m_floor, 1), that
    maximise the predicted bound min_j (min F(m_min <= mu_j+1) + R_j), R_j = sum_t min_k of
    level j's floors, with R at mu interpolated linearly between the levels solved and R at 1
    extrapolated from the top two (with one level, its R plus the gap to the cutoff `top`, or
    `FIRST_GUESS` of it without one). None when no placement predicts a gain. It only chooses
    where to branch: no bound rests on it."""
    fmin = functools.lru_cache(maxsize=None)(
        lambda hi: float(ml_floor(inst, weights, m_hi=hi)[0].min()))
    order, raised = _raised(levels)
    mus, R = [lv.mu for lv in order], raised.min(axis=2).sum(axis=1)
    now = min(fmin(float(h)) + r for h, r in zip(mus[1:] + [1.0], R))
    if not math.isfinite(now) or mus[-1] >= 1.0:
        return None
    if len(mus) > 1:
        R1 = R[-1] + (R[-1] - R[-2]) / (mus[-1] - mus[-2]) * (1.0 - mus[-1])
    else:
        R1 = R[0] + (top - now if top is not None and top > now else FIRST_GUESS * R[0])
    grid = np.linspace(inst.m_floor, 1.0, CANDIDATES + 2)[1:-1]
    cand = np.array(sorted(set(mus) | {float(x) for x in grid}))
    new = (~np.isin(cand, mus)).astype(float)
    Rc = np.interp(cand, mus + [1.0], list(R) + [R1])
    Fc = np.array([fmin(float(c)) for c in cand])

    def plan(V: float):
        """The fewest new levels (at most `left`) with every cell predicted at least V, as
        a list of mu; None if there is none. Cell [cand_i, cand_j] is predicted
        Fc[j] + Rc[i] (and F(1) + Rc[i] for the top cell); a forward pass over cand, each
        level as high as V allows (the higher of equal paths)."""
        cost, parent = np.full(len(cand), np.inf), np.full(len(cand), -1)
        cost[0] = 0.0
        for i in range(len(cand)):
            if cost[i] <= left:
                ok = np.zeros(len(cand), bool)
                ok[i + 1:] = Fc[i + 1:] + Rc[i] >= V
                ok &= cost[i] + new <= cost          # ties: the higher parent
                cost[ok], parent[ok] = cost[i] + new[ok], i
        ends = [i for i in range(len(cand)) if cost[i] <= left and fmin(1.0) + Rc[i] >= V]
        if not ends:
            return None
        j, path = min(ends, key=lambda i: (cost[i], -i)), []
        while j >= 0:
            path.append(j)
            j = parent[j]
        return [float(cand[i]) for i in path if new[i]]
    lo, hi = now, fmin(1.0) + float(Rc.max())
    if hi <= lo or not plan(lo + 1e-9 * abs(lo)):
        return None
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if plan(mid) else (lo, mid)
    return min(plan(lo))


def _cells(inst: Instance, F: np.ndarray, c0: np.ndarray, floors: list[list[float]],
           tau_lo: np.ndarray) -> np.ndarray:
    """The bound per cell j of gbar: F[j] + sum_t min_k (floors[t][k] + rise). Its c0[j] >=
    c0[0] raises round t's weight a_t by (c0[j] - c0[0]) Delta_t, and tau_t >= LA + LR
    (`tau_lo`), so the floor rises by at least that times LA + LR (a linear lower bound)."""
    drift = np.array([float(inst.Delta[t].sum()) for t in range(inst.T)])
    rise = (c0 - c0[0])[:, None, None] * drift[None, :, None] * tau_lo[None]   # [cells, T, S]
    return F + (np.array(floors)[None] + rise).min(axis=2).sum(axis=1)


def _positive(x) -> bool:
    return (isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
            and x > 0)


def _bar(progress: bool, total: int):
    if not progress:
        return None
    import sys

    from tqdm import tqdm
    return tqdm(total=total, desc="bound", unit="subproblem", file=sys.stderr)


#: the part of `decomposed-bound`'s time limit that the incumbent's solve may use
INCUMBENT_SHARE = 0.3


def solve_decomposed_bound(inst: Instance, opts: BoundOptions) -> Results:
    """`decomposed-bound`: `decomposed_bound` with the whole method within `opts.time_limit`
    seconds. Without `opts.incumbent`, `decentralized` runs first, stopped after
    `INCUMBENT_SHARE` of the time limit; its answer, where `system.evaluate` finds it
    feasible, is the incumbent that caps the delays and the solution reported (the gap is then
    (its objective - bound) / its objective); the bound gets the time left. The status is
    optimal when SCIP closed every round subproblem (the bound is then all the decomposition
    can give), time limit otherwise, infeasible when, with no cutoff, no round has a point.
    `report` is what was proven (`bound_report`)."""
    import time

    if opts.bound != "corollary" or inst.vartheta_mode != "constant":
        raise OptionError(f"method 'decomposed-bound' needs bound 'corollary' and vartheta_mode "
                          f"'constant', got {opts.bound!r} and {inst.vartheta_mode!r}")
    if opts.time_limit is None:
        raise OptionError("option 'time_limit' must be a positive number of seconds for method "
                          "'decomposed-bound', got none")
    t0 = time.monotonic()
    sol, inc, info = None, opts.incumbent, {}
    if inc is None:
        info["incumbent_method"] = "decentralized"
        sol, inc = _incumbent(inst, opts.weights, INCUMBENT_SHARE * opts.time_limit)
    left = opts.time_limit - (time.monotonic() - t0)
    db = decomposed_bound(inst, max(left, 1e-3), inc, weights=opts.weights,
                          progress=opts.progress, m_levels=opts.m_levels,
                          workers=opts.workers or cores())
    gap = None if inc is None else max(0.0, (inc - db.bound) / inc)
    info.update({"ml_floor": db.ml, "round_floors": db.rounds, "scip_status": db.status,
                 "incumbent": inc})
    report = bound_report(inst, db, inc, gap, opts, wall_s=time.monotonic() - t0)
    if math.isinf(db.bound):
        return Results(method="decomposed-bound",
                       termination_condition=TerminationCondition.provenInfeasible,
                       solution_status=SolutionStatus.noSolution, info=info, report=report,
                       reasons=["with every aggregator, some round has no point (SCIP, with no "
                                "cutoff)"])
    tc = TerminationCondition.convergenceCriteriaSatisfied if db.closed \
        else TerminationCondition.maxTimeLimit
    return Results(method="decomposed-bound", termination_condition=tc,
                   solution_status=SolutionStatus.feasible if sol is not None
                   else SolutionStatus.noSolution, solution=sol,
                   objective=None if sol is None else inc, bound=db.bound, gap=gap, info=info,
                   report=report,
                   message=None if sol is not None else "a bound only: no solution is reported")


def _incumbent(inst: Instance, weights: dict[str, float] | None, seconds: float):
    """(solution, objective) of `decentralized` run in a child process that is stopped after
    `seconds`, where `system.evaluate` finds its answer feasible; (None, None) otherwise."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_send_result, args=(send, inst), daemon=True)
    child.start()
    send.close()
    try:
        r = recv.recv() if recv.poll(seconds) else None
    except EOFError:                                  # the child died without an answer
        r = None
    finally:
        child.kill()
        child.join()
        recv.close()
    if r is None or r.solution is None:
        return None, None
    ev = system.evaluate(inst, r.solution, weights=weights)
    if not ev.feasible:
        return None, None
    r.solution.objective, r.solution.terms = ev.objective, ev.terms
    return r.solution, float(ev.objective)


def _send_result(conn, inst: Instance) -> None:
    """The child of `_incumbent`: `decentralized`'s Results (None if it raised) on `conn`; it
    dies with its parent. `decentralized` optimises the instance's weights; `_incumbent` scores
    its point under the bound's, so that the bound and the incumbent compare one objective."""
    die_with_parent()
    try:
        conn.send(solve(inst, "decentralized"))
    except Exception:  # noqa: BLE001 - no incumbent; the bound runs without it
        conn.send(None)


def bound_report(inst: Instance, db: DecomposedBound, incumbent: float | None,
                 gap: float | None, opts: BoundOptions, *, wall_s: float) -> dict:
    """What `decomposed-bound` proved, as JSON (format cefl-bound/1): the bound, the incumbent
    and the cutoff used (null: none), the gap, the ML floor, each round's floor and SCIP
    status per aggregator at m = m_floor, the bound per cell of gbar, every level of the
    partition of m_min (`m_levels`, the first being `rounds`) with its floors and statuses,
    the cell of m_min whose bound is the least (`m_cell`), and the method's wall time
    `wall_s`. A floor or bound of +inf (SCIP proved no point) is null, with its status."""
    def num(x):
        return float(x) if x is not None and math.isfinite(x) else None
    return {"format": "cefl-bound/1", "instance": inst.name, "method": "decomposed-bound",
            "bound": num(db.bound), "incumbent": num(incumbent), "cutoff": num(db.cutoff),
            "cutoff_source": db.cutoff_source, "gap": num(gap), "closed": db.closed,
            "time_limit": opts.time_limit, "wall_s": wall_s, "weights": opts.weights,
            "ml_floor": num(db.ml),
            "rounds": [{"round": t, "floors": [num(x) for x in db.rounds[t]],
                        "scip_status": db.status[t]} for t in range(len(db.rounds))],
            "cells": {"gbar_edges": db.cell_edges, "bounds": [num(x) for x in db.cells]},
            "m_levels": [{"m_min": lv.mu, "floors": [[num(x) for x in row] for row in lv.floors],
                          "scip_status": lv.status} for lv in db.levels or []],
            "m_cell": None if db.m_cell is None else list(db.m_cell)}
