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

import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402


def plot_trace(rows, path, title: str = "decentralized"):
    """Objective / violation / aggregators by outer iteration from a solver trace (the main
    job's figure, `cefl_opt.plots.plot_sca_trace`)."""
    from cefl_opt.plots import plot_sca_trace
    return plot_sca_trace(rows, path, title)


def main(argv=None) -> int:
    suite = common.Suite("bench_dec_trace", __doc__)
    suite.ap.add_argument("--preset", default="paper")
    suite.ap.add_argument("--rounds", type=int, default=3)
    args = suite.start(argv, seed=False)
    if args.quick:
        args.preset, args.rounds = "small", 2
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.decentralized import solve_decentralized
    inst = make_instance(args.preset, seed=args.seed, rounds=args.rounds)
    sol, info = solve_decentralized(inst)
    suite.csv(pd.DataFrame(info["trace"]), "dec_trace.csv")
    plot_trace(info["trace"], suite.path("dec_trace.png"),
               f"decentralized, {inst.name}: {info['stop_reason']}, J = {sol.objective:.5g}")
    print(f"{inst.name}: {info['stop_reason']} after {info['outer_iterations']} outer / "
          f"{info['inner_iterations']} inner iterations, objective {sol.objective:.6g}, "
          f"{info['wall_s']:.1f} s")
    return suite.finish()


if __name__ == "__main__":
    raise SystemExit(main())
