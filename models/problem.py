"""Problem P (paper §IV, `eqn: optimization objective text`) as a Pyomo model with one block per
network element (docs/formulation.md "7. Decomposition into node blocks").

Layout of the model returned by `build_problem`:

* `m.ue[n]`, `m.bs[b]`, `m.dc[s]`: one block per node holding its local variables and its local
  copies of shared variables, for all rounds. Each node block has two constraint containers:
  - `blk.convex`: the node's convex set D_d (simplices over its own copies, DC ingress knapsack);
    together with the variable bounds this is what the primal step projects onto;
  - `blk.coupling`: constraints C(w) <= 0 hosted by the node (delays, epigraphs of the maxima,
    and, in the relaxed model, the binary-forcing rows in their own sub-block
    `blk.coupling.forcing`), written over the host's copies; a variable the host does not hold
    is read from its owner's copy.
  and an Expression `blk.cost`: the node's (xi3-weighted) energy of all rounds.
* `m.consensus`: equalities G(w) = 0, copy = owner's copy (paper `eqn: local copy 1`-`2`).
* `m.ml_term`, `m.delay_term`, `m.energy_term`, `m.obj`: objective of P.

Ownership (the table of docs/formulation.md "7. Decomposition into node blocks"): rho_nb,
I_nb, I_bn, f, m, gamma of UE n live on `ue[n]`; rho_bs, R_bs on `bs[b]`, and `bs[b].eNBb`,
the max of dD_nb over b's UEs (the DCs' max_{n,b} dD_nb in
eq:delayAtDCdataCollect is the max of these B values: the same max, but each DC's epigraph
has B rows instead of one per UE-BS link, and a BS hosts the rows over its own UEs);
z, gamma, m of DC s on `dc[s]`; the global shared variables I_s, dA, dR and the
bound's epigraph variables (m_min, g_max / h_max) are owned by `dc[0]`.

UE-BS links (`Instance.links`): rho_nb, I_nb, I_bn, every copy of them and every row over them
are indexed by the present links only (`m._links`); an absent link has no variable at all.

Internal units keep variables O(1): f in GHz, z as the fraction z/C, R_bs in Gbit/s, delays
in s, energies in J (`models/codec.py`, the one codec between these variables and a Solution).
`cefl_opt.system` is the numpy twin of every expression here.

Lifting in the compact form (copies=False) only: the data volumes D_b, D_s and the BS->DC gradient
delays beta_M/R_bs become variables (`bs[b].Dv`, `dc[s].Dv`, `bs[b].gpath`) defined in each
node's `lift` block (D_b, D_s by equalities, gpath by the convex epigraph beta_M/R_bs <= gpath,
tight at every optimum because gpath enters the objective and the delay constraints with
non-negative weights). Same problem; the point is sparsity: the AMPL Solver Library builds a
dense Hessian block over the nonlinear variables of each function, so the DC delay row over all
N*B offloading shares gave a Lagrangian Hessian with 5 million entries on 100 UEs / 20 BSs /
10 DCs; lifted, each nonlinear function has a handful of variables.

The block form (copies=True) keeps P's variables as docs/formulation.md "2. Variables" lists
them; its named sums (`m._lifts`: the data volumes D_b, each DC's D_b copies and D_s, gbar,
the step row's sum `dc[0].gsum`, vartheta and the general bound's noise and local sums) are
lifted *inside* the decentralised solver's per-node derivative providers instead
(`solvers.node_structure.NodeProvider`, chain rule), so P, its rows and its consensus
structure are the same with or without them.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pyomo.environ as pyo

from cefl_opt.instance import Instance, validated
from cefl_opt.solution import RoundDecision, Solution
from cefl_opt.system import BOUND_FORMS, full_rates, gamma_cap

from .codec import GBIT, GHZ, KS


BINARY_MODES = ("relaxed", "binary", "fixed")

#: Epigraph variables of the max terms (local component names) and the direction that satisfies
#: their rows, grouped in the order a feasibility restoration moves them: the inner maxima first
#: (each BS's max_n dD_nb over its UEs, which feeds max_{n,b} dD_nb; delta^B_b, max_b dD_bs and
#: max_{n,b} dD_nb feed the delay rows, which they enter with the opposite sign), then the
#: round's delays dA, dR, and the bound's m_min. Every row is linear in each of them
#: (`tests/test_sca_steps.py`).
EPIGRAPH_LEVELS: tuple[tuple[tuple[str, int], ...], ...] = (
    (("eNBb", 1),),
    (("dB", 1), ("eBS", 1), ("eNB", 1)),
    (("dA", 1), ("dR", 1), ("m_min", -1)),
)


def _globals_for(bound: str) -> tuple[str, ...]:
    return ("m_min", "g_max") if bound == "corollary" else ("h_max",)


@dataclass
class _Build:
    """What the rule builders of `build_problem` share: the model, its options, the UE-BS
    links and the instance's constants in internal units (seconds, Gbit, GHz)."""
    m: Any
    inst: Instance
    bound: str
    binaries: str
    copies: bool
    delay_cap: float | None
    Lu: list                 # UE n's BSs (Instance.links)
    Lb: list                 # BS b's UEs
    pairs: list              # present (n, b) links, UE-major
    idom: Any                # domain of the indicators
    i0: Any                  # initial value of an indicator over k choices
    gcap: float              # upper bound of gamma
    bD: float                # beta_D, beta_M in Gbit
    bM: float
    Dbar: np.ndarray         # [T,N] samples
    dD_coef: np.ndarray      # s per unit rho_nb [T,N,B]
    dM_nb: np.ndarray        # [T,N,B]
    dM_bn: np.ndarray        # [T,B,N]
    dM_ss: np.ndarray        # [T,S,S], zero diagonal
    dM_sb: np.ndarray        # [T,S,B]
    kP: np.ndarray           # s*GHz per sample
    kE: np.ndarray           # J per sample per GHz^2
    xi3: Any                 # the energy weights per part
    R0: np.ndarray           # initial R_bs, Gbit/s
    mglob: dict              # bounds of the bound's global variables
    held: set | None = None  # `build_problem(rows=)`'s nodes (None: every node)

    @property
    def own(self):
        """dc[0]: the owner of the global shared variables."""
        return self.m.dc[0]

    def holds_copies(self, blk) -> bool:
        """Whether node block `blk` gets its own copies (block form, a node this process
        holds); otherwise each copy is the owner's variable (`_copy`)."""
        name = f"{blk.parent_component().local_name}{blk.index()}"
        return self.copies and (self.held is None or name in self.held)


def _checked_weights(inst: Instance, binaries: str, bound: str, fixed,
                     weights: dict[str, float] | None) -> dict[str, float]:
    """The options of `build_problem` checked; xi1, xi2, xi3 with the overrides applied."""
    if binaries not in BINARY_MODES:
        raise ValueError(f"option 'binaries' is {binaries!r}: expected one of {BINARY_MODES}")
    if bound not in BOUND_FORMS:
        raise ValueError(f"option 'bound' is {bound!r}: expected one of {BOUND_FORMS}")
    if binaries == "fixed" and fixed is None:
        raise ValueError("binaries='fixed' needs `fixed` (a Solution or a list of RoundDecision)")
    w = {"xi1": inst.xi1, "xi2": inst.xi2, "xi3": inst.xi3}
    for k, v in (weights or {}).items():
        if k not in w:
            raise ValueError(f"unknown weight {k!r}: expected xi1, xi2 or xi3")
        w[k] = float(v)
    return w


def _new_model(inst: Instance, *, binaries: str, bound: str, w: dict[str, float],
               copies: bool, delay_cap: float | None) -> _Build:
    """The empty model with its index sets and the constants of the rules."""
    T, N, B, S = inst.T, inst.N, inst.B, inst.S
    m = pyo.ConcreteModel(name=f"CE-FL P ({inst.name})")
    m.T, m.N, m.B, m.S = (pyo.RangeSet(0, k - 1) for k in (T, N, B, S))
    m._inst, m._bound, m._binaries, m._weights = inst, bound, binaries, w
    m._globals = _globals_for(bound)
    m._copies = copies
    m._ties = []   # (a node's copy Var, its owner's variable by index): the rows of `_consensus`
    m._pending = {}   # node name -> its terms and rows still to build (`build_node_rows`)
    # UE-BS links (Instance.links): rho_nb, I_nb, I_bn and their rows exist on present links only
    Lu, Lb = inst.ue_links(), inst.bs_links()
    pairs = inst.link_pairs()                                  # (n, b), UE-major
    pairs_bn = sorted((b, n) for n, b in pairs)                # (b, n), BS-major
    m._links = (Lu, Lb, pairs, pairs_bn)
    gcap = gamma_cap(inst) if bound == "general" else inst.gamma_max
    Dbar = inst.Dbar
    with np.errstate(divide="ignore"):  # absent links (rate 0) are never read
        dD_coef = inst.beta_D * Dbar[:, :, None] / inst.R_nb   # s per unit rho_nb   [T,N,B]
        dM_nb = inst.beta_M / inst.R_nb                        # [T,N,B]
        dM_bn = inst.beta_M / inst.R_bn                        # [T,B,N]
    dM_ss = inst.beta_M / inst.R_ss
    for t in range(T):
        np.fill_diagonal(dM_ss[t], 0.0)
    return _Build(
        m=m, inst=inst, bound=bound, binaries=binaries, copies=copies, delay_cap=delay_cap,
        Lu=Lu, Lb=Lb, pairs=pairs,
        idom=pyo.Binary if binaries == "binary" else pyo.UnitInterval,
        i0=(lambda k: 0.0) if binaries == "binary" else (lambda k: 1.0 / k),  # binaries at 0
        gcap=gcap, bD=inst.beta_D / GBIT, bM=inst.beta_M / GBIT, Dbar=Dbar, dD_coef=dD_coef,
        dM_nb=dM_nb, dM_bn=dM_bn, dM_ss=dM_ss, dM_sb=inst.beta_M / inst.R_sb,
        kP=inst.c / GHZ, kE=inst.c * inst.alpha / 2.0 * GHZ ** 2, xi3=inst.xi3_parts,
        R0=full_rates(inst) / GBIT,
        mglob={"m_min": (inst.m_floor, 1.0), "g_max": (inst.gamma_min, gcap),
               "h_max": (0.0, None)})


# ---------------------------------------------------------------------- variables (owners)
def _ue_variables(c: _Build) -> None:
    """UE n owns f, m, gamma, rho_nb[n, :], I_nb[n, :] and I_bn[:, n] (docs/formulation.md
    "7. Decomposition into node blocks")."""
    m, inst, Lu = c.m, c.inst, c.Lu
    for n in m.N:
        blk = m.ue[n]
        blk.f = pyo.Var(m.T, bounds=(inst.f_min[n] / GHZ, inst.f_max[n] / GHZ),
                        initialize=inst.f_max[n] / GHZ)
        blk.m = pyo.Var(m.T, bounds=(inst.m_floor, 1.0), initialize=0.5)
        blk.gamma = pyo.Var(m.T, bounds=(inst.gamma_min, c.gcap), initialize=inst.gamma_min)
        blk.rho = pyo.Var(m.T, Lu[n], bounds=(0.0, 1.0), initialize=0.0)       # rho_nb[n, :]
        blk.Inb = pyo.Var(m.T, Lu[n], domain=c.idom, initialize=c.i0(len(Lu[n])))
        blk.Ibn = pyo.Var(m.T, Lu[n], domain=c.idom, initialize=c.i0(len(Lu[n])))  # I_bn[:, n]


def _bs_variables(c: _Build) -> None:
    """BS b owns rho_bs, R_bs, delta^B_b and its max of dD_nb over its UEs."""
    m, inst, R0, delay_cap = c.m, c.inst, c.R0, c.delay_cap
    for b in m.B:
        blk = m.bs[b]
        blk.rho_bs = pyo.Var(m.T, m.S, bounds=(0.0, 1.0), initialize=1.0 / inst.S)
        blk.R = pyo.Var(m.T, m.S, bounds=lambda v, t, s, b=b: (inst.R_floor / GBIT, inst.Rmax_bs[b, s] / GBIT),
                        initialize=lambda v, t, s, b=b: R0[b, s])               # Gbit/s
        blk.dB = pyo.Var(m.T, bounds=(0.0, delay_cap), initialize=1.0)          # local epigraph
        blk.eNBb = pyo.Var(m.T, bounds=(0.0, delay_cap), initialize=0.0)        # max_n dD_nb at b


def _dc_variables(c: _Build) -> None:
    """DC s owns z, gamma, m and the epigraphs of delta^D_s; DC 0 also the global shared
    variables I_s, dA, dR and the bound's globals (m_min, g_max or h_max)."""
    m, inst, delay_cap, own = c.m, c.inst, c.delay_cap, c.own
    for s in m.S:
        blk = m.dc[s]
        blk.z = pyo.Var(m.T, bounds=(inst.z_floor, 1.0), initialize=1.0)        # z / C
        blk.gamma = pyo.Var(m.T, bounds=(inst.gamma_min, c.gcap), initialize=inst.gamma_min)
        blk.m = pyo.Var(m.T, bounds=(inst.m_floor, 1.0), initialize=0.5)
        blk.eBS = pyo.Var(m.T, bounds=(0.0, delay_cap), initialize=0.0)         # max_b dD_bs
        if c.copies or s == 0:  # compact form: max_{n,b} dD_nb is the same for every DC
            blk.eNB = pyo.Var(m.T, bounds=(0.0, delay_cap), initialize=0.0)     # max_nb dD_nb
        else:
            blk.eNB = pyo.Reference(own.eNB)
    own.Is = pyo.Var(m.T, m.S, domain=c.idom, initialize=c.i0(inst.S))
    own.dA = pyo.Var(m.T, bounds=(0.0, delay_cap), initialize=1.0)
    own.dR = pyo.Var(m.T, bounds=(0.0, delay_cap), initialize=1.0)
    for g in m._globals:
        lo, hi = c.mglob[g]
        setattr(own, g, pyo.Var(bounds=(lo, hi), initialize=hi if hi is not None else 1.0))


# ---------------------------------------------------------------------- copies
class _OwnerView:
    """The copies of a node that `build_problem(rows=)` does not hold: indexing gives the
    owner's variable, and nothing is stored per entry."""

    def __init__(self, target):
        self._target = target

    def __getitem__(self, key):
        return self._target(*key) if isinstance(key, tuple) else self._target(key)

    @staticmethod
    def is_reference() -> bool:
        return True


def _copy(c: _Build, blk, name: str, index: tuple, target, **var_kw) -> None:
    """A node's copy of a shared variable: its own Var (block form, a node this process
    holds), the owner's variable by indexing (block form, a node it does not hold), or a
    Reference to the owner's (compact form)."""
    if c.holds_copies(blk):
        setattr(blk, name, pyo.Var(*index, **var_kw))
        c.m._ties.append((getattr(blk, name), target))
    elif c.copies:
        setattr(blk, name, _OwnerView(target))
    else:
        keys = [sum(((x,) if not isinstance(x, tuple) else x for x in k), ())
                for k in itertools.product(*(list(ix) for ix in index))]
        setattr(blk, name, pyo.Reference({k if len(k) > 1 else k[0]: target(*k) for k in keys}))


def _copy_globals(c: _Build, blk) -> None:
    """A node's copies of the bound's global variables (`blk._g`: name -> variable)."""
    blk._g = {}
    for g in c.m._globals:
        if c.holds_copies(blk):
            lo, hi = c.mglob[g]
            setattr(blk, g, pyo.Var(bounds=(lo, hi), initialize=hi if hi is not None else 1.0))
            blk._g[g] = getattr(blk, g)
            c.m._ties.append((blk._g[g], lambda g=g: getattr(c.own, g)))
        else:
            blk._g[g] = getattr(c.own, g)


def _ue_copies(c: _Build) -> None:
    """UE n's copies: I_s, dA and the bound's globals."""
    m, own = c.m, c.own
    shared = {"domain": c.idom, "initialize": c.i0(c.inst.S)}
    for n in m.N:
        blk = m.ue[n]
        _copy(c, blk, "Is", (m.T, m.S), lambda t, s: own.Is[t, s], **shared)
        _copy(c, blk, "dA", (m.T,), lambda t: own.dA[t], bounds=(0.0, None), initialize=1.0)
        _copy_globals(c, blk)


def _bs_copies(c: _Build) -> None:
    """BS b's copies: rho_nb and I_bn of its UEs, I_s, dA, dR."""
    m, own, Lu, Lb, i0 = c.m, c.own, c.Lu, c.Lb, c.i0
    shared = {"domain": c.idom, "initialize": i0(c.inst.S)}
    for b in m.B:
        blk = m.bs[b]
        _copy(c, blk, "rho_nb", (m.T, Lb[b]), lambda t, n, b=b: m.ue[n].rho[t, b], bounds=(0.0, 1.0), initialize=0.0)
        _copy(c, blk, "Ibn", (m.T, Lb[b]), lambda t, n, b=b: m.ue[n].Ibn[t, b], domain=c.idom,
              initialize=lambda v, t, n: i0(len(Lu[n])))
        _copy(c, blk, "Is", (m.T, m.S), lambda t, s: own.Is[t, s], **shared)
        _copy(c, blk, "dA", (m.T,), lambda t: own.dA[t], bounds=(0.0, None), initialize=1.0)
        _copy(c, blk, "dR", (m.T,), lambda t: own.dR[t], bounds=(0.0, None), initialize=1.0)


def _dc_copies(c: _Build) -> None:
    """DC s's copies: every rho_nb, its rho_bs and R_bs, the BSs' maxima, and (s != 0) I_s,
    dA, dR and the bound's globals."""
    m, own, inst, R0 = c.m, c.own, c.inst, c.R0
    shared = {"domain": c.idom, "initialize": c.i0(inst.S)}
    for s in m.S:
        blk = m.dc[s]
        _copy(c, blk, "rho_nb", (m.T, c.pairs), lambda t, n, b: m.ue[n].rho[t, b], bounds=(0.0, 1.0), initialize=0.0)
        _copy(c, blk, "rho_bs", (m.T, m.B), lambda t, b, s=s: m.bs[b].rho_bs[t, s], bounds=(0.0, 1.0),
              initialize=1.0 / inst.S)
        _copy(c, blk, "R", (m.T, m.B), lambda t, b, s=s: m.bs[b].R[t, s],
              bounds=lambda v, t, b, s=s: (inst.R_floor / GBIT, inst.Rmax_bs[b, s] / GBIT),
              initialize=lambda v, t, b, s=s: R0[b, s])
        _copy(c, blk, "eNBb", (m.T, m.B), lambda t, b: m.bs[b].eNBb[t], bounds=(0.0, None),
              initialize=0.0)
        if s != 0:
            _copy(c, blk, "Is", (m.T, m.S), lambda t, k: own.Is[t, k], **shared)
            _copy(c, blk, "dA", (m.T,), lambda t: own.dA[t], bounds=(0.0, None), initialize=1.0)
            _copy(c, blk, "dR", (m.T,), lambda t: own.dR[t], bounds=(0.0, None), initialize=1.0)
            _copy_globals(c, blk)
        else:
            blk._g = {g: getattr(own, g) for g in m._globals}


def _lift_volume(c: _Build, blk, volume) -> None:
    """Compact form: the node's data volume D[t] = volume(t) as a variable (thousands of
    samples) defined by an equality in `blk.lift` (module docstring)."""
    m, Dbar = c.m, c.Dbar
    blk.Dv = pyo.Var(m.T, bounds=lambda v, t: (0.0, float(Dbar[t].sum()) / KS), initialize=0.0)
    blk.lift.D_def = pyo.Constraint(m.T, rule=lambda c_, t: KS * blk.Dv[t] - volume(t) == 0)
    blk.D = pyo.Expression(m.T, rule=lambda e, t: KS * blk.Dv[t])


# ---------------------------------------------------------------------- UE n
def _ue_convex(c: _Build, blk, n: int) -> None:
    """UE n's convex set: sum_b rho_nb <= 1 and the simplices of its indicators (and, block
    form, of its I_s copy)."""
    m, Lu = c.m, c.Lu
    blk.convex = pyo.Block()
    blk.coupling = pyo.Block()
    if c.copies:
        blk.convex.rho_sum = pyo.Constraint(m.T, rule=lambda c_, t: sum(blk.rho[t, b] for b in Lu[n]) <= 1)
    else:  # compact form: the kept share as a [0,1] slack, so bounds alone give D_n >= 0
        blk.keep = pyo.Var(m.T, bounds=(0.0, 1.0), initialize=1.0)
        blk.convex.rho_sum = pyo.Constraint(
            m.T, rule=lambda c_, t: sum(blk.rho[t, b] for b in Lu[n]) + blk.keep[t] == 1)
    blk.convex.Inb_sum = pyo.Constraint(m.T, rule=lambda c_, t: sum(blk.Inb[t, b] for b in Lu[n]) == 1)
    blk.convex.Ibn_sum = pyo.Constraint(m.T, rule=lambda c_, t: sum(blk.Ibn[t, b] for b in Lu[n]) == 1)
    if c.copies:
        blk.convex.Is_sum = pyo.Constraint(m.T, rule=lambda c_, t: sum(blk.Is[t, s] for s in m.S) == 1)


def _ue_terms(c: _Build, blk, n: int) -> None:
    """UE n's data volume, local training delay and energy, delta^A_n and its energy, and the
    energy of its offloading (paper §II-E, docs/formulation.md "4. Delays and energies")."""
    m, inst, Lu, Dbar, kP, kE = c.m, c.inst, c.Lu, c.Dbar, c.kP, c.kE
    dM_nb, bM, copies = c.dM_nb, c.bM, c.copies
    if copies:
        blk.D = pyo.Expression(m.T, rule=lambda e, t: (1 - sum(blk.rho[t, b] for b in Lu[n])) * Dbar[t, n])
    else:
        blk.D = pyo.Expression(m.T, rule=lambda e, t: blk.keep[t] * Dbar[t, n])
    blk.dP = pyo.Expression(m.T, rule=lambda e, t: kP[n] * blk.gamma[t] * blk.m[t] * blk.D[t] / blk.f[t])
    blk.EP = pyo.Expression(m.T, rule=lambda e, t: kE[n] * blk.gamma[t] * blk.m[t] * blk.D[t] * blk.f[t] ** 2)

    def dM_bs(t, b, s):  # beta_M / R_bs, R_bs read from bs[b] (lifted in the compact form)
        return bM / m.bs[b].R[t, s] if copies else m.bs[b].gpath[t, s]

    def dA_n(e, t):  # delta^A_n: gradient to BS, then BS -> aggregator
        return (sum(dM_nb[t, n, b] * blk.Inb[t, b] for b in Lu[n])
                + sum(dM_bs(t, b, s) * blk.Is[t, s] * blk.Inb[t, b] for b in Lu[n] for s in m.S))
    blk.dA_n = pyo.Expression(m.T, rule=dA_n)

    def EA_n(e, t):
        return (sum(dM_nb[t, n, b] * inst.P_nb[t, n, b] * blk.Inb[t, b] for b in Lu[n])
                + sum(dM_bs(t, b, s) * inst.P_bs[b, s] * blk.Is[t, s] * blk.Inb[t, b]
                      for b in Lu[n] for s in m.S))
    blk.EA_n = pyo.Expression(m.T, rule=EA_n)
    blk.ED = pyo.Expression(m.T, rule=lambda e, t: sum(
        c.dD_coef[t, n, b] * inst.P_nb[t, n, b] * blk.rho[t, b] for b in Lu[n]))


def _ue_rows(c: _Build, blk, n: int) -> None:
    """UE n's coupling rows: its delay row (`delay_agg_UE_mainpaper`), the bound's DPU
    epigraphs and (relaxed) the forcing rows of its indicators (`con11add`, `con12add`);
    then its cost."""
    m, Lu, xi3 = c.m, c.Lu, c.xi3
    blk.coupling.delay = pyo.Constraint(  # delay_agg_UE_mainpaper
        m.T, rule=lambda c_, t: blk.dA_n[t] + blk.dP[t] - blk.dA[t] <= 0)
    _dpu_epigraphs(m, blk, c.bound)
    if c.binaries == "relaxed":
        fb = blk.coupling.forcing = pyo.Block()
        fb.force_Inb = pyo.Constraint(  # con12add
            m.T, rule=lambda c_, t: sum(blk.Inb[t, b] * (1 - blk.Inb[t, b]) for b in Lu[n]) <= 0)
        fb.force_Ibn = pyo.Constraint(  # con11add
            m.T, rule=lambda c_, t: sum(blk.Ibn[t, b] * (1 - blk.Ibn[t, b]) for b in Lu[n]) <= 0)
    blk.cost = pyo.Expression(expr=sum(
        xi3[0] * blk.ED[t] + xi3[2] * blk.EP[t] + xi3[4] * blk.EA_n[t] for t in m.T))


# ---------------------------------------------------------------------- BS b
def _bs_convex(c: _Build, blk, b: int) -> None:
    """BS b's convex set: the simplex of rho_bs (and, block form, of its I_s copy)."""
    m = c.m
    blk.convex = pyo.Block()
    blk.coupling = pyo.Block()
    blk.convex.rho_bs_sum = pyo.Constraint(m.T, rule=lambda c_, t: sum(blk.rho_bs[t, s] for s in m.S) == 1)
    if c.copies:
        blk.convex.Is_sum = pyo.Constraint(m.T, rule=lambda c_, t: sum(blk.Is[t, s] for s in m.S) == 1)


def _bs_volume(c: _Build, blk, b: int) -> None:
    """BS b's data volume D_b (compact form: lifted, with the gradient-path delays
    beta_M / R_bs as epigraph variables; module docstring)."""
    m, inst, Lb, Dbar, bM, R0 = c.m, c.inst, c.Lb, c.Dbar, c.bM, c.R0
    if c.copies:
        blk.D = pyo.Expression(m.T, rule=lambda e, t: sum(blk.rho_nb[t, n] * Dbar[t, n] for n in Lb[b]))
        return
    blk.lift = pyo.Block()
    _lift_volume(c, blk, lambda t: sum(blk.rho_nb[t, n] * Dbar[t, n] for n in Lb[b]))
    blk.gpath = pyo.Var(m.T, m.S, bounds=lambda v, t, s: (
        bM / (inst.Rmax_bs[b, s] / GBIT), bM / (inst.R_floor / GBIT)),
        initialize=lambda v, t, s: bM / R0[b, s])
    blk.lift.gpath_epi = pyo.Constraint(  # beta_M / R_bs <= gpath (convex in R)
        m.T, m.S, rule=lambda c_, t, s: bM / blk.R[t, s] - blk.gpath[t, s] <= 0)


def _bs_rows(c: _Build, blk, b: int) -> None:
    """BS b's offloading delays dD_bs, its coupling rows (the max of dD_nb over its UEs for
    `eq:delayAtDCdataCollect`, delta^B_b's epigraph, `delay_BS_Reception_mainpaper`) and
    its cost."""
    m, inst, Lb, dM_sb, xi3 = c.m, c.inst, c.Lb, c.dM_sb, c.xi3
    dD_coef, dM_bn, bD = c.dD_coef, c.dM_bn, c.bD
    blk.dD_bs = pyo.Expression(m.T, m.S, rule=lambda e, t, s: bD * blk.D[t] * blk.rho_bs[t, s] / blk.R[t, s])
    blk.coupling.eNB_epi = pyo.Constraint(  # max_n dD_nb over b's UEs (eq:delayAtDCdataCollect)
        m.T, Lb[b], rule=lambda c_, t, n: dD_coef[t, n, b] * blk.rho_nb[t, n] - blk.eNBb[t] <= 0)
    blk.coupling.dB_epi = pyo.Constraint(  # delta^B_b = max_n dM_bn I_bn
        m.T, Lb[b], rule=lambda c_, t, n: dM_bn[t, b, n] * blk.Ibn[t, n] - blk.dB[t] <= 0)
    blk.coupling.recv = pyo.Constraint(  # delay_BS_Reception_mainpaper
        m.T, rule=lambda c_, t: sum(dM_sb[t, s, b] * blk.Is[t, s] for s in m.S) + blk.dB[t] - blk.dR[t] <= 0)
    blk.ED = pyo.Expression(m.T, rule=lambda e, t: sum(blk.dD_bs[t, s] * inst.P_bs[b, s] for s in m.S))
    blk.ER = pyo.Expression(m.T, rule=lambda e, t: sum(dM_sb[t, s, b] * inst.P_sb[s, b] * blk.Is[t, s]
                                                        for s in m.S) + blk.dB[t] * inst.P_b[t, b])
    blk.cost = pyo.Expression(expr=sum(xi3[1] * blk.ED[t] + xi3[5] * blk.ER[t] for t in m.T))


# ---------------------------------------------------------------------- DC s
def _dc_convex(c: _Build, blk, s: int) -> None:
    """DC s's convex set: the I_s simplex (block form: every DC's copy; compact: DC 0's),
    (block form) sum_b rho_nb <= 1 over its copies (only where it holds them: over the
    owners' variables it is UE n's own sum), and the ingress knapsack
    (`eqn: Server_capacity`)."""
    m, inst, Lu = c.m, c.inst, c.Lu
    blk.convex = pyo.Block()
    blk.coupling = pyo.Block()
    if c.copies or s == 0:
        blk.convex.Is_sum = pyo.Constraint(m.T, rule=lambda c_, t: sum(blk.Is[t, k] for k in m.S) == 1)
    if c.holds_copies(blk):
        blk.convex.rho_nb_sum = pyo.Constraint(
            m.T, m.N, rule=lambda c_, t, n: sum(blk.rho_nb[t, n, b] for b in Lu[n]) <= 1)
    blk.convex.ingress = pyo.Constraint(  # eqn: Server_capacity
        m.T, rule=lambda c_, t: sum(blk.R[t, b] for b in m.B) <= inst.Rmax_s[s] / GBIT)


def _dc_terms(c: _Build, blk, s: int) -> None:
    """DC s's data volumes (per BS and in total; compact form: lifted), training delay and
    energy, and its parts of delta^A and delta^R and their energies."""
    m, inst, Lb, Dbar, dM_ss = c.m, c.inst, c.Lb, c.Dbar, c.dM_ss
    if c.copies:
        blk.Db = pyo.Expression(m.T, m.B, rule=lambda e, t, b: sum(
            blk.rho_nb[t, n, b] * Dbar[t, n] for n in Lb[b]))
        blk.D = pyo.Expression(m.T, rule=lambda e, t: sum(blk.rho_bs[t, b] * blk.Db[t, b] for b in m.B))
    else:  # compact form: BS data from bs[b], the DC's data volume lifted (module docstring)
        blk.lift = pyo.Block()
        blk.Db = pyo.Expression(m.T, m.B, rule=lambda e, t, b: m.bs[b].D[t])
        _lift_volume(c, blk, lambda t: sum(blk.rho_bs[t, b] * blk.Db[t, b] for b in m.B))
    blk.dP = pyo.Expression(m.T, rule=lambda e, t: blk.gamma[t] * blk.m[t] * blk.D[t]
                            / (inst.M[s] * inst.C[s] * blk.z[t]))
    blk.EP = pyo.Expression(m.T, rule=lambda e, t: blk.dP[t] * inst.Pbar[s] * inst.M[s]
                            * (inst.rho_idle * blk.z[t] ** 2 + 1 - inst.rho_idle))
    blk.dA_s = pyo.Expression(m.T, rule=lambda e, t: sum(dM_ss[t, s, k] * blk.Is[t, k] for k in m.S))
    blk.dR_s = pyo.Expression(m.T, rule=lambda e, t: sum(dM_ss[t, k, s] * blk.Is[t, k] for k in m.S))
    blk.EA = pyo.Expression(m.T, rule=lambda e, t: sum(dM_ss[t, s, k] * inst.P_ss[s, k] * blk.Is[t, k]
                                                        for k in m.S))
    blk.ER = pyo.Expression(m.T, rule=lambda e, t: sum(dM_ss[t, k, s] * inst.P_ss[k, s] * blk.Is[t, k]
                                                        for k in m.S))


def _dc_rows(c: _Build, blk, s: int) -> None:
    """DC s's coupling rows: the epigraphs of the maxima in `eq:delayAtDCdataCollect`, its
    delay row (`delay_agg_servers_mainpaper`), its reception row (`delay_server_Reception`),
    the bound's DPU epigraphs and (relaxed, DC 0) the forcing rows of I_s (`con1add`); then
    its cost."""
    m, bD, xi3 = c.m, c.bD, c.xi3
    blk.coupling.eBS_epi = pyo.Constraint(  # max_b in eq:delayAtDCdataCollect
        m.T, m.B, rule=lambda c_, t, b: bD * blk.Db[t, b] * blk.rho_bs[t, b] / blk.R[t, b] - blk.eBS[t] <= 0)
    if c.copies or s == 0:  # max_{n,b} dD_nb = max_b (BS b's max over its UEs)
        blk.coupling.eNB_epi = pyo.Constraint(
            m.T, m.B, rule=lambda c_, t, b: blk.eNBb[t, b] - blk.eNB[t] <= 0)
    blk.coupling.delay = pyo.Constraint(  # delay_agg_servers_mainpaper
        m.T, rule=lambda c_, t: blk.eBS[t] + blk.eNB[t] + blk.dP[t] + blk.dA_s[t] - blk.dA[t] <= 0)
    blk.coupling.recv = pyo.Constraint(  # delay_server_Reception (docs/formulation.md: delta^R_s)
        m.T, rule=lambda c_, t: blk.dR_s[t] - blk.dR[t] <= 0)
    _dpu_epigraphs(m, blk, c.bound)
    if c.binaries == "relaxed" and s == 0:
        blk.coupling.forcing = pyo.Block()
        blk.coupling.forcing.force_Is = pyo.Constraint(  # con1add
            m.T, rule=lambda c_, t: sum(blk.Is[t, k] * (1 - blk.Is[t, k]) for k in m.S) <= 0)
    blk.cost = pyo.Expression(expr=sum(
        xi3[3] * blk.EP[t] + xi3[4] * blk.EA[t] + xi3[5] * blk.ER[t] for t in m.T))


def _objective(c: _Build, w: dict[str, float], held: set[str] | None = None) -> None:
    """The objective of P (`eqn: optimization objective text`): xi1 ML term + xi2 delays +
    xi3 energies, with tau_t = dA_t + dR_t and the bound's aggregates. With `held` (the nodes
    of `build_problem(rows=)`): the ML and delay terms only, and dc0's step row only when
    dc0 is held."""
    m, inst, own = c.m, c.inst, c.own
    m.tau = pyo.Expression(m.T, rule=lambda e, t: own.dA[t] + own.dR[t])
    m.gbar = pyo.Expression(expr=inst.I * _weighted_gammas(m, inst))
    vt = _bound_vartheta(m, inst)
    m.vartheta_b = vt if isinstance(vt, float) else pyo.Expression(expr=vt)
    if c.bound == "corollary" and (held is None or "dc0" in held):
        _step_row(m, inst)
    m.ml_term = pyo.Expression(expr=_ml_expression(m, inst, c.bound))
    m.delay_term = pyo.Expression(expr=sum(m.tau[t] for t in m.T))
    if held is not None:
        return
    m.energy_term = pyo.Expression(expr=sum(blk.cost for blk in _node_blocks(m)))
    m.obj = pyo.Objective(expr=w["xi1"] * m.ml_term + w["xi2"] * m.delay_term + w["xi3"] * m.energy_term)


def build_problem(inst: Instance, *, binaries: str = "relaxed", bound: str = "corollary",
                  weights: dict[str, float] | None = None,
                  fixed: Sequence[RoundDecision] | Solution | None = None,
                  copies: bool = True, delay_cap: float | None = None,
                  rows: Iterable[str] | None = None, defer: bool = False) -> pyo.ConcreteModel:
    """Problem P for `inst` as a block-structured Pyomo ConcreteModel (see module docstring).

    Args:
        inst: the instance (validated here).
        binaries: `"relaxed"` (I in [0,1] with the forcing constraints sum I(1-I) <= 0, paper
            con1add-con11add), `"binary"` (I binary, for SCIP), or `"fixed"` (I fixed to
            `fixed`'s aggregator and associations, a continuous NLP for Ipopt).
        bound: `"corollary"` (eq:convSpecial, tau term kept) or `"general"`
            (eq:GenConvBound).
        weights: overrides of xi1, xi2, xi3 (the instance's by default).
        fixed: the rounds (or a solution) whose binaries `binaries="fixed"` fixes.
        copies: True: each node holds its own copies, tied by `m.consensus`
            (docs/formulation.md, "7. Decomposition into node blocks"); False: every copy is a
            Pyomo Reference to the owner's variable (same equations, no consensus block, no
            duplicated simplices), the compact form for the centralised solvers.
        delay_cap: a valid upper bound on every delay variable (dA, dR and their epigraphs),
            e.g. J(feasible point)/xi2 since every part of the objective is >= 0; global
            solvers need it.
        rows: the names of the nodes (`'ue0'`, `'bs3'`, `'dc1'`, as `node_blocks`) whose terms
            and coupling rows are built (default: every node), for a process that holds only
            those nodes (an MPI rank of the decentralised solver). Every node still gets its
            own variables and convex set, and dc0's terms (the ML term reads its data volumes),
            with the general bound every DPU's; only the held nodes get copies, `m.consensus`
            is empty, and `m.energy_term` and `m.obj` are not built: each held node's share is
            its `blk.cost` (block form only).
        defer: with `rows`, the held nodes' terms, coupling rows and cost (dc0's excepted) are
            built later, one node at a time, by `build_node_rows`.

    Returns:
        The model `m`: blocks `m.ue[n]`, `m.bs[b]`, `m.dc[s]` holding variables, convex sets
        and coupling rows, `m.consensus`, the objective `m.obj` (eqn: optimization objective
        text).

    Raises:
        InstanceError: `inst` is invalid.
        ValueError: an unknown `binaries` or `bound`, bad weights, or `"fixed"` without `fixed`.

    Examples:
        >>> from cefl_opt import build_problem, make_instance
        >>> m = build_problem(make_instance("tiny", seed=0))
        >>> len(m.ue), len(m.bs), len(m.dc)
        (2, 1, 2)
    """
    inst = validated(inst)
    held = _held_nodes(inst, rows, copies)
    keep = 2 if bound == "general" else 1   # a node not held: convex set (and terms, below)
    w = _checked_weights(inst, binaries, bound, fixed, weights)
    c = _new_model(inst, binaries=binaries, bound=bound, w=w, copies=copies,
                   delay_cap=delay_cap)
    c.held = held
    m = c.m
    m.bs = pyo.Block(m.B)
    m.ue = pyo.Block(m.N)
    m.dc = pyo.Block(m.S)
    _ue_variables(c)
    _bs_variables(c)
    _dc_variables(c)
    _ue_copies(c)
    _bs_copies(c)
    _dc_copies(c)
    for kind, idx, blocks, rules in (("bs", m.B, m.bs, (_bs_convex, _bs_volume, _bs_rows)),
                                     ("ue", m.N, m.ue, (_ue_convex, _ue_terms, _ue_rows)),
                                     ("dc", m.S, m.dc, (_dc_convex, _dc_terms, _dc_rows))):
        for i in idx:
            name = f"{kind}{i}"
            todo = (rules if held is None or name in held
                    else rules[:2] if name == "dc0" else rules[:keep])
            if defer and held is not None and name in held and name != "dc0":
                m._pending[name] = functools.partial(_run_rules, c, todo[keep:], blocks[i], i)
                todo = todo[:keep]
            _run_rules(c, todo, blocks[i], i)
    m.consensus = pyo.Block()   # G(w) = 0
    if copies and held is None:
        _consensus(m)
    _objective(c, w, held)
    m._lifts = _lift_candidates(m) if copies else []
    if binaries == "fixed":
        fix_binaries(m, fixed)
    return m


def _run_rules(c: _Build, rules: Sequence[Callable], blk, i: int) -> None:
    for rule in rules:
        rule(c, blk, i)


def build_node_rows(m, name: str) -> None:
    """Build the terms, coupling rows and cost of held node `name` of a model of
    `build_problem(rows=..., defer=True)` now (once); nothing for a node built already."""
    job = m._pending.pop(name, None)
    if job is not None:
        job()


def _held_nodes(inst: Instance, rows: Iterable[str] | None, copies: bool) -> set[str] | None:
    """`build_problem`'s `rows` checked: None for every node, else the set of node names."""
    if rows is None:
        return None
    held = {str(r) for r in rows}
    names = set(inst.node_names())
    unknown = sorted(held - names)
    if unknown:
        raise ValueError(f"option 'rows': unknown node(s) {unknown[:5]}")
    if not copies:
        raise ValueError("option 'rows' needs the block form (copies=True)")
    return None if held == names else held


def _lift_candidates(m) -> list:
    """Block form: the named sums that the per-node derivative providers treat as internal
    variables (`solvers.node_structure.NodeProvider`; P itself is unchanged): the data volumes (BS D_b, a
    DC's D_b copies and D_s) and the bound's aggregates (gbar, the step row's sum, vartheta,
    the general bound's noise and local sums). Each is a sum of small terms, but a nonlinear
    function of it (sqrt(gbar), gamma m D_s / z) gets a dense Hessian block over all its
    variables from the AMPL Solver Library; with the sum as an internal variable it does not."""
    out = [c for blk in list(m.bs.values()) + list(m.dc.values()) for c in node_lifts(blk)]
    out += [c for c in (m.gbar, getattr(m.dc[0], "gsum", None), m.vartheta_b,
                        getattr(m, "ml_noise", None), getattr(m, "ml_local", None))
            if isinstance(c, pyo.Expression)]
    return out


def drop_node_terms(blk) -> None:
    """Delete node block `blk`'s terms, coupling rows and cost (its Expressions and
    `blk.coupling`), keeping its variables and convex set: for a process that has built the
    node's NLP and reads the Pyomo rows no more (`solvers.node_structure.build_structure` under
    `local=`)."""
    for comp in list(blk.component_objects(pyo.Expression, descend_into=False)):
        blk.del_component(comp)
    if hasattr(blk, "coupling"):
        blk.del_component(blk.coupling)


def tie_pairs(m) -> Iterable[tuple[Any, Any]]:
    """(copy, owner) for every copy variable of the block form, the pairs of the consensus rows
    copy == owner (`_consensus`), read from the model's record of its copies (no rows needed:
    a model of `build_problem(rows=)` has none)."""
    for comp, target in m._ties:
        for key, v in comp.items():
            yield v, (target() if key is None else
                      target(*key) if isinstance(key, tuple) else target(key))


def node_lifts(blk) -> list:
    """The named sums of node block `blk` among `_lift_candidates`: a BS's data volume D, a
    DC's Db and D (those built: a node not held has none)."""
    names = {"bs": ("D",), "dc": ("Db", "D")}.get(blk.parent_component().local_name, ())
    return [getattr(blk, k) for k in names if hasattr(blk, k)]


def _tie(copy, owner):
    """The consensus row copy == owner; none where the copy is the owner's variable itself
    (dc0's own I_s, dA, dR and globals)."""
    return pyo.Constraint.Skip if copy is owner else copy == owner


def _consensus(m) -> None:
    """G(w) = 0: every copy equals its owner's variable (paper eqn: local copy 1-2)."""
    cs = m.consensus
    own = m.dc[0]
    _Lu, _Lb, pairs, pairs_bn = m._links  # present UE-BS links only
    cs.rho_nb_bs = pyo.Constraint(m.T, pairs, rule=lambda c, t, n, b: _tie(m.bs[b].rho_nb[t, n], m.ue[n].rho[t, b]))
    cs.rho_nb_dc = pyo.Constraint(m.T, pairs, m.S,
                                  rule=lambda c, t, n, b, s: _tie(m.dc[s].rho_nb[t, n, b], m.ue[n].rho[t, b]))
    cs.rho_bs_dc = pyo.Constraint(m.T, m.B, m.S, rule=lambda c, t, b, s: _tie(m.dc[s].rho_bs[t, b], m.bs[b].rho_bs[t, s]))
    cs.eNBb_dc = pyo.Constraint(m.T, m.B, m.S,
                                rule=lambda c, t, b, s: _tie(m.dc[s].eNBb[t, b], m.bs[b].eNBb[t]))
    cs.R_dc = pyo.Constraint(m.T, m.B, m.S, rule=lambda c, t, b, s: _tie(m.dc[s].R[t, b], m.bs[b].R[t, s]))
    cs.Ibn_bs = pyo.Constraint(m.T, pairs_bn, rule=lambda c, t, b, n: _tie(m.bs[b].Ibn[t, n], m.ue[n].Ibn[t, b]))
    cs.Is_ue = pyo.Constraint(m.T, m.S, m.N, rule=lambda c, t, s, n: _tie(m.ue[n].Is[t, s], own.Is[t, s]))
    cs.Is_bs = pyo.Constraint(m.T, m.S, m.B, rule=lambda c, t, s, b: _tie(m.bs[b].Is[t, s], own.Is[t, s]))
    cs.Is_dc = pyo.Constraint(m.T, m.S, m.S, rule=lambda c, t, s, k: _tie(m.dc[k].Is[t, s], own.Is[t, s]))
    cs.dA_ue = pyo.Constraint(m.T, m.N, rule=lambda c, t, n: _tie(m.ue[n].dA[t], own.dA[t]))
    cs.dA_bs = pyo.Constraint(m.T, m.B, rule=lambda c, t, b: _tie(m.bs[b].dA[t], own.dA[t]))
    cs.dA_dc = pyo.Constraint(m.T, m.S, rule=lambda c, t, k: _tie(m.dc[k].dA[t], own.dA[t]))
    cs.dR_bs = pyo.Constraint(m.T, m.B, rule=lambda c, t, b: _tie(m.bs[b].dR[t], own.dR[t]))
    cs.dR_dc = pyo.Constraint(m.T, m.S, rule=lambda c, t, k: _tie(m.dc[k].dR[t], own.dR[t]))
    for g in m._globals:
        setattr(cs, f"{g}_ue", pyo.Constraint(m.N, rule=lambda c, n, g=g: _tie(m.ue[n]._g[g], own._g[g])))
        setattr(cs, f"{g}_dc", pyo.Constraint(m.S, rule=lambda c, k, g=g: _tie(m.dc[k]._g[g], own._g[g])))


def _dpu_epigraphs(m, blk, bound: str) -> None:
    """A DPU's links to the bound's global epigraph variables (copies held by the DPU)."""
    inst = m._inst
    if bound == "corollary":
        blk.coupling.m_min_epi = pyo.Constraint(m.T, rule=lambda c, t: blk._g["m_min"] - blk.m[t] <= 0)
        blk.coupling.g_max_epi = pyo.Constraint(m.T, rule=lambda c, t: blk.gamma[t] - blk._g["g_max"] <= 0)
    else:  # term (d) of eq:GenConvBound: max over t, i of g^2 (||a||_1 - a_{-1}) / ||a||_1
        q = 1.0 - inst.eta * inst.mu

        def h(c, t):
            g = blk.gamma[t]
            a1 = g if q == 1.0 else (1 - q ** g) / (1 - q)
            return g ** 2 * (a1 - 1) / a1 - blk._g["h_max"] <= 0
        blk.coupling.h_max_epi = pyo.Constraint(m.T, rule=h)


def _weighted_gammas(m, inst: Instance, f=lambda g: g):
    """sum_t sum_i (D_i[t] / sum_j D_j[t]) f(gamma[t, i]) (docs/formulation.md "Resolutions in the
    ML term": the bound counts training that happens). sum_j D_j[t] = sum_n Dbar[t, n] (data is conserved; `system.data_shares`).

    Block form: the data volumes are read over dc[0]'s copies (dc[0] hosts the step-size row,
    which uses the same sum); what dc[0] does not hold (rho_bs[:, s] for s != 0) from its owner
    bs[b]. Compact form: each DPU's (lifted) data volume `blk.D`, which keeps the objective's
    Hessian small (module docstring)."""
    own = m.dc[0]
    Lu = m._links[0]  # present UE-BS links only
    out = 0
    for t in m.T:
        Dt = float(inst.Dbar[t].sum())
        for n in m.N:
            if m._copies:
                D = (1 - sum(own.rho_nb[t, n, b] for b in Lu[n])) * float(inst.Dbar[t, n])
            else:
                D = m.ue[n].D[t]
            out += D / Dt * f(m.ue[n].gamma[t])
        for s in m.S:
            fg = f(m.dc[s].gamma[t])
            if m._copies:  # D_s f(gamma_s) written out per BS: small terms (sparse Hessian)
                out += sum((own.rho_bs[t, b] if s == 0 else m.bs[b].rho_bs[t, s]) * own.Db[t, b]
                           * fg / Dt for b in m.B)
            else:
                out += m.dc[s].D[t] / Dt * fg
    return out


def _a1(inst: Instance, g):
    """||a||_1 of eq:normalGrad at the instance's eta, mu (continued to real gamma)."""
    q = 1.0 - inst.eta * inst.mu
    return g if q == 1.0 else (1 - q ** g) / (1 - q)


def _bound_vartheta(m, inst: Instance):
    """vartheta of the bound (`system.bound_vartheta`): the instance's number, or the round
    average of tau_eff = sum_i p_i ||a_i||_1 (docs/formulation.md "Resolutions in the ML term": one vartheta for bound and trainer)."""
    if inst.vartheta_mode == "constant":
        return float(inst.vartheta)
    return _weighted_gammas(m, inst, lambda g: _a1(inst, g)) / inst.T


def _step_row(m, inst: Instance) -> None:
    """Theorem 1's step-size condition for the corollary's eta = sqrt(d / (gbar T))
    (`Thm: ML convergence main`; docs/formulation.md "Resolutions in the ML term"),
    4 d L^2 g_max (g_max - 1)(2 zeta1^2 + 1) <= gbar T, divided by d T; a coupling row hosted by
    dc[0], which owns g_max (`system.step_condition` is its numpy twin)."""
    T, d = inst.T, inst.I
    own = m.dc[0]
    k = 4.0 * inst.L ** 2 * (2.0 * inst.zeta1 ** 2 + 1.0) / T
    # the sum is written out again rather than read from the named Expression m.gbar: with
    # m.gbar shared by the objective and this row, the NL writer's defined variables gave ASL
    # objective gradients that disagree with finite differences (tests/test_decentralized.py)
    own.gsum = pyo.Expression(expr=_weighted_gammas(m, inst))   # used by this row only
    own.coupling.step = pyo.Constraint(expr=k * own.g_max * (own.g_max - 1) - own.gsum <= 0)


def _ml_expression(m, inst: Instance, bound: str):
    """Objective term (a): eq:convSpecial (tau term before condition (v); gbar weighted by data,
    vartheta per vartheta_mode: docs/formulation.md "Resolutions in the ML term") or eq:GenConvBound."""
    T, d = inst.T, inst.I
    own = m.dc[0]
    drift = sum(m.tau[t] * float(inst.Delta[t].sum()) for t in m.T)
    th, sg = float(inst.Theta.max()), float(inst.sigma.max())
    L, F0 = inst.L, inst.F0_minus_Fstar
    vt = m.vartheta_b
    dpus = [(blk, i) for i, blk in enumerate(list(m.ue.values()) + list(m.dc.values()))]
    if bound == "corollary":
        gbar = m.gbar
        c0 = 4.0 * pyo.sqrt(gbar) / (vt * math.sqrt(d * T))
        return (c0 * F0 + c0 * drift
                + 16.0 * L * vt * th * sg ** 2 / own.m_min * pyo.sqrt(d / T) / pyo.sqrt(gbar)
                + 12.0 * L ** 2 * d * th * sg ** 2 * own.g_max / (gbar * own.m_min * T)
                + 12.0 * L ** 2 * inst.zeta2 * d * own.g_max ** 2 / (gbar * T))
    eta, q = inst.eta, 1.0 - inst.eta * inst.mu
    c = 4.0 / (vt * eta * T)
    noise, local = 0, 0
    for blk, i in dpus:
        for t in m.T:
            g, mm = blk.gamma[t], blk.m[t]
            a1 = g if q == 1.0 else (1 - q ** g) / (1 - q)
            a2 = g if q == 1.0 else (1 - q ** (2 * g)) / (1 - q ** 2)
            Dt = float(inst.Dbar[t].sum())
            ts = inst.Theta[i] * inst.sigma[i] ** 2
            noise += blk.D[t] / Dt ** 2 * (1 - mm) * ts / mm * a2 / a1 ** 2
            local += (1 - mm) * ts * g * (a2 - 1) / (mm * a1 * Dt)
    m.ml_noise, m.ml_local = pyo.Expression(expr=noise), pyo.Expression(expr=local)
    return (c * F0 + c * drift + 16.0 * eta * L * vt / T * m.ml_noise
            + 12.0 * eta ** 2 * L ** 2 * inst.zeta2 * own.h_max + 12.0 * eta ** 2 * L ** 2 / T * m.ml_local)


# ---------------------------------------------------------------------- structure queries
def _node_blocks(m) -> list:
    return list(m.ue.values()) + list(m.bs.values()) + list(m.dc.values())


def node_blocks(m) -> dict[str, Any]:
    """{'ue0': block, ..., 'bs0': ..., 'dc0': ...} in a fixed order."""
    out = {f"ue{n}": m.ue[n] for n in m.N}
    out.update({f"bs{b}": m.bs[b] for b in m.B})
    out.update({f"dc{s}": m.dc[s] for s in m.S})
    return out


def node_variables(blk) -> list:
    """The node's variables: its local ones and its copies of shared ones."""
    out = []
    for comp in blk.component_objects(pyo.Var, descend_into=False):
        if not comp.is_reference():
            out.extend(comp.values())
    return out


def node_constraints(blk, role: str) -> list:
    """The node's constraints of `role` 'convex' or 'coupling' (hosted by this node; the
    binary-forcing rows included), 'forcing' (only those: the sub-block `blk.coupling.forcing`,
    relaxed model only), or 'lift' (the compact form's definitions of its lifted variables;
    none with copies)."""
    if role not in ("convex", "coupling", "forcing", "lift"):
        raise ValueError(f"role {role!r}: expected 'convex', 'coupling', 'forcing' or 'lift'")
    holder = (getattr(blk.coupling, "forcing", None) if role == "forcing"
              else getattr(blk, role, None))
    if holder is None:
        return []
    return list(holder.component_data_objects(pyo.Constraint, active=True))


def is_forcing(con) -> bool:
    """True for a binary-forcing row sum I (1 - I) <= 0 (paper con1add-con12add)."""
    holder = con.parent_block()
    return holder.local_name == "forcing" and holder.parent_block().local_name == "coupling"


def constraint_host(con):
    """The node block hosting constraint `con` (None for a consensus row)."""
    holder = con.parent_block()
    if is_forcing(con):
        holder = holder.parent_block()
    if holder.local_name == "consensus":
        return None
    return holder.parent_block()


def consensus_constraints(m) -> list:
    return list(m.consensus.component_data_objects(pyo.Constraint, active=True))


def variable_owner_map(m) -> dict[int, str]:
    """id(VarData) -> node name, for enumerating which nodes a constraint touches."""
    out = {}
    for name, blk in node_blocks(m).items():
        for v in node_variables(blk):
            out[id(v)] = name
    return out


def constraint_nodes(m, con, owner_map: dict[int, str] | None = None) -> set[str]:
    """Names of the nodes whose variables appear in constraint `con`."""
    from pyomo.core.expr.visitor import identify_variables
    owner_map = owner_map or variable_owner_map(m)
    return {owner_map[id(v)] for v in identify_variables(con.body, include_fixed=True)}


# ---------------------------------------------------------------------- binaries
def _binary_vars(m):
    """(var, t, key, kind) for every copy of every binary decision."""
    Lu, Lb = m._links[:2]
    for n in m.N:
        for t in m.T:
            for b in Lu[n]:
                yield m.ue[n].Inb[t, b], t, (n, b), "Inb"
                yield m.ue[n].Ibn[t, b], t, (n, b), "Ibn"
    for b in m.B:
        for t in m.T:
            for n in Lb[b]:
                yield m.bs[b].Ibn[t, n], t, (n, b), "Ibn"
    for blk in _node_blocks(m):
        for t in m.T:
            for s in m.S:
                yield blk.Is[t, s], t, s, "Is"


def fix_binaries(m, decisions: Sequence[RoundDecision] | Solution) -> None:
    """Fix every copy of I_s, I_nb, I_bn to the aggregator and associations of `decisions`."""
    rounds = decisions.rounds if isinstance(decisions, Solution) else list(decisions)
    if len(rounds) != len(m.T):
        raise ValueError(f"fixed decisions have {len(rounds)} rounds, the model {len(m.T)}")
    for v, t, key, kind in _binary_vars(m):
        r = rounds[t]
        if kind == "Is":
            val = 1.0 if key == int(r.aggregator) else 0.0
        elif kind == "Inb":
            val = 1.0 if int(r.uplink_bs[key[0]]) == key[1] else 0.0
        else:
            val = 1.0 if int(r.downlink_bs[key[0]]) == key[1] else 0.0
        v.fix(val)
    # constraints left with no free variable (copy = copy of fixed binaries, simplices over
    # fixed I's) would count as equations without degrees of freedom for Ipopt
    trivial: list = []
    pyo.TransformationFactory("contrib.deactivate_trivial_constraints").apply_to(
        m, tolerance=1e-9, return_trivial=trivial)
    m._trivial = getattr(m, "_trivial", []) + trivial


def unfix_binaries(m) -> None:
    for v, *_ in _binary_vars(m):
        v.unfix()
    for c in getattr(m, "_trivial", []):
        c.activate()
    m._trivial = []
