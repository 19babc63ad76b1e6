"""What two methods decided on one instance, drawn side by side.

Shows: one instance solved by the decentralised method (`decentralized`) and the centralised
reference (`ipopt-enum`); their orchestrations on one layout (one row per method, one panel per
round: which BS each UE sends its data to, how much goes on to each DC, which DC aggregates and
how that floats from round to round, the share of its data each UE keeps); where each node's
delay and energy go (stacked bars by part, and the same numbers as a table); the example checks
that the drawn flows are the solutions' data and that the cost parts add up to the evaluator's
totals, and exits non-zero otherwise.

Run (from any folder, with the project's venv):
    .venv/bin/python examples/plot_orchestration.py [--quick] [--out DIR]
Writes net.json, dec.json, enum.json, orchestration.png, orchestration_costs.png and costs.csv
into DIR (default: here).

The same from the command line:
    cefl-opt network generate --preset small --rounds 3 --seed 0 --out net.json   # --quick: --rounds 2
    cefl-opt solve net.json --method decentralized --out dec.json
    cefl-opt solve net.json --method ipopt-enum --out enum.json
    cefl-opt plot net.json dec.json enum.json --out orchestration.png --csv costs.csv
    cefl-opt plot net.json dec.json --out dec.svg --costs dec_costs.pdf   # other formats
"""
import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from cefl_opt import cli, evaluate, make_instance, solve
from cefl_opt.orchestration import cost_table, round_summary
from cefl_opt.orchestration_plot import plot_orchestration

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--quick", action="store_true", help="T = 2 rounds, 15 outer iterations")
ap.add_argument("--preset", default="small", choices=("tiny", "small", "paper"))
ap.add_argument("--out", default=".", help="folder for the files (default: here)")
args = ap.parse_args()
out = Path(args.out).resolve()
out.mkdir(parents=True, exist_ok=True)
logging.getLogger("pyomo").setLevel(logging.ERROR)

# ---- 1. one instance, two methods ---------------------------------------------------------------
inst = make_instance(args.preset, rounds=2 if args.quick else 3, seed=0)
inst.save(out / "net.json")
print(f"instance {inst.name}: {inst.N} UEs, {inst.B} BSs, {inst.S} DCs, {inst.T} rounds")
runs = {"decentralized": {"max_outer": 15 if args.quick else 60, "progress": False},
        "ipopt-enum": {}}
sols = {}
for method, opts in runs.items():
    res = solve(inst, method, **opts)
    print(res.summary())
    if res.solution is None:
        sys.exit(f"{method} found no solution")
    sols[method] = res.solution
    res.solution.save(out / {"decentralized": "dec.json", "ipopt-enum": "enum.json"}[method])

# ---- 2. what each decided, round by round (the numpy evaluator's numbers) ----------------------
for method, sol in sols.items():
    s = round_summary(inst, sol)     # `cefl-opt plot` prints the whole table (step 4)
    print(f"{method}: aggregator by round {' '.join(s['aggregator'].str[:3])}; the UEs keep "
          f"{', '.join(f'{v:g} %' for v in s['kept %'])} of their data")

# ---- 3. check the picture against the solutions ------------------------------------------------
fig, drawn = plot_orchestration(inst, list(sols.values()))
problems = []
for panel in drawn:
    sol, t = sols[panel["method"]], panel["round"]
    rt = evaluate(inst, sol).rounds[t]
    offloaded = float(inst.Dbar[t] @ sol.rounds[t].rho_nb.sum(axis=1))
    for what, got, want in (("UE -> BS", sum(panel["ue_bs"].values()), offloaded),
                            ("BS -> DC", sum(panel["bs_dc"].values()), float(rt["D_s"].sum()))):
        if abs(got - want) > 1e-9 * max(1.0, want):
            problems.append(f"{panel['method']} round {t}: {what} flows {got} != {want}")
    c = cost_table(inst, sol)
    if not np.isclose(c.loc[c["round"] == t, "energy_weighted_J"].sum(), rt["energy"],
                      rtol=1e-12):
        problems.append(f"{panel['method']} round {t}: energy parts do not add up")
print(f"{len(drawn)} panels; the drawn flows are the solutions' data and the cost parts add up "
      f"to the evaluator's totals: {not problems}")

# ---- 4. the command line writes the figures and the table ---------------------------------------
rc = cli.main(["plot", str(out / "net.json"), str(out / "dec.json"), str(out / "enum.json"),
               "--out", str(out / "orchestration.png"), "--csv", str(out / "costs.csv")])
table = pd.read_csv(out / "costs.csv")
print(f"cefl-opt plot: exit {rc}; costs.csv has {len(table)} rows "
      f"({inst.T} rounds x {inst.N + inst.B + inst.S} nodes x {len(sols)} methods)")
if problems or rc != 0:
    sys.exit("\n".join(problems) or f"cefl-opt plot exited {rc}")
print("plot_orchestration: done")
