"""P with its binary decisions fixed (`FixedNLP`): the one Ipopt solve that the centralised
methods (`solvers.centralized`) and `decentralized-polish`'s final polish (`solvers.decentralized`)
both run."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyomo.environ as pyo
from pyomo.opt import TerminationCondition as PyoTC

from cefl_opt import system
from cefl_opt.instance import Instance
from cefl_opt.models import (build_problem, clip_to_bounds, extract_solution, fix_binaries,
                             load_solution, unfix_binaries)
from cefl_opt.solution import RoundDecision, Solution

from .base import TerminationCondition
from .errors import SolverError
from .native_check import ipopt_values

IPOPT_DEFAULTS: dict[str, Any] = {"tol": 1e-8, "max_iter": 3000, "print_level": 0,
                                  "mu_strategy": "adaptive"}
#: Ipopt's console log is off whatever the options say: Pyomo captures it on a pipe that a
#: thread drains while cyipopt holds the GIL, so a long log could block the solve, and nobody
#: reads it (Ipopt's output_file and file_print_level write one to a file)
IPOPT_QUIET: dict[str, Any] = {"print_level": 0}


def require_cyipopt():
    """Pyomo's cyipopt solver; `SolverError` where cyipopt or PyNumero's ASL is missing."""
    solver = pyo.SolverFactory("cyipopt")
    if not solver.available(exception_flag=False):
        raise SolverError("cyipopt is not available: run `make install` (cyipopt and the PyNumero "
                          "ASL library are needed for the Ipopt-based methods)")
    return solver


class FixedNLP:
    """P with its binary decisions fixed, in the compact form (copies=False), built once and
    re-fixed for every discrete choice; each `solve` is one Ipopt run."""

    def __init__(self, inst: Instance, *, bound: str = "corollary",
                 weights: dict[str, float] | None = None, no_offload: bool = False,
                 ipopt_options: dict[str, Any] | None = None, time_limit: float | None = None):
        self.inst, self.bound, self.weights = inst, bound, weights
        self.solver = require_cyipopt()
        self.options = {**IPOPT_DEFAULTS, **ipopt_values(ipopt_options), **IPOPT_QUIET}
        if time_limit is not None:
            self.options["max_cpu_time"] = float(time_limit)
        ref = system.reference_solution(inst)
        self.model = build_problem(inst, binaries="fixed", fixed=ref, bound=bound, weights=weights,
                                   copies=False)
        self.no_offload = no_offload
        if no_offload:  # conventional FL: no data leaves the UEs
            for n in self.model.N:
                for v in self.model.ue[n].rho.values():
                    v.fix(0.0)
        self.n_solves = 0
        self.bar = None              # a tqdm bar of the Ipopt solves (option progress)
        self.association_moves = 0
        self.retries = 0
        self.iterations = 0

    def solve(self, decisions: Sequence[RoundDecision], warm: Solution | None = None
              ) -> tuple[Solution | None, TerminationCondition, float | None]:
        """Optimise the continuous variables for `decisions`; returns (solution, status,
        objective of P evaluated by `cefl_opt.system`)."""
        sol, status, obj = self._solve_once(decisions, warm, self.options)
        if sol is None and status in (TerminationCondition.locallyInfeasible,
                                      TerminationCondition.error):
            # Ipopt's adaptive barrier update can end in a point of local infeasibility on a
            # feasible choice; one retry from the reference start with the monotone (Fiacco-
            # McCormick) update, counted in `retries`, before the failure is reported
            self.retries += 1
            sol, status, obj = self._solve_once(decisions, None,
                                                {**self.options, "mu_strategy": "monotone"})
        return sol, status, obj

    def _solve_once(self, decisions: Sequence[RoundDecision], warm: Solution | None,
                    options: dict[str, Any]
                    ) -> tuple[Solution | None, TerminationCondition, float | None]:
        m, inst = self.model, self.inst
        unfix_binaries(m)
        start = warm.rounds if warm is not None else system.reference_solution(inst).rounds
        start = [r.copy() for r in start]
        for r, d in zip(start, decisions):
            r.aggregator, r.uplink_bs, r.downlink_bs = d.aggregator, d.uplink_bs, d.downlink_bs
            if self.no_offload:
                r.rho_nb = np.zeros_like(r.rho_nb)
        load_solution(m, start)
        fix_binaries(m, decisions)
        if self.no_offload:
            for n in m.N:
                for v in m.ue[n].rho.values():
                    v.fix(0.0)
        res = self.solver.solve(m, tee=False, options=options)
        self.n_solves += 1
        if self.bar is not None:
            self.bar.update(1)
        tc = res.solver.termination_condition
        self.iterations += int(getattr(res.solver, "iterations", 0) or 0)
        status = {PyoTC.optimal: TerminationCondition.locallyOptimal,
                  PyoTC.locallyOptimal: TerminationCondition.locallyOptimal,
                  PyoTC.maxIterations: TerminationCondition.iterationLimit,
                  PyoTC.maxTimeLimit: TerminationCondition.maxTimeLimit,
                  PyoTC.infeasible: TerminationCondition.locallyInfeasible,
                  }.get(tc, TerminationCondition.error)
        if status in (TerminationCondition.locallyInfeasible, TerminationCondition.error):
            return None, status, None
        sol = clip_to_bounds(extract_solution(m), inst, self.bound)
        ev = system.evaluate(inst, sol, bound=self.bound, weights=self.weights)
        if not ev.feasible:  # a time- or iteration-limited stop at an infeasible iterate
            return None, (status if status != TerminationCondition.locallyOptimal
                          else TerminationCondition.error), None
        return sol, status, ev.objective
