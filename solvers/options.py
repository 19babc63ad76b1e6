"""Typed options of the solve methods, in the manner of `pyomo.contrib.solver`'s config objects
(`SolverConfig`: one declared entry per option with a domain, a default and a description).

Every registered method declares one frozen dataclass, a subclass of `MethodOptions`; each field
is declared with `option(default, doc, ...)`: its type (the annotation), default, documentation
and validation (finite numbers, ranges, choices). Building the object validates it, so a method
only ever receives checked values; an error names the option (not a CLI flag) and the value:

    >>> ScipOptions(gap=float("nan"))
    OptionError: option 'gap' must be a finite number, got nan

`build_options(cls, values)` rejects unknown keys (`UnknownOptionError`). The command line of
`cefl-opt solve` comes from these declarations: `add_option_flags` generates a flag for each
commonly used field (`--time-limit` for `time_limit`; booleans as `--x/--no-x`),
`add_setting_flags` adds `--set KEY=VALUE` and `--options FILE.toml`, which reach every
algorithm option by name, and `options_from_args` builds the options object of one method from
the parsed arguments; `describe_options` is `--list-options`. The field `progress` of every
class is a display switch (the command-level `--progress/--no-progress`), not an algorithm
option.

`DecentralizedOptions` is derived from `primal_dual.PDConstants` (one override per field,
documented by `PD_CONSTANT_DOCS`) when first used. Importing this module, and the options of
the Ipopt methods and SCIP, loads neither Pyomo nor any solver.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from cefl_opt.io import range_end as _num
from cefl_opt.system import BOUND_FORMS, weights_problem

from .errors import OptionError  # noqa: F401  (re-exported: `solvers.options.OptionError`)

Check = Callable[[Any], "str | None"]  # returns a reason ("must be > 0") or None

#: The ranges SCIP accepts for the parameters that options set (SCIP's parameter table):
#: limits/time in [0, 1e20], randomization/randomseedshift in [0, 2^31 - 1] (a C int),
#: parallel/maxnthreads in [0, 64]. An option is checked against them when it is built, so a
#: value out of SCIP's range is refused by name before any work, never by SCIP mid-solve.
SCIP_TIME_MAX = 1e20
SCIP_SEED_MAX = 2 ** 31 - 1
SCIP_THREADS_MAX = 64
#: ipopt-enum's `starts`: its random aggregator sequences are drawn before the search (and
#: its time limit) starts, so their number is bounded
MAX_STARTS = 10_000
WORKERS_MAX = 256      # processes of one pool (ipopt-enum's independent solves)


class UnknownOptionError(OptionError):
    """An option name that the method does not declare."""


# ---------------------------------------------------------------------- field declarations
#: The groups of options, in the order `--list-options` and the options reference list them:
#: what P is, the solver's own limits, then the decentralised method's phases (the relaxed
#: phase and its inner solver, the rounding, the search after it, the finishing phase, the
#: neighbour messages) and what a run records.
GROUPS = ("problem", "solver", "relaxed phase", "rounding", "search", "finishing", "messaging",
          "recording")


def option(default: Any, doc: str, *, check: Check | None = None,
           choices: tuple[str, ...] | None = None, cli: bool = True, flag: str | None = None,
           metavar: str | None = None, default_doc: str | None = None, flagged: bool = True,
           display: bool = False, group: str = "solver") -> Any:
    """Declare one option: default, documentation, validation (`check` returns a reason or
    None; `choices` for strings) and how it appears on the command line: `cli=False`: Python
    API and `--options FILE` only; `flagged=False`: no flag of its own, set with
    `--set KEY=VALUE` or `--options FILE`; `flag` overrides the generated `--name-with-dashes`;
    `display=True`: a display switch (progress bar), set by the command-level
    `--progress/--no-progress`, not an algorithm option. `group` (one of `GROUPS`) is the
    phase of the method the option acts in, under which `--list-options` lists it."""
    if group not in GROUPS:
        raise ValueError(f"option group {group!r}: expected one of {', '.join(GROUPS)}")
    meta = {"doc": doc, "check": check, "choices": choices, "cli": cli, "flag": flag,
            "metavar": metavar, "default_doc": default_doc, "flagged": flagged,
            "display": display, "group": group}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


def _bounded(chk: Check, lo: float, hi: float | None, lo_open: bool, hi_open: bool) -> Check:
    """`chk` with its range as the attribute `bounds` = (lo, hi, lo_open, hi_open), hi None for
    no upper end (the tests walk every option's ends from it)."""
    chk.bounds = (lo, hi, lo_open, hi_open)
    return chk


def at_least(lo: float) -> Check:
    return _bounded(lambda v: None if v >= lo else f"must be >= {_num(lo)}", lo, None, False,
                    False)


def positive(v: float) -> str | None:
    return None if v > 0 else "must be > 0"


positive.bounds = (0.0, None, True, False)


def in_interval(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> Check:
    def chk(v: float) -> str | None:
        ok = (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
        return None if ok else (f"must be in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}"
                                f"{')' if hi_open else ']'}")
    return _bounded(chk, lo, hi, lo_open, hi_open)


def _weights(v: Mapping[str, Any]) -> str | None:
    """Keys among xi1, xi2, xi3, values finite and >= 0 (`system.weights_problem`)."""
    return weights_problem(v)


def _no_weights(v: Mapping[str, Any]) -> str | None:
    """Refuses every override: the method optimises the instance's own weights."""
    return None if not v else ("is not taken by the decentralised methods (their node objectives use the "
            "instance's xi1, xi2, xi3: set the weights in the instance)")


DECENTRALIZED_SEEDS = ("decentralized", "decentralized-polish")   # ipopt-enum's method seeds


def _seed_points(v: Mapping[str, Any]) -> str | None:
    """Keys among `DECENTRALIZED_SEEDS`, each value the path of an existing solution file."""
    for k, path in v.items():
        if k not in DECENTRALIZED_SEEDS:
            return f"has the key {k!r}: expected one of {', '.join(DECENTRALIZED_SEEDS)}"
        if not isinstance(path, str) or not os.path.isfile(path):
            return f"names no solution file for {k!r} ({path!r} is not a file)"
    return None


def _ipopt_entries(v: Mapping[str, Any]) -> str | None:
    """Each entry checked by Ipopt itself (name, type, range) when the options are built.

    `solvers.native_check` sets it on a throwaway problem; cyipopt is imported only for a
    non-empty mapping (without it, the method reports cyipopt missing)."""
    if not v:
        return None
    try:
        from .native_check import check_ipopt_options
    except ImportError:
        return None
    return check_ipopt_options(v)


def _scip_entries(v: Mapping[str, Any]) -> str | None:
    """Each entry checked by SCIP itself (name, type, range) when the options are built.

    `solvers.native_check` sets it on a throwaway SCIP model; pyscipopt is imported only for
    a non-empty mapping (without it, the method reports SCIP missing)."""
    if not v:
        return None
    try:
        from .native_check import check_scip_options
    except ImportError:
        return None
    return check_scip_options(v)


# ---------------------------------------------------------------------- type handling
def split_optional(hint: Any) -> tuple[Any, bool]:
    """(base type, None allowed) of an annotation such as `float | None`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"option type {hint} is not supported")
        return args[0], True
    return hint, False


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """`value` as the option's type, or OptionError naming the option and the value."""
    base, optional = split_optional(hint)
    if value is None:
        if optional:
            return None
        raise OptionError(f"option {name!r} must not be None")
    origin = typing.get_origin(base) or base
    if origin is bool:
        if not isinstance(value, (bool,)) and type(value).__name__ != "bool_":
            raise OptionError(f"option {name!r} must be true or false, got {value!r}")
        return bool(value)
    if origin is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise OptionError(f"option {name!r} must be an integer, got {value!r}")
        return int(value)
    if origin is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise OptionError(f"option {name!r} must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise OptionError(f"option {name!r} must be a finite number, got {value!r}")
        return value
    if origin is str:
        if not isinstance(value, str):
            raise OptionError(f"option {name!r} must be a string, got {value!r}")
        return value
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise OptionError(f"option {name!r} must be a mapping, got {value!r}")
        return dict(value)
    raise TypeError(f"option {name!r}: type {base} is not supported")  # a declaration bug


@dataclass(frozen=True)
class MethodOptions:
    """Options every method takes. Subclasses add theirs with `option(...)`."""

    bound: str = option("corollary", "form of the ML bound: corollary (eq:convSpecial) or "
                        "general (Theorem 1, eq:GenConvBound)", choices=BOUND_FORMS,
                        group="problem")
    weights: dict | None = option(None, "overrides of the objective weights xi1, xi2, xi3 "
                                  "(the instance's by default)", check=_weights, cli=False,
                                  group="problem")
    progress: bool = option(False, "display only: a tqdm bar on stderr of the method's Ipopt "
                            "solves, SCIP's solved nodes or the decentralised outer iterations "
                            "(the command-level --progress/--no-progress)", display=True)

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            v = _coerce(f.name, getattr(self, f.name), hints[f.name])
            choices = f.metadata.get("choices")
            if v is not None and choices is not None and v not in choices:
                raise OptionError(f"option {f.name!r} is {v!r}: expected one of "
                                  f"{', '.join(map(str, choices))}")
            check = f.metadata.get("check")
            why = check(v) if (v is not None and check is not None) else None
            if why:
                raise OptionError(f"option {f.name!r} {why}, got {v!r}")
            object.__setattr__(self, f.name, v)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **changes: Any) -> "MethodOptions":
        return build_options(type(self), {**self.as_dict(), **changes})


def build_options(cls: type[MethodOptions], values: Mapping[str, Any]) -> MethodOptions:
    """`cls(**values)` with unknown keys rejected by name (`UnknownOptionError`)."""
    known = cls.names()
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise UnknownOptionError(
            f"unknown option {unknown[0]!r} (value {values[unknown[0]]!r}); {cls.__name__} "
            f"declares: {', '.join(known)}")
    return cls(**values)


# ---------------------------------------------------------------------- the methods' options
@dataclass(frozen=True)
class IpoptOptions(MethodOptions):
    """Options of every method that optimises the continuous variables with Ipopt on P with
    the binary decisions fixed (`fixed_nlp.FixedNLP`)."""

    time_limit: float | None = option(None, "seconds of CPU time per Ipopt solve (Ipopt's "
                                      "max_cpu_time; none: no limit)", check=positive)
    assoc_repair: bool = option(True, "repair the UE-BS associations after the first Ipopt "
                                "solve (by the objective of P: cefl_opt.association)")
    ipopt_options: dict = option({}, "extra Ipopt options (name -> value), each checked by "
                                 "Ipopt when the options are built", check=_ipopt_entries,
                                 cli=False)


@dataclass(frozen=True)
class IpoptEnumOptions(IpoptOptions):
    time_limit: float | None = option(None, "seconds of wall time for the whole search (when "
                                      "they run out: the best point so far, termination "
                                      "time_limit; none: no limit)", check=positive)
    sweeps: int = option(2, "coordinate sweeps over each round's aggregator, per start",
                         check=at_least(1), group="search")
    starts: int = option(2, "sweep starts: the best distinct seeds; also adds starts - 1 random "
                         "aggregator sequences to the seeds (drawn before the search, so at "
                         f"most {MAX_STARTS:,})", check=in_interval(1, MAX_STARTS),
                         group="search")
    seed: int = option(0, "seed of the random aggregator sequences (starts > 1)",
                       check=at_least(0), group="search")
    seed_decentralized: bool = option(True, "seed the search with the binaries of the "
                                      "decentralized and decentralized-polish methods",
                                      flagged=False, group="search")
    seed_points: dict = option({}, "the points decentralized and decentralized-polish already "
                               "found on this instance (method -> solution file): with "
                               "seed_decentralized, their binaries and warm starts are read "
                               "from these files instead of re-running the method (the same "
                               "seeds: the same answer)", check=_seed_points, cli=False,
                               group="search")
    screen: float = option(0.02, "an aggregator move is repaired and polished when Ipopt puts it "
                           "within this fraction above the current objective", check=at_least(0),
                           flagged=False, group="search")
    workers: int | None = option(None, "processes for the independent Ipopt solves (seeds, "
                                 "aggregator moves); the answer is the same for any number "
                                 "(none: every core of this machine)",
                                 check=in_interval(1, WORKERS_MAX),
                                 flagged=False, group="solver")


@dataclass(frozen=True)
class FixedOptions(IpoptOptions):
    aggregator: int = option(0, "DC index s of the aggregator of every round",
                             check=at_least(0), group="problem")


@dataclass(frozen=True)
class GreedyOptions(IpoptOptions):
    """greedy-data and greedy-rate: the rule picks the aggregator; nothing else to choose."""


@dataclass(frozen=True)
class NoOffloadOptions(IpoptOptions):
    """no-offload: every rho_nb fixed at 0, aggregator by the greedy-rate rule."""


@dataclass(frozen=True)
class ScipOptions(MethodOptions):
    time_limit: float | None = option(60.0, "seconds of wall time for SCIP (limits/time; "
                                      "none: no limit)",
                                      check=in_interval(0.0, SCIP_TIME_MAX, lo_open=True))
    gap: float = option(1e-6, "relative gap at which SCIP stops (limits/gap)", check=at_least(0))
    threads: int = option(1, "SCIP threads (parallel/maxnthreads)",
                          check=in_interval(1, SCIP_THREADS_MAX))
    seed: int = option(0, "SCIP's random seed shift (randomization/randomseedshift)",
                       check=in_interval(0, SCIP_SEED_MAX))
    warm: bool = option(True, "start SCIP from the reference orchestration")
    incumbent: float | None = option(None, "objective U of a known feasible point (under "
                                     "the method's weights), a cutoff: "
                                     "SCIP searches only J <= U and the bound reported is "
                                     "min(U, SCIP's bound), valid for P (none: no cutoff)",
                                     check=positive, flagged=False)
    scip_options: dict = option({}, "extra SCIP parameters (name -> value), each checked by "
                                "SCIP when the options are built", check=_scip_entries,
                                cli=False)


#: the most levels of m_min that decomposed-bound takes (each costs T*S subproblems)
M_LEVELS_MAX = 20


@dataclass(frozen=True)
class BoundOptions(MethodOptions):
    """decomposed-bound: a proven lower bound on P (solvers/bound.py)."""
    time_limit: float | None = option(600.0, "seconds of wall time for the whole method: "
                                      "decentralized's incumbent (at most 0.3 of it) and the SCIP "
                                      "subproblems (a number is required)",
                                      check=in_interval(0.0, SCIP_TIME_MAX, lo_open=True))
    incumbent: float | None = option(None, "objective of a known feasible point under the "
                                     "method's weights, which caps the delays (none: "
                                     "decentralized's answer, scored under those weights, is "
                                     "found first and used)", check=positive, flagged=False)
    m_levels: int = option(0, "levels of the partition of m_min above m_floor: each puts back "
                           "part of the coupling through m_min for up to T*S more subproblems "
                           "in the same time, which the first level then lacks (0: the single "
                           "cell [m_floor, 1]; use it only with time to spare: where the first "
                           "level's subproblems cannot close, the bound falls)",
                           check=in_interval(0, M_LEVELS_MAX), flagged=False, group="search")
    workers: int | None = option(None, "SCIP subproblems solved at a time, each in a process "
                                 "of its own (none: every core of this machine)",
                                 check=in_interval(1, WORKERS_MAX), flagged=False,
                                 group="solver")


_PRESET = "the preset's"

#: The meaning and check of each `PDConstants` field (solvers/primal_dual.py), keyed by field
#: name: the one table that documents the overrides (tests check it covers exactly the fields).
#: `DecentralizedOptions` gets one override per field, typed as the field, None by default.
PD_CONSTANT_DOCS: dict[str, tuple[str, Check | None, tuple[str, ...] | None]] = {
    "max_outer": ("K: outer SCA iterations per phase (Alg. 1)", at_least(1), None),
    "lambda1": ("prox weight of the surrogate objective", positive, None),
    "L_C": ("initial prox weight of each coupling row", positive, None),
    "zeta": ("outer step (eqn:NOVA param update)", in_interval(0.0, 1.0, lo_open=True), None),
    "rel": ("inner step factor", positive, None),
    "restart": ("FISTA restart period", at_least(1), None),
    "inner_iters": ("inner iterations per surrogate (Alg. 2)", at_least(1), None),
    "inner_tol": ("KKT residual at which the inner loop stops", positive, None),
    "outer_tol": ("step (scaled inf-norm) at which Alg. 1 stops", positive, None),
    "viol_tol": ("largest scaled violation accepted at the stop", positive, None),
    "stat_tol": ("curvature-weighted step max_i q_i |du_i| at which Alg. 1 also stops",
                 positive, None),
    "L_max": ("cap of the per-row prox weights L_k", positive, None),
    "force_after": ("outer iterations before the binary forcing acts", at_least(0), None),
    "rho0": ("initial weight of the forcing penalty", positive, None),
    "rho_growth": ("growth of the forcing penalty per outer iteration", at_least(1), None),
    "rho_max": ("cap of the forcing penalty", positive, None),
    "dual_cap": ("upper bound on every multiplier", positive, None),
    "curvature": ("add the Lagrangian's Hessian diagonal to the prox", None, None),
    "tol_ratio": ("inner tolerance relative to the last outer step", positive, None),
    "inner": ("inner method", None, ("pdhg", "fista")),
    "restore": ("after each outer step, raise the epigraph variables of the max terms until "
                "their rows hold", None, None),
    "prox_min": ("floor of the per-variable factor on lambda1 that shrinks while a variable "
                 "keeps moving one way (1: off)", in_interval(0.0, 1.0, lo_open=True), None),
    "binary_patience": ("outer iterations with every indicator binary (and the rows held) after "
                        "which the relaxed phase hands over to the finishing phase (0: only on "
                        "convergence)", at_least(0), None),
    "live_only": ("finishing phase: the surrogates keep only the Jacobian entries that can be "
                  "nonzero with the indicators fixed", None, None),
    "descent": ("finishing phase: reject a step that raises the objective (the outer step "
                "zeta is halved)", None, None),
    "stall_tol": ("finishing phase: stop ('stalled') when the objective fell by at most this "
                  "(relative) over the last stall_window outer iterations, accepted or rejected "
                  "(0: off)", at_least(0), None),
    "stall_window": ("outer iterations of the stall test", at_least(1), None),
    "trial_cutoff": ("search: a trial's finishing phase stops ('behind') when the objective is "
                     "still above the incumbent's by more than this many times its fall over "
                     "the last two outer iterations (0: off)", at_least(0), None),
    "move_passes": ("passes of node-local association moves between rounding and the finishing "
                    "phase (0: off)", at_least(0), None),
    "agg_passes": ("passes of aggregator moves over (round, DC) after the finishing phase, "
                   "each accepted only when the finished objective falls (0: off)",
                   at_least(0), None),
    "agg_screen": ("the most aggregator trials a visit finishes: with more other DCs, each "
                   "trial is first estimated (aggregator set, epigraphs tightened, no finishing "
                   "phase) and only this many best estimates are finished", at_least(1), None),
    "move_screen": ("the most exact trials per UE or BS group in a refinement round's exact "
                    "and group moves: with more, each trial point is first estimated (epigraphs "
                    "tightened, the linearised objective) and only this many best estimates are "
                    "evaluated exactly (0: every one)", at_least(0), None),
    "refine_rounds": ("rounds of association moves at each start's finished point (before "
                      "its aggregator moves, and again after an aggregator moved), each "
                      "followed by a finishing phase and kept only when the finished "
                      "objective falls (0: off)", at_least(0), None),
    "candidates": ("starts finished and compared by the network's minimum objective: 1 the "
                   "relaxed rounding, 2 also the rounding of the start w^0",
                   in_interval(1, 2), None),
    "search_budget": ("network passes the search after the first finished point may spend, "
                      "as a multiple of the relaxed phase's (outer plus inner iterations); "
                      "when they run out the search stops ('search budget') with the best "
                      "point so far", at_least(0), None),
}
#: PDConstants fields that keep a flag of their own; the others are set with --set/--options
PD_FLAGGED = ("max_outer",)
#: The phase each PDConstants field acts in (`GROUPS`); the others are the relaxed phase's and
#: its inner solver's (which every phase runs).
PD_CONSTANT_GROUPS = {"live_only": "finishing", "descent": "finishing", "stall_tol": "finishing",
                      "stall_window": "finishing", "trial_cutoff": "search",
                      "candidates": "rounding",
                      "move_passes": "rounding", "agg_passes": "search", "agg_screen": "search",
                      "move_screen": "search", "refine_rounds": "search"}


@dataclass(frozen=True)
class _DecentralizedBase(MethodOptions):
    """The decentralised methods' own options; `DecentralizedOptions` adds the overrides of
    the preset's PDConstants."""

    weights: dict | None = option(None, "not taken: the decentralised methods optimise the "
                                  "instance's weights (set xi1, xi2, xi3 in the instance)",
                                  check=_no_weights, cli=False, group="problem")
    consensus_rounds: int = option(0, "J: exchange rounds per message collective (0: as many "
                                   "as the relay depth, exact aggregation; ignored by "
                                   "centralized-pd)", check=at_least(0), group="messaging")
    constants: str = option("tuned", "algorithm constants: the tuned defaults or the paper's "
                            "outer step (docs/decentralized.md)", choices=("tuned", "paper"),
                            group="relaxed phase")
    init: str = option("relaxed", "initial point: indicators at the centre of their simplices, "
                       "or the reference orchestration", choices=("relaxed", "reference"),
                       group="relaxed phase")
    seed: int = option(0, "recorded only: the method makes no random choice", check=at_least(0),
                       group="recording")
    trace_path: str | None = option(None, "CSV trace, one row per outer iteration",
                                    flag="--trace", metavar="FILE", group="recording")
    backend: str = option("local", "message passing: every node in this process, or the nodes "
                          "spread over the processes of `mpiexec -n R` (decentralized only; "
                          "process 0 writes the solution)", choices=("local", "mpi"),
                          group="messaging")
    ipopt_options: dict = option({}, "extra Ipopt options of decentralized-polish's polish, "
                                 "each checked by Ipopt when the options are built",
                                 check=_ipopt_entries, cli=False)

    def constant_overrides(self) -> dict[str, Any]:
        """{"preset": constants, field: value} for `primal_dual.resolve_constants`."""
        out: dict[str, Any] = {"preset": self.constants}
        out.update({k: getattr(self, k) for k in pd_constant_fields()
                    if getattr(self, k) is not None})
        return out


def pd_constant_fields() -> tuple[str, ...]:
    """The field names of `primal_dual.PDConstants`, in its order (imports the solver module,
    which loads Pyomo: only on first use)."""
    from .primal_dual import PDConstants
    return tuple(f.name for f in dataclasses.fields(PDConstants))


def _decentralized_options() -> type:
    """`DecentralizedOptions`: `_DecentralizedBase` plus one override per PDConstants field
    (typed as the field, or None: the preset's value), documented by `PD_CONSTANT_DOCS`."""
    from .primal_dual import PDConstants
    hints = typing.get_type_hints(PDConstants)
    extra = []
    for f in dataclasses.fields(PDConstants):
        doc, check, choices = PD_CONSTANT_DOCS[f.name]   # KeyError: a field without a doc
        extra.append((f.name, hints[f.name] | None,
                      option(None, doc, check=check, choices=choices, default_doc=_PRESET,
                             flagged=f.name in PD_FLAGGED,
                             group=PD_CONSTANT_GROUPS.get(f.name, "relaxed phase"))))
    cls = dataclasses.make_dataclass(
        "DecentralizedOptions", extra, bases=(_DecentralizedBase,), frozen=True,
        namespace={"__doc__": "decentralized, decentralized-polish and centralized-pd (paper "
                              "§V). The algorithm constants come from the preset `constants`; "
                              "each PDConstants field set here (not None) overrides the "
                              "preset's value."})
    cls.__module__ = __name__
    return cls


def __getattr__(name: str) -> Any:
    """`DecentralizedOptions` and `PD_CONSTANT_FIELDS`, derived from `primal_dual.PDConstants`
    on first use (so that importing this module loads no solver and no Pyomo)."""
    if name == "DecentralizedOptions":
        globals()[name] = _decentralized_options()
        return globals()[name]
    if name == "PD_CONSTANT_FIELDS":
        globals()[name] = pd_constant_fields()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------- command line
def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def cli_fields(cls: type[MethodOptions]) -> list[dataclasses.Field]:
    """The fields with a flag of their own (`add_option_flags`)."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)
            and f.metadata.get("flagged", True) and not f.metadata.get("display")]


def settable_fields(cls: type[MethodOptions]) -> list[dataclasses.Field]:
    """The algorithm options that `--set KEY=VALUE` can set: every command-line field but the
    display switches (the flagged ones too, under their field name)."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)
            and not f.metadata.get("display")]


def file_fields(cls: type[MethodOptions]) -> list[dataclasses.Field]:
    """The options an `--options FILE.toml` can set: every field but the display switches
    (the mappings, e.g. ipopt_options, as TOML tables)."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("display")]


def _parse_optional(conv: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text.strip().lower() == "none" else conv(text)
    parse.__name__ = conv.__name__  # argparse names the type in its error message
    return parse


def _short(doc: str) -> str:
    """The first clause of an option's documentation (the --help line; the options reference
    and --list-options give it whole)."""
    for stop in (" (", "; ", ": "):
        k = doc.find(stop)
        if 0 < k < len(doc) and not (stop == ": " and k < 4):
            doc = doc[:k]
    return doc


def _methods_label(meths: list[str], classes: Mapping[str, type[MethodOptions]]) -> str:
    """`meths` in few words: "all methods", or the Ipopt and decentralised groups by name."""
    if len(meths) == len(classes):
        return "all methods"
    rest, parts = set(meths), []
    for word, group in (("Ipopt methods", IpoptOptions), ("decentralised", _DecentralizedBase)):
        members = {m for m, c in classes.items() if issubclass(c, group)}
        if members and members <= rest:
            parts.append(word)
            rest -= members
    return ", ".join(parts + sorted(rest))


def add_option_flags(parser: argparse.ArgumentParser,
                     classes: Mapping[str, type[MethodOptions]]) -> None:
    """Add one flag per flagged field (`cli_fields`) of the options classes of `classes`
    (method name -> options class). A field shared by several methods becomes one flag; its
    help names the methods. Flags default to absent (argparse.SUPPRESS): a method's own
    default applies unless the flag is given."""
    by_name: dict[str, list[tuple[str, dataclasses.Field, Any]]] = {}
    for meth, cls in classes.items():
        hints = typing.get_type_hints(cls)
        for f in cli_fields(cls):
            by_name.setdefault(f.name, []).append((meth, f, hints[f.name]))
    for name, uses in by_name.items():
        _meth0, f0, hint0 = uses[0]
        for meth, f, hint in uses[1:]:
            if hint != hint0 or _flag(f) != _flag(f0):  # a declaration bug, not user input
                raise TypeError(f"option {name!r} of {meth!r} differs in type or flag from "
                                f"{_meth0!r}")
        base, optional = split_optional(hint0)
        same = len({u[1].metadata["doc"] for u in uses}) == 1
        where = _methods_label([u[0] for u in uses], classes)
        help_ = f"{_short(f0.metadata['doc'])} [{where}]" if same else f"[{where}]"
        kw: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS,
                              "help": help_.replace("%", "%%")}
        if base is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            conv = {int: int, float: float, str: str}[base]
            kw["type"] = _parse_optional(conv) if optional else conv
            if f0.metadata.get("choices"):
                kw["choices"] = f0.metadata["choices"]
            kw["metavar"] = f0.metadata.get("metavar") or (
                "{" + ",".join(f0.metadata["choices"]) + "}" if f0.metadata.get("choices")
                else {int: "N", float: "X", str: "TEXT"}[base])
        parser.add_argument(_flag(f0), **kw)


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """`--set KEY=VALUE` (repeatable) and `--options FILE.toml`: any algorithm option of the
    method by its field name (`--list-options` lists them)."""
    parser.add_argument("--set", dest="set_items", action="append", default=[],
                        metavar="KEY=VALUE", help="set an option by name (repeatable)")
    parser.add_argument("--options", dest="options_file", default=None, metavar="FILE",
                        help="TOML file of KEY = VALUE options")


def _resolve_key(cls: type[MethodOptions], key: str, fields: list[dataclasses.Field],
                 where: str) -> str:
    """The field name `key` names (dashes or underscores, any case); UnknownOptionError
    naming the key and listing the valid ones."""
    names = [f.name for f in fields]
    norm = key.strip().replace("-", "_")
    if norm in names:
        return norm
    match = [n for n in names if n.lower() == norm.lower()]
    if len(match) == 1:
        return match[0]
    raise UnknownOptionError(f"unknown option {key!r} ({where}); {cls.__name__} takes: "
                             f"{', '.join(names)}")


def parse_text(name: str, text: str, hint: Any) -> Any:
    """The value of option `name` written as `text` (a --set value): true/false for booleans,
    'none' for an option that may be None; OptionError naming the option and the text."""
    base, optional = split_optional(hint)
    t = text.strip()
    if optional and t.lower() == "none":
        return None
    base = typing.get_origin(base) or base
    try:
        if base is bool:
            b = {"true": True, "yes": True, "on": True, "1": True,
                 "false": False, "no": False, "off": False, "0": False}.get(t.lower())
            if b is None:
                raise ValueError
            return b
        if base is int:
            return int(t)
        if base is float:
            return float(t)
        if base is str:
            return text
    except ValueError:
        pass
    else:
        raise OptionError(f"option {name!r} cannot be set with --set (a mapping: use "
                          f"--options FILE.toml)")
    want = {bool: "true or false", int: "an integer", float: "a number"}[base]
    raise OptionError(f"option {name!r} must be {want}, got {text!r}")


class SetItem(str):
    """A `--set KEY=VALUE` item that another flag stands for (a deprecated flag such as
    `--lambda1`): `flag` is the flag, which messages about the item name."""

    flag: str = "--set"

    def __new__(cls, text: str, flag: str) -> "SetItem":
        item = super().__new__(cls, text)
        item.flag = flag
        return item


def parse_set_items(cls: type[MethodOptions], items: Iterable[str]) -> dict[str, Any]:
    """{field: value} of `--set KEY=VALUE` items (the later of two for one key wins). A key
    that only an options file can set (a mapping such as ipopt_options) is refused as such."""
    hints = typing.get_type_hints(cls)
    fields = settable_fields(cls)
    file_only = [f for f in file_fields(cls) if f not in fields]
    out: dict[str, Any] = {}
    for item in items:
        where = getattr(item, "flag", "--set")
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise OptionError(f"option '--set' value {item!r} is not KEY=VALUE")
        try:
            name = _resolve_key(cls, key, fields, where)
        except UnknownOptionError:
            if not any(f.name == key.strip().replace("-", "_") for f in file_only):
                raise
            raise OptionError(f"option {key.strip()!r} can be set only in an options file "
                              f"(--options FILE.toml, as a TOML table), not with {where}") \
                from None
        out[name] = parse_text(name, text, hints[name])
    return out


def load_options_file(cls: type[MethodOptions], path: str) -> dict[str, Any]:
    """{field: value} of a TOML file of `KEY = VALUE` lines (keys as for --set; values TOML
    typed; a mapping option as a table), read by `cefl_opt.io.read_input_text` (a regular
    file of at most MAX_OPTIONS_BYTES, UTF-8). A malformed file, an unknown key or one option
    given twice (`time_limit` and `time-limit`) is an OptionError naming it."""
    import tomllib

    from cefl_opt import io
    text = io.read_input_text(path, what="options", option="--options",
                              limit=io.MAX_OPTIONS_BYTES)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise OptionError(f"option '--options' file '{path}' is not valid TOML: {e}") from None
    fields = file_fields(cls)
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for k, v in data.items():
        name = _resolve_key(cls, k, fields, f"in '{path}'")
        if name in given:     # `time_limit` and `time-limit`: one option given twice
            raise OptionError(f"option '--options' file '{path}' sets option {name!r} twice, "
                              f"as {given[name]!r} and {k!r}")
        out[name], given[name] = v, k
    return out


def options_from_args(method: str, cls: type[MethodOptions], args: argparse.Namespace,
                      classes: Iterable[type[MethodOptions]]) -> MethodOptions:
    """The options object of `method` from the command line: `--options FILE`, then each
    `--set KEY=VALUE`, then the flags (a later source overrides an earlier one), then the
    display switch `--progress/--no-progress`. A flag that another method declares but
    `method` does not is an error (it would be ignored)."""
    flags: dict[str, str] = {}
    for c in classes:
        flags.update({f.name: _flag(f) for f in cli_fields(c)})
    given = {k: getattr(args, k) for k in flags if hasattr(args, k)}
    mine = {f.name for f in cli_fields(cls)}
    stray = sorted(set(given) - mine)
    if stray:
        raise UnknownOptionError(f"option {stray[0]!r} ({flags[stray[0]]}) does not apply to "
                                 f"method {method!r}; its options: "
                                 f"{', '.join(sorted(mine)) or 'none'}")
    values: dict[str, Any] = {}
    if getattr(args, "options_file", None):
        values.update(load_options_file(cls, args.options_file))
    values.update(parse_set_items(cls, getattr(args, "set_items", None) or ()))
    values.update(given)
    if getattr(args, "progress", None) is not None and "progress" in cls.names():
        values["progress"] = bool(args.progress)
    return build_options(cls, values)


def default_text(f: dataclasses.Field) -> str:
    """The default value of option `f` as a user sets it: the value itself, and for an override
    of the decentralised constants (None: the preset's) the `tuned` preset's value, with the
    `paper` preset's where it differs."""
    if f.metadata.get("default_doc") == _PRESET:
        from .primal_dual import PRESETS
        tuned, paper = getattr(PRESETS["tuned"], f.name), getattr(PRESETS["paper"], f.name)
        return repr(tuned) + ("" if paper == tuned else f" (constants=paper: {paper!r})")
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return repr(f.default_factory())  # type: ignore[misc]
    return repr(f.default)


def option_groups(cls: type[MethodOptions]) -> list[tuple[str, list[dataclasses.Field]]]:
    """(group, its fields) for each non-empty group of `GROUPS`, in that order, over the
    fields an options file can set (the display switches excluded)."""
    fields = file_fields(cls)
    return [(g, [f for f in fields if f.metadata.get("group", "solver") == g]) for g in GROUPS
            if any(f.metadata.get("group", "solver") == g for f in fields)]


def describe_options(method: str, cls: type[MethodOptions], width: int | None = None) -> str:
    """`cefl-opt solve --method M --list-options`: the algorithm options of `method` by group,
    each with its type, default value, how to set it, meaning and check, wrapped to `width`
    columns (default: the terminal's)."""
    import shutil
    import textwrap
    width = max(50, width or shutil.get_terminal_size().columns)
    hints = typing.get_type_hints(cls)
    flagged = {f.name for f in cli_fields(cls)}
    wrap = textwrap.TextWrapper(width=width, break_on_hyphens=False, break_long_words=False)
    lines = wrap.wrap(f"options of method {method!r} ({cls.__name__}): set each with --set "
                      f"KEY=VALUE, in --options FILE.toml, or with its flag where it has one")
    for group, fields in option_groups(cls):
        lines += ["", group]
        for f in fields:
            base, optional = split_optional(hints[f.name])
            typ = getattr(base, "__name__", str(base)) + (" | None" if optional else "")
            how = (_flag(f) if f.name in flagged else "--set" if f.metadata.get("cli", True)
                   else "--options file only")
            wrap.initial_indent, wrap.subsequent_indent = "  ", "      "
            lines += wrap.wrap(f"{f.name} ({typ}, default {default_text(f)}; {how})")
            rule = ("one of " + ", ".join(f.metadata["choices"]) if f.metadata.get("choices")
                    else _check_text(f.metadata.get("check")))
            wrap.initial_indent = "      "
            rule = " [" + rule.replace(" ", "\u00a0") + "]" if rule else ""   # one word
            lines += [ln.replace("\u00a0", " ") for ln in wrap.wrap(f.metadata["doc"] + rule)]
    return "\n".join(lines)


def _check_text(check: Check | None) -> str:
    b = getattr(check, "bounds", None)
    if b is None:
        return ""
    lo, hi, lo_open, hi_open = b
    if hi is None:
        return f"{'>' if lo_open else '>='} {_num(lo)}"
    return f"in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
