"""The numpy system model against the paper's formulas worked out by hand.

The instance and the decisions are in conftest.hand_instance / hand_solution (2 UEs, 1 BS,
2 DCs, 2 rounds, round numbers). Every expected value below is written out as arithmetic on
those numbers from the paper's equations (docs/formulation.md); none is taken from the code
under test.

Numbers used (both rounds): beta_D = 1e3 bit, beta_M = 1e6 bit, Dbar = [1000, 2000],
R_nb = [1e6, 2e6], P_nb = [0.2, 0.5], R_bn = [4e6, 5e6], P_b = 10, Rmax_bs = [1e9, 5e8],
P_bs = [2, 4], R_sb[s] = [1e8, 2e8], P_sb[s] = [1, 3], R_ss[0,1] = 1e7, R_ss[1,0] = 2e7,
P_ss[0,1] = 5, P_ss[1,0] = 6, c = [100, 200], alpha = [2e-20, 4e-20], M = [10, 20],
C = [1000, 2000], Pbar = [100, 200], rho_idle = 0.4, xi3_1..6 = 1..6.
"""
import math

import numpy as np
import pytest

from cefl_opt.system import (FEAS_TOL, a_norms, bound_vartheta, common_gamma_step_cap,
                             constraint_violations, data_split, evaluate, gamma_cap,
                             gbar_weighted, ml_bound, round_terms, step_condition)

A = dict(rel=1e-12, abs=1e-15)


def approx(x):
    return pytest.approx(x, **A)


# ------------------------------------------------------------------ round 0
def test_round0_data_split(tiny_hand):
    inst, sol = tiny_hand
    ds = data_split(inst, 0, sol.rounds[0])
    # rho_nb = [0.5, 0.25], rho_bs = [0.6, 0.4]
    assert ds["D_n"] == approx([(1 - 0.5) * 1000, (1 - 0.25) * 2000])          # [500, 1500]
    assert ds["D_b"] == approx([0.5 * 1000 + 0.25 * 2000])                     # [1000]
    assert ds["D_s"] == approx([0.6 * 1000, 0.4 * 1000])                       # [600, 400]
    assert ds["D"] == 3000


def test_round0_transfer_delays(tiny_hand):
    inst, sol = tiny_hand
    rt = round_terms(inst, 0, sol.rounds[0])
    # dD_nb = beta_D Dbar_n rho_nb / R_nb
    assert rt["dD_nb"][:, 0] == approx([1e3 * 1000 * 0.5 / 1e6, 1e3 * 2000 * 0.25 / 2e6])  # 0.5, 0.25
    # dM_nb = beta_M / R_nb
    assert rt["dM_nb"][:, 0] == approx([1e6 / 1e6, 1e6 / 2e6])                               # 1, 0.5
    # dD_bs = beta_D D_b rho_bs / R_bs, R_bs = [5e8, 2.5e8]
    assert rt["dD_bs"][0] == approx([1e3 * 1000 * 0.6 / 5e8, 1e3 * 1000 * 0.4 / 2.5e8])   # 1.2e-3, 1.6e-3
    assert rt["dM_bs"][0] == approx([1e6 / 5e8, 1e6 / 2.5e8])                              # 2e-3, 4e-3
    # dD_s = max_b dD_bs[b,s] + max_{n,b} dD_nb
    assert rt["dD_s"] == approx([1.2e-3 + 0.5, 1.6e-3 + 0.5])


def test_round0_processing(tiny_hand):
    inst, sol = tiny_hand
    rt = round_terms(inst, 0, sol.rounds[0])
    # dP_n = c gamma m D_n / f: gamma = [2, 3], m = [0.5, 0.2], f = [5e8, 2.5e8]
    assert rt["dP_n"] == approx([100 * 2 * 0.5 * 500 / 5e8, 200 * 3 * 0.2 * 1500 / 2.5e8])  # 1e-4, 7.2e-4
    # EP_n = c gamma m D_n f^2 alpha / 2
    assert rt["EP_n"] == approx([100 * 2 * 0.5 * 500 * 5e8 ** 2 * 2e-20 / 2,                # 125
                                 200 * 3 * 0.2 * 1500 * 2.5e8 ** 2 * 4e-20 / 2])            # 225
    # dP_s = gamma m D_s / (M z): gamma = [3, 2], m = [0.25, 0.5], z = [500, 1000]
    assert rt["dP_s"] == approx([3 * 0.25 * 600 / (10 * 500), 2 * 0.5 * 400 / (20 * 1000)])  # 0.09, 0.02
    # EP_s = dP_s [rho_idle (z/C)^2 Pbar M + (1 - rho_idle) Pbar M], z/C = 0.5 for both
    assert rt["EP_s"] == approx([0.09 * (0.4 * 0.5 ** 2 * 100 * 10 + 0.6 * 100 * 10),      # 63
                                 0.02 * (0.4 * 0.5 ** 2 * 200 * 20 + 0.6 * 200 * 20)])     # 56


def test_round0_aggregation_and_reception(tiny_hand):
    inst, sol = tiny_hand
    rt = round_terms(inst, 0, sol.rounds[0])
    # aggregator s = 1, every UE uplinks via BS 0
    # dA_n = dM_nb[n,0] + dM_bs[0,1]
    assert rt["dA_n"] == approx([1.0 + 4e-3, 0.5 + 4e-3])
    # dA_s = dM_ss[s, 1]: DC 0 -> DC 1 = 1e6/1e7; DC 1 is the aggregator (delta_ss = 0)
    assert rt["dA_s"] == approx([1e6 / 1e7, 0.0])
    ue_path = [1.004 + 1e-4, 0.504 + 7.2e-4]
    dc_path = [0.5012 + 0.09 + 0.1, 0.5016 + 0.02 + 0.0]
    assert rt["ue_path"] == approx(ue_path)
    assert rt["dc_path"] == approx(dc_path)
    assert rt["dA"] == approx(max(ue_path + dc_path))                         # 1.0041 (UE 0)
    # reception: dR_b = dM_sb[1,0] = 1e6/2e8; dB_b = max_n beta_M/R_bn = 1e6/4e6
    assert rt["dR_b"] == approx([1e6 / 2e8])
    assert rt["dB_b"] == approx([max(1e6 / 4e6, 1e6 / 5e6)])
    # dR_s = dM_ss[1, s]: DC 1 -> DC 0 = 1e6/2e7
    assert rt["dR_s"] == approx([1e6 / 2e7, 0.0])
    assert rt["dR"] == approx(max(5e-3 + 0.25, 0.05))                          # 0.255
    assert rt["delay"] == approx(1.0041 + 0.255)


def test_round0_energies(tiny_hand):
    inst, sol = tiny_hand
    rt = round_terms(inst, 0, sol.rounds[0])
    E_D_ue = 0.5 * 0.2 + 0.25 * 0.5                                  # dD_nb P_nb
    E_D_bs = 1.2e-3 * 2 + 1.6e-3 * 4                                 # dD_bs P_bs
    E_P_ue = 125.0 + 225.0
    E_P_dc = 63.0 + 56.0
    E_A = (1.0 * 0.2 + 4e-3 * 4) + (0.5 * 0.5 + 4e-3 * 4) + 0.1 * 5  # UEs (to BS, BS->DC 1) + DC 0 -> 1
    E_R = 5e-3 * 3 + 0.25 * 10 + 0.05 * 6                            # DC1->BS, broadcast, DC1->DC0
    assert rt["EA_n"] == approx([0.216, 0.266])
    assert rt["EA_s"] == approx([0.5, 0.0])
    assert rt["ER_b"] == approx([0.015])
    assert rt["EB_b"] == approx([2.5])
    assert rt["ER_s"] == approx([0.3, 0.0])
    for k, v in (("E_D_ue", E_D_ue), ("E_D_bs", E_D_bs), ("E_P_ue", E_P_ue), ("E_P_dc", E_P_dc),
                 ("E_A", E_A), ("E_R", E_R)):
        assert rt[k] == approx(v), k
    assert rt["energy_raw"] == approx(E_D_ue + E_D_bs + E_P_ue + E_P_dc + E_A + E_R)
    assert rt["energy"] == approx(1 * E_D_ue + 2 * E_D_bs + 3 * E_P_ue + 4 * E_P_dc + 5 * E_A + 6 * E_R)


# ------------------------------------------------------------------ round 1
def test_round1_all_terms(tiny_hand):
    """rho_nb = [0.8, 0.5], rho_bs = [0.5, 0.5], R_bs = [1e9, 5e8], f = 1e9, z = C,
    gamma_ue = [1, 1], gamma_dc = [3, 2], m_ue = [1, 1], m_dc = [1, 0.5], aggregator 0."""
    inst, sol = tiny_hand
    rt = round_terms(inst, 1, sol.rounds[1])
    D_n = [0.2 * 1000, 0.5 * 2000]                       # 200, 1000
    D_b = 0.8 * 1000 + 0.5 * 2000                        # 1800
    D_s = [0.5 * D_b, 0.5 * D_b]                         # 900, 900
    assert rt["D_n"] == approx(D_n) and rt["D_s"] == approx(D_s)
    assert rt["dD_nb"][:, 0] == approx([1e3 * 1000 * 0.8 / 1e6, 1e3 * 2000 * 0.5 / 2e6])   # 0.8, 0.5
    assert rt["dD_bs"][0] == approx([1e3 * 1800 * 0.5 / 1e9, 1e3 * 1800 * 0.5 / 5e8])      # 9e-4, 1.8e-3
    assert rt["dM_bs"][0] == approx([1e6 / 1e9, 1e6 / 5e8])
    assert rt["dD_s"] == approx([9e-4 + 0.8, 1.8e-3 + 0.8])
    assert rt["dP_n"] == approx([100 * 1 * 1 * 200 / 1e9, 200 * 1 * 1 * 1000 / 1e9])
    assert rt["EP_n"] == approx([100 * 200 * 1e18 * 2e-20 / 2, 200 * 1000 * 1e18 * 4e-20 / 2])  # 200, 4000
    assert rt["dP_s"] == approx([3 * 1 * 900 / (10 * 1000), 2 * 0.5 * 900 / (20 * 2000)])       # 0.27, 0.0225
    # z = C: the bracket is rho_idle Pbar M + (1 - rho_idle) Pbar M = Pbar M
    assert rt["EP_s"] == approx([0.27 * 100 * 10, 0.0225 * 200 * 20])                         # 270, 90
    assert rt["dA_n"] == approx([1.0 + 1e-3, 0.5 + 1e-3])              # via BS 0 -> DC 0
    assert rt["dA_s"] == approx([0.0, 1e6 / 2e7])                      # DC 1 -> DC 0
    ue_path = [1.001 + 2e-5, 0.501 + 2e-4]
    dc_path = [0.8009 + 0.27 + 0.0, 0.8018 + 0.0225 + 0.05]
    assert rt["dA"] == approx(max(ue_path + dc_path))                   # 1.0709: DC 0's path
    assert rt["dA"] == approx(dc_path[0])
    assert rt["dR_b"] == approx([1e6 / 1e8])
    assert rt["dB_b"] == approx([0.25])
    assert rt["dR_s"] == approx([0.0, 1e6 / 1e7])                       # DC 0 -> DC 1
    assert rt["dR"] == approx(max(0.01 + 0.25, 0.1))                    # 0.26
    E = {"E_D_ue": 0.8 * 0.2 + 0.5 * 0.5, "E_D_bs": 9e-4 * 2 + 1.8e-3 * 4,
         "E_P_ue": 200.0 + 4000.0, "E_P_dc": 270.0 + 90.0,
         "E_A": (1.0 * 0.2 + 1e-3 * 2) + (0.5 * 0.5 + 1e-3 * 2) + 0.05 * 6,
         "E_R": 0.01 * 1 + 0.25 * 10 + 0.1 * 5}
    for k, v in E.items():
        assert rt[k] == approx(v), k


# ------------------------------------------------------------------ ML bound
TAU0 = 1.0041 + 0.255      # dA + dR of round 0
TAU1 = 1.0709 + 0.26       # of round 1


# data-weighted gbar (docs/formulation.md, 'Resolutions in the ML term'):
# d sum_t sum_i D_i gamma_i / D, D = 3000 in both rounds;
# (D_i, gamma_i) for UE0, UE1, DC0, DC1: round 0 (500, 2), (1500, 3), (600, 3), (400, 2),
# round 1 (200, 1), (1000, 1), (900, 3), (900, 2)
GBAR = 4 * ((500 * 2 + 1500 * 3 + 600 * 3 + 400 * 2) / 3000          # 2.7
            + (200 * 1 + 1000 * 1 + 900 * 3 + 900 * 2) / 3000)       # 1.9 -> 18.4
STEP_L = 0.05   # with L = 0.05 the hand point (even with a gamma of 25) meets the step row


def test_gbar_weighted_by_hand(tiny_hand):
    inst, sol = tiny_hand
    assert GBAR == approx(18.4)
    assert evaluate(inst, sol).ml_info["gbar"] == approx(GBAR)


def test_vartheta_modes_by_hand(tiny_hand):
    """constant: the instance's 0.5; tau_eff: the round mean of sum_i p_i ||a_i||_1 with
    eta = 0.1, mu = 1 (q = 0.9): ||a||_1 = 1, 1.9, 2.71 for gamma = 1, 2, 3."""
    inst, sol = tiny_hand
    ev = evaluate(inst.copy(vartheta_mode="constant"), sol)
    assert ev.ml_info["vartheta"] == 0.5
    tau0 = (500 * 1.9 + 1500 * 2.71 + 600 * 2.71 + 400 * 1.9) / 3000
    tau1 = (200 * 1.0 + 1000 * 1.0 + 900 * 2.71 + 900 * 1.9) / 3000
    ev = evaluate(inst.copy(vartheta_mode="tau_eff"), sol)
    assert ev.ml_info["vartheta"] == approx((tau0 + tau1) / 2)


def test_step_condition_by_hand(tiny_hand):
    """4 d L^2 g_max (g_max - 1)(2 zeta1^2 + 1) <= gbar T with d = 4, L = 1, zeta1 = 1,
    g_max = 3, T = 2: 4*4*1*3*2*3 = 288 against 18.4 * 2 = 36.8, violated."""
    inst, sol = tiny_hand
    ev = evaluate(inst, sol)
    assert ev.ml_info["step_lhs"] == approx(288.0)
    assert ev.ml_info["step_rhs"] == approx(36.8)
    viol = dict(constraint_violations(inst, sol))
    assert viol == {"step size (Theorem 1, corollary eta)[]": approx((288 - 36.8) / 36.8)}
    # L = 0.05: 288 * 0.0025 = 0.72 <= 36.8; the general form has gamma_cap instead
    assert constraint_violations(inst.copy(L=STEP_L), sol) == []
    assert constraint_violations(inst, sol, bound="general") == []


def test_common_gamma_step_cap_is_tight():
    """Equal data at every DPU and one gamma g: gbar = d T g, so the condition reads
    g - 1 <= T^2 / (4 L^2 (2 zeta1^2 + 1)); at that g it holds with equality."""
    from conftest import hand_instance
    inst = hand_instance().copy(L=0.8, zeta1=1.2)
    g = common_gamma_step_cap(inst)
    assert g == approx(1 + 2 ** 2 / (4 * 0.64 * (2 * 1.44 + 1)))
    gam, Di = np.full((2, 4), g), np.full((2, 4), 750.0)
    lhs, rhs = step_condition(inst, gam, Di)
    assert lhs == approx(rhs)
    assert gbar_weighted(inst, gam, Di) == approx(4 * 2 * g)


def test_equal_data_gbar_is_papers_sum(tiny_hand):
    """Every DPU holds 750 of the 3000 points: UE0 offloads 250 (rho 0.25), UE1 1250 (0.625),
    the BS splits its 1500 evenly: the weighted gbar equals the paper's sum of gammas."""
    inst, sol = tiny_hand
    for r in sol.rounds:
        r.rho_nb[:, 0] = [0.25, 0.625]
        r.rho_bs[0] = [0.5, 0.5]
    Di = np.array([np.concatenate([d["D_n"], d["D_s"]]) for d in
                   (data_split(inst, t, r) for t, r in enumerate(sol.rounds))])
    assert Di == approx(np.full((2, 4), 750.0))
    ev = evaluate(inst, sol)
    assert ev.ml_info["gbar"] == approx((2 + 3 + 3 + 2) + (1 + 1 + 3 + 2))     # 17


@pytest.mark.parametrize("mode", ["constant", "tau_eff"])
@pytest.mark.parametrize("empty", ["dc", "ue"])
def test_gamma_of_dpu_without_data_leaves_objective_unchanged(tiny_hand, mode, empty):
    """No offloading (the DCs hold nothing) or full offloading (the UEs hold nothing): changing
    the gamma of an empty DPU (below g_max) changes neither the bound nor the objective."""
    inst, sol = tiny_hand
    inst = inst.copy(vartheta_mode=mode)
    for r in sol.rounds:
        r.rho_nb[:, 0] = 0.0 if empty == "dc" else 1.0
    ev0 = evaluate(inst, sol)
    for r in sol.rounds:
        if empty == "dc":
            r.gamma_dc[:] = [1.0, 2.5]
        else:
            r.gamma_ue[:] = [2.5, 1.0]
    ev1 = evaluate(inst, sol)
    assert np.max([np.r_[r.gamma_ue, r.gamma_dc] for r in sol.rounds]) == 3.0   # g_max kept
    assert ev1.ml_parts["total"] == approx(ev0.ml_parts["total"])
    assert ev1.objective == approx(ev0.objective)
    # the same change on a DPU that holds data does change the bound
    if empty == "dc":
        sol.rounds[0].gamma_ue[0] = 1.5
    else:
        sol.rounds[0].gamma_dc[1] = 1.5
    assert evaluate(inst, sol).ml_parts["total"] != approx(ev0.ml_parts["total"])


def test_corollary_bound_by_hand(tiny_hand):
    """eq:convSpecial with the tau term: d = 4 DPUs, T = 2, vartheta = 0.5 (constant mode),
    L = 1, F0-F* = 2.3, zeta2 = 1.5, Theta_max = 4, sigma_max = 2, Delta = 0.3 (t=0) and 0.5
    (t=1) per DPU, gbar weighted by data (GBAR = 18.4)."""
    inst, sol = tiny_hand
    inst = inst.copy(vartheta_mode="constant")
    ev = evaluate(inst, sol, bound="corollary")
    gbar = GBAR
    m_min, g_max, d, T = 0.2, 3.0, 4, 2
    c0 = 4 * math.sqrt(gbar) / (0.5 * math.sqrt(d * T))
    expect = {
        "init": c0 * 2.3,
        "drift": c0 * (TAU0 * 4 * 0.3 + TAU1 * 4 * 0.5),
        "noise": 16 * 1 * 0.5 * 4 * 2 ** 2 / m_min * math.sqrt(d / (gbar * T)),
        "local": 12 * 1 ** 2 * d * 4 * 2 ** 2 * g_max / (gbar * m_min * T),
        "hetero": 12 * 1 ** 2 * 1.5 * d * g_max ** 2 / (gbar * T),
    }
    for k, v in expect.items():
        assert ev.ml_parts[k] == approx(v), k
    assert ev.ml_parts["total"] == approx(sum(expect.values()))
    assert ev.terms["ml_bound"] == approx(sum(expect.values()))


def test_a_norms_by_hand():
    # eta = 0.1, mu = 1 -> q = 0.9; weights a_l = q^(gamma-1-l)
    a1, a2 = a_norms(np.array([1.0, 2.0, 3.0]), 0.1, 1.0)
    assert a1 == approx([1.0, 1 + 0.9, 1 + 0.9 + 0.81])
    assert a2 == approx([1.0, 1 + 0.81, 1 + 0.81 + 0.6561])
    a1, a2 = a_norms(np.array([4.0]), 0.0, 1.0)          # q = 1: ||a||_1 = ||a||_2^2 = gamma
    assert a1 == approx([4.0]) and a2 == approx([4.0])


def test_general_bound_by_hand(tiny_hand):
    """eq:GenConvBound, fixed eta = 0.1, mu = 1 (q = 0.9), with (D_i-1)/D_i -> 1 and
    p_i^2/D_i -> D_i/D^2 (docs/formulation.md, 'The ML term (a)'). D = 3000 in both rounds."""
    inst, sol = tiny_hand
    ev = evaluate(inst.copy(vartheta_mode="constant"), sol, bound="general")
    eta, L, vt, T, D = 0.1, 1.0, 0.5, 2, 3000.0
    a1 = {1: 1.0, 2: 1.9, 3: 2.71}
    a2 = {1: 1.0, 2: 1.81, 3: 2.4661}
    ts = [1 * 1 ** 2, 2 * 1 ** 2, 3 * 2 ** 2, 4 * 1 ** 2]      # Theta_i sigma_i^2 = [1, 2, 12, 4]
    # (D_i, m_i, gamma_i) for DPUs UE0, UE1, DC0, DC1
    r0 = [(500, 0.5, 2), (1500, 0.2, 3), (600, 0.25, 3), (400, 0.5, 2)]
    r1 = [(200, 1.0, 1), (1000, 1.0, 1), (900, 1.0, 3), (900, 0.5, 2)]
    noise = sum(Di / D ** 2 * (1 - m) * ts[i] / m * a2[g] / a1[g] ** 2
                for r in (r0, r1) for i, (Di, m, g) in enumerate(r))
    local = sum((1 - m) * ts[i] * g * (a2[g] - 1) / (m * a1[g] * D)
                for r in (r0, r1) for i, (Di, m, g) in enumerate(r))
    hmax = max(g ** 2 * (a1[g] - 1) / a1[g] for g in (1, 2, 3))   # gamma = 3: 9 * 1.71 / 2.71
    c = 4 / (vt * eta * T)                                     # 40
    expect = {
        "init": c * 2.3,                                       # 92
        "drift": c * (TAU0 * 4 * 0.3 + TAU1 * 4 * 0.5),
        "noise": 16 * eta * L * vt / T * noise,
        "hetero": 12 * eta ** 2 * L ** 2 * 1.5 * hmax,
        "local": 12 * eta ** 2 * L ** 2 / T * local,
    }
    for k, v in expect.items():
        assert ev.ml_parts[k] == approx(v), k
    assert ev.ml_parts["total"] == approx(sum(expect.values()))


def test_objective_by_hand(tiny_hand):
    inst, sol = tiny_hand           # xi1 = 2, xi2 = 3, xi3 = 0.5
    ev = evaluate(inst, sol)
    energy0 = 1 * 0.225 + 2 * 8.8e-3 + 3 * 350 + 4 * 119 + 5 * 0.982 + 6 * 2.815
    energy1 = 1 * 0.41 + 2 * 9e-3 + 3 * 4200 + 4 * 360 + 5 * 0.754 + 6 * 3.01
    assert ev.terms["delay"] == approx(TAU0 + TAU1)
    assert ev.terms["energy"] == approx(energy0 + energy1)
    assert ev.objective == approx(2 * ev.ml_parts["total"] + 3 * (TAU0 + TAU1)
                                  + 0.5 * (energy0 + energy1))
    # weights given explicitly override the instance's
    ev1 = evaluate(inst, sol, weights={"xi1": 0.0, "xi2": 1.0, "xi3": 0.0})
    assert ev1.objective == approx(TAU0 + TAU1)


def test_ml_bound_rejects_unknown_form(tiny_hand):
    inst, _ = tiny_hand
    with pytest.raises(ValueError, match="unknown bound"):
        ml_bound(inst, np.ones((2, 4)), np.ones((2, 4)), np.ones(2), bound="other")


# ------------------------------------------------------------------ feasibility
def test_gamma_cap_is_theorem1_condition(tiny_hand):
    inst, _ = tiny_hand
    g = gamma_cap(inst)
    # 4 eta^2 L^2 g^2 (||a||_1 - 1)/||a||_1 = 1/(2 zeta1^2 + 1) = 1/3 at the cap
    a1, _ = a_norms(np.array([g]), inst.eta, inst.mu)
    assert 4 * 0.1 ** 2 * g ** 2 * (a1[0] - 1) / a1[0] == pytest.approx(1 / 3, rel=1e-9)
    assert 3.0 < g < 4.0


def test_hand_solution_feasible_both_bounds(tiny_hand):
    inst, sol = tiny_hand
    inst = inst.copy(L=STEP_L)
    assert constraint_violations(inst, sol) == []
    assert constraint_violations(inst, sol, bound="general") == []


@pytest.mark.parametrize("field,index,value,name", [
    ("f", 0, 2e9, "f<=f_max"), ("f", 1, 1e5, "f>=f_min"), ("z", 0, 2000.0, "z<=C"),
    ("m_ue", 0, 0.001, "m_ue>=m_floor"), ("gamma_dc", 1, 25.0, "gamma_dc<=gamma_cap"),
    ("gamma_ue", 0, 0.5, "gamma_ue>=gamma_min"),
])
def test_violations_are_named(tiny_hand, field, index, value, name):
    inst, sol = tiny_hand
    inst = inst.copy(L=STEP_L)
    getattr(sol.rounds[1], field)[index] = value
    v = constraint_violations(inst, sol)
    assert len(v) == 1 and v[0][0].startswith("t1:" + name) and v[0][1] > FEAS_TOL


def test_violations_of_simplices_and_capacities(tiny_hand):
    inst, sol = tiny_hand
    inst = inst.copy(L=STEP_L)
    r = sol.rounds[0]
    r.rho_nb[:, 0] = [0.7, 0.6]            # fine: one BS, each row sum <= 1
    assert constraint_violations(inst, sol) == []
    r.rho_bs[0] = [0.7, 0.4]               # sum 1.1 != 1
    r.R_bs[0] = [1.2e9, 5e8]               # above Rmax_bs[0,0] = 1e9
    names = [n for n, _ in constraint_violations(inst, sol)]
    assert any("rhoBS-DC" in n for n in names) and any("BS_capacity" in n for n in names)
    # general bound: gamma 3.9 exceeds Theorem 1's cap (~3.6) but not gamma_max
    sol2 = type(sol)(rounds=[x.copy() for x in sol.rounds])
    sol2.rounds[0] = sol2.rounds[1].copy()       # drop round 0's violations made above
    sol2.rounds[0].gamma_ue[0] = 3.9
    assert constraint_violations(inst, sol2, bound="corollary") == []
    assert any("gamma_cap" in n for n, _ in
               constraint_violations(tiny_hand[0], sol2, bound="general"))


def test_enforce_step_condition_shrinks_gamma_to_the_boundary(tiny_hand):
    """The hand point violates the step row (288 > 36.8); the repair scales gamma - 1 by one
    factor s so that the row holds with equality (to the bisection's precision), and leaves a
    point that meets it untouched."""
    from cefl_opt.system import enforce_step_condition
    inst, sol = tiny_hand
    before = [np.r_[r.gamma_ue, r.gamma_dc] for r in sol.rounds]
    enforce_step_condition(inst, sol)
    after = [np.r_[r.gamma_ue, r.gamma_dc] for r in sol.rounds]
    s = (after[0][1] - 1) / (before[0][1] - 1)
    assert 0 < s < 1
    for b, a in zip(before, after):
        assert a - 1 == approx(s * (b - 1))
    ev = evaluate(inst, sol)
    assert ev.feasible
    assert ev.ml_info["step_lhs"] == pytest.approx(ev.ml_info["step_rhs"], rel=1e-9)
    again = [np.r_[r.gamma_ue, r.gamma_dc] for r in enforce_step_condition(inst, sol).rounds]
    assert all(np.array_equal(x, y) for x, y in zip(again, after))
