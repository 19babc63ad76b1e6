"""Centralised vs decentralised primal-dual over the outer iterations (paper Fig.
`consensus_gap_plot`, §VI): the paper's network (|N| = 20, |B| = 10, |S| = 5), the model
objective J(w^l) of Algorithm 1's iterates for centralized-pd (exact global dual updates) and for
the decentralised solver with J in {10, 50, 70} consensus rounds.

    python -m benchmarks.bench_consensus_gap [--quick] [--seed 0] [--max-outer 60]
                                             [--rounds-list 10,50,70] [--polish]

Writes results/bench/consensus_gap.csv (one row per run and outer iteration: the trace columns
of `solvers.decentralized`), results/bench/consensus_gap_summary.csv (per run: mean and final
relative gap of J(w^l) to centralized-pd, final dual disagreement, wall time, objective of the
rounded point and, with --polish, of the polished binary solution) and
results/bench/consensus_gap.png (model objective, objective of P at the rounded iterate, and
relative gap over the iterations).
--quick: the reduced network of `benchmarks.common.QUICK_NET` (10 UEs, 6 BSs, 3 DCs), 3 rounds,
20 outer iterations (about a minute).

One BLAS thread (OPENBLAS_NUM_THREADS=1, set before numpy loads): stable timings on the shared
2-core machine.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import time  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402


def run(args) -> tuple[pd.DataFrame, pd.DataFrame]:
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.decentralized import solve_decentralized
    from cefl_opt.solvers.sca import build_structure

    if args.quick:
        inst = make_instance("paper", seed=args.seed, rounds=3, **common.QUICK_NET)
    else:
        inst = make_instance("paper", seed=args.seed)
    st = build_structure(inst, relax_init=True)
    runs = [("centralized-pd", None)] + [("decentralized", int(J)) for J in args.rounds_list]
    traces, summ = [], []
    for method, J in runs:
        label = method if J is None else f"J={J}"
        t0 = time.perf_counter()
        sol, info = solve_decentralized(inst, method=method, consensus_rounds=J or 0,
                                        max_outer=args.max_outer, polish=args.polish,
                                        progress=True, structure=st)
        wall = time.perf_counter() - t0
        for r in info["trace"]:
            traces.append({"run": label, "method": method, "J": J, **r})
        summ.append({"run": label, "method": method, "J": J, "wall_s": wall,
                     "sca_s": info["sca_s"], "outer_iterations": info["outer_iterations"],
                     "objective_rounded": info["objective_rounded"],
                     "objective": sol.objective if args.polish else np.nan,
                     "aggregators": " ".join(map(str, info["aggregators_final"])),
                     "final_dual_disagreement": info["final_dual_disagreement"],
                     "final_max_violation": info["final_max_violation"]})
    tr = pd.DataFrame(traces)
    sm = pd.DataFrame(summ)
    cent = tr[tr.run == "centralized-pd"].set_index("outer")["obj_model"]
    gaps_mean, gaps_final = [], []
    for label in sm.run:
        d = tr[tr.run == label].set_index("outer")["obj_model"]
        idx = d.index.intersection(cent.index)
        rel = (d[idx] - cent[idx]).abs() / cent[idx].abs()
        gaps_mean.append(float(rel.mean()))
        gaps_final.append(float(rel.iloc[-1]))
    sm["mean_rel_gap_to_centralized"] = gaps_mean
    sm["final_rel_gap_to_centralized"] = gaps_final
    sm["instance"] = inst.name
    return tr, sm


def figure(tr: pd.DataFrame, path, title: str) -> None:
    plt = common.plt()
    fig, (a1, a3, a2) = plt.subplots(1, 3, figsize=(15, 4))
    cent = tr[tr.run == "centralized-pd"].set_index("outer")["obj_model"]
    for label, g in tr.groupby("run", sort=False):
        style = {"lw": 2.2, "color": "k"} if label == "centralized-pd" else {"lw": 1.4}
        a1.plot(g.outer, g.obj_model, label=label, **style)
        a3.plot(g.outer, g.obj_rounded, label=label, **style)
        if label != "centralized-pd":
            d = g.set_index("outer")["obj_model"]
            idx = d.index.intersection(cent.index)
            a2.semilogy(idx, ((d[idx] - cent[idx]).abs() / cent[idx].abs()).clip(lower=1e-12),
                        label=label)
    a1.set_xlabel("outer iteration l (Alg. 1)")
    a1.set_ylabel("objective J(w^l) of P (model)")
    a1.set_title(title)
    a1.legend()
    a3.set_xlabel("outer iteration l")
    a3.set_ylabel("objective of P at the rounded w^l")
    a3.set_title("indicators rounded, no polish")
    a3.legend()
    a2.set_xlabel("outer iteration l")
    a2.set_ylabel("|J_dec - J_cent| / J_cent")
    a2.set_title("gap to centralized-pd")
    a2.legend()
    common.save_fig(fig, path)


def main(argv=None) -> int:
    suite = common.Suite("bench_consensus_gap", __doc__)
    ap = suite.ap
    ap.add_argument("--max-outer", type=int, default=None, help="outer iterations (60; quick 20)")
    ap.add_argument("--rounds-list", default="10,50,70", help="consensus rounds J to compare")
    ap.add_argument("--polish", action="store_true", help="also polish each final point (Ipopt)")
    args = suite.start(argv, seed=False)
    args.rounds_list = [int(x) for x in args.rounds_list.split(",") if x]
    if args.max_outer is None:
        args.max_outer = 20 if args.quick else 60
    tr, sm = run(args)
    suite.csv(tr, "consensus_gap.csv")
    suite.csv(sm, "consensus_gap_summary.csv")
    f3 = suite.path("consensus_gap.png")
    figure(tr, f3, f"centralized vs decentralized ({sm.instance.iloc[0]})")
    suite.table(sm, "consensus gap", ["run", "mean_rel_gap_to_centralized",
                                     "final_rel_gap_to_centralized",
                                     "final_dual_disagreement", "objective_rounded",
                                     "objective", "wall_s"])
    g = sm[sm.method == "decentralized"].sort_values("J")
    mono = bool(np.all(np.diff(g.mean_rel_gap_to_centralized.values) < 0))
    print(f"mean gap decreases with J: {mono}")
    return suite.finish()


if __name__ == "__main__":
    raise SystemExit(main())
