"""The numpy system model keeps rounds and BSs apart: by hand on a second hand instance, 2 UEs,
2 BSs, 2 DCs, 2 rounds, with data, rates and powers that differ between rounds and between BSs
(the hand instance of test_system.py has one BS and rounds that share their network data, so
there a wrong BS index or network data read from the wrong round cannot show). Every expected
value is arithmetic on the numbers below, from the paper's equations (docs/formulation.md,
'4. Delays and energies'); none is taken from the code.

    round 0                                   round 1
    Dbar  = [1000, 2000]                      [3000, 500]
    R_nb  = [[1e6, 4e6], [2e6, 1e6]]          [[2e6, 5e6], [1e6, 2e6]]      [n][b]
    P_nb  = [[0.2, 0.1], [0.5, 0.4]]          [[0.3, 0.2], [0.5, 0.25]]
    R_bn  = [[4e6, 5e6], [2e6, 8e6]]          [[1e6, 2e6], [4e6, 5e6]]      [b][n]
    P_b   = [10, 20]                          [5, 8]
    R_sb  = [[1e8, 5e7], [2e8, 1e8]]          [[5e7, 1e8], [1e8, 2.5e7]]    [s][b]
    R_ss  = 1e7 (0->1), 2e7 (1->0)            4e7 (0->1), 5e7 (1->0)
Constant: Rmax_bs = [[1e9, 5e8], [2e8, 1e9]], P_bs = [[2, 4], [3, 1]], P_sb = [[1, 2], [3, 4]],
P_ss[0,1] = 5, P_ss[1,0] = 6, c = [100, 200], alpha = [2e-20, 4e-20], M = [10, 20],
C = [1000, 2000], Pbar = [100, 200], rho_idle = 0.4, beta_D = 1e3, beta_M = 1e6, xi3_1..6 = 1..6.
"""
import numpy as np
import pytest

from cefl_opt.instance import Instance
from cefl_opt.solution import RoundDecision, Solution
from cefl_opt.system import constraint_violations, data_split, evaluate, round_terms


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


@pytest.fixture
def two_bs():
    inst = Instance(
        name="hand-2bs", Dbar=np.array([[1000.0, 2000.0], [3000.0, 500.0]]),
        R_nb=np.array([[[1e6, 4e6], [2e6, 1e6]], [[2e6, 5e6], [1e6, 2e6]]]),
        P_nb=np.array([[[0.2, 0.1], [0.5, 0.4]], [[0.3, 0.2], [0.5, 0.25]]]),
        R_bn=np.array([[[4e6, 5e6], [2e6, 8e6]], [[1e6, 2e6], [4e6, 5e6]]]),
        P_b=np.array([[10.0, 20.0], [5.0, 8.0]]),
        Rmax_bs=np.array([[1e9, 5e8], [2e8, 1e9]]), Rmax_s=np.array([2e9, 2e9]),
        P_bs=np.array([[2.0, 4.0], [3.0, 1.0]]),
        R_sb=np.array([[[1e8, 5e7], [2e8, 1e8]], [[5e7, 1e8], [1e8, 2.5e7]]]),
        P_sb=np.array([[1.0, 2.0], [3.0, 4.0]]),
        R_ss=np.array([[[1e9, 1e7], [2e7, 1e9]], [[1e9, 4e7], [5e7, 1e9]]]),
        P_ss=np.array([[0.0, 5.0], [6.0, 0.0]]),
        c=np.array([100.0, 200.0]), alpha=np.array([2e-20, 4e-20]),
        f_min=np.array([1e6, 1e6]), f_max=np.array([1e9, 1e9]),
        M=np.array([10.0, 20.0]), C=np.array([1000.0, 2000.0]), Pbar=np.array([100.0, 200.0]),
        Theta=np.ones(4), sigma=np.ones(4), Delta=np.full((2, 4), 0.3),
        xi3_parts=np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        beta_D=1e3, beta_M=1e6, rho_idle=0.4, eta=0.1, mu=1.0, vartheta=0.5, L=1.0,
        zeta1=1.0, zeta2=1.5, F0_minus_Fstar=2.3, gamma_min=1.0, gamma_max=20.0,
        m_floor=0.01, z_floor=0.01, R_floor=1e6, xi1=2.0, xi2=3.0, xi3=0.5).validate()
    r0 = RoundDecision(
        rho_nb=np.array([[0.5, 0.25], [0.0, 0.5]]), rho_bs=np.array([[0.6, 0.4], [0.0, 1.0]]),
        f=np.array([5e8, 2.5e8]), z=np.array([500.0, 1000.0]),
        gamma_ue=np.array([2.0, 3.0]), gamma_dc=np.array([3.0, 2.0]),
        m_ue=np.array([0.5, 0.2]), m_dc=np.array([0.25, 0.5]), aggregator=1,
        uplink_bs=np.array([1, 0]), downlink_bs=np.array([0, 1]),
        R_bs=np.array([[5e8, 2.5e8], [1e8, 5e8]]))
    r1 = RoundDecision(
        rho_nb=np.array([[0.0, 0.8], [0.4, 0.2]]), rho_bs=np.array([[0.5, 0.5], [0.25, 0.75]]),
        f=np.array([1e9, 5e8]), z=np.array([1000.0, 2000.0]),
        gamma_ue=np.array([1.0, 2.0]), gamma_dc=np.array([2.0, 1.0]),
        m_ue=np.array([1.0, 0.5]), m_dc=np.array([0.5, 1.0]), aggregator=0,
        uplink_bs=np.array([0, 1]), downlink_bs=np.array([1, 1]),
        R_bs=np.array([[1e9, 5e8], [2e8, 1e9]]))
    return inst, Solution(rounds=[r0, r1], method="hand")


# round 0: aggregator DC 1; UE 0 uplinks via BS 1, UE 1 via BS 0; downlinks BS 0 and BS 1
R0 = {
    "D_n": [(1 - 0.75) * 1000, (1 - 0.5) * 2000],                          # 250, 1000
    "D_b": [0.5 * 1000, 0.25 * 1000 + 0.5 * 2000],                         # 500, 1250
    "D_s": [0.6 * 500, 0.4 * 500 + 1.0 * 1250],                            # 300, 1450
    "dD_nb": [[1e3 * 1000 * 0.5 / 1e6, 1e3 * 1000 * 0.25 / 4e6],
              [0.0, 1e3 * 2000 * 0.5 / 1e6]],                              # .5 .0625 / 0 1
    "dD_bs": [[1e3 * 500 * 0.6 / 5e8, 1e3 * 500 * 0.4 / 2.5e8],
              [0.0, 1e3 * 1250 * 1.0 / 5e8]],                              # 6e-4 8e-4 / 0 2.5e-3
    "dD_s": [6e-4 + 1.0, 2.5e-3 + 1.0],
    "dP_n": [100 * 2 * 0.5 * 250 / 5e8, 200 * 3 * 0.2 * 1000 / 2.5e8],     # 5e-5, 4.8e-4
    "EP_n": [100 * 2 * 0.5 * 250 * 5e8 ** 2 * 2e-20 / 2,
             200 * 3 * 0.2 * 1000 * 2.5e8 ** 2 * 4e-20 / 2],               # 62.5, 150
    "dP_s": [3 * 0.25 * 300 / (10 * 500), 2 * 0.5 * 1450 / (20 * 1000)],   # 0.045, 0.0725
    "EP_s": [0.045 * (0.4 * 0.5 ** 2 * 100 * 10 + 0.6 * 100 * 10),
             0.0725 * (0.4 * 0.5 ** 2 * 200 * 20 + 0.6 * 200 * 20)],       # 31.5, 203
    "dA_n": [1e6 / 4e6 + 1e6 / 5e8, 1e6 / 2e6 + 1e6 / 2.5e8],              # via BS 1, BS 0 -> DC 1
    "EA_n": [1e6 / 4e6 * 0.1 + 1e6 / 5e8 * 1, 1e6 / 2e6 * 0.5 + 1e6 / 2.5e8 * 4],
    "dA_s": [1e6 / 1e7, 0.0], "EA_s": [1e6 / 1e7 * 5, 0.0],
    "dR_b": [1e6 / 2e8, 1e6 / 1e8], "ER_b": [1e6 / 2e8 * 3, 1e6 / 1e8 * 4],
    "dB_b": [1e6 / 4e6, 1e6 / 8e6],                                        # UE 0 on BS 0, UE 1 on BS 1
    "EB_b": [1e6 / 4e6 * 10, 1e6 / 8e6 * 20],
    "dR_s": [1e6 / 2e7, 0.0], "ER_s": [1e6 / 2e7 * 6, 0.0],
    "dA": 1.0006 + 0.045 + 0.1,                                            # DC 0's path
    "dR": 5e-3 + 0.25,
}
# round 1: aggregator DC 0; UE 0 uplinks via BS 0, UE 1 via BS 1; both downlink via BS 1
R1 = {
    "D_n": [(1 - 0.8) * 3000, (1 - 0.6) * 500],                            # 600, 200
    "D_b": [0.4 * 500, 0.8 * 3000 + 0.2 * 500],                            # 200, 2500
    "D_s": [0.5 * 200 + 0.25 * 2500, 0.5 * 200 + 0.75 * 2500],             # 725, 1975
    "dD_nb": [[0.0, 1e3 * 3000 * 0.8 / 5e6], [1e3 * 500 * 0.4 / 1e6, 1e3 * 500 * 0.2 / 2e6]],
    "dD_bs": [[1e3 * 200 * 0.5 / 1e9, 1e3 * 200 * 0.5 / 5e8],
              [1e3 * 2500 * 0.25 / 2e8, 1e3 * 2500 * 0.75 / 1e9]],
    "dD_s": [3.125e-3 + 0.48, 1.875e-3 + 0.48],
    "dP_n": [100 * 1 * 1 * 600 / 1e9, 200 * 2 * 0.5 * 200 / 5e8],          # 6e-5, 8e-5
    "EP_n": [100 * 600 * 1e18 * 2e-20 / 2, 200 * 2 * 0.5 * 200 * 5e8 ** 2 * 4e-20 / 2],  # 600, 200
    "dP_s": [2 * 0.5 * 725 / (10 * 1000), 1 * 1 * 1975 / (20 * 2000)],     # 0.0725, 0.049375
    "EP_s": [0.0725 * 100 * 10, 0.049375 * 200 * 20],                      # z = C: Pbar M
    "dA_n": [1e6 / 2e6 + 1e6 / 1e9, 1e6 / 2e6 + 1e6 / 2e8],                # via BS 0, BS 1 -> DC 0
    "EA_n": [1e6 / 2e6 * 0.3 + 1e6 / 1e9 * 2, 1e6 / 2e6 * 0.25 + 1e6 / 2e8 * 3],
    "dA_s": [0.0, 1e6 / 5e7], "EA_s": [0.0, 1e6 / 5e7 * 6],
    "dR_b": [1e6 / 5e7, 1e6 / 1e8], "ER_b": [1e6 / 5e7 * 1, 1e6 / 1e8 * 2],
    "dB_b": [0.0, max(1e6 / 4e6, 1e6 / 5e6)],                              # BS 0 serves nobody
    "EB_b": [0.0, 0.25 * 8],
    "dR_s": [0.0, 1e6 / 4e7], "ER_s": [0.0, 1e6 / 4e7 * 5],
    "dA": 0.483125 + 0.0725,                                               # DC 0's path
    "dR": 0.01 + 0.25,
}


def _energies(R, P_nb, P_bs=np.array([[2.0, 4.0], [3.0, 1.0]])):
    return {"E_D_ue": float((np.array(R["dD_nb"]) * P_nb).sum()),
            "E_D_bs": float((np.array(R["dD_bs"]) * P_bs).sum()),
            "E_P_ue": sum(R["EP_n"]), "E_P_dc": sum(R["EP_s"]),
            "E_A": sum(R["EA_n"]) + sum(R["EA_s"]),
            "E_R": sum(R["ER_b"]) + sum(R["EB_b"]) + sum(R["ER_s"])}


@pytest.mark.parametrize("t,R", [(0, R0), (1, R1)])
def test_round_terms_by_hand(two_bs, t, R):
    inst, sol = two_bs
    rt = round_terms(inst, t, sol.rounds[t])
    assert data_split(inst, t, sol.rounds[t])["D"] == [3000.0, 3500.0][t]
    for k, v in R.items():
        assert np.asarray(rt[k]) == approx(np.asarray(v, float)), k
    assert rt["delay"] == approx(R["dA"] + R["dR"])
    E = _energies(R, inst.P_nb[t])
    assert E["E_D_ue"] == approx([0.5 * 0.2 + 0.0625 * 0.1 + 1.0 * 0.4,
                                  0.48 * 0.2 + 0.2 * 0.5 + 0.05 * 0.25][t])
    for k, v in E.items():
        assert rt[k] == approx(v), k
    assert rt["energy"] == approx(sum(w * E[k] for w, k in zip(range(1, 7), E)))


def test_totals_over_rounds_and_feasibility(two_bs):
    inst, sol = two_bs
    # every box, simplex and capacity holds (the ML step-size row of the corollary bound is not
    # what this fixture is about: its gamma are chosen for the arithmetic)
    assert [n for n, _ in constraint_violations(inst, sol) if not n.startswith("step size")] == []
    ev = evaluate(inst, sol)
    assert ev.terms["delay"] == approx(R0["dA"] + R0["dR"] + R1["dA"] + R1["dR"])
    energy = [sum(w * v for w, v in zip(range(1, 7), _energies(R, inst.P_nb[t]).values()))
              for t, R in ((0, R0), (1, R1))]
    assert ev.terms["energy"] == approx(sum(energy))
    assert [r["aggregator"] for r in ev.rounds] == [1, 0]
