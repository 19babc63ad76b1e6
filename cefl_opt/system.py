"""The system model of CE-FL in numpy (paper §II-E, §III, objective (P); docs/formulation.md,
'4. Delays and energies' and '5. The objective').

This is the one numpy source of truth for delays, energies and the ML bound. The Pyomo model in
`cefl_opt.models` writes the same equations symbolically; `tests/test_model_agreement.py` proves
that the two agree. Given an orchestration (a `Solution`), every max in the paper is evaluated
exactly here (no epigraph variables).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .instance import Instance, validated
from .solution import RoundDecision, Solution
from .weights import WEIGHT_KEYS, weights_problem  # noqa: F401  (re-exported)

FEAS_TOL = 1e-6  # relative tolerance of `evaluate`'s feasibility check (documented in README)
BOUND_FORMS = ("corollary", "general")  # eq:convSpecial / eq:GenConvBound


# ---- per-round physics -----------------------------------------------------------------
def link_coef(inst: Instance, num, R: np.ndarray, transpose: bool = False) -> np.ndarray:
    """num / R over the UE-BS links ([N, B], or [B, N] with transpose), +inf on absent links:
    using an absent link costs an infinite delay and energy (and `evaluate` flags it)."""
    mask = inst.link_mask.T if transpose else inst.link_mask
    out = np.full(R.shape, np.inf)
    np.divide(np.broadcast_to(num, R.shape), R, out=out, where=mask)
    return out


def _use(coef: np.ndarray, x: np.ndarray) -> np.ndarray:
    """coef * x with 0 where x == 0 (so that an unused absent link, coef = inf, costs 0)."""
    return np.where(x != 0, coef * np.where(x != 0, x, 1.0), 0.0)


def data_split(inst: Instance, t: int, r: RoundDecision) -> dict[str, np.ndarray]:
    """D_n (eq:dataRemainAtDevice), D_b, D_s (eq:DataCollecteatServer) and D."""
    Dbar = inst.Dbar[t]
    D_n = (1.0 - r.rho_nb.sum(axis=1)) * Dbar
    D_b = r.rho_nb.T @ Dbar
    D_s = r.rho_bs.T @ D_b
    return {"D_n": D_n, "D_b": D_b, "D_s": D_s, "D": float(Dbar.sum())}


def round_terms(inst: Instance, t: int, r: RoundDecision) -> dict[str, Any]:
    """Every delay and energy of round t (paper §II-E) for decision r."""
    bD, bM = inst.beta_D, inst.beta_M
    N, B, S = inst.N, inst.B, inst.S
    ds = data_split(inst, t, r)
    D_n, D_b, D_s = ds["D_n"], ds["D_b"], ds["D_s"]
    agg = int(r.aggregator)
    up, down = np.asarray(r.uplink_bs, int), np.asarray(r.downlink_bs, int)
    n_idx = np.arange(N)

    # transfers (per UE-BS link; +inf on absent links, `link_coef`)
    dD_nb = _use(link_coef(inst, bD * inst.Dbar[t][:, None], inst.R_nb[t]), r.rho_nb)
    dM_nb = link_coef(inst, bM, inst.R_nb[t])
    dD_bs = bD * D_b[:, None] * r.rho_bs / r.R_bs
    dM_bs = bM / r.R_bs
    dM_ss = bM / inst.R_ss[t]
    np.fill_diagonal(dM_ss, 0.0)  # delta^M_{s,s} = 0
    dM_sb = bM / inst.R_sb[t]
    dM_bn = link_coef(inst, bM, inst.R_bn[t], transpose=True)
    dD_s = dD_bs.max(axis=0) + dD_nb.max()  # eq:delayAtDCdataCollect

    # processing (delay_proc, energy_proc, eqn: Data Center speed-delay relation-1, energy_server_proc)
    dP_n = inst.c * r.gamma_ue * r.m_ue * D_n / r.f
    EP_n = inst.c * r.gamma_ue * r.m_ue * D_n * r.f ** 2 * inst.alpha / 2.0
    dP_s = r.gamma_dc * r.m_dc * D_s / (inst.M * r.z)
    EP_s = dP_s * (inst.rho_idle * (r.z / inst.C) ** 2 * inst.Pbar * inst.M
                   + (1.0 - inst.rho_idle) * inst.Pbar * inst.M)

    # aggregation (delay_agg, energy_aggregation)
    dA_n = dM_nb[n_idx, up] + dM_bs[up, agg]
    EA_n = (link_coef(inst, bM * inst.P_nb[t], inst.R_nb[t])[n_idx, up]
            + dM_bs[up, agg] * inst.P_bs[up, agg])
    dA_s = dM_ss[:, agg]
    EA_s = dM_ss[:, agg] * inst.P_ss[:, agg]
    ue_path = dA_n + dP_n
    dc_path = dD_s + dP_s + dA_s
    dA = max(ue_path.max(), dc_path.max())

    # reception (delay_Reception, energy_Reception); the paper's delta^B_s <= delta^R is a typo for
    # delta^R_s (docs/formulation.md, 'Resolution: a typo in the reception constraint')
    dR_b = dM_sb[agg, :]
    ER_b = dM_sb[agg, :] * inst.P_sb[agg, :]
    Ibn = np.zeros((B, N))
    Ibn[down, n_idx] = 1.0
    dB_b = np.where(Ibn > 0, dM_bn, 0.0).max(axis=1)
    EB_b = dB_b * inst.P_b[t]
    dR_s = dM_ss[agg, :]
    ER_s = dM_ss[agg, :] * inst.P_ss[agg, :]
    dR = max((dR_b + dB_b).max(), dR_s.max())

    ED_nb = _use(link_coef(inst, bD * inst.Dbar[t][:, None] * inst.P_nb[t], inst.R_nb[t]),
                 r.rho_nb)
    ED_bs = dD_bs * inst.P_bs
    E = {
        "E_D_ue": float(ED_nb.sum()), "E_D_bs": float(ED_bs.sum()),
        "E_P_ue": float(EP_n.sum()), "E_P_dc": float(EP_s.sum()),
        "E_A": float(EA_n.sum() + EA_s.sum()),
        "E_R": float(ER_b.sum() + EB_b.sum() + ER_s.sum()),
    }
    E_weighted = float(np.dot(inst.xi3_parts, [E["E_D_ue"], E["E_D_bs"], E["E_P_ue"],
                                               E["E_P_dc"], E["E_A"], E["E_R"]]))
    return {
        **ds, "dD_nb": dD_nb, "dM_nb": dM_nb, "dD_bs": dD_bs, "dM_bs": dM_bs, "dD_s": dD_s,
        "dP_n": dP_n, "EP_n": EP_n, "dP_s": dP_s, "EP_s": EP_s, "dA_n": dA_n, "dA_s": dA_s,
        "EA_n": EA_n, "EA_s": EA_s, "ED_nb": ED_nb, "ED_bs": ED_bs,
        "ue_path": ue_path, "dc_path": dc_path,
        "dR_b": dR_b, "dB_b": dB_b, "dR_s": dR_s, "ER_b": ER_b, "EB_b": EB_b, "ER_s": ER_s,
        "dA": float(dA), "dR": float(dR), "delay": float(dA + dR),
        **E, "energy_raw": float(sum(E.values())), "energy": E_weighted,
    }


def round_costs(inst: Instance, t: int, r: RoundDecision) -> dict[str, float]:
    """Scalar delay (dA + dR, s) and energy (J, xi3-weighted sum; raw sum in `energy_raw`)."""
    rt = round_terms(inst, t, r)
    keys = ("dA", "dR", "delay", "energy", "energy_raw", "E_D_ue", "E_D_bs", "E_P_ue", "E_P_dc",
            "E_A", "E_R")
    return {k: rt[k] for k in keys}


# ---- ML bound --------------------------------------------------------------------------
def a_norms(gamma: np.ndarray, eta: float, mu: float) -> tuple[np.ndarray, np.ndarray]:
    """||a||_1 and ||a||_2^2 of eq:normalGrad's weights a_l = q^(gamma-1-l), q = 1 - eta mu,
    continued to real gamma: (1-q^g)/(1-q) and (1-q^2g)/(1-q^2)."""
    g = np.asarray(gamma, float)
    q = 1.0 - eta * mu
    if q == 1.0:
        return g.copy(), g.copy()
    return (1.0 - q ** g) / (1.0 - q), (1.0 - q ** (2 * g)) / (1.0 - q ** 2)


def gamma_cap(inst: Instance) -> float:
    """Largest gamma allowed: gamma_max, and for bound='general' Theorem 1's step-size condition
    4 eta^2 L^2 g^2 (||a||_1 - 1)/||a||_1 <= 1/(2 zeta1^2 + 1), which is increasing in g."""
    rhs = 1.0 / (2.0 * inst.zeta1 ** 2 + 1.0)

    def phi(g: float) -> float:
        a1, _ = a_norms(np.array([g]), inst.eta, inst.mu)
        return float(4 * inst.eta ** 2 * inst.L ** 2 * g ** 2 * (a1[0] - 1.0) / a1[0])

    if phi(inst.gamma_max) <= rhs:
        return inst.gamma_max
    lo, hi = 1.0, inst.gamma_max
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if phi(mid) <= rhs else (lo, mid)
    return lo


def data_shares(inst: Instance, D_i: np.ndarray) -> np.ndarray:
    """[T, I] shares D_i[t] / sum_j D_j[t]. Data is conserved UE -> BS -> DC, so
    sum_j D_j[t] = sum_n Dbar[t, n] at every feasible point; that constant is the denominator
    (the Pyomo model uses the same)."""
    return np.asarray(D_i, float) / inst.Dbar.sum(axis=1)[:, None]


def gbar_weighted(inst: Instance, gammas: np.ndarray, D_i: np.ndarray) -> float:
    """gbar = d sum_t sum_i (D_i[t] / sum_j D_j[t]) gamma[t, i] (docs/formulation.md, 'Resolutions
    in the ML term').
    Equals the paper's sum_t sum_i gamma[t, i] when every DPU holds the same data; a DPU without
    data has no weight."""
    return float(gammas.shape[1] * np.sum(data_shares(inst, D_i) * np.asarray(gammas, float)))


def bound_vartheta(inst: Instance, gammas: np.ndarray, D_i: np.ndarray) -> float:
    """The vartheta of the bound (one vartheta for bound and trainer: docs/modelling.md, 'The ML
    term').
    vartheta_mode 'constant': the instance's number (the trainer scales eq:11M by it too).
    'tau_eff': FedNova's effective step count sum_i p_i ||a_i||_1 (eq:normalGrad's weights at
    the instance's eta, mu), averaged over the rounds because the bound has one vartheta; the
    trainer uses each round's own tau_eff."""
    if inst.vartheta_mode == "constant":
        return float(inst.vartheta)
    a1, _ = a_norms(gammas, inst.eta, inst.mu)
    return float(np.sum(data_shares(inst, D_i) * a1) / gammas.shape[0])


def step_condition(inst: Instance, gammas: np.ndarray, D_i: np.ndarray) -> tuple[float, float]:
    """Theorem 1's step-size condition for the corollary's eta = sqrt(d / (gbar T))
    (docs/formulation.md, 'Resolutions in the ML term'):
    (lhs, rhs) of 4 d L^2 g_max (g_max - 1) (2 zeta1^2 + 1) <= gbar T."""
    d, T = gammas.shape[1], gammas.shape[0]
    g_max = float(np.max(gammas))
    lhs = 4.0 * d * inst.L ** 2 * g_max * (g_max - 1.0) * (2.0 * inst.zeta1 ** 2 + 1.0)
    return lhs, gbar_weighted(inst, gammas, D_i) * T


def common_gamma_step_cap(inst: Instance) -> float:
    """The largest common gamma (equal data everywhere) that the step condition allows:
    1 + T^2 / (4 L^2 (2 zeta1^2 + 1)), capped at gamma_max."""
    return min(inst.gamma_max,
               1.0 + inst.T ** 2 / (4.0 * inst.L ** 2 * (2.0 * inst.zeta1 ** 2 + 1.0)))


def enforce_step_condition(inst: Instance, sol: Solution) -> Solution:
    """Make `sol` meet the step-size condition (in place): if it is violated, shrink every gamma
    towards gamma_min, gamma <- gamma_min + s (gamma - gamma_min), with the largest s in [0, 1]
    (bisection) at which it holds. Lower gamma only shortens processing, so every other
    constraint of P still holds. The solvers' final clip applies it (models.clip_to_bounds)."""
    if len(sol.rounds) != inst.T:
        return sol
    g0 = [(r.gamma_ue.copy(), r.gamma_dc.copy()) for r in sol.rounds]
    Di = np.array([np.concatenate([d["D_n"], d["D_s"]]) for d in
                   (data_split(inst, t, r) for t, r in enumerate(sol.rounds))])

    def ok(sc: float) -> bool:
        gam = np.array([np.concatenate([inst.gamma_min + sc * (gu - inst.gamma_min),
                                        inst.gamma_min + sc * (gd - inst.gamma_min)])
                        for gu, gd in g0])
        lhs, rhs = step_condition(inst, gam, Di)
        return lhs <= rhs * (1.0 - 1e-12)

    if ok(1.0):
        return sol
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    for r, (gu, gd) in zip(sol.rounds, g0):
        r.gamma_ue = inst.gamma_min + lo * (gu - inst.gamma_min)
        r.gamma_dc = inst.gamma_min + lo * (gd - inst.gamma_min)
    return sol


def ml_bound(inst: Instance, gammas: np.ndarray, ms: np.ndarray, taus: np.ndarray,
             D_i: np.ndarray | None = None, bound: str = "corollary") -> dict[str, float]:
    """Objective term (a). gammas, ms, D_i: [T, I] (UEs then DCs); taus: [T] = dA + dR.

    corollary: eq:convSpecial with the tau term before condition (v), gbar weighted by data and
    vartheta per the instance's vartheta_mode (docs/formulation.md, 'Resolutions in the ML term').
    general:   eq:GenConvBound at fixed eta, with (D_i-1)/D_i -> 1 and p_i^2/D_i -> D_i/D^2.
    """
    T, d = gammas.shape
    if bound not in ("corollary", "general"):
        raise ValueError(f"unknown bound {bound!r}: expected 'corollary' or 'general'")
    if D_i is None:
        raise ValueError(f"bound={bound!r} needs the data split D_i")
    Dl = inst.Delta.sum(axis=1)  # sum_i Delta[t, i]
    th, sg = float(inst.Theta.max()), float(inst.sigma.max())
    L, F0 = inst.L, inst.F0_minus_Fstar
    vt = bound_vartheta(inst, gammas, D_i)
    if bound == "corollary":
        gbar = gbar_weighted(inst, gammas, D_i)
        m_min, g_max = float(ms.min()), float(gammas.max())
        c0 = 4.0 * math.sqrt(gbar) / (vt * math.sqrt(d * T))
        parts = {
            "init": c0 * F0,
            "drift": c0 * float(np.dot(taus, Dl)),
            "noise": 16.0 * L * vt * th * sg ** 2 / m_min * math.sqrt(d / (gbar * T)),
            "local": 12.0 * L ** 2 * d * th * sg ** 2 * g_max / (gbar * m_min * T),
            "hetero": 12.0 * L ** 2 * inst.zeta2 * d * g_max ** 2 / (gbar * T),
        }
    else:
        eta = inst.eta
        a1, a2 = a_norms(gammas, eta, inst.mu)
        Dtot = inst.Dbar.sum(axis=1)[:, None]
        th_i, sg_i = inst.Theta[None, :], inst.sigma[None, :] ** 2
        c = 4.0 / (vt * eta * T)
        parts = {
            "init": c * F0,
            "drift": c * float(np.dot(taus, Dl)),
            "noise": 16.0 * eta * L * vt / T * float(np.sum(
                D_i / Dtot ** 2 * (1 - ms) * th_i * sg_i / ms * a2 / a1 ** 2)),
            "hetero": 12.0 * eta ** 2 * L ** 2 * inst.zeta2 * float(np.max(
                gammas ** 2 * (a1 - 1.0) / a1)),
            "local": 12.0 * eta ** 2 * L ** 2 / T * float(np.sum(
                (1 - ms) * th_i * sg_i * gammas * (a2 - 1.0) / (ms * a1 * Dtot))),
        }
    parts["total"] = float(sum(parts.values()))
    return parts


# ---- weights ---------------------------------------------------------------------------
def objective_weights(inst: Instance, weights: Mapping[str, float] | None = None
                      ) -> dict[str, float]:
    """xi1, xi2, xi3 of the objective (eqn: optimization objective text): the instance's,
    each overridden by `weights` where it names it; ValueError naming a bad key."""
    if weights is not None:
        why = weights_problem(weights)
        if why:
            raise ValueError(f"argument 'weights' {why}")
    return {"xi1": float(inst.xi1), "xi2": float(inst.xi2), "xi3": float(inst.xi3),
            **{k: float(v) for k, v in (weights or {}).items()}}


# ---- whole evaluation ------------------------------------------------------------------
@dataclass
class Evaluation:
    """What `evaluate` returns.

    Attributes:
        objective: P's objective, xi1 ml_bound + xi2 delay + xi3 energy.
        terms: {"ml_bound", "delay", "energy"}: the three unweighted parts.
        ml_parts: the ML bound's parts (eq:convSpecial or eq:GenConvBound).
        rounds: per round, its delays, energies, data volumes and aggregator.
        violations: (constraint, amount) of each violated constraint.
        ml_info: the bound's state: gbar (data-weighted), vartheta, g_max, m_min and, for the
            corollary form, both sides of the step-size condition (step_lhs <= step_rhs).
    """

    objective: float
    terms: dict[str, float]
    ml_parts: dict[str, float]
    rounds: list[dict[str, Any]]
    violations: list[tuple[str, float]] = field(default_factory=list)
    ml_info: dict[str, float] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        """True when no constraint of P is violated."""
        return not self.violations

    def per_round_table(self):
        import pandas as pd
        keys = ("dA", "dR", "delay", "energy", "E_D_ue", "E_D_bs", "E_P_ue", "E_P_dc", "E_A", "E_R")
        return pd.DataFrame([{"round": t, **{k: r[k] for k in keys}, "aggregator": r["aggregator"]}
                             for t, r in enumerate(self.rounds)])


def evaluate(inst: Instance, sol: Solution, *, bound: str = "corollary",
             weights: dict[str, float] | None = None, validate: bool = True) -> Evaluation:
    """The objective of P (eqn: optimization objective text) and every constraint, for `sol`:
    the numpy twin of the Pyomo model.

    Args:
        inst: the instance.
        sol: a solution with one decision per round of `inst`.
        bound: the ML term's form, `"corollary"` (eq:convSpecial) or `"general"`
            (eq:GenConvBound).
        weights: overrides of the objective weights `xi1`, `xi2`, `xi3` (the instance's by
            default; `objective_weights`).
        validate: False when the caller has validated `inst` and `sol` (many evaluations of
            one instance).

    Returns:
        An `Evaluation`: the objective, its three terms, per-round delays and energies, and
        the violated constraints (`feasible` is True when there are none).

    Raises:
        TypeError: `sol` is not a Solution.
        ValueError: `sol` does not fit `inst` (`Solution.check_shapes`; the message names the
            field), or `weights` has an unknown key or a negative value.
        InstanceError: `inst` is invalid.

    Examples:
        >>> from cefl_opt import evaluate, make_instance, solve
        >>> inst = make_instance("tiny", seed=0)
        >>> ev = evaluate(inst, solve(inst, "fixed", aggregator=0).solution)
        >>> ev.feasible, sorted(ev.terms)
        (True, ['delay', 'energy', 'ml_bound'])
    """
    _require_solution(sol)
    if validate:
        inst = validated(inst)
        sol.check_shapes(inst)
    elif len(sol.rounds) != inst.T:
        raise ValueError(f"field 'rounds' has {len(sol.rounds)} rounds, the instance has "
                         f"{inst.T}")
    w = objective_weights(inst, weights)
    rounds, gam, ms, taus, Di = [], [], [], [], []
    for t, r in enumerate(sol.rounds):
        rt = round_terms(inst, t, r)
        rt["aggregator"] = int(r.aggregator)
        rounds.append(rt)
        gam.append(np.concatenate([r.gamma_ue, r.gamma_dc]))
        ms.append(np.concatenate([r.m_ue, r.m_dc]))
        taus.append(rt["delay"])
        Di.append(np.concatenate([rt["D_n"], rt["D_s"]]))
    gam, Di = np.array(gam), np.array(Di)
    ms = np.array(ms)
    ml = ml_bound(inst, gam, ms, np.array(taus), Di, bound)
    info = {"gbar": gbar_weighted(inst, gam, Di), "vartheta": bound_vartheta(inst, gam, Di),
            "g_max": float(gam.max()), "m_min": float(ms.min())}
    if bound == "corollary":
        info["step_lhs"], info["step_rhs"] = step_condition(inst, gam, Di)
    terms = {"ml_bound": ml["total"], "delay": float(sum(taus)),
             "energy": float(sum(r["energy"] for r in rounds))}
    obj = w["xi1"] * terms["ml_bound"] + w["xi2"] * terms["delay"] + w["xi3"] * terms["energy"]
    return Evaluation(objective=float(obj), terms=terms, ml_parts=ml, rounds=rounds,
                      violations=constraint_violations(inst, sol, bound=bound, validate=False),
                      ml_info=info)


def _require_solution(sol: Any) -> None:
    """TypeError naming the argument `sol` unless it is a Solution (a path is not one:
    `Solution.load` reads a file)."""
    if not isinstance(sol, Solution):
        hint = " (load a file with Solution.load)" if isinstance(sol, (str, os.PathLike)) else ""
        raise TypeError(f"argument 'sol' must be a cefl_opt.solution.Solution, got "
                        f"{type(sol).__name__}{hint}")


def constraint_violations(inst: Instance, sol: Solution, *, bound: str = "corollary",
                          tol: float = FEAS_TOL, validate: bool = True
                          ) -> list[tuple[str, float]]:
    """Violations of P's explicit constraints larger than `tol` (relative to each bound's scale).
    Delay epigraph constraints hold by construction (the maxima are evaluated exactly).
    validate: check `inst` and `sol` as `evaluate` does."""
    if validate:
        _require_solution(sol)
        inst = validated(inst)
        sol.check_shapes(inst)
    out: list[tuple[str, float]] = []
    gcap = gamma_cap(inst) if bound == "general" else inst.gamma_max

    def chk(name: str, excess: np.ndarray, scale: float | np.ndarray = 1.0) -> None:
        ex = np.asarray(excess, float) / np.maximum(np.asarray(scale, float), 1e-300)
        if ex.size and ex.max() > tol:
            idx = np.unravel_index(int(np.argmax(ex)), ex.shape) if ex.ndim else ()
            out.append((f"{name}{list(int(i) for i in idx)}", float(ex.max())))

    absent = ~inst.link_mask
    for t, r in enumerate(sol.rounds):
        p = f"t{t}:"
        chk(p + "rho_nb>=0", -r.rho_nb)
        if absent.any():  # an absent UE-BS link carries no data and no association
            chk(p + "rho_nb=0 on absent links", np.where(absent, np.abs(r.rho_nb), 0.0))
            n_idx = np.arange(inst.N)
            for nm in ("uplink_bs", "downlink_bs"):
                chk(p + nm + " on an absent link",
                    absent[n_idx, np.asarray(getattr(r, nm), int)].astype(float))
        chk(p + "sum_b rho_nb<=1 (rhoUE-BS)", r.rho_nb.sum(axis=1) - 1.0)
        chk(p + "rho_bs>=0", -r.rho_bs)
        chk(p + "sum_s rho_bs=1 (rhoBS-DC)", np.abs(r.rho_bs.sum(axis=1) - 1.0))
        chk(p + "f>=f_min", inst.f_min - r.f, inst.f_min)
        chk(p + "f<=f_max", r.f - inst.f_max, inst.f_max)
        chk(p + "z>=z_floor*C", inst.z_floor * inst.C - r.z, inst.C)
        chk(p + "z<=C", r.z - inst.C, inst.C)
        for nm, g in (("gamma_ue", r.gamma_ue), ("gamma_dc", r.gamma_dc)):
            chk(p + nm + ">=gamma_min", inst.gamma_min - g, inst.gamma_min)
            chk(p + nm + "<=gamma_cap", g - gcap, gcap)
        for nm, m in (("m_ue", r.m_ue), ("m_dc", r.m_dc)):
            chk(p + nm + ">=m_floor", inst.m_floor - m)
            chk(p + nm + "<=1", m - 1.0)
        chk(p + "R_bs>=R_floor", inst.R_floor - r.R_bs, inst.R_floor)
        chk(p + "R_bs<=Rmax_bs (eqn: BS_capacity)", r.R_bs - inst.Rmax_bs, inst.Rmax_bs)
        chk(p + "sum_b R_bs<=Rmax_s (eqn: Server_capacity)", r.R_bs.sum(axis=0) - inst.Rmax_s,
            inst.Rmax_s)
    if bound == "corollary" and len(sol.rounds) == inst.T:
        gam = np.array([np.concatenate([r.gamma_ue, r.gamma_dc]) for r in sol.rounds])
        Di = np.array([np.concatenate([d["D_n"], d["D_s"]]) for d in
                       (data_split(inst, t, r) for t, r in enumerate(sol.rounds))])
        lhs, rhs = step_condition(inst, gam, Di)
        chk("step size (Theorem 1, corollary eta)", np.array(lhs - rhs), max(rhs, 1e-12))
    return out


# ---- reference orchestration and default weights -----------------------------------------
def full_rates(inst: Instance) -> np.ndarray:
    """R_bs at capacity, scaled down per DC so that sum_b R_bs <= Rmax_s (eqn: Server_capacity)."""
    R = inst.Rmax_bs.copy()
    scale = np.minimum(1.0, inst.Rmax_s / R.sum(axis=0))
    R = np.maximum(R * scale[None, :], inst.R_floor)
    return R


def capacity_rates(inst: Instance) -> np.ndarray:
    """R_bs within both capacities wherever the instance admits any (B R_floor <= Rmax_s):
    R_floor plus, per DC, one common fraction of each BS's headroom Rmax_bs - R_floor, as
    large as Rmax_s allows (eqn: BS_capacity, eqn: Server_capacity)."""
    head = inst.Rmax_bs - inst.R_floor                                    # [B, S]
    spare = inst.Rmax_s - inst.B * inst.R_floor
    frac = np.clip(spare / np.maximum(head.sum(axis=0), 1e-300), 0.0, 1.0)
    return inst.R_floor + head * frac[None, :]


def best_rate_uplink(inst: Instance, t: int) -> np.ndarray:
    """[N] the BS with the largest R_nb[t, n, :] (absent links have rate 0)."""
    return np.argmax(inst.R_nb[t], axis=1).astype(int)


def best_rate_downlink(inst: Instance, t: int) -> np.ndarray:
    """[N] the BS with the largest R_bn[t, :, n]."""
    return np.argmax(inst.R_bn[t], axis=0).astype(int)


def reference_solution(inst: Instance, aggregator: int = 0, *,
                       within_capacity: bool = False) -> Solution:
    """The reference orchestration (docs/modelling.md, 'Weights and infeasible capacity'): no
    offloading, fixed aggregator, mid-range f, m, gamma, z = C/2, BS data routed to the DC of its
    own sub-network, best-rate UE-BS associations. gamma is mid-range of [gamma_min, the largest
    common gamma that the corollary's step-size condition allows] (`common_gamma_step_cap`).
    R_bs is `full_rates` (the normalising weights' point), which R_floor can lift above Rmax_s
    (eqn: Server_capacity), or, `within_capacity`, `capacity_rates`. Either is a point of P
    only where `evaluate` finds no violation: a caller that needs a feasible point checks."""
    g_ref = 0.5 * (inst.gamma_min + common_gamma_step_cap(inst))
    rates = capacity_rates(inst) if within_capacity else full_rates(inst)
    rounds = []
    for t in range(inst.T):
        rho_bs = np.zeros((inst.B, inst.S))
        for b in range(inst.B):
            s = inst.bs_subnet[b] if inst.bs_subnet and inst.bs_subnet[b] < inst.S else 0
            rho_bs[b, s] = 1.0
        rounds.append(RoundDecision(
            rho_nb=np.zeros((inst.N, inst.B)), rho_bs=rho_bs,
            f=0.5 * (inst.f_min + inst.f_max), z=0.5 * inst.C,
            gamma_ue=np.full(inst.N, g_ref), gamma_dc=np.full(inst.S, g_ref),
            m_ue=np.full(inst.N, 0.5 * (inst.m_floor + 1.0)),
            m_dc=np.full(inst.S, 0.5 * (inst.m_floor + 1.0)),
            aggregator=aggregator, uplink_bs=best_rate_uplink(inst, t),
            downlink_bs=best_rate_downlink(inst, t), R_bs=rates.copy()))
    return Solution(rounds=rounds, method="reference").for_instance(inst)


def normalising_weights(inst: Instance) -> dict[str, float]:
    """xi1, xi2, xi3 that make each part of the objective 1 at the reference orchestration."""
    ev = evaluate(inst, reference_solution(inst), weights={"xi1": 1.0, "xi2": 1.0, "xi3": 1.0})
    return {"xi1": 1.0 / ev.terms["ml_bound"], "xi2": 1.0 / ev.terms["delay"],
            "xi3": 1.0 / ev.terms["energy"]}
