"""Problem P of CE-FL as Pyomo blocks (installed as `cefl_opt.models`)."""
from .codec import (GBIT, GHZ, KS, VariableIndex, clip_to_bounds, extract_solution,
                    load_solution)
from .problem import (BINARY_MODES, BOUND_FORMS, EPIGRAPH_LEVELS, build_node_rows,
                      build_problem, consensus_constraints, constraint_host, constraint_nodes,
                      drop_node_terms, fix_binaries, is_forcing, node_blocks, node_constraints,
                      node_lifts, node_variables, tie_pairs, unfix_binaries, variable_owner_map)

__all__ = ["BINARY_MODES", "BOUND_FORMS", "EPIGRAPH_LEVELS", "GBIT", "GHZ", "KS",
           "VariableIndex", "build_node_rows", "build_problem", "clip_to_bounds",
           "consensus_constraints", "constraint_host", "constraint_nodes", "drop_node_terms",
           "extract_solution", "fix_binaries", "is_forcing", "load_solution", "node_blocks",
           "node_constraints", "node_lifts", "node_variables", "tie_pairs", "unfix_binaries",
           "variable_owner_map"]
