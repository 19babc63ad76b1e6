"""The one codec between the variables of `build_problem`'s model and a `Solution`.

Internal units of the model (chosen so that variables are O(1)) against the physical units of a
`Solution` (docs/formulation.md, '2. Variables'):

    f     GHz                     (Solution: Hz)               factor GHZ
    R_bs  Gbit/s                  (Solution: bit/s)            factor GBIT
    z     fraction z / C_s        (Solution: data points / s)  factor C_s
    Dv    thousands of samples    (lifted D_b, D_s of the compact form)  factor KS
    rho, gamma, m, I              as they are

`OWNER_FIELDS` says where each per-round field of a `RoundDecision` lives in the model (the
owner's copy, docs/formulation.md, '7. Decomposition into node blocks') and with which factor
(None where an absent UE-BS link has no variable, `Instance.links`: rho_nb reads 0 there, an
indicator -inf, i.e. never chosen); `load_solution`, `extract_solution` and `VariableIndex` (the
positions of those variables in a flat vector, e.g. PyNumero's primal order, for the SCA) all
read that one table. `clip_to_bounds` projects a solver's point onto the variable boxes and
simplices.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from cefl_opt.instance import Instance
from cefl_opt.solution import RoundDecision, Solution
from cefl_opt.system import a_norms, gamma_cap

GHZ = 1e9    # f: GHz in the model
GBIT = 1e9   # R_bs: Gbit/s in the model (and beta_D, beta_M in Gbit)
KS = 1e3     # lifted data volumes of the compact form: thousands of samples

# field -> (owner's variables of round t as a nested list [rows][cols] or [items], factor
# model -> Solution as a function of the instance)
_Fn = Callable[[Any, int], Any]


def _links(m, name: str, t: int) -> list[list]:
    """[N][B] UE n's variable `name` (rho, Inb, Ibn) on link b, None where the link is absent."""
    on = m._inst.link_mask
    return [[getattr(m.ue[n], name)[t, b] if on[n, b] else None for b in m.B] for n in m.N]


OWNER_FIELDS: dict[str, tuple[_Fn, Callable[[Instance], Any]]] = {
    "rho_nb": (lambda m, t: _links(m, "rho", t), lambda i: 1.0),
    "rho_bs": (lambda m, t: [[m.bs[b].rho_bs[t, s] for s in m.S] for b in m.B], lambda i: 1.0),
    "f": (lambda m, t: [m.ue[n].f[t] for n in m.N], lambda i: GHZ),
    "z": (lambda m, t: [m.dc[s].z[t] for s in m.S], lambda i: np.asarray(i.C, float)),
    "gamma_ue": (lambda m, t: [m.ue[n].gamma[t] for n in m.N], lambda i: 1.0),
    "gamma_dc": (lambda m, t: [m.dc[s].gamma[t] for s in m.S], lambda i: 1.0),
    "m_ue": (lambda m, t: [m.ue[n].m[t] for n in m.N], lambda i: 1.0),
    "m_dc": (lambda m, t: [m.dc[s].m[t] for s in m.S], lambda i: 1.0),
    "R_bs": (lambda m, t: [[m.bs[b].R[t, s] for s in m.S] for b in m.B], lambda i: GBIT),
}
# indicators: owners' copies, I_s [S] on dc[0], I_nb [N,B] and I_bn [N,B] on ue[n]
INDICATORS: dict[str, _Fn] = {
    "Is": lambda m, t: [m.dc[0].Is[t, s] for s in m.S],
    "Inb": lambda m, t: _links(m, "Inb", t),
    "Ibn": lambda m, t: _links(m, "Ibn", t),
}


def _flat(nested: list) -> list:
    return [v for row in nested for v in row] if isinstance(nested[0], list) else list(nested)


def _map(fn: Callable[[Any], Any], nested, absent: Any) -> np.ndarray:
    """fn over a nested list of variables; `absent` where there is none (None)."""
    g = lambda v: absent if v is None else fn(v)  # noqa: E731
    return np.array([[g(v) for v in row] for row in nested] if nested and isinstance(
        nested[0], list) else [g(v) for v in nested])


def take(x: np.ndarray, index: np.ndarray, fill: float) -> np.ndarray:
    """x[index] with `fill` where index is -1 (an absent UE-BS link, `Instance.links`)."""
    return np.where(index >= 0, x[np.maximum(index, 0)], fill)


def rounds_from_values(inst: Instance, fields: Callable[[str, int], np.ndarray],
                       indicators: Callable[[str, int], np.ndarray], *,
                       associations: Callable | None = None) -> list[RoundDecision]:
    """Round decisions from model-unit arrays (`fields(name, t)`, `indicators(name, t)`): the
    factors of `OWNER_FIELDS` applied, the aggregator the largest I_s, associations by
    `associations(inst, t, Inb, Ibn)` (default: the largest entry, `cefl_opt.association`)."""
    from cefl_opt.association import round_associations
    assoc = associations or round_associations
    rounds = []
    for t in range(inst.T):
        kw = {k: fields(k, t) * factor(inst) for k, (_v, factor) in OWNER_FIELDS.items()}
        up, down = assoc(inst, t, indicators("Inb", t), indicators("Ibn", t))
        rounds.append(RoundDecision(**{k: np.array(v, float) for k, v in kw.items()},
                                    aggregator=int(np.argmax(indicators("Is", t))),
                                    uplink_bs=up, downlink_bs=down))
    return rounds


def extract_solution(m, *, method: str = "model", status: str = "unknown",
                     associations: Callable | None = None) -> Solution:
    """A Solution from the owners' copies of `m` (values in model units converted); the
    indicators rounded to their largest entry (`cefl_opt.association.round_associations`)."""
    import pyomo.environ as pyo
    inst: Instance = m._inst
    rounds = rounds_from_values(
        inst, lambda k, t: _map(pyo.value, OWNER_FIELDS[k][0](m, t), 0.0),
        lambda k, t: _map(pyo.value, INDICATORS[k](m, t), -np.inf), associations=associations)
    return Solution(rounds=rounds, method=method, status=status)


@dataclass
class VariableIndex:
    """Positions of the owners' copies of every field of a RoundDecision, and of the
    indicators, in a flat vector of the model's variables (e.g. PyNumero's primal order):
    `fields[name][t]` and `indicators[name][t]` are index arrays with the field's shape, -1
    where an absent UE-BS link has no variable (read them with `take`)."""

    fields: dict[str, list[np.ndarray]]
    indicators: dict[str, list[np.ndarray]]

    @classmethod
    def build(cls, m, position: Mapping[int, int] | Sequence) -> "VariableIndex":
        """`position`: id(VarData) -> index, or the sequence of the vector's variables."""
        if not isinstance(position, Mapping):
            position = {id(v): i for i, v in enumerate(position)}
        ix = lambda v: position[id(v)]  # noqa: E731
        T = range(len(m.T))
        return cls(fields={k: [_map(ix, get(m, t), -1).astype(int) for t in T]
                           for k, (get, _f) in OWNER_FIELDS.items()},
                   indicators={k: [_map(ix, get(m, t), -1).astype(int) for t in T]
                               for k, get in INDICATORS.items()})

    def decode(self, inst: Instance, x: np.ndarray, *, method: str, status: str = "unknown",
               associations: Callable | None = None) -> Solution:
        """The Solution held by the model-unit vector `x` (same rounding as `extract_solution`)."""
        x = np.asarray(x, float)
        rounds = rounds_from_values(inst, lambda k, t: take(x, self.fields[k][t], 0.0),
                                    lambda k, t: take(x, self.indicators[k][t], -np.inf),
                                    associations=associations)
        return Solution(rounds=rounds, method=method, status=status)


def load_solution(m, sol: Solution | Sequence[RoundDecision]) -> None:
    """Set every variable of `m` (all copies, epigraph and lifted variables at their tight
    values) from `sol`, converted to model units."""
    from cefl_opt import system
    inst: Instance = m._inst
    rounds = sol.rounds if isinstance(sol, Solution) else list(sol)

    def put(var, value) -> None:
        var.set_value(float(value), skip_validation=True)

    gam, ms = [], []
    for t, r in enumerate(rounds):
        rt = system.round_terms(inst, t, r)
        for k, (get, factor) in OWNER_FIELDS.items():  # the owners' copies
            vals = np.asarray(getattr(r, k), float) / factor(inst)
            for var, v in zip(_flat(get(m, t)), np.ravel(vals)):
                if var is not None:
                    put(var, v)
        for k, get in INDICATORS.items():
            for var, v in zip(_flat(get(m, t)), np.ravel(_indicator_values(r, k, inst))):
                if var is not None:
                    put(var, v)
        _load_copies(m, inst, t, r, rt)
        gam.append(np.concatenate([r.gamma_ue, r.gamma_dc]))
        ms.append(np.concatenate([r.m_ue, r.m_dc]))
    gam, ms = np.array(gam), np.array(ms)
    a1, _ = a_norms(gam, inst.eta, inst.mu)
    vals = {"m_min": float(ms.min()), "g_max": float(gam.max()),
            "h_max": float(np.max(gam ** 2 * (a1 - 1) / a1))}
    for blk in list(m.ue.values()) + list(m.dc.values()):
        for g in m._globals:
            put(blk._g[g], vals[g])


def _indicator_values(r: RoundDecision, name: str, inst: Instance) -> np.ndarray:
    """0/1 values of the indicators of round decision r: I_s [S], I_nb / I_bn [N,B]."""
    if name == "Is":
        return (np.arange(inst.S) == int(r.aggregator)).astype(float)
    sel = r.uplink_bs if name == "Inb" else r.downlink_bs
    return (np.asarray(sel, int)[:, None] == np.arange(inst.B)[None, :]).astype(float)


def _load_copies(m, inst: Instance, t: int, r: RoundDecision, rt: dict) -> None:
    """Non-owner copies, epigraph variables at their tight values and (compact form) the
    lifted variables, for round t."""
    def put(var, value) -> None:
        var.set_value(float(value), skip_validation=True)

    Ibn, Is = _indicator_values(r, "Ibn", inst), _indicator_values(r, "Is", inst)
    _Lu, Lb, pairs, _pairs_bn = m._links  # present UE-BS links only
    for n in m.N:
        u = m.ue[n]
        put(u.dA[t], rt["dA"])
        if hasattr(u, "keep"):
            put(u.keep[t], 1.0 - float(r.rho_nb[n].sum()))
    for b in m.B:
        bb = m.bs[b]
        put(bb.dA[t], rt["dA"])
        put(bb.dR[t], rt["dR"])
        put(bb.dB[t], rt["dB_b"][b])
        put(bb.eNBb[t], float(rt["dD_nb"][:, b].max(initial=0.0)))
        for n in Lb[b]:
            put(bb.rho_nb[t, n], r.rho_nb[n, b])
            put(bb.Ibn[t, n], Ibn[n, b])
        if not m._copies:  # lifted variables of the compact form
            put(bb.Dv[t], float(r.rho_nb[:, b] @ inst.Dbar[t]) / KS)
            for s in m.S:
                put(bb.gpath[t, s], inst.beta_M / r.R_bs[b, s])
    for s in m.S:
        d = m.dc[s]
        put(d.eBS[t], float(rt["dD_bs"][:, s].max()))
        put(d.eNB[t], float(rt["dD_nb"].max()))
        put(d.dA[t], rt["dA"])
        put(d.dR[t], rt["dR"])
        if not m._copies:
            put(d.Dv[t], float(rt["D_s"][s]) / KS)
        for b in m.B:
            put(d.eNBb[t, b], float(rt["dD_nb"][:, b].max(initial=0.0)))
            put(d.rho_bs[t, b], r.rho_bs[b, s])
            put(d.R[t, b], r.R_bs[b, s] / GBIT)
        for n, b in pairs:
            put(d.rho_nb[t, n, b], r.rho_nb[n, b])
    for blk in list(m.ue.values()) + list(m.bs.values()) + list(m.dc.values()):
        for s in m.S:
            put(blk.Is[t, s], Is[s])


def clip_to_bounds(sol: Solution, inst: Instance, bound: str = "corollary") -> Solution:
    """Project a solver's point onto the variable boxes and simplices (solver round-off only)."""
    gcap = gamma_cap(inst) if bound == "general" else inst.gamma_max
    for r in sol.rounds:
        r.rho_nb = np.clip(r.rho_nb, 0.0, 1.0)
        tot = r.rho_nb.sum(axis=1, keepdims=True)
        r.rho_nb = np.where(tot > 1.0, r.rho_nb / np.maximum(tot, 1e-300), r.rho_nb)
        r.rho_bs = np.clip(r.rho_bs, 0.0, 1.0)
        r.rho_bs = r.rho_bs / r.rho_bs.sum(axis=1, keepdims=True)
        r.f = np.clip(r.f, inst.f_min, inst.f_max)
        r.z = np.clip(r.z, inst.z_floor * inst.C, inst.C)
        r.gamma_ue = np.clip(r.gamma_ue, inst.gamma_min, gcap)
        r.gamma_dc = np.clip(r.gamma_dc, inst.gamma_min, gcap)
        r.m_ue = np.clip(r.m_ue, inst.m_floor, 1.0)
        r.m_dc = np.clip(r.m_dc, inst.m_floor, 1.0)
        r.R_bs = np.clip(r.R_bs, inst.R_floor, inst.Rmax_bs)
        over = r.R_bs.sum(axis=0) / inst.Rmax_s
        r.R_bs = np.where(over[None, :] > 1.0, r.R_bs / np.maximum(over, 1.0)[None, :], r.R_bs)
    if bound == "corollary":  # the step-size row (Theorem 1), restored by shrinking gamma
        from cefl_opt.system import enforce_step_condition
        enforce_step_condition(inst, sol)
    return sol
