"""Per-node structure of the decentralised solver (paper §V, `eqn: parameter_union_over_nodes`):
the node providers, the shared variables, the projection groups and the linearisation that the
successive convex approximation (`solvers/sca.py`, Alg. `alg:dist_NOVA main`) iterates on.

Nothing here re-implements the physics: every value and derivative comes from the block model
`cefl_opt.models.build_problem(inst, binaries="relaxed")` (block form with copies,
docs/formulation.md "7. Decomposition into node blocks"), evaluated by
one PyNumero ASL NLP *per network node* (`NodeProvider`, `_asl_nlp`). There is no whole-network NLP.

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
  rho_nb copy gave (links x T)^2 entries per DC (docs/scale-mpi.md).
* The convex constraints become projection groups over shared variables (identical groups of
  different copy holders, e.g. every node's I_s simplex, are one set).

Scaling: u = x / s as before (box width; unbounded epigraph variables from their coupling rows
at w^0; constant over a projection group). Coupling rows are divided by the 2-norm of their
gradient in u at w^0 (floored), fixed for the whole run.

Feasibility restoration of the max terms (`restore_epigraphs`) also lives here: the SCA calls
it after each outer step.
"""
from __future__ import annotations

import ctypes
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pyomo.environ as pyo
import scipy.sparse as sp

from cefl_opt.instance import Instance
from cefl_opt.models import build_problem, load_solution, node_blocks, node_variables
from cefl_opt.models.codec import VariableIndex, rounds_from_values, take
from cefl_opt.models.problem import (EPIGRAPH_LEVELS, build_node_rows, drop_node_terms,
                                     is_forcing, node_lifts, tie_pairs)
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


def _lift_levels(reads: list[dict[int, Any]], lifts: dict[int, Any]
                 ) -> tuple[dict[int, Any], dict[int, dict[int, Any]], dict[int, int]]:
    """Every lifted sum read by the functions (`reads`: per function, the sums it reads),
    directly or through another sum: (id -> sum, id -> the sums it reads, id -> nesting
    level; 0 reads no other sum)."""
    top = {k: v for r in reads for k, v in r.items()}
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
    return order, inner, level


#: the NL writer's options for a node's NLP (`_asl_nlp`)
_NL_OPTIONS = {"export_defined_variables": False}


def _asl_nlp(model) -> tuple[Any, list, list]:
    """PyNumero's ASL NLP of `model`, built as `PyomoNLP` builds it (the NL writer, then
    `AslNLP` over the file), with the model's variables and constraints in the NLP's order.
    The NLP keeps no Pyomo object (a `PyomoNLP` keeps the model, its symbol map and its
    component maps, which a node's evaluations never read). Named expressions are written
    inline (`_NL_OPTIONS`), not as the AMPL library's defined variables: the same values and
    derivatives in far less of the library's memory (measured: docs/scale-mpi.md)."""
    import os
    from pyomo.common.env import CtypesEnviron
    from pyomo.common.tempfiles import TempfileManager
    from pyomo.contrib.pynumero.interfaces.ampl_nlp import AslNLP
    from pyomo.opt import WriterFactory
    from pyomo.solvers.amplfunc_merge import amplfunc_merge
    TempfileManager.push()
    try:
        nl_file = TempfileManager.create_tempfile(suffix="pynumero.nl")
        _fname, smap = WriterFactory("nl")(model, nl_file, lambda x: True,
                                           dict(_NL_OPTIONS))
        by_kind: dict[str, dict[int, Any]] = {"v": {}, "c": {}}
        for sym, obj in smap.bySymbol.items():
            if sym[0] in by_kind:
                by_kind[sym[0]][int(sym[1:])] = obj
        with CtypesEnviron(AMPLFUNC=amplfunc_merge(os.environ)):
            nlp = AslNLP(nl_file)
    finally:
        TempfileManager.pop()
    _direct_calls(nlp._asl)
    return nlp, *([d[i] for i in range(len(d))] for d in (by_kind["v"], by_kind["c"]))


@functools.lru_cache(maxsize=None)
def _c_functions(lib) -> dict[str, Any]:
    """The AMPL interface library's evaluation functions as ctypes prototypes over plain
    addresses (c_void_p): the library's own entry points, without the numpy array checks
    PyNumero's prototypes run on every argument of every call."""
    vp, n, dp = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_double)
    sig = {"eval_f": (vp, vp, n, dp), "eval_deriv_f": (vp, vp, vp, n),
           "eval_g": (vp, vp, n, vp, n), "eval_jac_g": (vp, vp, n, vp, n),
           "eval_hes_lag": (vp, vp, n, vp, n, vp, n, ctypes.c_double)}
    return {name: ctypes.CFUNCTYPE(ctypes.c_bool, *args)(
        ctypes.cast(getattr(lib, f"EXTERNAL_AmplInterface_{name}"), ctypes.c_void_p).value)
        for name, args in sig.items()}


def _direct_calls(asl) -> None:
    """Bind `asl`'s (a PyNumero `AmplInterface`) evaluations to the library's functions
    through `_c_functions`: the same calls on the same arrays (its NLP's own float64
    buffers, contiguous by construction), at a fraction of the per-call cost that dominates
    a small node NLP's evaluation."""
    from pyomo.contrib.pynumero.exceptions import PyNumeroEvaluationError
    if asl.interface_version < 1:
        return
    fn, obj, nx, ny = _c_functions(asl.ASLib), asl._obj, asl._nx, asl._ny
    nnz_jac, nnz_hes = asl._nnz_jac_g, asl._nnz_hess

    def ok(res: bool) -> None:
        if not res:
            raise PyNumeroEvaluationError("Error in AMPL evaluation")

    def eval_f(x):
        sol = ctypes.c_double()
        ok(fn["eval_f"](obj, x.ctypes.data, nx, ctypes.byref(sol)))
        return sol.value

    asl.eval_f = eval_f
    asl.eval_deriv_f = lambda x, df: ok(fn["eval_deriv_f"](obj, x.ctypes.data, df.ctypes.data,
                                                           nx))
    asl.eval_g = lambda x, g: ok(fn["eval_g"](obj, x.ctypes.data, nx, g.ctypes.data, ny))
    asl.eval_jac_g = lambda x, jac: ok(fn["eval_jac_g"](obj, x.ctypes.data, nx,
                                                        jac.ctypes.data, nnz_jac))
    asl.eval_hes_lag = lambda x, lam, hes, obj_factor=1.0: ok(fn["eval_hes_lag"](
        obj, x.ctypes.data, nx, lam.ctypes.data, ny, hes.ctypes.data, nnz_hes, obj_factor))


def _jacobian(nlp):
    """The NLP's Jacobian at its primals, a COO matrix of its fixed pattern (`_kept`)."""
    return _kept(nlp, "_cefl_jac", nlp.evaluate_jacobian)


def _hessian_lag(nlp):
    """The NLP's Hessian of the Lagrangian at its primals and duals (`_kept`)."""
    return _kept(nlp, "_cefl_hes", nlp.evaluate_hessian_lag)


def _kept(nlp, name: str, evaluate: Callable):
    """`evaluate()` written into one COO matrix kept on the NLP under `name` (PyNumero's
    `out=`) instead of a new sparse matrix per call; the next call overwrites its values, so
    callers copy what they keep."""
    buf = getattr(nlp, name, None)
    if buf is None:
        buf = evaluate()
        setattr(nlp, name, buf)
        return buf
    return evaluate(out=buf)


@dataclass
class _Level:
    """One NLP over lifted sums a_j = E_j(w, lower a) (rows E_j <= 0; value = body - ub)."""
    nlp: Any
    out: np.ndarray        # lift index of each NLP row
    ub: np.ndarray
    w_pos: np.ndarray      # per NLP primal: index into the node's variables, or -1
    aux_pos: np.ndarray    # per NLP primal: lift index, or -1


class NodeProvider:
    """Derivative provider of one node: an ASL NLP over its objective share and its coupling
    rows (module docstring). `comp` maps the node's variables to shared-variable indices;
    `variables` are those Pyomo variables (None in a process of a spread run, which drops its
    Pyomo model once the NLPs are built), `n_vars` their number.

    lifts: named sums (`models.problem._lift_candidates`) that the provider evaluates as
    internal variables: the share and the rows are written over an auxiliary variable a_j per
    sum read, the sums themselves are NLPs by nesting level (a sum may read a lower one),
    and values, gradients, Jacobians and the Hessian diagonal are composed by the chain rule
    (exact: the Hessian of F(w) = phi(w, a(w)) is P^T H_phi P + sum_j lam_j P_j^T H_j P_j, with
    P = d(inputs)/dw and lam_j the total adjoint of a_j). Same functions as without lifts; the
    point is memory: the AMPL library gives every nonlinear function a dense Hessian block over
    its variables, (links x T)^2 entries for a DC's gamma m D_s / z or dc[0]'s sqrt(gbar)."""

    def __init__(self, name: str, share, rows: list, comp_of_var: dict[int, int],
                 lifts: dict[int, Any] | None = None):
        lifts = lifts or {}
        exprs = [share] + [c.expr for c in rows]
        reads = [_lifts_in([e], lifts) if lifts else {} for e in exprs]   # per function
        order, inner, level = _lift_levels(reads, lifts)
        keys = sorted(order, key=lambda k: level[k])
        self.n_lifts = len(keys)
        self._values_at = None      # (x, share, C) of the last `values` or `evaluate`
        self._evaluate_at = None    # (x, the answer) of the last `evaluate`
        aux = pyo.ConcreteModel(name=f"node {name} lifts")
        aux.a = pyo.Var(range(len(keys)), initialize=0.0)
        self._aux = aux
        self._sub_of = {k: aux.a[j] for j, k in enumerate(keys)}
        self._aux_index = {id(aux.a[j]): j for j in range(len(keys))}
        self.name = name
        self.nlp, nlp_vars, nlp_rows = self._outer_nlp(name, share, rows, reads)
        # the node's variables: the outer NLP's (not the lifts'), then the lifts' NLPs'
        self.variables: list = []
        self._vpos: dict[int, int] = {}
        self._w_pos, self._aux_pos = self._positions(nlp_vars)
        self.levels = self._level_nlps(name, keys, order, inner, level)
        self._row_layout(rows, [rows[c.index() - 1] for c in nlp_rows], comp_of_var)
        self.n_vars = len(self.variables)
        del self._aux, self._sub_of, self._aux_index, self._vpos   # the build's Pyomo side
        if not self.levels:
            jac = self.nlp.evaluate_jacobian()
            self.jrow, self.jcol = np.asarray(jac.row), np.asarray(jac.col)
            return
        self._compose_sparsity()

    def _subst(self, e, amap):
        """`e` with the lifted sums it reads (`amap`) replaced by their auxiliary variables."""
        from pyomo.core.expr.visitor import replace_expressions
        if not amap:
            return e
        return replace_expressions(e, {k: self._sub_of[k] for k in amap},
                                   descend_into_named_expressions=True,
                                   remove_named_expressions=True)

    def _outer_nlp(self, name: str, share, rows: list, reads: list):
        """The NLP over the node's objective share and coupling rows, written over the
        auxiliary variables of the sums they read (`_asl_nlp`)."""
        sub = pyo.ConcreteModel(name=f"node {name}")
        sub.obj = pyo.Objective(expr=self._subst(share, reads[0]))
        sub.rows = pyo.ConstraintList()
        for c, r in zip(rows, reads[1:]):
            sub.rows.add(self._subst(c.expr, r))
        return _asl_nlp(sub)

    def _positions(self, nlp_vars: list) -> tuple[np.ndarray, np.ndarray]:
        """Per NLP primal (`nlp_vars`, in the NLP's order): its index among the node's
        variables (added on first sight) or -1, and its lift index or -1."""
        wp, ap = [], []
        for v in nlp_vars:
            if id(v) in self._aux_index:
                wp.append(-1)
                ap.append(self._aux_index[id(v)])
            else:
                if id(v) not in self._vpos:
                    self._vpos[id(v)] = len(self.variables)
                    self.variables.append(v)
                wp.append(self._vpos[id(v)])
                ap.append(-1)
        return np.array(wp, dtype=np.int64), np.array(ap, dtype=np.int64)

    def _level_nlps(self, name: str, keys: list, order: dict, inner: dict,
                    level: dict) -> list[_Level]:
        """One NLP per nesting level of the lifted sums (rows a_j's definitions)."""
        levels: list[_Level] = []
        for lv in sorted(set(level.values())):
            ks = [k for k in keys if level[k] == lv]
            ls = pyo.ConcreteModel(name=f"node {name} lifts level {lv}")
            ls.obj = pyo.Objective(expr=0.0)
            ls.rows = pyo.ConstraintList()
            for k in ks:
                ls.rows.add(self._subst(order[k].expr, inner[k]) <= 0)
            nlp, nlp_vars, nlp_rows = _asl_nlp(ls)
            out = np.array([keys.index(ks[c.index() - 1]) for c in nlp_rows], dtype=np.int64)
            wp, ap = self._positions(nlp_vars)
            levels.append(_Level(nlp=nlp, out=out, ub=np.asarray(nlp.constraints_ub(), float),
                                 w_pos=wp, aux_pos=ap))
        return levels

    def _row_layout(self, rows: list, ordered: list, comp_of_var: dict[int, int]) -> None:
        """Shared-variable index of each node variable; name, forcing flag and sign (rows as
        sign * (body - rhs) <= 0) of each coupling row in the NLP's order (`ordered`)."""
        name = self.name
        self.comp = np.array([comp_of_var[id(v)] for v in self.variables], dtype=np.int64)
        self.row_names = [c.name for c in ordered]
        self.forcing = np.array([is_forcing(c) for c in ordered], dtype=bool)
        lb, ub = np.asarray(self.nlp.constraints_lb()), np.asarray(self.nlp.constraints_ub())
        if np.any(np.isfinite(lb) & np.isfinite(ub)):
            raise ValueError(f"node {name}: a coupling row has two finite bounds")
        self.sign = np.where(np.isfinite(ub), 1.0, -1.0)
        self.rhs = np.where(self.sign > 0, ub, lb)

    def _compose_sparsity(self) -> None:
        """Fixed sparsity of d(lifts)/dw (M, level by level) and of the rows' Jacobian in w,
        with the gathers that compose their values from the NLPs' Jacobian data."""
        nv = self.n_vars
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
        one bincount over the triples (the Hessians and Jacobians themselves: `_kept`)."""
        nv = self.n_vars
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
            H = _hessian_lag(nlp)
            hr, hc = np.asarray(H.row, np.int64), np.asarray(H.col, np.int64)
            e, a = self._pairs(np.arange(len(hr)), hr, ptr[:-1], ptr[1:])   # P entries of row r
            key = prow * nv + pcol
            want = hc[e] * nv + pcol[a]                        # the same column in row c
            b = np.minimum(np.searchsorted(key, want), max(len(key) - 1, 0))
            hit = key[b] == want if len(key) else np.zeros(len(want), bool)
            plan.append({"nlp": nlp, "psrc": psrc, "e": e[hit], "a": a[hit], "b": b[hit],
                         "j": pcol[a[hit]]})
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

    def _forward(self, x_local: np.ndarray, jacobians: bool = True) -> list:
        """Values of the lifts at x_local (set on every NLP); the levels' Jacobian data (none
        without `jacobians`)."""
        a = np.zeros(self.n_lifts)
        jacs = []
        for lv in self.levels:
            prim = np.where(lv.w_pos >= 0, x_local[np.maximum(lv.w_pos, 0)],
                            a[np.maximum(lv.aux_pos, 0)])
            lv.nlp.set_primals(prim)
            a[lv.out] = np.asarray(lv.nlp.evaluate_constraints(), float) - lv.ub
            if jacobians:
                jacs.append(_jacobian(lv.nlp).data)
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
            h = _hessian_lag(nlp)
            d = np.zeros(nlp.n_primals())
            on = h.row == h.col
            np.add.at(d, h.row[on], h.data[on])
            return d
        md = self._lifted_at(x_local)
        if self._dplan is None:
            self._dplan = self._diag_plan()
        nv = self.n_vars

        def quad_diag(pl) -> np.ndarray:    # diag(P^T H P) over the plan's triples
            hd = _hessian_lag(pl["nlp"]).data
            pd = np.where(pl["psrc"] >= 0, md[pl["psrc"]], 1.0)
            return np.bincount(pl["j"], weights=hd[pl["e"]] * pd[pl["a"]] * pd[pl["b"]],
                               minlength=nv)

        def jac_t(pl, y) -> np.ndarray:   # J^T y
            J = _jacobian(pl["nlp"])
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
        at the node's copies x_local (model units). The node keeps its last answer, as
        `values` does (the arrays are the node's own: read them, do not write them)."""
        hit = self._evaluate_at
        if hit is not None and np.array_equal(hit[0], x_local):
            return hit[1]
        out = self._evaluate(x_local)
        x = np.array(x_local, dtype=float)
        self._evaluate_at = (x, out)
        self._values_at = (x, out[0], out[2])
        return out

    def _evaluate(self, x_local: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        nlp = self.nlp
        if self.levels:
            md = self._lifted_at(x_local)
        else:
            nlp.set_primals(x_local)
        f, c = self._share_and_rows()
        g = np.asarray(nlp.evaluate_grad_objective(), float)
        if self.levels:
            wp, gp, gm = self._grec
            g = (np.bincount(self._w_pos[wp], weights=g[wp], minlength=self.n_vars)
                 + np.bincount(self._mcol[gm], weights=g[gp] * md[gm],
                               minlength=self.n_vars))
        if not nlp.n_constraints():
            return f, g, c, np.zeros(0)
        jd = _jacobian(nlp).data
        if self.levels:
            jd = self._apply(self._jrec, jd, md)
        return f, g, c, jd * self.sign[self.jrow]

    def values(self, x_local: np.ndarray) -> tuple[float, np.ndarray]:
        """(share, C) at x_local, bit for bit as `evaluate` gives them, without the gradient
        and the Jacobian (about half an evaluation's cost). The node keeps its last answer:
        at the same copies (a search trial that moved other nodes' variables only) it
        answers again without evaluating. C is the node's own: read it, do not write it."""
        hit = self._values_at
        if hit is not None and np.array_equal(hit[0], x_local):
            return hit[1], hit[2]
        nlp = self.nlp
        if not self.levels:
            nlp.set_primals(x_local)
        elif self._at is None or not np.array_equal(self._at[0], x_local):
            self._forward(x_local, jacobians=False)
            self._at = None      # the primals moved without M's data: `_lifted_at` recomputes
        f, c = self._share_and_rows()
        self._values_at = (np.array(x_local, dtype=float), f, c)
        return f, c

    def _share_and_rows(self) -> tuple[float, np.ndarray]:
        """(share, C (sign-adjusted, minus rhs)) at the outer NLP's primals."""
        nlp = self.nlp
        f = float(nlp.evaluate_objective())
        if not nlp.n_constraints():
            return f, np.zeros(0)
        return f, (np.asarray(nlp.evaluate_constraints(), float) - self.rhs) * self.sign


@dataclass
class Linearisation:
    """J, grad J (u-space, per shared variable), C (normalised rows), Jacobian data of C in
    `st.jac` order, at u. `f_nodes`: each node's share. From `values`, g and a are None."""
    u: np.ndarray
    f: float
    g: np.ndarray | None
    c: np.ndarray
    a: np.ndarray | None
    f_nodes: np.ndarray


@dataclass
class DecStructure:
    """Everything the SCA / inner loops need, built once (module docstring)."""
    inst: Instance
    bound: str
    model: Any                      # the block model (None in a process of a spread run)
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
    epigraph_nz: Any = None         # `assoc_moves._epigraph_nonzeros`, built on first use
    column_nz: Any = None           # `assoc_moves._column_nonzeros`'s column index
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
        if w is not None:
            self.project_groups(v, w, out)
            return out
        for b in self._current_batches():
            idx = b["idx"]
            out[idx] = b["unit"](v[idx], b["ones"])
        return out

    def project_groups(self, v: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        """`project(v, w)`'s group rows written into `out` (out: v clipped to its bounds)."""
        for b in self._current_batches():
            b["batch"].project_into(v, w, b["idx"], out)

    def set_bounds(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Replace the bounds in u (e.g. indicators fixed); groups and the projection batches
        follow."""
        if self._orig is None:
            self._orig = (self.lo.copy(), self.hi.copy())
        self.lo, self.hi = lo, hi
        for g in self.groups:
            g.lo, g.hi = lo[g.idx], hi[g.idx]
        self._batches = None     # built at the next projection (`_current_batches`)

    def set_local(self, owned: np.ndarray | None) -> None:
        """Restrict `project`'s groups to the shared variables this process is the primary of
        (MPI backend: the other entries are not this process's and are left clipped only)."""
        self._local = None if owned is None else np.asarray(owned, dtype=bool)
        self._batches = None

    def reset_bounds(self) -> None:
        if self._orig is not None:
            lo, hi = self._orig
            self.set_bounds(lo.copy(), hi.copy())

    def _current_batches(self) -> list[dict]:
        """The projection batches for the current bounds, built on first use after a change
        of bounds (the search fixes indicators far more often than it projects)."""
        if self._batches is None:
            self._build_batches()
        return self._batches

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

    def values(self, u: np.ndarray) -> Linearisation:
        """J and C at u, bit for bit as `linearise` gives them, without grad J and the
        Jacobian (g and a None): every node evaluates its provider's values only."""
        x = self.x_of(u)
        c = np.zeros(self.n_rows)
        fn = np.zeros(self.n_nodes)
        for d, pv in enumerate(self.providers):
            fn[d], c[self.row_ptr[d]:self.row_ptr[d + 1]] = pv.values(x[pv.comp])
        return Linearisation(u=u.copy(), f=float(fn.sum()), g=None, c=c / self.row_norm,
                             a=None, f_nodes=fn)

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


def _node_share(m, name: str, blk):
    """Node `name`'s objective share: xi3 * the energy of its block; dc[0] (owner of the
    global variables) also hosts the delay and ML terms (tests: the shares add up to m.obj)."""
    w = m._weights
    share = w["xi3"] * blk.cost
    if name == "dc0":
        share = share + w["xi2"] * m.delay_term + w["xi1"] * m.ml_term
    return share


def _relax_indicators(inst: Instance, blocks: dict, assoc_bias: float) -> None:
    """Indicators moved into the interior of their simplices: I_s = 1/S, I_nb, I_bn =
    (1 - assoc_bias)/B_n + assoc_bias x the loaded value (a tie-break)."""
    n_links = [len(bs) for bs in inst.ue_links()]  # UE n's BSs (Instance.links)
    for name, blk in blocks.items():
        if not blk.Is.is_reference():   # not its own: the owner's, moved at the owner
            for v in blk.Is.values():
                v.set_value(1.0 / inst.S, skip_validation=True)
        for comp in ("Inb", "Ibn"):
            if hasattr(blk, comp) and not getattr(blk, comp).is_reference():
                for key, v in getattr(blk, comp).items():
                    n = blk.index() if name.startswith("ue") else key[1]
                    v.set_value((1.0 - assoc_bias) / n_links[n] + assoc_bias * float(v.value),
                                skip_validation=True)


@dataclass
class _SharedVariables:
    """Every node's variables (its own and its copies) grouped into shared variables by the
    consensus rows copy == owner (`eqn: local copy 1`-`2`)."""
    variables: list                 # every node's Pyomo variables, node by node
    node_of: np.ndarray             # node of each variable
    comp_of: np.ndarray             # shared-variable index of each variable
    roots: np.ndarray               # the owner's variable of each shared variable
    comp_of_var: dict[int, int]     # id(variable) -> shared-variable index
    x0: np.ndarray                  # w^0 per shared variable (the owner's value)
    lo: np.ndarray                  # tightest bounds over the copies
    hi: np.ndarray

    @property
    def n(self) -> int:
        return len(self.roots)


def _shared_variables(m, blocks: dict) -> _SharedVariables:
    """Every copy tied to its owner (copy == owner, `models.tie_pairs`: the rows of
    `m.consensus`) is one shared variable."""
    variables, node_of = [], []
    for d, blk in enumerate(blocks.values()):
        vs = node_variables(blk)
        variables.extend(vs)
        node_of.extend([d] * len(vs))
    node_of = np.array(node_of, dtype=np.int64)
    vindex = {id(v): i for i, v in enumerate(variables)}
    owner_of = np.arange(len(variables))
    for copy, owner in tie_pairs(m):
        owner_of[vindex[id(copy)]] = vindex[id(owner)]
    roots, comp_of = np.unique(owner_of, return_inverse=True)
    n = len(roots)
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
    return _SharedVariables(variables=variables, node_of=node_of, comp_of=comp_of, roots=roots,
                            comp_of_var={id(v): int(comp_of[i]) for i, v in enumerate(variables)},
                            x0=x0, lo=lo, hi=hi)


def _convex_groups(blocks: dict, sv: _SharedVariables) -> dict[frozenset, tuple]:
    """Each node's convex set D_d (`blk.convex`, `eqn: convex separable constraints`) as
    groups over shared variables: {components: (comps, total, eq, on the owner, node, name)};
    identical groups of different copy holders are one, held preferably by the owner."""
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
            comps = tuple(sv.comp_of_var[id(v)] for v in r.linear_vars)
            key = frozenset(comps)
            eq = c.equality
            if not eq and c.has_lb():
                raise ValueError(f"convex constraint {c.name} has a lower bound")
            total = (float(pyo.value(c.upper)) - float(r.constant)) / coef[0]
            prim_pref = all(sv.node_of[sv.roots[k]] == d for k in comps)
            old = groups_raw.get(key)
            if old is None or (prim_pref and not old[3]):
                groups_raw[key] = (comps, total, eq, prim_pref, d, c.name)
    return groups_raw


def _primaries(groups_raw: dict, sv: _SharedVariables) -> tuple[np.ndarray, np.ndarray]:
    """(group of each shared variable or -1, its primary: the node holding its group, else
    its owner)."""
    in_group = np.full(sv.n, -1)
    primary = sv.node_of[sv.roots].copy()
    for gi, (comps, total, eq, _pref, d, name) in enumerate(groups_raw.values()):
        ca = np.array(comps)
        if np.any(in_group[ca] >= 0):
            raise ValueError(f"convex constraint {name} overlaps another one")
        in_group[ca] = gi
        primary[ca] = d
    return in_group, primary


def _node_comps(sv: _SharedVariables, V: int) -> list[np.ndarray]:
    """Per node: the shared variables of its variables (its own and its copies)."""
    order = np.argsort(sv.node_of, kind="stable")
    return np.split(sv.comp_of[order], np.cumsum(np.bincount(sv.node_of, minlength=V))[:-1])


def _members(node_comps: list[np.ndarray], providers: list, primary: np.ndarray
             ) -> list[np.ndarray]:
    """Per shared variable: the nodes holding a copy of it or reading it, and its primary
    (sorted)."""
    n, V = len(primary), len(providers)
    comp = np.concatenate([*node_comps, *(pv.comp for pv in providers), np.arange(n)])
    node = np.concatenate([*(np.full(len(c), d) for d, c in enumerate(node_comps)),
                           *(np.full(len(pv.comp), d) for d, pv in enumerate(providers)),
                           primary]).astype(np.int64)
    key = np.unique(comp.astype(np.int64) * V + node)
    return np.split(key % V, np.cumsum(np.bincount(key // V, minlength=n))[:-1])


def _scales(sv: _SharedVariables, groups_raw: dict, rr: np.ndarray, cc: np.ndarray,
            dd: np.ndarray, K: int) -> np.ndarray:
    """u = x / scale (module docstring): a box's width; a free variable's scale is at least the
    largest term of its rows at w^0 over its coefficient; constant over a projection group."""
    width = sv.hi - sv.lo
    bounded = np.isfinite(width) & (width > 0)
    scale = np.where(bounded, width, np.maximum(np.abs(sv.x0), _SCALE_FLOOR))
    free = ~bounded
    if free.any() and len(dd):
        # first over the bounded variables, then (once per epigraph level) over all, so an
        # outer max (max_b of the BSs' max_n dD_nb) gets at least its inner maxima's scale
        sel = free[cc] & (np.abs(dd) > 0)
        for p in range(1 + len(EPIGRAPH_LEVELS)):
            contrib = np.abs(dd) * (scale[cc] if p else np.where(bounded[cc], scale[cc], 0.0))
            row_max = np.zeros(K)
            np.maximum.at(row_max, rr, contrib)
            cand = np.zeros(sv.n)
            np.maximum.at(cand, cc[sel], row_max[rr[sel]] / np.abs(dd[sel]))
            scale = np.where(free, np.maximum(scale, cand), scale)
    for _ in range(2):
        for comps, *_ in groups_raw.values():
            ca = np.array(comps)
            scale[ca] = scale[ca].max()
    return scale


def _group_batches(groups_raw: dict, scale: np.ndarray, ulo: np.ndarray, uhi: np.ndarray,
                   in_group: np.ndarray) -> tuple[list[GroupBatch], dict[str, int]]:
    """The projection groups in u, batched by kind and width, and their counts per kind."""
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
    return groups, counts


def _jacobian_pattern(providers: list, rr: np.ndarray, cc: np.ndarray, dd: np.ndarray,
                      scale: np.ndarray, n: int, K: int) -> dict[str, Any]:
    """CSR pattern of the rows' Jacobian over (row, shared variable) with duplicates summed,
    each node's positions in it, and the rows' gradient 2-norms in u at w^0 (floored)."""
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
    return dict(jac_rows=jac_rows, jac_cols=jac_cols, jac_indptr=indptr, node_jac=node_jac,
                row_norm=np.where(nrm > 1e-10, nrm, 1.0))


def build_structure(inst: Instance, *, bound: str = "corollary", init: Solution | None = None,
                    relax_init: bool = True, assoc_bias: float = 0.1,
                    local: Sequence[int] | None = None,
                    allgather: Callable[[Any], list] | None = None) -> DecStructure:
    """Relaxed block model + one ASL NLP per node + shared variables + projection groups.

    init: w^0 (default `system.reference_solution(inst)`), loaded on every copy with tight
    epigraph variables. relax_init: indicators moved into the interior: I_s = 1/S and
    I_nb, I_bn = (1 - assoc_bias)/B + assoc_bias x the init's association (a tie-break).
    local, allgather (a process of a spread run, e.g. one MPI rank): the NLPs of the nodes in
    `local` only; every other node is a `RemoteNode` (its variables, rows and Jacobian
    pattern and values at w^0, from the process holding it by `allgather`: the same scales
    and row norms as one process). Such a process builds the terms, rows and copies of its
    own nodes only (`build_problem(rows=)`); the bounds over the copies and the nodes holding
    each shared variable come from every process by the same `allgather`."""
    from cefl_opt import system
    t0 = time.perf_counter()
    held = None if local is None else [inst.node_names()[int(d)] for d in local]
    m = build_problem(inst, binaries="relaxed", bound=bound, rows=held, defer=held is not None)
    w0 = init if init is not None else system.reference_solution(inst)
    load_solution(m, w0)
    blocks = node_blocks(m)
    if relax_init:
        _relax_indicators(inst, blocks, assoc_bias)
    sv = _shared_variables(m, blocks)
    groups_raw = _convex_groups(blocks, sv)
    in_group, primary = _primaries(groups_raw, sv)
    lifts = {id(e): e for comp in getattr(m, "_lifts", []) for e in comp.values()}
    names = list(blocks)
    build = range(len(names)) if local is None else [int(d) for d in local]
    providers: list = [None] * len(names)
    jac0: list = [None] * len(names)
    for d in build:   # a spread run: one node's Pyomo rows at a time, read by its NLP only
        blk = blocks[names[d]]
        build_node_rows(m, names[d])   # with its lifted sums (the node's own)
        own = {id(e): e for comp in node_lifts(blk) for e in comp.values()}
        providers[d] = NodeProvider(names[d], _node_share(m, names[d], blk), list(
            blk.coupling.component_data_objects(pyo.Constraint, active=True)),
            sv.comp_of_var, {**lifts, **own})
        if local is not None:
            drop_node_terms(blk)
            providers[d].variables = None   # no Pyomo object kept: `st.model` is None
    for d in build:
        jac0[d] = providers[d].evaluate(sv.x0[providers[d].comp])[3]
    node_comps = _node_comps(sv, len(names))
    if local is not None:
        _fill_remote(providers, jac0, node_comps, sv, list(build), allgather)
    members = _members(node_comps, providers, primary)
    K_rows = [len(pv.row_names) for pv in providers]
    row_ptr = np.concatenate([[0], np.cumsum(K_rows)]).astype(np.int64)
    K = int(row_ptr[-1])
    rr = np.concatenate([pv.jrow + row_ptr[d] for d, pv in enumerate(providers)]).astype(np.int64)
    cc = np.concatenate([pv.comp[pv.jcol] for pv in providers]).astype(np.int64)
    dd = np.concatenate(jac0)
    scale = _scales(sv, groups_raw, rr, cc, dd, K)
    ulo, uhi = sv.lo / scale, sv.hi / scale
    groups, counts = _group_batches(groups_raw, scale, ulo, uhi, in_group)
    st = DecStructure(
        inst=inst, bound=bound, model=m if local is None else None, node_names=list(blocks), providers=providers, n=sv.n,
        primary=primary, scale=scale, lo=ulo, hi=uhi, groups=groups, in_group=in_group >= 0,
        members=members, row_host=np.repeat(np.arange(len(providers)), K_rows),
        row_names=[nm for pv in providers for nm in pv.row_names],
        force_rows=np.flatnonzero(np.concatenate([pv.forcing for pv in providers])),
        row_ptr=row_ptr, x0=sv.x0, group_counts=counts,
        n_copies=sum(len(c) for c in node_comps),
        **_jacobian_pattern(providers, rr, cc, dd, scale, sv.n, K))
    st.idx = _shared_indices(m, sv.comp_of_var)
    st.epi_level, st.epi_dir = _epigraphs([sv.variables[r] for r in sv.roots])
    st.build_s = time.perf_counter() - t0
    return st


@dataclass
class RemoteNode:
    """A node whose NLP another process holds: what the shared structure reads of it (its
    shared variables, rows and Jacobian pattern). It is never evaluated here."""
    name: str
    comp: np.ndarray
    row_names: list[str]
    forcing: np.ndarray
    jrow: np.ndarray
    jcol: np.ndarray

    def evaluate(self, x_local: np.ndarray):
        raise RuntimeError(f"node {self.name} is held by another process")

    hessian_diag = values = evaluate


def _fill_remote(providers: list, jac0: list, node_comps: list, sv: _SharedVariables,
                 built: list[int], allgather: Callable[[Any], list] | None) -> None:
    """Every process sends its nodes' `RemoteNode` data, Jacobian values at w^0 and the
    shared variables of their variables, and the bounds of its variables, to all (one
    `allgather`): the nodes not built here become `RemoteNode`s, and `sv.lo`, `sv.hi` the
    tightest bounds over every process's copies."""
    if allgather is None:
        raise ValueError("build_structure(local=...) needs allgather")
    mine = {d: (RemoteNode(providers[d].name, providers[d].comp, providers[d].row_names,
                           providers[d].forcing, providers[d].jrow, providers[d].jcol),
                jac0[d], node_comps[d]) for d in built}
    for part, lo, hi in allgather((mine, sv.lo, sv.hi)):
        np.maximum(sv.lo, lo, out=sv.lo)
        np.minimum(sv.hi, hi, out=sv.hi)
        for d, (node, jd, comps) in part.items():
            if providers[d] is None:
                providers[d], jac0[d], node_comps[d] = node, jd, comps
    missing = [d for d, pv in enumerate(providers) if pv is None]
    if missing:
        raise ValueError(f"build_structure: no process built node(s) {missing[:5]}")


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
