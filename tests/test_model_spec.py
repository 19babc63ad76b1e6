"""The Pyomo model's variable bounds and convex rows against the formulation (docs/formulation.md,
'2. Variables' and '7. Decomposition into node blocks').

On the hand instance every bound is distinct (f_min != f_max per UE, Rmax_bs per link, and for
the general bound gamma_cap = 3.51 != gamma_max = 20), so a bound set from the wrong constant
fails here even where `clip_to_bounds` would hide it in solver output. Every variable of the
model must match a row of EXPECTED (a new variable needs its row here), and every row of every
node's `convex` block must have the formulation's sense, right-hand side and unit coefficients.
"""
from __future__ import annotations

import math

import pyomo.environ as pyo
import pytest
from pyomo.repn import generate_standard_repn

from cefl_opt.models import build_problem
from cefl_opt.system import gamma_cap

G = 1e9          # the model's GHz and Gbit/s
KS = 1e3         # the compact form's lifted data volumes, in thousands of samples


def expected_bounds(inst, bound: str):
    """The ranges of docs/formulation.md, '2. Variables', in the model's internal units:
    (node kind, variable) -> f(node, index)."""
    gcap = gamma_cap(inst) if bound == "general" else inst.gamma_max
    unit = lambda k, i: (0.0, 1.0)                                   # noqa: E731
    free_delay = lambda k, i: (0.0, None)                            # noqa: E731
    R_bs = lambda b, s: (inst.R_floor / G, inst.Rmax_bs[b, s] / G)   # noqa: E731
    return {
        ("ue", "f"): lambda n, i: (inst.f_min[n] / G, inst.f_max[n] / G),
        ("ue", "m"): lambda k, i: (inst.m_floor, 1.0), ("dc", "m"): lambda k, i: (inst.m_floor, 1.0),
        ("ue", "gamma"): lambda k, i: (inst.gamma_min, gcap),
        ("dc", "gamma"): lambda k, i: (inst.gamma_min, gcap),
        ("ue", "rho"): unit, ("ue", "keep"): unit, ("bs", "rho_bs"): unit,
        ("bs", "rho_nb"): unit, ("dc", "rho_nb"): unit, ("dc", "rho_bs"): unit,
        ("ue", "Inb"): unit, ("ue", "Ibn"): unit, ("bs", "Ibn"): unit,
        ("ue", "Is"): unit, ("bs", "Is"): unit, ("dc", "Is"): unit,
        ("bs", "R"): lambda b, i: R_bs(b, i[1]), ("dc", "R"): lambda s, i: R_bs(i[1], s),
        ("dc", "z"): lambda s, i: (inst.z_floor, 1.0),
        ("bs", "dB"): free_delay, ("dc", "eBS"): free_delay, ("dc", "eNB"): free_delay,
        ("bs", "eNBb"): free_delay, ("dc", "eNBb"): free_delay,
        ("ue", "dA"): free_delay, ("bs", "dA"): free_delay, ("dc", "dA"): free_delay,
        ("bs", "dR"): free_delay, ("dc", "dR"): free_delay,
        ("ue", "m_min"): lambda k, i: (inst.m_floor, 1.0), ("dc", "m_min"): lambda k, i: (inst.m_floor, 1.0),
        ("ue", "g_max"): lambda k, i: (inst.gamma_min, gcap),
        ("dc", "g_max"): lambda k, i: (inst.gamma_min, gcap),
        ("ue", "h_max"): free_delay, ("dc", "h_max"): free_delay,
        ("bs", "Dv"): lambda b, i: (0.0, inst.Dbar[i].sum() / KS),
        ("dc", "Dv"): lambda s, i: (0.0, inst.Dbar[i].sum() / KS),
        ("bs", "gpath"): lambda b, i: (inst.beta_M / inst.Rmax_bs[b, i[1]],
                                       inst.beta_M / inst.R_floor),
    }


def _node(v):
    """(kind, node index, variable name, variable index as a tuple) of a variable."""
    blk = v.parent_block()
    while blk.parent_block() is not None and blk.parent_component().local_name not in ("ue", "bs", "dc"):
        blk = blk.parent_block()
    kind = blk.parent_component().local_name
    idx = v.index()
    return kind, blk.index(), v.parent_component().local_name, idx if isinstance(idx, tuple) else (idx,)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


@pytest.mark.parametrize("bound", ["corollary", "general"])
@pytest.mark.parametrize("copies", [True, False])
@pytest.mark.parametrize("binaries", ["relaxed", "binary"])
def test_every_variable_bound_matches_spec(tiny_hand, bound, copies, binaries):
    inst, _ = tiny_hand
    if bound == "general":
        assert gamma_cap(inst) == pytest.approx(3.5097, abs=1e-4) and inst.gamma_max == 20
    m = build_problem(inst, bound=bound, copies=copies, binaries=binaries)
    want = expected_bounds(inst, bound)
    seen, checked = set(), 0
    for v in m.component_data_objects(pyo.Var, descend_into=True):
        if id(v) in seen:
            continue
        seen.add(id(v))
        kind, node, name, idx = _node(v)
        assert (kind, name) in want, f"variable {v.name} has no row in this test"
        lo, hi = want[(kind, name)](node, idx if name not in ("Dv",) else idx[0])
        assert _same(v.lb, lo) and _same(v.ub, hi), (v.name, (v.lb, v.ub), (lo, hi))
        if name in ("Inb", "Ibn", "Is"):
            assert v.is_binary() == (binaries == "binary"), v.name
        checked += 1
    assert checked > 50


def _row(c):
    """(lower, upper, equality, sorted coefficients, number of terms) of a linear row."""
    repn = generate_standard_repn(c.body)
    assert repn.is_linear(), c.name
    lo = None if c.lower is None else pyo.value(c.lower) - repn.constant
    hi = None if c.upper is None else pyo.value(c.upper) - repn.constant
    return lo, hi, c.equality, sorted(set(repn.linear_coefs)), len(repn.linear_vars)


@pytest.mark.parametrize("copies", [True, False])
def test_every_convex_row_has_the_spec_sense_and_rhs(tiny_hand, copies):
    inst, _ = tiny_hand
    N, B, S = inst.N, inst.B, inst.S
    m = build_problem(inst, bound="general", copies=copies)
    simplex_eq = lambda k: (1.0, 1.0, True, [1.0], k)             # noqa: E731  sum = 1
    simplex_le = lambda k: (None, 1.0, False, [1.0], k)           # noqa: E731  sum <= 1
    want = {
        # rho_nb: sum_b rho <= 1; the compact form writes it sum_b rho + keep == 1, keep in [0,1]
        ("ue", "rho_sum"): lambda k: simplex_le(B) if copies else simplex_eq(B + 1),
        ("ue", "Inb_sum"): lambda k: simplex_eq(B), ("ue", "Ibn_sum"): lambda k: simplex_eq(B),
        ("ue", "Is_sum"): lambda k: simplex_eq(S), ("bs", "Is_sum"): lambda k: simplex_eq(S),
        ("dc", "Is_sum"): lambda k: simplex_eq(S),
        ("bs", "rho_bs_sum"): lambda k: simplex_eq(S),
        ("dc", "rho_nb_sum"): lambda k: simplex_le(B),
        ("dc", "ingress"): lambda s: (None, inst.Rmax_s[s] / G, False, [1.0], B),
    }
    rows = 0
    for kind in ("ue", "bs", "dc"):
        for k, blk in getattr(m, kind).items():
            for c in blk.convex.component_data_objects(pyo.Constraint, active=True):
                name = c.parent_component().local_name
                assert (kind, name) in want, f"convex row {c.name} has no row in this test"
                got, exp = _row(c), want[(kind, name)](k)
                assert got[2] == exp[2] and got[3:] == exp[3:], (c.name, got, exp)
                assert _same(got[0], exp[0]) and _same(got[1], exp[1]), (c.name, got, exp)
                rows += 1
    # every simplex of the node blocks' convex sets is there, once per round (and per UE for the DC
    # copies)
    T = inst.T
    expect = T * (4 * N + 2 * B + 2 * S + N * S) if copies else T * (3 * N + B + 1 + S)
    assert rows == expect
