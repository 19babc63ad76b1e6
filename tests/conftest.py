"""Shared fixtures: a hand-made `tiny` instance with round numbers, random feasible points, a
paper instance saved once for the signal tests, and what /proc says of processes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cefl_opt.instance import Instance
from cefl_opt.solution import RoundDecision, Solution


def hand_instance() -> Instance:
    """2 UEs, 1 BS, 2 DCs, 2 rounds; every number round so that tests can work by hand.

    Both rounds share the network data (only Delta differs); test_system.py spells out the
    arithmetic from these numbers.
    """
    T = 2
    return Instance(
        name="hand-tiny", preset="custom", seed=None,
        Dbar=np.array([[1000.0, 2000.0]] * T),
        R_nb=np.array([[[1e6], [2e6]]] * T),                 # [T][N][B] bit/s
        P_nb=np.array([[[0.2], [0.5]]] * T),                 # W
        R_bn=np.array([[[4e6, 5e6]]] * T),                   # [T][B][N]
        P_b=np.array([[10.0]] * T),
        Rmax_bs=np.array([[1e9, 5e8]]),                      # [B][S]
        Rmax_s=np.array([2e9, 1e9]),
        P_bs=np.array([[2.0, 4.0]]),
        R_sb=np.array([[[1e8], [2e8]]] * T),                 # [T][S][B]
        P_sb=np.array([[1.0], [3.0]]),                       # [S][B]
        R_ss=np.array([[[1e9, 1e7], [2e7, 1e9]]] * T),       # diagonal unused
        P_ss=np.array([[0.0, 5.0], [6.0, 0.0]]),
        c=np.array([100.0, 200.0]), alpha=np.array([2e-20, 4e-20]),
        f_min=np.array([1e6, 1e6]), f_max=np.array([1e9, 1e9]),
        M=np.array([10.0, 20.0]), C=np.array([1000.0, 2000.0]), Pbar=np.array([100.0, 200.0]),
        Theta=np.array([1.0, 2.0, 3.0, 4.0]), sigma=np.array([1.0, 1.0, 2.0, 1.0]),
        Delta=np.array([[0.3] * 4, [0.5] * 4]),
        xi3_parts=np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        beta_D=1e3, beta_M=1e6, rho_idle=0.4, eta=0.1, mu=1.0, vartheta=0.5, L=1.0,
        zeta1=1.0, zeta2=1.5, F0_minus_Fstar=2.3, gamma_min=1.0, gamma_max=20.0,
        m_floor=0.01, z_floor=0.01, R_floor=1e6, xi1=2.0, xi2=3.0, xi3=0.5,
    ).validate()


def hand_solution() -> Solution:
    """Round 0: partial offloading, aggregator 1, the UE path sets dA.
    Round 1: more offloading, aggregator 0, DC 0's path sets dA."""
    r0 = RoundDecision(
        rho_nb=np.array([[0.5], [0.25]]), rho_bs=np.array([[0.6, 0.4]]),
        f=np.array([5e8, 2.5e8]), z=np.array([500.0, 1000.0]),
        gamma_ue=np.array([2.0, 3.0]), gamma_dc=np.array([3.0, 2.0]),
        m_ue=np.array([0.5, 0.2]), m_dc=np.array([0.25, 0.5]),
        aggregator=1, uplink_bs=np.array([0, 0]), downlink_bs=np.array([0, 0]),
        R_bs=np.array([[5e8, 2.5e8]]))
    r1 = RoundDecision(
        rho_nb=np.array([[0.8], [0.5]]), rho_bs=np.array([[0.5, 0.5]]),
        f=np.array([1e9, 1e9]), z=np.array([1000.0, 2000.0]),
        gamma_ue=np.array([1.0, 1.0]), gamma_dc=np.array([3.0, 2.0]),
        m_ue=np.array([1.0, 1.0]), m_dc=np.array([1.0, 0.5]),
        aggregator=0, uplink_bs=np.array([0, 0]), downlink_bs=np.array([0, 0]),
        R_bs=np.array([[1e9, 5e8]]))
    return Solution(rounds=[r0, r1], method="hand")


def random_solution(inst: Instance, rng: np.random.Generator, *, gamma_hi: float | None = None,
                    style: str = "mixed", step_condition: bool = True) -> Solution:
    """A random point inside every box, simplex and capacity of P.

    style: "mixed" (random partial offloading), "none" (no offloading: DCs hold no data),
    "full" (every UE offloads everything: UEs hold no data), "sparse" (random zeros).
    step_condition: shrink the gammas to meet Theorem 1's step-size row (`system.
    enforce_step_condition`), so that the point is feasible for P in the corollary form.
    """
    N, B, S = inst.N, inst.B, inst.S
    ghi = inst.gamma_max if gamma_hi is None else gamma_hi
    rounds = []
    for _ in range(inst.T):
        w = rng.dirichlet(np.ones(B + 1), size=N)          # last column = share kept
        if style == "none":
            rho_nb = np.zeros((N, B))
        elif style == "full":
            rho_nb = w[:, :B] / w[:, :B].sum(axis=1, keepdims=True)
        else:
            rho_nb = w[:, :B]
            if style == "sparse":
                rho_nb = rho_nb * (rng.random((N, B)) < 0.4)
        rho_bs = rng.dirichlet(np.ones(S), size=B)
        if style == "sparse":
            keep = rng.random((B, S)) < 0.5
            keep[np.arange(B), rng.integers(S, size=B)] = True
            rho_bs = rho_bs * keep
            rho_bs /= rho_bs.sum(axis=1, keepdims=True)
        # R_bs in [R_floor, Rmax_bs], scaled towards R_floor where a DC's ingress would overflow
        R = inst.R_floor + rng.random((B, S)) * (inst.Rmax_bs - inst.R_floor)
        extra = R - inst.R_floor
        room = inst.Rmax_s - B * inst.R_floor
        k = np.minimum(1.0, room / np.maximum(extra.sum(axis=0), 1e-300))
        R = inst.R_floor + extra * k[None, :] * 0.999
        r = RoundDecision(
            rho_nb=rho_nb, rho_bs=rho_bs,
            f=rng.uniform(inst.f_min, inst.f_max),
            z=rng.uniform(inst.z_floor, 1.0, S) * inst.C,
            gamma_ue=rng.uniform(inst.gamma_min, ghi, N), gamma_dc=rng.uniform(inst.gamma_min, ghi, S),
            m_ue=rng.uniform(inst.m_floor, 1.0, N), m_dc=rng.uniform(inst.m_floor, 1.0, S),
            aggregator=int(rng.integers(S)), uplink_bs=rng.integers(B, size=N),
            downlink_bs=rng.integers(B, size=N), R_bs=R)
        if inst.links is not None:  # absent UE-BS links: no data, no association
            on, links = inst.link_mask, inst.ue_links()
            r.rho_nb = r.rho_nb * on
            if style == "full":
                r.rho_nb /= r.rho_nb.sum(axis=1, keepdims=True)
            r.uplink_bs = np.array([links[n][u % len(links[n])] for n, u in enumerate(r.uplink_bs)])
            r.downlink_bs = np.array([links[n][u % len(links[n])]
                                      for n, u in enumerate(r.downlink_bs)])
        rounds.append(r)
    sol = Solution(rounds=rounds, method="random")
    if step_condition:  # a constraint of P (Theorem 1, corollary form): gammas shrunk to meet it
        from cefl_opt.system import enforce_step_condition
        enforce_step_condition(inst, sol)
    return sol


@pytest.fixture
def tiny_hand():
    return hand_instance(), hand_solution()


@pytest.fixture
def rand_sol():
    """The function random_solution(inst, rng, gamma_hi=None, style='mixed')."""
    return random_solution


@pytest.fixture(scope="session")
def paper_net(tmp_path_factory):
    """A paper instance (T = 3, seed 11) saved once: its `decentralized` solve takes well over
    the signal tests' delays, in one process or on 2 ranks."""
    from cefl_opt.generator import make_instance
    net = tmp_path_factory.mktemp("paper_net") / "net.json"
    make_instance("paper", rounds=3, seed=11).save(net)
    return net


@pytest.fixture(scope="session")
def enumerated():
    """`enumerated(preset, **make_instance kwargs)`: the instance and the brute-force optimum
    over every binary choice (`centralized.exhaustive`: best objective, solution, number of
    choices), each computed once per process. The tests that share an instance carry one
    `pytest.mark.xdist_group("enumerated-...")`, so that under pytest-xdist one worker
    computes its optimum once."""
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.centralized import exhaustive
    cache: dict = {}

    def get(preset: str, **kw):
        key = (preset, repr(sorted(kw.items())))
        if key not in cache:
            inst = make_instance(preset, **kw)
            cache[key] = (inst, exhaustive(inst))
        return cache[key]
    return get


#: module-scoped fixtures worth computing once: under pytest-xdist (`--dist loadgroup`) the
#: tests of a module that use one of them run on one worker (group "<module>::<fixture>")
SHARED_FIXTURES = ("site", "tiny_run", "tiny_pair", "tiny_screened", "two_points",
                   "converged_tiny")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Group the users of a shared fixture, then run the grouped tests first (in collection
    order otherwise): a group runs on one worker from start to end, so a long group started
    last leaves the other workers idle while it ends."""
    for item in items:
        used = [f for f in SHARED_FIXTURES if f in getattr(item, "fixturenames", ())]
        if used and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}::{used[0]}"))
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)


def proc_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, parent pid, ...); None for
    a process that is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def live(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (a zombie is gone for our purpose)."""
    return [k for k in pids if (f := proc_fields(k)) and f[0] != "Z"]


def live_children(pid: int) -> list[int]:
    """Pids of the live processes whose parent is `pid`."""
    kids = (int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit())
    return [k for k in kids if (f := proc_fields(k)) and f[0] != "Z" and int(f[1]) == pid]
