"""cefl-opt: optimisation-modelling toolkit for CE-FL (cooperative edge-assisted dynamic federated
learning with a floating aggregation point).

The public API is one import::

    from cefl_opt import make_instance, solve, evaluate, build_problem, methods, Results, \
        Instance, Solution

The names are imported on first use (PEP 562), so that ``import cefl_opt.cli`` is light and
the command line installs its signal handlers before numpy and the solvers load."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same names, for type checkers and the API reference
    from cefl_opt.generator import make_instance
    from cefl_opt.instance import InfeasibleInstance, Instance, InstanceError
    from cefl_opt.models.problem import build_problem
    from cefl_opt.solution import RoundDecision, Solution
    from cefl_opt.solvers.base import Results, methods, solve
    from cefl_opt.system import Evaluation, evaluate

__version__ = "0.1.0"
#: {public name: the module that defines it}
_HOME = {"make_instance": "generator", "Instance": "instance", "InstanceError": "instance",
         "InfeasibleInstance": "instance", "RoundDecision": "solution", "Solution": "solution",
         "solve": "solvers.base", "methods": "solvers.base", "Results": "solvers.base",
         "evaluate": "system", "Evaluation": "system", "build_problem": "models.problem"}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
