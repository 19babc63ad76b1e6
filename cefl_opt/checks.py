"""Install self-check (`python -m cefl_opt.checks`, the last step of `make install`): cyipopt and
SCIP each solve a tiny problem, PyNumero's ASL library loads, torch imports. Exit 1 with the
reason if anything is missing."""
from __future__ import annotations

import sys


def main() -> int:
    import pyomo.environ as pyo
    problems = []
    from pyomo.contrib.pynumero.asl import AmplInterface
    if not AmplInterface.available():
        problems.append("PyNumero's ASL library is missing (python -m pyomo.contrib.pynumero.build ...)")
    m = pyo.ConcreteModel()
    m.x = pyo.Var(bounds=(0.1, 4), initialize=1.0)
    m.o = pyo.Objective(expr=(m.x - 2) ** 2 + 1 / m.x)
    try:
        pyo.SolverFactory("cyipopt").solve(m)
        if abs(m.x.value - 2.11208) > 1e-3:
            problems.append(f"cyipopt returned x={m.x.value}, expected 2.11208")
    except Exception as e:
        problems.append(f"cyipopt failed: {e}")
    m.y = pyo.Var(domain=pyo.Binary)
    m.o.deactivate()
    m.o2 = pyo.Objective(expr=(m.x - 2) ** 2 + 1 / m.x - m.y)
    try:
        pyo.SolverFactory("scip_direct").solve(m)
        if round(m.y.value) != 1:
            problems.append("SCIP returned a wrong binary")
    except Exception as e:
        problems.append(f"SCIP (scip_direct) failed: {e}")
    try:
        import torch  # noqa: F401
    except Exception as e:
        problems.append(f"torch does not import: {e}")
    for p in problems:
        print(f"cefl-opt install check: {p}", file=sys.stderr)
    if not problems:
        print("cefl-opt install check: cyipopt, SCIP, PyNumero and torch OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
