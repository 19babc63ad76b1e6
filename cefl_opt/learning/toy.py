"""Small hand-built instances and orchestrations for the learning tests and the benchmark
fallback (used where ``cefl_opt.generator`` / ``cefl_opt.system`` are not available).

``toy_round_costs`` is a *stand-in* for ``cefl_opt.system.round_costs`` with the same call
signature and keys; it is a crude proxy (UE processing time/energy plus one gradient upload)
and is never used for reported numbers when ``cefl_opt.system`` exists.
"""
from __future__ import annotations

import numpy as np

from ..instance import Instance
from ..solution import RoundDecision, Solution


def toy_instance(N: int = 4, B: int = 2, S: int = 2, T: int = 3, D: float = 200.0,
                 seed: int = 0, labels: bool = True, n_classes: int = 10,
                 labels_per_ue: int = 5, L: float = 0.05) -> Instance:
    """A valid instance with N UEs, B BSs, S DCs, T rounds, ~D samples per UE per round. Its
    smoothness L (bound only; training does not read it) is small enough that `toy_solution`'s
    points (gamma up to 5) meet Theorem 1's step-size row: feasible pairs, as `train` needs."""
    rng = np.random.default_rng(seed)
    Dbar = np.maximum(1.0, rng.normal(D, max(1.0, 0.05 * D), size=(T, N))).round()
    ue_labels = []
    if labels:
        ue_labels = [[sorted(int(v) for v in rng.choice(n_classes, labels_per_ue, replace=False))
                      for _ in range(N)] for _ in range(T)]
    return Instance(
        name=f"toy-{N}-{B}-{S}-{T}", Dbar=Dbar,
        R_nb=rng.uniform(50e6, 100e6, (T, N, B)), P_nb=np.full((T, N, B), 0.2),
        R_bn=rng.uniform(100e6, 200e6, (T, B, N)), P_b=np.full((T, B), 10.0),
        Rmax_bs=np.full((B, S), 3.5e9), Rmax_s=np.full(S, 45e9), P_bs=np.full((B, S), 5.0),
        R_sb=rng.uniform(1e9, 2e9, (T, S, B)), P_sb=np.full((S, B), 5.0),
        R_ss=rng.uniform(1e9, 2e9, (T, S, S)), P_ss=np.full((S, S), 5.0),
        c=np.full(N, 3e5), alpha=np.full(N, 2e-28), f_min=np.full(N, 1e5),
        f_max=np.full(N, 2.3e9), M=np.full(S, 700.0), C=np.full(S, 5e6), Pbar=np.full(S, 200.0),
        Theta=np.ones(N + S), sigma=np.ones(N + S), Delta=np.full((T, N + S), 0.3),
        xi3_parts=np.ones(6), L=L, preset="toy", seed=seed, ue_labels=ue_labels,
        ue_subnet=[n % S for n in range(N)], bs_subnet=[b % S for b in range(B)],
        dc_subnet=list(range(S)),
    ).validate()


def toy_solution(instance: Instance, *, offload: float = 0.3, gamma: float = 5.0,
                 m: float = 0.1, seed: int = 0, aggregator: int | None = None) -> Solution:
    """Each UE offloads ``offload`` of its data to one random BS; each BS splits over random
    DCs; every DPU runs ``gamma`` steps with mini-batch ratio ``m``; aggregator rotates."""
    rng = np.random.default_rng(seed)
    N, B, S = instance.N, instance.B, instance.S
    rounds = []
    for t in range(instance.T):
        rho_nb = np.zeros((N, B))
        up = rng.integers(0, B, N)
        rho_nb[np.arange(N), up] = offload
        rho_bs = rng.uniform(0.1, 1.0, (B, S))
        rho_bs /= rho_bs.sum(axis=1, keepdims=True)
        rounds.append(RoundDecision(
            rho_nb=rho_nb, rho_bs=rho_bs, f=np.full(N, 1.0e9), z=np.full(S, 2.5e6),
            gamma_ue=np.full(N, float(gamma)), gamma_dc=np.full(S, float(gamma)),
            m_ue=np.full(N, float(m)), m_dc=np.full(S, float(m)),
            aggregator=int(t % S if aggregator is None else aggregator),
            uplink_bs=up.astype(int), downlink_bs=up.astype(int),
            R_bs=np.full((B, S), 1.0e9)))
    return Solution(rounds=rounds, method="toy", status="feasible").for_instance(instance)


def toy_round_costs(instance: Instance, t: int, dec: RoundDecision) -> dict:
    """Stand-in for ``cefl_opt.system.round_costs`` (tests only; see module doc)."""
    keep = 1.0 - dec.rho_nb.sum(axis=1)
    D_n = keep * instance.Dbar[t]
    dP = instance.c * dec.gamma_ue * dec.m_ue * D_n / dec.f
    EP = instance.c * dec.gamma_ue * dec.m_ue * D_n * dec.f ** 2 * instance.alpha / 2
    up = instance.beta_M / instance.R_nb[t, np.arange(instance.N), dec.uplink_bs]
    dA = float(np.max(dP + up))
    dR = float(np.max(instance.beta_M / instance.R_bn[t, dec.downlink_bs, np.arange(instance.N)]))
    energy = float(EP.sum() + (up * instance.P_nb[t, np.arange(instance.N), dec.uplink_bs]).sum())
    return {"delay": dA + dR, "energy": energy, "dA": dA, "dR": dR}
