"""Run every experiment suite of SPEC §8, one after the other, each in its own process.

    python -m benchmarks.run_all [--quick] [--only exp1,exp3] [--seed 0]

A suite is skipped, with the reason printed, when its module does not exist (experiments 5 and
6 are ``benchmarks.bench_consensus_gap`` and ``benchmarks.bench_network_size``, written
separately) or when a solve method it needs is not registered (``REQUIRES`` of the suite
module, or the methods listed below for the modules that do not declare it). Each suite writes
its own CSV/PNG files into results/bench/; this script prints a summary table (status, runtime)
and writes it to results/bench/run_all.csv. Exit status 1 when a suite that ran failed.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from benchmarks import common

# (key, module, methods it needs when the module does not declare REQUIRES)
SUITES = [
    ("exp1", "benchmarks.exp1_energy_delay_to_accuracy", ()),
    ("exp2", "benchmarks.exp2_floating_aggregator", ("ipopt-enum", "fixed", "greedy-data", "greedy-rate")),
    ("exp3", "benchmarks.exp3_drift", ("ipopt-enum",)),
    ("exp4", "benchmarks.exp4_xi1", ("ipopt-enum",)),
    ("exp5", "benchmarks.bench_consensus_gap", ("decentralized", "centralized-pd")),
    ("exp6", "benchmarks.bench_network_size", ("decentralized",)),
    ("exp7", "benchmarks.exp7_estimation", ()),
]


def inspect_suite(module: str, default) -> tuple[tuple[str, ...], bool]:
    """(the methods the suite needs: its REQUIRES, else ``default``; whether it takes the common
    options --seed/--out-dir, i.e. builds its command line with ``common.Suite``)."""
    try:
        mod = importlib.import_module(module)
        src = inspect.getsource(mod)
    except Exception:  # noqa: BLE001 - the subprocess will show the real error
        return tuple(default), False
    return tuple(getattr(mod, "REQUIRES", default)), "common.Suite(" in src or "common.parser(" in src


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="pass --quick to every suite")
    ap.add_argument("--only", default=None, help="comma-separated keys (exp1..exp7)")
    ap.add_argument("--seed", type=int, default=None,
                    help="passed as --seed to the suites built on common.parser")
    ap.add_argument("--out-dir", default=None,
                    help="passed as --out-dir to the suites built on common.parser")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per suite (none)")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    avail = common.registered_methods()
    print(f"run_all: registered methods: {', '.join(sorted(avail))}")
    rows = []
    t_all = time.perf_counter()
    for key, module, default_req in SUITES:
        if only is not None and key not in only:
            continue
        if importlib.util.find_spec(module) is None:
            print(f"\n### {key} ({module}): SKIPPED - module not found (not written yet)")
            rows.append({"suite": key, "module": module, "status": "skipped",
                         "reason": "module not found", "runtime_s": 0.0})
            continue
        req, common_args = inspect_suite(module, default_req)
        missing = [m for m in req if m not in avail]
        if missing:
            why = f"method(s) not registered: {', '.join(missing)}"
            print(f"\n### {key} ({module}): SKIPPED - {why}")
            rows.append({"suite": key, "module": module, "status": "skipped", "reason": why,
                         "runtime_s": 0.0})
            continue
        cmd = [sys.executable, "-m", module] + (["--quick"] if args.quick else [])
        if common_args:
            if args.seed is not None:
                cmd += ["--seed", str(args.seed)]
            if args.out_dir is not None:
                cmd += ["--out-dir", str(Path(args.out_dir).resolve())]
        print(f"\n### {key}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        try:
            rc = subprocess.run(cmd, cwd=common.ROOT, timeout=args.timeout).returncode
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            status = f"failed (timeout {args.timeout:g} s)"
        rows.append({"suite": key, "module": module, "status": status, "reason": "",
                     "runtime_s": time.perf_counter() - t0})
    df = pd.DataFrame(rows)
    common.write_csv(df, (common.OUT if args.out_dir is None else Path(args.out_dir)) / "run_all.csv")
    common.print_table(df, f"run_all{' --quick' if args.quick else ''}: "
                           f"{time.perf_counter() - t_all:.0f} s in all", fmt="{:.1f}")
    return 1 if df["status"].str.startswith("failed").any() else 0


if __name__ == "__main__":
    raise SystemExit(main())
