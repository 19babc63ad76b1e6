"""`cefl-opt run`: the toolkit's main job (issue 6).

Generate the default `paper` instance, measure its ML constants (L, Theta, zeta1, zeta2, sigma:
`cefl-opt estimate --dynamic` on the run's data set and the instance's partition, computed once and
cached by the instance's name, seed and data in `--cache-dir`; `--placeholder-constants` skips
this), solve P with the decentralised method, the centralised
reference `ipopt-enum` (the report gives every method's gap to it) and the baselines, train on
Fashion-MNIST with CE-FL, FedNova and FedAvg, and write a report folder: `report.md` (tables),
PNG figures, CSVs and every solution file.
"""
from __future__ import annotations

import argparse
import io
import time
from pathlib import Path

import pandas as pd

from . import system
from .generator import make_instance
from .instance import InstanceError, write_atomic, write_json_atomic

DEFAULT_METHODS = ("decentralized", "ipopt-enum", "greedy-rate", "greedy-data", "fixed",
                   "no-offload")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="the main job: instance -> solvers -> training -> report",
                       description=__doc__)
    p.add_argument("--out", default="results/run", help="report folder")
    p.add_argument("--preset", default="paper")
    p.add_argument("--rounds", type=int, default=3, help="rounds T of the instance")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default=None,
                   help="comma-separated solve methods (see `cefl-opt solve --help`); default: "
                        + ",".join(DEFAULT_METHODS))
    p.add_argument("--dataset", default="fmnist")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--train-rounds", type=int, default=30, help="training rounds per method")
    p.add_argument("--targets", default="0.6,0.7,0.8")
    p.add_argument("--model", default="mlp")
    p.add_argument("--skip-training", action="store_true")
    p.add_argument("--cache-dir", default="results/cache",
                   help="where measured ML constants are cached (default results/cache)")
    p.add_argument("--placeholder-constants", action="store_true",
                   help="keep the preset's placeholder ML constants (L = Theta = sigma = 1) "
                        "instead of measuring them on the data set")
    p.set_defaults(func=run_main)


def run_main(args: argparse.Namespace) -> int:
    from cefl_opt.solvers.base import methods as known_methods, solve
    out = Path(args.out)
    avail = known_methods()
    if args.methods is None:
        meths = [m for m in DEFAULT_METHODS if m in avail]
        for m in DEFAULT_METHODS:
            if m not in avail:
                print(f"note: method {m!r} is not available in this build; skipped", flush=True)
    else:
        meths = [m.strip() for m in args.methods.split(",") if m.strip()]
    missing = [m for m in meths if m not in avail]
    if missing:
        raise InstanceError(f"option '--methods' names unknown method(s) {missing}: "
                            f"choose from {sorted(avail)}")
    targets = [float(x) for x in args.targets.split(",")]
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    inst = make_instance(args.preset, rounds=args.rounds, seed=args.seed)
    data = None
    if not args.placeholder_constants:
        from .learning.data import load_dataset
        from .learning.estimation import apply_estimates, measured_constants
        data = load_dataset(args.dataset, args.data_dir, seed=args.seed)
        print(f"[1/3] measuring the ML constants on {args.dataset} (dynamic, once per instance "
              f"and seed; cache {args.cache_dir}) ...", flush=True)
        est = measured_constants(inst, data, dataset=args.dataset, model=args.model,
                                 seed=args.seed, cache_dir=args.cache_dir,
                                 log=lambda m: print("      " + m, flush=True))
        inst = apply_estimates(inst, est)
        print(f"      L {inst.L:.4g}, zeta1 {inst.zeta1:.4g}, zeta2 {inst.zeta2:.4g}, Theta max "
              f"{inst.Theta.max():.4g}, sigma max {inst.sigma.max():.4g}", flush=True)
    inst.save(out / "instance.json")
    print(f"[1/3] instance {inst.name} ({'placeholder' if args.placeholder_constants else 'measured'}"
          f" ML constants) -> {out / 'instance.json'}", flush=True)

    rows, sols = [], {}
    for meth in meths:
        print(f"[2/3] solving P with {meth} ...", flush=True)
        res = solve(inst, meth, progress=True)
        print("      " + res.summary(), flush=True)
        if res.solution is None:
            rows.append({"method": meth, "status": res.status})
            continue
        ev = system.evaluate(inst, res.solution)
        res.solution.save(out / f"solution_{meth}.json")
        sols[meth] = res.solution
        rows.append({"method": meth, "status": res.status, "objective": ev.objective,
                     "ml_bound": ev.terms["ml_bound"], "delay_s": ev.terms["delay"],
                     "energy_J": ev.terms["energy"], "wall_s": res.wall_s,
                     "aggregators": " ".join(str(r.aggregator) for r in res.solution.rounds)})
    solvers = pd.DataFrame(rows)
    if "ipopt-enum" in sols and "objective" in solvers:
        ref = float(solvers.set_index("method").loc["ipopt-enum", "objective"])
        solvers["vs_ipopt_enum"] = solvers["objective"] / ref - 1.0
    write_atomic(out / "solvers.csv", solvers.to_csv(index=False))
    _bar(solvers, out / "solvers.png")

    opt = [m for m in meths if m in sols and m != "no-offload"]
    cefl_src = "decentralized" if "decentralized" in sols else (
        min(opt, key=lambda m: solvers.set_index("method").loc[m, "objective"]) if opt else None)
    train_tables = {}
    if not args.skip_training and cefl_src is not None:
        from .learning.data import load_dataset
        from .learning.trainer import run_training
        if data is None:
            data = load_dataset(args.dataset, args.data_dir, seed=args.seed)
        hist = []
        for method in ("cefl", "fednova", "fedavg"):
            print(f"[3/3] training {method} on {args.dataset} ({args.train_rounds} rounds) ...",
                  flush=True)
            tr = run_training(inst, sols[cefl_src], data, method=method, rounds=args.train_rounds,
                              model=args.model, seed=args.seed, targets=targets, progress=True)
            h = tr.history.assign(method=method)
            hist.append(h)
            train_tables[method] = tr.targets.assign(method=method)
        hist = pd.concat(hist, ignore_index=True)
        write_atomic(out / "training.csv", hist.to_csv(index=False))
        tt = pd.concat(train_tables.values(), ignore_index=True)
        write_atomic(out / "targets.csv", tt.to_csv(index=False))
        _curves(hist, out / "accuracy_vs_cost.png")
    _report(out, inst, solvers, cefl_src, train_tables, time.perf_counter() - t0)
    print(f"report: {out / 'report.md'}")
    return 0


def _bar(df: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    d = df.dropna(subset=["objective"]) if "objective" in df else df.iloc[0:0]
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.5))
    for a, col, lab in zip(ax, ("objective", "delay_s", "energy_J"),
                           ("objective of P", "total delay (s)", "energy (J)")):
        if len(d):
            a.bar(d["method"], d[col])
        a.set_title(lab)
        a.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    _save_png(fig, path)
    plt.close(fig)


def _curves(hist: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for method, h in hist.groupby("method"):
        ax[0].plot(h["cum_energy_kJ"], h["accuracy"], marker="o", label=method)
        ax[1].plot(h["cum_delay_s"], h["accuracy"], marker="o", label=method)
    ax[0].set_xlabel("cumulative energy (kJ)")
    ax[1].set_xlabel("cumulative delay (s)")
    for a in ax:
        a.set_ylabel("test accuracy")
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    _save_png(fig, path)
    plt.close(fig)


def _report(out: Path, inst, solvers: pd.DataFrame, cefl_src, train_tables, wall: float) -> None:
    lines = [f"# cefl-opt run: {inst.name}", "",
             f"N={inst.N} UEs, B={inst.B} BSs, S={inst.S} DCs ({', '.join(inst.dc_names)}), "
             f"T={inst.T} rounds. Total wall time {wall:.0f} s.", "",
             "## Problem P by method", "", solvers.to_markdown(index=False), "",
             "![solvers](solvers.png)", ""]
    if train_tables:
        lines += [f"## Training (CE-FL uses the `{cefl_src}` orchestration; FedNova/FedAvg: UEs "
                  "only, no offloading, averaged f, m, gamma)", ""]
        tt = pd.concat(train_tables.values(), ignore_index=True)
        lines += [tt.to_markdown(index=False), "", "![curves](accuracy_vs_cost.png)", ""]
    write_atomic(out / "report.md", "\n".join(lines))
    write_json_atomic(out / "summary.json", {"instance": inst.name, "cefl_source": cefl_src,
                                             "wall_s": wall})


def _save_png(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    write_atomic(path, buf.getvalue())
