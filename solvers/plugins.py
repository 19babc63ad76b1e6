"""The solve methods, named in one place (as Pyomo's plugins; `solvers.base` registers them).

One line per method: name, the function `fn(inst, options) -> Results` and the options class
(both as "module:attribute", imported on first use, so listing the methods loads no solver),
the one-line description that `cefl-opt solve --help` shows, and the native solver it runs
where that is not Ipopt (crash messages name it). Adding a method is one new
module with its function and its options dataclass (a `solvers.options.MethodOptions`
subclass) plus one line here (docs/developer.md, "Adding a solve method").
"""
from __future__ import annotations

_C, _O = "cefl_opt.solvers.centralized", "cefl_opt.solvers.options"
_D = "cefl_opt.solvers.decentralized"
_ASL = "PyNumero (the AMPL Solver Library)"     # the decentralised methods' derivatives

PLUGINS: tuple[tuple[str, ...], ...] = (
    ("ipopt-enum", f"{_C}:ipopt_enum", f"{_O}:IpoptEnumOptions",
     "the centralised reference: Ipopt on P with the binaries fixed, seeded by decentralized, "
     "fixed and greedy, associations repaired by the objective, aggregator sweeps; best kept"),
    ("fixed", f"{_C}:fixed_aggregator", f"{_O}:FixedOptions",
     "aggregator s in every round (--aggregator s), Ipopt on the rest"),
    ("greedy-data", f"{_C}:greedy_data", f"{_O}:GreedyOptions",
     "per round the DC whose sub-network holds most data, Ipopt on the rest"),
    ("greedy-rate", f"{_C}:greedy_rate", f"{_O}:GreedyOptions",
     "per round the DC with the highest mean end-to-end rate, Ipopt on the rest"),
    ("no-offload", f"{_C}:no_offload", f"{_O}:NoOffloadOptions",
     "conventional FL: no data leaves the UEs (aggregator by greedy-rate)"),
    ("scip", "cefl_opt.solvers.scip:solve_scip", f"{_O}:ScipOptions",
     "SCIP global MINLP on the binary model: incumbent and proven lower bound", "SCIP"),
    ("decomposed-bound", "cefl_opt.solvers.bound:solve_decomposed_bound", f"{_O}:BoundOptions",
     "proven lower bound by decomposition over rounds and aggregators (SCIP per round), "
     "decentralized's answer (or --incumbent) capping the delays", "SCIP"),
    ("decentralized", f"{_D}:run_decentralized", f"{_O}:DecentralizedOptions",
     "decentralised SCA and primal-dual per node (paper §V): neighbour messages only "
     "(relayed), binaries by a forcing penalty, then a finishing SCA with the binaries fixed",
     _ASL),
    ("decentralized-polish", f"{_D}:run_decentralized_polish", f"{_O}:DecentralizedOptions",
     "decentralized's relaxed phase and rounding, then the central association repair and an "
     "Ipopt polish"),
    ("centralized-pd", f"{_D}:run_centralized_pd", f"{_O}:DecentralizedOptions",
     "the decentralized iteration on global arrays (exact global primal-dual updates, no "
     "messages)", _ASL),
)

