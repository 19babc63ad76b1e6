"""The Pyomo model of P (cefl_opt.models) agrees with the numpy evaluator (cefl_opt.system), and
its blocks have the structure of docs/formulation.md, '7. Decomposition into node blocks'.

At random feasible points of `small` and `paper` instances (several seeds, both bound forms),
after `load_solution(model, sol)`: the objective and its three terms equal the evaluator's, and
EVERY constraint body of the model equals its numpy counterpart (at the tight epigraph values),
every constraint holds, and every consensus equality holds exactly. The corollary form's
step-size row (Theorem 1, hosted by dc[0]) and the data-weighted gbar and vartheta (both
vartheta modes) are covered the same way.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.core.expr.visitor import identify_variables

from cefl_opt.generator import make_instance
from cefl_opt.models import (build_problem, consensus_constraints, extract_solution,
                             load_solution, node_blocks, node_constraints, node_variables)
from cefl_opt.models.problem import constraint_nodes, variable_owner_map
from cefl_opt.system import a_norms, evaluate, gamma_cap, round_terms, step_condition

GBIT = 1e9
REL = 1e-9


@lru_cache(maxsize=None)
def _instance(preset: str, seed: int):
    return make_instance(preset, seed=seed)


@lru_cache(maxsize=None)
def _model(preset: str, seed: int, bound: str, binaries: str = "relaxed", copies: bool = True):
    return build_problem(_instance(preset, seed), bound=bound, binaries=binaries, copies=copies)


def step_safe_gamma(inst) -> float:
    """A gamma bound under which the step-size condition holds whatever the data split:
    gbar T >= d T^2 gamma_min, so g (g - 1) <= T^2 / (4 L^2 (2 zeta1^2 + 1)) suffices."""
    k = inst.T ** 2 / (4 * inst.L ** 2 * (2 * inst.zeta1 ** 2 + 1))
    return min(inst.gamma_max, (1 + np.sqrt(1 + 4 * k)) / 2)


# ---------------------------------------------------------------------- expected bodies
def expected_bodies(m, inst, sol, bound):
    """{ConstraintData: (expected body, scale)} for every constraint of every node block,
    computed from cefl_opt.system.round_terms (numpy)."""
    T, N, B, S = inst.T, inst.N, inst.B, inst.S
    rts = [round_terms(inst, t, r) for t, r in enumerate(sol.rounds)]
    gam = np.array([np.concatenate([r.gamma_ue, r.gamma_dc]) for r in sol.rounds])
    ms = np.array([np.concatenate([r.m_ue, r.m_dc]) for r in sol.rounds])
    a1, _ = a_norms(gam, inst.eta, inst.mu)
    hval = gam ** 2 * (a1 - 1) / a1                       # [T, I]
    m_min, g_max, h_max = ms.min(), gam.max(), hval.max()
    with np.errstate(divide="ignore"):  # absent links (rate 0) have no rows
        dM_bn = [inst.beta_M / inst.R_bn[t] for t in range(T)]
    on = inst.link_mask
    out, missing = {}, set()

    def put(container, name, index, val, scale=1.0):
        comp = getattr(container, name, None)
        if comp is None:                      # compact form (copies=False) leaves some out
            node = container.parent_block()
            missing.add((node.parent_component().local_name, node.index(), name))
            return
        con = comp[index]
        assert con not in out, con.name
        out[con] = (float(val), float(max(abs(val), scale, 1e-300)))

    def epigraphs(blk, t, i, m_val, g_val):
        cp = blk.coupling
        if bound == "corollary":
            put(cp, "m_min_epi", (t), m_min - m_val, 1.0)
            put(cp, "g_max_epi", (t), g_val - g_max, g_max)
        else:
            put(cp, "h_max_epi", (t), hval[t, i] - h_max, h_max)

    if bound == "corollary":  # step-size row of dc[0]: (lhs - gbar T) / (d T)
        Di = np.array([np.concatenate([rt["D_n"], rt["D_s"]]) for rt in rts])
        lhs, rhs = step_condition(inst, gam, Di)
        put(m.dc[0].coupling, "step", None, (lhs - rhs) / (inst.I * T), rhs / (inst.I * T))
    for t, (r, rt) in enumerate(zip(sol.rounds, rts)):
        dA, dR = rt["dA"], rt["dR"]
        for n in range(N):
            u = m.ue[n]
            if m._copies:
                put(u.convex, "rho_sum", (t), r.rho_nb[n].sum())
            else:  # compact form: sum_b rho_nb + keep == 1 with the kept share as a slack
                put(u.convex, "rho_sum", (t), 1.0)
                assert pyo.value(u.keep[t]) == pytest.approx(1 - r.rho_nb[n].sum(), rel=1e-12,
                                                             abs=1e-15)
            for name in ("Inb_sum", "Ibn_sum", "Is_sum"):
                put(u.convex, name, (t), 1.0)
            put(u.coupling, "delay", (t), rt["ue_path"][n] - dA, dA)        # dA_n + dP_n - dA
            epigraphs(u, t, n, r.m_ue[n], r.gamma_ue[n])
            if m._binaries == "relaxed":
                put(u.coupling.forcing, "force_Inb", (t), 0.0)
                put(u.coupling.forcing, "force_Ibn", (t), 0.0)
        for b in range(B):
            bb = m.bs[b]
            put(bb.convex, "rho_bs_sum", (t), r.rho_bs[b].sum())
            put(bb.convex, "Is_sum", (t), 1.0)
            for n in np.flatnonzero(on[:, b]).tolist():
                put(bb.coupling, "dB_epi", (t, n),
                    dM_bn[t][b, n] * float(r.downlink_bs[n] == b) - rt["dB_b"][b], rt["dB_b"][b])
            put(bb.coupling, "recv", (t), rt["dR_b"][b] + rt["dB_b"][b] - dR, dR)
            emax_b = rt["dD_nb"][:, b].max(initial=0.0)     # BS b's max over its UEs
            for n in np.flatnonzero(on[:, b]).tolist():
                put(bb.coupling, "eNB_epi", (t, n), rt["dD_nb"][n, b] - emax_b, emax_b)
            if not m._copies:  # lifted D_b and beta_M / R_bs, loaded at their defining values
                Db = float(r.rho_nb[:, b] @ inst.Dbar[t])
                assert pyo.value(bb.Dv[t]) * 1e3 == pytest.approx(Db, rel=1e-12, abs=1e-12)
                put(bb.lift, "D_def", (t), 0.0, Db)
                for s in range(S):
                    put(bb.lift, "gpath_epi", (t, s), 0.0, inst.beta_M / r.R_bs[b, s])
        emax_nb = rt["dD_nb"].max()
        for s in range(S):
            d = m.dc[s]
            put(d.convex, "Is_sum", (t), 1.0)
            for n in range(N):
                put(d.convex, "rho_nb_sum", (t, n), r.rho_nb[n].sum())
            put(d.convex, "ingress", (t), r.R_bs[:, s].sum() / GBIT, inst.Rmax_s[s] / GBIT)
            emax_bs = rt["dD_bs"][:, s].max()
            for b in range(B):
                put(d.coupling, "eBS_epi", (t, b), rt["dD_bs"][b, s] - emax_bs, emax_bs)
                put(d.coupling, "eNB_epi", (t, b),
                    rt["dD_nb"][:, b].max(initial=0.0) - emax_nb, emax_nb)
            # max_b dD_bs + max dD_nb + dP_s + dA_s - dA
            put(d.coupling, "delay", (t), emax_bs + emax_nb + rt["dP_s"][s] + rt["dA_s"][s] - dA, dA)
            assert emax_bs + emax_nb + rt["dP_s"][s] + rt["dA_s"][s] == pytest.approx(
                rt["dc_path"][s], rel=1e-12)
            put(d.coupling, "recv", (t), rt["dR_s"][s] - dR, dR)
            if not m._copies:
                put(d.lift, "D_def", (t), 0.0, rt["D_s"][s])
            epigraphs(d, t, N + s, r.m_dc[s], r.gamma_dc[s])
            if m._binaries == "relaxed" and s == 0:
                put(d.coupling.forcing, "force_Is", (t), 0.0)
    return out, missing


def random_points(inst, rng, rand_sol, bound, k=3):
    ghi = gamma_cap(inst) if bound == "general" else step_safe_gamma(inst)
    styles = ["mixed", "sparse", "none", "full"]
    return [rand_sol(inst, rng, gamma_hi=ghi, style=styles[j % len(styles)]) for j in range(k)]


def check_agreement(m, inst, sol, bound):
    load_solution(m, sol)
    ev = evaluate(inst, sol, bound=bound)
    assert ev.feasible, ev.violations
    # objective and its terms
    assert pyo.value(m.obj) == pytest.approx(ev.objective, rel=REL)
    assert pyo.value(m.ml_term) == pytest.approx(ev.terms["ml_bound"], rel=REL)
    assert pyo.value(m.delay_term) == pytest.approx(ev.terms["delay"], rel=REL)
    assert pyo.value(m.energy_term) == pytest.approx(ev.terms["energy"], rel=REL)
    assert pyo.value(m.gbar) == pytest.approx(ev.ml_info["gbar"], rel=REL)
    assert pyo.value(m.vartheta_b) == pytest.approx(ev.ml_info["vartheta"], rel=REL)
    # per-node expressions
    for t, rt in enumerate(ev.rounds):
        for n in m.N:
            assert pyo.value(m.ue[n].D[t]) == pytest.approx(rt["D_n"][n], rel=REL, abs=1e-9)
            assert pyo.value(m.ue[n].dP[t]) == pytest.approx(rt["dP_n"][n], rel=REL, abs=1e-15)
            assert pyo.value(m.ue[n].dA_n[t]) == pytest.approx(rt["dA_n"][n], rel=REL)
        for s in m.S:
            assert pyo.value(m.dc[s].D[t]) == pytest.approx(rt["D_s"][s], rel=REL, abs=1e-9)
            assert pyo.value(m.dc[s].dP[t]) == pytest.approx(rt["dP_s"][s], rel=REL, abs=1e-15)
    # every constraint body
    want, missing = expected_bodies(m, inst, sol, bound)
    if m._copies:
        assert not missing, missing
    else:  # the compact form drops only the duplicated simplices and epigraphs (no copies)
        for kind, idx, name in missing:
            assert (kind, name) in {("ue", "Is_sum"), ("bs", "Is_sum"), ("dc", "Is_sum"),
                                    ("dc", "rho_nb_sum"), ("dc", "eNB_epi")}, (kind, idx, name)
            assert kind != "dc" or name == "rho_nb_sum" or idx != 0, (kind, idx, name)
    cons = set(consensus_constraints(m))
    n_checked = 0
    for con in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(con.body)
        lo, up = con.lower, con.upper
        lo = None if lo is None else pyo.value(lo)
        up = None if up is None else pyo.value(up)
        if con in cons:
            assert body == 0.0, con.name                           # copies equal exactly
            continue
        assert con in want, f"constraint {con.name} has no numpy counterpart in the test"
        val, scale = want[con]
        assert body == pytest.approx(val, rel=REL, abs=REL * scale), con.name
        tol = 1e-9 * max(1.0, scale)
        assert lo is None or body >= lo - tol, (con.name, body, lo)
        assert up is None or body <= up + tol, (con.name, body, up)
        n_checked += 1
    assert n_checked == len(want)
    # every variable inside its bounds
    for v in m.component_data_objects(pyo.Var):
        tol = 1e-12 * max(1.0, abs(v.value))
        assert v.lb is None or v.value >= v.lb - tol, (v.name, v.value, v.lb)
        assert v.ub is None or v.value <= v.ub + tol, (v.name, v.value, v.ub)


CASES = [("small", 0), ("small", 1), ("small", 2), ("paper", 0), ("paper", 3)]


@pytest.mark.parametrize("bound", ["corollary", "general"])
@pytest.mark.parametrize("preset,seed", CASES)
def test_model_agrees_with_evaluator(preset, seed, bound, rand_sol):
    inst = _instance(preset, seed)
    m = _model(preset, seed, bound)
    rng = np.random.default_rng([seed, 7])
    for sol in random_points(inst, rng, rand_sol, bound, k=4 if preset == "small" else 2):
        check_agreement(m, inst, sol, bound)


@pytest.mark.parametrize("bound", ["corollary", "general"])
@pytest.mark.parametrize("preset,seed", [("small", 3), ("paper", 1)])
def test_compact_model_agrees(preset, seed, bound, rand_sol):
    """copies=False (every copy a Reference to its owner's variable): same equations."""
    inst = _instance(preset, seed)
    m = _model(preset, seed, bound, "relaxed", False)
    assert consensus_constraints(m) == []
    rng = np.random.default_rng([seed, 8])
    for sol in random_points(inst, rng, rand_sol, bound, k=3 if preset == "small" else 2):
        check_agreement(m, inst, sol, bound)


@pytest.mark.parametrize("copies", [True, False])
@pytest.mark.parametrize("bound", ["corollary", "general"])
def test_constant_vartheta_mode_agrees(bound, copies, rand_sol):
    """vartheta_mode='constant' (the instance's number in bound and trainer)."""
    inst = _instance("small", 6).copy(vartheta_mode="constant", vartheta=0.7)
    m = build_problem(inst, bound=bound, copies=copies)
    assert m.vartheta_b == 0.7
    for sol in random_points(inst, np.random.default_rng(12), rand_sol, bound, k=3):
        check_agreement(m, inst, sol, bound)


@pytest.mark.parametrize("copies", [True, False])
def test_step_row_body_where_violated(copies, rand_sol):
    """At points with a large gamma the step-size row is violated in the model and in the
    evaluator by the same amount."""
    inst = _instance("small", 7)
    m = build_problem(inst, copies=copies)
    sol = rand_sol(inst, np.random.default_rng(13), style="mixed", step_condition=False)
    load_solution(m, sol)
    ev = evaluate(inst, sol)
    lhs, rhs = ev.ml_info["step_lhs"], ev.ml_info["step_rhs"]
    assert lhs > rhs
    assert [n for n, _ in ev.violations] == ["step size (Theorem 1, corollary eta)[]"]
    assert ev.violations[0][1] == pytest.approx((lhs - rhs) / rhs, rel=1e-9)
    row = m.dc[0].coupling.step
    assert pyo.value(row.body) == pytest.approx((lhs - rhs) / (inst.I * inst.T), rel=1e-9)
    assert pyo.value(m.obj) == pytest.approx(ev.objective, rel=REL)


@pytest.mark.parametrize("bound", ["corollary", "general"])
def test_binary_mode_agrees(bound, rand_sol):
    inst = _instance("small", 4)
    m = _model("small", 4, bound, "binary")
    assert all(v.is_binary() for blk in node_blocks(m).values() for v in blk.Is.values())
    for sol in random_points(inst, np.random.default_rng(11), rand_sol, bound, k=2):
        check_agreement(m, inst, sol, bound)


def test_fixed_mode_agrees(rand_sol):
    inst = _instance("small", 5)
    sol = rand_sol(inst, np.random.default_rng(5), gamma_hi=step_safe_gamma(inst))
    m = build_problem(inst, binaries="fixed", fixed=sol)
    load_solution(m, sol)
    ev = evaluate(inst, sol)
    assert pyo.value(m.obj) == pytest.approx(ev.objective, rel=REL)
    for con in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(con.body)
        assert con.upper is None or body <= pyo.value(con.upper) + 1e-9, con.name
        assert con.lower is None or body >= pyo.value(con.lower) - 1e-9, con.name


def test_hand_point_in_model(tiny_hand):
    """The Pyomo model reproduces the hand-checked numbers of test_system.py."""
    inst, sol = tiny_hand
    for bound in ("corollary", "general"):
        for mode in ("constant", "tau_eff"):
            # L = 0.25 makes the hand point satisfy the step-size row (test_system.py)
            hand = inst.copy(L=0.25, vartheta_mode=mode)
            m = build_problem(hand, bound=bound)
            check_agreement(m, hand, sol, bound)
    m = build_problem(inst)
    load_solution(m, sol)
    assert pyo.value(m.delay_term) == pytest.approx((1.0041 + 0.255) + (1.0709 + 0.26), rel=1e-12)


def test_extract_inverts_load(rand_sol):
    inst = _instance("small", 0)
    m = _model("small", 0, "corollary")
    sol = rand_sol(inst, np.random.default_rng(3))
    load_solution(m, sol)
    back = extract_solution(m)
    for r, q in zip(sol.rounds, back.rounds):
        for k in ("rho_nb", "rho_bs", "f", "z", "gamma_ue", "gamma_dc", "m_ue", "m_dc", "R_bs"):
            np.testing.assert_allclose(getattr(q, k), getattr(r, k), rtol=1e-12, err_msg=k)
        assert q.aggregator == r.aggregator
        np.testing.assert_array_equal(q.uplink_bs, r.uplink_bs)
        np.testing.assert_array_equal(q.downlink_bs, r.downlink_bs)


# ---------------------------------------------------------------------- data conservation
@pytest.mark.parametrize("preset", ["small", "paper"])
def test_data_conservation_in_model(preset, rand_sol):
    inst = _instance(preset, 0)
    m = _model(preset, 0, "corollary")
    rng = np.random.default_rng(99)
    for style in ("mixed", "sparse", "none", "full"):
        load_solution(m, rand_sol(inst, rng, style=style))
        for t in m.T:
            total = sum(pyo.value(m.ue[n].D[t]) for n in m.N) + sum(pyo.value(m.dc[s].D[t])
                                                                  for s in m.S)
            assert total == pytest.approx(inst.Dbar[t].sum(), rel=1e-12)


# ---------------------------------------------------------------------- block structure
OWNED = {  # the table of docs/formulation.md, '7. Decomposition into node blocks': node kind ->
    # variables it owns (or holds as purely local); the BS also owns eNBb, its max_n dD_nb over
    # its UEs (the DCs' max_{n,b} dD_nb is the max of these)
    "ue": {"f", "m", "gamma", "rho", "Inb", "Ibn"},
    "bs": {"rho_bs", "R", "dB", "eNBb"},
    "dc": {"z", "gamma", "m", "eBS", "eNB"},
}
COPIES = {
    "ue": {"Is", "dA"},
    "bs": {"rho_nb", "Ibn", "Is", "dA", "dR"},
    "dc": {"rho_nb", "rho_bs", "R", "eNBb", "Is", "dA", "dR"},
}
GLOBALS = {"corollary": {"m_min", "g_max"}, "general": {"h_max"}}


def _var_names(blk):
    return {c.local_name for c in blk.component_objects(pyo.Var, descend_into=False)}


@pytest.mark.parametrize("bound", ["corollary", "general"])
def test_node_variables_as_spec(bound):
    m = _model("small", 0, bound)
    g = GLOBALS[bound]
    for name, blk in node_blocks(m).items():
        kind = name[:2]
        want = OWNED[kind] | COPIES[kind] | (g if kind in ("ue", "dc") else set())
        assert _var_names(blk) == want, name
    # every variable of the model lives in exactly one node block
    owner = variable_owner_map(m)
    all_vars = list(m.component_data_objects(pyo.Var))
    assert len(owner) == len(all_vars)
    assert all(id(v) in owner for v in all_vars)


@pytest.mark.parametrize("bound", ["corollary", "general"])
def test_compact_node_variables(bound):
    """copies=False: each node holds only what it owns; copies are References."""
    m = _model("small", 0, bound, "relaxed", False)
    g = GLOBALS[bound]
    for name, blk in node_blocks(m).items():
        own = {v.parent_component().local_name for v in node_variables(blk)}
        # the compact UE also owns `keep` = 1 - sum_b rho_nb (a slack of its simplex)
        # and the lifted data volumes Dv (BS, DC) and gradient-path delays gpath (BS)
        want = {"ue": OWNED["ue"] | {"keep"}, "bs": OWNED["bs"] | {"Dv", "gpath"},
                "dc": OWNED["dc"] - {"eNB"} | {"Dv"}}[name[:2]]
        if name == "dc0":
            want = want | {"eNB", "Is", "dA", "dR"} | g
        assert own == want, name
    owner = variable_owner_map(m)
    ids = {id(v) for v in m.component_data_objects(pyo.Var)}
    assert ids == set(owner)


@pytest.mark.parametrize("copies", [True, False])
@pytest.mark.parametrize("bound", ["corollary", "general"])
def test_constraint_roles(bound, copies):
    """With copies (docs/formulation.md, '7. Decomposition into node blocks') D_d is local and each
    C_k involves its host. The compact form (copies=False) reads owners' variables directly, so only
    the roles' shapes are checked."""
    m = _model("small", 1, bound, "relaxed", copies)
    owner = variable_owner_map(m)
    blocks = node_blocks(m)
    n_roles = 0
    for name, blk in blocks.items():
        for con in node_constraints(blk, "convex"):
            # D_d is local: it touches only its host, and it is linear (simplices, knapsack)
            if copies:
                assert constraint_nodes(m, con, owner) == {name}, con.name
            assert con.body.polynomial_degree() == 1, con.name
            n_roles += 1
        for con in node_constraints(blk, "coupling"):
            # a coupling constraint is written over its host's copies (plus owners' variables
            # the host does not hold) and always involves the host
            if copies:
                assert name in constraint_nodes(m, con, owner), con.name
            assert con.upper is not None and con.lower is None, con.name     # C(w) <= 0
            assert pyo.value(con.upper) == 0.0, con.name
            n_roles += 1
        lifts = node_constraints(blk, "lift")
        assert not (copies and lifts)
        for con in lifts:  # compact form: a lifted variable of this node defined (D_b, D_s, gpath)
            mine = {id(v) for v in node_variables(blk)}
            assert any(id(v) in mine for v in identify_variables(con.body)), con.name
            n_roles += 1
    cons = consensus_constraints(m)
    for con in cons:
        assert con.equality and pyo.value(con.upper) == 0.0
        assert len(constraint_nodes(m, con, owner)) == 2, con.name
        assert con.body.polynomial_degree() == 1
    # convex + coupling + consensus = every active constraint of the model
    assert n_roles + len(cons) == len(list(m.component_data_objects(pyo.Constraint, active=True)))


def test_convex_sets_hold_the_simplices():
    m = _model("small", 0, "corollary")
    want = {"ue": {"rho_sum", "Inb_sum", "Ibn_sum", "Is_sum"},
            "bs": {"rho_bs_sum", "Is_sum"},
            "dc": {"Is_sum", "rho_nb_sum", "ingress"}}
    for name, blk in node_blocks(m).items():
        got = {c.local_name for c in blk.convex.component_objects(pyo.Constraint)}
        assert got == want[name[:2]], name
    # hosted non-convex constraints: UE and DC delays, BS and DC receptions, forcing
    ue, bs, dc0, dc1 = m.ue[0], m.bs[0], m.dc[0], m.dc[1]
    names = lambda blk: {c.local_name for c in blk.coupling.component_objects(pyo.Constraint)}  # noqa: E731
    assert {"delay", "force_Inb", "force_Ibn", "m_min_epi", "g_max_epi"} == names(ue)
    assert {"dB_epi", "eNB_epi", "recv"} == names(bs)
    assert {"eBS_epi", "eNB_epi", "delay", "recv", "m_min_epi", "g_max_epi", "force_Is",
            "step"} == names(dc0)
    assert "force_Is" not in names(dc1)
    mb = _model("small", 0, "corollary", "binary")
    assert not hasattr(mb.ue[0].coupling, "force_Inb")


def test_every_copy_has_one_consensus_link_to_its_owner():
    """Each non-owner copy appears in exactly one consensus equality, whose other side is the
    owner's variable (paper eqn: local copy 1-2); owners: UE n for rho_nb, I_nb, I_bn; BS b for
    rho_bs, R_bs and its max_n dD_nb (eNBb); DC 0 for I_s, dA, dR and the bound's global
    epigraph variables."""
    m = _model("small", 2, "corollary")
    inst = _instance("small", 2)
    owner = variable_owner_map(m)
    seen: dict[int, int] = {}
    for con in consensus_constraints(m):
        vs = list(identify_variables(con.body))
        assert len(vs) == 2
        names = [owner[id(v)] for v in vs]
        # copy = copy of the same quantity (UE n's `rho` row is `rho_nb` in the other nodes)
        kinds = {v.parent_component().local_name for v in vs}
        assert len(kinds) == 1 or kinds == {"rho", "rho_nb"}, con.name
        for v in vs:
            seen[id(v)] = seen.get(id(v), 0) + 1
        own = [nm for nm, v in zip(names, vs) if _is_owner(nm, v.parent_component().local_name)]
        assert len(own) == 1, (con.name, names)
    for name, blk in node_blocks(m).items():
        for v in node_variables(blk):
            local = v.parent_component().local_name
            if _is_owner(name, local):
                continue
            if local in OWNED[name[:2]]:
                continue
            assert seen.get(id(v), 0) == 1, (name, v.name)
    # counts: every copy of every shared variable, per round
    T, N, B, S = inst.T, inst.N, inst.B, inst.S
    expect = T * (N * B            # rho_nb copies at BSs
                  + N * B * S      # rho_nb copies at DCs
                  + B * S * 2      # rho_bs and R_bs copies at DCs
                  + B * S          # the BSs' max_n dD_nb (eNBb) copies at DCs
                  + B * N          # I_bn copies at BSs
                  + S * (N + B + S - 1)        # I_s copies
                  + (N + B + S - 1)            # dA copies
                  + (B + S - 1)) + 2 * (N + S - 1)   # dR copies; m_min, g_max copies
    assert len(consensus_constraints(m)) == expect


def _is_owner(node: str, var: str) -> bool:
    kind = node[:2]
    if var in ("Is", "dA", "dR", "m_min", "g_max", "h_max"):
        return node == "dc0"
    if var in ("rho", "Inb") or (var == "Ibn" and kind == "ue"):
        return kind == "ue"
    if var in ("rho_bs", "R", "eNBb"):
        return kind == "bs"
    return False
