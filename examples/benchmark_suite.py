"""Run one of the paper's experiment suites from Python, read its CSV with pandas, draw a figure.

Shows: experiment 4 of the paper (Fig. `ml_importance_plots`, `benchmarks/exp4_xi1.py`): the weight
xi1 of the ML bound against the mini-batch ratio m and the DPUs' processing energy, here on a
reduced paper-style network with the `greedy-rate` method (a rule picks the aggregator, Ipopt the
rest: no enumeration) so that it takes well under two minutes; then the suite's CSV in pandas and a
figure of our own; and how to run every suite (`python -m benchmarks.run_all`, several minutes to
hours: see docs/results/experiments.md).

Run (from any folder, with the project's venv):
    .venv/bin/python examples/benchmark_suite.py [--quick] [--out DIR] [--all]
Writes exp4_xi1.csv, exp4_xi1.png (the suite's own figure) and benchmark_suite.png into DIR
(default: the current folder). --all also runs `benchmarks.run_all --quick` (many minutes).

The same from a shell, in the repository root:
    .venv/bin/python -m benchmarks.exp4_xi1 --quick --factors 0.1,1,10 --method greedy-rate \
        --out-dir results/bench
    .venv/bin/python -m benchmarks.run_all --quick            # every suite, results/bench/
"""
import argparse
import subprocess
import sys
from pathlib import Path

import matplotlib
matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt
import pandas as pd

# `benchmarks/` is not an installed package: import it from the repository this file is in
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import exp4_xi1  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--quick", action="store_true",
                help="two points on a 4-UE network with placeholder ML constants (test size)")
ap.add_argument("--out", default=".", help="folder for the CSV and PNG files (default: here)")
ap.add_argument("--all", action="store_true", help="also run every suite (run_all --quick)")
args = ap.parse_args()
out = Path(args.out).resolve()
out.mkdir(parents=True, exist_ok=True)

# ---- 1. run the suite programmatically: its main() takes the command-line arguments ----------
# Without --quick the suite's own --quick network is used (10 UEs, 6 BSs, 3 DCs, T = 2);
# --ues/--bss/--dcs shrink it further. Drop "--method greedy-rate" for the paper's ipopt-enum.
# --quick also keeps the placeholder ML constants instead of measuring them on Fashion-MNIST.
factors, net = (("0.1,10", ["--ues", "4", "--bss", "2", "--dcs", "2", "--placeholder-constants"])
                if args.quick else ("0.1,1,10", []))
suite_args = ["--quick", "--factors", factors, "--method", "greedy-rate", "--out-dir", str(out)] + net
print("running: python -m benchmarks.exp4_xi1 " + " ".join(suite_args), flush=True)
rc = exp4_xi1.main(suite_args)
if rc != 0:
    sys.exit(f"exp4_xi1 failed with exit status {rc}")

# ---- 2. its CSV in pandas: one row per value of xi1 -------------------------------------------
df = pd.read_csv(out / "exp4_xi1.csv")
print(f"\nread {out / 'exp4_xi1.csv'}: {len(df)} rows, columns include "
      f"{', '.join(list(df.columns)[:8])}, ...")
cols = ["xi1_factor", "xi1", "objective", "ml_bound", "mean_m_data_weighted", "E_P_J", "status"]
print(df[cols].to_string(index=False, float_format="{:.4g}".format))
ok = df.dropna(subset=["objective"]).sort_values("xi1")
up_m = ok["mean_m_data_weighted"].iloc[-1] > ok["mean_m_data_weighted"].iloc[0]
up_e = ok["E_P_J"].iloc[-1] > ok["E_P_J"].iloc[0]
print(f"more weight on the ML bound -> larger mini-batches: {up_m}; more processing energy: {up_e}")

# ---- 3. a figure of our own from the CSV -------------------------------------------------------
fig, ax1 = plt.subplots(figsize=(6, 4))
ax1.semilogx(ok["xi1"], ok["mean_m_data_weighted"], "o-", color="C0")
ax1.set_xlabel("xi1 (weight of the ML convergence bound)")
ax1.set_ylabel("mini-batch ratio m (data-weighted mean)", color="C0")
ax2 = ax1.twinx()
ax2.semilogx(ok["xi1"], ok["E_P_J"], "s--", color="C1")
ax2.set_ylabel("processing energy of the DPUs (J)", color="C1")
ax1.set_title(f"{df['instance'].iloc[0]}: paper experiment 4 (greedy-rate)")
ax1.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(out / "benchmark_suite.png", dpi=100)
print(f"wrote {out / 'benchmark_suite.png'}")

# ---- 4. every suite: one process each, a summary table in run_all.csv ---------------------------
cmd = [sys.executable, "-m", "benchmarks.run_all", "--quick", "--out-dir", str(out / "all")]
print(f"\nall suites: (cd {ROOT} && python {' '.join(cmd[1:])})  [add --only exp2,exp4 to choose]")
if args.all:
    sys.exit(subprocess.run(cmd, cwd=ROOT).returncode)
print("benchmark_suite: done")
