"""`cefl-opt solve`: run a named method on an instance and write the solution format."""
from __future__ import annotations

import argparse
import sys

from cefl_opt import system
from cefl_opt.instance import Instance

from .base import (SolutionStatus, TerminationCondition, add_method_flags, methods,
                   options_from_namespace, solve)

# exit codes of `cefl-opt solve`
EXIT_OK, EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_NO_SOLUTION = 0, 2, 3, 4


def register(sub: argparse._SubParsersAction) -> None:
    descs = methods()
    p = sub.add_parser("solve", help="solve Problem P on an instance",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Solve P with a named method. Exit 0: a feasible solution was "
                                   "written; 3: the instance is infeasible; 4: no solution "
                                   "(time limit or solver failure); 2: bad input.\n\nmethods:\n"
                                   + "\n".join(f"  {k:15s} {v}" for k, v in descs.items())
                                   + "\n\nEach method option below lists the methods that "
                                     "take it; giving it to another method is an error.")
    p.add_argument("net", help="instance JSON (cefl-instance/1)")
    p.add_argument("--method", required=True, choices=sorted(descs))
    p.add_argument("--out", required=True, help="solution JSON to write (cefl-solution/1)")
    add_method_flags(p.add_argument_group("method options"))
    p.set_defaults(func=run_solve)


def run_solve(args: argparse.Namespace) -> int:
    opts = options_from_namespace(args)
    inst = Instance.load(args.net)
    res = solve(inst, args.method, opts)
    print(res.summary())
    if res.termination_condition == TerminationCondition.provenInfeasible:
        for why in res.info.get("reasons", []):
            print(f"  infeasible: {why}", file=sys.stderr)
        print("no solution written: the instance is infeasible", file=sys.stderr)
        return EXIT_INFEASIBLE
    if res.solution is None or res.solution_status in (SolutionStatus.noSolution,
                                                       SolutionStatus.infeasible):
        print(f"no solution written: {res.status}", file=sys.stderr)
        return EXIT_NO_SOLUTION
    ev = system.evaluate(inst, res.solution, bound=opts.bound)
    res.solution.objective, res.solution.terms = ev.objective, ev.terms
    res.solution.save(args.out)
    print(f"wrote {args.out}: objective {ev.objective:.8g} (ml_bound {ev.terms['ml_bound']:.6g}, "
          f"delay {ev.terms['delay']:.6g} s, energy {ev.terms['energy']:.6g} J)")
    return EXIT_OK


__all__ = ["register", "methods"]
