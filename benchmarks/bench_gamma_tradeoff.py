"""Why P keeps gamma = 1 under vartheta = tau_eff and goes to the step-row cap under vartheta =
constant: the corollary ML bound (eq:convSpecial with the resolutions of docs/formulation.md,
'Resolutions in the ML term', evaluated by `cefl_opt.system`) and its five terms along a common
gamma at one fixed orchestration, for both vartheta modes.

    python -m benchmarks.bench_gamma_tradeoff [--T 5] [--orchestration reference] [--solution FILE]
        [--beyond 1.5] [--points 41] [--placeholder-constants]

With one gamma g at every DPU, gbar = d T g and (mu -> 0) vartheta = g under tau_eff, so the
corollary's step rule eta = sqrt(d/(gbar T)) gives

    term      vartheta = constant     vartheta = tau_eff
    init      ~ sqrt(g)               ~ 1/sqrt(g)
    drift     ~ sqrt(g) (x tau(g))    ~ 1/sqrt(g) (x tau(g))
    noise     ~ 1/sqrt(g)             ~ sqrt(g)
    local     constant                constant
    hetero    ~ g                     ~ g

so at g = 1 (delays held) d(bound)/dg = (init + drift - noise)/2 + hetero under constant and
(noise - init - drift)/2 + hetero under tau_eff: whichever of noise and init + drift is larger
decides the sign. With the measured sigma (~23) the noise term dominates; under constant the
bound falls with g up to the step-size row (cap 1 + T^2/(4 L^2 (2 zeta1^2 + 1)) for a common g),
under tau_eff it rises from g = 1.

The orchestration (everything but gamma) is held: the reference orchestration (docs/modelling.md,
'Weights and infeasible capacity') by default (instant), or the solution of a solve method
(`--orchestration greedy-rate`, solved once under the instance's default vartheta mode), or a
solution file (`--solution`). Each mode uses its own default weights (`normalising_weights`), as
exp1 does. ML constants: measured on Fashion-MNIST (the cache in results/cache; estimating them
afresh takes 20-60 min) unless `--placeholder-constants`.

Per mode and gamma: the five terms, the bound, vartheta, gbar, both sides of the step row, the
delay, the energy, the objective and whether the point is feasible for P (points past the cap
violate the step row). Printed: d/dg of every term at g = 1 with the delays held (forward
difference of `system.ml_bound`) and d(objective)/dg with everything re-evaluated, and the
feasible g that minimises the bound and the objective, and the sigma_max at which the slope of
the bound at g = 1 changes sign (noise's slope scales with sigma_max^2, the rest held).

Writes results/bench/bench_gamma_tradeoff.csv, bench_gamma_tradeoff_slopes.csv and
bench_gamma_tradeoff.png.
--quick: 11 points instead of --points (same network: its constants are cached).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks import common

NAME = "bench_gamma_tradeoff"
MODES = ("tau_eff", "constant")
TERMS = ("init", "drift", "noise", "local", "hetero")


def with_common_gamma(sol, g: float):
    """A copy of `sol` with gamma = g at every UE and DC in every round."""
    from cefl_opt.solution import Solution
    rounds = [r.copy() for r in sol.rounds]
    for r in rounds:
        r.gamma_ue = np.full(r.gamma_ue.shape, float(g))
        r.gamma_dc = np.full(r.gamma_dc.shape, float(g))
    return Solution(rounds=rounds, method=f"{sol.method}, gamma = {g:g}", status=sol.status)


def bound_inputs(inst, sol):
    """(gammas, ms, taus, D_i) of `system.ml_bound` for `sol` ([T, I], [T, I], [T], [T, I])."""
    from cefl_opt import system
    ev = system.evaluate(inst, sol)
    gam = np.array([np.r_[r.gamma_ue, r.gamma_dc] for r in sol.rounds])
    ms = np.array([np.r_[r.m_ue, r.m_dc] for r in sol.rounds])
    taus = np.array([r["delay"] for r in ev.rounds])
    Di = np.array([np.r_[r["D_n"], r["D_s"]] for r in ev.rounds])
    return gam, ms, taus, Di


def ml_slope(inst, gam, ms, taus, Di, h: float = 1e-6) -> dict[str, float]:
    """d/dg of each term of the corollary bound (and 'total') when every gamma moves by the
    same g, with m, the delays tau and the data split held: a forward difference of
    `system.ml_bound` (forward because g = gamma_min = 1 is the usual point)."""
    from cefl_opt import system
    a = system.ml_bound(inst, gam, ms, taus, Di)
    b = system.ml_bound(inst, gam + h, ms, taus, Di)
    return {k: (b[k] - a[k]) / h for k in (*TERMS, "total")}


def sigma_flip(slope: dict[str, float], sigma_max: float) -> float:
    """The sigma_max at which the slope `ml_slope` of the bound changes sign, everything else
    held: noise's slope scales with sigma_max^2 (local's too, but local does not move with a
    common g), so it is sigma_max sqrt(-(rest)/noise); nan when no sigma flips it."""
    rest = slope["total"] - slope["noise"]
    r = -rest / slope["noise"] if slope["noise"] != 0 else -1.0
    return sigma_max * float(np.sqrt(r)) if r > 0 else float("nan")


def sweep(inst, sol, gammas) -> pd.DataFrame:
    """One row per common gamma: the bound's terms and state, delay, energy, objective and the
    feasibility of the point for P (`system.evaluate`)."""
    from cefl_opt import system
    rows = []
    for g in gammas:
        ev = system.evaluate(inst, with_common_gamma(sol, g))
        rows.append({"gamma": float(g), **{k: ev.ml_parts[k] for k in TERMS},
                     "ml_bound": ev.ml_parts["total"], "vartheta": ev.ml_info["vartheta"],
                     "gbar": ev.ml_info["gbar"], "step_lhs": ev.ml_info["step_lhs"],
                     "step_rhs": ev.ml_info["step_rhs"], "delay_s": ev.terms["delay"],
                     "energy_J": ev.terms["energy"], "objective": ev.objective,
                     "feasible": ev.feasible,
                     "violations": " ".join(n for n, _ in ev.violations)})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    suite = common.Suite(NAME, __doc__, net_args=True)
    common.add_constants_args(suite.ap)
    suite.ap.add_argument("--T", type=int, default=5, help="rounds of the instance (5)")
    suite.ap.add_argument("--orchestration", default="reference",
                          choices=["reference", *common.method_names()],
                          help="the held orchestration: the reference or a solve method's")
    suite.ap.add_argument("--solution", default=None,
                          help="a solution file to hold instead (overrides --orchestration)")
    suite.ap.add_argument("--beyond", type=float, default=1.5,
                          help="sweep gamma up to this factor x the common-gamma cap (1.5)")
    suite.ap.add_argument("--points", type=int, default=41, help="sweep points (41; quick 11)")
    args = suite.start(argv)
    if args.beyond < 1.0 or args.points < 2:
        suite.ap.error(f"--beyond must be >= 1 and --points >= 2 (got {args.beyond}, {args.points})")

    from cefl_opt import system
    from cefl_opt.solution import Solution
    base = common.sweep_instance(args, reduce_quick=False)   # the cached constants' network
    cap = system.common_gamma_step_cap(base)
    if args.solution:
        try:
            sol, orch = Solution.load(args.solution, base), f"solution file {args.solution}"
        except ValueError as e:                    # InputError: missing, not JSON, wrong shape
            suite.ap.error(f"--solution: {e}")
        if len(sol.rounds) != base.T:
            suite.ap.error(f"--solution: {args.solution} has {len(sol.rounds)} rounds, the "
                           f"instance {base.T} (--T)")
    elif args.orchestration == "reference":
        sol, orch = system.reference_solution(base), "reference orchestration"
    else:
        res = common.solve_timed(base, args.orchestration, **common.solve_opts(args.orchestration))
        if res.solution is None:
            print(f"{NAME}: {args.orchestration} returned no solution ({res.status})")
            return 1
        sol, orch = res.solution, f"{args.orchestration} (vartheta {base.vartheta_mode}, " \
                                  f"{res.wall_s:.0f} s)"
    n = 11 if args.quick else args.points
    gammas = np.unique(np.r_[np.linspace(base.gamma_min, args.beyond * cap, n), cap])
    gammas = gammas[gammas <= base.gamma_max]
    print(f"{NAME}: {base.name}, T = {base.T}, d = {base.N + base.S}; L {base.L:.4g} zeta1 "
          f"{base.zeta1:.4g} zeta2 {base.zeta2:.4g} Theta max {base.Theta.max():.4g} sigma max "
          f"{base.sigma.max():.4g} mu {base.mu:g} eta {base.eta:g}; common-gamma cap "
          f"{cap:.4g}; held: {orch}", flush=True)

    frames, slopes = [], []
    for mode in MODES:
        inst = base.copy(vartheta_mode=mode)
        inst = inst.copy(**system.normalising_weights(inst))
        at1 = with_common_gamma(sol, base.gamma_min)
        ds = ml_slope(inst, *bound_inputs(inst, at1))
        h = 1e-6
        e0 = system.evaluate(inst, at1).objective
        e1 = system.evaluate(inst, with_common_gamma(sol, base.gamma_min + h)).objective
        df = sweep(inst, sol, gammas)
        df.insert(0, "vartheta_mode", mode)
        frames.append(df)
        ok = df[df["feasible"]]
        g_b = float(ok.loc[ok["ml_bound"].idxmin(), "gamma"]) if len(ok) else float("nan")
        g_o = float(ok.loc[ok["objective"].idxmin(), "gamma"]) if len(ok) else float("nan")
        row1 = df.iloc[0]
        s_flip = sigma_flip(ds, float(base.sigma.max()))
        slopes.append({"vartheta_mode": mode, **{f"d_{k}": ds[k] for k in (*TERMS, "total")},
                       **{f"{k}_at_1": float(row1[k]) for k in (*TERMS, "ml_bound")},
                       "d_objective": (e1 - e0) / h, "xi1": inst.xi1,
                       "xi1_d_bound": inst.xi1 * ds["total"],
                       "argmin_bound_feasible": g_b, "argmin_objective_feasible": g_o,
                       "sigma_max": float(base.sigma.max()), "sigma_flip": s_flip,
                       "cap": cap})
    df = pd.concat(frames, ignore_index=True)
    sl = pd.DataFrame(slopes)
    suite.csv(df, f"{NAME}.csv")
    suite.csv(sl, f"{NAME}_slopes.csv")
    suite.table(df, "ML bound along a common gamma",
                ["vartheta_mode", "gamma", *TERMS, "ml_bound", "objective", "feasible"])
    suite.table(sl, "at gamma = 1: terms and d/dgamma (delays held), d(objective)/dgamma "
                "(re-evaluated)", ["vartheta_mode", *[f"{k}_at_1" for k in TERMS],
                                   *[f"d_{k}" for k in (*TERMS, "total")], "d_objective",
                                   "argmin_bound_feasible", "argmin_objective_feasible",
                                   "sigma_flip"])
    for s in slopes:
        sign = "rises" if s["d_total"] > 0 else "falls"
        print(f"{s['vartheta_mode']:>8}: d(bound)/dgamma at 1 = {s['d_total']:+.4g} (the bound "
              f"{sign} with gamma); noise {s['noise_at_1']:.4g} vs init + drift "
              f"{s['init_at_1'] + s['drift_at_1']:.4g}; feasible argmin of the bound "
              f"{s['argmin_bound_feasible']:.4g}, of the objective "
              f"{s['argmin_objective_feasible']:.4g} (cap {cap:.4g}); the slope changes sign "
              f"at sigma_max = {s['sigma_flip']:.3g} (measured {s['sigma_max']:.3g})")
    plot(df, cap, suite.path(f"{NAME}.png"), base.name, orch)
    return suite.finish()


def plot(df: pd.DataFrame, cap: float, path, name, orch):
    plt = common.plt()
    fig, ax = plt.subplots(1, len(MODES), figsize=(11, 4), sharey=True)
    for a, (mode, d) in zip(ax, df.groupby("vartheta_mode", sort=False)):
        for k in (*TERMS, "ml_bound"):
            a.plot(d["gamma"], d[k], "-" if k != "ml_bound" else "k-",
                   lw=1 if k != "ml_bound" else 2, label=k if k != "ml_bound" else "bound")
        a.axvline(cap, color="grey", ls="--", lw=1, label="step-row cap")
        bad = d[~d["feasible"]]
        if len(bad):
            a.axvspan(bad["gamma"].min(), d["gamma"].max(), color="red", alpha=0.08,
                      label="infeasible")
        a.set_yscale("log")
        a.set_title(f"vartheta = {mode}")
        a.set_ylabel("term of the corollary bound")
    ax[0].legend(fontsize=7)
    return common.save_fig(fig, path, title=f"{name}: ML bound vs common gamma ({orch})",
                           grid_xlabel="common gamma")


if __name__ == "__main__":
    raise SystemExit(main())
