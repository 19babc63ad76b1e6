"""Inner solver of the SCA surrogates (paper Alg. `alg:dist_opt_algo main`), per node.

Surrogate at u^l (u-space of `sca.py`, du = u - u^l, one entry per shared variable):
    min  g^T du + 1/2 sum_i q_i du_i^2                         over u in prod_d D_d
    s.t. C~_k(u) = c_k + a_k^T du + L_k/2 |du_{S_k}|^2 <= 0     (coupling rows, host node)
with per-variable prox weights q (lambda1 by default) and per-row prox weights L (0 for the
concave forcing rows, whose linearisation already bounds them from above). Forcing rows may
instead enter the objective as a penalty rho * C~_k (a fixed multiplier rho, `fixed`).

Method (`inner="pdhg"`, default): primal-dual hybrid gradient with the diagonal steps of Pock
and Chambolle (2011, alpha = 1): tau_i = 1/sum_k |a_ki| per shared variable, sigma_k =
1/sum_i |a_ki| per row, each computed from the node's own rows and one reduce. For multipliers
y the Lagrangian is separable per shared variable, with gradient G_i = g_i + sum_k y_k a_ki and
curvature H_i = q_i + sum_k y_k L_k [i in S_k]; the primal step is exact:
    u+ = argmin_{u in D} G^T du + H/2 du^2 + 1/(2 tau) |du - du_prev|^2
(a clip for box variables, the weighted projection `projections.project_weighted` for the
simplices and knapsacks), then y+ = [y + sigma C~(2 u+ - u)]^+ (capped at dual_cap).
Warm-started (primal and dual) across outer iterations; stops when the KKT residual (primal
feasibility, complementarity, primal change / tau) is below the tolerance.
`inner="fista"`: accelerated dual ascent (exact primal minimiser for y, FISTA on the concave
dual with per-row steps rel / D_k, D_k = sum_j |a_kj| sum_l |a_lj| / q_j, a Gershgorin bound of
the dual Hessian; periodic restart). Measured on a paper-size surrogate (T = 2): KKT residual
after 300 / 1000 / 3000 inner iterations 1.6e-3 / 1.5e-4 / 2.6e-6 with PDHG, 1.1e-2 after 300
and no better than 2e-3 after 3000 with FISTA (the Gershgorin steps of the UE delay rows, which
share R_bs and dA with many rows, are ~1/500).

Who does what (`mode="decentralized"`, every step node-local plus `Comm` messages):
  * the primary of shared variable i computes G_i, H_i, u_i (it receives the terms y_k a_ki,
    y_k L_k of every row k that reads i by `Comm.reduce_product`, 2 floats per entry: each
    host applies its own per-surrogate maps, `_term_maps`, to its rows' multipliers);
  * du reaches every node holding a copy or reading it by `Comm.broadcast_sum` (1 float),
    whose host maps (`_row_maps`) give its rows' a_k^T du and L_k/2 |du|^2;
  * the host of row k keeps Lam_k (only its own rows: sparse duals) and updates it from
    C~_k, which it evaluates on its copies;
  * every 10 iterations the largest KKT residual is combined by a max-reduce over a spanning
    tree (1 float per node) and the stop flag broadcast back.
`mode="centralized"` (the `centralized-pd` method): the same iteration on global arrays (no
messages); it computes the same iterates (tests: sparse per-node form == global form).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse as sp
from numba import njit

from .dec_comm import Comm, summer
from .sca import DecStructure, Linearisation


@dataclass(frozen=True)
class PDConstants:
    """Algorithm constants (tuned defaults; README). inner: "pdhg" or "fista" (module docstring).
    lambda1: prox weight of the objective (u-space), added to the diagonal of the Hessian of the
    Lagrangian (PyNumero, per node) when `curvature`. L_C: initial prox weight of each
    non-forcing coupling row (raised when the surrogate missed the row, decays otherwise).
    zeta: outer step. rel: step factor (PDHG: tau, sigma divided / multiplied by it; FISTA:
    sigma_k = rel / D_k). restart: FISTA restart period. inner_iters: cap per surrogate.
    inner_tol, tol_ratio: the inner loop stops at KKT residual max(inner_tol, min(1e-4,
    tol_ratio x last outer step)). outer_tol, stat_tol: the SCA stops when ||u_hat - u||_inf <=
    outer_tol or max_i q_i |u_hat_i - u_i| <= stat_tol (with the violation and binary tests).
    viol_tol: largest scaled violation accepted at the stop. force_after: outer iterations
    without the forcing penalty. rho0, rho_growth, rho_max: forcing penalty weight, its growth
    per outer iteration while an indicator is fractional, its cap. max_outer: cap per phase.
    dual_cap: upper bound on every multiplier (an exact l1 penalty dual_cap * max(C~_k, 0) in
    the primal: an infeasible surrogate, e.g. at the relaxed start, keeps a bounded dual and its
    solution reduces the violation). restore: after each outer step, move the epigraph
    variables of the max terms until their rows hold (`sca.restore_epigraphs`). prox_min:
    floor of the per-variable factor on lambda1 (`sca._adapt_prox`; 1 turns it off).
    binary_patience: the relaxed phase stops ("binary") once every indicator has been binary
    and the rows held for this many consecutive outer iterations (the binaries are then
    decided; the finishing phase optimises the rest with them fixed); 0: only on convergence.
    live_only: in the finishing phase, the surrogates' rows keep only the Jacobian entries that
    can be nonzero with the indicators fixed (`sca.DecStructure.live_entries`).
    descent: in the finishing phase, a step that raises J is rejected (zeta halved).
    stall_tol, stall_window: the finishing phase stops ("stalled") when J fell by at most
    stall_tol x max(1, |J|) over the last stall_window outer iterations, accepted or rejected
    (0: off).
    trial_cutoff: a search's trial finishing phase (one that must end below the incumbent's J
    to be taken) stops ("behind") when J is still above that by more than trial_cutoff times
    its fall over the last two outer iterations (`sca.run_sca`; 0: off).
    move_passes: passes of association moves between rounding and the finishing phase
    (`solvers/assoc_moves.py`; 0: off).
    agg_passes: coordinate passes of aggregator moves over (round, DC) after the first
    finished point, each move accepted only when the finished J falls
    (`solvers/aggregator_moves.py`; 0: off).
    candidates: starts whose finished points are searched and compared by the network's
    minimum of J: 1, the relaxed phase's rounding; 2, also the rounding of the start w^0.
    agg_screen: the most aggregator trials a visit finishes: with more other DCs, the trials
    are ranked by a cheap estimate (the epigraphs tightened, no finishing phase) and the best
    agg_screen of them are finished (`solvers/aggregator_moves.py`).
    move_screen: the most exact trials per UE or BS group in a refinement round's exact and
    group moves (`solvers/assoc_moves.py`): with more, every trial point is first estimated
    (its epigraphs tightened, the linearisation's prediction of J, no evaluation of the
    nodes' blocks) and only this many best estimates are evaluated exactly (0: every one).
    refine_rounds: after each candidate's search, rounds of association moves at its finished
    point followed by a new finishing phase, each kept only when the finished J falls (stops
    at the first round that moves nothing or does not lower J; 0: off).
    search_budget: the search after the first finished point (every move kind, its estimates
    and finishing phases) may spend this many times the relaxed phase's network passes (outer
    plus inner iterations; a linearisation or an inner iteration is one pass); when they run
    out the search stops with `search_stop` "search budget" and keeps the best point so far."""
    lambda1: float = 0.03
    L_C: float = 0.1
    zeta: float = 1.0
    rel: float = 1.0
    restart: int = 200
    inner_iters: int = 300
    inner_tol: float = 1e-8
    outer_tol: float = 1e-4
    stat_tol: float = 1e-5
    L_max: float = 1e6
    viol_tol: float = 1e-6
    force_after: int = 10
    rho0: float = 1e-3
    rho_growth: float = 1.5
    rho_max: float = 1e2
    max_outer: int = 200
    dual_cap: float = 1e3
    curvature: bool = True
    tol_ratio: float = 0.1
    inner: str = "pdhg"
    restore: bool = True
    prox_min: float = 1e-3
    binary_patience: int = 10
    live_only: bool = True
    descent: bool = True
    stall_tol: float = 1e-4
    stall_window: int = 5
    trial_cutoff: float = 5.0
    move_passes: int = 5
    agg_passes: int = 3
    candidates: int = 2
    refine_rounds: int = 3
    agg_screen: int = 3
    move_screen: int = 1
    search_budget: float = 10.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


TUNED = PDConstants()
#: The paper's table gives kappa = epsilon = 0.001 (dual steps), zeta = 0.01, z = 0.02. Here
#: the Pock-Chambolle steps replace kappa/epsilon and exact finite-time aggregation replaces z;
#: "paper" keeps the paper's outer step zeta = 0.01 (with a larger iteration cap).
PAPER = replace(TUNED, zeta=0.01, max_outer=2000)
PRESETS = {"paper": PAPER, "tuned": TUNED}


def resolve_constants(constants: str | dict | PDConstants | None) -> PDConstants:
    if constants is None:
        return TUNED
    if isinstance(constants, PDConstants):
        return constants
    if isinstance(constants, str):
        if constants not in PRESETS:
            raise ValueError(f"constants {constants!r}: expected one of {sorted(PRESETS)} "
                             "or a dict")
        return PRESETS[constants]
    d = dict(constants)
    base = PRESETS[d.pop("preset", "tuned")]
    unknown = set(d) - set(PDConstants.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown constant(s) {sorted(unknown)}; known: "
                         f"{sorted(PDConstants.__dataclass_fields__)}")
    return replace(base, **d)


class InnerSolver:
    """The inner method on a sequence of surrogates (module docstring).

    Its collectives are public, for the decentralised method's stop tests, moves and finishing
    phase: `global_max`, `global_max_var` and `global_sum` over rows and shared variables,
    `global_sum_nodes` over per-node arrays, `nonzero_view` (a step at every Jacobian
    nonzero), and `tree_entry`, this process's entry of the spanning-tree plan `gplan`. Each
    is one exchange over neighbour links (decentralized) or a plain numpy reduction
    (centralized)."""

    def __init__(self, st: DecStructure, consts: PDConstants, *, mode: str = "decentralized",
                 comm: Comm | None = None):
        if mode not in ("centralized", "decentralized"):
            raise ValueError(f"mode {mode!r}: expected 'centralized' or 'decentralized'")
        if mode == "decentralized" and comm is None:
            raise ValueError("decentralized mode needs a Comm")
        self.st, self.k, self.mode, self.comm = st, consts, mode, comm
        K = st.n_rows
        self.lam = np.zeros(K)
        self.du_prev: np.ndarray | None = None
        self.rows, self.cols = st.jac_rows, st.jac_cols
        if mode == "decentralized":
            self.plan = comm.plan(st.primary, st.members)
            pl = self.plan
            key = pl.entry_node * st.n + pl.entry_q
            want = st.row_host[self.rows] * st.n + self.cols
            pos = np.searchsorted(key, want)
            if not np.all(key[np.minimum(pos, len(key) - 1)] == want):
                raise AssertionError("a row reads a shared variable its host does not hold")
            self.jent = pos                           # entry (host, variable) of each nonzero
            V = st.n_nodes
            hub = int(np.argmax([len(a) for a in comm.adj]))
            self.gplan = comm.plan(np.array([hub]), [np.arange(V)])   # spanning tree
            self.E = len(pl.entry_q)
            # this process's entry of the spanning tree (any node it holds: all equal)
            self.tree_entry = int(self.gplan.entry_ptr[int(comm.local_nodes()[0])])
            self._row_groups = _groups(st.row_host)
            self._var_groups = _groups(st.primary)
        self._own_nz = self._own_nonzeros()
        self.set_active(None)

    def _own_nonzeros(self) -> np.ndarray | None:
        """(nnz,) bool: the Jacobian entries of the rows this process's nodes host, when it
        holds some nodes only (one MPI rank); None when it holds them all."""
        if self.mode != "decentralized":
            return None
        own = np.zeros(self.st.n_nodes, dtype=bool)
        own[self.comm.local_nodes()] = True
        return None if own.all() else own[self.st.row_host[self.rows]]

    def set_active(self, live: np.ndarray | None) -> None:
        """Build the surrogates' maps over the live Jacobian entries only (`live`: (nnz,)
        bool from `DecStructure.live_entries`, or None: all). A dead entry's variable is fixed
        or the row does not depend on it under the current bounds, so it drops out of a_k and
        of S_k (the row's prox term) alike: the same surrogate rows, fewer products. A process
        holding some nodes only keeps its own rows' entries (`_own_nonzeros`): the other rows
        are other processes', and their maps would be built on values it does not hold."""
        st = self.st
        if self._own_nz is not None:
            live = self._own_nz if live is None else np.asarray(live, dtype=bool) & self._own_nz
        full = self.jent if self.mode == "decentralized" else self.cols
        n_ent = self.E if self.mode == "decentralized" else st.n
        K = st.n_rows
        self.live = None if live is None else np.asarray(live, dtype=bool)
        self._sel = None if live is None else np.flatnonzero(self.live)
        rows = self.rows if live is None else self.rows[self._sel]
        ent = full if live is None else full[self._sel]
        self._arows, self._aent = rows, ent
        self._aindptr = np.searchsorted(rows, np.arange(K + 1)).astype(np.int64)
        self._S_cols = summer(ent, n_ent)
        order = np.lexsort((rows, ent))   # pattern of the maps multiplier -> entry term
        self._tpat = (order, rows[order], np.searchsorted(ent[order], np.arange(n_ent + 1)),
                      (n_ent, K))

    def _live(self, a: np.ndarray) -> np.ndarray:
        """Per-nonzero values (all of the Jacobian's) at the live entries."""
        return a if self._sel is None else a[self._sel]

    # ---------------------------------------------------------------- messages
    def _term_maps(self, a: np.ndarray, LL: np.ndarray) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        """For one surrogate: the maps m -> (sum_k m_k a_ki, sum_k m_k L_k) per entry (a row
        host's copy of variable i; centralized: i itself), i.e. each host's sums over its own
        rows (one sparse matrix per value, fixed pattern)."""
        order, ind, ptr, shape = self._tpat
        return (sp.csr_matrix((a[order], ind, ptr), shape=shape),
                sp.csr_matrix((LL[order], ind, ptr), shape=shape))

    def _row_terms(self, maps: tuple, mult: np.ndarray) -> np.ndarray:
        """(n, 2): per shared variable i, (sum_k m_k a_ki, sum_k m_k L_k) over the rows touching
        it, m the rows' multipliers (forcing rows: their fixed penalty weights); the hosts'
        sums reach the primaries by one reduce (2 floats per entry)."""
        if self.mode == "centralized":
            return np.column_stack([maps[0] @ mult, maps[1] @ mult])
        return self.comm.reduce_product(self.plan, maps, mult)

    def _gather_cols(self, per_nz: np.ndarray) -> np.ndarray:
        """Sum of per-nonzero row terms into their shared variables (hosts -> primaries);
        per_nz may have a second axis (several values per nonzero, sent together)."""
        if self.mode == "centralized":
            return self._S_cols @ per_nz
        return self.comm.reduce(self.plan, self._S_cols @ per_nz)

    def global_max(self, per_row: np.ndarray, per_var: np.ndarray | None = None) -> float:
        """Largest value over all rows (at their hosts) and, if given, over all shared
        variables (at their primaries), at least 0: each node's max, max-reduced over a
        spanning tree and broadcast back (decentralized); np.max (centralized)."""
        if self.mode == "centralized":
            top = float(np.max(per_row, initial=0.0))
            return top if per_var is None else max(top, float(np.max(per_var, initial=0.0)))
        V = self.st.n_nodes
        node_max = np.zeros(V)
        if len(per_row):
            _group_max(node_max, per_row, self._row_groups)
        if per_var is not None and len(per_var):
            _group_max(node_max, per_var, self._var_groups)
        return self.comm.global_max(self.gplan, node_max[self.gplan.entry_node])

    def global_max_var(self, per_var: np.ndarray) -> float:
        """Largest value over all shared variables (at their primaries), at least 0."""
        return self.global_max(np.zeros(0), per_var)

    def global_sum(self, per_row: np.ndarray, per_var: np.ndarray | None = None) -> float:
        """Sum over all rows (at their hosts) and, if given, over all shared variables (at
        their primaries): each node's sum, summed over a spanning tree and broadcast back
        (decentralized); np.sum (centralized)."""
        if self.mode == "centralized":
            top = float(np.sum(per_row))
            return top if per_var is None else top + float(np.sum(per_var))
        V = self.st.n_nodes
        node_sum = np.zeros(V)
        if len(per_row):
            node_sum += np.bincount(self.st.row_host, weights=np.asarray(per_row, float),
                                    minlength=V)
        if per_var is not None and len(per_var):
            node_sum += np.bincount(self.st.primary, weights=np.asarray(per_var, float),
                                    minlength=V)
        return float(self._tree_sum(node_sum))

    def _tree_sum(self, per_node: np.ndarray) -> np.ndarray:
        """The sum over the nodes of per-node values (a second axis travels along), reduced
        over the spanning tree and broadcast back: every process gets the same value."""
        top = self.comm.reduce(self.gplan, per_node[self.gplan.entry_node])
        return self.comm.broadcast(self.gplan, top)[self.tree_entry]

    def global_sum_nodes(self, per_node: np.ndarray) -> np.ndarray:
        """(K,) sums over the nodes of a (V, K) array whose rows this process fills for its own
        nodes (zeros elsewhere): `_tree_sum` (decentralized); a plain column sum
        (centralized)."""
        per_node = np.asarray(per_node, float)
        if self.mode == "centralized":
            return per_node.sum(axis=0)
        return np.asarray(self._tree_sum(per_node), float)

    def nonzero_view(self, du: np.ndarray) -> np.ndarray:
        """du at every Jacobian nonzero as its row's host holds it (broadcast)."""
        if self.mode == "centralized":
            return du[self.cols]
        return self.comm.broadcast_take(self.plan, du, self.jent)

    def _row_maps(self, a: np.ndarray, L: np.ndarray) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        """For one surrogate: each host's maps from its copies d of du to its rows' terms
        a_k^T d and L_k/2 |d_{S_k}|^2 (the latter applied to d^2); columns are the hosts'
        entries (centralized: the shared variables)."""
        cols, ptr = self._aent, self._aindptr
        shape = (self.st.n_rows, self.E if self.mode == "decentralized" else self.st.n)
        maps = (sp.csr_matrix((a, cols, ptr), shape=shape, copy=True),
                sp.csr_matrix((0.5 * L[self._arows], cols, ptr), shape=shape, copy=True))
        for M in maps:      # a zero coefficient adds 0 to its row's sum (d is finite)
            M.eliminate_zeros()
        return maps

    def _row_values(self, c: np.ndarray, maps: tuple, du: np.ndarray) -> np.ndarray:
        """C~_k(u) = c_k + a_k^T du + L_k/2 |du_{S_k}|^2 at the hosts (from their copies of du,
        received by one broadcast)."""
        if self.mode == "centralized":
            out = maps[0] @ du
            out += maps[1] @ (du * du)
        else:
            out = self.comm.broadcast_sum(self.plan, du, maps, (1, 2))
        out += c
        return out

    def _row_values_pair(self, c: np.ndarray, maps: tuple, d1: np.ndarray, d2: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """`_row_values` at d1 and at d2 (decentralized: both in one `Comm.broadcast_sums`)."""
        if self.mode == "centralized":
            return self._row_values(c, maps, d1), self._row_values(c, maps, d2)
        out = self.comm.broadcast_sums(self.plan, [d1, d2], maps, (1, 2))
        for o in out:
            o += c
        return out[0], out[1]

    # ---------------------------------------------------------------- one surrogate
    def dual_steps(self, lin: Linearisation, q: np.ndarray, free: np.ndarray) -> np.ndarray:
        """sigma_k = rel / D_k over the rows in `free` (0 elsewhere)."""
        rows = self._arows
        absa = np.abs(self._live(lin.a)) * free[rows]
        colsum = self._gather_cols(absa)
        w = colsum / q
        wn = self._live(self.nonzero_view(w))
        D = np.bincount(rows, weights=absa * wn, minlength=self.st.n_rows)
        return np.where(free & (D > 0), self.k.rel / np.maximum(D, 1e-300), 0.0)

    def solve(self, lin: Linearisation, q: np.ndarray, L: np.ndarray, free: np.ndarray,
              fixed: np.ndarray, tol: float) -> tuple[np.ndarray, dict[str, Any]]:
        """Solve the surrogate at lin.u. free: rows treated as constraints (multipliers
        updated); fixed: multipliers held (the forcing penalty; 0 for rows left out).
        Returns (u_hat, stats)."""
        st, k = self.st, self.k
        ul = lin.u
        if k.inner == "pdhg":
            return self._solve_pdhg(lin, q, L, free, fixed, tol)
        sigma = self.dual_steps(lin, q, free)
        lam = np.where(free, self.lam, 0.0)
        y = lam.copy()
        t = 1.0
        res = np.inf
        it = 0
        a = self._live(lin.a)
        maps = self._term_maps(a, L[self._arows])
        rmaps = self._row_maps(a, L)
        for it in range(1, k.inner_iters + 1):
            GH = self._row_terms(maps, np.where(free, y, fixed))
            H = q + GH[:, 1]
            v = ul - (lin.g + GH[:, 0]) / H
            du = st.project(v, 1.0 / H) - ul
            Ct = self._row_values(lin.c, rmaps, du)
            lam_new = np.where(free, np.clip(y + sigma * Ct, 0.0, k.dual_cap), 0.0)
            if it % 10 == 0 or it == k.inner_iters:
                kkt = np.where(free, np.abs(np.clip(y + Ct, 0.0, k.dual_cap) - y), 0.0)
                res = self.global_max(np.maximum(kkt, np.where(free, Ct, 0.0)))
                if res <= tol:
                    lam = lam_new
                    break
            t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
            if it % k.restart == 0:
                t_new = 1.0
                y = lam_new
            else:
                y = lam_new + ((t - 1.0) / t_new) * (lam_new - lam)
            lam, t = lam_new, t_new
        self.lam = np.where(free, lam, self.lam)
        return ul + du, {"inner_iters": it, "residual": res}

    def _solve_pdhg(self, lin, q, L, free, fixed, tol):
        """Primal-dual hybrid gradient with Pock-Chambolle diagonal steps (alpha = 1):
        tau_i = 1/sum_k |a_ki|, sigma_k = 1/sum_i |a_ki| (each from the node's own data)."""
        st, k = self.st, self.k
        ul = lin.u
        a = self._live(lin.a)
        tau_inv, sigma = self._pd_steps(a, free)
        held = np.flatnonzero(~free)
        held_y = np.broadcast_to(np.asarray(fixed, float), free.shape)[held]
        q = np.ascontiguousarray(np.broadcast_to(q, (st.n,)), dtype=float)   # once, not per step
        y = np.where(free, self.lam, fixed)   # the multipliers the rows send (held: fixed)
        du = self.du_prev if (self.du_prev is not None and len(self.du_prev) == st.n) \
            else np.zeros(st.n)
        du = st.project(ul + du) - ul
        maps = self._term_maps(a, L[self._arows])
        rmaps = self._row_maps(a, L)
        res = np.inf
        it = 0
        for it in range(1, k.inner_iters + 1):
            du_new = self._primal_step(lin, q, tau_inv, self._row_terms(maps, y), du)
            d_bar = 2.0 * du_new
            d_bar -= du
            check = it % 10 == 0 or it == k.inner_iters
            if check:      # C~ at d_bar (the step) and at du_new (the KKT test), sent together
                Ct, Cn = self._row_values_pair(lin.c, rmaps, d_bar, du_new)
            else:
                Ct = self._row_values(lin.c, rmaps, d_bar)
            y_new = self._dual_step(y, sigma, Ct, held, held_y)
            if check:
                res = self._kkt(Cn, du_new, du, y_new, free, tau_inv)
                if res <= tol:
                    du, y = du_new, y_new
                    break
            du, y = du_new, y_new
        self.du_prev = du
        self.lam = np.where(free, y, self.lam)
        return ul + du, {"inner_iters": it, "residual": res}

    def _pd_steps(self, a: np.ndarray, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """PDHG steps over the rows in `free`: (1/tau per shared variable, sigma per row)."""
        k = self.k
        absa = np.abs(a) * free[self._arows]
        colsum = self._gather_cols(absa)
        tau_inv = np.maximum(colsum, 1e-12) * k.rel
        rowsum = np.bincount(self._arows, weights=absa, minlength=self.st.n_rows)
        sigma = np.where(free & (rowsum > 0), 1.0 / (k.rel * np.maximum(rowsum, 1e-300)), 0.0)
        return tau_inv, sigma

    def _primal_step(self, lin: Linearisation, q: np.ndarray, tau_inv: np.ndarray,
                     GH: np.ndarray, du: np.ndarray) -> np.ndarray:
        """du+ = argmin over D of G^T du + H/2 du^2 + 1/(2 tau) |du - du_prev|^2, with
        G = g + GH[:, 0], H = q + GH[:, 1] + 1/tau (module docstring; q one float per shared
        variable): the unconstrained minimiser clipped to the bounds (`_prox_point`), then the
        groups' projections in the metric 1/H."""
        st, n = self.st, len(du)
        v, w, out = np.empty(n), np.empty(n), np.empty(n)
        _prox_point(du, tau_inv, lin.g, GH[:, 0], GH[:, 1], q, lin.u, st.lo, st.hi, v, w, out)
        st.project_groups(v, w, out)
        out -= lin.u
        return out

    def _dual_step(self, y: np.ndarray, sigma: np.ndarray, Ct: np.ndarray, held: np.ndarray,
                   held_y: np.ndarray) -> np.ndarray:
        """y+ = clip(y + sigma C~, 0, dual_cap), held_y at the held rows (in Ct's array)."""
        z = np.multiply(sigma, Ct, out=Ct)
        z += y
        np.clip(z, 0.0, self.k.dual_cap, out=z)
        z[held] = held_y
        return z

    def _kkt(self, Cn, du_new, du, y_new, free, tau_inv) -> float:
        """Largest KKT residual over all rows and shared variables (dual: complementarity and
        feasibility at du_new, Cn = C~(du_new); primal: |du_new - du| / tau)."""
        cap = self.k.dual_cap
        kkt = np.where(free, np.abs(np.clip(y_new + Cn, 0.0, cap) - y_new), 0.0)
        pr = np.abs(du_new - du) * tau_inv       # at the primaries
        return self.global_max(np.maximum(kkt, np.where(free, Cn, 0.0)), pr)


@njit(cache=True, nogil=True, error_model="numpy")
def _prox_point(du, tau_inv, g, G0, G1, q, u, lo, hi, v, w, out) -> None:
    """Per shared variable, in the operations and order of numpy's array form: H = (q + G1)
    + 1/tau, v = ((du / tau - g) - G0) / H + u, w = 1 / H, and out = v clipped to [lo, hi]
    with numpy's maximum then minimum (a NaN propagates)."""
    for i in range(len(v)):
        h = (q[i] + G1[i]) + tau_inv[i]
        vi = ((du[i] * tau_inv[i] - g[i]) - G0[i]) / h + u[i]
        v[i] = vi
        w[i] = 1.0 / h
        a = vi if (vi >= lo[i] or vi != vi) else lo[i]
        out[i] = a if (a <= hi[i] or a != a) else hi[i]


def _groups(owner: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Values indexed like `owner` grouped by owner: (order, or None where `owner` is sorted;
    the start of each group in the ordered values; the owner of each group)."""
    owner = np.asarray(owner)
    order = np.argsort(owner, kind="stable")
    if np.array_equal(order, np.arange(len(owner))):
        order = None
    nodes, starts = np.unique(owner if order is None else owner[order], return_index=True)
    return order, starts, nodes


def _group_max(out: np.ndarray, vals: np.ndarray, groups: tuple) -> None:
    """out[d] = max(out[d], max of vals over owner d) (`np.maximum.at` by groups)."""
    order, starts, nodes = groups
    v = vals if order is None else vals[order]
    out[nodes] = np.maximum(out[nodes], np.maximum.reduceat(v, starts))
