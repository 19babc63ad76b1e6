"""cefl-opt: optimisation-modelling toolkit for CE-FL (cooperative edge-assisted dynamic federated
learning with a floating aggregation point).

The names below are imported on first use (PEP 562), so that ``import cefl_opt.cli`` is light
and the command line installs its signal handlers before numpy and the solvers load."""
from __future__ import annotations

import importlib

__all__ = ["Instance", "InstanceError", "InfeasibleInstance", "RoundDecision", "Solution"]
__version__ = "0.1.0"
_HOME = {"Instance": "instance", "InstanceError": "instance", "InfeasibleInstance": "instance",
         "RoundDecision": "solution", "Solution": "solution"}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
