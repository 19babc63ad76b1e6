"""Problem P of CE-FL as Pyomo blocks (installed as `cefl_opt.models`)."""
from .problem import (BINARY_MODES, BOUND_FORMS, build_problem, clip_to_bounds, consensus_constraints,
                      constraint_nodes, extract_solution, fix_binaries, load_solution, node_blocks,
                      node_constraints, node_variables, unfix_binaries, variable_owner_map)

__all__ = ["BINARY_MODES", "BOUND_FORMS", "build_problem", "clip_to_bounds", "consensus_constraints",
           "constraint_nodes", "extract_solution", "fix_binaries", "load_solution", "node_blocks",
           "node_constraints", "node_variables", "unfix_binaries", "variable_owner_map"]
