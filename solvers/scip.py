"""SCIP (global MINLP, spatial branch and bound) on the binary form of P, through pyscipopt and
Pyomo's `scip_direct`. SCIP's incumbent and its proven lower bound are reported as they are:
optimal (gap closed), or time limit with the remaining gap, or infeasible."""
from __future__ import annotations

import io
import sys
import time

import pyomo.environ as pyo
from pyomo.common.tee import capture_output

from pyomo.contrib.solver.common.results import TerminationCondition as PyoTC
from pyomo.contrib.solver.solvers.scip.scip_direct import ScipDirect

from cefl_opt import system
from cefl_opt.instance import Instance
from cefl_opt.models import build_problem, clip_to_bounds, extract_solution, load_solution

from .base import Results, SolutionStatus, SolverError, TerminationCondition
from .bound import add_bound_cuts, cap_objective
from .isolation import in_child, report_progress
from .options import ScipOptions
from .scip_interface import IPOPT_OPTIONS_FILE, QuietScip, finite, scip_error, scip_params  # noqa: F401


def solve_scip(inst: Instance, opts: ScipOptions) -> Results:
    """`scip`: SCIP on the binary form of P with the aggregator cuts of `solvers.bound` and,
    given a cutoff U (`bound.cap_objective`: `opts.incumbent`, or a reference orchestration
    that `system.evaluate` finds feasible, whichever is less), the box xi2 (dA + dR) <= U on
    the delay variables (and the row J <= U for `opts.incumbent`); the bound reported is then
    min(U, SCIP's dual bound), valid for P (`solvers.bound`), and SCIP finding no point proves
    min P >= U, not that P is infeasible. With no cutoff the delays have no box, and SCIP's
    infeasibility is a proof. `opts.time_limit` bounds the whole method: SCIP gets what the
    model's construction left of it."""
    t0 = time.monotonic()
    bound, weights = opts.bound, opts.weights
    if not ScipDirect().available():
        raise SolverError("SCIP is not available: `pip install pyscipopt` (make install) is needed "
                          "for --method scip")
    top, source = cap_objective(inst, opts.incumbent, bound=bound, weights=weights)
    if _out_of_time(opts.time_limit, t0):
        return _not_run(top, source)
    xi2 = (weights or {}).get("xi2", inst.xi2)
    cap = top / xi2 if top is not None and xi2 > 0 else None
    m = build_problem(inst, binaries="binary", bound=bound, weights=weights, copies=False,
                      delay_cap=cap)
    add_bound_cuts(m, inst)
    if source == "incumbent":
        m.cutoff_row = pyo.Constraint(expr=m.obj.expr <= top)
    if opts.warm:  # the reference orchestration as a starting point for SCIP's heuristics
        load_solution(m, system.reference_solution(inst, within_capacity=True))
    if _out_of_time(opts.time_limit, t0):
        return _not_run(top, source)
    params = scip_params(_time_left(opts.time_limit, t0), opts.gap, opts.seed)
    if opts.threads > 1:
        params["parallel/maxnthreads"] = opts.threads
    params.update(opts.scip_options)
    bar = _bar(opts.progress)
    log = io.StringIO()
    try:
        with capture_output(log, capture_fd=True):   # SCIP's C error lines: into the message
            res = _ProgressScip(bar).solve(m, tee=False, solver_options=params,
                                        load_solutions=False,
                                        raise_exception_on_nonoptimal_result=False,
                                        warmstart_discrete_vars=opts.warm)
    except Exception as e:  # SCIP errors are reported, not hidden
        why = scip_error(log.getvalue())
        raise SolverError(f"SCIP failed: {e}" + (f" ({why})" if why else "")) from e
    finally:
        if bar is not None:
            bar.close()
    tc = res.termination_condition
    lower = finite(res.objective_bound)
    status = {PyoTC.convergenceCriteriaSatisfied: TerminationCondition.convergenceCriteriaSatisfied,
              PyoTC.maxTimeLimit: TerminationCondition.maxTimeLimit,
              PyoTC.provenInfeasible: TerminationCondition.provenInfeasible,
              PyoTC.locallyInfeasible: TerminationCondition.provenInfeasible,
              PyoTC.iterationLimit: TerminationCondition.iterationLimit,
              }.get(tc, TerminationCondition.unknown)
    has_sol = res.solution_loader.get_number_of_solutions() > 0
    info = {"scip_termination": tc.name, "scip_lower_bound": lower,
            "scip_upper_bound": finite(res.incumbent_objective), "scip_parameters": params,
            "cutoff": top, "cutoff_source": source}
    if top is not None:  # min P >= min(U, bound under J <= U) (solvers.bound)
        if status == TerminationCondition.provenInfeasible:
            return Results(method="scip", termination_condition=TerminationCondition
                           .convergenceCriteriaSatisfied, solution_status=SolutionStatus.noSolution,
                           bound=top, info=info, message=f"SCIP proved that no point of P has an "
                           f"objective below the cutoff {top:.6g} ({_SOURCES[source]}): the "
                           f"optimum is >= {top:.6g}")
        lower = None if lower is None else min(lower, top)
    if not has_sol or status == TerminationCondition.provenInfeasible:
        return Results(method="scip", termination_condition=status,
                       solution_status=SolutionStatus.noSolution, bound=lower, info=info,
                       message=f"SCIP ended with {tc.name} and no incumbent"
                       + ("" if top is None else f" below the cutoff {top:.6g}"))
    res.solution_loader.load_vars()
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


def _out_of_time(limit: float | None, t0: float) -> bool:
    """Whether the whole method's `limit` (s, None: none) has passed since `t0`."""
    return limit is not None and time.monotonic() - t0 >= limit


def _not_run(top: float | None, source: str | None) -> Results:
    """`scip`'s answer when its time limit ends before SCIP starts: no point, no bound."""
    return Results(method="scip", termination_condition=TerminationCondition.maxTimeLimit,
                   solution_status=SolutionStatus.noSolution,
                   info={"scip_termination": None, "cutoff": top, "cutoff_source": source},
                   message="the time limit ended while the model was built: SCIP did not run")


def _time_left(limit: float | None, t0: float) -> float | None:
    """Seconds of `limit` left since `t0` (None: no limit); at least SCIP's smallest useful
    limit (the time can pass between `_out_of_time`'s check and this one)."""
    return None if limit is None else max(limit - (time.monotonic() - t0), 1e-3)


#: where a cutoff came from, for the messages
_SOURCES = {"incumbent": "the option incumbent",
            "reference": "a reference orchestration that evaluate finds feasible"}


def _bar(progress: bool):
    """The display switch: a tqdm bar on stderr of SCIP's solved nodes, or None."""
    if not progress:
        return None
    from tqdm import tqdm
    return tqdm(desc="scip", unit="node", file=sys.stderr)


class _ProgressScip(QuietScip):
    """Pyomo's direct SCIP interface (`QuietScip`), reporting SCIP's incumbent and proven bound
    as it goes (`isolation.report_progress`: a crash message quotes the last ones) and, given
    a tqdm `bar`, counting the solved nodes on it."""

    def __init__(self, bar=None, **kw):
        super().__init__(**kw)
        self.bar = bar

    def _create_solver_model(self, model, config):
        scip_model, loader, has_obj = super()._create_solver_model(model, config)
        if in_child() or self.bar is not None:
            scip_model.includeEventhdlr(_progress_events(in_child(), self.bar), "cefl_progress",
                                        "reports incumbent and bound as SCIP goes")
        return scip_model, loader, has_obj


def _progress_events(report: bool = True, bar=None):
    """A SCIP event handler that reports (`report`) at each new incumbent, and at solved nodes
    at most every 2 s, and counts the solved nodes on `bar` (pyscipopt is imported here: the
    module loads without it)."""
    from pyscipopt import SCIP_EVENTTYPE, Eventhdlr

    events = SCIP_EVENTTYPE.BESTSOLFOUND | SCIP_EVENTTYPE.NODESOLVED

    class ProgressEvents(Eventhdlr):
        last = 0.0

        def eventinit(self):
            self.model.catchEvent(events, self)

        def eventexit(self):
            self.model.dropEvent(events, self)

        def eventexec(self, event):
            now = time.monotonic()
            if bar is not None and event.getType() != SCIP_EVENTTYPE.BESTSOLFOUND:
                bar.update(1)
            if not report or (event.getType() != SCIP_EVENTTYPE.BESTSOLFOUND
                              and now - self.last < 2.0):
                return
            self.last = now
            report_progress(incumbent=finite(self.model.getPrimalbound()),
                            bound=finite(self.model.getDualbound()),
                            at_s=round(self.model.getSolvingTime(), 1))

    return ProgressEvents()
