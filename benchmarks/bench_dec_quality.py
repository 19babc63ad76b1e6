"""Quality of the decentralised solution per seed: `decentralized` (paper §V, Alg. 1-3 + rounding
+ Ipopt polish) against the centralised `ipopt-enum` on `small` and `paper` instances.

    python -m benchmarks.bench_dec_quality [--quick] [--presets small,paper]
        [--seeds-small 0,1,2,3,4] [--seeds-paper 0,1,2] [--rounds 2] [--max-outer 60]
        [--consensus-rounds 30]

For every (preset, seed): the decentralised objective of P, whether `cefl_opt.system.evaluate`
finds the solution feasible (the check `cefl-opt evaluate` runs), ipopt-enum's objective, the
relative gap dec/enum - 1 (negative: the decentralised solution is better), both aggregator
sequences, both wall times, and how the relaxed aggregator indicators behaved (`dec_decided_at`: the
outer iteration from which every round's I_s is within 0.01 of a vertex; changes of the argmax
before and after that). Writes results/bench/dec_quality.csv and dec_quality.png, and
prints the worst gap. The issue's criterion is gap <= 2 % on every seed.

--quick: `small` seeds 0-1 only, 2 rounds, 30 outer iterations (about a minute).

One BLAS thread (set before numpy loads): stable timings on the shared 2-core machine.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import time  # noqa: E402

import pandas as pd  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from benchmarks import common  # noqa: E402


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def run(args) -> pd.DataFrame:
    from cefl_opt import system
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.base import solve
    from cefl_opt.solvers.decentralized import solve_decentralized

    jobs = [(p, s) for p in args.presets
            for s in (args.seeds_small if p == "small" else args.seeds_paper)]
    rows = []
    for preset, seed in tqdm(jobs, desc="instances"):
        inst = make_instance(preset, seed=seed, rounds=args.rounds)
        t0 = time.perf_counter()
        sol, info = solve_decentralized(inst, method="decentralized",
                                        consensus_rounds=args.consensus_rounds,
                                        max_outer=args.max_outer, progress=False)
        t_dec = time.perf_counter() - t0
        ev = system.evaluate(inst, sol)
        t0 = time.perf_counter()
        enum = solve(inst, "ipopt-enum")
        t_enum = time.perf_counter() - t0
        ev_e = system.evaluate(inst, enum.solution)
        rows.append({
            "preset": preset, "seed": seed, "N": inst.N, "B": inst.B, "S": inst.S, "T": inst.T,
            "dec_objective": ev.objective, "dec_feasible": ev.feasible,
            "dec_status": info["status"], "dec_rounded_objective": info["objective_rounded"],
            "enum_objective": ev_e.objective, "enum_feasible": ev_e.feasible,
            "enum_status": enum.status, "gap": ev.objective / ev_e.objective - 1.0,
            "dec_aggregators": " ".join(map(str, (r.aggregator for r in sol.rounds))),
            "enum_aggregators": " ".join(map(str, (r.aggregator for r in enum.solution.rounds))),
            "dec_decided_at": info["aggregator_decided_at"],
            "dec_aggregator_changes": info["aggregator_changes"],
            "dec_changes_after_decided": info["aggregator_changes_after_decided"],
            "dec_wall_s": t_dec, "enum_wall_s": t_enum,
            "enum_ipopt_solves": enum.info.get("ipopt_solves")})
    return pd.DataFrame(rows)


def figure(df: pd.DataFrame, path):
    plt = common.plt()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels = [f"{p}\nseed {s}" for p, s in zip(df.preset, df.seed)]
    ax.bar(range(len(df)), 100 * df.gap, color=["C0" if g <= 0.02 else "C3" for g in df.gap])
    ax.axhline(2.0, color="k", ls="--", lw=1, label="2 % criterion")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_xticks(range(len(df)), labels, fontsize=8)
    ax.set_ylabel("decentralized / ipopt-enum - 1 (%)")
    ax.legend(fontsize=8)
    return common.save_fig(fig, path)


def main(argv=None) -> int:
    suite = common.Suite("bench_dec_quality", __doc__)
    ap = suite.ap
    ap.add_argument("--presets", default="small,paper")
    ap.add_argument("--seeds-small", default="0,1,2,3,4")
    ap.add_argument("--seeds-paper", default="0,1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-outer", type=int, default=None, help="outer iterations (60; quick 30)")
    ap.add_argument("--consensus-rounds", type=int, default=30)
    args = suite.start(argv, seed=False)
    args.presets = [p for p in args.presets.split(",") if p]
    for p in args.presets:
        if p not in ("small", "paper"):
            ap.error(f"--presets: unknown preset {p!r} (small, paper)")
    args.seeds_small, args.seeds_paper = _ints(args.seeds_small), _ints(args.seeds_paper)
    if args.quick:
        args.presets, args.seeds_small = ["small"], args.seeds_small[:2]
    if args.max_outer is None:
        args.max_outer = 30 if args.quick else 60
    df = run(args)
    suite.csv(df, "dec_quality.csv")
    figure(df, suite.path("dec_quality.png"))
    suite.table(df, "decentralized vs ipopt-enum per seed",
                ["preset", "seed", "dec_objective", "enum_objective", "gap",
                 "dec_feasible", "dec_aggregators", "enum_aggregators", "dec_wall_s",
                 "enum_wall_s"])
    worst = df.loc[df.gap.idxmax()]
    print(f"\nworst gap {100 * worst.gap:.2f} % ({worst.preset} seed {worst.seed}); "
          f"all feasible: {bool(df.dec_feasible.all())}")
    return suite.finish()


if __name__ == "__main__":
    raise SystemExit(main())
