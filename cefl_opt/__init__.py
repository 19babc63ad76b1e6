"""cefl-opt: optimisation-modelling toolkit for CE-FL (cooperative edge-assisted dynamic federated
learning with a floating aggregation point)."""
from .instance import Instance, InstanceError, InfeasibleInstance
from .solution import RoundDecision, Solution

__all__ = ["Instance", "InstanceError", "InfeasibleInstance", "RoundDecision", "Solution"]
__version__ = "0.1.0"
