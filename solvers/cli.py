"""`cefl-opt solve`: run a named method on an instance and write the solution format."""
from __future__ import annotations

import argparse
import sys

from cefl_opt import system
from cefl_opt.instance import Instance

from .base import SolutionStatus, TerminationCondition, methods, solve

# exit codes of `cefl-opt solve`
EXIT_OK, EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_NO_SOLUTION = 0, 2, 3, 4
METHOD_NAMES = ("ipopt-enum", "scip", "fixed", "greedy-data", "greedy-rate", "no-offload",
                "decentralized", "decentralized-polish", "centralized-pd")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("solve", help="solve Problem P on an instance",
                       description="Solve P with a named method. Exit 0: a feasible solution was "
                                   "written; 3: the instance is infeasible; 4: no solution "
                                   "(time limit or solver failure); 2: bad input.")
    p.add_argument("net", help="instance JSON (cefl-instance/1)")
    p.add_argument("--method", required=True, choices=METHOD_NAMES)
    p.add_argument("--out", required=True, help="solution JSON to write (cefl-solution/1)")
    p.add_argument("--bound", choices=("corollary", "general"), default="corollary")
    p.add_argument("--time-limit", type=float, default=None, help="seconds (SCIP, Ipopt)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--aggregator", type=int, default=0, help="DC index for --method fixed")
    p.add_argument("--gap", type=float, default=1e-6, help="relative gap for SCIP")
    p.add_argument("--threads", type=int, default=1, help="SCIP threads")
    p.add_argument("--starts", type=int, default=1, help="ipopt-enum: sweep starts")
    p.add_argument("--consensus-rounds", type=int, default=None,
                   help="decentralized: exchange rounds per message collective; 0 (default) = "
                        "as many as the relay depth (exact aggregation)")
    p.add_argument("--max-outer", type=int, default=None, help="outer SCA iterations")
    p.add_argument("--trace", default=None, help="CSV trace per outer iteration")
    p.add_argument("--constants", choices=("tuned", "paper"), default="tuned",
                   help="algorithm constants of decentralized/centralized-pd: the tuned defaults "
                        "or the paper's table (SPEC §5)")
    p.set_defaults(func=run_solve)


def run_solve(args: argparse.Namespace) -> int:
    inst = Instance.load(args.net)
    for name in ("time_limit", "gap"):
        v = getattr(args, name)
        if v is not None and v <= 0:
            raise ValueError(f"option '--{name.replace('_', '-')}' must be > 0, got {v}")
    opts = {"bound": args.bound, "seed": args.seed}
    if args.time_limit is not None:
        opts["time_limit"] = args.time_limit
    if args.method == "fixed":
        opts["aggregator"] = args.aggregator
    if args.method == "scip":
        opts.update(gap=args.gap, threads=args.threads)
    if args.method == "ipopt-enum":
        opts["starts"] = args.starts
    if args.method in ("decentralized", "decentralized-polish", "centralized-pd"):
        opts["constants"] = args.constants
        for k in ("consensus_rounds", "max_outer"):
            if getattr(args, k) is not None:
                opts[k] = getattr(args, k)
        if args.trace:
            opts["trace_path"] = args.trace
    res = solve(inst, args.method, **opts)
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
    ev = system.evaluate(inst, res.solution, bound=args.bound)
    res.solution.objective, res.solution.terms = ev.objective, ev.terms
    res.solution.save(args.out)
    print(f"wrote {args.out}: objective {ev.objective:.8g} (ml_bound {ev.terms['ml_bound']:.6g}, "
          f"delay {ev.terms['delay']:.6g} s, energy {ev.terms['energy']:.6g} J)")
    return EXIT_OK


__all__ = ["register", "methods"]
