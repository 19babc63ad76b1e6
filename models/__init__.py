"""Problem P of CE-FL as Pyomo blocks (installed as `cefl_opt.models`).

The names below are the model's public interface: build P, read its node blocks and consensus
rows, and move solutions in and out. What the solvers use to split P across processes (one
node's rows at a time, the owners of copies, the epigraph levels) stays in `.problem` and
`.codec`."""
from .codec import GBIT, GHZ, KS, clip_to_bounds, extract_solution, load_solution
from .problem import (BINARY_MODES, BOUND_FORMS, build_problem, consensus_constraints,
                      fix_binaries, node_blocks, node_constraints, node_variables,
                      unfix_binaries)

__all__ = ["BINARY_MODES", "BOUND_FORMS", "GBIT", "GHZ", "KS", "build_problem", "clip_to_bounds",
           "consensus_constraints", "extract_solution", "fix_binaries", "load_solution",
           "node_blocks", "node_constraints", "node_variables", "unfix_binaries"]
