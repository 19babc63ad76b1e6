"""SCIP (global MINLP, spatial branch and bound) on the binary form of P, through pyscipopt and
Pyomo's `scip_direct`. SCIP's incumbent and its proven lower bound are reported as they are:
optimal (gap closed), or time limit with the remaining gap, or infeasible."""
from __future__ import annotations

import math
import pyomo.environ as pyo
from pyomo.opt import TerminationCondition as PyoTC

from cefl_opt import system
from cefl_opt.instance import Instance
from cefl_opt.models import build_problem, clip_to_bounds, extract_solution, load_solution

from .base import Results, SolutionStatus, SolverError, TerminationCondition
from .options import ScipOptions


def solve_scip(inst: Instance, opts: ScipOptions) -> Results:
    """`scip`: SCIP on the binary form of P with a valid box on the delay variables."""
    bound, weights = opts.bound, opts.weights
    solver = pyo.SolverFactory("scip_direct")
    if not solver.available(exception_flag=False):
        raise SolverError("SCIP is not available: `pip install pyscipopt` (make install) is needed "
                          "for --method scip")
    # every part of the objective is >= 0, so at the optimum xi2 * (dA + dR) <= J(reference):
    # a valid bound on every delay variable, without which the spatial B&B has no finite box
    ref = system.reference_solution(inst)
    j_ref = system.evaluate(inst, ref, bound=bound, weights=weights).objective
    xi2 = (weights or {}).get("xi2", inst.xi2)
    cap = j_ref / xi2 if xi2 > 0 else None
    m = build_problem(inst, binaries="binary", bound=bound, weights=weights, copies=False,
                      delay_cap=cap)
    if opts.warm:  # the reference orchestration as a starting point for SCIP's heuristics
        load_solution(m, ref)
    params = {"limits/gap": opts.gap, "randomization/randomseedshift": opts.seed,
              "numerics/feastol": 1e-7}
    if opts.time_limit is not None:
        params["limits/time"] = opts.time_limit
    if opts.threads > 1:
        params["parallel/maxnthreads"] = opts.threads
    params.update(opts.scip_options)
    try:
        res = solver.solve(m, tee=False, options=params, load_solutions=False)
    except Exception as e:  # pragma: no cover - SCIP errors are reported, not hidden
        raise SolverError(f"SCIP failed: {e}") from e
    tc = res.solver.termination_condition
    lower = res.problem.lower_bound
    lower = float(lower) if lower is not None and math.isfinite(float(lower)) else None
    status = {PyoTC.optimal: TerminationCondition.convergenceCriteriaSatisfied,
              PyoTC.maxTimeLimit: TerminationCondition.maxTimeLimit,
              PyoTC.infeasible: TerminationCondition.provenInfeasible,
              PyoTC.maxIterations: TerminationCondition.iterationLimit,
              }.get(tc, TerminationCondition.unknown)
    has_sol = len(res.solution) > 0 if hasattr(res, "solution") else False
    info = {"scip_termination": str(tc), "scip_lower_bound": lower,
            "scip_upper_bound": _finite(res.problem.upper_bound)}
    if not has_sol:
        try:
            m.solutions.load_from(res)
            has_sol = True
        except Exception:
            has_sol = False
    else:
        m.solutions.load_from(res)
    if not has_sol or status == TerminationCondition.provenInfeasible:
        return Results(method="scip", termination_condition=status,
                       solution_status=SolutionStatus.noSolution, bound=lower, info=info)
    sol = clip_to_bounds(extract_solution(m), inst, bound)
    ev = system.evaluate(inst, sol, bound=bound, weights=weights)
    sol.objective, sol.terms = ev.objective, ev.terms
    g = None
    if lower is not None:
        g = max(0.0, (ev.objective - lower) / max(abs(ev.objective), 1e-12))
    sstat = SolutionStatus.optimal if status == TerminationCondition.convergenceCriteriaSatisfied \
        else SolutionStatus.feasible
    if not ev.feasible:
        sstat = SolutionStatus.infeasible
        info["violations"] = ev.violations[:10]
    return Results(method="scip", termination_condition=status, solution_status=sstat,
                   solution=sol, objective=ev.objective, bound=lower, gap=g, info=info)


def _finite(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None
