"""``cefl-opt solve``: run a named method on an instance and write the solution format.

Order of work: every option is checked (ranges, an output that is one of the inputs, writable
outputs), then the instance is loaded and solved, then the solution is written atomically and,
last, the ``--trace`` CSV is moved into place (it is written to a temporary file in the target
folder during the solve and removed when no solution is written).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..instance import FORMAT_TAG, Instance
from ..io import check_distinct, check_writable, write_atomic
from . import (COUNT, EXIT_INFEASIBLE_INSTANCE, EXIT_NO_SOLUTION, EXIT_OK, POSITIVE, SEED,
               number)

METHOD_NAMES = ("ipopt-enum", "scip", "fixed", "greedy-data", "greedy-rate", "no-offload",
                "decentralized", "centralized-pd")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("solve", help="solve Problem P on an instance",
                       description="Solve P with a named method. Exit 0: a feasible solution was "
                                   "written; 3: the instance is infeasible; 4: no solution "
                                   "(time limit or solver failure); 2: bad input.")
    p.add_argument("net", help=f"instance JSON ({FORMAT_TAG})")
    p.add_argument("--method", required=True, choices=METHOD_NAMES)
    p.add_argument("--out", required=True, help="solution JSON to write (cefl-solution/1)")
    p.add_argument("--bound", choices=("corollary", "general"), default="corollary")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--trace", default=None,
                   help="CSV trace per outer iteration (decentralized, centralized-pd); written "
                        "after the solution, not at all when no solution is written")
    add_method_options(p)
    p.set_defaults(func=run_solve)


# ====================================================================== method options
# THE ONE PLACE where the per-method flags are declared and turned into `solve()` options.
# When `cefl_opt.solvers.options` (typed options per method) lands, these two functions are
# replaced by the flags generated from its dataclasses; nothing else in this module changes.
def add_method_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--time-limit", type=POSITIVE, default=None, help="seconds (SCIP, Ipopt)")
    p.add_argument("--aggregator", type=number(lo=0, integer=True), default=0,
                   help="DC index for --method fixed")
    p.add_argument("--gap", type=POSITIVE, default=1e-6, help="relative gap for SCIP")
    p.add_argument("--threads", type=COUNT, default=1, help="SCIP threads")
    p.add_argument("--starts", type=COUNT, default=1, help="ipopt-enum: sweep starts")
    p.add_argument("--consensus-rounds", type=COUNT, default=None, help="J for decentralized")
    p.add_argument("--max-outer", type=COUNT, default=None, help="outer SCA iterations")
    p.add_argument("--constants", choices=("tuned", "paper"), default="tuned",
                   help="algorithm constants of decentralized/centralized-pd: the tuned defaults "
                        "or the paper's table (SPEC §5)")


def method_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword options of `solvers.base.solve` for `args.method`."""
    opts: dict[str, Any] = {"bound": args.bound, "seed": args.seed}
    if args.time_limit is not None:
        opts["time_limit"] = args.time_limit
    if args.method == "fixed":
        opts["aggregator"] = args.aggregator
    if args.method == "scip":
        opts.update(gap=args.gap, threads=args.threads)
    if args.method == "ipopt-enum":
        opts["starts"] = args.starts
    if args.method in ("decentralized", "centralized-pd"):
        opts["constants"] = args.constants
        for k in ("consensus_rounds", "max_outer"):
            if getattr(args, k) is not None:
                opts[k] = getattr(args, k)
    return opts
# ====================================================================== end of method options


def run_solve(args: argparse.Namespace) -> int:
    from .. import system
    from ..solvers.base import SolutionStatus, TerminationCondition, solve

    check_distinct([("--out", args.out), ("--trace", args.trace)], [args.net])
    for option, path in (("--out", args.out), ("--trace", args.trace)):
        if path is not None:
            check_writable(path, option)
    inst = Instance.load(args.net)
    if args.method == "fixed" and args.aggregator >= inst.S:
        raise ValueError(f"option '--aggregator' value {args.aggregator} is not a DC index "
                         f"0..{inst.S - 1}")
    opts = method_options(args)
    tmp_trace = _temp_file() if args.trace else None
    try:
        if tmp_trace is not None and args.method in ("decentralized", "centralized-pd"):
            opts["trace_path"] = tmp_trace
        res = solve(inst, args.method, **opts)
        print(res.summary())
        if res.termination_condition == TerminationCondition.provenInfeasible:
            for why in res.info.get("reasons", []):
                print(f"  infeasible: {why}", file=sys.stderr)
            print("no solution written: the instance is infeasible", file=sys.stderr)
            return EXIT_INFEASIBLE_INSTANCE
        if res.solution is None or res.solution_status in (SolutionStatus.noSolution,
                                                           SolutionStatus.infeasible):
            print(f"no solution written: {res.status}", file=sys.stderr)
            return EXIT_NO_SOLUTION
        ev = system.evaluate(inst, res.solution, bound=args.bound)
        res.solution.objective, res.solution.terms = ev.objective, ev.terms
        res.solution.save(args.out)
        print(f"wrote {args.out}: objective {ev.objective:.8g} (ml_bound "
              f"{ev.terms['ml_bound']:.6g}, delay {ev.terms['delay']:.6g} s, energy "
              f"{ev.terms['energy']:.6g} J)")
        if tmp_trace is not None and os.path.getsize(tmp_trace):
            write_atomic(args.trace, Path(tmp_trace).read_bytes())
            print(f"wrote {args.trace}")
        return EXIT_OK
    finally:
        if tmp_trace is not None and os.path.exists(tmp_trace):
            os.unlink(tmp_trace)


def _temp_file() -> str:
    """A new empty temporary file (the solver's trace goes there until the solution is saved)."""
    fd, tmp = tempfile.mkstemp(prefix="cefl-opt-trace.", suffix=".csv")
    os.close(fd)
    return tmp
