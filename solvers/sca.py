"""Successive convex wrapper (paper Alg. `alg:dist_NOVA main`) on the Pyomo block model.

Nothing here re-implements the physics: every value and derivative comes from the block model
of `cefl_opt.models.build_problem(inst, binaries="relaxed")` through PyNumero's `PyomoNLP`
(ASL automatic differentiation), evaluated once per outer iteration. The inner primal-dual
loop (`primal_dual.py`) then works on plain numpy / scipy.sparse arrays.

Structure extracted once (`BlockStructure`)
-------------------------------------------
* every primal variable x_i is mapped to the network node whose block holds it (`ue[n]`,
  `bs[b]`, `dc[s]`; the globally shared variables are held by `dc[0]`, SPEC §4);
* the constraints of `blk.convex` (linear, over the node's own variables) plus the variable
  bounds are the node's convex set D_d. They are NOT linearised. Each one is classified once:
  `simplex` (sum = total, lower bounds 0, upper bounds >= total), `capped_simplex`
  (sum = total with binding upper bounds), `capped_le` (sum <= 1 over [0, 1] variables, e.g.
  sum_b rho_nb <= 1) or `knapsack` (sum <= cap with general box bounds, DC ingress
  sum_b R_bs <= Rmax_s). Variables in no group are `box`. Groups of one kind and length are
  stacked into (rows x length) index arrays so that each kind is projected with one
  vectorised call of `cefl_opt.solvers.projections`;
* the constraints of `blk.coupling` are the non-convex C(w) <= 0 (linearised + prox);
* `m.consensus` holds the linear equalities G(w) = 0 (copy = owner's copy).

Scaling (documented choice)
---------------------------
The solver works in scaled variables u = x / s. s_i is the width of x_i's box (hi - lo) when
finite; an unbounded variable (a delay epigraph variable) gets the largest |J_ki| s_i / |J_kj|
over the bounded variables i of its coupling rows k at w^0 (its coefficient in u then matches
the largest other one), or |x0| if larger (floored at 1e-2). s is then made constant over every
projection group (group max, so that the Euclidean projection in u is the exact projection onto
D_d) and over every set of copies of one shared variable (max over the consensus component, so
that copy = copy stays copy = copy). Consensus rows are divided by their (constant) gradient
norm. Coupling rows are divided, at every linearisation, by the 2-norm of their gradient in u
(floored at 0.1 x its value at w^0): a positive row scaling leaves the feasible set unchanged
and puts delay constraints (seconds) and forcing constraints on one scale; the duals are
rescaled with it (`primal_dual.PrimalDual._rescale`) so that warm starts carry over.

Outer update (eqn:NOVA param update): u^{l+1} = u^l + zeta (u_hat - u^l); stop when
||u^{l+1} - u^l||_inf <= tol (scaled units; `tol`) or after `max_outer` iterations.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from cefl_opt.instance import Instance
from cefl_opt.models import build_problem, constraint_host, is_forcing, load_solution, node_blocks
from cefl_opt.solution import RoundDecision, Solution
from cefl_opt.solvers import projections as P

GHZ, GBIT = 1e9, 1e9
_SCALE_FLOOR = 1e-2


# ------------------------------------------------------------------------------ structure
@dataclass
class GroupBatch:
    """Rows of one projection kind and one length: idx[r, :] are u-indices of row r."""
    kind: str            # simplex | capped_simplex | capped_le | knapsack
    idx: np.ndarray      # (rows, len) int
    lo: np.ndarray       # (rows, len) in u
    hi: np.ndarray       # (rows, len) in u
    total: np.ndarray    # (rows,) in u

    def project(self, v: np.ndarray) -> np.ndarray:
        X = v[self.idx]
        if self.kind == "simplex":
            return P.project_simplex(X, self.total)
        if self.kind == "capped_simplex":
            return P.project_capped_simplex(X, self.lo, self.hi, self.total, equality=True)
        return P.project_capped_simplex(X, self.lo, self.hi, self.total, equality=False)


@dataclass
class BlockStructure:
    """Everything about the relaxed block model that the SCA / PD loops need, built once."""
    inst: Instance
    bound: str
    model: Any
    nlp: Any
    node_names: list[str]
    node_of: np.ndarray            # (n,) node index of each primal variable
    scale: np.ndarray              # (n,) s, x = s * u
    lo: np.ndarray                 # (n,) bounds in u
    hi: np.ndarray
    groups: list[GroupBatch]
    group_of: np.ndarray           # (n,) id of the projection group (-1: box)
    n_groups: int
    coup_rows: np.ndarray          # NLP constraint indices of C(w) <= 0
    coup_sign: np.ndarray          # +1: body <= ub ; -1: body >= lb
    coup_rhs: np.ndarray
    coup_norm: np.ndarray          # gradient 2-norm of each coupling row at w^0 (fallback scale)
    coup_host: np.ndarray          # node index hosting each coupling row
    coup_names: list[str]
    cons_rows: np.ndarray          # NLP constraint indices of G(w) = 0
    cons_rhs: np.ndarray
    cons_norm: np.ndarray
    A_G: sp.csr_matrix             # consensus matrix in u, normalised rows
    b_G: np.ndarray
    force_rows: np.ndarray         # positions (in coupling) of the binary-forcing constraints
    idx: dict[str, Any] = field(default_factory=dict)   # u-indices of owner copies per field
    group_counts: dict[str, int] = field(default_factory=dict)
    u0: np.ndarray | None = None   # initial point w^0 in u
    # fixed CSR pattern of C's Jacobian (see `_coupling_pattern`)
    coup_pattern: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.scale)

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    # ---- point conversions
    def x_of(self, u: np.ndarray) -> np.ndarray:
        return u * self.scale

    def u_of(self, x: np.ndarray) -> np.ndarray:
        return x / self.scale

    def project(self, v: np.ndarray) -> np.ndarray:
        """Euclidean projection of a u-vector onto prod_d D_d (boxes, simplices, knapsacks)."""
        out = np.clip(v, self.lo, self.hi)
        for g in self.groups:
            out[g.idx] = g.project(v)
        return out

    # ---- evaluation at a point (Pyomo / ASL, once per outer iteration)
    def linearise(self, u: np.ndarray, prev: "Linearisation | None" = None) -> "Linearisation":
        """J, grad J, C, Jacobian of C at u (one ASL evaluation), in u.

        C's rows are normalised by the 2-norm of their gradient at u (`row_scale`), floored at
        0.1 x the norm at w^0 (`coup_norm`)."""
        nlp = self.nlp
        nlp.set_primals(self.x_of(u))
        f = float(nlp.evaluate_objective())
        g = np.asarray(nlp.evaluate_grad_objective()) * self.scale
        body = np.asarray(nlp.evaluate_constraints())
        jac = nlp.evaluate_jacobian()
        pat = self.coup_pattern
        raw = jac.data[pat["mask"]][pat["perm"]] * pat["row_sign"] * self.scale[pat["indices"]]
        nrm = np.sqrt(np.bincount(pat["rows"], weights=raw * raw, minlength=len(self.coup_rows)))
        # floor at 1/10 of the w^0 norm: a vanishing gradient (a forcing constraint at I = 1/2)
        # must not blow the normalised row up
        r = np.maximum(nrm, 0.1 * self.coup_norm)
        c_raw = (body[self.coup_rows] - self.coup_rhs) * self.coup_sign
        A_C = sp.csr_matrix((raw / r[pat["rows"]], pat["indices"], pat["indptr"]),
                            shape=(len(self.coup_rows), self.n))
        G = (body[self.cons_rows] - self.cons_rhs) / self.cons_norm
        return Linearisation(u=u.copy(), f=f, g=g, c=c_raw / r, A_C=A_C, G=G, row_scale=r,
                             c_raw=c_raw)

    # ---- owner copies -> Solution (numpy only)
    def decisions(self, u: np.ndarray) -> dict[str, np.ndarray]:
        """Fractional indicator values averaged over all copies: {'Is': [T,S], 'Inb': [T,N,B],
        'Ibn': [T,N,B]} (the consensus estimate every node would agree on)."""
        x = self.x_of(u)
        return {k: x[self.idx[k + "_all"]].mean(axis=-1) for k in ("Is", "Inb", "Ibn")}

    def to_solution(self, u: np.ndarray, *, method: str, status: str = "relaxed",
                    ties: dict[str, np.ndarray] | None = None) -> Solution:
        """Owners' copies of the continuous variables; indicators rounded to the argmax of the
        copies' average (association repair: one BS per UE for uplink and downlink, one
        aggregator per round; ties broken towards the best-rate BS)."""
        inst = self.inst
        x = self.x_of(u)
        ix = self.idx
        dec = self.decisions(u)
        up_rate = inst.R_nb          # [T,N,B]
        dn_rate = np.transpose(inst.R_bn, (0, 2, 1))  # [T,N,B]
        rounds = []
        for t in range(inst.T):
            Inb = dec["Inb"][t] + 1e-9 * up_rate[t] / up_rate[t].max()
            Ibn = dec["Ibn"][t] + 1e-9 * dn_rate[t] / dn_rate[t].max()
            rounds.append(RoundDecision(
                rho_nb=x[ix["rho_nb"][t]].copy(),
                rho_bs=x[ix["rho_bs"][t]].copy(),
                f=x[ix["f"][t]] * GHZ,
                z=x[ix["z"][t]] * inst.C,
                gamma_ue=x[ix["gamma_ue"][t]].copy(),
                gamma_dc=x[ix["gamma_dc"][t]].copy(),
                m_ue=x[ix["m_ue"][t]].copy(),
                m_dc=x[ix["m_dc"][t]].copy(),
                aggregator=int(np.argmax(dec["Is"][t])),
                uplink_bs=np.argmax(Inb, axis=1).astype(int),
                downlink_bs=np.argmax(Ibn, axis=1).astype(int),
                R_bs=x[ix["R_bs"][t]] * GBIT,
            ))
        return Solution(rounds=rounds, method=method, status=status)


@dataclass
class Linearisation:
    """Values and derivatives of J, C, G at u^l (u-space). C's rows are divided by
    `row_scale` (c = c_raw / row_scale, A_C likewise); G's rows by their fixed norms."""
    u: np.ndarray
    f: float
    g: np.ndarray
    c: np.ndarray
    A_C: sp.csr_matrix
    G: np.ndarray
    row_scale: np.ndarray
    c_raw: np.ndarray

    def surrogate_objective(self, u: np.ndarray, lambda1: float) -> float:
        du = u - self.u
        return float(self.f + self.g @ du + 0.5 * lambda1 * du @ du)

    def surrogate_constraints(self, u: np.ndarray, L: np.ndarray, B: sp.csr_matrix) -> np.ndarray:
        """C~(u; u^l) in normalised units (L: per-row prox weights, same units)."""
        du = u - self.u
        return self.c + self.A_C @ du + 0.5 * L * (B @ (du * du))

    def max_violation(self, skip: np.ndarray | None = None) -> float:
        """max(C^+, |G|) in the current normalised units (rows in `skip` left out)."""
        c = self.c if skip is None or not len(skip) else np.delete(self.c, skip)
        cv = float(np.max(c, initial=0.0))
        gv = float(np.max(np.abs(self.G), initial=0.0))
        return max(cv, gv)


def _union_find(n: int, pairs: np.ndarray) -> np.ndarray:
    parent = np.arange(n)

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a
    for a, b in pairs:
        ra, rb = find(int(a)), find(int(b))
        if ra != rb:
            parent[rb] = ra
    return np.array([find(i) for i in range(n)])


def build_structure(inst: Instance, *, bound: str = "corollary", init: Solution | None = None,
                    relax_init: bool = False, assoc_bias: float = 0.1) -> BlockStructure:
    """Relaxed block model + PyomoNLP + index maps + scaling + projection groups.

    init: the initial orchestration w^0 (default: `system.reference_solution(inst)`), loaded on
    every copy with tight epigraph variables. relax_init: move its indicators into the interior:
    I_s = 1/S (the aggregator is left to the objective), and I_nb, I_bn = (1 - assoc_bias) / B
    + assoc_bias x the init's (best-rate) association. The bias is a tie-break: at the exact
    centre the linearised forcing constraint has no preferred direction, and an association
    whose objective gradient vanishes (a UE that does not set max_n dM_bn I_bn) would stay there.
    """
    from pyomo.contrib.pynumero.interfaces.pyomo_nlp import PyomoNLP
    from cefl_opt import system

    m = build_problem(inst, binaries="relaxed", bound=bound)
    w0 = init if init is not None else system.reference_solution(inst)
    load_solution(m, w0)
    if relax_init:
        for blk in node_blocks(m).values():
            for v in blk.Is.values():
                v.set_value(1.0 / inst.S, skip_validation=True)
            for comp in ("Inb", "Ibn"):
                if hasattr(blk, comp):
                    for v in getattr(blk, comp).values():
                        v.set_value((1.0 - assoc_bias) / inst.B + assoc_bias * float(v.value),
                                    skip_validation=True)
    nlp = PyomoNLP(m)
    variables = nlp.get_pyomo_variables()
    n = len(variables)
    x0 = np.asarray(nlp.get_primals(), float)
    xlo = np.asarray(nlp.primals_lb(), float)
    xhi = np.asarray(nlp.primals_ub(), float)

    blocks = node_blocks(m)
    node_names = list(blocks)
    blk_index = {id(b): i for i, b in enumerate(blocks.values())}
    node_of = np.array([blk_index[id(v.parent_block())] for v in variables], dtype=int)
    vindex = {id(v): i for i, v in enumerate(variables)}

    cons = nlp.get_pyomo_constraints()
    clb = np.asarray(nlp.constraints_lb(), float)
    cub = np.asarray(nlp.constraints_ub(), float)
    nlp.set_primals(x0)
    jac0 = nlp.evaluate_jacobian().tocsr()
    body0 = np.asarray(nlp.evaluate_constraints())

    role = []
    for c in cons:  # by container: m.consensus, blk.convex, blk.coupling (+ its forcing rows)
        holder = c.parent_block().parent_block() if is_forcing(c) else c.parent_block()
        if holder is m.consensus:
            role.append("consensus")
        elif holder.local_name in ("convex", "coupling") and holder.parent_block() is not m:
            role.append(holder.local_name)
        else:  # pragma: no cover - the model has no other constraint containers
            raise ValueError(f"constraint {c.name} is in none of convex / coupling / consensus")
    role = np.array(role)

    # ---- scales: box width; an unbounded variable (delay epigraph) gets the largest change
    # |J_ki| s_i / |J_kj| of the quantities it bounds in its coupling rows k at w^0 (so that
    # its coefficient in u matches the largest other one), or |x0| if larger (floored); then
    # constant over copies and groups
    width = xhi - xlo
    bounded = np.isfinite(width) & (width > 0)
    scale = np.where(bounded, width, np.maximum(np.abs(x0), _SCALE_FLOOR))
    coup_rows_ = np.flatnonzero(role == "coupling")
    Jc = abs(jac0[coup_rows_]).tocsr()
    free = ~bounded
    if free.any() and Jc.nnz:
        contrib = Jc @ sp.diags(np.where(bounded, scale, 0.0))    # |J_ki| s_i, bounded i only
        row_max = np.asarray(contrib.max(axis=1).todense()).ravel()
        Jcoo = Jc.tocoo()
        sel = free[Jcoo.col] & (Jcoo.data > 0)
        cand = np.zeros(n)
        np.maximum.at(cand, Jcoo.col[sel], row_max[Jcoo.row[sel]] / Jcoo.data[sel])
        scale = np.where(free, np.maximum(scale, cand), scale)

    cons_rows = np.flatnonzero(role == "consensus")
    # copies: consensus rows are x_copy - x_owner = 0 (two nonzeros)
    pairs = []
    for r in cons_rows:
        cols = jac0.indices[jac0.indptr[r]:jac0.indptr[r + 1]]
        if len(cols) == 2:
            pairs.append(cols)
    comp = _union_find(n, np.array(pairs, dtype=int).reshape(-1, 2))

    # ---- convex constraints -> projection groups
    conv_rows = np.flatnonzero(role == "convex")
    raw_groups = []
    in_group = np.full(n, -1)
    for gi, r in enumerate(conv_rows):
        cols = jac0.indices[jac0.indptr[r]:jac0.indptr[r + 1]]
        coef = jac0.data[jac0.indptr[r]:jac0.indptr[r + 1]]
        a = float(coef[0])
        if not (np.allclose(coef, a) and a > 0):
            raise ValueError(f"convex constraint {cons[r].name} is not a plain sum (coefficients "
                             f"{coef[:5]})")
        if np.any(in_group[cols] >= 0):
            raise ValueError(f"convex constraint {cons[r].name} overlaps another group")
        if len(set(node_of[cols])) != 1:
            raise ValueError(f"convex constraint {cons[r].name} spans several nodes")
        in_group[cols] = gi
        # constant part of the body: body = a * sum(x) + const
        const = float(body0[r] - a * x0[cols].sum())
        eq = np.isfinite(clb[r]) and np.isfinite(cub[r]) and clb[r] == cub[r]
        if not eq and np.isfinite(clb[r]):
            raise ValueError(f"convex constraint {cons[r].name} has a lower bound")
        total = ((cub[r]) - const) / a
        raw_groups.append((cols, total, eq, cons[r].name))
    # group-constant scale (max over the group, then over copy components, iterate to a fixpoint)
    for _ in range(3):
        for cols, *_ in raw_groups:
            scale[cols] = scale[cols].max()
        cmax = np.zeros(n)
        np.maximum.at(cmax, comp, scale)
        scale = cmax[comp]

    lo, hi = xlo / scale, xhi / scale
    batches: dict[tuple[str, int], list] = {}
    counts: dict[str, int] = {"box": int(np.sum(in_group < 0))}
    for cols, total, eq, name in raw_groups:
        s = scale[cols[0]]
        glo, ghi, tot = lo[cols], hi[cols], total / s
        if eq:
            kind = "simplex" if (np.all(glo == 0) and np.all(ghi >= tot)) else "capped_simplex"
        else:
            kind = "capped_le" if (np.all(glo == 0) and np.all(ghi >= tot)) else "knapsack"
        counts[kind] = counts.get(kind, 0) + 1
        batches.setdefault((kind, len(cols)), []).append((cols, glo, ghi, tot))
    groups = []
    for (kind, _), rows in sorted(batches.items()):
        groups.append(GroupBatch(kind=kind, idx=np.array([r[0] for r in rows], dtype=int),
                                 lo=np.array([r[1] for r in rows]),
                                 hi=np.array([r[2] for r in rows]),
                                 total=np.array([r[3] for r in rows], dtype=float)))
    # group id for the per-group step constant (box variables get their own id)
    group_of = np.where(in_group >= 0, in_group, -1)
    box = np.flatnonzero(group_of < 0)
    group_of[box] = len(raw_groups) + np.arange(len(box))
    n_groups = len(raw_groups) + len(box)

    # ---- coupling rows C(w) <= 0, normalised at w^0
    coup_rows = np.flatnonzero(role == "coupling")
    sign = np.where(np.isfinite(cub[coup_rows]), 1.0, -1.0)
    if np.any(np.isfinite(cub[coup_rows]) & np.isfinite(clb[coup_rows])):
        raise ValueError("a coupling constraint has two finite bounds")
    rhs = np.where(sign > 0, cub[coup_rows], clb[coup_rows])
    Jc0 = sp.diags(sign) @ jac0[coup_rows] @ sp.diags(scale)
    cnorm = np.sqrt(np.asarray(Jc0.multiply(Jc0).sum(axis=1)).ravel())
    cnorm = np.where(cnorm > 1e-12, cnorm, 1.0)
    coup_names = [cons[r].name for r in coup_rows]
    coup_host = np.array([blk_index[id(constraint_host(cons[r]))] for r in coup_rows])
    force_rows = np.array([i for i, r in enumerate(coup_rows) if is_forcing(cons[r])], dtype=int)

    # ---- consensus rows G(w) = 0 (linear: fixed matrix)
    Jg = jac0[cons_rows] @ sp.diags(scale)
    gnorm = np.sqrt(np.asarray(Jg.multiply(Jg).sum(axis=1)).ravel())
    gnorm = np.where(gnorm > 1e-12, gnorm, 1.0)
    cons_rhs = cub[cons_rows]
    A_G = (sp.diags(1.0 / gnorm) @ Jg).tocsr()
    # body = J x + const  ->  G = (J x + const - rhs) / norm = A_G u - b_G
    const_g = body0[cons_rows] - jac0[cons_rows] @ x0
    b_G = (cons_rhs - const_g) / gnorm

    st = BlockStructure(
        inst=inst, bound=bound, model=m, nlp=nlp, node_names=node_names, node_of=node_of,
        scale=scale, lo=lo, hi=hi, groups=groups, group_of=group_of, n_groups=n_groups,
        coup_rows=coup_rows, coup_sign=sign, coup_rhs=rhs, coup_norm=cnorm, coup_host=coup_host,
        coup_names=coup_names, cons_rows=cons_rows, cons_rhs=cons_rhs, cons_norm=gnorm,
        A_G=A_G, b_G=b_G, force_rows=force_rows, group_counts=counts, u0=x0 / scale)
    st.idx = _owner_indices(m, vindex)
    st.coup_pattern = _coupling_pattern(nlp, coup_rows, sign)
    return st


def _coupling_pattern(nlp, coup_rows: np.ndarray, row_sign: np.ndarray) -> dict[str, np.ndarray]:
    """Fixed CSR pattern of the coupling rows of PyNumero's COO Jacobian (explicit zeros kept:
    e.g. the gradient 1 - 2 I of a forcing constraint vanishes at I = 1/2), with the
    permutation from the COO entries to CSR order."""
    jac = nlp.evaluate_jacobian()
    pos = np.full(nlp.n_constraints(), -1)
    pos[coup_rows] = np.arange(len(coup_rows))
    mask = pos[jac.row] >= 0
    r, c = pos[jac.row[mask]], jac.col[mask]
    order = np.lexsort((c, r))
    r, c = r[order], c[order]
    if np.any((np.diff(r) == 0) & (np.diff(c) == 0)):
        raise ValueError("duplicate Jacobian entries in PyNumero's COO output")
    indptr = np.zeros(len(coup_rows) + 1, dtype=np.int64)
    np.add.at(indptr, r + 1, 1)
    indptr = np.cumsum(indptr)
    return {"mask": mask, "perm": order, "indices": c.astype(np.int64), "indptr": indptr,
            "rows": r.astype(np.int64), "row_sign": row_sign[r]}


def _owner_indices(m, vindex: dict[int, int]) -> dict[str, Any]:
    """u-indices of the owners' copies of every field of a RoundDecision (per round), and of all
    copies of the indicators (last axis = copies)."""
    inst = m._inst
    T, N, B, S = inst.T, inst.N, inst.B, inst.S
    ix = lambda v: vindex[id(v)]  # noqa: E731
    out: dict[str, Any] = {k: [] for k in ("rho_nb", "rho_bs", "f", "z", "gamma_ue", "gamma_dc",
                                           "m_ue", "m_dc", "R_bs")}
    for t in range(T):
        out["rho_nb"].append(np.array([[ix(m.ue[n].rho[t, b]) for b in range(B)] for n in range(N)]))
        out["rho_bs"].append(np.array([[ix(m.bs[b].rho_bs[t, s]) for s in range(S)] for b in range(B)]))
        out["f"].append(np.array([ix(m.ue[n].f[t]) for n in range(N)]))
        out["z"].append(np.array([ix(m.dc[s].z[t]) for s in range(S)]))
        out["gamma_ue"].append(np.array([ix(m.ue[n].gamma[t]) for n in range(N)]))
        out["gamma_dc"].append(np.array([ix(m.dc[s].gamma[t]) for s in range(S)]))
        out["m_ue"].append(np.array([ix(m.ue[n].m[t]) for n in range(N)]))
        out["m_dc"].append(np.array([ix(m.dc[s].m[t]) for s in range(S)]))
        out["R_bs"].append(np.array([[ix(m.bs[b].R[t, s]) for s in range(S)] for b in range(B)]))
    blocks = list(node_blocks(m).values())
    out["Is_all"] = np.array([[[ix(blk.Is[t, s]) for blk in blocks] for s in range(S)]
                              for t in range(T)])                                  # [T,S,V]
    out["Inb_all"] = np.array([[[[ix(m.ue[n].Inb[t, b])] for b in range(B)] for n in range(N)]
                               for t in range(T)])                                 # [T,N,B,1]
    out["Ibn_all"] = np.array([[[[ix(m.ue[n].Ibn[t, b]), ix(m.bs[b].Ibn[t, n])] for b in range(B)]
                                for n in range(N)] for t in range(T)])             # [T,N,B,2]
    return out


# ------------------------------------------------------------------------------ Alg. 1
@dataclass
class OuterRecord:
    """What one outer iteration produced (the trace row is built from it)."""
    it: int
    u: np.ndarray            # w^l (before the update)
    lin: Linearisation       # J, C, G at w^l
    u_hat: np.ndarray        # PD solution of the surrogate
    surrogate: float         # J~(u_hat; u^l)
    step_inf: float          # ||u^{l+1} - u^l||_inf (0 when the step was rejected)
    inner: dict[str, Any]
    rejected: bool = False
    L_raised: int = 0        # rows whose L_k was raised after this step


def run_sca(st: BlockStructure, inner, *, zeta: float, lambda1: float, L_C: float,
            max_outer: int, tol: float, lin0: Linearisation | None = None, callback=None,
            adapt_L: bool = True, reject_tol: float = 1e-3, force_after: int = 0
            ) -> tuple[np.ndarray, list[OuterRecord], str, np.ndarray]:
    """Alg. 1: u^{l+1} = u^l + zeta (u_hat(u^l) - u^l) until ||u^{l+1} - u^l||_inf <= tol
    (scaled units) or `max_outer` iterations. `inner(lin, L) -> (u_hat, stats)` solves the
    surrogate (Alg. 2) with per-row prox weights L (normalised units).

    L_C and the upper-bound property. The paper's C~ upper-bounds C when L_C is a Lipschitz
    constant of grad C; with 1/f, 1/z, 1/R terms no finite global constant exists near the
    floors. Each row k starts at L_k = L_C (normalised at w^0) and, when the true C_k(u^{l+1})
    exceeds C~_k(u^{l+1}; u^l) (`adapt_L`), L_k is raised to max(2 L_k, 1.5 L_needed) with
    L_needed the smallest value that would have made C~_k an upper bound at that point. If the
    miss exceeds `reject_tol` (normalised units) and the step increased the maximum violation,
    the step is rejected and the surrogate is re-solved at the same w^l with the raised L.

    force_after: the binary-forcing rows (sum I(1 - I) <= 0) are left out of the surrogates of
    the first `force_after` outer iterations (0: from the start, as in the paper), so that the
    indicators first move with the continuous variables in the plain relaxation I in [0, 1].

    `callback(record)` is called after every outer iteration; returning True stops.
    Returns (final u, records, reason, L in raw units) with reason 'converged', 'max_outer' or
    'stopped'."""
    if not 0.0 < zeta <= 1.0:
        raise ValueError(f"zeta must be in (0, 1], got {zeta}")
    u = st.u0.copy()
    records: list[OuterRecord] = []
    reason = "max_outer"
    lin = lin0 if lin0 is not None else st.linearise(u)
    pat = st.coup_pattern
    Bpat = sp.csr_matrix((np.ones(len(pat["indices"])), pat["indices"], pat["indptr"]),
                         shape=(len(st.coup_rows), st.n))
    L_raw = np.full(len(st.coup_rows), float(L_C)) * lin.row_scale
    active = np.ones(len(st.coup_rows), dtype=bool)
    for it in range(max_outer):
        active[st.force_rows] = it >= force_after
        u_hat, stats = inner(lin, L_raw / lin.row_scale, active)
        u_next = u + zeta * (u_hat - u)
        step = float(np.max(np.abs(u_next - u), initial=0.0))
        lin_next = st.linearise(u_next, prev=lin)
        raised, rejected = 0, False
        if adapt_L and len(L_raw):
            du = u_next - u
            q = Bpat @ (du * du)
            lin_part = lin.c_raw + (lin.A_C @ du) * lin.row_scale
            miss = lin_next.c_raw - (lin_part + 0.5 * L_raw * q)
            bad = (miss > 1e-9 * (1.0 + np.abs(lin.c_raw))) & (q > 0)
            if bad.any():
                need = 2.0 * (lin_next.c_raw[bad] - lin_part[bad]) / q[bad]
                L_raw[bad] = np.maximum(2.0 * L_raw[bad], 1.5 * need)
                raised = int(bad.sum())
                worst = float(np.max(miss[bad] / lin_next.row_scale[bad]))
                rejected = (worst > reject_tol
                            and lin_next.max_violation() > lin.max_violation() + reject_tol)
        rec = OuterRecord(it=it, u=u, lin=lin, u_hat=u_hat,
                          surrogate=lin.surrogate_objective(u_hat, lambda1),
                          step_inf=0.0 if rejected else step, inner=stats, rejected=rejected,
                          L_raised=raised)
        records.append(rec)
        stop = callback(rec) if callback is not None else False
        if not rejected:
            u, lin = u_next, lin_next
            if step <= tol and it >= force_after:
                reason = "converged"
                break
        if stop:
            reason = "stopped"
            break
    return u, records, reason, L_raw
