"""Centralised against decentralised solutions of P on one generated instance.

Shows: the centralised reference `ipopt-enum` (Ipopt over the aggregator choices), SCIP's global
MINLP where the instance is small enough, the paper's decentralised solver (`decentralized`:
successive convex approximation with a primal-dual method per node and neighbour messages only),
`decentralized-polish` (its relaxed phase and rounding, then a central association repair and an
Ipopt polish) and `centralized-pd` (the same iteration on global arrays); a table of objective,
gap, wall time, outer iterations, messages per node and the central steps each method took; the
decentralised trace (one row per outer iteration) as a figure.

Run (from any folder, with the project's venv):
    .venv/bin/python examples/centralised_vs_decentralised.py [--quick] [--out DIR]
Writes decentralized_trace.csv and centralised_vs_decentralised.png into DIR (default: here).

The same from the command line:
    cefl-opt network generate --preset small --rounds 3 --seed 0 --out net.json   # --quick: --rounds 2
    cefl-opt solve net.json --method ipopt-enum --out enum.json
    cefl-opt solve net.json --method scip --time-limit 30 --out scip.json
    cefl-opt solve net.json --method decentralized --max-outer 60 \
        --trace decentralized_trace.csv --out decentralized.json
    cefl-opt solve net.json --method decentralized-polish --max-outer 60 --out polish.json
    cefl-opt solve net.json --method centralized-pd --max-outer 60 --out centralized_pd.json
    cefl-opt evaluate net.json decentralized.json  # exit 0: feasible
"""
import argparse
import logging
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from cefl_opt import make_instance, methods, solve

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--quick", action="store_true", help="T = 2, 15 outer iterations, SCIP 3 s")
for k, n in (("ues", 4), ("bss", 2), ("dcs", 2)):   # network size (the `small` preset)
    ap.add_argument(f"--{k}", type=int, default=n)
ap.add_argument("--out", default=".", help="folder for the trace CSV and the figure (default: here)")
args = ap.parse_args()
out = Path(args.out).resolve()
out.mkdir(parents=True, exist_ok=True)
logging.getLogger("pyomo").setLevel(logging.ERROR)

# ---- 1. the instance and the runs -------------------------------------------------------------
inst = make_instance("small", ues=args.ues, bss=args.bss, dcs=args.dcs,
                     rounds=2 if args.quick else 3, seed=0)
n_nodes = inst.N + inst.B + inst.S
n_binaries = inst.T * (2 * inst.N * inst.B + inst.S)
print(f"instance {inst.name}: {n_nodes} nodes, {n_binaries} binary decisions")
outer, scip_limit = (15, 3.0) if args.quick else (60, 30.0)
# keyword options are checked against each method's typed options (a bad name or value raises
# OptionError): `cefl_opt.solvers.base.options_classes()["decentralized"]` lists them
dec_opts = {"max_outer": outer, "progress": False}   # J (consensus_rounds): the method's default
trace_csv = out / "decentralized_trace.csv"
RUNS = [  # (method, options); SCIP only where it fits (spatial B&B grows fast with binaries)
    ("ipopt-enum", {}),
    ("scip", {"time_limit": scip_limit}) if n_binaries <= 60 else ("scip", None),
    ("decentralized", {**dec_opts, "trace_path": str(trace_csv)}),
    ("decentralized-polish", dec_opts),
    ("centralized-pd", dec_opts),
]


def messages_per_node(info):
    """Messages a node sent in the whole run, on average over the nodes (the decentralised
    solver's accounting); NaN for the methods that send none."""
    return info["messages"]["total_count"] / n_nodes if "messages" in info else float("nan")


# ---- 2. solve with each method, tabulate --------------------------------------------------------
available, rows, results = methods(), [], {}
for method, opts in RUNS:
    if method not in available:
        print(f"{method}: not available in this build (registered: {', '.join(sorted(available))})")
        continue
    if opts is None:
        print(f"{method}: skipped, {n_binaries} binaries is too many for a short global solve")
        continue
    res = solve(inst, method, **opts)
    results[method] = res
    print(res.summary(), flush=True)
    rows.append({"method": method, "status": res.status, "objective": res.objective,
                 "wall_s": res.wall_s, "outer_it": res.info.get("outer_iterations", float("nan")),
                 "msgs_per_node": messages_per_node(res.info),
                 "central_steps": "+".join(res.info["central_steps"]) or "none"
                 if "central_steps" in res.info else float("nan")})

table = pd.DataFrame(rows)
ref = results["ipopt-enum"].objective
table["gap_vs_enum_%"] = 100 * (table["objective"] / ref - 1)
bound = results["scip"].bound if "scip" in results else None   # SCIP's proven lower bound on P
if bound is not None:  # a gap as SCIP reports it, (objective - bound) / objective, once bound > 0
    print(f"SCIP's proven lower bound after {scip_limit:g} s: {bound:.6g}")
    if bound > 0:
        table["gap_to_bound_%"] = 100 * (1 - bound / table["objective"])
print("\n" + table.to_string(index=False, float_format="{:.4g}".format, na_rep="n/a"))
for m in ("decentralized", "decentralized-polish", "centralized-pd"):
    if m in results:
        i = results[m].info
        print(f"{m}: stop {i.get('stop_reason')}, aggregators {i.get('aggregators_final')}, "
              f"feasible {i.get('feasible')}")

# ---- 3. the decentralised trace: one CSV row per outer iteration --------------------------------
tr = pd.read_csv(trace_csv)
fig, ax = plt.subplots(1, 2, figsize=(11, 4))
ax[0].plot(tr["outer"], tr["obj_model"], label="J(w) at the iterate")
ax[0].axhline(ref, color="k", ls=":", label="ipopt-enum")
ax[0].set_ylabel("objective of P")
for col in ("max_violation", "forcing_violation", "step_inf"):
    ax[1].semilogy(tr["outer"], tr[col].clip(lower=1e-12), label=col)
for x in tr.loc[tr["phase"].ne(tr["phase"].shift()) & (tr.index > 0), "outer"]:
    for a in ax:   # rounding: the relaxed phase ends, the finishing phase has the binaries fixed
        a.axvline(x - 0.5, color="grey", ls="--", lw=0.8)
for a in ax:
    a.set_xlabel("outer iteration (Alg. 1)")
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
fig.suptitle(f"{inst.name}: decentralized, one row of the trace per outer iteration")
fig.tight_layout()
fig.savefig(out / "centralised_vs_decentralised.png", dpi=100)
print(f"wrote {trace_csv} ({len(tr)} rows) and {out / 'centralised_vs_decentralised.png'}")
