"""``cefl-opt evaluate``: objective, delays, energies and feasibility of a solution."""
from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from ..instance import Instance
from ..io import check_distinct, check_writable, write_json_atomic
from . import EXIT_INFEASIBLE_SOLUTION, EXIT_OK, add_inputs

MAX_VIOLATIONS_SHOWN = 10


def register(sub) -> None:
    e = sub.add_parser("evaluate", help="objective, delays, energies and feasibility of a solution",
                       description="Evaluate a solution (cefl-solution/1) on an instance with the "
                                   "numpy system model: objective, its three terms, the ML bound's "
                                   "parts and a per-round table. The objective's weights are "
                                   "those the solution records (its 'weights', which solve "
                                   "writes; the instance's when it records none), with a note "
                                   "on stderr when they differ from the instance's. Exit 0 "
                                   "when the solution is "
                                   "feasible (every constraint within cefl_opt.system.FEAS_TOL), "
                                   "1 when infeasible, 2 on bad input.")
    add_inputs(e, "solution JSON (cefl-solution/1)")
    e.add_argument("--bound", choices=("corollary", "general"), default="corollary",
                   help="form of the ML bound: corollary (eq:convSpecial, default) or general "
                        "(Theorem 1, eq:GenConvBound)")
    e.add_argument("--json", default=None, metavar="OUT", help="also write the evaluation as JSON")
    e.add_argument("--allow-other-instance", action="store_true",
                   help="evaluate a solution that records another instance's fingerprint "
                        "(refused by default, exit 2)")
    e.set_defaults(func=cmd_evaluate)


# ---------------------------------------------------------------------- evaluate
def _finite(x: Any) -> Any:
    """JSON-safe value: non-finite floats become null."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, np.ndarray):
        return _finite(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def _weights_text(w: dict) -> str:
    return ", ".join(f"{k} {v:.6g}" for k, v in w.items())


ROUND_KEYS = ("dA", "dR", "delay", "energy", "energy_raw", "E_D_ue", "E_D_bs", "E_P_ue", "E_P_dc",
              "E_A", "E_R", "aggregator")


def cmd_evaluate(args) -> int:
    import pandas as pd

    from ..solution import Solution
    from ..system import FEAS_TOL, constraint_violations, evaluate, objective_weights

    if args.json:
        check_distinct([("--json", args.json)], [args.net, args.sol])
        check_writable(args.json, "--json")
    inst = Instance.load(args.net)
    sol = Solution.load(args.sol, inst)
    note = sol.check_instance(inst, allow_other=args.allow_other_instance)
    if note:
        print(note, file=sys.stderr)
    viol = constraint_violations(inst, sol, bound=args.bound)
    w = objective_weights(inst, sol.weights)
    if w != objective_weights(inst):
        print(f"note: scored with the weights the solution records ({_weights_text(w)}), not "
              f"the instance's ({_weights_text(objective_weights(inst))})", file=sys.stderr)
    try:
        with np.errstate(all="ignore"):
            ev = evaluate(inst, sol, bound=args.bound, weights=w)
    except (ValueError, ZeroDivisionError, FloatingPointError) as e:
        if not viol:
            raise
        ev = None  # the objective is undefined outside the bounds (e.g. m = 0, gamma < 0)
        err = str(e)

    print(f"instance {inst.name}; solution by {sol.method} ({sol.status}); bound {args.bound}")
    if ev is not None:
        print(f"objective {ev.objective:.10g}")
        parts = pd.DataFrame(
            [("ML bound (a)", w["xi1"], ev.terms["ml_bound"]),
             ("delay (b), s", w["xi2"], ev.terms["delay"]),
             ("energy (c)-(e), J", w["xi3"], ev.terms["energy"])],
            columns=["term", "weight xi", "value"])
        parts["xi * value"] = parts["weight xi"] * parts["value"]
        print(parts.to_string(index=False, float_format=lambda v: f"{v:.6g}"))
        print("ML bound parts: " + "  ".join(f"{k} {v:.6g}" for k, v in ev.ml_parts.items()))
        print("ML bound state: " + "  ".join(f"{k} {v:.6g}" for k, v in ev.ml_info.items()
                                             if not k.startswith("step_")))
        if "step_lhs" in ev.ml_info:  # Theorem 1's step-size condition (docs/formulation.md)
            lhs, rhs = ev.ml_info["step_lhs"], ev.ml_info["step_rhs"]
            print(f"step-size condition 4 d L^2 g_max (g_max-1)(2 zeta1^2+1) <= gbar T: "
                  f"{lhs:.6g} <= {rhs:.6g}: {'holds' if lhs <= rhs * (1 + FEAS_TOL) else 'VIOLATED'}")
        table = ev.per_round_table().set_index("round")
        print("per round (delays in s, energies in J; energy = xi3_k-weighted sum):")
        print(table.to_string(float_format=lambda v: f"{v:.6g}"))
        if sol.objective is not None and isinstance(sol.objective, (int, float)) \
                and not math.isclose(float(sol.objective), ev.objective, rel_tol=1e-6):
            print(f"note: the solution file records objective {sol.objective:.10g}")
    else:
        print(f"objective undefined at this point ({err})")

    if args.json:
        out = {"format": "cefl-evaluation/1", "instance": str(args.net), "solution": str(args.sol),
               "bound": args.bound, "feasible": not viol, "feas_tol": FEAS_TOL,
               "violations": [{"constraint": n, "excess": v} for n, v in viol],
               "weights": w,
               "objective": ev.objective if ev else None,
               "terms": ev.terms if ev else None, "ml_parts": ev.ml_parts if ev else None,
               "ml_info": ev.ml_info if ev else None,
               "rounds": ([{k: r[k] for k in ROUND_KEYS} for r in ev.rounds] if ev else None)}
        write_json_atomic(args.json, _finite(out))
        print(f"wrote {args.json}")

    if viol:
        worst = sorted(viol, key=lambda x: -x[1])[:MAX_VIOLATIONS_SHOWN]
        print(f"INFEASIBLE: {len(viol)} constraint(s) violated beyond the relative tolerance "
              f"{FEAS_TOL:g}; worst {len(worst)}:")
        for name, excess in worst:
            print(f"  {name}: relative excess {excess:.6g}")
        return EXIT_INFEASIBLE_SOLUTION
    print(f"feasible (every constraint within {FEAS_TOL:g})")
    return EXIT_OK
