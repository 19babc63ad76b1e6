"""`cefl-opt run`: the toolkit's main job (issue 6).

Generate the default `paper` instance, solve P with the decentralised method, the centralised
reference `ipopt-enum` (the report gives every method's gap to it) and the baselines, train on
Fashion-MNIST with CE-FL, FedNova and FedAvg, and write a report folder: `report.md` (tables),
PNG figures, CSVs and every solution file. The command line (argument checks, the report
folder staged and moved into place only on success) is `cefl_opt.cli.run`.
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from . import system
from .generator import make_instance
from .io import write_atomic, write_csv_atomic, write_json_atomic, write_png_atomic

DEFAULT_METHODS = ("decentralized", "ipopt-enum", "greedy-rate", "greedy-data", "fixed",
                   "no-offload")


def run_pipeline(out: Path, *, preset: str = "paper", rounds: int = 3, seed: int = 0,
                 methods: list[str] | None = None, data=None, dataset: str = "fmnist",
                 train_rounds: int = 30, targets: list[float] | None = None,
                 model: str = "mlp") -> Path:
    """Write the report into the existing folder `out`; return the path of report.md.

    Arguments are assumed checked (``cefl-opt run`` checks them all before calling);
    `data` is the loaded data set ``(X_train, y_train, X_test, y_test)``, or None to skip
    training.
    """
    from cefl_opt.solvers.base import method_spec, solve
    meths = list(DEFAULT_METHODS if methods is None else methods)
    targets = list(targets or (0.6, 0.7, 0.8))
    t0 = time.perf_counter()
    inst = make_instance(preset, rounds=rounds, seed=seed)
    inst.save(out / "instance.json")
    print(f"[1/3] instance {inst.name} -> {out / 'instance.json'}", flush=True)

    rows, sols = [], {}
    for meth in meths:
        print(f"[2/3] solving P with {meth} ...", flush=True)
        takes_progress = "progress" in method_spec(meth).options_class().names()
        res = solve(inst, meth, **({"progress": True} if takes_progress else {}))
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
    write_csv_atomic(solvers, out / "solvers.csv")
    _bar(solvers, out / "solvers.png")

    opt = [m for m in meths if m in sols and m != "no-offload"]
    cefl_src = "decentralized" if "decentralized" in sols else (
        min(opt, key=lambda m: solvers.set_index("method").loc[m, "objective"]) if opt else None)
    train_tables = {}
    if data is not None and cefl_src is not None:
        from .learning.trainer import run_training
        hist = []
        for method in ("cefl", "fednova", "fedavg"):
            print(f"[3/3] training {method} on {dataset} ({train_rounds} rounds) ...",
                  flush=True)
            tr = run_training(inst, sols[cefl_src], data, method=method, rounds=train_rounds,
                              model=model, seed=seed, targets=targets, progress=True)
            h = tr.history.assign(method=method)
            hist.append(h)
            train_tables[method] = tr.targets.assign(method=method)
        hist = pd.concat(hist, ignore_index=True)
        write_csv_atomic(hist, out / "training.csv")
        tt = pd.concat(train_tables.values(), ignore_index=True)
        write_csv_atomic(tt, out / "targets.csv")
        _curves(hist, out / "accuracy_vs_cost.png")
    _report(out, inst, solvers, cefl_src, train_tables, time.perf_counter() - t0)
    return out / "report.md"


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
    write_png_atomic(fig, path)
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
    write_png_atomic(fig, path)
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
