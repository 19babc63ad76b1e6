"""Problem P as a Pyomo model you can open, solve with any Pyomo solver and change.

Shows: build P with `cefl_opt.models.build_problem`; walk one UE, BS and DC block (variables,
copies of shared variables, the convex set D_d, the coupling rows C(w) <= 0, the energy cost);
fix the binary decisions by a simple rule and solve the continuous rest with a Pyomo solver of
your choice (cyipopt by default); solve a tiny instance's full MINLP with SCIP through Pyomo
and check its incumbent against brute force; check every answer with the numpy evaluator
`cefl_opt.system`; change a rate and the weight xi1 and re-solve.

Run (from any folder, with the project's venv):
    .venv/bin/python examples/model_builder.py [--quick] [--solver cyipopt]
"""
import argparse
import itertools
import logging
import sys
from pathlib import Path

import pyomo.environ as pyo

from cefl_opt import make_instance, system
from cefl_opt.models import (build_problem, clip_to_bounds, consensus_constraints,
                             extract_solution, load_solution, node_constraints)

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--quick", action="store_true", help="smaller instance, shorter SCIP run")
ap.add_argument("--solver", default="cyipopt", help="any Pyomo NLP solver name (ipopt, cyipopt, ...)")
args = ap.parse_args()
logging.getLogger("pyomo").setLevel(logging.ERROR)  # SCIP's time-limit stop logs a warning

# ---- 1. build P: one block per network element ---------------------------------------------
inst = make_instance("small", seed=0, rounds=2)          # 4 UEs, 2 BSs, 2 DCs, T = 2
m = build_problem(inst, binaries="relaxed")               # I in [0, 1] + forcing rows
print(f"instance {inst.name}: {inst.N} UEs, {inst.B} BSs, {inst.S} DCs, T = {inst.T}")
# every consensus row reads `copy == owner's variable`: its left side is a copy
copy_ids = {id(c.expr.args[0]) for c in consensus_constraints(m)}
for blk in (m.ue[0], m.bs[0], m.dc[1]):
    own, cop = [], []
    for var in blk.component_objects(pyo.Var, descend_into=False):
        (cop if id(next(iter(var.values()))) in copy_ids else own).append(f"{var.local_name}[{len(var)}]")
    print(f"block {blk.name}: own {' '.join(own)} | copies {' '.join(cop)}")
    print(f"  convex set D_d: {len(node_constraints(blk, 'convex'))} rows "
          f"({', '.join(c.local_name for c in blk.convex.component_objects(pyo.Constraint))})")
    print(f"  coupling C(w)<=0: {len(node_constraints(blk, 'coupling'))} rows "
          f"({', '.join(c.local_name for c in blk.coupling.component_objects(pyo.Constraint))})")
    print(f"  cost: the node's energy over all rounds (parts weighted by xi3_parts) at the start "
          f"point: {pyo.value(blk.cost):.4g} J")
print(f"consensus G(w)=0: {len(consensus_constraints(m))} rows; one of them: "
      f"{consensus_constraints(m)[0].expr}")
print(f"UE 0's delay row: {str(m.ue[0].coupling.delay[0].expr)[:110]} ...")


# ---- 2. fix the binaries by a rule, solve the continuous part --------------------------------
def solve_fixed(inst, weights=None):
    """Aggregator: the DC with the largest ingress capacity in every round; UE-BS associations:
    best rate (both from `system.reference_solution`). Then the continuous NLP with --solver."""
    agg = int(inst.Rmax_s.argmax())
    start = system.reference_solution(inst, aggregator=agg)
    nlp = build_problem(inst, binaries="fixed", fixed=start, weights=weights, copies=False)
    load_solution(nlp, start)                             # a feasible start point
    res = pyo.SolverFactory(args.solver).solve(nlp, options={"tol": 1e-8, "print_level": 0})
    j_numpy = system.evaluate(inst, extract_solution(nlp), weights=weights).objective
    assert abs(j_numpy - pyo.value(nlp.obj)) <= 1e-6 * j_numpy, (j_numpy, pyo.value(nlp.obj))
    sol = clip_to_bounds(extract_solution(nlp), inst)     # remove the solver's round-off
    ev = system.evaluate(inst, sol, weights=weights)      # the numpy twin of P: feasible?
    assert ev.feasible, ev.violations
    return sol, ev, str(res.solver.termination_condition)


sol, ev, tc = solve_fixed(inst)
print(f"\nfixed-binary NLP ({args.solver}, {tc}): objective {ev.objective:.6f}, Pyomo and numpy agree "
      f"(ML bound {ev.terms['ml_bound']:.4g}, delay {ev.terms['delay']:.4g} s, "
      f"energy {ev.terms['energy']:.4g} J), aggregators {[r.aggregator for r in sol.rounds]}")

# ---- 3. the full MINLP of a tiny instance with SCIP (spatial branch and bound) ----------------
tiny = make_instance("tiny", seed=0, rounds=1 if args.quick else 2)   # 2 UEs, 1 BS, 2 DCs
ref = system.reference_solution(tiny)
cap = system.evaluate(tiny, ref).objective / tiny.xi2     # every delay <= J(ref)/xi2: a finite box
mip = build_problem(tiny, binaries="binary", copies=False, delay_cap=cap)
load_solution(mip, ref)                                    # warm start for SCIP's heuristics
limit = 3 if args.quick else 20
res = pyo.SolverFactory("scip_direct").solve(mip, options={"limits/time": limit}, load_solutions=False)
mip.solutions.load_from(res)
scip_sol = clip_to_bounds(extract_solution(mip), tiny)
scip_obj, lower = system.evaluate(tiny, scip_sol).objective, float(res.problem.lower_bound)
print(f"\nSCIP on {tiny.name} ({res.solver.termination_condition} after <= {limit} s): incumbent "
      f"{scip_obj:.6f}, proven lower bound {lower:.6f}, gap {100 * (scip_obj - lower) / scip_obj:.3g} %")
# brute force: every aggregator sequence (1 BS: the associations are fixed), Ipopt on the rest
brute = {}
for aggs in itertools.product(range(tiny.S), repeat=tiny.T):
    fixed = system.reference_solution(tiny)
    for r, a in zip(fixed.rounds, aggs):
        r.aggregator = a
    nlp = build_problem(tiny, binaries="fixed", fixed=fixed, copies=False)
    load_solution(nlp, fixed)
    pyo.SolverFactory(args.solver).solve(nlp, options={"print_level": 0})
    brute[aggs] = system.evaluate(tiny, clip_to_bounds(extract_solution(nlp), tiny)).objective
best = min(brute.values())
print(f"brute force over {len(brute)} aggregator sequences: best {best:.6f}; check: lower bound "
      f"<= best + 1e-6: {lower <= best + 1e-6}, incumbent - best = {scip_obj - best:+.2e}")
if lower > best + 1e-6:
    sys.exit("SCIP's bound exceeds a feasible objective: something is wrong")

# ---- 4. change a parameter and re-solve --------------------------------------------------------
slow = inst.copy(R_nb=inst.R_nb * 0.5)                   # every UE->BS uplink rate halved
_, ev_slow, _ = solve_fixed(slow)
print(f"\nuplink rates halved: delay {ev.terms['delay']:.4g} -> {ev_slow.terms['delay']:.4g} s, "
      f"objective {ev.objective:.6f} -> {ev_slow.objective:.6f}")
w = {"xi1": 0.1 * inst.xi1}                               # a tenth of the weight of the ML bound
sol_ml, ev_ml, _ = solve_fixed(inst, weights=w)
mean_m = lambda s: sum(r.m_ue.mean() + r.m_dc.mean() for r in s.rounds) / (2 * len(s.rounds))
print(f"xi1 / 10: ML bound {ev.terms['ml_bound']:.4g} -> {ev_ml.terms['ml_bound']:.4g}, "
      f"mean mini-batch ratio {mean_m(sol):.3f} -> {mean_m(sol_ml):.3f}")
print("model_builder: done")
