"""``cefl-opt solve``: run a named method on an instance and write the solution format.

Order of work: every option is checked (ranges, an output that is one of the inputs, writable
outputs), then the instance is loaded and solved, then the solution is written atomically and,
with it the ``--trace`` CSV, both or neither (the trace is written to a temporary file during
the solve and removed when no solution is written).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from ..instance import Instance
from ..io import check_distinct, check_writable, json_text, write_all_atomic, write_json_atomic
import numpy as np

from . import EXIT_INFEASIBLE_INSTANCE, EXIT_NO_SOLUTION, EXIT_OK, OptionError, fail


def register(sub: argparse._SubParsersAction) -> None:
    from ..solvers.base import add_method_flags, methods

    descs = methods()
    p = sub.add_parser("solve", help="solve Problem P on an instance",
                       usage="%(prog)s NET --method METHOD --out OUT [options]",
                       formatter_class=_Formatter,
                       description="Solve P with a named method. Exit 0: written (decomposed-"
                                   "bound: its report);\n2: bad input; 3: infeasible; 4: no "
                                   "solution (time limit, solver failure).\n\nmethods:\n"
                                   + "\n".join(f"  {k:21s}{_first_clause(v)}"
                                               for k, v in descs.items()),
                       epilog="A flag or --set key that the method does not take is an error.")
    p.add_argument("net", nargs="?", help="instance JSON (cefl-instance/2)")
    p.add_argument("--method", required=True, choices=sorted(descs), metavar="METHOD",
                   help="one of the methods above")
    p.add_argument("--out", help="solution JSON to write (cefl-solution/1)")
    p.add_argument("--list-options", action="store_true",
                   help="list the method's options and exit")
    # the method options: the common ones as flags, every one by name with --set or --options
    # (`cefl_opt.solvers.options`); `--trace` is written after the solution, or not at all
    add_method_flags(p.add_argument_group("method options"))
    _add_deprecated_constant_flags(p)
    p.set_defaults(func=run_solve)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Help with the flags in a column wide enough for most of them to fit one line."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)


def _first_clause(text: str) -> str:
    """A method's description up to its first comma, colon or semicolon (the --help line)."""
    for stop in (" (", ":", ";", ","):
        text = text.split(stop)[0]
    return text


def _add_deprecated_constant_flags(p: argparse.ArgumentParser) -> None:
    """The PDConstants flags of the last release (`--lambda1`, `--l-c`, `--L-max`, ...): each
    now `--set NAME=VALUE`, kept for one release with a warning."""
    import typing

    from ..solvers.options import (DecentralizedOptions, cli_fields, settable_fields,
                                   split_optional)
    from . import deprecated
    hints = typing.get_type_hints(DecentralizedOptions)
    old = {"L_C": "--l-c", "L_max": "--L-max"}
    flagged = {f.name for f in cli_fields(DecentralizedOptions)}
    for f in settable_fields(DecentralizedOptions):
        if f.name in flagged or f.metadata.get("default_doc") is None:
            continue                      # a flag of its own, or not a PDConstants override
        flag = old.get(f.name, "--" + f.name.replace("_", "-"))
        use = f"--set {f.name}=VALUE"
        if split_optional(hints[f.name])[0] is bool:
            for spelling, value in ((flag, "true"), ("--no-" + flag[2:], "false")):
                deprecated(p, spelling, command="solve", use=f"--set {f.name}={value}",
                           dest="set_items", nargs=0,
                           store=_appender(f"{f.name}={value}", spelling))
        else:
            deprecated(p, flag, command="solve", use=use, dest="set_items", metavar="VALUE",
                       store=_appender(f"{f.name}=" + "{}", flag))


def _appender(item: str, flag: str):
    """store(namespace, value) of the deprecated flag `flag`: one more --set item, which
    messages name by `flag`."""
    from ..solvers.options import SetItem

    def store(ns: argparse.Namespace, value) -> None:
        ns.set_items = [*(getattr(ns, "set_items", None) or []),
                        SetItem(item.format(value), flag)]
    return store


def run_solve(args: argparse.Namespace) -> int:
    from .. import system
    from ..solvers.base import SolutionStatus, TerminationCondition, solve

    from ..solvers.base import options_from_namespace

    if args.list_options:
        from ..solvers.base import method_spec
        from ..solvers.options import describe_options
        print(describe_options(args.method, method_spec(args.method).options_class()))
        return EXIT_OK
    missing = [n for n, v in (("net", args.net), ("--out", args.out)) if v is None]
    if missing:
        raise OptionError(f"the following arguments are required to solve: "
                          f"{', '.join(missing)} (see 'cefl-opt solve --help')")
    opts = options_from_namespace(args)
    trace = getattr(opts, "trace_path", None)
    check_distinct([("--out", args.out), ("--trace", trace)], [args.net])
    for option, path in (("--out", args.out), ("--trace", trace)):
        if path is not None:
            check_writable(path, option)
    inst = Instance.load(args.net)
    tmp_trace = _temp_file() if trace else None
    try:
        if tmp_trace is not None:
            opts = opts.replace(trace_path=tmp_trace)
        res = solve(inst, args.method, opts, isolate=True)
        if res.rank != 0:                  # an MPI process other than 0: it writes nothing
            return EXIT_OK
        ev = None
        if res.solution is not None:       # one number printed and written: the evaluation's
            with np.errstate(all="ignore"):
                ev = system.evaluate(inst, res.solution, bound=opts.bound, weights=opts.weights)
            res.objective = ev.objective
        print(res.summary())
        if res.termination_condition == TerminationCondition.provenInfeasible:
            reasons = res.reasons
            fail(f"the instance is infeasible, no solution written to '{args.out}'"
                  + (f": {reasons[0]}" if reasons else ""), EXIT_INFEASIBLE_INSTANCE)
            for why in reasons[1:]:
                print(f"  infeasible: {why}", file=sys.stderr)
            return EXIT_INFEASIBLE_INSTANCE
        if res.report is not None:         # a bound's proof (decomposed-bound), not a solution
            write_json_atomic(args.out, res.report)
            print(f"wrote {args.out}: bound {res.bound:.8g}")
            return EXIT_OK
        if res.solution is None or res.solution_status in (SolutionStatus.noSolution,
                                                           SolutionStatus.infeasible):
            why = res.message
            return fail(f"method '{args.method}' found no solution (status {res.status}"
                         + (f": {why}" if why else "") + f"); nothing written to "
                         f"'{args.out}'", EXIT_NO_SOLUTION)
        bad = [k for k, v in {"objective": ev.objective, **ev.terms}.items()
               if not np.isfinite(v)]
        if bad:
            return fail(f"method '{args.method}' returned a point whose {bad[0]} is not "
                         f"finite; nothing written to '{args.out}'", EXIT_NO_SOLUTION)
        res.solution.objective, res.solution.terms = ev.objective, ev.terms
        items = [(args.out, json_text(res.solution.to_dict(), args.out))]
        if tmp_trace is not None and os.path.getsize(tmp_trace):
            items.append((trace, Path(tmp_trace).read_bytes()))
        write_all_atomic(items)             # the solution and its trace: both or neither
        print(f"wrote {args.out}: objective {ev.objective:.8g} (ml_bound "
              f"{ev.terms['ml_bound']:.6g}, delay {ev.terms['delay']:.6g} s, energy "
              f"{ev.terms['energy']:.6g} J)")
        if len(items) > 1:
            print(f"wrote {trace}")
        return EXIT_OK
    finally:
        if tmp_trace is not None and os.path.exists(tmp_trace):
            os.unlink(tmp_trace)


def _temp_file() -> str:
    """A new empty temporary file (the solver's trace goes there until the solution is saved)."""
    fd, tmp = tempfile.mkstemp(prefix="cefl-opt-trace.", suffix=".csv")
    os.close(fd)
    return tmp
