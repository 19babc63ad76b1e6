"""Quality of the decentralised solution per seed: `decentralized` (paper §V, node-local steps and
neighbour messages only, no central step) against the centralised `ipopt-enum` on `small` and
`paper` instances, on seeds the tests do not use.

    python -m benchmarks.bench_dec_quality [--quick] [--presets small,paper]
        [--seeds-small 101,...,108] [--seeds-paper 101,102,103] [--rounds-small 2]
        [--rounds-paper 3] [--jobs 1]

For every (preset, seed): the decentralised objective of P, whether `cefl_opt.system.evaluate`
finds it feasible (the check `cefl-opt evaluate` runs), its `stop_reason`, outer / inner
iterations, messages per node and outer iteration (mean / max, count and bytes), ipopt-enum's
objective, the relative gap dec/enum - 1, both aggregator sequences and both wall times.
Writes results/bench/dec_quality.csv and dec_quality.png and prints the worst gap. The quality
targets: gap <= 1 % on small (8 seeds, T = 2), <= 2 % on paper (3 seeds, T = 3), converged and
feasible on every one.

--quick: `small` seeds 101-102 only. --jobs J: instances in J processes (wall times are then
measured under that load).

One BLAS thread (set before numpy loads): stable timings on the shared 2-core machine.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import time  # noqa: E402

import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def one(job: tuple[str, int, int]) -> dict:
    """Both methods on one instance."""
    import warnings
    warnings.simplefilter("ignore")
    from cefl_opt import system
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.base import solve
    from cefl_opt.solvers.decentralized import solve_decentralized
    preset, seed, rounds = job
    inst = make_instance(preset, seed=seed, rounds=rounds)
    t0 = time.perf_counter()
    sol, info = solve_decentralized(inst, method="decentralized")
    t_dec = time.perf_counter() - t0
    ev = system.evaluate(inst, sol)
    t0 = time.perf_counter()
    enum = solve(inst, "ipopt-enum")
    t_enum = time.perf_counter() - t0
    ev_e = system.evaluate(inst, enum.solution)
    per = info["messages"]["per_node_per_outer"]
    return {
        "preset": preset, "seed": seed, "N": inst.N, "B": inst.B, "S": inst.S, "T": inst.T,
        "dec_objective": ev.objective, "dec_feasible": ev.feasible,
        "stop_reason": info["stop_reason"], "violation_relaxed": info["violation_relaxed"],
        "enum_objective": ev_e.objective, "enum_feasible": ev_e.feasible,
        "gap": ev.objective / ev_e.objective - 1.0,
        "dec_aggregators": " ".join(str(r.aggregator) for r in sol.rounds),
        "enum_aggregators": " ".join(str(r.aggregator) for r in enum.solution.rounds),
        "outer_iters": info["outer_iterations"], "inner_iters": info["inner_iterations"],
        "msgs_mean": per["count"]["mean"], "msgs_max": per["count"]["max"],
        "bytes_mean": per["bytes"]["mean"], "bytes_max": per["bytes"]["max"],
        "central_steps": "|".join(info["central_steps"]) or "-",
        "dec_wall_s": t_dec, "enum_wall_s": t_enum}


def run(args) -> pd.DataFrame:
    jobs = [(p, s, args.rounds_small if p == "small" else args.rounds_paper)
            for p in args.presets for s in (args.seeds_small if p == "small" else args.seeds_paper)]
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(args.jobs) as ex:
            rows = list(ex.map(one, jobs))
    else:
        rows = [one(j) for j in jobs]
    return pd.DataFrame(rows)


def figure(df: pd.DataFrame, path):
    plt = common.plt()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels = [f"{p}\nseed {s}" for p, s in zip(df.preset, df.seed)]
    lim = [0.01 if p == "small" else 0.02 for p in df.preset]
    ax.bar(range(len(df)), 100 * df.gap, color=["C0" if g <= m else "C3"
                                                for g, m in zip(df.gap, lim)])
    ax.axhline(1.0, color="k", ls=":", lw=1, label="1 % criterion (small)")
    ax.axhline(2.0, color="k", ls="--", lw=1, label="2 % criterion (paper)")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_xticks(range(len(df)), labels, fontsize=8)
    ax.set_ylabel("decentralized / ipopt-enum - 1 (%)")
    ax.legend(fontsize=8)
    return common.save_fig(fig, path)


def main(argv=None) -> int:
    suite = common.Suite("bench_dec_quality", __doc__)
    ap = suite.ap
    ap.add_argument("--presets", default="small,paper")
    ap.add_argument("--seeds-small", default="101,102,103,104,105,106,107,108")
    ap.add_argument("--seeds-paper", default="101,102,103")
    ap.add_argument("--rounds-small", type=int, default=2)
    ap.add_argument("--rounds-paper", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1, help="instances in parallel processes")
    args = suite.start(argv, seed=False)
    args.presets = [p for p in args.presets.split(",") if p]
    for p in args.presets:
        if p not in ("small", "paper"):
            ap.error(f"--presets: unknown preset {p!r} (small, paper)")
    args.seeds_small, args.seeds_paper = _ints(args.seeds_small), _ints(args.seeds_paper)
    if args.quick:
        args.presets, args.seeds_small = ["small"], args.seeds_small[:2]
    df = run(args)
    suite.csv(df, "dec_quality.csv")
    figure(df, suite.path("dec_quality.png"))
    suite.table(df, "decentralized vs ipopt-enum per seed",
                ["preset", "seed", "T", "dec_objective", "enum_objective", "gap", "stop_reason",
                 "dec_feasible", "dec_aggregators", "enum_aggregators", "outer_iters",
                 "inner_iters", "msgs_mean", "msgs_max", "bytes_mean", "dec_wall_s",
                 "enum_wall_s"])
    worst = df.loc[df.gap.idxmax()]
    print(f"\nworst gap {100 * worst.gap:.2f} % ({worst.preset} seed {worst.seed}); "
          f"all feasible: {bool(df.dec_feasible.all())}; all converged: "
          f"{bool((df.stop_reason == 'converged').all())}")
    return suite.finish()


if __name__ == "__main__":
    raise SystemExit(main())
