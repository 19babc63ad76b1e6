"""Centralised references on P: Ipopt (through cyipopt / PyNumero) with the binary decisions
fixed, aggregator enumeration (`ipopt-enum`) and the paper's §VI baselines.

Every baseline fixes its discrete choice (aggregator per round, UE-BS associations, or no
offloading) and optimises the continuous variables with Ipopt on the same Pyomo model, so that
comparisons isolate the decision being compared. Associations start from
`cefl_opt.association.association_rule` and are then repaired by the objective of P
(`association.repair_associations`, the same step the decentralised
solver takes after rounding) and re-polished (`solve_with_repair`; `assoc_repair=False` turns
it off).
"""
from __future__ import annotations

import itertools
import math
import sys
from typing import Any, Sequence

import numpy as np
import pyomo.environ as pyo
from pyomo.opt import TerminationCondition as PyoTC

from cefl_opt import system
from cefl_opt.association import association_rule, repair_associations
from cefl_opt.instance import Instance
from cefl_opt.io import check_interrupt
from cefl_opt.models import (build_problem, clip_to_bounds, extract_solution, fix_binaries,
                             load_solution, unfix_binaries)
from cefl_opt.solution import RoundDecision, Solution

from .base import Results, SolutionStatus, SolverError, TerminationCondition
from .options import (FixedOptions, GreedyOptions, IpoptEnumOptions, IpoptOptions, NoOffloadOptions,
                      OptionError)

IPOPT_DEFAULTS: dict[str, Any] = {"tol": 1e-8, "max_iter": 3000, "print_level": 0,
                                  "mu_strategy": "adaptive"}


def _require_cyipopt():
    solver = pyo.SolverFactory("cyipopt")
    if not solver.available(exception_flag=False):
        raise SolverError("cyipopt is not available: run `make install` (cyipopt and the PyNumero "
                          "ASL library are needed for the Ipopt-based methods)")
    return solver


# ---------------------------------------------------------------------- discrete choices
def decisions_for(inst: Instance, aggregators: Sequence[int],
                  base: Solution | None = None) -> list[RoundDecision]:
    """Round decisions with the given aggregator per round, associations by `association_rule`,
    continuous values from `base` (the reference orchestration by default)."""
    base = base or system.reference_solution(inst)
    out = []
    for t, s in enumerate(aggregators):
        r = base.rounds[t].copy()
        r.aggregator = int(s)
        r.uplink_bs, r.downlink_bs = association_rule(inst, t, int(s))
        out.append(r)
    return out


def greedy_data_aggregators(inst: Instance) -> list[int]:
    """Per round, the DC whose sub-network holds the most data (paper §VI, datapoint-greedy)."""
    sub = np.asarray(inst.ue_subnet, int)
    held = np.array([[inst.Dbar[t][sub == inst.dc_subnet[s]].sum() for s in range(inst.S)]
                     for t in range(inst.T)])
    return [int(a) for a in held.argmax(axis=1)]


def greedy_rate_aggregators(inst: Instance) -> list[int]:
    """Per round, the DC with the highest mean end-to-end rate max_b 1/(1/R_nb + 1/Rmax_bs)."""
    return [int(a) for a in inst.ue_bs_e2e_rate().mean(axis=1).argmax(axis=1)]


# ---------------------------------------------------------------------- fixed-binary NLP
class FixedNLP:
    """P with its binary decisions fixed, in the compact form (copies=False), built once and
    re-fixed for every discrete choice; each `solve` is one Ipopt run."""

    def __init__(self, inst: Instance, *, bound: str = "corollary",
                 weights: dict[str, float] | None = None, no_offload: bool = False,
                 ipopt_options: dict[str, Any] | None = None, time_limit: float | None = None):
        self.inst, self.bound, self.weights = inst, bound, weights
        self.solver = _require_cyipopt()
        self.options = {**IPOPT_DEFAULTS, **(ipopt_options or {})}
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


def solve_with_repair(nlp: FixedNLP, decisions: Sequence[RoundDecision],
                      warm: Solution | None = None, *, repair: bool = True
                      ) -> tuple[Solution | None, TerminationCondition, float | None]:
    """Ipopt for `decisions`, then (repair=True) the association repair of `cefl_opt.association` at
    the optimum and, if it moved anything, a second Ipopt solve with the repaired associations.
    The best feasible of the three points is returned."""
    check_interrupt()   # a Ctrl-C swallowed inside the last solve stops the enumeration here
    sol, st, obj = nlp.solve(decisions, warm=warm)
    if sol is None or not repair:
        return sol, st, obj
    rep, moves = repair_associations(nlp.inst, sol, bound=nlp.bound, weights=nlp.weights)
    nlp.association_moves += moves
    if not moves:
        return sol, st, obj
    rep_obj = system.evaluate(nlp.inst, rep, bound=nlp.bound, weights=nlp.weights).objective
    sol2, st2, obj2 = nlp.solve(rep.rounds, warm=rep)
    if sol2 is not None and obj2 <= min(obj, rep_obj):
        return sol2, st2, obj2
    return (rep, st, rep_obj) if rep_obj < obj else (sol, st, obj)


def _finish(method: str, inst: Instance, sol: Solution | None, status: TerminationCondition,
            nlp: FixedNLP, opts: IpoptOptions, info: dict[str, Any] | None = None) -> Results:
    if nlp.bar is not None:
        nlp.bar.close()
    info = dict(info or {})
    info.update(ipopt_solves=nlp.n_solves, ipopt_retries=nlp.retries,
                association_moves=nlp.association_moves)
    if sol is None:
        return Results(method=method, termination_condition=status,
                       solution_status=SolutionStatus.noSolution, iterations=nlp.iterations,
                       info=info)
    ev = system.evaluate(inst, sol, bound=opts.bound, weights=opts.weights)
    sol.objective, sol.terms = ev.objective, ev.terms
    sol.info.update(info)
    return Results(method=method, termination_condition=status,
                   solution_status=SolutionStatus.feasible, solution=sol, objective=ev.objective,
                   iterations=nlp.iterations, info=info)


# ---------------------------------------------------------------------- methods
def ipopt_enum(inst: Instance, opts: IpoptEnumOptions) -> Results:
    """`ipopt-enum`: every constant aggregator schedule [s] * T, both greedy rules and
    `starts - 1` random schedules, each solved as its baseline solves it; coordinate sweeps over
    each round's aggregator from the best `starts` of them; a final association repair."""
    nlp = _nlp(inst, opts, label="ipopt-enum")
    rng = np.random.default_rng(opts.seed)
    best: tuple[float, Solution | None, TerminationCondition] = (math.inf, None,
                                                                 TerminationCondition.error)
    trials = []
    # candidate starts: every fixed aggregator, both greedy rules, and random draws; the sweeps
    # start from the best of them, so ipopt-enum is never worse than those baselines
    cands = [[s] * inst.T for s in range(inst.S)]
    cands += [greedy_data_aggregators(inst), greedy_rate_aggregators(inst)]
    cands += [[int(x) for x in rng.integers(inst.S, size=inst.T)] for _k in range(1, opts.starts)]
    scored = []
    for aggs in cands:  # each candidate exactly as its baseline method solves it
        sol, st, obj = solve_with_repair(nlp, decisions_for(inst, aggs), repair=opts.assoc_repair)
        trials.append({"aggregators": list(aggs), "objective": obj})
        if sol is not None:
            scored.append((obj, list(aggs), sol, st))
    scored.sort(key=lambda x: x[0])
    for cur_obj, cur, cur_sol, st in scored[:opts.starts]:
        for _sw in range(opts.sweeps):
            improved = False
            for t in range(inst.T):
                for s in range(inst.S):
                    if s == cur[t]:
                        continue
                    cand = list(cur)
                    cand[t] = s
                    if opts.assoc_repair:  # keep the current (repaired) associations
                        dec = [r.copy() for r in cur_sol.rounds]
                        dec[t].aggregator = s
                    else:
                        dec = decisions_for(inst, cand, cur_sol)
                    sol, st2, obj = nlp.solve(dec, warm=cur_sol)
                    trials.append({"aggregators": cand, "objective": obj})
                    if sol is not None and obj < cur_obj - 1e-12:
                        cur, cur_obj, cur_sol, st, improved = cand, obj, sol, st2, True
            if not improved:
                break
        if opts.assoc_repair and cur_sol is not None:
            sol, st2, obj = solve_with_repair(nlp, cur_sol.rounds, warm=cur_sol)
            if sol is not None and obj < cur_obj:
                cur_sol, cur_obj, st = sol, obj, st2
        if cur_obj < best[0]:
            best = (cur_obj, cur_sol, st)
    return _finish("ipopt-enum", inst, best[1], best[2], nlp, opts,
                   {"trials": len(trials),
                    "failed_trials": sum(tr["objective"] is None for tr in trials),
                    "aggregators": best[1] and
                    [r.aggregator for r in best[1].rounds]})


def _nlp(inst: Instance, opts: IpoptOptions, *, no_offload: bool = False,
         label: str = "ipopt") -> FixedNLP:
    nlp = FixedNLP(inst, bound=opts.bound, weights=opts.weights, no_offload=no_offload,
                   ipopt_options=opts.ipopt_options, time_limit=opts.time_limit)
    if opts.progress:   # display only: a bar of the Ipopt solves on stderr
        from tqdm import tqdm
        nlp.bar = tqdm(desc=label, unit=" Ipopt solves", file=sys.stderr)
    return nlp


def _fixed_choice(method: str, inst: Instance, aggs: Sequence[int], opts: IpoptOptions, *,
                  no_offload: bool = False) -> Results:
    nlp = _nlp(inst, opts, no_offload=no_offload, label=method)
    sol, st, _obj = solve_with_repair(nlp, decisions_for(inst, aggs), repair=opts.assoc_repair)
    return _finish(method, inst, sol, st, nlp, opts, {"aggregators": list(map(int, aggs))})


def fixed_aggregator(inst: Instance, opts: FixedOptions) -> Results:
    if opts.aggregator >= inst.S:
        raise OptionError(f"method 'fixed': option 'aggregator' is {opts.aggregator}, not a DC "
                          f"index 0..{inst.S - 1}")
    return _fixed_choice("fixed", inst, [opts.aggregator] * inst.T, opts)


def greedy_data(inst: Instance, opts: GreedyOptions) -> Results:
    return _fixed_choice("greedy-data", inst, greedy_data_aggregators(inst), opts)


def greedy_rate(inst: Instance, opts: GreedyOptions) -> Results:
    return _fixed_choice("greedy-rate", inst, greedy_rate_aggregators(inst), opts)


def no_offload(inst: Instance, opts: NoOffloadOptions) -> Results:
    return _fixed_choice("no-offload", inst, greedy_rate_aggregators(inst), opts, no_offload=True)


# ---------------------------------------------------------------------- exhaustive reference
def all_binary_choices(inst: Instance):
    """Every (aggregator, uplink, downlink) choice of every round: the brute-force reference on
    tiny instances. Yields lists of round decisions (continuous parts from the reference)."""
    ref = system.reference_solution(inst)
    links = inst.ue_links()  # present UE-BS links only
    per_round = []
    for t in range(inst.T):
        opts = []
        for s in range(inst.S):
            for up in itertools.product(*links):
                for down in itertools.product(*links):
                    r = ref.rounds[t].copy()
                    r.aggregator, r.uplink_bs, r.downlink_bs = s, np.array(up), np.array(down)
                    opts.append(r)
        per_round.append(opts)
    for combo in itertools.product(*per_round):
        yield list(combo)


def exhaustive(inst: Instance, *, bound: str = "corollary", weights=None,
               max_choices: int = 5000) -> tuple[float, Solution | None, int]:
    """Best Ipopt objective over all binary choices (brute force; tiny instances only)."""
    count = (inst.S * math.prod(len(bs) for bs in inst.ue_links()) ** 2) ** inst.T
    if count > max_choices:
        raise ValueError(f"exhaustive enumeration would need {count} Ipopt solves (> {max_choices})")
    nlp = FixedNLP(inst, bound=bound, weights=weights)
    best, best_sol = math.inf, None
    for dec in all_binary_choices(inst):
        sol, _st, obj = nlp.solve(dec)
        if sol is not None and obj < best:
            best, best_sol = obj, sol
    return best, best_sol, count
