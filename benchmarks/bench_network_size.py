"""Decentralised solver for growing networks (paper Fig. `network_size_ablation_plot`, §VI):
|N| in {10, 15, 20, 30} UEs with |B| = 10, |S| = 5.

    python -m benchmarks.bench_network_size [--quick] [--seed 0] [--ues 10,15,20,30]
                                            [--max-outer N]

Writes results/bench/network_size.csv (one row per network size and outer iteration: the trace
columns of `solvers.decentralized`), results/bench/network_size_summary.csv (per size: the final
binary solution's objective of P, its three parts, stop reason, messages, wall times) and
results/bench/network_size.png (objective over the iterations per size, and the final objective
against |N|). --quick: 2 rounds, at most 40 outer iterations per phase.

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
        sol, info = solve_decentralized(inst, method="decentralized", max_outer=args.max_outer)
        wall = time.perf_counter() - t0
        ev = system.evaluate(inst, sol)
        for r in info["trace"]:
            traces.append({"ues": N, **r})
        summ.append({"ues": N, "instance": inst.name, "objective": ev.objective,
                     "feasible": ev.feasible, "status": info["status"],
                     "ml_bound": ev.terms["ml_bound"], "delay_s": ev.terms["delay"],
                     "energy_J": ev.terms["energy"],
                     "stop_reason": info["stop_reason"],
                     "final_obj_model": info["trace"][-1]["obj_model"],
                     "aggregators": " ".join(map(str, info["aggregators_final"])),
                     "msgs_per_node_outer": info["messages"]["per_node_per_outer"]["count"]["mean"],
                     "n_shared_variables": info["n_shared_variables"],
                     "n_duals": info["n_coupling"], "n_nodes": info["n_nodes"], "wall_s": wall,
                     "sca_s": info["sca_s"]})
    return pd.DataFrame(traces), pd.DataFrame(summ)


def figure(tr: pd.DataFrame, sm: pd.DataFrame, path) -> None:
    plt = common.plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for N, g in tr.groupby("ues"):
        a1.plot(g.outer, g.obj_model, label=f"|N| = {N}")
    a1.set_xlabel("outer iteration l (Alg. 1)")
    a1.set_ylabel("objective J(w^l) of P (model)")
    a1.set_title("decentralized, |B| = 10, |S| = 5")
    a1.legend()
    a2.plot(sm.ues, sm.objective, "o-", label="final (binary)")
    a2.set_xlabel("|N| (UEs)")
    a2.set_ylabel("objective of P")
    a2.legend()
    common.save_fig(fig, path)


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--ues", default="10,15,20,30")
    ap.add_argument("--max-outer", type=int, default=None, help="outer iterations per phase")
    args = ap.parse_args(argv)
    args.ues = [int(x) for x in args.ues.split(",") if x]
    if args.quick and args.max_outer is None:
        args.max_outer = 40
    common.quiet()
    t0 = time.perf_counter()
    out = common.out_dir(args)
    tr, sm = run(args)
    f1 = common.write_csv(tr, out / "network_size.csv")
    f2 = common.write_csv(sm, out / "network_size_summary.csv")
    f3 = out / "network_size.png"
    figure(tr, sm, f3)
    common.print_table(sm, "network size", ["ues", "objective", "stop_reason", "ml_bound",
                                           "delay_s", "energy_J", "aggregators", "wall_s"])
    common.footer("bench_network_size", t0, [f1, f2, f3])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
