"""Helpers shared by the experiment suites ``benchmarks/exp*.py`` (the paper's
experiments, docs/results/experiments.md).

Output directory, seeding, the command-line skeleton (``--quick``, ``--seed``, ``--out-dir``),
which solve method stands for CE-FL, per-solution summaries, atomic CSV writing, small text
tables and matplotlib figures (Agg backend, written atomically).
"""
from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUT = ROOT / "results" / "bench"

# The reduced network used by --quick where the paper network is too slow for a 1-2 minute
# run: the paper preset's generator (sub-networks, rates, DC table) with fewer elements.
QUICK_NET = {"ues": 10, "bss": 6, "dcs": 3}


# ---- command line, seeds ---------------------------------------------------------------------
def parser(doc: str | None) -> argparse.ArgumentParser:
    """argparse skeleton: ``--quick``, ``--seed``, ``--out-dir``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small, fast variant (about 1-2 minutes)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the instance, data and training")
    ap.add_argument("--out-dir", default=str(OUT), help="where the CSV and PNG files go")
    return ap


def add_net_args(ap: argparse.ArgumentParser) -> None:
    """``--ues/--bss/--dcs``: override the network size of the paper preset."""
    for k in ("ues", "bss", "dcs"):
        ap.add_argument(f"--{k}", type=int, default=None,
                        help=f"number of {k.upper()[:-1]}s (paper preset's by default; quick: "
                             f"{QUICK_NET[k]} where the suite reduces the network)")


def net_kwargs(args, reduce_quick: bool = True) -> dict[str, int]:
    """Size overrides: QUICK_NET under --quick (when the suite reduces the network), then any
    explicit --ues/--bss/--dcs."""
    kw = dict(QUICK_NET) if (args.quick and reduce_quick) else {}
    kw.update({k: getattr(args, k) for k in ("ues", "bss", "dcs") if getattr(args, k, None)})
    return kw


def seed_everything(seed: int, threads: int = 1) -> None:
    """Seed python, numpy and torch (if installed); one torch thread (stable timings on the
    shared 2-core machine, see bench_trainer.py)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch
        torch.manual_seed(seed)
        torch.set_num_threads(threads)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


def quiet() -> None:
    """Silence the known-noisy warnings of Pyomo/cyipopt/torch in benchmark output."""
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import logging
    logging.getLogger("pyomo").setLevel(logging.ERROR)


def out_dir(args) -> Path:
    p = Path(args.out_dir)
    p.mkdir(parents=True, exist_ok=True)
    return p


# ---- methods ------------------------------------------------------------------------------
def method_names() -> list[str]:
    """The registered solve methods (`solvers/plugins.py`), for argparse `choices`."""
    from cefl_opt.solvers.base import methods
    return sorted(methods())


def cefl_method() -> str:
    """The orchestration that stands for CE-FL: the paper's ``decentralized`` solver."""
    return "decentralized"


def solve_opts(method: str, quick: bool = False) -> dict[str, Any]:
    """Options for ``solve`` per method: no progress bars of the inner solvers inside ours;
    ``--quick`` caps the outer iterations of the decentralized solver (its default is 60)."""
    if method in ("decentralized", "centralized-pd"):
        return {"progress": False, **({"max_outer": 15} if quick else {})}
    return {}


def solve_timed(inst, method: str, **opts):
    """``solve`` with warnings silenced; returns Results (``wall_s`` set by ``solve``)."""
    from cefl_opt.solvers.base import solve
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve(inst, method, **opts)


# ---- instances -------------------------------------------------------------------------------
def instance(preset: str = "paper", *, seed: int = 0, rounds: int = 3, **kw):
    from cefl_opt.generator import make_instance
    return make_instance(preset, seed=seed, rounds=rounds, **kw)


def weights_of(inst) -> dict[str, float]:
    return {"xi1": float(inst.xi1), "xi2": float(inst.xi2), "xi3": float(inst.xi3)}


# ---- summaries of an orchestration -------------------------------------------------------------
def solution_summary(inst, sol) -> dict[str, float]:
    """Objective, its three parts and the averages the experiments plot, from
    ``cefl_opt.system.evaluate`` and the solution itself."""
    from cefl_opt import system
    ev = system.evaluate(inst, sol)
    R = sol.rounds
    D_i = np.array([np.concatenate([r["D_n"], r["D_s"]]) for r in ev.rounds])       # [T, I]
    m = np.array([np.concatenate([d.m_ue, d.m_dc]) for d in R])
    g = np.array([np.concatenate([d.gamma_ue, d.gamma_dc]) for d in R])
    return {
        "objective": ev.objective, "ml_bound": ev.terms["ml_bound"], "delay_s": ev.terms["delay"],
        "energy_J": ev.terms["energy"], "feasible": ev.feasible,
        "sum_dA_s": float(sum(r["dA"] for r in ev.rounds)),
        "sum_dR_s": float(sum(r["dR"] for r in ev.rounds)),
        # what sets dA: the slowest UE's gradient upload alone (no processing), the slowest UE
        # path (processing + upload) and the slowest DC path (data arrival + processing + DC-DC)
        "sum_max_ue_upload_s": float(sum(r["dA_n"].max() for r in ev.rounds)),
        "sum_max_ue_path_s": float(sum(r["ue_path"].max() for r in ev.rounds)),
        "sum_max_dc_path_s": float(sum(r["dc_path"].max() for r in ev.rounds)),
        "mean_f_GHz": float(np.mean([d.f for d in R]) / 1e9),
        # UEs that keep no data have no processing cost, so their f is arbitrary: this average
        # weights each UE's f by the data it processes
        "mean_f_GHz_data_weighted": float(sum((d.f * r["D_n"]).sum() for d, r in zip(R, ev.rounds))
                                          / max(1e-300, sum(r["D_n"].sum() for r in ev.rounds)) / 1e9),
        "mean_m": float(m.mean()),
        "mean_m_data_weighted": float((m * D_i).sum() / D_i.sum()),
        "min_m": float(m.min()),
        "mean_gamma": float(g.mean()),
        "mean_gamma_data_weighted": float((g * D_i).sum() / D_i.sum()),
        "max_gamma": float(g.max()),
        "offload_share": float(np.mean([d.rho_nb.sum(axis=1).mean() for d in R])),
        "E_P_ue_J": float(sum(r["E_P_ue"] for r in ev.rounds)),
        "E_P_dc_J": float(sum(r["E_P_dc"] for r in ev.rounds)),
        "E_P_J": float(sum(r["E_P_ue"] + r["E_P_dc"] for r in ev.rounds)),
        "aggregators": " ".join(str(int(d.aggregator)) for d in R),
    }


def per_round_rows(inst, sol, **tags) -> list[dict]:
    """One row per round: aggregator, dA, dR, delay, energy (weighted and raw), its parts."""
    from cefl_opt import system
    ev = system.evaluate(inst, sol)
    keys = ("dA", "dR", "delay", "energy", "energy_raw", "E_D_ue", "E_D_bs", "E_P_ue", "E_P_dc",
            "E_A", "E_R")
    return [{**tags, "round": t, "aggregator": int(sol.rounds[t].aggregator),
             **{k: float(r[k]) for k in keys}} for t, r in enumerate(ev.rounds)]


def run_sweep(name: str, param: str, values: Sequence[float], make, method: str,
              quick: bool = False) -> pd.DataFrame:
    """Solve ``make(v)`` with ``method`` for each value v of a parameter; one summary row each."""
    from tqdm import tqdm
    rows = []
    for v in tqdm(values, desc=name, unit="solve"):
        inst = make(v)
        res = solve_timed(inst, method, **solve_opts(method, quick))
        row = {param: v, "method": method, "status": res.status, "wall_s": res.wall_s}
        if res.solution is not None:
            row.update(solution_summary(inst, res.solution))
        rows.append(row)
    return pd.DataFrame(rows)


# ---- parameter sweeps (exp3, exp4) ------------------------------------------------------------
def add_sweep_args(ap: argparse.ArgumentParser, flag: str, default: str) -> None:
    """The swept values (`flag`, comma-separated), ``--T`` (rounds, 2) and ``--method``."""
    ap.add_argument(flag, default=default, help=f"comma-separated values (default {default})")
    ap.add_argument("--T", type=int, default=None, help="rounds (2; quick 2)")
    ap.add_argument("--method", default="ipopt-enum", choices=method_names())


def add_constants_args(ap: argparse.ArgumentParser) -> None:
    """Options of the ML constants: measured on a data set (cached) by default (docs/training.md,
    'Estimating the ML constants')."""
    ap.add_argument("--placeholder-constants", action="store_true",
                    help="keep the preset's placeholder ML constants (no measurement)")
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--cache-dir", default="results/cache")


def sweep_instance(args, reduce_quick: bool = True):
    """The paper preset (reduced under --quick unless not `reduce_quick`) with T = --T or 2
    rounds; with the ML constants measured on --dataset (`measured_constants`, cached) when the
    suite declared `add_constants_args` and --placeholder-constants is not given."""
    inst = instance("paper", seed=args.seed, rounds=args.T or 2, **net_kwargs(args, reduce_quick))
    if getattr(args, "placeholder_constants", True):
        return inst
    from cefl_opt.learning.data import load_dataset
    from cefl_opt.learning.estimation import apply_estimates, measured_constants
    data = load_dataset(args.dataset, args.data_dir, seed=args.seed)
    inst = apply_estimates(inst, measured_constants(inst, data, dataset=args.dataset,
                                                    seed=args.seed, cache_dir=args.cache_dir))
    print(f"measured constants L {inst.L:.4g} zeta1 {inst.zeta1:.4g} zeta2 {inst.zeta2:.4g} "
          f"Theta max {inst.Theta.max():.4g} sigma max {inst.sigma.max():.4g}, vartheta "
          f"{inst.vartheta_mode}", flush=True)
    return inst


def print_weights(name: str, inst, method: str, which: str) -> dict[str, float]:
    """Print and return the objective weights the sweep keeps."""
    w = weights_of(inst)
    print(f"{name}: {inst.name}, method {method}, {which} weights "
          + ", ".join(f"{k}={v:.4g}" for k, v in w.items()), flush=True)
    return w


def report_trends(df: pd.DataFrame, param: str, checks, header: str) -> None:
    """For each (label, column, 'up'|'down') of `checks`: the direction of the column along
    `param` and its verdict against the paper's claim."""
    print(f"\n{header}")
    for label, col, want in checks:
        tr = trend(df[param], df[col])
        print(f"  {label:<20} {'decreases' if want == 'down' else 'increases'} with {param}: "
              f"{verdict(tr, want)}  ({tr['first']:.4g} -> {tr['last']:.4g}, "
              f"Spearman {tr['spearman']:+.2f})")


# ---- trends ----------------------------------------------------------------------------------
def trend(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Direction of y along increasing x: Spearman rank correlation, the sign of the change from
    the first to the last point, and whether y is monotone (non-strictly, rel. tol 1e-6)."""
    from scipy.stats import spearmanr
    x, y = np.asarray(x, float), np.asarray(y, float)
    o = np.argsort(x)
    y = y[o]
    tol = 1e-6 * max(1.0, float(np.abs(y).max()))
    d = np.diff(y)
    rho = float(spearmanr(x[o], y).statistic) if np.ptp(y) > 0 else 0.0
    return {"spearman": rho, "first": float(y[0]), "last": float(y[-1]),
            "increasing": bool(np.all(d >= -tol)), "decreasing": bool(np.all(d <= tol)),
            "steps_changed": int(np.sum(np.abs(d) > tol)), "steps": int(d.size)}


def verdict(tr: dict[str, Any], want: str) -> str:
    """'holds' (monotone in the wanted direction), 'holds weakly' (monotone, but flat over most
    steps), 'holds (not monotone)' (endpoints and rank correlation agree), 'does not hold (no
    change)' (first and last equal to 1e-6), or 'does not hold'."""
    sign = 1 if want == "up" else -1
    change = tr["last"] - tr["first"]
    if abs(change) <= 1e-6 * max(abs(tr["first"]), abs(tr["last"]), 1e-300):
        return "does not hold (no change)"
    if tr["increasing" if sign > 0 else "decreasing"] and sign * change > 0:
        if 2 * tr["steps_changed"] < tr["steps"]:
            return f"holds weakly (changes in {tr['steps_changed']} of {tr['steps']} steps only)"
        return "holds"
    if sign * change > 0 and sign * tr["spearman"] > 0:
        return "holds (not monotone)"
    return "does not hold"


# ---- files -----------------------------------------------------------------------------------
def write_csv(df: pd.DataFrame, path: Path) -> Path:
    """CSV written atomically (`cefl_opt.io`)."""
    from cefl_opt.io import write_csv_atomic
    return write_csv_atomic(df, path)


def plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as _plt
    return _plt


def save_fig(fig, path: Path, dpi: int = 110, *, title: str | None = None,
             grid_xlabel: str | None = None) -> Path:
    """Lay out, write atomically as PNG (`cefl_opt.io`) and close a figure; with `title` a
    figure title, with `grid_xlabel` that x label and a light grid on every axes."""
    from cefl_opt.io import write_png_atomic
    if grid_xlabel is not None:
        for a in fig.axes:
            a.set_xlabel(grid_xlabel)
            a.grid(alpha=0.3)
    if title is not None:
        fig.suptitle(title)
    fig.tight_layout()
    write_png_atomic(fig, path, dpi=dpi)
    plt().close(fig)
    return Path(path)


def print_table(df: pd.DataFrame, title: str | None = None, cols: Iterable[str] | None = None,
                fmt: str = "{:.4g}") -> None:
    if title:
        print(f"\n== {title} ==")
    d = df[list(cols)] if cols is not None else df
    with pd.option_context("display.width", 200, "display.max_columns", 50,
                           "display.float_format", fmt.format):
        print(d.to_string(index=False))


def footer(name: str, t0: float, files: Iterable[Path]) -> None:
    print(f"\n{name}: wrote " + ", ".join(str(Path(f).relative_to(ROOT)) if Path(f).is_relative_to(ROOT)
                                          else str(f) for f in files))
    print(f"{name}: runtime {time.perf_counter() - t0:.1f} s")


# ---- a command in a process of its own, measured -------------------------------------------
@dataclass
class ChildRun:
    """What `run_child` measured: exit code (124: killed at the timeout), wall seconds, peak
    RSS (MB) and CPU seconds of the child and the descendants it waited for (`os.wait4`, so an
    `mpiexec` child reports its largest rank), and the tail of its merged output."""
    rc: int
    wall_s: float
    peak_rss_mb: float
    cpu_s: float
    output: str


class _MeasuredPopen(subprocess.Popen):
    """subprocess.Popen whose wait keeps the child's resource usage (`os.wait4`)."""
    usage = None

    def _try_wait(self, wait_flags):
        pid, sts, usage = os.wait4(self.pid, wait_flags)
        if pid == self.pid:
            self.usage = usage
        return pid, sts


def run_child(cmd: list[str], timeout: float, *, preexec_fn=None, tail: int = 2000) -> ChildRun:
    """Run `cmd` in a session of its own (from ROOT); at the timeout its whole process group is
    killed, and the child is killed when this process dies (a session of its own does not hear
    the signal that ended its parent). On a loaded machine the CPU seconds are the better
    measure of the time alone."""
    from cefl_opt.solvers.isolation import die_with_parent

    def start() -> None:
        die_with_parent()
        if preexec_fn is not None:
            preexec_fn()
    t0 = time.perf_counter()
    p = _MeasuredPopen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, start_new_session=True, preexec_fn=start)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        rc = 124
    u = p.usage
    return ChildRun(rc, time.perf_counter() - t0,
                    float("nan") if u is None else u.ru_maxrss / 1024.0,
                    float("nan") if u is None else u.ru_utime + u.ru_stime, (out or "")[-tail:])


def check_stamp(commit: str, machine: str) -> None:
    """A record row's stamp (`docs/results/records/`): a 7-digit short commit and a machine;
    ValueError naming the flag otherwise."""
    if not re.fullmatch(r"[0-9a-f]{7}", commit):
        raise ValueError(f"--commit: {commit!r} is not a 7-digit short commit")
    if not machine.strip():
        raise ValueError("--machine: empty")


def write_record(ap: argparse.ArgumentParser, build, path: Path) -> int:
    """A record's rows, `build()` (a DataFrame), written atomically to `path`; a bad input
    (OSError, KeyError, ValueError) is one `ap.error` naming it, and nothing is written."""
    from cefl_opt.io import write_csv_atomic
    try:
        df = build()
    except (OSError, KeyError, ValueError) as e:
        ap.error(str(e))
    write_csv_atomic(df, path)
    print(f"wrote {path}")
    return 0


# ---- the skeleton every suite uses -------------------------------------------------------------
class Suite:
    """The prologue and epilogue every suite repeats: the command line (``--quick``, ``--seed``,
    ``--out-dir``; ``--ues/--bss/--dcs`` with ``net_args``), quiet warnings, seeds, the output
    folder, atomic CSV and PNG files, tables and the footer listing every file written.

        suite = common.Suite("exp4_xi1", __doc__, net_args=True)
        suite.ap.add_argument("--factors", default="0.1,0.3,1,3,10")
        args = suite.start(argv)
        ...
        suite.csv(df, "exp4_xi1.csv")
        plot(df, suite.path("exp4_xi1.png"))           # plot writes with common.save_fig
        return suite.finish()
    """

    def __init__(self, name: str, doc: str | None, *, net_args: bool = False,
                 sweep: tuple[str, str] | None = None):
        self.name = name
        self.ap = parser(doc)
        if net_args:
            add_net_args(self.ap)
        if sweep is not None:          # (flag, default values) of a parameter sweep
            add_sweep_args(self.ap, *sweep)
        self.files: list[Path] = []
        self.t0 = time.perf_counter()
        self.out = Path(OUT)

    def start(self, argv=None, *, seed: bool = True):
        """Parse the arguments, silence known warnings, seed everything (unless the suite seeds
        per job), create the output folder; return the arguments."""
        args = self.ap.parse_args(argv)
        self.t0 = time.perf_counter()
        quiet()
        if seed:
            seed_everything(args.seed)
        self.out = out_dir(args)
        return args

    def path(self, filename: str) -> Path:
        """The output folder / filename, listed in the footer (for figures: pass it to a
        function that writes with :func:`save_fig`)."""
        path = self.out / filename
        self.files.append(path)
        return path

    def csv(self, df: pd.DataFrame, filename: str) -> Path:
        """`df` written atomically as the output folder / filename."""
        return write_csv(df, self.path(filename))

    def table(self, df: pd.DataFrame, title: str | None = None, cols: Iterable[str] | None = None,
              fmt: str = "{:.4g}") -> None:
        print_table(df, title, cols, fmt)

    def finish(self) -> int:
        footer(self.name, self.t0, self.files)
        return 0
