"""Typed options of the solve methods, in the manner of `pyomo.contrib.solver`'s config objects
(`SolverConfig`: one declared entry per option with a domain, a default and a description).

Every registered method declares one frozen dataclass, a subclass of `MethodOptions`; each field
is declared with `option(default, doc, ...)`: its type (the annotation), default, documentation
and validation (finite numbers, ranges, choices). Building the object validates it, so a method
only ever receives checked values; an error names the option (not a CLI flag) and the value:

    >>> ScipOptions(gap=float("nan"))
    OptionError: option 'gap' must be a finite number, got nan

`build_options(cls, values)` rejects unknown keys (`UnknownOptionError`). `add_option_flags`
generates argparse flags from the fields (`--time-limit` for `time_limit`; booleans as
`--x/--no-x`) and `options_from_args` builds the options object of one method from the parsed
arguments, so `cefl-opt solve`'s flags come from these declarations.

This module is light (numpy only): it can be imported without Pyomo or any solver.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from cefl_opt.system import BOUND_FORMS

Check = Callable[[Any], "str | None"]  # returns a reason ("must be > 0") or None


class OptionError(ValueError):
    """An option value is wrong: the message names the option and the value."""


class UnknownOptionError(OptionError):
    """An option name that the method does not declare."""


# ---------------------------------------------------------------------- field declarations
def option(default: Any, doc: str, *, check: Check | None = None,
           choices: tuple[str, ...] | None = None, cli: bool = True, flag: str | None = None,
           metavar: str | None = None, default_doc: str | None = None) -> Any:
    """Declare one option: default, documentation, validation (`check` returns a reason or
    None; `choices` for strings) and how it appears on the command line (`cli=False`: Python
    API only; `flag` overrides the generated `--name-with-dashes`)."""
    meta = {"doc": doc, "check": check, "choices": choices, "cli": cli, "flag": flag,
            "metavar": metavar, "default_doc": default_doc}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


def _bounded(chk: Check, lo: float, hi: float | None, lo_open: bool, hi_open: bool) -> Check:
    """`chk` with its range as the attribute `bounds` = (lo, hi, lo_open, hi_open), hi None for
    no upper end (the tests walk every option's ends from it)."""
    chk.bounds = (lo, hi, lo_open, hi_open)
    return chk


def at_least(lo: float) -> Check:
    return _bounded(lambda v: None if v >= lo else f"must be >= {lo:g}", lo, None, False, False)


def positive(v: float) -> str | None:
    return None if v > 0 else "must be > 0"


positive.bounds = (0.0, None, True, False)


def in_interval(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> Check:
    def chk(v: float) -> str | None:
        ok = (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
        return None if ok else (f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}"
                                f"{')' if hi_open else ']'}")
    return _bounded(chk, lo, hi, lo_open, hi_open)


def _weights(v: Mapping[str, Any]) -> str | None:
    bad = sorted(set(v) - {"xi1", "xi2", "xi3"})
    if bad:
        return f"has unknown key {bad[0]!r} (expected xi1, xi2, xi3)"
    for k, x in v.items():
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or x < 0:
            return f"entry {k!r} must be a finite number >= 0"
    return None


# ---------------------------------------------------------------------- type handling
def _split_optional(hint: Any) -> tuple[Any, bool]:
    """(base type, None allowed) of an annotation such as `float | None`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"option type {hint} is not supported")
        return args[0], True
    return hint, False


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """`value` as the option's type, or OptionError naming the option and the value."""
    base, optional = _split_optional(hint)
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
                        "general (Theorem 1, eq:GenConvBound)", choices=BOUND_FORMS)
    weights: dict | None = option(None, "overrides of the objective weights xi1, xi2, xi3 "
                                  "(the instance's by default)", check=_weights, cli=False)

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
    the binary decisions fixed (`centralized.FixedNLP`)."""

    time_limit: float | None = option(None, "seconds of CPU time per Ipopt solve (Ipopt's "
                                      "max_cpu_time; none: no limit)", check=positive)
    assoc_repair: bool = option(True, "repair the UE-BS associations by the objective of P "
                                "after the first Ipopt solve (cefl_opt.association)")
    ipopt_options: dict = option({}, "extra Ipopt options (name -> value)", cli=False)


@dataclass(frozen=True)
class IpoptEnumOptions(IpoptOptions):
    sweeps: int = option(1, "coordinate sweeps over the aggregator of each round",
                         check=at_least(1))
    starts: int = option(1, "sweep starts: the best candidates, plus starts - 1 random aggregator "
                         "sequences among the candidates", check=at_least(1))
    seed: int = option(0, "seed of the random aggregator sequences (starts > 1)", check=at_least(0))


@dataclass(frozen=True)
class FixedOptions(IpoptOptions):
    aggregator: int = option(0, "the DC index s used as aggregator in every round",
                             check=at_least(0))


@dataclass(frozen=True)
class GreedyOptions(IpoptOptions):
    """greedy-data and greedy-rate: the rule picks the aggregator; nothing else to choose."""


@dataclass(frozen=True)
class NoOffloadOptions(IpoptOptions):
    """no-offload: every rho_nb fixed at 0, aggregator by the greedy-rate rule."""


@dataclass(frozen=True)
class ScipOptions(MethodOptions):
    time_limit: float | None = option(60.0, "seconds of wall time for SCIP (none: no limit)",
                                      check=positive)
    gap: float = option(1e-6, "relative gap at which SCIP stops (limits/gap)", check=at_least(0))
    threads: int = option(1, "SCIP threads (parallel/maxnthreads)", check=at_least(1))
    seed: int = option(0, "SCIP's random seed shift", check=at_least(0))
    warm: bool = option(True, "give SCIP the reference orchestration as a start")
    scip_options: dict = option({}, "extra SCIP parameters (name -> value)", cli=False)


#: PDConstants fields (solvers/primal_dual.py) that `DecentralizedOptions` can override
PD_CONSTANT_FIELDS = ("lambda1", "L_C", "zeta", "rel", "restart", "inner_iters", "inner_tol",
                      "outer_tol", "viol_tol", "force_after", "rho0", "rho_growth", "rho_max",
                      "max_outer", "dual_cap", "curvature", "tol_ratio", "inner", "stat_tol",
                      "L_max", "restore", "prox_min", "binary_patience", "live_only",
                      "descent", "stall_tol", "stall_window", "move_passes")
_PRESET = "the preset's"


def _preset(default_doc: str = _PRESET, **kw: Any) -> dict[str, Any]:
    return {"default_doc": default_doc, **kw}


@dataclass(frozen=True)
class DecentralizedOptions(MethodOptions):
    """decentralized, decentralized-polish and centralized-pd (paper §V). The algorithm
    constants come from the preset `constants`; each PDConstants field set here (not None)
    overrides the preset's value."""

    consensus_rounds: int = option(0, "J: exchange rounds per message collective (0: as many "
                                   "as the relay depth, exact aggregation; ignored by "
                                   "centralized-pd)", check=at_least(0))
    constants: str = option("tuned", "algorithm constants: the tuned defaults or the paper's "
                            "outer step (SPEC §5)", choices=("tuned", "paper"))
    init: str = option("relaxed", "initial point: indicators at the centre of their simplices, "
                       "or the reference orchestration", choices=("relaxed", "reference"))
    seed: int = option(0, "recorded only: the method makes no random choice", check=at_least(0))
    trace_path: str | None = option(None, "CSV trace, one row per outer iteration",
                                    flag="--trace", metavar="FILE")
    progress: bool = option(False, "show a progress bar of the outer iterations")
    backend: str = option("local", "message passing: every node in this process, or the nodes "
                          "spread over the processes of `mpiexec -n R` (decentralized only; "
                          "process 0 writes the solution)", choices=("local", "mpi"))
    ipopt_options: dict = option({}, "extra Ipopt options of decentralized-polish's polish",
                                 cli=False)
    # ---- overrides of the preset's PDConstants (None: the preset's value)
    max_outer: int | None = option(None, "K: outer SCA iterations per phase (Alg. 1)",
                                   check=at_least(1), **_preset())
    lambda1: float | None = option(None, "prox weight of the surrogate objective",
                                   check=positive, **_preset())
    L_C: float | None = option(None, "initial prox weight of each coupling row",
                               check=positive, flag="--l-c", **_preset())
    zeta: float | None = option(None, "outer step (eqn:NOVA param update)",
                                check=in_interval(0.0, 1.0, lo_open=True), **_preset())
    rel: float | None = option(None, "inner step factor", check=positive, **_preset())
    restart: int | None = option(None, "FISTA restart period", check=at_least(1), **_preset())
    inner_iters: int | None = option(None, "inner iterations per surrogate (Alg. 2)",
                                     check=at_least(1), **_preset())
    inner_tol: float | None = option(None, "KKT residual at which the inner loop stops",
                                     check=positive, **_preset())
    outer_tol: float | None = option(None, "step (scaled inf-norm) at which Alg. 1 stops",
                                     check=positive, **_preset())
    viol_tol: float | None = option(None, "largest scaled violation accepted at the stop",
                                    check=positive, **_preset())
    stat_tol: float | None = option(None, "curvature-weighted step max_i q_i |du_i| at which "
                                    "Alg. 1 also stops", check=positive, **_preset())
    L_max: float | None = option(None, "cap of the per-row prox weights L_k", check=positive,
                                 **_preset())
    force_after: int | None = option(None, "outer iterations before the binary forcing acts",
                                     check=at_least(0), **_preset())
    rho0: float | None = option(None, "initial weight of the forcing penalty", check=positive,
                                **_preset())
    rho_growth: float | None = option(None, "growth of the forcing penalty per outer iteration",
                                      check=at_least(1), **_preset())
    rho_max: float | None = option(None, "cap of the forcing penalty", check=positive,
                                   **_preset())
    dual_cap: float | None = option(None, "upper bound on every multiplier", check=positive,
                                    **_preset())
    curvature: bool | None = option(None, "add the Lagrangian's Hessian diagonal to the prox",
                                    **_preset())
    tol_ratio: float | None = option(None, "inner tolerance relative to the last outer step",
                                     check=positive, **_preset())
    inner: str | None = option(None, "inner method", choices=("pdhg", "fista"), **_preset())
    restore: bool | None = option(None, "after each outer step, raise the epigraph variables "
                                  "of the max terms until their rows hold", **_preset())
    prox_min: float | None = option(None, "floor of the per-variable factor on lambda1 that "
                                    "shrinks while a variable keeps moving one way (1: off)",
                                    check=in_interval(0.0, 1.0, lo_open=True), **_preset())
    binary_patience: int | None = option(None, "outer iterations with every indicator binary "
                                         "(and the rows held) after which the relaxed phase "
                                         "hands over to the finishing phase (0: only on "
                                         "convergence)", check=at_least(0), **_preset())
    live_only: bool | None = option(None, "finishing phase: the surrogates keep only the Jacobian "
                                    "entries that can be nonzero with the indicators fixed",
                                    **_preset())
    descent: bool | None = option(None, "finishing phase: reject a step that raises the "
                                  "objective (the outer step zeta is halved)", **_preset())
    stall_tol: float | None = option(None, "finishing phase: stop ('stalled') when the objective "
                                     "fell by at most this (relative) over the last "
                                     "stall_window outer iterations, accepted or "
                                     "rejected (0: off)",
                                     check=at_least(0), **_preset())
    stall_window: int | None = option(None, "outer iterations of the stall test",
                                      check=at_least(1), **_preset())
    move_passes: int | None = option(None, "passes of node-local association moves between "
                                     "rounding and the finishing phase (0: off)",
                                     check=at_least(0), **_preset())

    def constant_overrides(self) -> dict[str, Any]:
        """{"preset": constants, field: value} for `primal_dual.resolve_constants`."""
        out: dict[str, Any] = {"preset": self.constants}
        out.update({k: getattr(self, k) for k in PD_CONSTANT_FIELDS
                    if getattr(self, k) is not None})
        return out


# ---------------------------------------------------------------------- argparse
def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def cli_fields(cls: type[MethodOptions]) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]


def _parse_optional(conv: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text.strip().lower() == "none" else conv(text)
    parse.__name__ = conv.__name__  # argparse names the type in its error message
    return parse


def add_option_flags(parser: argparse.ArgumentParser,
                     classes: Mapping[str, type[MethodOptions]]) -> None:
    """Add one flag per command-line field of the options classes of `classes` (method name ->
    options class). A field shared by several methods becomes one flag; its help lists the
    methods and each one's default. Flags default to absent (argparse.SUPPRESS): a method's
    own default applies unless the flag is given."""
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
        base, optional = _split_optional(hint0)
        parts: dict[str, list[str]] = {}  # "doc (default d)" -> methods
        for meth, f, _h in uses:
            d = f.metadata.get("default_doc") or (
                repr(f.default) if f.default is not dataclasses.MISSING else "{}")
            parts.setdefault(f"{f.metadata['doc']} (default {d})", []).append(meth)
        every = len(parts) == 1 and len(uses) == len(classes)
        help_ = "; ".join(("all methods" if every else ", ".join(ms)) + f": {text}"
                          for text, ms in parts.items())
        help_ = help_.replace("%", "%%")
        kw: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": help_}
        if base is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            conv = {int: int, float: float, str: str}[base]
            kw["type"] = _parse_optional(conv) if optional else conv
            if f0.metadata.get("choices"):
                kw["choices"] = f0.metadata["choices"]
            if f0.metadata.get("metavar"):
                kw["metavar"] = f0.metadata["metavar"]
        parser.add_argument(_flag(f0), **kw)


def options_from_args(method: str, cls: type[MethodOptions], args: argparse.Namespace,
                      classes: Iterable[type[MethodOptions]]) -> MethodOptions:
    """The options object of `method` from the flags given on the command line. A flag that
    another method declares but `method` does not is an error (it would be ignored)."""
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
    return build_options(cls, given)
