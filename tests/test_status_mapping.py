"""The status that `scip` reports, against what SCIP said and what it proved.

* The mapping itself: SCIP (faked) ends with each of Pyomo's termination conditions, with and
  without an incumbent; the method's termination condition, solution status, bound and gap
  follow from it (an optimum only when SCIP converged; the bound is SCIP's dual bound, never
  its incumbent).
* Real runs: a run stopped by its time limit is `time_limit` with its bound strictly below its
  objective; a run that closes is `optimal` with its gap within the tolerance asked for.
"""
import time
from types import SimpleNamespace

import numpy as np
import pytest
from pyomo.contrib.solver.common.results import TerminationCondition as PyoTC

from cefl_opt import system
from cefl_opt.generator import make_instance
from cefl_opt.solvers import scip as scip_mod
from cefl_opt.solvers.base import SolutionStatus, TerminationCondition, solve
from cefl_opt.solvers.options import ScipOptions, build_options

TC = TerminationCondition

#: what each of Pyomo's termination conditions means for `scip` (every other one: unknown)
WANT = {PyoTC.convergenceCriteriaSatisfied: TC.convergenceCriteriaSatisfied,
        PyoTC.maxTimeLimit: TC.maxTimeLimit,
        PyoTC.iterationLimit: TC.iterationLimit,
        PyoTC.provenInfeasible: TC.provenInfeasible,
        PyoTC.locallyInfeasible: TC.provenInfeasible}


@pytest.fixture(scope="module")
def tiny1():
    return make_instance("tiny", seed=0, rounds=1)


def _fake_scip(monkeypatch, tc, *, lower, upper, solutions):
    """`scip`'s SCIP replaced: it ends with `tc`, dual bound `lower`, incumbent objective
    `upper` and, when `solutions`, the reference orchestration as its incumbent."""
    from cefl_opt.models import load_solution

    class Fake:
        def __init__(self, bar=None, **kw):
            pass

        def solve(self, m, **kw):
            def load_vars():
                load_solution(m, system.reference_solution(m._inst))
            loader = SimpleNamespace(get_number_of_solutions=lambda: int(solutions),
                                     load_vars=load_vars)
            return SimpleNamespace(termination_condition=tc, objective_bound=lower,
                                   incumbent_objective=upper, solution_loader=loader)
    monkeypatch.setattr(scip_mod, "_ProgressScip", Fake)


def _ref_objective(inst):
    return system.evaluate(inst, system.reference_solution(inst)).objective


NO_POINT = (PyoTC.provenInfeasible, PyoTC.locallyInfeasible)


@pytest.mark.parametrize("tc", [t for t in PyoTC if t not in NO_POINT], ids=lambda t: t.name)
def test_each_scip_termination_maps_to_its_own_status(monkeypatch, tiny1, tc):
    j = _ref_objective(tiny1)
    _fake_scip(monkeypatch, tc, lower=0.5 * j, upper=j, solutions=True)
    res = solve(tiny1, "scip", time_limit=5)
    want = WANT.get(tc, TC.unknown)
    assert res.termination_condition == want
    assert res.info["scip_termination"] == tc.name
    assert res.objective == pytest.approx(j, rel=1e-9)
    assert res.solution_status == (SolutionStatus.optimal if want == TC.convergenceCriteriaSatisfied
                                   else SolutionStatus.feasible)
    # the bound is SCIP's dual bound, not its incumbent; the gap is measured from it
    assert res.bound == 0.5 * j
    assert res.gap == pytest.approx(0.5, rel=1e-9)


@pytest.mark.parametrize("tc", NO_POINT, ids=lambda t: t.name)
def test_scip_finding_no_point_under_the_cutoff_proves_the_cutoff(monkeypatch, tiny1, tc):
    """Both of SCIP's infeasibilities read as a proof that no point lies below the cutoff U:
    the optimum is >= U, and no solution is reported."""
    _fake_scip(monkeypatch, tc, lower=None, upper=None, solutions=False)
    res = solve(tiny1, "scip", time_limit=5, incumbent=1.25)
    assert res.termination_condition == TC.convergenceCriteriaSatisfied
    assert res.solution_status == SolutionStatus.noSolution and res.bound == 1.25
    assert res.solution is None and "cutoff" in res.message


@pytest.mark.parametrize("tc", [PyoTC.maxTimeLimit, PyoTC.convergenceCriteriaSatisfied,
                                PyoTC.iterationLimit, PyoTC.error])
def test_without_an_incumbent_the_status_stays_and_no_solution_is_reported(monkeypatch, tiny1,
                                                                           tc):
    _fake_scip(monkeypatch, tc, lower=1e-3, upper=None, solutions=False)
    res = solve(tiny1, "scip", time_limit=5)
    assert res.termination_condition == WANT.get(tc, TC.unknown)
    assert res.solution is None and res.solution_status == SolutionStatus.noSolution
    assert res.bound == 1e-3 and tc.name in res.message


def test_a_bound_not_yet_proven_is_none_and_so_is_the_gap(monkeypatch, tiny1):
    j = _ref_objective(tiny1)
    _fake_scip(monkeypatch, PyoTC.maxTimeLimit, lower=-float("inf"), upper=j, solutions=True)
    res = solve(tiny1, "scip", time_limit=5)
    assert res.termination_condition == TC.maxTimeLimit
    assert res.bound is None and res.gap is None and res.info["scip_lower_bound"] is None


@pytest.mark.parametrize("cut_scale, want", [(0.5, "cut"), (2.0, "lower")])
def test_with_a_cutoff_the_bound_is_the_least_of_it_and_scips(monkeypatch, tiny1, cut_scale,
                                                             want):
    j = _ref_objective(tiny1)
    _fake_scip(monkeypatch, PyoTC.maxTimeLimit, lower=0.8 * j, upper=j, solutions=True)
    res = solve(tiny1, "scip", time_limit=5, incumbent=cut_scale * j)
    assert res.bound == (cut_scale * j if want == "cut" else 0.8 * j)
    assert res.gap == pytest.approx(1 - res.bound / j, rel=1e-9)
    assert res.termination_condition == TC.maxTimeLimit


# ---------------------------------------------------------------------- real SCIP runs
def test_a_run_stopped_by_its_time_limit_reports_time_limit_and_an_open_gap(tiny1):
    # two BSs and a free f and gamma: SCIP is far from closing this in 2 s (25 % open)
    res = solve(tiny1, "scip", time_limit=2, gap=1e-6)
    assert res.info["scip_termination"] == "maxTimeLimit"
    assert res.termination_condition == TC.maxTimeLimit
    assert res.solution_status == SolutionStatus.feasible
    assert res.bound is not None and res.bound < res.objective * (1 - 1e-3)
    assert res.gap > 1e-3
    assert res.gap == pytest.approx((res.objective - res.bound) / res.objective, rel=1e-9)
    assert res.info["scip_lower_bound"] < res.info["scip_upper_bound"]
    assert res.wall_s < 2 + 60                       # it ends (generous: the model build)


def test_a_run_that_closes_reports_optimal_within_its_gap():
    # one BS, one round, narrow f and gamma: SCIP closes a 5 % gap in seconds
    inst = make_instance("tiny", seed=0, bss=1, rounds=1, f_min=np.full(2, 0.5e9),
                         gamma_max=5.0)
    res = solve(inst, "scip", time_limit=300, gap=0.05)
    assert res.termination_condition == TC.convergenceCriteriaSatisfied
    assert res.solution_status == SolutionStatus.optimal
    assert res.bound <= res.objective * (1 + 1e-9)
    assert 0.0 <= res.gap <= 0.05 + 1e-9
    assert res.gap == pytest.approx((res.objective - res.bound) / res.objective, rel=1e-9)
    assert system.evaluate(inst, res.solution).feasible


# ---------------------------------------------------------------------- Ipopt's status (FixedNLP)
def _legacy(name):
    from pyomo.opt import TerminationCondition as Legacy
    return getattr(Legacy, name)


#: Ipopt's termination (pyomo.opt) -> the status of a fixed-binaries solve; every other: error
IPOPT_WANT = {"optimal": TC.locallyOptimal, "locallyOptimal": TC.locallyOptimal,
              "maxIterations": TC.iterationLimit, "maxTimeLimit": TC.maxTimeLimit,
              "infeasible": TC.locallyInfeasible}


@pytest.fixture(scope="module")
def fixed_nlp(tiny1):
    from cefl_opt.solvers.centralized import FixedNLP
    return FixedNLP(tiny1)


class _FakeIpopt:
    """Stands for the SolverFactory's Ipopt: leaves the model at its start (the reference,
    feasible) and ends with `tc`."""

    def __init__(self, tc):
        self.tc, self.calls = tc, 0

    def solve(self, m, **kw):
        self.calls += 1
        return SimpleNamespace(solver=SimpleNamespace(termination_condition=self.tc,
                                                      iterations=3))


@pytest.mark.parametrize("name", ["optimal", "locallyOptimal", "maxIterations", "maxTimeLimit",
                                  "infeasible", "error", "unknown", "other", "userInterrupt"])
def test_each_ipopt_termination_maps_to_its_own_status(monkeypatch, tiny1, fixed_nlp, name):
    from cefl_opt.solvers.centralized import decisions_for
    fake = _FakeIpopt(_legacy(name))
    monkeypatch.setattr(fixed_nlp, "solver", fake)
    retries = fixed_nlp.retries
    sol, status, obj = fixed_nlp.solve(decisions_for(tiny1, [0] * tiny1.T))
    want = IPOPT_WANT.get(name, TC.error)
    assert status == want
    failed = want in (TC.locallyInfeasible, TC.error)
    # a failed solve is retried once (then reported with no point); a stop keeps its point
    assert fake.calls == (2 if failed else 1) and fixed_nlp.retries == retries + failed
    if failed:
        assert sol is None and obj is None
    else:
        ev = system.evaluate(tiny1, sol)
        assert ev.feasible and obj == pytest.approx(ev.objective, rel=1e-12)


# ---------------------------------------------------------------------- decentralized's status
@pytest.mark.parametrize("reason, feasible, tc, sstat", [
    ("converged", True, TC.locallyOptimal, SolutionStatus.feasible),
    ("stalled", True, TC.stalled, SolutionStatus.feasible),
    ("max_outer", True, TC.iterationLimit, SolutionStatus.feasible),
    ("converged", False, TC.locallyOptimal, SolutionStatus.infeasible),
])
def test_decentralized_maps_its_stop_reason_and_feasibility(monkeypatch, tiny1, reason,
                                                            feasible, tc, sstat):
    from cefl_opt.solvers import decentralized as dz
    sol = system.reference_solution(tiny1)
    sol.objective = 1.5
    info = {"stop_reason": reason, "feasible": feasible, "wall_s": 0.1, "outer_iterations": 4,
            "inner_iterations": 9, "central_steps": []}
    monkeypatch.setattr(dz, "solve_decentralized", lambda inst, **kw: (sol, dict(info)))
    res = solve(tiny1, "decentralized")
    assert res.termination_condition == tc and res.solution_status == sstat
    assert res.objective == 1.5 and res.iterations == 4
    assert res.accounting.stop_reason == reason


def test_scip_gets_what_the_models_construction_left_of_the_time_limit(monkeypatch, tiny1):
    """The time limit bounds the whole method: a construction that takes 0.5 s leaves SCIP at
    most the limit less 0.5 s, and a construction that takes it all leaves SCIP nothing (it
    does not start)."""
    seen = []

    class Fake:
        def __init__(self, bar=None, **kw):
            pass

        def solve(self, m, **kw):
            seen.append(kw["solver_options"]["limits/time"])
            loader = SimpleNamespace(get_number_of_solutions=lambda: 0, load_vars=None)
            return SimpleNamespace(termination_condition=PyoTC.maxTimeLimit, objective_bound=None,
                                   incumbent_objective=None, solution_loader=loader)
    real_build = scip_mod.build_problem

    def slow_build(*a, **kw):
        time.sleep(0.5)
        return real_build(*a, **kw)
    monkeypatch.setattr(scip_mod, "_ProgressScip", Fake)
    monkeypatch.setattr(scip_mod, "build_problem", slow_build)
    for limit in (30.0, 0.2):
        res = scip_mod.solve_scip(tiny1, build_options(ScipOptions, {"time_limit": limit}))
        assert res.termination_condition == TC.maxTimeLimit
    assert 0 < seen[0] <= 30.0 - 0.5
    assert len(seen) == 1 and "SCIP did not run" in res.message


@pytest.mark.parametrize("slow_step", ["cap_objective", "build_problem"])
def test_scip_whose_time_ends_while_the_model_is_built_stops_without_running(tiny1, monkeypatch,
                                                                               slow_step):
    # the time limit bounds the whole method: once construction has used it, SCIP never starts
    from cefl_opt.solvers import scip
    real = getattr(scip, slow_step)

    def slow(*a, **k):
        time.sleep(0.6)
        return real(*a, **k)
    monkeypatch.setattr(scip, slow_step, slow)
    monkeypatch.setattr(scip, "ScipDirect", _refuse_to_solve(scip.ScipDirect))
    res = solve(tiny1, "scip", time_limit=0.5)
    assert res.termination_condition == TerminationCondition.maxTimeLimit
    assert res.solution is None and res.bound is None
    assert "SCIP did not run" in res.message


def _refuse_to_solve(cls):
    class NoSolve(cls):
        def solve(self, *a, **k):
            raise AssertionError("SCIP ran after its time limit")
    return NoSolve
