"""Solver interface in the manner of `pyomo.contrib.solver`: termination conditions, solution
status, a `Results` object and a registry of named methods with typed options.

This module imports no method module: `solvers/plugins.py` names the methods (as Pyomo's
plugins), each with its options class (`solvers/options.py`), as "module:attribute" strings
that are registered here, and a method's module is imported only when it is first run."""
from __future__ import annotations

import enum
import importlib
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from cefl_opt.instance import Instance, validated
from cefl_opt.solution import Solution
from cefl_opt.system import objective_weights

from .errors import SolverError  # noqa: F401  (re-exported: `solvers.base.SolverError`)
from .isolation import Isolated, call_isolated, run_together
from .options import (OptionError, add_option_flags, add_setting_flags, build_options,
                      options_from_args)
from .plugins import PLUGINS


class TerminationCondition(str, enum.Enum):
    convergenceCriteriaSatisfied = "optimal"          # proven (global) optimum or local KKT point
    locallyOptimal = "locally_optimal"                 # a local method converged (no global claim)
    maxTimeLimit = "time_limit"
    iterationLimit = "iteration_limit"
    stalled = "stalled"                                # a local method's objective stopped falling
    provenInfeasible = "infeasible"
    locallyInfeasible = "locally_infeasible"
    error = "error"
    unknown = "unknown"


class SolutionStatus(str, enum.Enum):
    optimal = "optimal"
    feasible = "feasible"
    infeasible = "infeasible"
    noSolution = "no_solution"


@dataclass(frozen=True)
class DecentralizedAccounting:
    """What a decentralised method did (docs/decentralized.md): why it stopped, its outer and
    inner iterations, the central steps it took (none for `decentralized`) and the messages per
    node and outer iteration (mean and max over the nodes; None without message passing)."""

    stop_reason: str
    outer_iterations: int
    inner_iterations: int
    central_steps: tuple[str, ...]
    messages_per_node_outer_mean: float | None = None
    messages_per_node_outer_max: float | None = None


@dataclass
class Results:
    """What `solve` returns.

    Attributes:
        method: the method's name.
        termination_condition: why the method stopped (`status` is its value, e.g.
            `"locally_optimal"`, `"stalled"`, `"provenInfeasible"`).
        solution_status: whether a feasible solution was found.
        solution: the orchestration, or None.
        objective: P's objective of `solution`, evaluated by `cefl_opt.system.evaluate`.
        bound: a proven lower bound on P's optimum, where the method proves one.
        gap: (objective - bound) / objective, where there is a bound.
        wall_s: wall-clock seconds of the solve.
        iterations: the method's iteration count, where it has one.
        reasons: why the instance is infeasible (status `provenInfeasible`).
        message: why the method found no solution, where it says.
        rank: the MPI process; only process 0 holds the solution.
        accounting: the decentralised methods' message and iteration counts.
        report: what a method that proves a bound proved, as the JSON its `--out` holds
            (`decomposed-bound`: format cefl-bound/1), or None.
        info: the method's full record, kept in the solution file for people to read; no code
            depends on its keys.
    """

    method: str
    termination_condition: TerminationCondition
    solution_status: SolutionStatus
    solution: Solution | None = None
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    wall_s: float = 0.0
    iterations: int | None = None
    reasons: list[str] = field(default_factory=list)
    message: str | None = None
    rank: int = 0
    accounting: DecentralizedAccounting | None = None
    report: dict[str, Any] | None = None
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


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its function `fn(inst, options) -> Results`, its options class (a
    `solvers.options.MethodOptions` subclass) and a one-line description. `target` and
    `options` may be given as "module:attribute" strings, imported on first use, so that listing
    the methods imports no solver module."""

    name: str
    target: str | MethodFn
    options: str | type
    doc: str
    native: str = "Ipopt"          # the native solver it runs, as crash messages name it

    def function(self) -> MethodFn:
        return _resolve(self.target)

    def options_class(self) -> type:
        return _resolve(self.options)


def _resolve(ref):
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


_REGISTRY: dict[str, MethodSpec] = {}


def register(name: str, target: str | MethodFn, options: str | type, doc: str,
             native: str = "Ipopt") -> MethodSpec:
    """Register a method under `name` (see `solvers/plugins.py`); re-registering the same
    target is a no-op, a different one under a taken name an error. `native` names the native
    solver library the method runs (the message of a crash inside it names it)."""
    spec = MethodSpec(name, target, options, doc, native)
    old = _REGISTRY.get(name)
    if old is not None and (old.target, old.options) != (target, options):
        raise ValueError(f"method {name!r} is already registered ({old.target})")
    _REGISTRY[name] = spec
    return spec


def _load_plugins() -> None:
    """Register every method of `plugins.PLUGINS`, the one place that names the method modules
    (idempotent)."""
    for name, target, options, doc, *native in PLUGINS:
        register(name, target, options, doc, *native)


def method_spec(name: str) -> MethodSpec:
    _load_plugins()
    if name not in _REGISTRY:
        raise ValueError(f"unknown method {name!r}: choose one of {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def methods() -> dict[str, str]:
    """The registered solve methods (imports no solver module).

    Returns:
        {name: one-line description} of every method `solve` accepts, sorted by name.

    Examples:
        >>> from cefl_opt import methods
        >>> "decentralized" in methods() and "ipopt-enum" in methods()
        True
    """
    _load_plugins()
    return {k: v.doc for k, v in sorted(_REGISTRY.items())}


def options_classes() -> dict[str, type]:
    """{name: options class} of every registered method."""
    _load_plugins()
    return {k: v.options_class() for k, v in sorted(_REGISTRY.items())}


def add_method_flags(parser) -> None:
    """Add `--set KEY=VALUE`, `--options FILE` and the flags of every registered method's
    flagged options to an argparse parser (or group): `solvers.options.add_setting_flags` and
    `add_option_flags` over `options_classes()`."""
    add_setting_flags(parser)
    add_option_flags(parser, options_classes())


def options_from_namespace(args, method: str | None = None):
    """The options object of `method` (default `args.method`) from what `add_method_flags`
    added (and the display switch `--progress`); a flag of another method, or an unknown
    `--set` key, is an `OptionError`."""
    classes = options_classes()
    method = method or args.method
    if method not in classes:
        raise ValueError(f"unknown method {method!r}: choose one of {sorted(classes)}")
    try:
        return options_from_args(method, classes[method], args, classes.values())
    except OptionError as e:
        raise type(e)(f"method {method!r}: {e}") from None


def solve(inst: Instance, method: str, options: Any = None, *, isolate: bool = False,
          **kw: Any) -> Results:
    """Solve Problem P (docs/formulation.md) for `inst` with a named method.

    The objective of the answer is evaluated by `cefl_opt.system.evaluate` (eqn: optimization
    objective text). An instance whose capacities admit no feasible point returns at once with
    status `provenInfeasible` and the reasons.

    Args:
        inst: the instance (validated here).
        method: a name of `methods()`, e.g. `"ipopt-enum"` or `"decentralized"`.
        options: an options object of the method's class (docs: Method options), or None for
            the defaults.
        isolate: run the method in a child process, so that a crash of a native solver (SCIP,
            Ipopt, the AMPL Solver Library) raises `SolverError` instead of killing this
            process. Not with the MPI backend (its processes are the MPI ranks).
        **kw: option values by name; they override `options`' fields.

    Returns:
        The method's `Results`: status, solution, objective, bound and gap where proven.

    Raises:
        ValueError: an unknown method.
        OptionError: an unknown option, a value of the wrong type or range, or an options
            object of another method; the message names the option.
        SolverError: the native solver failed or crashed.

    Examples:
        >>> from cefl_opt import make_instance, solve
        >>> res = solve(make_instance("tiny", seed=0), "fixed", aggregator=0)
        >>> res.status, round(res.objective, 3)
        ('locally_optimal', 2.287)
    """
    inst = validated(inst)
    spec, opts = _prepared(method, options, kw)
    problems = inst.feasibility_problems()
    if problems:
        return _infeasible(method, problems)
    t0 = time.perf_counter()
    if isolate and getattr(opts, "backend", "local") != "mpi":
        res = call_isolated(spec.function(), inst, opts, label=spec.native)
    else:
        res = spec.function()(inst, opts)
    return _completed(res, inst, method, opts, time.perf_counter() - t0)


def solve_together(inst: Instance, calls: list[tuple[str, dict[str, Any]]], *,
                   at_once: int) -> list[Results | SolverError]:
    """Each `(method, options by name)` of `calls` solved as `solve(inst, method, isolate=True,
    **options)` would, each in its own child process, at most `at_once` at a time, started in
    the order given.

    Every call's options are checked before any starts (`OptionError`, `ValueError` as
    `solve`). Returns one entry per call, in order: its `Results`, with `wall_s` its own child's
    wall time, or the `SolverError` (a `NativeCrash`, say) that ended it; an error of another
    kind in a child is raised once every child has ended. An interrupt kills every child."""
    inst = validated(inst)
    prepared = [_prepared(m, None, kw) for m, kw in calls]
    for (method, _), (_, opts) in zip(calls, prepared):
        if getattr(opts, "backend", "local") == "mpi":
            raise OptionError(f"method {method!r}: backend 'mpi' runs on the MPI ranks, not in "
                              "a child process; solve it with `solve`")
    problems = inst.feasibility_problems()
    if problems:
        return [_infeasible(m, problems) for m, _ in calls]
    ended = run_together([partial(Isolated, spec.function(), inst, opts, label=spec.native)
                          for spec, opts in prepared], at_once)
    out: list[Results | SolverError] = []
    for (method, _), (_, opts), call in zip(calls, prepared, ended):
        try:
            out.append(_completed(call.result(), inst, method, opts, call.seconds))
        except SolverError as e:
            out.append(e)
    return out


def _prepared(method: str, options: Any, kw: dict[str, Any]):
    """(method spec, options object) of a solve; the option errors name the method."""
    spec = method_spec(method)
    cls = spec.options_class()
    try:
        if options is None:
            opts = build_options(cls, kw)
        elif type(options) is cls:
            opts = options.replace(**kw) if kw else options
        else:
            raise OptionError(f"options of type {type(options).__name__} given, method "
                              f"{method!r} takes {cls.__name__}")
    except OptionError as e:
        raise type(e)(f"method {method!r}: {e}") from None
    return spec, opts


def _infeasible(method: str, problems: list[str]) -> Results:
    return Results(method=method, termination_condition=TerminationCondition.provenInfeasible,
                   solution_status=SolutionStatus.noSolution, reasons=list(problems),
                   info={"reasons": problems})


def _completed(res: Results, inst: Instance, method: str, opts: Any, wall_s: float) -> Results:
    """`res` with its wall time, and its solution stamped with the method, status, bound,
    instance and weights."""
    res.wall_s = wall_s
    if res.solution is not None:
        res.solution.method, res.solution.status = method, res.status
        res.solution.wall_s = res.wall_s
        res.solution.bound, res.solution.gap = res.bound, res.gap
        res.solution.for_instance(inst)
        res.solution.weights = objective_weights(inst, getattr(opts, "weights", None))
    return res
