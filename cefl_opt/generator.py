"""Seeded generator of CE-FL network instances and the presets `tiny`, `small`, `paper`
(docs/modelling.md, 'Units and presets').

Every default number, with where it comes from (SI units):

| quantity | default | source / reasoning |
|---|---|---|
| UE->BS uplink `R_nb` | intra-sub-network N(60, 15) Mbit/s, inter N(12, 3), >= 2 | 5G mid-band / CBRS uplink throughputs of tens of Mbit/s; redrawn each round (fading) |
| BS->UE downlink `R_bn` | intra N(200, 40) Mbit/s, inter N(40, 10), >= 5 | downlink ~3x uplink in 5G TDD |
| UE power `P_nb` | U[0.15, 0.25] W | 23 dBm = 0.2 W, 3GPP power class 3 |
| BS broadcast power `P_b` | U[15, 25] W | small-cell / sector transmit power of ~20 W |
| BS->DC capacity `Rmax_bs` | intra U[3, 4] Gbit/s (paper), inter x 0.1 | paper §VI; "low inter-sub-network rates" |
| DC ingress `Rmax_s` | U[40, 50] Gbit/s | paper §VI |
| wireline powers `P_bs, P_sb, P_ss` | U[2, 4] W | ~1 nJ/bit at a few Gbit/s |
| DC->BS `R_sb` | Rmax_bs^T x congestion U[0.5, 1] per round | wireline, time-varying congestion |
| DC->DC `R_ss` | base U[1, 10] Gbit/s (asymmetric) x congestion U[0.2, 1] per round | paper: asymmetric, congested |
| `c_n` | 300 cycles/bit x beta_D x U[0.8, 1.2] cycles per sample | paper table's c_n = 300, read per bit (per sample it would be ~1000x too small for an MLP step) |
| `alpha_n` | 2e-28 x U[0.8, 1.2] | the literature's alpha/2 ~ 1e-28 (the paper's 2e-16 gives ~1e9 J per round; docs/formulation.md, '1. Network and data') |
| `f` | [100 kHz, 2.3 GHz] | paper table |
| DC `C, M, Pbar, rho_idle` | 5e6 pts/s, 700, 200 W, 0.4 | paper table |
| `beta_D, beta_M` | 6272 bit, 4e7 bit | the paper's table swaps them (docs/formulation.md, '1. Network and data') |
| `Dbar` | N(2000, sqrt(200)) x sub-network concentration | paper §VI (variance 200); concentration c=0.3 moves to the next sub-network each round |
| ML `eta, mu, Delta` | 0.001, 0.01, 0.3 | paper table |
| ML `vartheta_mode`, `vartheta` | `Instance`'s defaults: constant, 3 | one vartheta for bound and trainer (docs/modelling.md, 'The ML term'), the number `vartheta` (mode `constant`) or `tau_eff` (FedNova's, a function of gamma); the default pair was chosen by measuring exp1 (docs/results/experiments.md); the paper's 0.01 makes the 1/vartheta terms dwarf the rest and freezes training |
| ML `L, Theta, sigma, zeta1, zeta2` | 1, 1, 1, 1.5, 1 | placeholders; `cefl-opt estimate --apply` and `cefl-opt run` put measured values in |
| `F0 - F*` | 2.3 | ln(10): cross-entropy of an untrained 10-class model, F* >= 0 |
| `gamma` | [1, 20] | local SGD iterations |
| `m_floor, z_floor, R_floor` | 0.01, 0.01, 1 Mbit/s | positive floors keep 1/m, 1/z, 1/R finite |
| weights `xi1, xi2, xi3` | 1 / (part at the reference orchestration) | docs/modelling.md, 'Weights and infeasible capacity' |
| UE-BS links (`reach`) | all links; `reach=k`: the k BSs of highest mean uplink rate | rates stand in for distance (path loss), so these are the k nearest BSs |

Under `reach=k` the draws are those of the full-link instance (same seed, same numbers on the
present links); the absent links' `R_nb`, `P_nb`, `R_bn` are then set to 0 and the
communication graph keeps UE-BS edges over present links only. Generation is vectorised
(1,000 UEs / 100 BSs / 20 DCs in well under a second; docs/results/scale.md, 'Instance sizes and
generation').
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .instance import Instance, InstanceError

DC_NAMES = ["Indy-5G-Zone", "Discovery-Park", "Wisconsin", "Utah", "Clemson"]

PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"ues": 2, "bss": 1, "dcs": 2, "rounds": 2},
    "small": {"ues": 4, "bss": 2, "dcs": 2, "rounds": 3},
    "paper": {"ues": 20, "bss": 10, "dcs": 5, "rounds": 5},
}

MBIT, GBIT = 1e6, 1e9
# Memory to generate and write one element of a per-round [T][N][B] array (R_nb, P_nb, R_bn):
# the numpy value and its temporaries, the Python float and list slot of `tolist()` and the
# JSON text; and per UE-BS pair of the communication graph's construction.
BYTES_PER_ELEMENT, BYTES_PER_PAIR = 300, 150


def memory_estimate(ues: int, bss: int, dcs: int, rounds: int) -> float:
    """Bytes that generating and saving an instance of this size needs (an estimate)."""
    per_round = ues * bss + bss * dcs + dcs * dcs + 7 * ues + dcs
    return float(BYTES_PER_ELEMENT) * rounds * per_round + BYTES_PER_PAIR * ues * bss


def check_size(ues: int, bss: int, dcs: int, rounds: int) -> None:
    """Refuse sizes below one or whose generation cannot fit in this machine's memory,
    naming the sizes and the estimate."""
    for k, v in (("ues", ues), ("bss", bss), ("dcs", dcs), ("rounds", rounds)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InstanceError(f"'{k}' must be an integer >= 1, got {v!r}")
    need, have = memory_estimate(ues, bss, dcs, rounds), _physical_memory()
    if have is not None and need > have:
        raise InstanceError(f"network of {ues} UEs, {bss} BSs, {dcs} DCs and {rounds} rounds "
                            f"needs about {_bytes(need)} of memory to generate and write; this "
                            f"machine has {_bytes(have)}")


def _physical_memory() -> float | None:
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def _bytes(x: float) -> str:
    for unit, k in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if x >= k:
            return f"{x / k:.3g} {unit}"
    return f"{x:.3g} bytes"


def _normal_clip(rng: np.random.Generator, mean: np.ndarray, sd: np.ndarray, lo: float,
                 size) -> np.ndarray:
    return np.maximum(rng.normal(mean, sd, size=size), lo)


def make_instance(preset: str = "paper", *, ues: int | None = None, bss: int | None = None,
                  dcs: int | None = None, rounds: int | None = None, seed: int = 0,
                  concentration: float = 0.3, edge_prob: float = 0.3, reach: int | None = None,
                  **overrides: Any) -> Instance:
    """A seeded instance of `preset` with optional size overrides and field overrides.

    The draws and their sources are listed in the module docstring; the instance's fields are
    the given quantities of Problem P (docs/formulation.md, '1. Network and data').

    Args:
        preset: `tiny` (2 UEs, 1 BS, 2 DCs, 2 rounds), `small` (4, 2, 2, 3) or `paper`
            (20, 10, 5, 5).
        ues: number of UEs N (default: the preset's).
        bss: number of BSs B (default: the preset's).
        dcs: number of DCs S (default: the preset's).
        rounds: number of global rounds T (default: the preset's).
        seed: seed of every random draw, an integer >= 0.
        concentration: share c in [0, 1) of each sub-network's data that moves to the next
            sub-network each round.
        edge_prob: probability of each extra edge of the communication graph.
        reach: each UE keeps links to its `reach` nearest BSs only; None (the presets'
            default) or reach >= B keeps every link.
        **overrides: field values of `Instance` that replace the drawn ones (e.g. `xi1=2.0`).

    Returns:
        The validated instance.

    Raises:
        InstanceError: an unknown preset, a size, seed, reach or concentration out of range, or
            an override that makes the instance invalid.

    Examples:
        >>> from cefl_opt import make_instance
        >>> inst = make_instance("small", seed=0, rounds=2)
        >>> inst.N, inst.B, inst.S, inst.T
        (4, 2, 2, 2)
    """
    if preset not in PRESETS:
        raise InstanceError(f"unknown preset {preset!r}: choose one of {sorted(PRESETS)}")
    size = dict(PRESETS[preset])
    size.update({k: v for k, v in (("ues", ues), ("bss", bss), ("dcs", dcs), ("rounds", rounds))
                 if v is not None})
    check_size(**size)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InstanceError(f"'seed' must be an integer >= 0, got {seed!r}")
    if reach is not None and (isinstance(reach, bool) or int(reach) != reach or reach < 1):
        raise InstanceError(f"'reach' must be an integer >= 1, got {reach!r}")
    if not 0.0 <= concentration < 1.0:
        raise InstanceError(f"'concentration' must be in [0, 1), got {concentration}")
    N, B, S, T = size["ues"], size["bss"], size["dcs"], size["rounds"]
    rng = np.random.default_rng(seed)

    # sub-networks: DC s with its share of BSs and UEs (paper: 1 DC, 2 BSs, 4 UEs each)
    ue_sub = (np.arange(N) * S // N).astype(int)
    bs_sub = (np.arange(B) * S // B).astype(int)
    dc_sub = np.arange(S)
    same_nb = ue_sub[:, None] == bs_sub[None, :]              # [N, B]
    same_bs = bs_sub[:, None] == dc_sub[None, :]              # [B, S]

    R_nb = _normal_clip(rng, np.where(same_nb, 60, 12) * MBIT, np.where(same_nb, 15, 3) * MBIT,
                        2 * MBIT, (T, N, B))
    R_bn = _normal_clip(rng, np.where(same_nb.T, 200, 40) * MBIT,
                        np.where(same_nb.T, 40, 10) * MBIT, 5 * MBIT, (T, B, N))
    P_nb = np.broadcast_to(rng.uniform(0.15, 0.25, (N, B)), (T, N, B)).copy()
    P_b = np.broadcast_to(rng.uniform(15, 25, B), (T, B)).copy()
    Rmax_bs = rng.uniform(3, 4, (B, S)) * GBIT * np.where(same_bs, 1.0, 0.1)
    Rmax_s = rng.uniform(40, 50, S) * GBIT
    P_bs = rng.uniform(2, 4, (B, S))
    R_sb = Rmax_bs.T[None] * rng.uniform(0.5, 1.0, (T, S, B))
    P_sb = rng.uniform(2, 4, (S, B))
    R_ss = rng.uniform(1, 10, (S, S))[None] * GBIT * rng.uniform(0.2, 1.0, (T, S, S))
    for t in range(T):
        np.fill_diagonal(R_ss[t], 1.0 * GBIT)  # unused: delta^M_{s,s} = 0
    P_ss = rng.uniform(2, 4, (S, S))
    np.fill_diagonal(P_ss, 0.0)
    beta_D = 6272.0
    c = 300.0 * beta_D * rng.uniform(0.8, 1.2, N)
    alpha = 2e-28 * rng.uniform(0.8, 1.2, N)

    # dynamic data: the hot sub-network moves by one each round (users' mobility)
    phase = int(rng.integers(S))
    conc = np.full((T, S), 1.0 - concentration)
    for t in range(T):
        conc[t, (t + phase) % S] += concentration * S
    Dbar = np.maximum(np.round(rng.normal(2000, np.sqrt(200), (T, N)) * conc[:, ue_sub]), 1.0)
    labels = [[sorted(int(x) for x in rng.choice(10, 5, replace=False)) for _ in range(N)]
              for _ in range(T)]

    inst = Instance(
        name=f"{preset}-N{N}-B{B}-S{S}-T{T}-seed{seed}", preset=preset, seed=seed,
        Dbar=Dbar, R_nb=R_nb, P_nb=P_nb, R_bn=R_bn, P_b=P_b, Rmax_bs=Rmax_bs, Rmax_s=Rmax_s,
        P_bs=P_bs, R_sb=R_sb, P_sb=P_sb, R_ss=R_ss, P_ss=P_ss, c=c, alpha=alpha,
        f_min=np.full(N, 1e5), f_max=np.full(N, 2.3e9), M=np.full(S, 700.0),
        C=np.full(S, 5e6), Pbar=np.full(S, 200.0), Theta=np.ones(N + S), sigma=np.ones(N + S),
        Delta=np.full((T, N + S), 0.3), xi3_parts=np.ones(6), beta_D=beta_D, beta_M=4e7,
        dc_names=[DC_NAMES[s] if s < len(DC_NAMES) else f"DC-{s}" for s in range(S)],
        ue_subnet=ue_sub.tolist(), bs_subnet=bs_sub.tolist(), dc_subnet=dc_sub.tolist(),
        ue_labels=labels,
        notes={"generator": "cefl_opt.generator.make_instance", "concentration": concentration,
               "hot_subnet_by_round": [int((t + phase) % S) for t in range(T)]},
    )
    if reach is not None and int(reach) < B:
        inst.links = nearest_links(R_nb, int(reach))
        absent = ~inst.link_mask
        for arr in (inst.R_nb, inst.P_nb):
            arr[:, absent] = 0.0
        inst.R_bn[:, absent.T] = 0.0
        inst.notes["reach"] = int(reach)
    inst.graph_edges = communication_graph_edges(inst, np.random.default_rng([seed, 1]), edge_prob)
    for k, v in overrides.items():
        if not hasattr(inst, k):
            raise InstanceError(f"unknown instance field {k!r}")
        setattr(inst, k, np.asarray(v, float) if isinstance(getattr(inst, k), np.ndarray) else v)
    inst.validate()
    if not any(k in overrides for k in ("xi1", "xi2", "xi3", "xi3_total")):
        from .system import normalising_weights
        for k, v in normalising_weights(inst).items():
            setattr(inst, k, float(v))
    return inst


def nearest_links(R_nb: np.ndarray, k: int) -> list[list[int]]:
    """Per UE, the k BSs of highest mean uplink rate (ties by BS index), sorted."""
    order = np.argsort(-R_nb.mean(axis=0), axis=1, kind="stable")[:, :k]
    return [sorted(int(b) for b in row) for row in order]


def communication_graph_edges(inst: Instance, rng: np.random.Generator,
                              p: float = 0.3) -> list[list[str]]:
    """Appendix "Network graph construction": keep each UE-BS, BS-DC, DC-DC edge with
    probability p, then repair: each UE gets a BS (its best mean uplink), each BS a DC (its best
    capacity), each DC another DC; finally join components so that the graph is connected.
    UE-BS edges exist over present links only (`Instance.links`). Vectorised: the draws are
    the same stream as one `rng.random()` per candidate edge in (UE, BS), (BS, DC), (DC < DC')
    order, absent links included, so that `reach` leaves the other edges' draws unchanged."""
    import networkx as nx
    N, B, S = inst.N, inst.B, inst.S
    ue_bs = (rng.random((N, B)) < p) & inst.link_mask
    bs_dc = rng.random((B, S)) < p
    iu, ju = np.triu_indices(S, 1)
    dc_dc = rng.random(iu.size) < p
    mean_up = inst.R_nb.mean(axis=0)          # absent links are 0: never the best
    lonely = ~ue_bs.any(axis=1)
    ue_bs[np.flatnonzero(lonely), np.argmax(mean_up[lonely], axis=1)] = True
    lonely = ~bs_dc.any(axis=1)
    bs_dc[np.flatnonzero(lonely), np.argmax(inst.Rmax_bs[lonely], axis=1)] = True
    dd = np.zeros((S, S), bool)
    dd[iu[dc_dc], ju[dc_dc]] = True
    dd |= dd.T
    if S > 1:
        for s in range(S):  # sequential: an edge added here counts for the later DCs
            if not dd[s].any():
                dd[s, (s + 1) % S] = dd[(s + 1) % S, s] = True
    g = nx.Graph()
    g.add_nodes_from(inst.node_names())
    n_, b_ = np.nonzero(ue_bs)
    g.add_edges_from((f"ue{n}", f"bs{b}") for n, b in zip(n_.tolist(), b_.tolist()))
    b_, s_ = np.nonzero(bs_dc)
    g.add_edges_from((f"bs{b}", f"dc{s}") for b, s in zip(b_.tolist(), s_.tolist()))
    s_, k_ = np.nonzero(np.triu(dd, 1))
    g.add_edges_from((f"dc{s}", f"dc{k}") for s, k in zip(s_.tolist(), k_.tolist()))
    comps = [sorted(c) for c in nx.connected_components(g)]
    # join components through their DCs (every component holds one: each BS has a DC)
    for a, b in zip(comps, comps[1:]):
        da = next(v for v in a if v.startswith("dc"))
        db = next(v for v in b if v.startswith("dc"))
        g.add_edge(da, db)
    return sorted([sorted(e) for e in g.edges()])
