"""Decentralised solver for growing networks (paper Fig. `network_size_ablation_plot`, §VI):
|N| in {10, 15, 20, 30} UEs with |B| = 10, |S| = 5 and J = 30 consensus rounds.

    python -m benchmarks.bench_network_size [--quick] [--seed 0] [--ues 10,15,20,30]
                                            [--max-outer 60] [--consensus-rounds 30] [--no-polish]

Writes results/bench/network_size.csv (one row per network size and outer iteration: the trace
columns of `solvers.decentralized`), results/bench/network_size_summary.csv (per size: the final
binary solution's objective of P after the Ipopt polish, its three parts, the rounded point's
objective, wall times) and results/bench/network_size.png (objective over the iterations per
size, and the final objective against |N|). --quick: 2 rounds, 15 outer iterations, no polish
(about a minute).

One BLAS thread (set before numpy loads): stable timings on the shared 2-core machine.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import time  # noqa: E402

import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402


def run(args) -> tuple[pd.DataFrame, pd.DataFrame]:
    from cefl_opt import system
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.decentralized import solve_decentralized

    traces, summ = [], []
    for N in args.ues:
        kw = {"rounds": 2} if args.quick else {}
        inst = make_instance("paper", seed=args.seed, ues=N, bss=10, dcs=5, **kw)
        t0 = time.perf_counter()
        sol, info = solve_decentralized(inst, method="decentralized",
                                        consensus_rounds=args.consensus_rounds,
                                        max_outer=args.max_outer, polish=args.polish,
                                        progress=True)
        wall = time.perf_counter() - t0
        ev = system.evaluate(inst, sol)
        for r in info["trace"]:
            traces.append({"ues": N, **r})
        summ.append({"ues": N, "instance": inst.name, "objective": ev.objective,
                     "feasible": ev.feasible, "status": info["status"],
                     "ml_bound": ev.terms["ml_bound"], "delay_s": ev.terms["delay"],
                     "energy_J": ev.terms["energy"],
                     "objective_rounded": info["objective_rounded"],
                     "final_obj_model": info["trace"][-1]["obj_model"],
                     "aggregators": " ".join(map(str, info["aggregators_final"])),
                     "final_dual_disagreement": info["final_dual_disagreement"],
                     "n_variables": info["n_variables"], "n_duals": info["n_coupling"] +
                     info["n_consensus"], "n_nodes": info["n_nodes"], "wall_s": wall,
                     "sca_s": info["sca_s"], "polish_s": info.get("polish_s", 0.0)})
    return pd.DataFrame(traces), pd.DataFrame(summ)


def figure(tr: pd.DataFrame, sm: pd.DataFrame, path) -> None:
    plt = common.plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for N, g in tr.groupby("ues"):
        a1.plot(g.outer, g.obj_model, label=f"|N| = {N}")
    a1.set_xlabel("outer iteration l (Alg. 1)")
    a1.set_ylabel("objective J(w^l) of P (model)")
    a1.set_title("decentralized, |B| = 10, |S| = 5, J = 30")
    a1.legend()
    a2.plot(sm.ues, sm.objective, "o-", label="final (binary, polished)"
            if (sm.status == "polished").any() else "final (binary, rounded)")
    a2.plot(sm.ues, sm.objective_rounded, "s--", label="rounded SCA point")
    a2.set_xlabel("|N| (UEs)")
    a2.set_ylabel("objective of P")
    a2.legend()
    common.save_fig(fig, path)


def main(argv=None) -> int:
    suite = common.Suite("bench_network_size", __doc__)
    ap = suite.ap
    ap.add_argument("--ues", default="10,15,20,30")
    ap.add_argument("--max-outer", type=int, default=None, help="outer iterations (60; quick 15)")
    ap.add_argument("--consensus-rounds", type=int, default=30)
    ap.add_argument("--no-polish", dest="polish", action="store_false")
    args = suite.start(argv, seed=False)
    args.ues = [int(x) for x in args.ues.split(",") if x]
    if args.max_outer is None:
        args.max_outer = 15 if args.quick else 60
    if args.quick:
        args.polish = False
    tr, sm = run(args)
    suite.csv(tr, "network_size.csv")
    suite.csv(sm, "network_size_summary.csv")
    f3 = suite.path("network_size.png")
    figure(tr, sm, f3)
    suite.table(sm, "network size", ["ues", "objective", "objective_rounded", "ml_bound",
                                    "delay_s", "energy_J", "aggregators", "wall_s"])
    return suite.finish()


if __name__ == "__main__":
    raise SystemExit(main())
