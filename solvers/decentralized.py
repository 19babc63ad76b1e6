"""User-facing entry of the paper's distributed orchestration solver (§V): `solve_decentralized`.

Methods
-------
* `decentralized`: every step is node-local computation plus neighbour messages over the
  instance's communication graph (`solvers/dec_comm.py`; `info["central_steps"] == []`):
    1. relaxed phase: Alg. 1 (`sca.run_sca`) with indicators in [0, 1]; each surrogate solved
       by the accelerated dual method of `primal_dual.InnerSolver`; the binary-forcing rows
       enter as a growing concave penalty after `force_after` outer iterations, so the SCA ends
       at binary indicators; it stops on its own tolerance.
    2. rounding: every owner rounds its own indicators (argmax; already binary at a converged
       relaxed phase): UE n its uplink/downlink BS, dc[0] the aggregator per round; then up
       to `move_passes` passes of association moves (`solvers/assoc_moves.py`): each UE moves
       its uplink or downlink BS where that lowers J with the rest held, priced by its rows'
       hosts (the node-local counterpart of the central `repair_associations`).
    3. finishing phase: the same SCA with the indicators fixed, on the continuous variables,
       until converged (warm-started duals); then the aggregator search
       (`solvers/aggregator_moves.py`) and, at the best finished point of each start, up to
       `refine_rounds` rounds of association moves there (the priced passes and the exact
       trials of `assoc_moves.exact_top_moves`) and a new finishing phase, kept only when J
       falls (`_refine`).
* `decentralized-polish`: phases 1-2, then the central association repair
  (`cefl_opt.association.repair_associations`, evaluates P over the whole network) and the Ipopt polish with
  the binaries fixed: `info["central_steps"] == ["association_repair", "ipopt_polish"]`.
* `centralized-pd`: phases 1-3 with the same arithmetic on global arrays (exact global dual and
  primal updates, no messages): `info["central_steps"] == ["global_primal_dual"]`.

What is sent to whom (per outer iteration of `decentralized`; `info["messages"]` counts it):
  * inner iteration: the primary of every shared variable sends its step du to every node that
    holds a copy or reads it (relay tree, 1 float per tree edge); those nodes send back, per
    shared variable, the sums of y_k a_ki and y_k L_k over their rows (2 floats); every 10
    inner iterations one max-reduce + broadcast over a spanning tree (1 float) for the stop test;
  * linearisation: the same broadcast of the primal, a reduce of the gradient contributions
    (1 float per entry), a reduce of the Hessian-diagonal contributions (1 float per entry), a
    sum of the nodes' objective shares over the spanning tree;
  * per surrogate: a reduce + broadcast for the dual step sizes (column sums of |a|);
  * per outer iteration: max-reduces of the violation and forcing residual.
No node evaluates P over the whole network: the objective shares and rows a node evaluates are
those of its own block (dc[0], owner of the global variables, hosts the delay and ML terms).
`info["objective"]` is the harness's check of the returned solution by `system.evaluate`
(reporting only; the method does not use it).

consensus_rounds J: exchange rounds per collective. Every collective (broadcast / reduce along
a relay tree) needs as many synchronous rounds as its tree is deep (`info["relay_depth"]`);
J = 0 (default) means exactly that many (finite-time exact aggregation); J >= depth is the same
computation (extra rounds carry nothing); 0 < J < depth cannot reach every holder and is
refused.

Trace (one CSV row per outer iteration, `trace_path`): see TRACE_FIELDS.
"""
from __future__ import annotations

import csv
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cefl_opt import system
from cefl_opt.association import repair_associations
from cefl_opt.instance import Instance, InstanceError
from cefl_opt.models import clip_to_bounds
from cefl_opt.solution import Solution

from . import fixed_nlp
from .aggregator_moves import (BatchTally, Candidate, aggregator_search, best_of, better,
                               take_batch, target_of)
from .assoc_moves import (MoveViews, association_moves, central_views, exact_group_moves,
                          exact_top_moves, fix_indicators_at, move_components, moved_groups,
                          tighten_epigraphs)
from .dec_comm import Comm, LocalComm
from .primal_dual import InnerSolver, PDConstants, resolve_constants
from .sca import DecStructure, Linearisation, build_structure, restore_epigraphs, run_sca, take

METHODS = ("decentralized", "decentralized-polish", "centralized-pd")
INITS = ("relaxed", "reference")
CENTRAL_STEPS = {"decentralized": [],
                 "decentralized-polish": ["association_repair", "ipopt_polish"],
                 "centralized-pd": ["global_primal_dual"]}
TRACE_FIELDS = ("outer", "phase", "wall_s", "obj_model", "max_violation", "forcing_violation",
                "rho", "inner_iters", "inner_residual", "step_inf", "step_factor",
                "stationarity", "rejected",
                "L_raised", "aggregators", "I_binary_gap", "msgs_max", "msgs_mean", "bytes_max",
                "bytes_mean")


class DistributedEvaluator:
    """The SCA's linearisation, curvature, per-variable maxima and epigraph restoration,
    computed node by node: each node evaluates its provider at its own copies (received by
    broadcast) and the results travel by `Comm` collectives (module docstring)."""

    def __init__(self, st: DecStructure, inner: InnerSolver):
        self.st, self.inner, self.comm = st, inner, inner.comm
        pl = inner.plan
        key = pl.entry_node * st.n + pl.entry_q
        self.pent = [np.searchsorted(key, d * st.n + pv.comp) for d, pv in enumerate(st.providers)]
        self.E = len(pl.entry_q)
        self.nodes = [int(d) for d in self.comm.local_nodes()]   # providers this process runs
        self.spread = self.comm.backend != "local"

    def linearise(self, u: np.ndarray) -> Linearisation:
        st, comm, pl = self.st, self.comm, self.inner.plan
        xe = comm.broadcast(pl, st.x_of(u))
        g_ent = np.zeros(self.E)
        c = np.zeros(st.n_rows)
        a = np.zeros(len(st.jac_cols))
        fn = np.zeros(st.n_nodes)
        for d in self.nodes:
            pv = st.providers[d]
            f_d, g_d, c_d, jd = pv.evaluate(xe[self.pent[d]])
            fn[d] = f_d
            np.add.at(g_ent, self.pent[d], g_d)
            c[st.row_ptr[d]:st.row_ptr[d + 1]] = c_d
            np.add.at(a, st.node_jac[d], jd)
        g = comm.reduce(pl, g_ent) * st.scale
        f = self._tree_sum(fn)
        a *= st.scale[st.jac_cols]
        rn = st.row_norm
        return Linearisation(u=u.copy(), f=f, g=g, c=c / rn, a=a / rn[st.jac_rows], f_nodes=fn)

    def values(self, u: np.ndarray) -> Linearisation:
        """J and C at u, bit for bit as `linearise` gives them, without grad J and the
        Jacobian (g and a None): the copies' broadcast, each node's values, J's sum."""
        st = self.st
        xe = self.comm.broadcast(self.inner.plan, st.x_of(u))
        c = np.zeros(st.n_rows)
        fn = np.zeros(st.n_nodes)
        for d in self.nodes:
            fn[d], c[st.row_ptr[d]:st.row_ptr[d + 1]] = st.providers[d].values(xe[self.pent[d]])
        return Linearisation(u=u.copy(), f=self._tree_sum(fn), g=None, c=c / st.row_norm,
                             a=None, f_nodes=fn)

    def _tree_sum(self, fn: np.ndarray) -> float:
        """J: the nodes' shares summed over the spanning tree (with the MPI backend the root's
        sum reaches every process; it is only traced)."""
        gp = self.inner.gplan
        f_root = self.comm.reduce(gp, fn[gp.entry_node])
        if self.spread:
            return float(self.comm.broadcast(gp, f_root)[self.inner.tree_entry])
        return float(f_root[0])

    def curvature(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        st, comm, pl = self.st, self.comm, self.inner.plan
        xe = comm.broadcast(pl, st.x_of(u))
        h_ent = np.zeros(self.E)
        for d in self.nodes:
            pv = st.providers[d]
            sl = slice(st.row_ptr[d], st.row_ptr[d + 1])
            hd = pv.hessian_diag(xe[self.pent[d]], y[sl] / st.row_norm[sl])
            np.add.at(h_ent, self.pent[d], hd)
        return comm.reduce(pl, h_ent) * st.scale ** 2

    def move_views(self) -> MoveViews:
        """The collectives of `assoc_moves` over this run's relay trees."""
        inner, st, comm = self.inner, self.st, self.comm
        pl, E = inner.plan, inner.E
        local = np.zeros(st.n_nodes, dtype=bool)
        local[comm.local_nodes()] = True
        ent_local = local[pl.entry_node]
        no_entry = np.zeros(0, dtype=np.int64)

        def sync(u: np.ndarray) -> np.ndarray:
            """Every process's copies set from their primaries (one broadcast). In one
            process each copy is its primary's own entry of u: the broadcast is counted and
            changes nothing."""
            if not self.spread:
                comm.broadcast_take(pl, u, no_entry, slot="sync")
                return u.copy()
            out = u.copy()
            out[pl.entry_q[ent_local]] = comm.broadcast(pl, u)[ent_local]
            return out

        def at_nonzeros(v: np.ndarray, nz: np.ndarray | None = None) -> np.ndarray:
            if nz is None:
                return inner.nonzero_view(v)
            return comm.broadcast_take(pl, v, inner.jent[nz], slot="move_take")

        def max_to_vars(z: np.ndarray, nz: np.ndarray | None = None) -> np.ndarray:
            if nz is None:
                return self.var_max(z, -np.inf)
            return comm.reduce_max_at(pl, inner.jent[nz], z)
        return MoveViews(at_nonzeros=at_nonzeros,
                         sum_to_vars=lambda z: comm.reduce(pl, np.bincount(
                             inner.jent, weights=z, minlength=E)),
                         max_to_vars=max_to_vars,
                         var_sum=lambda v: inner.global_sum(np.zeros(0), v), sync=sync,
                         local_rows=local[st.row_host], local_vars=local[st.primary],
                         node_sum=inner.global_sum_nodes)

    def var_max(self, per_nz: np.ndarray, floor: float) -> np.ndarray:
        """Per shared variable, at its primary: the max of per-nonzero values over its rows'
        hosts and `floor` (each host's max per entry, max-reduced over the relay tree)."""
        ent = np.full(self.inner.E, floor)
        np.maximum.at(ent, self.inner.jent, per_nz)
        return self.comm.reduce(self.inner.plan, ent, op="max")

    def restore(self, u: np.ndarray, lin: Linearisation, free: np.ndarray):
        """`sca.restore_epigraphs` by messages: each row's host computes what its rows need,
        max-reduced to the variable's primary; the move reaches the hosts by broadcast."""
        inner, st = self.inner, self.st
        return restore_epigraphs(st, u, lin, free, var_max=lambda z: self.var_max(z, 0.0),
                                 nonzero_view=inner.nonzero_view,
                                 any_positive=lambda v: inner.global_max_var(v) > 0)


class CrossProcessCollectives:
    """`run_sca`'s view of a run whose nodes are spread over processes (MPI backend): the
    rows this process hosts and the collectives that give every process the same decisions."""

    def __init__(self, st: DecStructure, inner: InnerSolver):
        self.local_rows = inner.comm.is_local[st.row_host]
        self.max_var = inner.global_max_var
        self.sum_rows = inner.global_sum
        self.nonzero_view = inner.nonzero_view


def _fix_indicators(st: DecStructure, u: np.ndarray) -> np.ndarray:
    """Every owner rounds its own indicators (argmax per round; ties to the lowest index) and
    fixes them (bounds lo = hi). Returns the rounded point."""
    u = u.copy()
    x = st.x_of(u)
    for key in ("Is", "Inb", "Ibn"):
        ix = st.idx[key]
        vals = take(x, ix, -np.inf)  # absent UE-BS links (index -1) are never chosen
        hot = np.zeros_like(vals)
        np.put_along_axis(hot, np.argmax(vals, axis=-1)[..., None], 1.0, axis=-1)
        flat, hot = ix.ravel(), hot.ravel()
        hot, flat = hot[flat >= 0], flat[flat >= 0]
        u[flat] = hot / st.scale[flat]
    fix_indicators_at(st, u)
    return u


def _gather_primaries(st: DecStructure, comm, u: np.ndarray) -> np.ndarray | None:
    """Process 0 collects every node's primary values into one u (`gather_to_root`); None
    on the other processes."""
    own = {int(d): np.flatnonzero(st.primary == d) for d in comm.local_nodes()}
    got = comm.gather_to_root({d: (ix, u[ix]) for d, ix in own.items()})
    if got is None:
        return None
    out = np.full(st.n, np.nan)
    for ix, vals in got.values():
        out[ix] = vals
    if np.isnan(out).any():
        raise AssertionError("a shared variable has no primary among the gathered nodes")
    return out


def _polish(inst: Instance, sol: Solution, *, bound: str, ipopt_options: dict | None
            ) -> tuple[Solution, str, float]:
    """Ipopt on P with the binaries of `sol` fixed, started from `sol` (decentralized-polish
    only); the polished point is kept when it is feasible and not worse."""
    t0 = time.perf_counter()
    nlp = fixed_nlp.FixedNLP(inst, bound=bound, ipopt_options=ipopt_options)
    out, status, _obj = nlp.solve(sol.rounds, warm=sol)
    final = sol
    if out is not None:
        ev_p = system.evaluate(inst, out, bound=bound)
        ev_r = system.evaluate(inst, sol, bound=bound)
        if ev_p.feasible and ev_p.objective <= ev_r.objective + 1e-12:
            final = out
    return final, str(getattr(status, "value", status)), time.perf_counter() - t0


# ---------------------------------------------------------------------- the run and its phases
@dataclass
class DecentralizedRun:
    """What the phases of one `solve_decentralized` call share: the per-node structure, the
    inner solver (Alg. 2), the message passing and the info and trace being filled."""
    inst: Instance
    method: str
    bound: str
    k: PDConstants
    st: DecStructure
    inner: InnerSolver
    comm: Comm | None
    dec: bool                            # messages over the graph (not centralized-pd)
    spread: bool                         # nodes spread over processes (MPI backend)
    evaluator: DistributedEvaluator | None
    info: dict[str, Any]
    t_start: float
    max_outer: int | None
    progress: bool = False
    ipopt_options: dict | None = None    # decentralized-polish's polish
    rows: list[dict[str, Any]] = field(default_factory=list)
    msg_hist: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    neighbours_only: bool = True
    bar: Any = None
    finished: list = field(default_factory=list)            # every finished candidate
    finishing_records: list = field(default_factory=list)   # their finishing phases' records
    budget: "SearchBudget | None" = None                     # the search's, once it starts
    relaxed_passes: int = 0                                  # the relaxed phase's passes
    search_times: dict = field(default_factory=dict)         # seconds per kind of search step

    def timed(self, kind: str, fn, *args, **kw):
        """fn(*args, **kw), its wall seconds added to `search_times[kind]`."""
        t = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            self.search_times[kind] = self.search_times.get(kind, 0.0) + time.perf_counter() - t

    def sca_hooks(self) -> dict[str, Any]:
        """`run_sca`'s keyword arguments: the message-passing forms of its evaluations
        (decentralized) or none (centralized-pd: global arrays)."""
        ev = self.evaluator
        return dict(max_outer=self.max_outer, callback=self.record,
                    global_max=self.inner.global_max if self.dec else None,
                    linearise=ev.linearise if self.dec else None,
                    curvature=ev.curvature if self.dec else None,
                    restore=ev.restore if self.dec else None,
                    distributed=CrossProcessCollectives(self.st, self.inner)
                    if self.spread else None)

    def record(self, rec) -> bool:
        """`run_sca`'s callback: one trace row per outer iteration (TRACE_FIELDS) with the
        messages sent since the last one; advances the progress bar."""
        if self.dec:
            msgs, nbytes = self.comm.snapshot()
            self.msg_hist.append((msgs, nbytes))
        else:
            msgs = nbytes = np.zeros(1)
        d = None if self.spread else self.st.decisions(rec.u_hat)   # spread: not all held here
        self.rows.append({
            "outer": len(self.rows), "phase": rec.phase,
            "wall_s": time.perf_counter() - self.t_start, "obj_model": rec.f,
            "max_violation": rec.violation, "forcing_violation": rec.forcing,
            "rho": rec.rho, "inner_iters": rec.inner["inner_iters"],
            "inner_residual": rec.inner["residual"], "step_inf": rec.step_inf,
            "step_factor": rec.zeta, "stationarity": rec.stationarity,
            "rejected": int(rec.rejected), "L_raised": rec.L_raised,
            "aggregators": "" if d is None else
            "|".join(str(int(a)) for a in d["Is"].argmax(axis=1)),
            "I_binary_gap": float("nan") if d is None else
            float(np.max(1.0 - d["Is"].max(axis=1))),
            "msgs_max": int(msgs.max()), "msgs_mean": float(msgs.mean()),
            "bytes_max": int(nbytes.max()), "bytes_mean": float(nbytes.mean())})
        if self.bar is not None:
            self.bar.set_postfix(J=f"{rec.f:.6g}", viol=f"{rec.violation:.1e}",
                                 refresh=False)
            self.bar.update(1)
        return False

    def run_phase(self, u0: np.ndarray, phase: str, target: float | None = None):
        """One SCA phase (Alg. 1, `run_sca`) from u0, with a progress bar of its outer
        iterations on stderr when asked (rank 0 only); `target`: a trial's (`run_sca`)."""
        if self.progress:
            from tqdm import tqdm
            self.bar = tqdm(total=self.max_outer or self.k.max_outer, unit="outer",
                            desc=f"{self.method} {phase}", leave=False)
        try:
            return run_sca(self.st, self.inner, self.k, u0=u0, phase=phase, target=target,
                           **self.sca_hooks())
        finally:
            if self.bar is not None:
                self.bar.close()
                self.bar = None


def _check_arguments(method: str, init: str, max_outer: int | None,
                     consensus_rounds: int) -> None:
    if method not in METHODS:
        raise ValueError(f"method {method!r}: expected one of {METHODS}")
    if init not in INITS:
        raise ValueError(f"init {init!r}: expected one of {INITS}")
    if max_outer is not None and max_outer < 1:
        raise ValueError(f"max_outer must be >= 1, got {max_outer}")
    _check_whole("consensus_rounds", consensus_rounds, 0)


def _check_whole(label: str, value, lo: int) -> None:
    """ValueError unless `value` is an integer (not a bool) >= lo."""
    if isinstance(value, bool) or int(value) != value or value < lo:
        raise ValueError(f"{label} must be an integer >= {lo}, got {value!r}")


def _check_search_constants(k: PDConstants) -> None:
    """The search's constants (`solvers/aggregator_moves.py`): agg_passes >= 0,
    refine_rounds >= 0, agg_screen >= 1, move_screen >= 0, candidates 1 or 2,
    search_budget >= 0."""
    _check_whole("constant 'agg_passes'", k.agg_passes, 0)
    _check_whole("constant 'move_screen'", k.move_screen, 0)
    _check_whole("constant 'refine_rounds'", k.refine_rounds, 0)
    _check_whole("constant 'agg_screen'", k.agg_screen, 1)
    if k.candidates not in (1, 2) or isinstance(k.candidates, bool):
        raise ValueError(f"constant 'candidates' must be 1 or 2, got {k.candidates!r}")
    if isinstance(k.search_budget, bool) or not k.search_budget >= 0:
        raise ValueError(f"constant 'search_budget' must be a number >= 0, got "
                         f"{k.search_budget!r}")


def _setup(inst: Instance, *, method: str, consensus_rounds: int, max_outer: int | None,
           bound: str, constants, seed: int, init: str, progress: bool,
           ipopt_options: dict | None, structure: DecStructure | None, comm: Comm | None) -> DecentralizedRun:
    """Set-up (paper §V, `eqn: parameter_union_over_nodes`): the per-node blocks and shared
    variables (`sca.build_structure`), the relay plans over the communication graph and the
    inner solver (Alg. 2); refuses J below the relay depth."""
    k = resolve_constants(constants)
    _check_search_constants(k)
    t_start = time.perf_counter()
    dec = method != "centralized-pd"
    if dec and not inst.graph_edges:
        raise InstanceError(f"field 'graph_edges' is missing or empty: method {method!r} passes "
                            f"its messages over the instance's communication graph (`cefl-opt "
                            f"network generate` draws one)")
    spread = comm is not None and comm.backend != "local"
    if spread and method != "decentralized":
        raise ValueError(f"option '--backend {comm.backend}' runs method 'decentralized' only, "
                         f"not {method!r}")
    own = dict(local=comm.local_nodes(), allgather=comm.allgather) if spread else {}
    st = structure if structure is not None else build_structure(
        inst, bound=bound, relax_init=(init == "relaxed"), **own)
    st.reset_bounds()
    if comm is None and dec:
        comm = LocalComm(inst.graph(), st.node_names)
    if spread:
        st.set_local(comm.is_local[st.primary])
    inner = InnerSolver(st, k, mode="decentralized" if dec else "centralized", comm=comm)
    info: dict[str, Any] = {"method": method, "init": init, "bound": bound, "seed": seed,
                            "constants": k.as_dict(), "central_steps": list(CENTRAL_STEPS[method]),
                            "n_shared_variables": st.n, "n_copies": st.n_copies,
                            "n_coupling": st.n_rows, "n_nodes": st.n_nodes,
                            "projection_groups": dict(st.group_counts), "build_s": st.build_s}
    run = DecentralizedRun(inst=inst, method=method, bound=bound, k=k, st=st, inner=inner,
                           comm=comm, dec=dec, spread=spread,
                           evaluator=DistributedEvaluator(st, inner) if dec else None,
                           info=info, t_start=t_start, max_outer=max_outer,
                           progress=progress and info_rank(comm) == 0,
                           ipopt_options=ipopt_options)
    if dec:
        _check_relay_depth(run, consensus_rounds)
        comm.snapshot()   # set-up messages are not part of an outer iteration
    return run


def _check_relay_depth(run: DecentralizedRun, consensus_rounds: int) -> None:
    """J against the relay trees' depth (module docstring); records the message topology."""
    inner, inst, comm = run.inner, run.inst, run.comm
    depth = max(inner.plan.n_rounds, inner.gplan.n_rounds)
    if 0 < consensus_rounds < depth:
        raise ValueError(f"consensus_rounds = {consensus_rounds} is below the relay depth "
                         f"{depth} of this communication graph: a collective cannot reach "
                         f"every holder; use 0 (as many rounds as needed) or >= {depth}")
    graph = inst.graph()
    names = run.st.node_names
    run.neighbours_only = all(graph.has_edge(names[a], names[b])
                              for a, b in inner.plan.edges | inner.gplan.edges)
    run.info.update(backend=comm.backend, ranks=int(getattr(comm, "size", 1)),
                    relay_depth=depth,
                    consensus_rounds=int(consensus_rounds or depth),
                    relay_tree_edges=len(inner.plan.edges | inner.gplan.edges),
                    graph_edges=int(inst.graph().number_of_edges()))


def _relaxed_phase(run: DecentralizedRun):
    """Phase 1: Alg. 1 (`alg:dist_NOVA main`) with indicators in [0, 1] and the forcing rows
    (`con1add`-`con12add`) as a growing penalty, from the structure's start w^0."""
    relaxed_u, relaxed_records, reason = run.run_phase(run.st.u0, "relaxed")
    run.relaxed_passes = _phase_passes(relaxed_records)
    run.info.update(stop_reason_relaxed=reason, outer_iterations_relaxed=len(relaxed_records),
                    violation_relaxed=relaxed_records[-1].violation if relaxed_records
                    else float("nan"),
                    forcing_relaxed=relaxed_records[-1].forcing if relaxed_records else None)
    return relaxed_u, relaxed_records, reason


def _rounding(run: DecentralizedRun, relaxed_u: np.ndarray):
    """Phase 2: every owner rounds its own indicators and fixes them (`_fix_indicators`);
    with the MPI backend every process's copies take the owners' values. Returns the rounded
    point and the association moves' collectives (None when no move pass runs)."""
    st, k, spread = run.st, run.k, run.spread
    u_rounded = _fix_indicators(st, relaxed_u)
    views = None
    if k.move_passes or k.refine_rounds or spread:
        views = run.evaluator.move_views() if run.dec else central_views(st)
    if spread:   # every process's copies of the rounded indicators: the owners' values
        u_rounded = views.sync(u_rounded)
        fix_indicators_at(st, u_rounded)
    return u_rounded, views


def _central_repair_and_polish(run: DecentralizedRun, u_rounded: np.ndarray) -> Solution:
    """decentralized-polish after rounding: the central association repair and the Ipopt
    polish with the binaries fixed (each evaluates P over the whole network)."""
    inst, bound, info = run.inst, run.bound, run.info
    rounded = clip_to_bounds(run.st.to_solution(u_rounded, method=run.method, status="rounded"),
                             inst, bound)
    t_r = time.perf_counter()
    rounded, info["association_moves"] = repair_associations(inst, rounded, bound=bound)
    info["repair_s"] = time.perf_counter() - t_r
    final, info["polish_status"], info["polish_s"] = _polish(
        inst, rounded, bound=bound, ipopt_options=run.ipopt_options)
    return final


@dataclass
class SearchBudget:
    """The search's budget after the first finished point, in network passes (a linearisation
    or an inner iteration: each touches every node's block once): `limit` = `search_budget` x
    the relaxed phase's passes, so the search costs at most a fixed multiple of the relaxed
    phase at every size. Every node counts the same passes (they follow the collectives'
    common decisions), so every node stops at the same point."""
    limit: float
    spent: int = 0
    finishing_phases: int = 0
    stopped: bool = False

    def charge(self, passes: int) -> None:
        self.spent += int(passes)

    def afford(self, passes: int = 0) -> bool:
        """Charge `passes`, then whether the search may start one more step (an estimate, a
        trial, a finishing phase); once False it stays False (`stopped`)."""
        self.charge(passes)
        self.stopped = self.stopped or self.spent >= self.limit
        return not self.stopped


def _phase_passes(records: list) -> int:
    """A phase's network passes: its outer iterations (one linearisation each) and inner
    iterations."""
    return len(records) + int(sum(r.inner["inner_iters"] for r in records))


def _afford(run: DecentralizedRun, passes: int = 0) -> bool:
    return run.budget is None or run.budget.afford(passes)


def _free_rows(st: DecStructure) -> np.ndarray:
    """(K,) bool: the rows that are not binary-forcing rows (the moves' violation checks)."""
    free = np.ones(st.n_rows, dtype=bool)
    free[st.force_rows] = False
    return free


def _linearise_fn(run: DecentralizedRun, kind: str = "linearise"):
    """The evaluation the moves use, `kind` "linearise" or "values" (J and C only: no
    gradient, no Jacobian): by messages (decentralized), or on global arrays (centralized-pd);
    each call is one network pass charged to the search's budget."""
    fn = getattr(run.evaluator if run.dec else run.st, kind)

    def counted(u: np.ndarray) -> Linearisation:
        if run.budget is not None:
            run.budget.charge(1)
        return fn(u)
    return counted


def _association_moves(run: DecentralizedRun, u_rounded: np.ndarray, views,
                       record: bool = True) -> np.ndarray:
    """Node-local association moves (`solvers/assoc_moves.py`, docs/decentralized.md
    "Association moves"): up to `move_passes` passes, each UE moving its uplink or downlink BS
    where that lowers J with the rest held."""
    st = run.st
    free = _free_rows(st)
    t_m = time.perf_counter()
    u_moved, moved = association_moves(
        st, u_rounded, free, linearise=_linearise_fn(run),
        views=views, passes=run.k.move_passes)
    if record:
        run.info.update(moved, association_s=time.perf_counter() - t_m)
    return u_moved


def _finishing_phase(run: DecentralizedRun, u_fixed: np.ndarray,
                     against: Candidate | None = None):
    """Phase 3: Alg. 1 with the indicators fixed, on the continuous variables; with
    `live_only` each host first drops its rows' Jacobian entries that the fixed indicators
    make zero. A search's trial gives the candidate `against` it must beat: its phase may
    stop "behind" (`run_sca`'s target, `aggregator_moves.target_of`). Returns (u, records,
    reason)."""
    st = run.st
    target = None if against is None else target_of(against, run.k.viol_tol)
    if run.k.live_only:   # each host drops its rows' entries that the fixed indicators kill
        run.inner.set_active(st.live_entries(
            u_fixed, run.evaluator.nodes if run.dec else range(st.n_nodes)))
    if run.budget is None:
        return run.run_phase(u_fixed, "fixed", target)
    u, records, reason = run.timed("finishing_s", run.run_phase, u_fixed, "fixed", target)
    run.budget.charge(_phase_passes(records))
    run.budget.finishing_phases += 1
    return u, records, reason


def _network_value(run: DecentralizedRun, u: np.ndarray) -> tuple[float, float]:
    """J at u (the nodes' objective shares summed over the spanning tree, and broadcast back so
    that every node holds it) and the largest scaled violation of the non-forcing rows (a
    max-reduce and broadcast); plain array operations in centralized-pd."""
    st, inner = run.st, run.inner
    free = _free_rows(st)
    if run.budget is not None:
        run.budget.charge(1)
    if not run.dec:
        lin = st.values(u)
        return float(lin.f), float(np.max(np.where(free, np.maximum(lin.c, 0.0), 0.0),
                                          initial=0.0))
    lin = run.evaluator.values(u)
    if not run.spread:   # spread: `values` already broadcast J from the root
        run.comm.broadcast(inner.gplan, np.array([lin.f]))
    return float(lin.f), inner.global_max(np.where(free, np.maximum(lin.c, 0.0), 0.0))


def _finish_point(run: DecentralizedRun, u: np.ndarray, views, start: str,
                  record: bool = False, against: Candidate | None = None) -> Candidate:
    """A finished candidate from the binary point u: its indicators fixed, the association
    moves, the finishing phase (Alg. 1, indicators fixed; a trial `against` an incumbent),
    scored by `_finished`."""
    fix_indicators_at(run.st, u)
    if run.k.move_passes:
        u = _association_moves(run, u, views, record=record)
    u_fin, records, reason = _finishing_phase(run, u, against)
    return _finished(run, u_fin, records, reason, start, views)


def _finished(run: DecentralizedRun, u_fin: np.ndarray, records: list, reason: str, start: str,
              views) -> Candidate:
    """The candidate of a finishing phase's point u_fin, scored as the decisions it holds are
    (`eqn:objective`): its epigraph variables at the max of their rows
    (`assoc_moves.tighten_epigraphs`: no slack above a max term, no max term's row left
    violated), then J and the violation by messages (`_network_value`). The network compares
    candidates by this J."""
    _u, J, viol = _tightened_value(run, u_fin, views)
    cand = Candidate(u=u_fin, J=J, viol=viol, records=records, reason=reason, start=start)
    run.finished.append(cand)
    return cand


def _estimate_point(run: DecentralizedRun, u: np.ndarray, views, start: str) -> Candidate:
    """The aggregator screen's estimate of the binary point u (no finishing phase): its
    indicators fixed, the epigraph variables of the max terms tightened on the other
    variables' values (`assoc_moves.tighten_epigraphs`, `eqn:objective`'s max terms at their
    rows' max), then J and the violation by messages (`_tightened_value`)."""
    fix_indicators_at(run.st, u)
    u, J, viol = _tightened_value(run, u, views)
    return Candidate(u=u, J=J, viol=viol, start=start)


def _tightened_value(run: DecentralizedRun, u: np.ndarray, views
                     ) -> tuple[np.ndarray, float, float]:
    """(u with its epigraph variables at the max of their rows, J there, its violation): one
    linearisation for the rows, `assoc_moves.tighten_epigraphs`, then `_network_value`."""
    st = run.st
    u = tighten_epigraphs(st, u, _linearise_fn(run)(u), _free_rows(st), views)
    return (u, *_network_value(run, u))


def _refine(run: DecentralizedRun, inc: Candidate, views) -> tuple[Candidate, dict[str, int]]:
    """Up to `refine_rounds` rounds from the finished candidate `inc`: the association moves
    at its finished point (`solvers/assoc_moves.py`: the priced passes, then the exact trials
    of the UEs whose leaving lets a shared max dA or dR fall, `exact_top_moves`), then, if a
    UE moved, a new finishing phase; the new candidate replaces `inc` only
    when it is better (`aggregator_moves.better`: J falls by the network's comparison), else
    the rounds stop, as they do when no UE moves. Returns the candidate and counts
    {"refine_rounds", "refine_moves", "refine_accepted"}."""
    st, k = run.st, run.k
    free = _free_rows(st)
    lin_fn, val_fn = _linearise_fn(run), _linearise_fn(run, "values")
    gmax = run.inner.global_max if run.dec else (lambda v: float(np.max(v, initial=0.0)))
    passes = max(1, k.move_passes)
    cnt = {"refine_rounds": 0, "refine_moves": 0, "refine_accepted": 0, "group_moves": 0,
           "group_trials": 0, "exact_trials": 0, "exact_screened": 0, "refine_subsets": 0,
           "refine_subset_moves": 0}
    timed = run.timed

    def afford(passes: int = 0) -> bool:
        return _afford(run, passes)
    for _ in range(k.refine_rounds):
        if not afford():
            break
        fix_indicators_at(st, inc.u)
        u_moved, moved = timed("priced_moves_s", association_moves, st, inc.u, free,
                               linearise=lin_fn, views=views, passes=passes)
        u_moved, exact = timed("exact_moves_s", exact_top_moves, st, u_moved, free,
                               linearise=lin_fn, values=val_fn, views=views, global_max=gmax,
                               viol_tol=k.viol_tol, passes=passes, afford=afford,
                               keep=k.move_screen)
        u_moved, group = timed("group_moves_s", exact_group_moves, st, u_moved, free,
                               linearise=lin_fn, values=val_fn, views=views, global_max=gmax,
                               viol_tol=k.viol_tol, passes=1, afford=afford,
                               keep=k.move_screen)
        cnt["refine_rounds"] += 1
        cnt["group_moves"] += group["group_moves"]
        cnt["group_trials"] += group["group_trials"]
        cnt["exact_trials"] += exact["exact_trials"]
        cnt["exact_screened"] += exact.get("exact_screened", 0)
        n_moved = moved["association_moves"] + exact["exact_moves"] + group["group_moves"]
        if n_moved == 0 or not afford():   # an unfinished moved point is never taken
            break
        cnt["refine_moves"] += n_moved
        u_fin, records, reason = _finishing_phase(run, u_moved, inc)
        cand = _finished(run, u_fin, records, reason, inc.start, views)
        if not better(cand, inc, k.viol_tol):
            inc, kept = _refine_subsets(run, inc, u_moved, views, cnt)
            if not kept:
                break
            continue
        inc = cand
        cnt["refine_accepted"] += 1
    fix_indicators_at(st, inc.u)
    return inc, cnt


#: levels of bisection after a refinement round's batch is rejected (1: its two halves)
SUBSET_DEPTH = 1


def _refine_subsets(run: DecentralizedRun, inc: Candidate, u_moved: np.ndarray, views,
                    cnt: dict) -> tuple[Candidate, list]:
    """A refinement round's moves, rejected together, split into batches of non-conflicting
    moves (`assoc_moves.move_components`: groups whose regions meet are one move) and
    bisected (`aggregator_moves.take_batch`, at most SUBSET_DEPTH levels): a subset is taken
    when its finished point is better than `inc`. Counts "refine_subsets" (finishing phases)
    and "refine_subset_moves" (moves taken)."""
    st, free = run.st, _free_rows(run.st)
    lin_fn = _linearise_fn(run)
    comps = move_components(st, moved_groups(st, inc.u, u_moved, views))
    if len(comps) < 2:
        return inc, []

    def finish(u: np.ndarray, against: Candidate) -> Candidate:
        fix_indicators_at(st, u)
        u = tighten_epigraphs(st, u, lin_fn(u), free, views)
        u_fin, records, reason = _finishing_phase(run, u, against)
        return _finished(run, u_fin, records, reason, inc.start, views)
    tally = BatchTally()
    half = len(comps) // 2
    out, kept = inc, []
    for part in (comps[:half], comps[half:]):
        out, acc = take_batch(out, part, finish, viol_tol=run.k.viol_tol, tally=tally,
                              afford=lambda: _afford(run), depth=SUBSET_DEPTH - 1)
        kept += acc
    cnt["refine_subsets"] += tally.phases
    cnt["refine_subset_moves"] += len(kept)
    fix_indicators_at(st, out.u)
    return out, kept


#: the search's counts in `info` (`aggregator_search`'s and `_refine`'s), summed over the starts
SEARCH_COUNTS = ("aggregator_trials", "aggregator_moves", "aggregator_visits",
                 "aggregator_screened", "aggregator_batches", "aggregator_batch_moves",
                 "aggregator_batch_dropped", "refine_rounds", "refine_moves", "refine_accepted",
                 "group_moves", "group_trials", "exact_trials", "exact_screened",
                 "refine_subsets", "refine_subset_moves")


def _aggregator_stage(run: DecentralizedRun, c: Candidate, views) -> tuple[Candidate, dict]:
    """`aggregator_search` from the finished candidate c, then, when an aggregator moved,
    `_refine` at the new point. Returns the candidate and the counts."""
    k = run.k
    best, cnt = aggregator_search(c, lambda u, inc: _finish_point(run, u, views, c.start,
                                                                  against=inc), run.st,
                                  passes=k.agg_passes, viol_tol=k.viol_tol, screen=k.agg_screen,
                                  estimate=lambda u: run.timed("estimate_s", _estimate_point,
                                                               run, u, views, c.start),
                                  afford=run.budget.afford)
    if k.refine_rounds and cnt["aggregator_moves"]:
        best, more = _refine(run, best, views)
        cnt = {key: cnt.get(key, 0) + more.get(key, 0) for key in SEARCH_COUNTS}
    return best, cnt


def _finish_and_search(run: DecentralizedRun, u_rounded: np.ndarray, views,
                       t1: float) -> Candidate:
    """Phases 2-3 and the search after them (`solvers/aggregator_moves.py`): the rounded
    point finished, then with `candidates` = 2 the rounding of the start w^0 finished too.
    The search then runs in two stages, the step that gains most per network pass first, so
    that a budget that ends the search early has spent it where it pays: stage 1 refines every
    start (`_refine`: association moves at its finished point); stage 2 visits the starts from
    the least J up, each with up to `agg_passes` passes of aggregator moves and, when an
    aggregator moved, `_refine` again (`_aggregator_stage`). The network keeps the candidate of
    least J. Records the first finishing phase and the search in `run.info`."""
    k, st = run.k, run.st
    first = _finish_point(run, u_rounded, views, "relaxed", record=True)
    run.info.update(stop_reason_finishing=first.reason,
                    outer_iterations_finishing=len(first.records),
                    finishing_s=time.perf_counter() - t1, objective_first=first.J)
    t_s = time.perf_counter()
    run.budget = budget = SearchBudget(limit=k.search_budget * run.relaxed_passes)
    found = [first]
    if k.candidates >= 2 and budget.afford():
        u_start, _ = _rounding(run, st.u0)
        found.append(_finish_point(run, u_start, views, "start"))
    counts = dict.fromkeys(SEARCH_COUNTS, 0)
    phases = {c.start: {"aggregator_s": 0.0, "refine_s": 0.0} for c in found}

    def stage(i: int, kind: str, step) -> None:
        t = time.perf_counter()
        found[i], cnt = step(run, found[i], views)
        phases[found[i].start][kind] += time.perf_counter() - t
        for key in SEARCH_COUNTS:
            counts[key] += cnt.get(key, 0)
    if k.refine_rounds:
        for i in range(len(found)):
            stage(i, "refine_s", _refine)
    for i in sorted(range(len(found)), key=lambda i: (found[i].viol > k.viol_tol, found[i].J)):
        stage(i, "aggregator_s", _aggregator_stage)
    run.budget = None
    run.info.update(search_stop="search budget" if budget.stopped else "completed",
                    search_passes=budget.spent, search_budget_passes=budget.limit,
                    search_finishing_phases=budget.finishing_phases, search_phases=phases,
                    search_times=dict(run.search_times))
    chosen = best_of(found, k.viol_tol)
    fix_indicators_at(st, chosen.u)
    if run.dec and run.msg_hist:   # the last evaluations' messages join the last outer's
        msgs, nbytes = run.comm.snapshot()
        run.msg_hist[-1] = (run.msg_hist[-1][0] + msgs, run.msg_hist[-1][1] + nbytes)
    run.finishing_records = [r for c in run.finished for r in c.records]
    run.info.update(counts, search_s=time.perf_counter() - t_s, candidate_chosen=chosen.start,
                    candidate_objectives=[c.J for c in found])
    return chosen


def _release(run: DecentralizedRun) -> None:
    """The structure's bounds back to the model's (the rounding fixed the indicators)."""
    run.st.reset_bounds()
    if run.spread:
        run.st.set_local(None)
        run.info["exchanges"] = run.comm.exchange_report(time.perf_counter() - run.t_start)


def _stop_reason(reason_relaxed: str, reason_finishing: str) -> str:
    """The run's stop reason: "converged" when the relaxed phase decided the binaries
    ("converged" or "binary") and the finishing phase converged; else the first phase's
    failure, or the finishing phase's reason."""
    relaxed_ok = reason_relaxed in ("converged", "binary")   # binaries decided either way
    if relaxed_ok and reason_finishing == "converged":
        return "converged"
    return reason_relaxed if not relaxed_ok else reason_finishing


def _message_counts(run: DecentralizedRun) -> dict[str, Any]:
    """Messages per node per outer iteration (max, mean) and in total (module docstring)."""
    M = np.array([h[0] for h in run.msg_hist], float)
    Bt = np.array([h[1] for h in run.msg_hist], float)
    return {"per_node_per_outer": {"count": {"max": float(M.max()), "mean": float(M.mean())},
                                   "bytes": {"max": float(Bt.max()), "mean": float(Bt.mean())}},
            "total_count": int(M.sum()), "total_bytes": int(Bt.sum()),
            "neighbours_only": run.neighbours_only}


def _result(run: DecentralizedRun, final: Solution, records: list, reason: str,
            t_sca: float, final_violation: float | None = None) -> Solution:
    """The returned solution: status and info, and its objective and terms as the harness's
    check `system.evaluate` computes them (reporting only; the method does not use it)."""
    info = run.info
    info.update(stop_reason=reason, outer_iterations=len(records),
                inner_iterations=int(sum(r.inner["inner_iters"] for r in records)),
                final_max_violation=final_violation if final_violation is not None
                else records[-1].violation if records else None,
                aggregators_final=[int(r.aggregator) for r in final.rounds],
                sca_s=time.perf_counter() - t_sca)
    if run.dec and run.msg_hist:
        info["messages"] = _message_counts(run)
    ev = system.evaluate(run.inst, final, bound=run.bound)
    final.method = run.method
    final.status = "converged" if reason == "converged" else reason
    final.objective, final.terms = ev.objective, ev.terms
    info.update(objective=ev.objective, feasible=ev.feasible, status=final.status,
                wall_s=time.perf_counter() - run.t_start)
    final.wall_s = info["wall_s"]
    final.info.update({k_: v for k_, v in info.items() if k_ != "constants"})
    return final


def solve_decentralized(inst: Instance, *, method: str = "decentralized",
                        consensus_rounds: int = 0, max_outer: int | None = None,
                        bound: str = "corollary",
                        constants: str | dict | PDConstants | None = None,
                        seed: int = 0, init: str = "relaxed", trace_path: str | Path | None = None,
                        progress: bool = False, ipopt_options: dict | None = None,
                        structure: DecStructure | None = None, comm: Comm | None = None
                        ) -> tuple[Solution | None, dict[str, Any]]:
    """Paper §V on `inst`; returns (a binary orchestration, info). See the module docstring.

    Phases: set-up, relaxed phase (Alg. 1), rounding, then either the central repair and
    polish (decentralized-polish) or the association moves and the finishing phase (Alg. 1
    with the indicators fixed), and the result.

    consensus_rounds: J (0 = as many as the relay depth). max_outer: cap per SCA phase (default
    `PDConstants.max_outer`). constants: "tuned" (default), "paper" or a dict of
    `primal_dual.PDConstants` fields. seed: recorded only (the method makes no random choice).
    init: "relaxed" (indicators at the simplex centres) or "reference" (a binary start: the
    forcing penalty then keeps the reference aggregator and associations). progress: a tqdm
    bar of the outer iterations on stderr (MPI: process 0 only). structure: a
    prebuilt `sca.build_structure` for the same instance/bound/init (benchmarks reuse it).
    comm: the message passing (default: a `LocalComm`, every node in this process); with an
    `mpi_backend.MpiComm` (method "decentralized" only) each process evaluates the providers
    of its own nodes (`comm.local_nodes()`), steps the shared variables they are primary of
    and hosts their rows; every decision comes from collectives over the graph; process 0
    gathers the primaries' values and returns the solution, the others return (None, info)."""
    _check_arguments(method, init, max_outer, consensus_rounds)
    run = _setup(inst, method=method, consensus_rounds=consensus_rounds, max_outer=max_outer,
                 bound=bound, constants=constants, seed=seed, init=init, progress=progress,
                 ipopt_options=ipopt_options, structure=structure, comm=comm)
    t0 = time.perf_counter()
    relaxed_u, relaxed_records, reason_relaxed = _relaxed_phase(run)
    t1 = time.perf_counter()
    run.info["relaxed_s"] = t1 - t0
    u_rounded, views = _rounding(run, relaxed_u)
    if method == "decentralized-polish":
        final = _central_repair_and_polish(run, u_rounded)
        reason_finishing, finishing_records, final_violation = reason_relaxed, [], None
    else:
        chosen = _finish_and_search(run, u_rounded, views, t1)
        u_final, reason_finishing = chosen.u, chosen.reason
        finishing_records, final_violation = run.finishing_records, chosen.viol
        if run.spread:
            u_final = _gather_primaries(run.st, run.comm, u_final)
            if u_final is None:   # not process 0: the solution is written there
                _release(run)
                run.info.update(rank=run.comm.rank, wall_s=time.perf_counter() - run.t_start)
                return None, run.info
        status = reason_finishing if reason_finishing in ("converged", "stalled") \
            else "iteration_limit"
        final = clip_to_bounds(run.st.to_solution(u_final, method=method, status=status), inst,
                               bound)
    _release(run)
    if run.spread:
        run.info["rank"] = run.comm.rank
    final = _result(run, final, relaxed_records + finishing_records,
                    _stop_reason(reason_relaxed, reason_finishing), t0, final_violation)
    if trace_path is not None:
        write_trace(trace_path, run.rows)
    run.info["trace"] = run.rows
    return final, run.info


def write_trace(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """The trace rows as CSV (TRACE_FIELDS; floats with 10 significant digits), written by the
    project's one writer (`cefl_opt.io.write_atomic`)."""
    import io

    from cefl_opt.io import write_atomic
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=TRACE_FIELDS)
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.10g}" if isinstance(v, float) else v) for k, v in r.items()})
    write_atomic(path, buf.getvalue())


# ---------------------------------------------------------------------- solver registry
def run_method(inst: Instance, opts, name: str):
    """`solve(inst, name, ...)` for name in METHODS: `opts` (a
    `solvers.options.DecentralizedOptions`) mapped onto `solve_decentralized`; registered in
    `solvers/plugins.py`."""
    from .base import Results, SolutionStatus, TerminationCondition
    comm = make_comm(inst, opts.backend, name)
    sol, info = solve_decentralized(
        inst, method=name, consensus_rounds=opts.consensus_rounds, bound=opts.bound,
        constants=resolve_constants(opts.constant_overrides()),  # max_outer included
        seed=opts.seed, init=opts.init, trace_path=opts.trace_path if info_rank(comm) == 0 else None,
        progress=opts.progress, ipopt_options=opts.ipopt_options, comm=comm)
    info = {k_: v for k_, v in info.items() if k_ != "trace"}
    if sol is None:   # an MPI process other than 0: process 0 returns the solution
        return Results(method=name, termination_condition=TerminationCondition.unknown,
                       solution_status=SolutionStatus.noSolution, solution=None,
                       objective=None, wall_s=info["wall_s"], iterations=0,
                       rank=info.get("rank", 0), info=info)
    tc = {"converged": TerminationCondition.locallyOptimal,
          "stalled": TerminationCondition.stalled}.get(info["stop_reason"],
                                                       TerminationCondition.iterationLimit)
    return Results(method=name, termination_condition=tc,
                   solution_status=SolutionStatus.feasible if info["feasible"]
                   else SolutionStatus.infeasible,
                   solution=sol, objective=sol.objective, wall_s=info["wall_s"],
                   iterations=info["outer_iterations"], rank=info.get("rank", 0),
                   accounting=_accounting(info), info=info)


def _accounting(info: dict) -> "DecentralizedAccounting":
    """The typed summary of a run's record (`Results.accounting`)."""
    from .base import DecentralizedAccounting
    per = info.get("messages", {}).get("per_node_per_outer", {}).get("count", {})
    return DecentralizedAccounting(
        stop_reason=info["stop_reason"], outer_iterations=info["outer_iterations"],
        inner_iterations=info["inner_iterations"],
        central_steps=tuple(info["central_steps"]),
        messages_per_node_outer_mean=per.get("mean"),
        messages_per_node_outer_max=per.get("max"))


def make_comm(inst: Instance, backend: str, method: str) -> Comm | None:
    """The message passing of `backend`: None for "local" (`solve_decentralized` builds its
    `LocalComm`); for "mpi" an `MpiComm` over the processes of this MPI launch (METIS
    partition balancing `node_weights`: work and memory; outside mpiexec, or with more
    processes than nodes, a ValueError on every process before any message)."""
    if backend == "local":
        return None
    if backend != "mpi":
        raise ValueError(f"option '--backend': {backend!r} is not one of 'local', 'mpi'")
    if method != "decentralized":
        raise ValueError(f"option '--backend mpi' runs method 'decentralized' only, not "
                         f"{method!r}")
    from .mpi_backend import MpiComm, mpi_world, node_weights
    world = mpi_world()
    names = inst.node_names()
    if world.Get_size() > len(names):
        raise ValueError(f"option '--backend mpi': {world.Get_size()} MPI ranks for "
                         f"{len(names)} network nodes: use at most {len(names)} ranks (each "
                         f"rank needs at least one node)")
    return MpiComm(inst.graph(), names, world=world, weights=node_weights(inst), missing=0.0)


def info_rank(comm: Comm | None) -> int:
    """This process's MPI rank (0 without MPI)."""
    return int(getattr(comm, "rank", 0))


def run_decentralized(inst: Instance, opts):
    return run_method(inst, opts, "decentralized")


def run_decentralized_polish(inst: Instance, opts):
    return run_method(inst, opts, "decentralized-polish")


def run_centralized_pd(inst: Instance, opts):
    return run_method(inst, opts, "centralized-pd")
