"""Consensus mixing for the decentralised CE-FL primal-dual solver (Algorithms 2-3).

Every network node ``d`` keeps its own copy of the dual vector (one row of ``Gamma``); a
consensus round replaces each copy by a weighted average of its neighbours' copies,
``Gamma <- W Gamma``, with the paper's constant-edge-weight rule

    W[d, d'] = z            for every edge {d, d'},
    W[d, d]  = 1 - z deg(d),
    0 < z < 1 / max_degree  (default z = 1 / (max_degree + 1)).

``W`` is symmetric and doubly stochastic, so every round preserves the node average exactly
(in exact arithmetic), and on a connected graph the disagreement shrinks geometrically at rate
``spectral_rate(W)`` (the second-largest eigenvalue modulus).

Depends on numpy; ``mixing_matrix`` takes a networkx graph (networkx itself is not imported).
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["mixing_matrix", "consensus_rounds", "disagreement", "spectral_rate"]


def mixing_matrix(graph: Any, nodes: Sequence[Hashable] | None = None,
                  z: float | None = None) -> tuple[np.ndarray, list]:
    """Constant-weight consensus matrix of an undirected networkx graph.

    Returns ``(W, nodes)`` where row/column ``i`` of ``W`` belongs to ``nodes[i]`` (default:
    ``list(graph.nodes)``; if given, it must list every node exactly once). Self-loops are
    ignored and parallel edges count once. ``z`` defaults to ``1/(max_degree + 1)`` and must
    satisfy ``0 < z < 1/max_degree`` (any ``z > 0`` for a graph without edges).

    Raises ``ValueError`` for a directed graph, a bad ``nodes`` list or an out-of-range ``z``.
    """
    if graph.is_directed():
        raise ValueError("mixing_matrix needs an undirected graph (W must be symmetric)")
    node_list = list(graph.nodes) if nodes is None else list(nodes)
    index = {v: i for i, v in enumerate(node_list)}
    if len(index) != len(node_list):
        raise ValueError("nodes contains duplicates")
    if set(index) != set(graph.nodes):
        missing = [v for v in graph.nodes if v not in index]
        extra = [v for v in node_list if v not in graph]
        raise ValueError(f"nodes must list every graph node exactly once "
                         f"(missing {missing[:5]}, unknown {extra[:5]})")
    n = len(node_list)
    A = np.zeros((n, n))
    for u, v in graph.edges():
        if u != v:
            i, j = index[u], index[v]
            A[i, j] = A[j, i] = 1.0
    deg = A.sum(axis=1)
    dmax = float(deg.max()) if n else 0.0
    if z is None:
        z = 1.0 / (dmax + 1.0)
    z = float(z)
    upper = np.inf if dmax == 0 else 1.0 / dmax
    if not (np.isfinite(z) and 0.0 < z < upper):
        raise ValueError(f"z = {z!r} is out of range: need 0 < z < 1/max_degree = {upper!r} "
                         f"(max_degree = {int(dmax)})")
    W = z * A
    W[np.diag_indices(n)] = 1.0 - z * deg
    return W, node_list


def consensus_rounds(Gamma: Any, W: Any, J: int) -> np.ndarray:
    """``W^J Gamma`` by ``J`` successive multiplications (one per communication round).

    ``Gamma`` has shape ``(n_nodes, k)`` (row ``d`` = node ``d``'s copy of the dual vector) or
    ``(n_nodes,)``. ``J = 0`` returns a copy. The result has ``Gamma``'s shape.
    """
    G = np.array(Gamma, dtype=float, copy=True)
    Wa = np.asarray(W, dtype=float)
    if Wa.ndim != 2 or Wa.shape[0] != Wa.shape[1]:
        raise ValueError(f"W must be square, got shape {Wa.shape}")
    if G.ndim not in (1, 2) or G.shape[0] != Wa.shape[0]:
        raise ValueError(f"Gamma must have shape (n_nodes, k) with n_nodes = {Wa.shape[0]}, "
                         f"got {G.shape}")
    if isinstance(J, bool) or int(J) != J or J < 0:
        raise ValueError(f"J must be a non-negative integer, got {J!r}")
    for _ in range(int(J)):
        G = Wa @ G
    return G


def disagreement(Gamma: Any) -> float:
    """``max_d || Gamma[d] - mean_d' Gamma[d'] ||_inf`` (0 iff all nodes agree)."""
    G = np.asarray(Gamma, dtype=float)
    if G.ndim == 1:
        G = G[:, None]
    if G.size == 0:
        return 0.0
    return float(np.max(np.abs(G - G.mean(axis=0, keepdims=True))))


def spectral_rate(W: Any) -> float:
    """Second-largest eigenvalue modulus of ``W`` (geometric consensus rate).

    For a symmetric doubly stochastic ``W`` this equals ``||W - 11^T/n||_2``; it is ``< 1``
    iff the graph is connected (with ``0 < z < 1/max_degree``) and ``1`` otherwise.
    """
    Wa = np.asarray(W, dtype=float)
    if Wa.ndim != 2 or Wa.shape[0] != Wa.shape[1]:
        raise ValueError(f"W must be square, got shape {Wa.shape}")
    if Wa.shape[0] <= 1:
        return 0.0
    if np.allclose(Wa, Wa.T, rtol=0.0, atol=1e-14):
        ev = np.abs(np.linalg.eigvalsh((Wa + Wa.T) / 2.0))
    else:
        ev = np.abs(np.linalg.eigvals(Wa))
    ev.sort()
    return float(ev[-2])
