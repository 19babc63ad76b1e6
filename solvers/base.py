"""Solver interface in the manner of `pyomo.contrib.solver`: termination conditions, solution
status, a `Results` object and a factory of named methods."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cefl_opt.instance import Instance, validated
from cefl_opt.solution import Solution


class TerminationCondition(str, enum.Enum):
    convergenceCriteriaSatisfied = "optimal"          # proven (global) optimum or local KKT point
    locallyOptimal = "locally_optimal"                 # a local method converged (no global claim)
    maxTimeLimit = "time_limit"
    iterationLimit = "iteration_limit"
    provenInfeasible = "infeasible"
    locallyInfeasible = "locally_infeasible"
    error = "error"
    unknown = "unknown"


class SolutionStatus(str, enum.Enum):
    optimal = "optimal"
    feasible = "feasible"
    infeasible = "infeasible"
    noSolution = "no_solution"


class SolverError(RuntimeError):
    """A solver is missing or failed in a way that leaves no honest answer."""


@dataclass
class Results:
    """What a method returns: status, objective (evaluated by `cefl_opt.system`), proven bound
    and gap where the method proves one, wall time, iterations and the solution itself."""

    method: str
    termination_condition: TerminationCondition
    solution_status: SolutionStatus
    solution: Solution | None = None
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    wall_s: float = 0.0
    iterations: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return self.termination_condition.value

    def summary(self) -> str:
        parts = [f"method={self.method}", f"status={self.status}",
                 f"solution={self.solution_status.value}"]
        if self.objective is not None:
            parts.append(f"objective={self.objective:.8g}")
        if self.bound is not None:
            parts.append(f"bound={self.bound:.8g}")
        if self.gap is not None:
            parts.append(f"gap={100 * self.gap:.4g}%")
        parts.append(f"wall={self.wall_s:.2f}s")
        return " ".join(parts)


MethodFn = Callable[..., Results]
_REGISTRY: dict[str, tuple[MethodFn, str]] = {}


def register(name: str, doc: str) -> Callable[[MethodFn], MethodFn]:
    def deco(fn: MethodFn) -> MethodFn:
        _REGISTRY[name] = (fn, doc)
        return fn
    return deco


def methods() -> dict[str, str]:
    _load_all()
    return {k: v[1] for k, v in sorted(_REGISTRY.items())}


def _load_all() -> None:
    from . import centralized, scip  # noqa: F401  (register their methods)
    try:
        from . import decentralized  # noqa: F401
    except ImportError as e:  # pragma: no cover - only while the module is absent
        if "decentralized" not in str(e):
            raise


def solve(inst: Instance, method: str, **options: Any) -> Results:
    """Run a named method (see `methods()`) on `inst`; options go to that method."""
    inst = validated(inst)
    _load_all()
    if method not in _REGISTRY:
        raise ValueError(f"unknown method {method!r}: choose one of {sorted(_REGISTRY)}")
    problems = inst.feasibility_problems()
    if problems:
        return Results(method=method, termination_condition=TerminationCondition.provenInfeasible,
                       solution_status=SolutionStatus.noSolution, info={"reasons": problems})
    t0 = time.perf_counter()
    res = _REGISTRY[method][0](inst, **options)
    res.wall_s = time.perf_counter() - t0
    if res.solution is not None:
        res.solution.method, res.solution.status = method, res.status
        res.solution.wall_s = res.wall_s
        res.solution.bound, res.solution.gap = res.bound, res.gap
    return res
