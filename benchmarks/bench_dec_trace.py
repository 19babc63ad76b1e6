"""The SCA trace of `decentralized` on one instance: model objective, scaled violation, forcing
residual, inner iterations and the aggregator indicators by outer iteration (both phases).

    python -m benchmarks.bench_dec_trace [--quick] [--preset paper] [--seed 0] [--rounds 3]

Writes results/bench/dec_trace.csv (the solver's trace columns) and dec_trace.png.
`plot_trace(rows, path)` draws the figure from any trace (list of dicts or the CSV's frame).
--quick: the `small` preset, 2 rounds.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import time  # noqa: E402

import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402


def plot_trace(rows, path, title: str = "decentralized"):
    """Objective / violation / aggregators by outer iteration from a solver trace."""
    df = pd.DataFrame(rows)
    plt = common.plt()
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4))
    for ph, g in df.groupby("phase", sort=False):
        a1.plot(g.outer, g.obj_model, label=f"{ph} phase")
        a2.semilogy(g.outer, g.max_violation.clip(lower=1e-12), label=f"violation ({ph})")
        a2.semilogy(g.outer, g.step_inf.clip(lower=1e-12), ls="--", label=f"step ({ph})")
    a1.set_xlabel("outer iteration")
    a1.set_ylabel("J(w^l) (model)")
    a1.set_title(title)
    a1.legend(fontsize=8)
    a2.axhline(1e-6, color="k", lw=0.6)
    a2.set_xlabel("outer iteration")
    a2.set_ylabel("scaled violation / ||w_hat - w||_inf")
    a2.legend(fontsize=8)
    aggs = df.aggregators.astype(str).str.split("|", expand=True).astype(int)
    for t in aggs.columns:
        a3.step(df.outer, aggs[t] + 0.05 * t, where="post", label=f"round {t}")
    a3b = a3.twinx()
    a3b.semilogy(df.outer, df.I_binary_gap.clip(lower=1e-12), color="0.6", lw=0.8)
    a3b.set_ylabel("1 - max_s I_s (grey)")
    a3.set_xlabel("outer iteration")
    a3.set_ylabel("aggregator (argmax I_s)")
    a3.legend(fontsize=8)
    return common.save_fig(fig, path)


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if args.quick:
        args.preset, args.rounds = "small", 2
    common.quiet()
    t0 = time.perf_counter()
    out = common.out_dir(args)
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.decentralized import solve_decentralized
    inst = make_instance(args.preset, seed=args.seed, rounds=args.rounds)
    sol, info = solve_decentralized(inst)
    f1 = common.write_csv(pd.DataFrame(info["trace"]), out / "dec_trace.csv")
    f2 = plot_trace(info["trace"], out / "dec_trace.png",
                    f"decentralized, {inst.name}: {info['stop_reason']}, J = {sol.objective:.5g}")
    print(f"{inst.name}: {info['stop_reason']} after {info['outer_iterations']} outer / "
          f"{info['inner_iterations']} inner iterations, objective {sol.objective:.6g}, "
          f"{info['wall_s']:.1f} s")
    common.footer("bench_dec_trace", t0, [f1, f2])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
