"""Consensus mixing (cefl_opt.solvers.consensus) on seeded random networkx graphs."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

try:  # the package maps solvers/ -> cefl_opt.solvers once installed
    import cefl_opt.solvers  # noqa: F401
except ImportError:  # not installed yet: register the source folder under that name
    _root = Path(__file__).resolve().parents[1]
    if "cefl_opt" not in sys.modules:
        try:
            import cefl_opt  # noqa: F401
        except ImportError:
            _pkg = types.ModuleType("cefl_opt")
            _pkg.__path__ = [str(_root / "cefl_opt")]
            sys.modules["cefl_opt"] = _pkg
    _sub = types.ModuleType("cefl_opt.solvers")
    _sub.__path__ = [str(_root / "solvers")]
    sys.modules["cefl_opt.solvers"] = _sub
    sys.modules["cefl_opt"].solvers = _sub

from cefl_opt.solvers.consensus import (  # noqa: E402
    consensus_rounds,
    disagreement,
    mixing_matrix,
    spectral_rate,
)


def connected_graphs():
    """Seeded connected graphs of assorted shapes (name, graph)."""
    out = [
        ("path7", nx.path_graph(7)),
        ("cycle8", nx.cycle_graph(8)),
        ("star9", nx.star_graph(8)),
        ("complete6", nx.complete_graph(6)),
        ("grid3x4", nx.convert_node_labels_to_integers(nx.grid_2d_graph(3, 4))),
        ("ws20", nx.connected_watts_strogatz_graph(20, 4, 0.3, seed=3)),
        ("regular12", nx.random_regular_graph(3, 12, seed=4)),
    ]
    rng = np.random.default_rng(5)
    for i in range(6):
        n = int(rng.integers(5, 25))
        seed = int(rng.integers(1 << 30))
        g = nx.erdos_renyi_graph(n, 0.3, seed=seed)
        while not nx.is_connected(g):
            seed += 1
            g = nx.erdos_renyi_graph(n, 0.3, seed=seed)
        out.append((f"er{i}_{n}", g))
    return out


GRAPHS = connected_graphs()
IDS = [name for name, _ in GRAPHS]
GRAPHS = [g for _, g in GRAPHS]


# --------------------------------------------------------------------------------------------
# the mixing matrix
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("g", GRAPHS, ids=IDS)
def test_mixing_matrix_is_the_paper_rule(g):
    W, nodes = mixing_matrix(g)
    n = g.number_of_nodes()
    dmax = max(d for _, d in g.degree())
    z = 1.0 / (dmax + 1)
    assert W.shape == (n, n) and nodes == list(g.nodes)
    idx = {v: i for i, v in enumerate(nodes)}
    A = np.zeros((n, n))
    for u, v in g.edges():
        A[idx[u], idx[v]] = A[idx[v], idx[u]] = 1
    off = ~np.eye(n, dtype=bool)
    np.testing.assert_array_equal(W[off], (z * A)[off])
    np.testing.assert_allclose(np.diag(W), [1 - z * g.degree(v) for v in nodes], atol=1e-15)
    # symmetric, doubly stochastic, non-negative
    np.testing.assert_array_equal(W, W.T)
    np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-14)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-14)
    assert W.min() >= 0.0


def test_mixing_matrix_custom_z_and_node_order():
    g = nx.Graph([("a", "b"), ("b", "c"), ("c", "d"), ("b", "d")])  # max degree 3 (node b)
    nodes = ["d", "c", "b", "a"]
    W, out = mixing_matrix(g, nodes=nodes, z=0.3)
    assert out == nodes
    expected = np.array([
        [1 - 0.6, 0.3, 0.3, 0.0],
        [0.3, 1 - 0.6, 0.3, 0.0],
        [0.3, 0.3, 1 - 0.9, 0.3],
        [0.0, 0.0, 0.3, 1 - 0.3],
    ])
    np.testing.assert_allclose(W, expected, atol=1e-15)
    # self-loops are ignored, parallel edges count once
    gm = nx.MultiGraph([(0, 1), (0, 1), (1, 2), (2, 2)])
    Wm, _ = mixing_matrix(gm)
    np.testing.assert_allclose(Wm, mixing_matrix(nx.path_graph(3))[0], atol=1e-15)


@pytest.mark.parametrize("z", [0.0, -0.1, 1 / 3, 0.34, 1.0, np.nan, np.inf])
def test_bad_z_raises(z):
    g = nx.Graph([("a", "b"), ("b", "c"), ("c", "d"), ("b", "d")])  # need 0 < z < 1/3
    with pytest.raises(ValueError, match="z"):
        mixing_matrix(g, z=z)


def test_bad_graph_or_nodes_raise():
    with pytest.raises(ValueError, match="undirected"):
        mixing_matrix(nx.DiGraph([(0, 1)]))
    g = nx.path_graph(3)
    with pytest.raises(ValueError, match="every graph node"):
        mixing_matrix(g, nodes=[0, 1])
    with pytest.raises(ValueError, match="every graph node"):
        mixing_matrix(g, nodes=[0, 1, 5])
    with pytest.raises(ValueError, match="duplicates"):
        mixing_matrix(g, nodes=[0, 1, 1, 2])


def test_edgeless_graph_gives_identity():
    g = nx.empty_graph(4)
    W, _ = mixing_matrix(g)
    np.testing.assert_array_equal(W, np.eye(4))
    np.testing.assert_array_equal(mixing_matrix(g, z=5.0)[0], np.eye(4))
    assert spectral_rate(W) == 1.0


# --------------------------------------------------------------------------------------------
# consensus rounds
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("g", GRAPHS, ids=IDS)
def test_rounds_preserve_average_exactly(g):
    W, _ = mixing_matrix(g)
    rng = np.random.default_rng(g.number_of_nodes())
    Gamma = rng.normal(size=(g.number_of_nodes(), 5)) * 10 + 3
    mean0 = Gamma.mean(axis=0)
    for J in (1, 2, 7, 40, 300):
        out = consensus_rounds(Gamma, W, J)
        assert out.shape == Gamma.shape
        np.testing.assert_allclose(out.mean(axis=0), mean0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("g", GRAPHS, ids=IDS)
def test_disagreement_decays_at_the_spectral_rate(g):
    W, _ = mixing_matrix(g)
    n = g.number_of_nodes()
    rho = spectral_rate(W)
    assert 0.0 <= rho < 1.0
    # rate = ||W - 11^T/n||_2 for a symmetric doubly stochastic W
    np.testing.assert_allclose(rho, np.linalg.norm(W - np.full((n, n), 1 / n), 2), atol=1e-12)
    rng = np.random.default_rng(n + 1)
    Gamma = rng.normal(size=(n, 4))
    d0 = disagreement(Gamma)
    ds = [d0]
    G = Gamma
    for J in range(1, 61):
        G = consensus_rounds(G, W, 1)
        ds.append(disagreement(G))
        # ||E_J||_inf <= ||E_J col||_2 <= rho^J ||E_0 col||_2 <= sqrt(n) rho^J ||E_0||_max
        assert ds[J] <= np.sqrt(n) * rho**J * d0 * (1 + 1e-9) + 1e-13
    ds = np.array(ds)
    # geometric fall: a window of 20 rounds shrinks at least like rho^20 (up to the constant)
    # and, since the random start excites the slow mode, not much faster than that
    for J in (10, 20, 30):
        if ds[J + 20] > 1e-11:
            ratio = ds[J + 20] / ds[J]
            assert ratio <= np.sqrt(n) * rho**20 * (1 + 1e-9)
            assert ratio >= rho**20 / (2 * np.sqrt(n))
    # many rounds: consensus on the average
    Gf = consensus_rounds(Gamma, W, 3000)
    assert disagreement(Gf) < 1e-10
    np.testing.assert_allclose(Gf, np.broadcast_to(Gamma.mean(axis=0), Gf.shape), atol=1e-10)


def test_rounds_equal_matrix_power_and_copy_semantics():
    g = GRAPHS[-1]
    W, _ = mixing_matrix(g)
    rng = np.random.default_rng(21)
    Gamma = rng.normal(size=(g.number_of_nodes(), 3))
    for J in (0, 1, 5, 17):
        np.testing.assert_allclose(consensus_rounds(Gamma, W, J),
                                   np.linalg.matrix_power(W, J) @ Gamma, atol=1e-13)
    out = consensus_rounds(Gamma, W, 0)
    assert out is not Gamma and np.array_equal(out, Gamma)
    out[0, 0] += 1.0
    assert Gamma[0, 0] != out[0, 0]
    # 1-D copies (one scalar per node)
    v = Gamma[:, 0].copy()
    np.testing.assert_allclose(consensus_rounds(v, W, 4), consensus_rounds(Gamma, W, 4)[:, 0],
                               atol=1e-15)
    with pytest.raises(ValueError):
        consensus_rounds(Gamma, W, -1)
    with pytest.raises(ValueError):
        consensus_rounds(Gamma, W, 1.5)
    with pytest.raises(ValueError):
        consensus_rounds(Gamma[:-1], W, 1)


def test_disagreement_values():
    assert disagreement(np.ones((4, 3)) * 2.5) == 0.0
    G = np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 4.0]])  # column means 2, 2
    assert disagreement(G) == pytest.approx(2.0)
    assert disagreement(np.array([1.0, 3.0])) == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------
# disconnected graphs never agree
# --------------------------------------------------------------------------------------------
def test_disconnected_graph_does_not_reach_consensus():
    g1 = nx.connected_watts_strogatz_graph(8, 4, 0.2, seed=1)
    g2 = nx.relabel_nodes(nx.cycle_graph(5), {i: 100 + i for i in range(5)})
    g = nx.union(g1, g2)
    W, nodes = mixing_matrix(g)
    assert spectral_rate(W) == pytest.approx(1.0, abs=1e-12)
    comp1 = np.array([v in g1 for v in nodes])
    rng = np.random.default_rng(22)
    Gamma = rng.normal(size=(len(nodes), 3))
    Gamma[comp1] += 5.0                      # the two components start far apart
    out = consensus_rounds(Gamma, W, 3000)
    # each component agrees on its own average ...
    np.testing.assert_allclose(out[comp1], np.broadcast_to(Gamma[comp1].mean(0), (8, 3)),
                               atol=1e-9)
    np.testing.assert_allclose(out[~comp1], np.broadcast_to(Gamma[~comp1].mean(0), (5, 3)),
                               atol=1e-9)
    # ... so the network-wide disagreement converges to a positive limit, not to zero
    limit = np.max(np.abs(np.vstack([Gamma[comp1].mean(0), Gamma[~comp1].mean(0)])
                          - Gamma.mean(0)))
    assert limit > 1.0
    assert disagreement(out) == pytest.approx(limit, rel=1e-9)
    assert min(disagreement(consensus_rounds(Gamma, W, J)) for J in (10, 100, 1000)) > 1.0
