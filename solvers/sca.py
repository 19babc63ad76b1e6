"""Per-node structure and the successive convex wrapper (paper Alg. `alg:dist_NOVA main`).

Nothing here re-implements the physics: every value and derivative comes from the block model
`cefl_opt.models.build_problem(inst, binaries="relaxed")` (copies form, SPEC §4), evaluated by
one PyNumero `PyomoNLP` *per network node* (`NodeProvider`). There is no whole-network NLP.

Per-node blocks (`build_structure`)
-----------------------------------
* A node's derivative provider is an NLP whose objective is the node's share of J (its energy
  `xi3 * blk.cost`; the owner of the global variables, dc[0], also hosts the delay term
  `xi2 * sum_t (dA + dR)` and the ML term `xi1 * ml_term`, the only terms over global
  quantities) and whose constraints are the node's `blk.coupling` rows C_k(w) <= 0. The shares
  add up to the model objective (checked at w^0). A row or share that reads a variable of
  another node (a UE's delay row reads R_bs of the BSs, the ML term reads every DPU's gamma)
  gets that variable's value by message.
* Copies are consensus by construction: every set of copies tied by `m.consensus` (copy ==
  owner) is one *shared variable* (a component). Its *primary* node holds the convex set it is
  constrained by (`blk.convex`: the owner's simplex; R_bs[b, s] lives on DC s, whose ingress
  knapsack spans the BSs' rates) or, when it is in no convex constraint, the owner. The primary
  takes the primal step; the value reaches every node that holds a copy or reads it by
  `Comm.broadcast` along the relay plan `plan`, and the gradient contributions of those nodes
  return to the primary by `Comm.reduce`.
* The named sums of the block model (`m._lifts`: data volumes, gbar, the step row's sum,
  vartheta) are internal variables of the providers that read them (`NodeProvider`, exact
  chain rule), so that no function handed to the AMPL library reads more than a few dozen
  variables: its Hessian blocks are dense per function, and a DC's gamma m D_s / z over every
  rho_nb copy gave (links x T)^2 entries per DC (README "Scale and MPI").
* The convex constraints become projection groups over shared variables (identical groups of
  different copy holders, e.g. every node's I_s simplex, are one set).

Scaling: u = x / s as before (box width; unbounded epigraph variables from their coupling rows
at w^0; constant over a projection group). Coupling rows are divided by the 2-norm of their
gradient in u at w^0 (floored), fixed for the whole run.

Outer update (eqn:NOVA param update): u^{l+1} = u^l + zeta (u_hat - u^l), then the epigraph
variables of the max terms restored (`restore_epigraphs`); stop when ||u_hat - u^l||_inf <= tol
and the scaled violation <= viol_tol (`run_sca`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyomo.environ as pyo
import scipy.sparse as sp

from cefl_opt.instance import Instance
from cefl_opt.io import check_interrupt
from cefl_opt.models import (EPIGRAPH_LEVELS, VariableIndex, build_problem, is_forcing,
                             load_solution, node_blocks, node_variables)
from cefl_opt.models.codec import rounds_from_values, take
from cefl_opt.solution import Solution
from cefl_opt.solvers import projections as P

_SCALE_FLOOR = 1e-2


# ------------------------------------------------------------------------------ groups
@dataclass
class GroupBatch:
    """Rows of one projection kind and one length: idx[r, :] are component indices of row r;
    `eq`: sum = total, else sum <= total. Bounds in u."""
    eq: bool
    idx: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    total: np.ndarray

    def project(self, v: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        """argmin sum_i (y_i - v_i)^2 / (2 w_i) over the group's set (w = 1/curvature)."""
        X = v[self.idx]
        if w is None:
            return P.project_capped_simplex(X, self.lo, self.hi, self.total, equality=self.eq)
        return P.project_weighted(X, w[self.idx], self.lo, self.hi, self.total,
                                  equality=self.eq)


# ------------------------------------------------------------------------------ node NLPs
def _lifts_in(exprs, lift_ids: dict[int, Any]) -> dict[int, Any]:
    """The named expressions of `lift_ids` that `exprs` read (not descending into them)."""
    from pyomo.core.expr.numvalue import native_types
    found: dict[int, Any] = {}
    seen: set[int] = set()
    stack = list(exprs)
    while stack:
        e = stack.pop()
        if type(e) in native_types or not hasattr(e, "is_expression_type") \
                or not e.is_expression_type():
            continue
        if e.is_named_expression_type():
            if id(e) in lift_ids:
                found[id(e)] = e
                continue
            if id(e) in seen:
                continue
            seen.add(id(e))
        stack.extend(e.args)
    return found


@dataclass
class _Level:
    """One PyomoNLP over lifted sums a_j = E_j(w, lower a) (rows E_j <= 0; value = body - ub)."""
    nlp: Any
    out: np.ndarray        # lift index of each NLP row
    ub: np.ndarray
    w_pos: np.ndarray      # per NLP primal: index into the node's variables, or -1
    aux_pos: np.ndarray    # per NLP primal: lift index, or -1


class NodeProvider:
    """Derivative provider of one node: a PyomoNLP over its objective share and its coupling
    rows (module docstring). `comp` maps the node's variables to shared-variable indices.

    lifts: named sums (`models.problem._lift_candidates`) that the provider evaluates as
    internal variables: the share and the rows are written over an auxiliary variable a_j per
    sum read, the sums themselves are PyomoNLPs by nesting level (a sum may read a lower one),
    and values, gradients, Jacobians and the Hessian diagonal are composed by the chain rule
    (exact: the Hessian of F(w) = phi(w, a(w)) is P^T H_phi P + sum_j lam_j P_j^T H_j P_j, with
    P = d(inputs)/dw and lam_j the total adjoint of a_j). Same functions as without lifts; the
    point is memory: the AMPL library gives every nonlinear function a dense Hessian block over
    its variables, (links x T)^2 entries for a DC's gamma m D_s / z or dc[0]'s sqrt(gbar)."""

    def __init__(self, name: str, share, rows: list, comp_of_var: dict[int, int],
                 lifts: dict[int, Any] | None = None):
        from pyomo.contrib.pynumero.interfaces.pyomo_nlp import PyomoNLP
        from pyomo.core.expr.visitor import replace_expressions
        lifts = lifts or {}
        exprs = [share] + [c.expr for c in rows]
        reads = [_lifts_in([e], lifts) if lifts else {} for e in exprs]   # per function
        top = {k: v for r in reads for k, v in r.items()}
        # every lift read, directly or through another lift, with its nesting level
        order: dict[int, Any] = {}
        inner: dict[int, dict[int, Any]] = {}
        todo = list(top.values())
        while todo:
            e = todo.pop()
            if id(e) in order:
                continue
            order[id(e)] = e
            inner[id(e)] = {k: v for k, v in _lifts_in([e.expr], lifts).items() if k != id(e)}
            todo.extend(inner[id(e)].values())
        level: dict[int, int] = {}

        def lev(k: int) -> int:
            if k not in level:
                level[k] = 1 + max((lev(j) for j in inner[k]), default=-1)
            return level[k]
        for k in order:
            lev(k)
        keys = sorted(order, key=lambda k: level[k])
        self.n_lifts = len(keys)
        aux = pyo.ConcreteModel(name=f"node {name} lifts")
        aux.a = pyo.Var(range(len(keys)), initialize=0.0)
        self._aux = aux
        sub_of = {k: aux.a[j] for j, k in enumerate(keys)}
        aux_index = {id(aux.a[j]): j for j in range(len(keys))}

        def subst(e, amap):
            if not amap:
                return e
            return replace_expressions(e, {k: sub_of[k] for k in amap},
                                       descend_into_named_expressions=True,
                                       remove_named_expressions=True)
        sub = pyo.ConcreteModel(name=f"node {name}")
        sub.obj = pyo.Objective(expr=subst(share, reads[0]))
        sub.rows = pyo.ConstraintList()
        for c, r in zip(rows, reads[1:]):
            sub.rows.add(subst(c.expr, r))
        self.name = name
        self.nlp = PyomoNLP(sub)
        # the node's variables: the outer NLP's (not the lifts'), then the lifts' NLPs'
        variables: list = []
        vpos: dict[int, int] = {}

        def positions(nlp):
            wp, ap = [], []
            for v in nlp.get_pyomo_variables():
                if id(v) in aux_index:
                    wp.append(-1)
                    ap.append(aux_index[id(v)])
                else:
                    if id(v) not in vpos:
                        vpos[id(v)] = len(variables)
                        variables.append(v)
                    wp.append(vpos[id(v)])
                    ap.append(-1)
            return np.array(wp, dtype=np.int64), np.array(ap, dtype=np.int64)
        self._w_pos, self._aux_pos = positions(self.nlp)
        self.levels: list[_Level] = []
        for lv in sorted(set(level.values())):
            ks = [k for k in keys if level[k] == lv]
            ls = pyo.ConcreteModel(name=f"node {name} lifts level {lv}")
            ls.obj = pyo.Objective(expr=0.0)
            ls.rows = pyo.ConstraintList()
            for k in ks:
                ls.rows.add(subst(order[k].expr, inner[k]) <= 0)
            nlp = PyomoNLP(ls)
            out = np.array([keys.index(ks[c.index() - 1]) for c in nlp.get_pyomo_constraints()],
                           dtype=np.int64)
            wp, ap = positions(nlp)
            self.levels.append(_Level(nlp=nlp, out=out, ub=np.asarray(nlp.constraints_ub(), float),
                                      w_pos=wp, aux_pos=ap))
        self.variables = variables
        self.comp = np.array([comp_of_var[id(v)] for v in variables], dtype=np.int64)
        self.row_names = [rows[c.index() - 1].name for c in self.nlp.get_pyomo_constraints()]
        self.forcing = np.array([is_forcing(rows[c.index() - 1])
                                 for c in self.nlp.get_pyomo_constraints()], dtype=bool)
        lb, ub = np.asarray(self.nlp.constraints_lb()), np.asarray(self.nlp.constraints_ub())
        if np.any(np.isfinite(lb) & np.isfinite(ub)):
            raise ValueError(f"node {name}: a coupling row has two finite bounds")
        self.sign = np.where(np.isfinite(ub), 1.0, -1.0)
        self.rhs = np.where(self.sign > 0, ub, lb)
        if not self.levels:
            jac = self.nlp.evaluate_jacobian()
            self.jrow, self.jcol = np.asarray(jac.row), np.asarray(jac.col)
            return
        # fixed sparsity of d(lifts)/dw (M, level by level) and of the rows' Jacobian in w,
        # with the gathers that compose their values from the NLPs' Jacobian data
        nv = len(variables)
        mrow, mcol = np.zeros(0, np.int64), np.zeros(0, np.int64)
        start = np.zeros(self.n_lifts, np.int64)
        end = np.zeros(self.n_lifts, np.int64)
        self._mrec = []
        for lv in self.levels:
            jac = lv.nlp.evaluate_jacobian()
            rec, keys = self._recipe(lv.out[jac.row], jac.col, lv.w_pos, lv.aux_pos,
                                     mcol, start, end, nv)
            base = len(mrow)
            self._mrec.append((base, len(keys), rec))
            rows, cols = keys // nv, keys % nv
            first = np.searchsorted(rows, lv.out)
            start[lv.out], end[lv.out] = base + first, base + np.searchsorted(rows, lv.out, "right")
            mrow, mcol = np.concatenate([mrow, rows]), np.concatenate([mcol, cols])
        self._mrow, self._mcol = mrow, mcol
        jac = self.nlp.evaluate_jacobian()
        self._jrec, keys = self._recipe(np.asarray(jac.row), jac.col, self._w_pos,
                                        self._aux_pos, mcol, start, end, nv)
        self.jrow, self.jcol = keys // nv, keys % nv
        # gradient: the outer NLP's w entries, and M's rows of the lifts it reads
        ga = np.flatnonzero(self._aux_pos >= 0)
        gp, gm = self._pairs(ga, self._aux_pos[ga], start, end)
        self._grec = (np.flatnonzero(self._w_pos >= 0), gp, gm)
        self._mrange = (start, end)
        self._dplan = None          # `_diag_plan`, built on the first Hessian diagonal
        self._at = None             # (x, M data) of the last evaluation of the lifts

    def _diag_plan(self) -> list:
        """Fixed structure of diag(P^T H P) for the outer NLP and each level: P's entries
        (row = NLP primal, column = node variable, value 1 or an entry of M), and every
        triple (Hessian entry (r, c), P entry (r, j), P entry (c, j)); then the diagonal is
        one bincount over the triples. Also the Jacobians' (row, col) for J^T y."""
        nv = len(self.variables)
        start, end = self._mrange
        plan = []
        for nlp, w_pos, aux_pos in [(self.nlp, self._w_pos, self._aux_pos)] + \
                [(lv.nlp, lv.w_pos, lv.aux_pos) for lv in self.levels]:
            wp = np.flatnonzero(w_pos >= 0)
            ap = np.flatnonzero(aux_pos >= 0)
            pe, pm = self._pairs(ap, aux_pos[ap], start, end)
            prow = np.concatenate([wp, pe])
            pcol = np.concatenate([w_pos[wp], self._mcol[pm]])
            psrc = np.concatenate([np.full(len(wp), -1, np.int64), pm])
            order = np.argsort(prow * nv + pcol)
            prow, pcol, psrc = prow[order], pcol[order], psrc[order]
            ptr = np.searchsorted(prow, np.arange(nlp.n_primals() + 1))
            H = nlp.evaluate_hessian_lag()
            hr, hc = np.asarray(H.row, np.int64), np.asarray(H.col, np.int64)
            e, a = self._pairs(np.arange(len(hr)), hr, ptr[:-1], ptr[1:])   # P entries of row r
            key = prow * nv + pcol
            want = hc[e] * nv + pcol[a]                        # the same column in row c
            b = np.minimum(np.searchsorted(key, want), max(len(key) - 1, 0))
            hit = key[b] == want if len(key) else np.zeros(len(want), bool)
            J = nlp.evaluate_jacobian() if nlp.n_constraints() else None
            plan.append({"nlp": nlp, "psrc": psrc, "e": e[hit], "a": a[hit], "b": b[hit],
                         "j": pcol[a[hit]], "H": H, "J": J})
        return plan

    def _lifted_at(self, x_local: np.ndarray) -> np.ndarray:
        """M's data at x_local, every NLP's primals set there (reused from the last evaluation
        at the same point)."""
        if self._at is not None and np.array_equal(self._at[0], x_local):
            return self._at[1]
        md = self._m_data(self._forward(x_local))
        self._at = (x_local.copy(), md)
        return md

    @staticmethod
    def _pairs(e: np.ndarray, lift: np.ndarray, start: np.ndarray, end: np.ndarray):
        """Every (e_i, p) with p in M's entries of row lift_i (CSR-style ranges)."""
        cnt = end[lift] - start[lift]
        tot = int(cnt.sum())
        off = np.repeat(np.cumsum(cnt) - cnt, cnt)
        return np.repeat(e, cnt), np.repeat(start[lift], cnt) + (np.arange(tot) - off)

    def _recipe(self, out_row, prim, w_pos, aux_pos, mcol, start, end, nv):
        """Entries of (J @ P), J an NLP's Jacobian (entries e: row out_row[e], primal prim[e])
        and P = d(primals)/dw: J[e] itself for a primal that is a node variable, J[e] x M[p]
        over M's row for a lift. Returns the gathers and the sorted keys row * nv + col."""
        prim = np.asarray(prim, np.int64)
        de = np.flatnonzero(w_pos[prim] >= 0)
        ae = np.flatnonzero(aux_pos[prim] >= 0)
        pe, pm = self._pairs(ae, aux_pos[prim[ae]], start, end)
        key = np.concatenate([out_row[de] * nv + w_pos[prim[de]], out_row[pe] * nv + mcol[pm]])
        keys, inv = np.unique(key, return_inverse=True)
        return (de, pe, pm, inv[:len(de)], inv[len(de):], len(keys)), keys

    @staticmethod
    def _apply(rec, jd: np.ndarray, md: np.ndarray) -> np.ndarray:
        de, pe, pm, dpos, ppos, size = rec
        return (np.bincount(dpos, weights=jd[de], minlength=size)
                + np.bincount(ppos, weights=jd[pe] * md[pm], minlength=size))

    def _m_data(self, jacs: list) -> np.ndarray:
        """Values of M = d(lifts)/dw at its fixed entries, level by level."""
        md = np.zeros(len(self._mrow))
        for (base, size, rec), jd in zip(self._mrec, jacs):
            md[base:base + size] = self._apply(rec, jd, md)
        return md

    def _forward(self, x_local: np.ndarray) -> list:
        """Values of the lifts at x_local (set on every NLP); the levels' Jacobian data."""
        a = np.zeros(self.n_lifts)
        jacs = []
        for lv in self.levels:
            prim = np.where(lv.w_pos >= 0, x_local[np.maximum(lv.w_pos, 0)],
                            a[np.maximum(lv.aux_pos, 0)])
            lv.nlp.set_primals(prim)
            a[lv.out] = np.asarray(lv.nlp.evaluate_constraints(), float) - lv.ub
            jacs.append(np.asarray(lv.nlp.evaluate_jacobian().data, float))
        self.nlp.set_primals(np.where(self._w_pos >= 0, x_local[np.maximum(self._w_pos, 0)],
                                      a[np.maximum(self._aux_pos, 0)]))
        return jacs

    def nnz_hessian(self) -> int:
        """Entries of the AMPL library's Hessians held by this provider (all its NLPs)."""
        return int(self.nlp.nnz_hessian_lag() + sum(lv.nlp.nnz_hessian_lag() for lv in self.levels))

    def hessian_diag(self, x_local: np.ndarray, y_local: np.ndarray) -> np.ndarray:
        """Diagonal of the Hessian of (share + sum_k y_k C_k) at x_local."""
        nlp = self.nlp
        if not self.levels:
            nlp.set_primals(x_local)
            if nlp.n_constraints():
                nlp.set_duals(y_local * self.sign)
            h = nlp.evaluate_hessian_lag()
            d = np.zeros(nlp.n_primals())
            on = h.row == h.col
            np.add.at(d, h.row[on], h.data[on])
            return d
        md = self._lifted_at(x_local)
        if self._dplan is None:
            self._dplan = self._diag_plan()
        nv = len(self.variables)

        def quad_diag(pl) -> np.ndarray:    # diag(P^T H P) over the plan's triples
            hd = pl["nlp"].evaluate_hessian_lag(out=pl["H"]).data
            pd = np.where(pl["psrc"] >= 0, md[pl["psrc"]], 1.0)
            return np.bincount(pl["j"], weights=hd[pl["e"]] * pd[pl["a"]] * pd[pl["b"]],
                               minlength=nv)

        def jac_t(pl, y) -> np.ndarray:   # J^T y
            J = pl["nlp"].evaluate_jacobian(out=pl["J"])
            return np.bincount(J.col, weights=J.data * y[J.row],
                               minlength=pl["nlp"].n_primals())
        outer, lv_plans = self._dplan[0], self._dplan[1:]
        lam = np.asarray(nlp.evaluate_grad_objective(), float)
        if nlp.n_constraints():
            duals = y_local * self.sign
            nlp.set_duals(duals)
            lam = lam + jac_t(outer, duals)
        d = quad_diag(outer)
        acc = np.zeros(self.n_lifts)
        on = self._aux_pos >= 0
        np.add.at(acc, self._aux_pos[on], lam[on])
        for i in range(len(self.levels) - 1, -1, -1):   # top level first: complete adjoints
            lv, pl = self.levels[i], lv_plans[i]
            lam_l = acc[lv.out]
            lv.nlp.set_duals(lam_l)
            d += quad_diag(pl)
            push = jac_t(pl, lam_l)
            on = lv.aux_pos >= 0
            np.add.at(acc, lv.aux_pos[on], push[on])
        return d

    def evaluate(self, x_local: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """(share, gradient, C (sign-adjusted, minus rhs), Jacobian data in (jrow, jcol) order)
        at the node's copies x_local (model units)."""
        nlp = self.nlp
        if self.levels:
            md = self._lifted_at(x_local)
        else:
            nlp.set_primals(x_local)
        f = float(nlp.evaluate_objective())
        g = np.asarray(nlp.evaluate_grad_objective(), float)
        if self.levels:
            wp, gp, gm = self._grec
            g = (np.bincount(self._w_pos[wp], weights=g[wp], minlength=len(self.variables))
                 + np.bincount(self._mcol[gm], weights=g[gp] * md[gm],
                               minlength=len(self.variables)))
        if nlp.n_constraints():
            c = (np.asarray(nlp.evaluate_constraints(), float) - self.rhs) * self.sign
            jd = np.asarray(nlp.evaluate_jacobian().data, float)
            if self.levels:
                jd = self._apply(self._jrec, jd, md)
            jd = jd * self.sign[self.jrow]
        else:
            c, jd = np.zeros(0), np.zeros(0)
        return f, g, c, jd


@dataclass
class Linearisation:
    """J, grad J (u-space, per shared variable), C (normalised rows), Jacobian data of C in
    `st.jac` order, at u. `f_nodes`: each node's share."""
    u: np.ndarray
    f: float
    g: np.ndarray
    c: np.ndarray
    a: np.ndarray
    f_nodes: np.ndarray


@dataclass
class DecStructure:
    """Everything the SCA / inner loops need, built once (module docstring)."""
    inst: Instance
    bound: str
    model: Any
    node_names: list[str]
    providers: list[NodeProvider]
    n: int                          # shared variables
    primary: np.ndarray             # (n,) node taking the primal step of each
    scale: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    groups: list[GroupBatch]
    in_group: np.ndarray            # (n,) bool
    members: list[np.ndarray]       # nodes needing each shared variable
    row_host: np.ndarray            # (K,) node hosting each coupling row
    row_names: list[str]
    row_norm: np.ndarray            # gradient 2-norm in u at w^0
    force_rows: np.ndarray          # rows sum I (1 - I) <= 0
    # Jacobian of C in u: CSR pattern (rows, cols); data gathered from the node NLPs
    jac_rows: np.ndarray
    jac_cols: np.ndarray
    jac_indptr: np.ndarray
    node_jac: list[np.ndarray]      # per node: position in the CSR data of each NLP entry
    row_ptr: np.ndarray             # (V+1,) node d's rows: row_ptr[d]:row_ptr[d+1]
    x0: np.ndarray
    idx: dict[str, Any] = field(default_factory=dict)
    group_counts: dict[str, int] = field(default_factory=dict)
    n_copies: int = 0
    build_s: float = 0.0
    epi_level: Any = None           # (n,) int: level in models.EPIGRAPH_LEVELS, -1: none
    epi_dir: Any = None             # (n,) +1 / -1: the direction that satisfies its rows
    _batches: Any = None
    _orig: Any = None
    _local: Any = None              # (n,) bool: shared variables this process steps (None: all)

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_rows(self) -> int:
        return len(self.row_host)

    @property
    def u0(self) -> np.ndarray:
        return self.x0 / self.scale

    def x_of(self, u: np.ndarray) -> np.ndarray:
        return u * self.scale

    def project(self, v: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        """Projection of a u-vector onto prod_d D_d (weighted by w = 1/curvature if given):
        every group's primary projects its own rows (here all rows of one width in one batch,
        `projections.WeightedBatch`, warm-started per metric)."""
        out = np.minimum(np.maximum(v, self.lo), self.hi)
        for b in self._batches:
            idx = b["idx"]
            out[idx] = b["unit"](v[idx], b["ones"]) if w is None else b["batch"](v[idx], w[idx])
        return out

    def set_bounds(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Replace the bounds in u (e.g. indicators fixed); groups and the projection batches
        follow."""
        if self._orig is None:
            self._orig = (self.lo.copy(), self.hi.copy())
        self.lo, self.hi = lo, hi
        for g in self.groups:
            g.lo, g.hi = lo[g.idx], hi[g.idx]
        self._build_batches()

    def set_local(self, owned: np.ndarray | None) -> None:
        """Restrict `project`'s groups to the shared variables this process is the primary of
        (MPI backend: the other entries are not this process's and are left clipped only)."""
        self._local = None if owned is None else np.asarray(owned, dtype=bool)
        self._build_batches()

    def reset_bounds(self) -> None:
        if self._orig is not None:
            lo, hi = self._orig
            self.set_bounds(lo.copy(), hi.copy())

    def _build_batches(self) -> None:
        """The projection groups as batches, one per row width."""
        self._batches = []
        for width in sorted({g.idx.shape[1] for g in self.groups}):
            gs = [g for g in self.groups if g.idx.shape[1] == width]
            idx = np.concatenate([g.idx for g in gs])
            lo = np.concatenate([np.broadcast_to(g.lo, g.idx.shape) for g in gs])
            hi = np.concatenate([np.broadcast_to(g.hi, g.idx.shape) for g in gs])
            tot = np.concatenate([np.broadcast_to(g.total, len(g.idx)) for g in gs]).astype(float)
            eq = np.concatenate([np.broadcast_to(g.eq, len(g.idx)) for g in gs]).astype(bool)
            if self._local is not None:   # a group's variables share one primary
                keep = self._local[idx[:, 0]]
                idx, lo, hi, tot, eq = idx[keep], lo[keep], hi[keep], tot[keep], eq[keep]
            if len(idx):   # one warm-started batch per metric (the weighted steps, the plain one)
                idx = np.asfortranarray(idx)      # column-major: `WeightedBatch`'s fast layout
                self._batches.append({"idx": idx, "ones": np.ones(idx.shape, order="F"),
                                      "batch": P.WeightedBatch(lo, hi, tot, eq),
                                      "unit": P.WeightedBatch(lo, hi, tot, eq)})

    def A(self, lin: Linearisation) -> sp.csr_matrix:
        return sp.csr_matrix((lin.a, self.jac_cols, self.jac_indptr), shape=(self.n_rows, self.n))

    def curvature(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Diagonal of the Hessian of the Lagrangian J + sum_k y_k C_k (normalised rows) in u,
        per shared variable: every node evaluates its provider's part at its copies and the
        parts are summed at the primaries."""
        h = np.zeros(self.n)
        x = self.x_of(u)
        for d, pv in enumerate(self.providers):
            sl = slice(self.row_ptr[d], self.row_ptr[d + 1])
            yl = y[sl] / self.row_norm[sl]
            np.add.at(h, pv.comp, pv.hessian_diag(x[pv.comp], yl))
        return h * self.scale ** 2

    def linearise(self, u: np.ndarray) -> Linearisation:
        """Every node evaluates its provider at its copies of u (one PyNumero call set per
        node); the results are assembled into global arrays (the local backend's layout)."""
        x = self.x_of(u)
        g = np.zeros(self.n)
        c = np.zeros(self.n_rows)
        a = np.zeros(len(self.jac_cols))
        fn = np.zeros(self.n_nodes)
        for d, pv in enumerate(self.providers):
            f_d, g_d, c_d, jd = pv.evaluate(x[pv.comp])
            fn[d] = f_d
            np.add.at(g, pv.comp, g_d)
            c[self.row_ptr[d]:self.row_ptr[d + 1]] = c_d
            np.add.at(a, self.node_jac[d], jd)
        g *= self.scale
        a *= self.scale[self.jac_cols]
        rn = self.row_norm
        return Linearisation(u=u.copy(), f=float(fn.sum()), g=g, c=c / rn,
                             a=a / rn[self.jac_rows], f_nodes=fn)

    def live_entries(self, u: np.ndarray, nodes, seed: int = 0) -> np.ndarray:
        """(nnz,) bool: the Jacobian entries that can be nonzero under the current bounds,
        found by the rows' hosts (`nodes`: those this process runs; the others' entries are
        False). An entry is dead when its variable is fixed (lo = hi: it never moves) or when
        its derivative is zero at two random points of the box around u with the fixed
        variables at their values (zero on the whole box, with probability 1: the rows are
        analytic there), e.g. a rate that only enters through an association fixed at 0.
        Each host draws from its own seeded generator (the same entries on any partition)."""
        live = np.zeros(len(self.jac_cols), dtype=bool)
        for d in nodes:
            pv = self.providers[d]
            if not len(pv.jrow):
                continue
            comp = pv.comp
            lo, hi, uc = self.lo[comp], self.hi[comp], u[comp]
            w = np.maximum(np.abs(uc), 1.0)
            a, b = np.maximum(lo, uc - w), np.minimum(hi, uc + w)
            rng = np.random.default_rng([seed, int(d)])
            seen = np.zeros(len(pv.jrow))
            for _ in range(2):
                ud = a + (b - a) * rng.uniform(0.05, 0.95, len(comp))
                seen += np.abs(pv.evaluate(ud * self.scale[comp])[3])
            moving = (hi > lo)[pv.jcol]
            np.logical_or.at(live, self.node_jac[d], (seen > 0) & moving)
        return live

    # ---- primaries' values -> Solution (numpy only)
    def decisions(self, u: np.ndarray) -> dict[str, np.ndarray]:
        """Indicator values {'Is': [T,S], 'Inb': [T,N,B], 'Ibn': [T,N,B]} (shared variables)."""
        x = self.x_of(u)
        return {k: take(x, self.idx[k], -np.inf) for k in ("Is", "Inb", "Ibn")}

    def to_solution(self, u: np.ndarray, *, method: str, status: str = "relaxed") -> Solution:
        """The shared variables as a Solution (the codec's units); indicators rounded to the
        largest entry (`cefl_opt.association.round_associations`)."""
        x = self.x_of(u)
        ix = self.idx
        rounds = rounds_from_values(self.inst, lambda k, t: take(x, ix[k][t], 0.0),
                                    lambda k, t: take(x, ix[k][t], -np.inf))
        return Solution(rounds=rounds, method=method, status=status)


def _node_shares(m) -> dict[str, Any]:
    """Objective share per node: xi3 * energy of its block; dc[0] (owner of the global
    variables) also hosts the delay and ML terms. (tests: the shares add up to m.obj)."""
    w = m._weights
    shares = {nm: w["xi3"] * blk.cost for nm, blk in node_blocks(m).items()}
    shares["dc0"] = shares["dc0"] + w["xi2"] * m.delay_term + w["xi1"] * m.ml_term
    return shares


def build_structure(inst: Instance, *, bound: str = "corollary", init: Solution | None = None,
                    relax_init: bool = True, assoc_bias: float = 0.1) -> DecStructure:
    """Relaxed block model + one PyomoNLP per node + shared variables + projection groups.

    init: w^0 (default `system.reference_solution(inst)`), loaded on every copy with tight
    epigraph variables. relax_init: indicators moved into the interior: I_s = 1/S and
    I_nb, I_bn = (1 - assoc_bias)/B + assoc_bias x the init's association (a tie-break)."""
    from cefl_opt import system
    t0 = time.perf_counter()
    m = build_problem(inst, binaries="relaxed", bound=bound)
    w0 = init if init is not None else system.reference_solution(inst)
    load_solution(m, w0)
    blocks = node_blocks(m)
    names = list(blocks)
    if relax_init:
        n_links = [len(bs) for bs in inst.ue_links()]  # UE n's BSs (Instance.links)
        for name, blk in blocks.items():
            for v in blk.Is.values():
                v.set_value(1.0 / inst.S, skip_validation=True)
            for comp in ("Inb", "Ibn"):
                if hasattr(blk, comp):
                    for key, v in getattr(blk, comp).items():
                        n = blk.index() if name.startswith("ue") else key[1]
                        v.set_value((1.0 - assoc_bias) / n_links[n] + assoc_bias * float(v.value),
                                    skip_validation=True)
    # ---- every node's variables (its own and its copies)
    variables, node_of = [], []
    for d, blk in enumerate(blocks.values()):
        vs = node_variables(blk)
        variables.extend(vs)
        node_of.extend([d] * len(vs))
    node_of = np.array(node_of, dtype=np.int64)
    vindex = {id(v): i for i, v in enumerate(variables)}
    nv = len(variables)
    # ---- shared variables: copy == owner (m.consensus); the rhs is the owner
    owner_of = np.arange(nv)
    for c in m.consensus.component_data_objects(pyo.Constraint, active=True):
        lhs, rhs = c.expr.args
        owner_of[vindex[id(lhs)]] = vindex[id(rhs)]
    roots, comp_of = np.unique(owner_of, return_inverse=True)
    n = len(roots)
    comp_of_var = {id(v): int(comp_of[i]) for i, v in enumerate(variables)}
    x0 = np.array([float(variables[r].value) for r in roots])
    lo = np.full(n, -np.inf)
    hi = np.full(n, np.inf)
    for i, v in enumerate(variables):
        lb, ub = v.bounds
        k = comp_of[i]
        if lb is not None:
            lo[k] = max(lo[k], float(lb))
        if ub is not None:
            hi[k] = min(hi[k], float(ub))
    # ---- convex constraints -> groups over shared variables (identical sets merged)
    from pyomo.repn import generate_standard_repn
    groups_raw: dict[frozenset, tuple] = {}
    for d, (nm, blk) in enumerate(blocks.items()):
        if not hasattr(blk, "convex"):
            continue
        for c in blk.convex.component_data_objects(pyo.Constraint, active=True):
            r = generate_standard_repn(c.body)
            coef = np.array(r.linear_coefs, float)
            if not r.is_linear() or not (np.allclose(coef, coef[0]) and coef[0] > 0):
                raise ValueError(f"convex constraint {c.name} is not a plain sum")
            comps = tuple(comp_of_var[id(v)] for v in r.linear_vars)
            key = frozenset(comps)
            eq = c.equality
            if not eq and c.has_lb():
                raise ValueError(f"convex constraint {c.name} has a lower bound")
            total = (float(pyo.value(c.upper)) - float(r.constant)) / coef[0]
            prim_pref = all(node_of[roots[k]] == d for k in comps)
            old = groups_raw.get(key)
            if old is None or (prim_pref and not old[3]):
                groups_raw[key] = (comps, total, eq, prim_pref, d, c.name)
    in_group = np.full(n, -1)
    primary = node_of[roots].copy()
    for gi, (comps, total, eq, _pref, d, name) in enumerate(groups_raw.values()):
        ca = np.array(comps)
        if np.any(in_group[ca] >= 0):
            raise ValueError(f"convex constraint {name} overlaps another one")
        in_group[ca] = gi
        primary[ca] = d
    # ---- node providers
    shares = _node_shares(m)
    lifts = {id(e): e for comp in getattr(m, "_lifts", []) for e in comp.values()}
    providers = []
    for nm, blk in blocks.items():
        rows = list(blk.coupling.component_data_objects(pyo.Constraint, active=True))
        providers.append(NodeProvider(nm, shares[nm], rows, comp_of_var, lifts))
    # ---- members: nodes holding a copy or reading a shared variable
    need = [set() for _ in range(n)]
    for i in range(nv):
        need[comp_of[i]].add(int(node_of[i]))
    for d, pv in enumerate(providers):
        for k in pv.comp:
            need[k].add(d)
    for k in range(n):
        need[k].add(int(primary[k]))
    members = [np.array(sorted(s), dtype=np.int64) for s in need]
    # ---- scales
    K_rows = [len(pv.row_names) for pv in providers]
    row_ptr = np.concatenate([[0], np.cumsum(K_rows)]).astype(np.int64)
    K = int(row_ptr[-1])
    evals = [pv.evaluate(x0[pv.comp]) for pv in providers]
    rr = np.concatenate([pv.jrow + row_ptr[d] for d, pv in enumerate(providers)]).astype(np.int64)
    cc = np.concatenate([pv.comp[pv.jcol] for pv in providers]).astype(np.int64)
    dd = np.concatenate([e[3] for e in evals])
    width = hi - lo
    bounded = np.isfinite(width) & (width > 0)
    scale = np.where(bounded, width, np.maximum(np.abs(x0), _SCALE_FLOOR))
    free = ~bounded
    if free.any() and len(dd):
        # a free variable's scale: at least the largest term of its rows over its coefficient;
        # first over the bounded variables, then (once per epigraph level) over all, so an
        # outer max (max_b of the BSs' max_n dD_nb) gets at least its inner maxima's scale
        sel = free[cc] & (np.abs(dd) > 0)
        for p in range(1 + len(EPIGRAPH_LEVELS)):
            contrib = np.abs(dd) * (scale[cc] if p else np.where(bounded[cc], scale[cc], 0.0))
            row_max = np.zeros(K)
            np.maximum.at(row_max, rr, contrib)
            cand = np.zeros(n)
            np.maximum.at(cand, cc[sel], row_max[rr[sel]] / np.abs(dd[sel]))
            scale = np.where(free, np.maximum(scale, cand), scale)
    for _ in range(2):
        for comps, *_ in groups_raw.values():
            ca = np.array(comps)
            scale[ca] = scale[ca].max()
    ulo, uhi = lo / scale, hi / scale
    batches: dict[tuple[bool, int], list] = {}
    counts: dict[str, int] = {"box": int(np.sum(in_group < 0))}
    for comps, total, eq, *_ in groups_raw.values():
        ca = np.array(comps)
        s = scale[ca[0]]
        kind = "simplex" if eq else "knapsack"
        counts[kind] = counts.get(kind, 0) + 1
        batches.setdefault((eq, len(ca)), []).append((ca, ulo[ca], uhi[ca], total / s))
    groups = [GroupBatch(eq=eq, idx=np.array([r[0] for r in rows]),
                         lo=np.array([r[1] for r in rows]), hi=np.array([r[2] for r in rows]),
                         total=np.array([r[3] for r in rows], float))
              for (eq, _), rows in sorted(batches.items())]
    # ---- Jacobian pattern (CSR over (row, shared variable); duplicates summed)
    key = rr * n + cc
    ukey, inv = np.unique(key, return_inverse=True)
    jac_rows, jac_cols = (ukey // n).astype(np.int64), (ukey % n).astype(np.int64)
    indptr = np.zeros(K + 1, dtype=np.int64)
    np.add.at(indptr, jac_rows + 1, 1)
    indptr = np.cumsum(indptr)
    node_jac, pos = [], 0
    for pv in providers:
        node_jac.append(inv[pos:pos + len(pv.jrow)])
        pos += len(pv.jrow)
    a0 = np.bincount(inv, weights=dd, minlength=len(ukey)) * scale[jac_cols]
    nrm = np.sqrt(np.bincount(jac_rows, weights=a0 * a0, minlength=K))
    row_norm = np.where(nrm > 1e-10, nrm, 1.0)
    row_names = [nm for pv in providers for nm in pv.row_names]
    row_host = np.repeat(np.arange(len(providers)), K_rows)
    force = np.flatnonzero(np.concatenate([pv.forcing for pv in providers]))
    st = DecStructure(
        inst=inst, bound=bound, model=m, node_names=names, providers=providers, n=n,
        primary=primary, scale=scale, lo=ulo, hi=uhi, groups=groups, in_group=in_group >= 0,
        members=members, row_host=row_host, row_names=row_names, row_norm=row_norm,
        force_rows=force, jac_rows=jac_rows, jac_cols=jac_cols, jac_indptr=indptr,
        node_jac=node_jac, row_ptr=row_ptr, x0=x0, group_counts=counts, n_copies=nv)
    st.idx = _shared_indices(m, comp_of_var)
    st.epi_level, st.epi_dir = _epigraphs([variables[r] for r in roots])
    st._build_batches()
    st.build_s = time.perf_counter() - t0
    return st


def _epigraphs(root_vars: list) -> tuple[np.ndarray, np.ndarray]:
    """Level and direction of every shared variable that is an epigraph variable
    (`models.EPIGRAPH_LEVELS`, by its component's local name)."""
    table = {name: (lev, d) for lev, group in enumerate(EPIGRAPH_LEVELS) for name, d in group}
    level = np.full(len(root_vars), -1, dtype=np.int64)
    direc = np.zeros(len(root_vars))
    for i, v in enumerate(root_vars):
        hit = table.get(v.parent_component().local_name)
        if hit is not None:
            level[i], direc[i] = hit
    return level, direc


def restore_epigraphs(st: DecStructure, u: np.ndarray, lin: Linearisation, free: np.ndarray, *,
                      var_max: Callable[[np.ndarray], np.ndarray],
                      nonzero_view: Callable[[np.ndarray], np.ndarray],
                      any_positive: Callable[[np.ndarray], bool]) -> tuple[np.ndarray, bool]:
    """Feasibility restoration of the max terms at u (lin = the linearisation at u): level by
    level (`models.EPIGRAPH_LEVELS`), each epigraph variable moves in its direction by the
    most that any violated row it satisfies needs (c_k / |a_kv|: exact, the rows are linear in
    it), within its bounds; the rows it enters with the other sign (a delay row over the
    inner maxima) are updated and settled by the next level. An inexact surrogate solution
    leaves a delay row violated by ~1e-4 where the inner method would need thousands of
    iterations to hand the multiplier of dA from one row to another; this closes it at once.
    var_max(per-nonzero) -> per-variable max at the primaries (a max-reduce over the rows'
    hosts); nonzero_view(per-variable) -> values at the rows' hosts (a broadcast);
    any_positive: a global test. Returns (u', moved)."""
    rows, cols = st.jac_rows, st.jac_cols
    c = lin.c.copy()
    out = u.copy()
    moved = False
    absa = np.maximum(np.abs(lin.a), 1e-300)
    for lev in range(len(EPIGRAPH_LEVELS)):
        on = st.epi_level == lev
        sel = on[cols] & free[rows] & (st.epi_dir[cols] * lin.a < 0)
        need = np.where(sel, np.maximum(c[rows], 0.0) / absa, 0.0)
        room = np.where(st.epi_dir > 0, st.hi - out, out - st.lo)
        delta = np.where(on, np.minimum(var_max(need), np.maximum(room, 0.0)), 0.0)
        if not any_positive(delta):
            continue
        dv = st.epi_dir * delta
        out = out + dv
        c = c + np.bincount(rows, weights=lin.a * nonzero_view(dv), minlength=st.n_rows)
        moved = True
    return out, moved


def _shared_indices(m, comp_of_var: dict[int, int]) -> dict[str, Any]:
    """Shared-variable indices of every field of a RoundDecision (per round) and of the
    indicators ('Is' [T,S], 'Inb'/'Ibn' [T,N,B]): the codec's `VariableIndex`."""
    vi = VariableIndex.build(m, comp_of_var)
    return {**vi.fields, **{k: np.array(v) for k, v in vi.indicators.items()}}


# ------------------------------------------------------------------------------ Alg. 1
def _node_max(st: DecStructure, per_var: np.ndarray) -> np.ndarray:
    """Per-row view of a per-variable maximum for `global_max` (each primary's max, placed on
    one of its rows; primaries without rows are covered by the row of any node)."""
    out = np.zeros(st.n_rows)
    if st.n_rows:
        node_max = np.zeros(st.n_nodes)
        np.maximum.at(node_max, st.primary, per_var)
        first = st.row_ptr[:-1]
        has = np.diff(st.row_ptr) > 0
        np.maximum.at(out, first[has], node_max[has])
        out[0] = max(out[0], float(node_max[~has].max(initial=0.0)))
    return out


def _central_restore(st: DecStructure) -> Callable[..., tuple[np.ndarray, bool]]:
    """`restore_epigraphs` with this process holding every row and variable."""
    def var_max(per_nz: np.ndarray) -> np.ndarray:
        out = np.zeros(st.n)
        np.maximum.at(out, st.jac_cols, per_nz)
        return out
    return lambda u, lin, free: restore_epigraphs(
        st, u, lin, free, var_max=var_max, nonzero_view=lambda v: v[st.jac_cols],
        any_positive=lambda v: bool(np.any(v > 0)))


def _adapt_prox(phi: np.ndarray, d: np.ndarray, d_prev: np.ndarray, rejected: bool,
                floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-variable prox factor (each primary from its own steps, no message): halved while
    the variable keeps moving the same way by at least half its last step (a nearly linear
    trade-off, e.g. a UE's data split between two BSs, which a fixed prox walks at a constant
    Delta g / lambda1 per iteration), quadrupled back (up to 1) when its step changes sign;
    after a rejected step every factor is quadrupled (a smaller prox overshot)."""
    if rejected:
        return np.minimum(4.0 * phi, 1.0), d_prev
    same = (d * d_prev > 0) & (np.abs(d) >= 0.5 * np.abs(d_prev))
    flip = d * d_prev < 0
    phi = np.where(same, np.maximum(phi / 2.0, floor), np.where(flip, np.minimum(4.0 * phi, 1.0),
                                                                  phi))
    return phi, d.copy()


@dataclass
class OuterRecord:
    """What one outer iteration produced (the trace row is built from it)."""
    it: int
    phase: str
    u: np.ndarray            # w^l (before the update)
    lin: Linearisation       # J, C at w^l
    u_hat: np.ndarray        # solution of the surrogate
    step_inf: float          # ||u_hat - u^l||_inf
    stationarity: float      # max_i q_i |u_hat_i - u^l_i| (gradient mapping)
    violation: float         # max scaled C_k(w^{l+1})^+ over non-forcing rows
    forcing: float           # max sum I (1 - I) at w^{l+1}
    rho: float               # forcing penalty weight of this surrogate
    inner: dict[str, Any]
    rejected: bool = False
    L_raised: int = 0
    zeta: float = 1.0        # the step factor of this iteration: u^{l+1} = u^l + zeta d


def next_step_factor(zeta_eff: float, zeta: float, rejected: bool) -> float:
    """Backtracking of the step factor (`run_sca`): halved after a rejected step, doubled back
    after an accepted one, never above the constant `zeta`."""
    return zeta_eff / 2.0 if rejected else min(zeta, 2.0 * zeta_eff)


def run_sca(st: DecStructure, inner, consts, *, u0: np.ndarray, phase: str = "relaxed",
            max_outer: int | None = None, global_max: Callable[[np.ndarray], float] | None = None,
            linearise: Callable[[np.ndarray], Linearisation] | None = None,
            curvature: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
            callback: Callable[[OuterRecord], Any] | None = None,
            distributed: Any = None,
            restore: Callable[..., tuple[np.ndarray, bool]] | None = None
            ) -> tuple[np.ndarray, list[OuterRecord], str]:
    """Alg. 1 on `st` from u0. phase "relaxed": indicators in [0, 1]; the forcing rows
    sum I (1 - I) <= 0 enter from outer iteration `force_after` on as a penalty rho * C_k with
    rho growing by `rho_growth` per iteration (concave rows: their linearisation is an upper
    bound, so the penalised surrogate still majorises), until every indicator is binary.
    phase "fixed": the indicators are fixed by the caller (bounds), forcing rows left out.

    Each surrogate: objective linearised + lambda1/2 |du|^2; non-forcing rows linearised +
    L_k/2 |du_{S_k}|^2, solved by `inner.solve` to a tolerance tightened with the step.
    L_k is raised (x2, or 1.5x what would have made C~_k an upper bound at the new point) when
    the surrogate missed row k, and the step is rejected if that left the row violated beyond
    viol_tol and worse than before; L_k decays by 0.7 per iteration otherwise (floor L_C/100).
    A rejection also halves the step zeta for the next try (backtracking; doubled back after an
    accepted step); after six halvings the short step is taken (L_k may be at its cap, and a
    surrogate that keeps missing would otherwise repeat the same rejected step forever: seen on
    the paper network with T = 5).
    In phase "fixed" (`k.descent`) a step that raises J by more than 1e-8 x max(1, |J|) (above
    the rounding level of the node shares' sum) is rejected the same way (the
    surrogates majorise J, so only an inexact inner solution raises it; unchecked, such steps
    were seen to cycle with period 2 at 1,000 UEs).
    Stop ("converged"): ||u_hat - u^l||_inf <= outer_tol or the gradient mapping
    max_i q_i |u_hat_i - u^l_i| <= stat_tol (the prox-gradient stationarity measure: a slow drift
    along a nearly flat direction stops), scaled violation <= viol_tol and (phase relaxed) every
    indicator binary; "binary" (phase relaxed) when every indicator has been binary and the
    violation <= viol_tol for `binary_patience` accepted iterations in a row (a rejected step
    in between neither counts nor breaks the run: it leaves u unchanged); "stalled" (phase
    fixed, `stall_tol` > 0) when J at the current point fell by at most stall_tol x max(1, |J|)
    over the last `stall_window` outer iterations, accepted or rejected (a rejected one costs a
    surrogate solve and leaves J where it was), with the violation <= viol_tol (no stationarity
    claim: the inexact inner solves leave a floor under the step tests); else "max_outer".
    global_max(per-row values) -> float: the max over all hosts (a message-passing max in the
    decentralised method).
    distributed: None (this process holds every shared variable and row), or, when the nodes
    are spread over processes (MPI backend), an object with `local_rows` ((K,) bool: rows this
    process hosts), `max_var(per_var)` / `sum_rows(per_row)` (collectives over all processes)
    and `nonzero_view(du)` (du at the Jacobian nonzeros as the rows' hosts hold it): every
    decision below then comes from collectives, so every process takes the same branch.
    After each step (`k.restore`) the max terms' epigraph variables are restored
    (`restore_epigraphs`; `restore(u, lin, free)` is its message-passing form, default the
    one-process form); the prox weight of each variable is lambda1 x its factor
    (`_adapt_prox`, floor `k.prox_min`) plus its curvature."""
    k = consts
    K = st.n_rows
    max_outer = k.max_outer if max_outer is None else max_outer
    gmax = global_max or (lambda v: float(np.max(v, initial=0.0)))
    lin_fn = linearise or st.linearise
    curv = curvature or st.curvature
    force = np.zeros(K, dtype=bool)
    force[st.force_rows] = True
    free = ~force
    L = np.where(force, 0.0, float(k.L_C))
    restore = restore or _central_restore(st)
    phi = np.ones(st.n)          # per-variable prox factors (`_adapt_prox`)
    d_prev = np.zeros(st.n)
    q = np.full(st.n, float(k.lambda1))
    u = u0.copy()
    lin = lin_fn(u)
    records: list[OuterRecord] = []
    reason = "max_outer"
    rho = 0.0
    zeta_eff = float(k.zeta)
    forcing_prev = np.inf
    tol_in = 1e-4
    fnorm = st.row_norm[force]
    settled = 0                  # consecutive accepted iterations with binaries and rows held
    f_hist = [lin.f]             # J at the current point after each outer iteration (stall)
    live = inner.live            # S_k: the row's live entries (None: all)
    for it in range(max_outer):
        check_interrupt()   # a Ctrl-C swallowed inside the last iteration (a finaliser's raise)
        forcing_on = phase == "relaxed" and it >= k.force_after
        if forcing_on:   # grows while an indicator is fractional, capped at rho_max
            rho = k.rho0 if rho == 0.0 else min(rho * (k.rho_growth if forcing_prev > 1e-9
                                                       else 1.0), k.rho_max)
        fixed = np.where(force, rho, 0.0)
        q = float(k.lambda1) * phi
        if k.curvature:
            h = curv(u, np.where(free, inner.lam, fixed))
            q = q + np.maximum(h, 0.0)
        u_hat, stats = inner.solve(lin, q, L, free, fixed, tol_in)
        d = u_hat - u
        if distributed is None:
            step = float(np.max(np.abs(d), initial=0.0))
            stat = gmax(_node_max(st, q * np.abs(d)))    # gradient mapping (prox-scaled step)
        else:
            step = distributed.max_var(np.abs(d))
            stat = distributed.max_var(q * np.abs(d))
        u_next = u + zeta_eff * d
        lin_next = lin_fn(u_next)
        if k.restore:
            u_r, moved = restore(u_next, lin_next, free)
            if moved:
                u_next, lin_next = u_r, lin_fn(u_r)
        # ---- L_k: upper-bound check of the non-forcing rows at the new point
        du = u_next - u
        dcol = du[st.jac_cols] if distributed is None else distributed.nonzero_view(du)
        lin_part = lin.c + np.bincount(st.jac_rows, weights=lin.a * dcol, minlength=K)
        quad = np.bincount(st.jac_rows, weights=dcol * dcol if live is None
                           else np.where(live, dcol * dcol, 0.0), minlength=K)
        miss = lin_next.c - (lin_part + 0.5 * L * quad)
        bad = free & (miss > 1e-12 * (1.0 + np.abs(lin.c))) & (quad > 0)
        if distributed is None:
            raised = int(bad.sum())
        else:
            bad &= distributed.local_rows
            raised = int(round(distributed.sum_rows(bad.astype(float))))
        if raised:
            need = 2.0 * (lin_next.c[bad] - lin_part[bad]) / quad[bad]
            L[bad] = np.minimum(np.maximum(2.0 * L[bad], 1.5 * need), k.L_max)
        L = np.where(free & ~bad, np.maximum(0.7 * L, k.L_C / 100.0), L)
        viol_next = gmax(np.where(free, np.maximum(lin_next.c, 0.0), 0.0))
        viol_now = gmax(np.where(free, np.maximum(lin.c, 0.0), 0.0))
        rejected = bool(raised) and viol_next > max(k.viol_tol, viol_now)
        if phase == "fixed" and k.descent and viol_next <= k.viol_tol \
                and lin_next.f > lin.f + 1e-8 * max(1.0, abs(lin.f)):
            rejected = True      # J rose: an inexact surrogate solution; a shorter step
        if rejected and zeta_eff <= k.zeta / 64.0:   # backtracked enough: take the short step
            rejected = False
        zeta_used, zeta_eff = zeta_eff, next_step_factor(zeta_eff, k.zeta, rejected)
        forcing = gmax(np.where(force, np.maximum(lin_next.c, 0.0), 0.0) *
                       np.where(force, st.row_norm, 0.0)) if len(fnorm) else 0.0
        rec = OuterRecord(it=it, phase=phase, u=u, lin=lin, u_hat=u_hat, step_inf=step,
                          stationarity=stat,
                          violation=viol_now if rejected else viol_next,
                          forcing=forcing, rho=rho, inner=stats, rejected=rejected,
                          L_raised=raised, zeta=zeta_used)
        records.append(rec)
        forcing_prev = forcing
        stop = callback(rec) if callback is not None else False
        # inner accuracy: tightened with the step, and below the violation being removed (an
        # inexact surrogate solution would otherwise leave rows violated and be rejected)
        tol_in = max(k.inner_tol, min(1e-4, k.tol_ratio * step,
                                      0.5 * max(min(viol_now, viol_next), k.viol_tol)))
        if k.prox_min < 1.0:
            phi, d_prev = _adapt_prox(phi, d, d_prev, rejected, k.prox_min)
        if not rejected:
            u, lin = u_next, lin_next
            binary_ok = phase != "relaxed" or (forcing_on and forcing <= 1e-9)
            if (step <= k.outer_tol or stat <= k.stat_tol) and viol_next <= k.viol_tol \
                    and binary_ok:
                reason = "converged"
                break
            settled = settled + 1 if (phase == "relaxed" and binary_ok
                                      and viol_next <= k.viol_tol) else 0
            if k.binary_patience and settled >= k.binary_patience:
                reason = "binary"
                break
        f_hist.append(lin.f)     # J at the current point: unchanged by a rejected step
        if phase == "fixed" and k.stall_tol > 0 and len(f_hist) > k.stall_window \
                and (viol_now if rejected else viol_next) <= k.viol_tol \
                and f_hist[-1 - k.stall_window] - f_hist[-1] \
                <= k.stall_tol * max(1.0, abs(f_hist[-1])):
            reason = "stalled"
            break
        if stop:
            reason = "stopped"
            break
    return u, records, reason
