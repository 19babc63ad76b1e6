"""The message-passing layer of the decentralised solver (`solvers/dec_comm.py`)."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from cefl_opt.generator import make_instance
from cefl_opt.solvers.dec_comm import Comm, DisconnectedGraphError, LocalComm


@pytest.mark.parametrize("preset", ["tiny", "small", "paper"])
def test_vectorised_collectives_equal_the_message_rounds(preset):
    inst = make_instance(preset, seed=3)
    g = inst.graph()
    names = list(g.nodes)
    comm = LocalComm(g, names)
    rng = np.random.default_rng(1)
    V, Q = len(names), 40
    roots = rng.integers(0, V, Q)
    members = [rng.choice(V, size=int(rng.integers(1, V + 1)), replace=False) for _ in range(Q)]
    plan = comm.plan(roots, members)
    # every tree edge is a graph edge; every member and root holds an entry of its quantity
    assert all(g.has_edge(names[a], names[b]) for a, b in plan.edges)
    for q in range(Q):
        held = set(plan.entry_node[plan.entry_q == q].tolist())
        assert set(members[q].tolist()) | {int(roots[q])} <= held
    rv = rng.normal(size=Q)
    comm.snapshot()
    fast = comm.broadcast(plan, rv)
    m_fast, b_fast = comm.snapshot()
    slow = Comm._broadcast_rounds(comm, plan, rv)
    m_slow, b_slow = comm.snapshot()
    assert np.array_equal(fast, slow) and np.array_equal(fast, rv[plan.entry_q])
    assert np.array_equal(m_fast, m_slow) and np.array_equal(b_fast, b_slow)
    ev = rng.normal(size=len(plan.entry_q))
    red = comm.reduce(plan, ev)
    m_fast, b_fast = comm.snapshot()
    red2 = Comm._reduce_rounds(comm, plan, ev)
    m_slow, b_slow = comm.snapshot()
    truth = np.array([ev[plan.entry_q == q].sum() for q in range(Q)])
    assert np.allclose(red, truth, rtol=0, atol=1e-12) and np.allclose(red2, truth, atol=1e-12)
    assert np.array_equal(m_fast, m_slow) and np.array_equal(b_fast, b_slow)


def test_exchange_refuses_a_non_neighbour_and_counts():
    g = nx.path_graph(["a", "b", "c"])
    comm = LocalComm(g, ["a", "b", "c"])
    out = comm.exchange({0: {1: np.ones(3)}})
    assert np.array_equal(out[1][0], np.ones(3))
    with pytest.raises(ValueError, match="not a graph neighbour"):
        comm.exchange({0: {2: np.ones(1)}})
    msgs, nbytes = comm.snapshot()
    assert msgs.tolist() == [1, 0, 0] and nbytes.tolist() == [24, 0, 0]


def test_disconnected_graph_is_refused():
    g = nx.Graph([("a", "b"), ("c", "d")])
    with pytest.raises(DisconnectedGraphError, match="not connected"):
        LocalComm(g, ["a", "b", "c", "d"])


def test_relay_goes_through_the_path():
    g = nx.path_graph(["a", "b", "c", "d"])
    comm = LocalComm(g, list("abcd"))
    plan = comm.plan(np.array([0]), [np.array([3])])
    assert plan.n_rounds == 3 and sorted(plan.entry_node.tolist()) == [0, 1, 2, 3]
    assert not plan.entry_member[plan.entry_node == 1].any()
    comm.broadcast(plan, np.array([2.0]))
    msgs, nbytes = comm.snapshot()
    assert msgs.tolist() == [1, 1, 1, 0] and nbytes.tolist() == [8, 8, 8, 0]


def _random_plan(preset: str, seed: int, rng, Q: int):
    """A LocalComm on the preset's graph and a plan of Q quantities with random roots and
    member sets."""
    g = make_instance(preset, seed=seed).graph()
    comm = LocalComm(g, list(g.nodes))
    V = comm.n_nodes
    return comm, comm.plan(rng.integers(0, V, Q),
                           [rng.choice(V, size=int(rng.integers(1, V + 1)), replace=False)
                            for _ in range(Q)])


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("density", [0.015, 0.04])
def test_reduce_product_adds_as_the_message_rounds_bit_for_bit(density, shared):
    """Entries with no term, one term and many (stored zeros and -0.0 among them), values over
    16 orders of magnitude: LocalComm.reduce_product equals the per-entry sums reduced by the
    message rounds (the root adds in entry order) bit for bit, for every map: three maps of
    their own patterns (one pass each), or two of one pattern (one pass for both, the inner
    loop's case)."""
    import scipy.sparse as sp
    rng = np.random.default_rng(11)
    comm, plan = _random_plan("small", 6, rng, 40)
    E, K = len(plan.entry_q), 60
    maps = []
    for s in ((5, 5) if shared else (5, 6, 7)):
        S = sp.random(E, K, density=density, random_state=s, format="csr")
        S.data = rng.normal(size=S.nnz) * 10.0 ** rng.integers(-8, 8, S.nnz)
        S.data[rng.random(S.nnz) < 0.1] = 0.0
        S.data[rng.random(S.nnz) < 0.05] = -0.0
        maps.append(S)
    assert shared == np.array_equal(maps[0].indices, maps[1].indices)
    counts = np.diff(maps[0].indptr)
    assert (counts == 0).any() and (counts == 1).any() and (counts > 1).any()
    for trial in range(3):
        x = rng.normal(size=K) * 10.0 ** rng.integers(-8, 8, K)
        fast = comm.reduce_product(plan, maps, x)
        slow = Comm._reduce_rounds(comm, plan, np.column_stack([S @ x for S in maps]))
        assert np.array_equal(fast, slow), trial


@pytest.mark.parametrize("preset", ["small", "paper"])
def test_composed_collectives_equal_the_message_rounds(preset):
    """LocalComm's reduce_product / broadcast_product / broadcast_sum (maps composed with the
    plan once) give what the message rounds give on the per-entry values, and charge the same
    messages."""
    import scipy.sparse as sp
    rng = np.random.default_rng(2)
    Q, K = 30, 25
    comm, plan = _random_plan(preset, 4, rng, Q)
    E = len(plan.entry_q)
    maps = [sp.random(E, K, density=0.2, random_state=s, format="csr") for s in (1, 2)]
    x = rng.normal(size=K)
    comm.snapshot()
    fast = comm.reduce_product(plan, maps, x)
    m_fast, b_fast = comm.snapshot()
    ent = np.column_stack([S @ x for S in maps])
    slow = Comm._reduce_rounds(comm, plan, ent)
    m_slow, b_slow = comm.snapshot()
    truth = np.array([ent[plan.entry_q == q].sum(axis=0) for q in range(Q)])
    np.testing.assert_allclose(fast, truth, rtol=0, atol=1e-12)
    np.testing.assert_allclose(slow, truth, rtol=0, atol=1e-12)
    assert np.array_equal(fast, slow)                     # the same sums, bit for bit
    assert np.array_equal(m_fast, m_slow) and np.array_equal(b_fast, b_slow)
    # rows read entries; the entries are copies of their roots' values
    rmaps = [sp.random(K, E, density=0.2, random_state=s, format="csr") for s in (3, 4)]
    rv = rng.normal(size=Q)
    got = comm.broadcast_product(plan, rv, rmaps, (1, 2))
    m_fast, b_fast = comm.snapshot()
    e = Comm._broadcast_rounds(comm, plan, rv)
    m_slow, b_slow = comm.snapshot()
    np.testing.assert_allclose(got[0], rmaps[0] @ e, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[1], rmaps[1] @ (e * e), rtol=0, atol=1e-12)
    assert np.array_equal(m_fast, m_slow) and np.array_equal(b_fast, b_slow)
    total = comm.broadcast_sum(plan, rv, rmaps, (1, 2))
    m_sum, b_sum = comm.snapshot()
    np.testing.assert_allclose(total, rmaps[0] @ e + rmaps[1] @ (e * e), rtol=0, atol=1e-12)
    assert np.array_equal(m_sum, m_slow) and np.array_equal(b_sum, b_slow)
    # the generic (message-round) forms of the composed collectives agree too
    gen = Comm.reduce_product(comm, plan, maps, x)
    np.testing.assert_allclose(gen, truth, rtol=0, atol=1e-12)
    gen = Comm.broadcast_sum(comm, plan, rv, rmaps, (1, 2))
    np.testing.assert_allclose(gen, total, rtol=0, atol=1e-12)


@pytest.mark.parametrize("powers", [(1, 2), (2, 1, 3)])
def test_broadcast_sum_adds_as_the_stacked_product_bit_for_bit(powers):
    """LocalComm.broadcast_sum (one running sum per row through the maps in turn, compiled)
    equals ``hstack(maps composed with the plan) @ concatenate(powers of the root values)``
    bit for bit: stored zeros and -0.0, values over 16 orders of magnitude, empty rows, a
    power other than 1 and 2."""
    import scipy.sparse as sp
    from cefl_opt.solvers.dec_comm import _at_root
    rng = np.random.default_rng(19)
    Q, K = 35, 50
    comm, plan = _random_plan("small", 5, rng, Q)
    E = len(plan.entry_q)
    maps = []
    for s in range(len(powers)):
        S = sp.random(K, E, density=0.08, random_state=30 + s, format="csr")
        S = sp.vstack([sp.csr_matrix((3, E)), S[3:]], format="csr")    # rows without terms
        S.data = rng.normal(size=S.nnz) * 10.0 ** rng.integers(-8, 8, S.nnz)
        S.data[rng.random(S.nnz) < 0.1] = 0.0
        S.data[rng.random(S.nnz) < 0.05] = -0.0
        maps.append(S)
    assert (np.diff(sum(maps).indptr) == 0).any()
    M = sp.hstack([_at_root(plan, S) for S in maps], format="csr")
    for trial in range(3):
        rv = rng.normal(size=Q) * 10.0 ** rng.integers(-8, 8, Q)
        rv[rng.random(Q) < 0.1] = -0.0
        want = M @ np.concatenate([rv if p == 1 else rv ** p for p in powers])
        got = comm.broadcast_sum(plan, rv, maps, powers)
        assert got.tobytes() == want.tobytes(), trial


def test_broadcast_sums_and_global_max_equal_their_single_forms():
    """`broadcast_sums` == one `broadcast_sum` per vector (values and per-node charges, bit for
    bit); `global_max` == the largest entry, charged as one max-reduce plus one broadcast."""
    rng = np.random.default_rng(5)
    Q = 30
    comm, plan = _random_plan("paper", 3, rng, Q)
    import scipy.sparse as sp
    E = len(plan.entry_q)
    maps = [sp.random(12, E, density=0.2, random_state=1, format="csr"),
            sp.random(12, E, density=0.2, random_state=2, format="csr")]
    v1, v2 = rng.normal(size=Q), rng.normal(size=Q)
    comm.snapshot()
    both = comm.broadcast_sums(plan, [v1, v2], maps, (1, 2))
    m2, b2 = comm.snapshot()
    one = [comm.broadcast_sum(plan, v, maps, (1, 2)) for v in (v1, v2)]
    m1, b1 = comm.snapshot()
    assert all(np.array_equal(a, b) for a, b in zip(both, one))
    assert np.array_equal(m1, m2) and np.array_equal(b1, b2) and m1.sum() > 0
    gplan = comm.plan(np.array([0]), [np.arange(comm.n_nodes)])
    vals = rng.normal(size=len(gplan.entry_q))
    assert comm.global_max(gplan, vals) == vals.max()
    m, b = comm.snapshot()
    assert np.array_equal(m, gplan.up_msgs + gplan.down_msgs)
    assert np.array_equal(b, gplan.up_bytes + gplan.down_bytes)


def test_subset_collectives_equal_the_full_ones_and_charge_as_them():
    """`reduce_max_at` (values at some entries, repeats allowed) equals the max-reduce of the
    full entry array with -inf elsewhere, in LocalComm and in the base form, and charges one
    reduce; `broadcast_take` in two slots keeps both selections and reads as the full
    broadcast."""
    rng = np.random.default_rng(23)
    Q = 40
    comm, plan = _random_plan("paper", 4, rng, Q)
    E = len(plan.entry_q)
    for trial in range(3):
        at = rng.integers(0, E, E // 25)         # with repeats
        vals = rng.normal(size=len(at)) * 10.0 ** rng.integers(-5, 5, len(at))
        full = np.full(E, -np.inf)
        np.maximum.at(full, at, vals)
        comm.snapshot()
        want = comm.reduce(plan, full, op="max")
        m_full, b_full = comm.snapshot()
        got = comm.reduce_max_at(plan, at, vals)
        m, b = comm.snapshot()
        assert np.array_equal(got, want) and np.isneginf(got).any() and np.isfinite(got).any()
        assert np.array_equal(Comm.reduce_max_at(comm, plan, at, vals), want)
        assert np.array_equal(m, m_full) and np.array_equal(b, b_full) and m.sum() > 0
    a1, a2 = rng.integers(0, E, 50), rng.integers(0, E, 70)
    rv = rng.normal(size=Q)
    for _ in range(2):
        for at, slot in ((a1, "one"), (a2, "two")):
            assert np.array_equal(comm.broadcast_take(plan, rv, at, slot=slot),
                                  comm.broadcast(plan, rv)[at])
    assert plan._derived[("one",)][0] is a1 and plan._derived[("two",)][0] is a2


def test_cached_on_plan_keeps_one_value_per_slot_and_lets_the_old_one_go_first():
    """`cached_on_plan`: the same owner (by identity, a tuple element by element) gets the
    kept value without a new `make`; another owner's `make` runs after the old value is let
    go (never both held), and its value replaces it."""
    import gc
    import weakref
    from cefl_opt.solvers.dec_comm import build_plan, cached_on_plan
    adj = [np.array([1]), np.array([0, 2]), np.array([1])]
    plan = build_plan(adj, np.array([0, 2]), [np.array([0, 1, 2]), np.array([1, 2])])

    class Value:
        pass
    made = []

    def make():
        made.append(Value())
        return made[-1]
    a, b = object(), object()
    first = cached_on_plan(plan, ("k",), (a, b), make)
    assert cached_on_plan(plan, ("k",), (a, b), make) is first and len(made) == 1
    old = weakref.ref(first)
    del first
    made.clear()

    def make_checked():
        gc.collect()
        assert old() is None and ("k",) not in plan._derived   # the old value is gone
        return make()
    second = cached_on_plan(plan, ("k",), (b, a), make_checked)
    assert second is made[-1] and cached_on_plan(plan, ("k",), (b, a), make) is second


def _fifo_bfs_parents(adj, root):
    """Plain first-in first-out BFS, neighbours in list order (the truth)."""
    from collections import deque
    parent = [-2] * len(adj)
    parent[root] = -1
    dq = deque([root])
    while dq:
        a = dq.popleft()
        for b in adj[a]:
            if parent[b] == -2:
                parent[b] = a
                dq.append(int(b))
    return parent


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bfs_parents_equal_a_plain_fifo_bfs(seed):
    """`dec_comm._bfs_parents` (scipy's breadth-first order over the adjacency CSR) gives the
    parents of a plain FIFO BFS with sorted neighbour lists, tie for tie, from every root;
    -2 where a node cannot be reached (two components)."""
    from cefl_opt.solvers.dec_comm import _adjacency_csr, _bfs_parents
    g = nx.gnm_random_graph(60, 90, seed=seed)
    g = nx.disjoint_union(g, nx.path_graph(4))
    adj = [np.array(sorted(g.neighbors(v)), dtype=np.int64) for v in range(len(g))]
    G = _adjacency_csr(adj)
    for root in range(len(adj)):
        assert _bfs_parents(G, root).tolist() == _fifo_bfs_parents(adj, root), root
    assert (_bfs_parents(G, 0)[60:] == -2).all() and _bfs_parents(G, 61)[60] == 61
