"""`cefl-opt run`: the toolkit's main job (docs/install.md).

Generate the default `paper` instance, measure its ML constants (L, Theta, zeta1, zeta2, sigma:
`cefl-opt estimate --dynamic` on the run's data set and the instance's partition, computed once and
cached by the instance's name, seed and data in `--cache-dir`; `--placeholder-constants` skips
this), solve P with the decentralised method, the centralised
reference `ipopt-enum` and the baselines (the report gives every method's gap to the best known
answer of the run and to the best proven lower bound a method reported, `gap_columns`), train on
Fashion-MNIST with CE-FL, FedNova and FedAvg, and write a report folder: `report.md` (tables),
PNG figures, CSVs and every solution file. The command line (argument checks, the report
folder staged and moved into place only on success) is `cefl_opt.cli.run`.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import pandas as pd

from . import system
from .generator import make_instance
from .io import write_atomic, write_csv_atomic, write_json_atomic, write_png_atomic

DEFAULT_METHODS = ("decentralized", "decentralized-polish", "ipopt-enum", "greedy-rate",
                   "greedy-data", "fixed", "no-offload", "decomposed-bound")
BOUND_SECONDS = 30.0    # decomposed-bound's time limit in a run: a share that fits the job
TRACED = ("decentralized", "decentralized-polish", "centralized-pd")  # write an SCA trace
ORCHESTRATED = ("decentralized", "ipopt-enum")  # drawn side by side in the report


def run_pipeline(out: Path, *, preset: str = "paper", rounds: int = 3, seed: int = 0,
                 methods: list[str] | None = None, data=None, dataset: str = "fmnist",
                 train: bool = True, train_rounds: int = 30, targets: list[float] | None = None,
                 model: str = "mlp", measure: bool = True,
                 cache_dir: str | Path = "results/cache", progress: bool = True) -> Path:
    """Write the report into the existing folder `out`; return the path of report.md.

    Arguments are assumed checked (``cefl-opt run`` checks them all before calling);
    `data` is the loaded data set ``(X_train, y_train, X_test, y_test)`` (needed to measure the
    ML constants, `measure`, and to train, `train`).
    """
    from cefl_opt.solvers.base import solve_together
    from cefl_opt.solvers.isolation import NativeCrash, cores
    meths = list(DEFAULT_METHODS if methods is None else methods)
    targets = list(targets or (0.6, 0.7, 0.8))
    t0 = time.perf_counter()
    inst = make_instance(preset, rounds=rounds, seed=seed)
    if measure:
        from .learning.estimation import apply_estimates, measured_constants
        print(f"[1/3] measuring the ML constants on {dataset} (dynamic, once per instance "
              f"and seed; cache {cache_dir}) ...", flush=True)
        est = measured_constants(inst, data, dataset=dataset, model=model, seed=seed,
                                 cache_dir=cache_dir, log=lambda m: print("      " + m, flush=True))
        inst = apply_estimates(inst, est)
        print(f"      L {inst.L:.4g}, zeta1 {inst.zeta1:.4g}, zeta2 {inst.zeta2:.4g}, Theta max "
              f"{inst.Theta.max():.4g}, sigma max {inst.sigma.max():.4g}", flush=True)
    inst.save(out / "instance.json")
    print(f"[1/3] instance {inst.name} ({'measured' if measure else 'placeholder'}"
          f" ML constants) -> {out / 'instance.json'}", flush=True)

    rows, sols, feasible = {}, {}, []
    for stage in solve_stages(meths):
        calls = []
        for i, meth in enumerate(stage):
            print(f"[2/3] solving P with {meth} ...", flush=True)
            calls.append((meth, _run_options(meth, out, sols, feasible, progress and i == 0)))
        for meth, res in zip(stage, solve_together(inst, calls, at_once=cores())):
            if isinstance(res, NativeCrash):   # the other methods still run; the report says so
                print(f"      {meth}: {res}", flush=True)
                rows[meth] = {"method": meth, "status": "crashed"}
                continue
            if isinstance(res, Exception):
                raise res
            print("      " + res.summary(), flush=True)
            rows[meth] = _solver_row(inst, res, out, sols, feasible)
    rows = [rows[m] for m in meths]
    solvers = gap_columns(pd.DataFrame(rows))
    write_csv_atomic(solvers, out / "solvers.csv")
    _bar(solvers, out / "solvers.png")
    if (out / "trace_decentralized.csv").exists():
        from .plots import plot_sca_trace
        plot_sca_trace(pd.read_csv(out / "trace_decentralized.csv"), out / "sca_trace.png")

    shown = [m for m in ORCHESTRATED if m in sols]
    orch = _orchestration(inst, [sols[m] for m in shown], out) if shown else None

    opt = [m for m in meths if m in sols and m != "no-offload"]
    cefl_src = "decentralized" if "decentralized" in sols else (
        min(opt, key=lambda m: solvers.set_index("method").loc[m, "objective"]) if opt else None)
    train_tables = {}
    if train and data is not None and cefl_src is not None:
        from .learning.trainer import run_training
        hist = []
        for method in ("cefl", "fednova", "fedavg"):
            print(f"[3/3] training {method} on {dataset} ({train_rounds} rounds) ...",
                  flush=True)
            tr = run_training(inst, sols[cefl_src], data, method=method, rounds=train_rounds,
                              model=model, seed=seed, targets=targets, progress=progress)
            h = tr.history.assign(method=method)
            hist.append(h)
            train_tables[method] = tr.targets.assign(method=method)
        hist = pd.concat(hist, ignore_index=True)
        write_csv_atomic(hist, out / "training.csv")
        tt = pd.concat(train_tables.values(), ignore_index=True)
        write_csv_atomic(tt, out / "targets.csv")
        _curves(hist, out / "accuracy_vs_cost.png")
    _report(out, inst, solvers, orch, cefl_src, train_tables, time.perf_counter() - t0)
    return out / "report.md"


def solve_stages(meths: list[str]) -> list[list[str]]:
    """The run's methods in the order they are solved, grouped into stages whose methods run
    at once (`solve_together`, one process per core). The points `ipopt-enum` reads
    (`DECENTRALIZED_SEEDS`) come first; `ipopt-enum` runs alone, on every core; then the rest,
    `decomposed-bound` first, capped by the best answer of the stages before it."""
    from cefl_opt.solvers.options import DECENTRALIZED_SEEDS
    first = [m for m in meths if m in DECENTRALIZED_SEEDS]
    rest = sorted((m for m in meths if m not in first and m != "ipopt-enum"),
                  key=lambda m: m != "decomposed-bound")
    return [s for s in (first, ["ipopt-enum"] if "ipopt-enum" in meths else [], rest) if s]


def _run_options(meth: str, out: Path, sols: dict, feasible: list[float], progress: bool
                 ) -> dict:
    """The options by name the run gives `meth`: a progress display (the first method of a
    stage only), a trace file, `ipopt-enum`'s seed points (the run's own solution files) and
    `decomposed-bound`'s time limit and incumbent."""
    from cefl_opt.solvers.options import DECENTRALIZED_SEEDS
    kw: dict = {"progress": progress}
    if meth in TRACED:
        kw["trace_path"] = str(out / f"trace_{meth}.csv")
    if meth == "ipopt-enum":   # its decentralised seeds: the points this run already found
        kw["seed_points"] = {m: str(out / f"solution_{m}.json") for m in DECENTRALIZED_SEEDS
                             if m in sols}
    if meth == "decomposed-bound":   # capped by the run's best feasible answer so far
        kw["time_limit"] = BOUND_SECONDS
        if feasible:
            kw["incumbent"] = min(feasible)
    return kw


def _solver_row(inst, res, out: Path, sols: dict, feasible: list[float]) -> dict:
    """The report's row of one method's result; its solution saved and kept in `sols`, its
    objective in `feasible` if feasible."""
    meth = res.method
    if res.solution is None:
        return {"method": meth, "status": res.status, "bound": res.bound, "wall_s": res.wall_s}
    ev = system.evaluate(inst, res.solution)
    if ev.feasible:
        feasible.append(float(ev.objective))
    res.solution.save(out / f"solution_{meth}.json")
    sols[meth] = res.solution
    return {"method": meth, "status": res.status, "objective": ev.objective,
            "bound": res.bound, "ml_bound": ev.terms["ml_bound"], "delay_s": ev.terms["delay"],
            "energy_J": ev.terms["energy"], "wall_s": res.wall_s,
            "aggregators": " ".join(str(r.aggregator) for r in res.solution.rounds),
            **_dec_columns(res.accounting)}


def gap_columns(solvers: pd.DataFrame) -> pd.DataFrame:
    """`solvers` with each method's gap to the best known answer, objective / best known - 1
    (best known: the least objective any method of the run found), and to the best proven lower
    bound a method reported, (objective - bound) / objective: at most that share of the
    objective can still be saved."""
    out = solvers.copy()
    if "objective" not in out or out["objective"].isna().all():
        return out
    best = float(out["objective"].min())
    out["gap_to_best_known"] = out["objective"] / best - 1.0
    bounds = out["bound"].dropna() if "bound" in out else pd.Series(dtype=float)
    if len(bounds):
        lb = float(bounds.max())
        out["gap_to_bound"] = (out["objective"] - lb) / out["objective"]
    return out


def _dec_columns(acc) -> dict:
    """The decentralised methods' accounting (`Results.accounting`): stop reason, iterations,
    the central steps they took and messages per node and outer iteration; empty for other
    methods."""
    if acc is None:
        return {}
    return {"stop_reason": acc.stop_reason, "outer_iters": acc.outer_iterations,
            "inner_iters": acc.inner_iterations,
            "central_steps": ",".join(acc.central_steps) or "none",
            "msgs_per_node_outer_mean": acc.messages_per_node_outer_mean,
            "msgs_per_node_outer_max": acc.messages_per_node_outer_max}


def _orchestration(inst, sols: list, out: Path) -> pd.DataFrame:
    """orchestration.png (the solutions side by side), costs.png and costs.csv (where each
    node's delay and energy go); returns the per-round summary of every solution."""
    from .orchestration import cost_table, round_summary
    from .orchestration_plot import plot_costs, plot_orchestration
    from .plots import pyplot
    plt = pyplot()
    for plot, name in ((plot_orchestration, "orchestration.png"), (plot_costs, "costs.png")):
        fig, _ = plot(inst, sols)
        write_png_atomic(fig, out / name)
        plt.close(fig)
    write_csv_atomic(pd.concat([cost_table(inst, s) for s in sols], ignore_index=True),
                     out / "costs.csv")
    return pd.concat([round_summary(inst, s) for s in sols], ignore_index=True)


REPORT_COLUMNS = ("method", "status", "objective", "gap to best (%)", "gap to bound (%)",
                  "wall (s)")


def report_table(solvers: pd.DataFrame) -> pd.DataFrame:
    """The report's table of P by method, as text: `REPORT_COLUMNS`, the gaps of `gap_columns`
    in per cent (2 decimals), '-' where a method has no value. Every other column of `solvers`
    (bound, delay, energy, the decentralised accounting) is in solvers.csv only. Objectives
    share one number of decimals: 7 significant digits of the largest."""
    def col(name: str, fmt: str, scale: float = 1.0) -> pd.Series:
        v = solvers[name] if name in solvers else pd.Series(float("nan"), index=solvers.index)
        return v.map(lambda x: "-" if pd.isna(x) else format(scale * float(x), fmt))
    obj = solvers["objective"].abs().max() if "objective" in solvers else float("nan")
    digits = 6 if pd.isna(obj) or obj == 0 else max(0, 6 - int(math.floor(math.log10(obj))))
    return pd.DataFrame({"method": solvers["method"], "status": solvers["status"],
                         "objective": col("objective", f".{digits}f"),
                         "gap to best (%)": col("gap_to_best_known", ".2f", 100.0),
                         "gap to bound (%)": col("gap_to_bound", ".2f", 100.0),
                         "wall (s)": col("wall_s", ".1f")}, columns=list(REPORT_COLUMNS))


def best_bound(solvers: pd.DataFrame) -> float | None:
    """The best (largest) proven lower bound of the run, or None where no method proved one."""
    b = solvers["bound"].dropna() if "bound" in solvers else pd.Series(dtype=float)
    return float(b.max()) if len(b) else None


def _tick_label(method: str, width: int = 14) -> str:
    """A method name wrapped at its hyphens to lines of at most `width` characters."""
    import textwrap
    return textwrap.fill(method, width, break_long_words=False)


def solvers_figure(df: pd.DataFrame):
    """solvers.png: objective of P, delay and energy per method as bars, one chart per row over
    one shared axis of method names (wrapped, each in a slot wide enough for its longest line),
    the best proven lower bound as a horizontal line (gid 'bound') on the objective chart and
    each objective bar marked with its gap to the best known answer; returns the figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    d = df.dropna(subset=["objective"]) if "objective" in df else df.iloc[0:0]
    names = [_tick_label(m) for m in d["method"]]
    longest = max((len(line) for n in names for line in n.split("\n")), default=8)
    slot = max(1.0, 0.08 * longest + 0.25)          # inches per method at 8-point labels
    width = max(6.0, 1.2 + slot * len(d))
    fig, axes = plt.subplots(3, 1, figsize=(width, 7.5), sharex=True)
    x = list(range(len(d)))
    for a, col, lab in zip(axes, ("objective", "delay_s", "energy_J"),
                           ("objective of P", "total delay (s)", "energy (J)")):
        if len(d):
            a.bar(x, d[col], width=0.6)
        a.set_ylabel(lab, fontsize=8)
        a.grid(axis="y", alpha=0.3)
    lb = best_bound(df)
    if lb is not None:
        line = axes[0].axhline(lb, color="crimson", ls="--", lw=1.0,
                               label=f"best proven lower bound {lb:.6g}")
        line.set_gid("bound")
        axes[0].legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False,
                       borderaxespad=0.1)
    if "gap_to_best_known" in d:
        for xi, obj, g in zip(x, d["objective"], d["gap_to_best_known"]):
            axes[0].annotate(f"+{100 * g:.2f} %", (xi, obj), xytext=(0, 2),
                             textcoords="offset points", ha="center", fontsize=7)
    axes[0].set_ylim(0, 1.12 * max([*d["objective"], lb or 0.0, 1e-300]))  # room for the marks
    axes[-1].set_xticks(x, names, fontsize=8)
    axes[-1].set_xlim(-0.5, max(len(d), 1) - 0.5)
    fig.tight_layout()
    return fig


def _bar(df: pd.DataFrame, path: Path) -> None:
    import matplotlib.pyplot as plt
    fig = solvers_figure(df)
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


def _table_note(solvers: pd.DataFrame) -> list[str]:
    """The lines above the report's table: what its gaps mean and the run's proven bound."""
    lb = best_bound(solvers)
    note = ("Gap to best: objective / the least objective of this run - 1. Gap to bound: "
            "(objective - the best proven lower bound) / objective, at most that share of the "
            "objective can still be saved. All columns (bound, delay, energy, the decentralised "
            "methods' accounting, the gaps as fractions) are in `solvers.csv`.")
    if lb is None:
        return [note, "", "No method of this run proved a lower bound: add `decomposed-bound` "
                "to `--methods` for one."]
    by = solvers.loc[solvers["bound"] == lb, "method"].iloc[0]
    return [note, "", f"Best proven lower bound: {lb:.7g} (`{by}`)."]


def _report(out: Path, inst, solvers: pd.DataFrame, orch, cefl_src, train_tables,
            wall: float) -> None:
    lines = [f"# cefl-opt run: {inst.name}", "",
             f"N={inst.N} UEs, B={inst.B} BSs, S={inst.S} DCs ({', '.join(inst.dc_names)}), "
             f"T={inst.T} rounds. Total wall time {wall:.0f} s.", "",
             "## Problem P by method", "",
             *_table_note(solvers), "",
             report_table(solvers).to_markdown(index=False, disable_numparse=True,
                                               colalign=("left", "left") + ("right",) * 4), "",
             "![solvers](solvers.png)", ""]
    if (out / "sca_trace.png").exists():
        lines += ["## The decentralised solver's SCA trace", "",
                  "Objective of P's model, scaled violation and step, and the aggregator of every "
                  "round by outer iteration (`trace_decentralized.csv`). `decentralized` uses "
                  "node-local computation and neighbour messages only (`central_steps` none); "
                  "`decentralized-polish` adds the central association repair and Ipopt polish.",
                  "", "![trace](sca_trace.png)", ""]
    if orch is not None:
        shown = " and ".join(f"`{m}`" for m in orch["method"].unique())
        lines += [f"## Orchestration: {shown}", "",
                  "Per round: the aggregator, the share of the data the UEs keep, the data each "
                  "DC trains on, the slowest node before the broadcast (its path is dA) and the "
                  "slowest broadcast (dR). The figure draws one row per method and one panel per "
                  "round: UE -> BS data and BS -> DC routes with widths proportional to the data, "
                  "the aggregator as a star, each UE coloured by the share it keeps. The second "
                  "figure stacks each node's delay and energy by part (`costs.csv`).", "",
                  orch.to_markdown(index=False, floatfmt=".4g"), "",
                  "![orchestration](orchestration.png)", "", "![costs](costs.png)", ""]
    if train_tables:
        lines += [f"## Training (CE-FL uses the `{cefl_src}` orchestration; FedNova/FedAvg: UEs "
                  "only, no offloading, averaged f, m, gamma)", ""]
        tt = pd.concat(train_tables.values(), ignore_index=True)
        lines += [tt.to_markdown(index=False), "", "![curves](accuracy_vs_cost.png)", ""]
    write_atomic(out / "report.md", "\n".join(lines))
    write_json_atomic(out / "summary.json", {"instance": inst.name, "cefl_source": cefl_src,
                                             "wall_s": wall})
