"""Alias: the association repair lives in `cefl_opt.association` (the one module of association
rules); kept for `solvers/decentralized.py`'s import until it imports that module."""
from cefl_opt.association import repair_associations

__all__ = ["repair_associations"]
