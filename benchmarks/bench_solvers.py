"""All solve methods on `small` and `paper` (several seeds): objective, delay, energy, wall time
and the gap to the best known lower bound (SCIP's proven bound where SCIP ran).

    python -m benchmarks.bench_solvers [--quick] [--seeds 0,1,2] [--scip-time 60]

Writes results/bench/solvers.csv and results/bench/solvers.png.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from tqdm import tqdm

from benchmarks import common
from cefl_opt import system
from cefl_opt.generator import make_instance
from cefl_opt.solvers.base import methods, solve


def main(argv=None) -> int:
    suite = common.Suite("bench_solvers", __doc__)
    ap = suite.ap
    ap.add_argument("--seeds", default="0,1,2", help="(--quick: small only, one seed, T=2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scip-time", type=float, default=60.0)
    ap.add_argument("--presets", default="small,paper")
    ap.add_argument("--methods", default="ipopt-enum,fixed,greedy-data,greedy-rate,no-offload,"
                                         "decentralized,scip")
    args = suite.start(argv, seed=False)
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    presets = ["small"] if args.quick else args.presets.split(",")
    rounds = 2 if args.quick else args.rounds
    avail = methods()
    meths = [m for m in args.methods.split(",") if m in avail]
    rows = []
    jobs = [(p, s, m) for p in presets for s in seeds for m in meths
            if not (m == "scip" and p == "paper")]
    for preset, seed, meth in tqdm(jobs, desc="bench_solvers"):
        inst = make_instance(preset, seed=seed, rounds=rounds)
        opts = {"time_limit": args.scip_time} if meth == "scip" else {}
        if meth == "fixed":  # the paper reports the average over the fixed aggregator choices
            for s in range(inst.S):
                rows.append(_row(preset, seed, f"fixed[{s}]", inst, solve(inst, "fixed", aggregator=s)))
            continue
        rows.append(_row(preset, seed, meth, inst, solve(inst, meth, **opts)))
    df = pd.DataFrame(rows)
    # best known lower bound per instance: SCIP's proven bound where it ran
    lb = df.dropna(subset=["bound"]).groupby(["preset", "seed"])["bound"].max() if "bound" in df else None
    best = df.groupby(["preset", "seed"])["objective"].min()
    df["gap_to_best_known"] = [
        (r.objective - best[(r.preset, r.seed)]) / abs(best[(r.preset, r.seed)]) for r in df.itertuples()]
    if lb is not None and len(lb):
        df["gap_to_bound"] = [
            (r.objective - lb[(r.preset, r.seed)]) / abs(r.objective)
            if (r.preset, r.seed) in lb.index else float("nan") for r in df.itertuples()]
    suite.csv(df, "solvers.csv")
    summary = df.assign(method=df["method"].str.replace(r"fixed\[\d+\]", "fixed(avg)", regex=True)) \
        .groupby(["preset", "method"])[["objective", "delay_s", "energy_J", "wall_s", "gap_to_best_known"]].mean()
    print(summary.to_string(float_format=lambda x: f"{x:.4g}"))
    _plot(summary.reset_index(), suite.path("solvers.png"))
    return suite.finish()


def _row(preset, seed, name, inst, res) -> dict:
    r = {"preset": preset, "seed": seed, "method": name, "status": res.status,
         "wall_s": res.wall_s, "bound": res.bound}
    if res.solution is not None:
        ev = system.evaluate(inst, res.solution)
        r.update(objective=ev.objective, delay_s=ev.terms["delay"], energy_J=ev.terms["energy"],
                 ml_bound=ev.terms["ml_bound"], feasible=ev.feasible,
                 aggregators=" ".join(str(x.aggregator) for x in res.solution.rounds))
    return r


def _plot(summary: pd.DataFrame, path: Path) -> None:
    plt = common.plt()
    cols = ["objective", "delay_s", "energy_J", "wall_s"]
    presets = list(summary["preset"].unique())
    fig, ax = plt.subplots(len(presets), len(cols), figsize=(4 * len(cols), 3.2 * len(presets)),
                           squeeze=False)
    for i, p in enumerate(presets):
        d = summary[summary["preset"] == p]
        for j, c in enumerate(cols):
            ax[i, j].bar(d["method"], d[c])
            ax[i, j].set_title(f"{p}: {c}")
            ax[i, j].tick_params(axis="x", rotation=45)
    common.save_fig(fig, path, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())
