"""Centralised vs decentralised primal-dual over the outer iterations (paper Fig.
`consensus_gap_plot`, §VI): the paper's network (|N| = 20, |B| = 10, |S| = 5), the model
objective J(w^l) of Algorithm 1's iterates for centralized-pd (global arrays, exact updates) and
for the decentralised solver. The decentralised collectives aggregate exactly in a finite number
of relayed rounds (`solvers/dec_comm.py`), so the gap the paper plots against J is zero here up
to rounding; this benchmark shows it, with the violation per outer iteration.

    python -m benchmarks.bench_consensus_gap [--quick] [--seed 0] [--max-outer N]

Writes results/bench/consensus_gap.csv (one row per run and outer iteration: the trace columns
of `solvers.decentralized`), results/bench/consensus_gap_summary.csv (per run: mean and final
relative gap of J(w^l) to centralized-pd, wall time, objective, stop reason) and
results/bench/consensus_gap.png. --quick: the reduced network of `benchmarks.common.QUICK_NET`
(10 UEs, 6 BSs, 3 DCs), 3 rounds.

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
    runs = [("centralized-pd", None), ("decentralized", 0)]
    traces, summ = [], []
    for method, J in runs:
        label = method if J is None else f"J={J}"
        t0 = time.perf_counter()
        sol, info = solve_decentralized(inst, method=method, consensus_rounds=J or 0,
                                        max_outer=args.max_outer, structure=st)
        wall = time.perf_counter() - t0
        for r in info["trace"]:
            traces.append({"run": label, "method": method, "J": J, **r})
        summ.append({"run": label, "method": method, "J": J, "wall_s": wall,
                     "sca_s": info["sca_s"], "outer_iterations": info["outer_iterations"],
                     "objective": sol.objective, "stop_reason": info["stop_reason"],
                     "aggregators": " ".join(map(str, info["aggregators_final"])),
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
        a3.semilogy(g.outer, g.max_violation.clip(lower=1e-12), label=label, **style)
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
    a3.set_ylabel("scaled violation at w^l")
    a3.set_title("violation of the coupling rows")
    a3.legend()
    a2.set_xlabel("outer iteration l")
    a2.set_ylabel("|J_dec - J_cent| / J_cent")
    a2.set_title("gap to centralized-pd")
    a2.legend()
    common.save_fig(fig, path)


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--max-outer", type=int, default=None, help="outer iterations per phase")
    args = ap.parse_args(argv)
    common.quiet()
    t0 = time.perf_counter()
    out = common.out_dir(args)
    tr, sm = run(args)
    f1 = common.write_csv(tr, out / "consensus_gap.csv")
    f2 = common.write_csv(sm, out / "consensus_gap_summary.csv")
    f3 = out / "consensus_gap.png"
    figure(tr, f3, f"centralized vs decentralized ({sm.instance.iloc[0]})")
    common.print_table(sm, "consensus gap", ["run", "mean_rel_gap_to_centralized",
                                            "final_rel_gap_to_centralized", "stop_reason",
                                            "objective", "wall_s"])
    common.footer("bench_consensus_gap", t0, [f1, f2, f3])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
