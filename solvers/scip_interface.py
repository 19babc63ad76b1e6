"""Pyomo's direct SCIP interface as every SCIP solve of the project runs it (`solvers.scip`,
`solvers.bound`): the parameters, the GIL-free `optimize`, and the reading of SCIP's error
lines and infinite bounds."""
from __future__ import annotations

import math
from pathlib import Path

from pyomo.contrib.solver.solvers.scip.scip_direct import ScipDirect

from .isolation import in_child

#: Options of the Ipopt inside SCIP (its NLP heuristics): MUMPS orders with AMD, not METIS,
#: whose bundled build aborts the process on some of P's systems (the file says why)
IPOPT_OPTIONS_FILE = Path(__file__).with_name("scip_ipopt.opt")


def scip_params(time_limit: float | None, gap: float, seed: int) -> dict:
    """SCIP's parameters for every solve of the project: time limit (none: no limit), gap,
    seed shift, feasibility tolerance, no display (nobody reads it; `QuietScip` keeps any
    output that is asked for from blocking), the bundled Ipopt's options file (AMD ordering,
    avoiding the MUMPS/METIS crash) and, in an isolated child, Ctrl-C left to the parent
    (which kills the child)."""
    params = {"limits/gap": gap, "randomization/randomseedshift": seed,
              "numerics/feastol": 1e-7, "display/verblevel": 0,
              "nlpi/ipopt/optfile": str(IPOPT_OPTIONS_FILE)}
    if time_limit is not None:
        params["limits/time"] = time_limit
    if in_child():
        params["misc/catchctrlc"] = False
    return params


def scip_error(log: str) -> str | None:
    """The first of SCIP's own error lines in `log` (``[paramset.c:165] ERROR: Invalid value
    <1e+308> for real parameter <limits/time>. Must be in range [0,1e+20].``), its text only."""
    for line in log.splitlines():
        head, sep, text = line.partition("ERROR:")
        if sep and head.strip().startswith("[") and text.strip():
            return text.strip()
    return None


def finite(x) -> float | None:
    """`x` as a float where it is a finite number, else None (SCIP's infinite bounds)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


class QuietScip(ScipDirect):
    """Pyomo's direct SCIP interface with SCIP's `optimize` run without the GIL. Pyomo captures
    the solve's output (fd 1 included) on a pipe that a Python thread drains; SCIP, or the LP
    solver and Ipopt inside it, writing to fd 1 while `optimize` held the GIL would fill the
    pipe and block for ever. Every Python callback of the solve (the progress events) takes
    the GIL itself."""

    def _create_solver_model(self, model, config):
        scip_model, loader, has_obj = super()._create_solver_model(model, config)
        return _Nogil(scip_model), loader, has_obj


class _Nogil:
    """A pyscipopt model whose `optimize` is its `optimizeNogil`; every other attribute is the
    model's."""

    def __init__(self, model) -> None:
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)

    def optimize(self) -> None:
        self._model.optimizeNogil()
