"""Run every experiment suite of the paper (docs/results/experiments.md), one after the other,
each in its own process.

    python -m benchmarks.run_all [--quick] [--only exp1,exp3] [--seed 0]

Experiments 5 and 6 are ``benchmarks.bench_consensus_gap`` and ``benchmarks.bench_network_size``.
Each suite writes its own CSV/PNG files into results/bench/; this script prints a summary table
(status, runtime) and writes it to results/bench/run_all.csv. Exit status 1 when a suite that ran
failed.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from benchmarks import common

SUITES = [
    ("exp1", "benchmarks.exp1_energy_delay_to_accuracy"),
    ("exp2", "benchmarks.exp2_floating_aggregator"),
    ("exp3", "benchmarks.exp3_drift"),
    ("exp4", "benchmarks.exp4_xi1"),
    ("exp5", "benchmarks.bench_consensus_gap"),
    ("exp6", "benchmarks.bench_network_size"),
    ("exp7", "benchmarks.exp7_estimation"),
]


def takes_common_args(module: str) -> bool:
    """Whether the suite takes the common options --seed/--out-dir, i.e. builds its command
    line with ``common.Suite`` (or ``common.parser``)."""
    spec = importlib.util.find_spec(module)
    src = Path(spec.origin).read_text() if spec is not None else ""
    return "common.Suite(" in src or "common.parser(" in src


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
    rows = []
    t_all = time.perf_counter()
    for key, module in SUITES:
        if only is not None and key not in only:
            continue
        cmd = [sys.executable, "-m", module] + (["--quick"] if args.quick else [])
        if takes_common_args(module):
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
        rows.append({"suite": key, "module": module, "status": status,
                     "runtime_s": time.perf_counter() - t0})
    df = pd.DataFrame(rows)
    common.write_csv(df, (common.OUT if args.out_dir is None else Path(args.out_dir)) / "run_all.csv")
    common.print_table(df, f"run_all{' --quick' if args.quick else ''}: "
                           f"{time.perf_counter() - t_all:.0f} s in all", fmt="{:.1f}")
    return 1 if df["status"].str.startswith("failed").any() else 0


if __name__ == "__main__":
    raise SystemExit(main())
