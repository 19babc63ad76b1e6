"""The paper's distributed solver (§V): per-node providers, the accelerated inner method, the
message-passing accounting, convergence, and the three methods built on it.

References: Ipopt (cyipopt) with the binaries fixed, enumerated over every aggregator choice per
round (S^T choices), and the block model itself (Pyomo expressions evaluated directly).
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pyomo.environ as pyo
import pytest

from cefl_opt import system
from cefl_opt.generator import make_instance
from cefl_opt.solvers.dec_comm import Comm, LocalComm
from cefl_opt.solvers.decentralized import solve_decentralized
from cefl_opt.solvers.primal_dual import InnerSolver, resolve_constants
from cefl_opt.solvers.sca import build_structure

warnings.filterwarnings("ignore", category=UserWarning)

#: the aggregator moves and the second start off (`solvers/aggregator_moves.py`)
NO_SEARCH = {"agg_passes": 0, "candidates": 1, "refine_rounds": 0}


def enum_reference(inst) -> float:
    """Best Ipopt objective over all S^T aggregator choices (rule associations + repair, as
    ipopt-enum's candidates are solved)."""
    from cefl_opt.solvers.base import solve
    return solve(inst, "ipopt-enum", seed_decentralized=False).objective   # not seeded by it


@pytest.fixture(scope="module")
def tiny():
    return make_instance("tiny", seed=0)


@pytest.fixture(scope="module")
def small1():
    return make_instance("small", seed=1, rounds=2)


@pytest.fixture(scope="module")
def tiny_st(tiny):
    return build_structure(tiny)


def _set_model(st, u):
    """Put the shared variables' values on every copy of the block model."""
    x = st.x_of(u)
    for pv in st.providers:
        for v, val in zip(pv.variables, x[pv.comp]):
            v.set_value(float(val), skip_validation=True)


# ---------------------------------------------------------------------- per-node providers
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_node_providers_reproduce_the_block_model(preset):
    """Sum of the nodes' shares = J of the Pyomo model; each node's rows = the model's coupling
    rows; the gradient matches central finite differences of the model objective."""
    inst = make_instance(preset, seed=2, rounds=2)
    st = build_structure(inst)
    rng = np.random.default_rng(0)
    u = st.project(st.u0 + rng.normal(0, 0.05, st.n))
    lin = st.linearise(u)
    _set_model(st, u)
    m = st.model
    assert lin.f == pytest.approx(pyo.value(m.obj), rel=1e-12)
    assert np.isclose(lin.f_nodes.sum(), lin.f, rtol=1e-12)
    cons = {c.name: c for blk in (list(m.ue.values()) + list(m.bs.values()) + list(m.dc.values()))
            for c in blk.coupling.component_data_objects(pyo.Constraint, active=True)}
    assert len(cons) == st.n_rows
    for i, nm in enumerate(st.row_names):
        c = cons[nm]
        raw = (pyo.value(c.body) - pyo.value(c.upper)) / st.row_norm[i]
        assert lin.c[i] == pytest.approx(raw, rel=1e-10, abs=1e-12)
    for j in rng.choice(st.n, 12, replace=False):
        h = 1e-6
        up, dn = u.copy(), u.copy()
        up[j] += h
        dn[j] -= h
        _set_model(st, up)
        fu = pyo.value(m.obj)
        _set_model(st, dn)
        fd = pyo.value(m.obj)
        assert lin.g[j] == pytest.approx((fu - fd) / (2 * h), rel=1e-5, abs=1e-7)


def test_live_entries_are_the_rows_dependencies_with_the_indicators_fixed(small1):
    """`live_entries` after the rounding: every dead entry's row is unchanged (exactly) when its
    variable moves, at random points of the box (the Pyomo rows evaluated directly, not the
    derivatives the method used); fixed variables are dead; almost every live entry moves its
    row; and some movable entries are dead (an association fixed at 0 removes a rate)."""
    from cefl_opt.solvers.decentralized import _fix_indicators
    st = build_structure(small1)
    try:
        u = _fix_indicators(st, st.u0)
        live = st.live_entries(u, range(st.n_nodes), seed=0)
        movable = (st.hi > st.lo)[st.jac_cols]
        assert not live[~movable].any()
        dead = np.flatnonzero(~live & movable)
        assert len(dead) >= 10
        m = st.model
        copies = [[] for _ in range(st.n)]
        for pv in st.providers:
            for v, j in zip(pv.variables, pv.comp):
                copies[j].append(v)
        rng = np.random.default_rng(11)
        lo = np.where(np.isfinite(st.lo), st.lo, 0.0)
        hi = np.where(np.isfinite(st.hi), st.hi, lo + 2.0)

        def moves(e, up):
            c = m.find_component(st.row_names[st.jac_rows[e]])
            j = st.jac_cols[e]
            before = pyo.value(c.body)
            x_new = (up[j] + 0.37 * (hi[j] - lo[j]) * (1 if up[j] < 0.5 * (lo[j] + hi[j]) else -1)
                     ) * st.scale[j]
            old = [v.value for v in copies[j]]
            for v in copies[j]:
                v.set_value(float(x_new), skip_validation=True)
            after = pyo.value(c.body)
            for v, val in zip(copies[j], old):
                v.set_value(val, skip_validation=True)
            return after != before

        live_ix = np.flatnonzero(live)
        for _ in range(2):
            up = np.clip(lo + rng.uniform(0.05, 0.95, st.n) * (hi - lo), st.lo, st.hi)
            _set_model(st, up)
            assert not any(moves(e, up) for e in rng.choice(dead, min(300, len(dead)), False))
            sample = rng.choice(live_ix, 300, replace=False)
            assert np.mean([moves(e, up) for e in sample]) > 0.95
    finally:
        st.reset_bounds()


def _unlifted_structure(inst, bound, monkeypatch):
    """The same structure with every sum left inside its functions (no lifted sums)."""
    import cefl_opt.models.problem as problem
    from cefl_opt.solvers import node_structure
    with monkeypatch.context() as mp:
        mp.setattr(problem, "_lift_candidates", lambda m: [])
        mp.setattr(node_structure, "node_lifts", lambda blk: [])
        return build_structure(inst, bound=bound)


@pytest.mark.parametrize("preset,bound", [("small", "corollary"), ("small", "general"),
                                          ("reach", "corollary")])
def test_lifted_providers_equal_the_unlifted_ones(preset, bound, monkeypatch):
    """Providers that evaluate the data-volume and bound sums as internal variables (chain
    rule) give the share, gradient, rows, Jacobian and Hessian diagonal that the AMPL library
    computes on the full expressions, at random points and multipliers; and the nodes with
    lifted sums hold far fewer Hessian entries."""
    inst = (make_instance("paper", ues=24, bss=6, dcs=3, reach=2, seed=5, rounds=2)
            if preset == "reach" else make_instance(preset, seed=3, rounds=2))
    st = build_structure(inst, bound=bound)
    st0 = _unlifted_structure(inst, bound, monkeypatch)
    assert st.row_names == st0.row_names and st.n == st0.n
    assert any(pv.levels for pv in st.providers) and not any(pv.levels for pv in st0.providers)
    rng = np.random.default_rng(1)
    for _ in range(3):
        u = st.project(st.u0 + rng.normal(0, 0.05, st.n))
        a, b = st.linearise(u), st0.linearise(u)
        assert a.f == pytest.approx(b.f, rel=1e-12)
        assert np.allclose(a.g, b.g, rtol=1e-10, atol=1e-12 * np.abs(b.g).max())
        assert np.allclose(a.c, b.c, rtol=1e-10, atol=1e-12)
        dA = abs(st.A(a) - st0.A(b)).max()
        assert dA <= 1e-10 * abs(st0.A(b)).max()
        y = rng.uniform(0, 2, st.n_rows)
        h, h0 = st.curvature(u, y), st0.curvature(u, y)
        assert np.allclose(h, h0, rtol=1e-9, atol=1e-12 * np.abs(h0).max())
        # at a point not evaluated before (no reuse of the last evaluation), then linearised
        # there after the curvature (reuse)
        u2 = st.project(u + rng.normal(0, 0.02, st.n))
        h, h0 = st.curvature(u2, y), st0.curvature(u2, y)
        assert np.allclose(h, h0, rtol=1e-9, atol=1e-12 * np.abs(h0).max())
        a, b = st.linearise(u2), st0.linearise(u2)
        assert np.allclose(a.g, b.g, rtol=1e-10, atol=1e-12 * np.abs(b.g).max())
        assert np.allclose(a.c, b.c, rtol=1e-10, atol=1e-12)
    at = [d for d, pv in enumerate(st.providers) if pv.levels]   # the other nodes: the same NLPs
    lifted = sum(st.providers[d].nnz_hessian() for d in at)
    full = sum(st0.providers[d].nlp.nnz_hessian_lag() for d in at)
    assert lifted * (5 if preset == "reach" else 2) < full


def test_values_are_the_linearisations_J_and_rows_bit_for_bit():
    """`values` (J and C only) equals `linearise`'s J and C bit for bit, on global arrays and by
    messages, at random points and in any order of calls (a lifted provider reuses its last
    point's lifts only when its NLPs still sit there); and the premise of the exact trials'
    tightening with the current point's Jacobian data holds: the Jacobian entries at the
    epigraph variables are the same at every point."""
    from cefl_opt.solvers.decentralized import DistributedEvaluator
    inst = make_instance("paper", ues=24, bss=6, dcs=3, reach=2, seed=5, rounds=2)
    st = build_structure(inst)
    assert any(pv.levels for pv in st.providers)
    ev = DistributedEvaluator(st, InnerSolver(st, resolve_constants(None), mode="decentralized",
                                              comm=LocalComm(inst.graph(), st.node_names)))
    epi = st.epi_level[st.jac_cols] >= 0
    rng = np.random.default_rng(4)
    us = [st.project(st.u0 + rng.normal(0, 0.05, st.n)) for _ in range(3)]
    first = st.linearise(us[0])
    for u, w in zip(us, us[1:] + us[:1]):
        for form in (st, ev):
            v_first = form.values(u)          # a point the providers have not seen last
            lin = form.linearise(u)
            form.values(w)
            st.curvature(u, np.ones(st.n_rows))   # the lifts' reuse at u, after values at w
            v_again = form.values(u)
            for v in (v_first, v_again):
                assert v.g is None and v.a is None
                assert v.f == lin.f and np.array_equal(v.c, lin.c)
                assert np.array_equal(v.f_nodes, lin.f_nodes)
            assert np.array_equal(form.linearise(u).a, lin.a)
        assert epi.any() and np.array_equal(lin.a[epi], first.a[epi])
    assert not np.array_equal(lin.a[~epi], first.a[~epi])    # the others do move


def test_a_node_evaluates_again_only_when_its_copies_changed():
    """`values` and `linearise` at a point that differs from the last one in some nodes'
    copies evaluate those nodes only; the others answer from their last point (`values` from
    `linearise`'s too), and every answer equals a fresh evaluation bit for bit (also back at
    an earlier point, lifted providers included)."""
    from cefl_opt.solvers.decentralized import DistributedEvaluator
    inst = make_instance("paper", ues=24, bss=6, dcs=3, reach=2, seed=5, rounds=2)
    st = build_structure(inst)
    ev = DistributedEvaluator(st, InnerSolver(st, resolve_constants(None), mode="decentralized",
                                              comm=LocalComm(inst.graph(), st.node_names)))
    fresh = build_structure(inst)
    fresh_ev = DistributedEvaluator(fresh, InnerSolver(fresh, resolve_constants(None),
                                                       mode="decentralized",
                                                       comm=LocalComm(inst.graph(),
                                                                      fresh.node_names)))
    calls = []
    for d, pv in enumerate(st.providers):
        def counted(pv=pv, d=d, orig=type(pv)._share_and_rows):
            calls.append(d)
            return orig(pv)
        pv._share_and_rows = counted
    rng = np.random.default_rng(3)
    u0 = st.project(st.u0 + rng.normal(0, 0.05, st.n))
    u1 = u0.copy()
    v = int(np.flatnonzero(np.array([len(m) for m in st.members]) == 2)[0])
    u1[v] = 0.5 * (st.lo[v] + st.hi[v]) if u1[v] != 0.5 * (st.lo[v] + st.hi[v]) else st.lo[v]
    readers = {d for d, pv in enumerate(st.providers) if v in set(pv.comp.tolist())}
    assert len(readers) == 2
    for u, expect in ((u0, set(range(st.n_nodes))), (u0.copy(), set()), (u1, readers),
                      (u0, readers)):
        calls.clear()
        got = ev.values(u)
        assert set(calls) == expect
        for pv in fresh.providers:
            pv._values_at = None          # no memo: every node evaluates
        want = fresh_ev.values(u)
        assert got.f == want.f and np.array_equal(got.c, want.c)
        assert np.array_equal(got.f_nodes, want.f_nodes)
    ev_calls = []
    for d, pv in enumerate(st.providers):
        def counted_ev(x, pv=pv, d=d, orig=type(pv)._evaluate):
            ev_calls.append(d)
            return orig(pv, x)
        pv._evaluate = counted_ev
    for u, expect in ((u1, set(range(st.n_nodes))), (u0, readers), (u0.copy(), set())):
        ev_calls.clear()
        got = ev.linearise(u)
        assert set(ev_calls) == expect
        for pv in fresh.providers:
            pv._values_at = pv._evaluate_at = None
        want = fresh_ev.linearise(u)
        assert got.f == want.f and all(np.array_equal(getattr(got, k), getattr(want, k))
                                       for k in ("g", "c", "a", "f_nodes"))
        calls.clear()
        assert ev.values(u).f == want.f and calls == []     # evaluate's answer serves values
    assert any(pv.levels for pv in st.providers)


def _asl_bytes_in_use() -> int:
    """Bytes the C allocator has handed out (glibc's mallinfo2: heap and mmap)."""
    import ctypes

    class _Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc's mallinfo2 (2.33 or later) is needed to count the C heap")
    libc.mallinfo2.restype = _Info
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def test_inline_expressions_give_the_defined_variables_numbers_in_less_memory(monkeypatch):
    """Node NLPs written with the named expressions inline give, bit for bit, the shares,
    gradients, rows, Jacobians and Hessian diagonals of NLPs with the AMPL library's defined
    variables (the NL writer's default, as `PyomoNLP` writes it), at random points and
    multipliers; and the library holds less than 0.7x the memory for a UE's NLP."""
    from cefl_opt.solvers import node_structure
    inst = make_instance("paper", ues=24, bss=6, dcs=3, reach=2, seed=7, rounds=2)
    st = build_structure(inst)
    with monkeypatch.context() as mp:
        mp.setattr(node_structure, "_NL_OPTIONS", {})
        ref = build_structure(inst)
    rng = np.random.default_rng(4)
    for _ in range(3):
        u = st.project(st.u0 + rng.normal(0, 0.05, st.n))
        a, b = st.linearise(u), ref.linearise(u)
        assert a.f == b.f and np.array_equal(a.g, b.g) and np.array_equal(a.c, b.c)
        assert (st.A(a) != ref.A(b)).nnz == 0
        y = rng.uniform(0, 2, st.n_rows)
        assert np.array_equal(st.curvature(u, y), ref.curvature(u, y))
    ue = st.providers[st.node_names.index("ue0")]
    model = st.model
    blk = model.ue[0]
    rows = list(blk.coupling.component_data_objects(pyo.Constraint, active=True))
    share = node_structure._node_share(model, "ue0", blk)
    used = {}
    for opts in ({}, node_structure._NL_OPTIONS):
        with monkeypatch.context() as mp:
            mp.setattr(node_structure, "_NL_OPTIONS", opts)
            before = _asl_bytes_in_use()
            keep = node_structure.NodeProvider("ue0", share, rows, {id(v): j for v, j in zip(
                ue.variables, ue.comp)})
            used[bool(opts)] = _asl_bytes_in_use() - before
            assert keep.nlp.n_primals() == ue.nlp.n_primals()
    assert used[True] < 0.7 * used[False]


def test_lifted_hessians_grow_linearly_with_the_ues():
    """The largest per-node Hessian (dc0: the bound's sums over every DPU) grows like the
    number of UEs, not its square (it was (links x T)^2 before the lifts)."""
    sizes = {}
    for ues in (20, 40):
        inst = make_instance("paper", ues=ues, bss=6, dcs=3, reach=2, seed=5, rounds=2)
        st = build_structure(inst)
        sizes[ues] = max(pv.nnz_hessian() for pv in st.providers)
    assert sizes[40] <= 2.3 * sizes[20]


def test_structure_groups_and_primaries(tiny_st, tiny):
    st = tiny_st
    # every shared variable has a primary node that holds it; projections keep w^0
    assert all(int(st.primary[k]) in set(st.members[k].tolist()) for k in range(st.n))
    assert np.allclose(st.project(st.u0), st.u0)
    # R_bs[b, s] is stepped by DC s (its ingress knapsack spans the BSs' rates)
    dc_index = {nm: i for i, nm in enumerate(st.node_names)}
    for t in range(tiny.T):
        for s in range(tiny.S):
            assert st.primary[st.idx["R_bs"][t][0, s]] == dc_index[f"dc{s}"]
    v = st.project(st.u0 + np.random.default_rng(1).normal(0, 2, st.n))
    x = st.x_of(v)
    for t in range(tiny.T):
        assert x[st.idx["Is"][t]].sum() == pytest.approx(1.0)
        assert np.all(x[st.idx["R_bs"][t]].sum(axis=0) <= tiny.Rmax_s / 1e9 + 1e-9)


# ---------------------------------------------------------------------- sparse == dense
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_sparse_per_node_duals_compute_what_the_global_form_computes(preset):
    """The per-node form (each row's multiplier at its host, primal steps at the primaries,
    everything else by messages) gives the iterates of the global-array form."""
    inst = make_instance(preset, seed=4, rounds=2)
    st = build_structure(inst)
    k = resolve_constants({"inner_iters": 150})
    comm = LocalComm(inst.graph(), st.node_names)
    dec = InnerSolver(st, k, mode="decentralized", comm=comm)
    cen = InnerSolver(st, k, mode="centralized")
    lin = st.linearise(st.u0)
    free = np.ones(st.n_rows, bool)
    free[st.force_rows] = False
    L = np.where(free, 0.1, 0.0)
    q = np.full(st.n, 0.1)
    for rep in range(2):   # second solve: warm-started duals
        ud, sd = dec.solve(lin, q, L, free, np.where(free, 0.0, 0.01), 0.0)
        uc, sc = cen.solve(lin, q, L, free, np.where(free, 0.0, 0.01), 0.0)
        assert np.allclose(ud, uc, rtol=0, atol=1e-10)
        assert np.allclose(dec.lam, cen.lam, rtol=0, atol=1e-9 * (1 + np.abs(cen.lam).max()))
        assert sd["inner_iters"] == sc["inner_iters"]
    # a node stores multipliers only for the rows it hosts, shared variables only for itself
    held = np.bincount(dec.plan.entry_node, minlength=st.n_nodes)
    assert held.sum() < st.n_nodes * st.n
    assert np.array_equal(np.bincount(st.row_host, minlength=st.n_nodes), np.diff(st.row_ptr))


def test_solver_messages_go_to_graph_neighbours_and_rounds_match(tiny, tiny_st):
    g = tiny.graph()
    comm = LocalComm(g, tiny_st.node_names)
    inner = InnerSolver(tiny_st, resolve_constants(None), mode="decentralized", comm=comm)
    names = tiny_st.node_names
    for plan in (inner.plan, inner.gplan):
        assert plan.edges and all(g.has_edge(names[a], names[b]) for a, b in plan.edges)
    # the message rounds through `exchange` (which refuses non-neighbours) give the same sums
    rng = np.random.default_rng(0)
    ev = rng.normal(size=len(inner.plan.entry_q))
    assert np.allclose(comm.reduce(inner.plan, ev), Comm._reduce_rounds(comm, inner.plan, ev),
                       atol=1e-12)
    v = rng.normal(size=tiny_st.n)
    assert np.array_equal(comm.broadcast(inner.plan, v),
                          Comm._broadcast_rounds(comm, inner.plan, v))


# ---------------------------------------------------------------------- whole method
@pytest.fixture(scope="module")
def tiny_run(tiny, tmp_path_factory):
    trace = tmp_path_factory.mktemp("dec") / "trace.csv"
    sol, info = solve_decentralized(tiny, trace_path=trace)
    return sol, info, trace


def test_tiny_converges_to_the_enumerated_optimum(tiny, tiny_run):
    sol, info, trace = tiny_run
    assert info["stop_reason"] == "converged"
    assert info["stop_reason_relaxed"] in ("converged", "binary")
    assert info["violation_relaxed"] <= 1e-6 and info["forcing_relaxed"] <= 1e-9
    ev = system.evaluate(tiny, sol)
    assert ev.feasible
    ref = enum_reference(tiny)
    assert ev.objective <= ref * 1.01
    assert info["central_steps"] == []
    lines = trace.read_text().splitlines()
    assert lines[0].startswith("outer,phase") and len(lines) == info["outer_iterations"] + 1


def test_accounting_in_info(tiny_run, tiny):
    _sol, info, _ = tiny_run
    msg = info["messages"]
    per = msg["per_node_per_outer"]
    assert per["count"]["max"] >= per["count"]["mean"] > 0
    assert per["bytes"]["max"] >= per["bytes"]["mean"] > 0
    assert msg["total_count"] > 0 and msg["neighbours_only"]
    assert info["inner_iterations"] >= info["outer_iterations"] > 0
    assert info["relay_tree_edges"] <= info["graph_edges"]


def test_small_converges_within_1pct(small1):
    sol, info = solve_decentralized(small1)
    assert info["stop_reason"] == "converged"
    assert info["violation_relaxed"] <= 1e-6
    ev = system.evaluate(small1, sol)
    assert ev.feasible
    assert ev.objective <= enum_reference(small1) * 1.01


def test_runs_with_nlp_solvers_unimportable(tmp_path):
    """No Ipopt / SCIP on the decentralised path: cyipopt and pyscipopt blocked."""
    code = (
        "import sys, json\n"
        "sys.modules['cyipopt'] = None\n"
        "sys.modules['pyscipopt'] = None\n"
        "from cefl_opt.generator import make_instance\n"
        "from cefl_opt.solvers.decentralized import solve_decentralized\n"
        "sol, info = solve_decentralized(make_instance('tiny', seed=5))\n"
        "bad = [m for m in sys.modules if m.startswith(('cyipopt', 'pyscipopt')) "
        "and sys.modules[m] is not None]\n"
        "print(json.dumps({'reason': info['stop_reason'], 'feasible': info['feasible'], "
        "'central': info['central_steps'], 'bad': bad, "
        "'searched': info['aggregator_trials'] > 0}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res == {"reason": "converged", "feasible": True, "central": [], "bad": [],
                   "searched": True}


def test_central_steps_per_method(tiny):
    _s, info_c = solve_decentralized(tiny, method="centralized-pd")
    assert info_c["central_steps"] == ["global_primal_dual"] and "messages" not in info_c
    _s, info_p = solve_decentralized(tiny, method="decentralized-polish")
    assert info_p["central_steps"] == ["association_repair", "ipopt_polish"]
    assert info_p["feasible"]


def test_centralized_pd_matches_decentralized(tiny, tiny_run):
    sol_c, info_c = solve_decentralized(tiny, method="centralized-pd")
    sol_d, info_d, _ = tiny_run
    assert info_c["outer_iterations"] == info_d["outer_iterations"]
    assert sol_c.objective == pytest.approx(sol_d.objective, rel=1e-9)


def test_consensus_rounds_option(tiny):
    st = build_structure(tiny)
    comm = LocalComm(tiny.graph(), st.node_names)
    depth = InnerSolver(st, resolve_constants(None), mode="decentralized", comm=comm).plan.n_rounds
    assert depth >= 2
    with pytest.raises(ValueError, match="below the relay depth"):
        solve_decentralized(tiny, consensus_rounds=1, structure=st)
    with pytest.raises(ValueError, match="consensus_rounds"):
        solve_decentralized(tiny, consensus_rounds=-1, structure=st)


def test_disconnected_graph_is_a_clear_error(tiny, tmp_path):
    from cefl_opt.solvers.dec_comm import DisconnectedGraphError
    bad = make_instance("tiny", seed=0)
    bad.graph_edges = [e for e in bad.graph_edges if "dc1" not in e]
    with pytest.raises(DisconnectedGraphError, match="not connected"):
        solve_decentralized(bad)
    path = tmp_path / "net.json"
    try:
        bad.save(path)
    except Exception:  # pragma: no cover - the instance format refuses it itself
        return
    out = subprocess.run([sys.executable, "-m", "cefl_opt.cli", "solve", str(path), "--method",
                          "decentralized", "--out", str(tmp_path / "sol.json")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "connected" in out.stderr
    assert not (tmp_path / "sol.json").exists()


def test_bad_options_raise(tiny):
    with pytest.raises(ValueError, match="method"):
        solve_decentralized(tiny, method="nope")
    with pytest.raises(ValueError, match="init"):
        solve_decentralized(tiny, init="nope")
    with pytest.raises(ValueError, match="unknown constant"):
        solve_decentralized(tiny, constants={"kappa": 1.0})
    with pytest.raises(ValueError, match="constants"):
        resolve_constants("nope")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [21, 22, 23])
def test_small_many_seeds_within_1pct(seed):
    inst = make_instance("small", seed=seed, rounds=2)
    sol, info = solve_decentralized(inst)   # converged, or the finishing phase's stall stop
    assert info["stop_reason"] in ("converged", "stalled") and info["feasible"]
    assert sol.objective <= enum_reference(inst) * 1.01


@pytest.fixture(scope="module")
def converged_tiny(tiny):
    """`converged_tiny(patience)`: `tiny` solved to convergence (stall_tol 0) with that
    binary_patience, each run once per process (its tests share one xdist worker: conftest's
    SHARED_FIXTURES)."""
    cache: dict = {}

    def get(patience: int):
        if patience not in cache:
            cache[patience] = solve_decentralized(tiny, constants={"binary_patience": patience,
                                                                   "stall_tol": 0.0})
        return cache[patience]
    return get


@pytest.mark.parametrize("mode", ["constant", "tau_eff"])
def test_converges_with_both_vartheta_modes(mode, tiny, converged_tiny):
    """The ML term's vartheta as a constant or as FedNova's tau_eff (a function of gamma and
    D): the SCA converges and the solution is feasible either way. (`tiny`'s own mode is the
    constant one: its run is the binary-patience test's run with patience 0.)"""
    if mode == "constant":
        assert tiny.vartheta_mode == "constant"
        inst, (sol, info) = tiny, converged_tiny(0)
    else:
        inst = tiny.copy(vartheta_mode=mode)
        sol, info = solve_decentralized(inst, constants={"stall_tol": 0.0})   # to convergence
    assert info["stop_reason"] == "converged"
    assert info["violation_relaxed"] <= 1e-6
    assert system.evaluate(inst, sol).feasible


def test_finishing_phase_descends_and_stops_when_J_stalls(tmp_path):
    """Finishing phase: J (the trace's obj_model, the model objective at the point) never rises
    by more than 1e-8 (relative) from one accepted point to the next (descent: such a step is
    rejected and u kept; on this instance J rises by more with descent off). The stall stop:
    with stall_window W and a tolerance every step meets, the phase stops ("stalled", Results'
    termination "stalled") after exactly W outer iterations (accepted or rejected); with
    stall_tol 0 it never stops on a stall. The search after it is off (one finishing phase in
    the trace)."""
    from cefl_opt.solvers.base import TerminationCondition, solve
    from cefl_opt.solvers.options import DecentralizedOptions

    def finishing_J(inst, **consts):
        sol, info = solve_decentralized(inst, constants={"stall_tol": 0.0, **NO_SEARCH,
                                                         **consts})
        assert info["stop_reason_finishing"] != "stalled"
        assert system.evaluate(inst, sol).feasible
        fin = [r for r in info["trace"] if r["phase"] == "fixed"]
        J = np.array([r["obj_model"] for r in fin])
        return np.diff(J) / np.maximum(1.0, np.abs(J[:-1]))

    inst = make_instance("small", seed=5, rounds=3)   # J rises here without descent
    assert np.all(finishing_J(inst) <= 1e-8)
    assert np.any(finishing_J(inst, descent=False) > 1e-8)
    import pandas as pd
    paper, W, trace = make_instance("paper", seed=0, rounds=2), 3, tmp_path / "trace.csv"
    res = solve(paper, "decentralized", DecentralizedOptions(stall_tol=1.0, stall_window=W,
                                                             trace_path=str(trace), **NO_SEARCH))
    assert res.info["stop_reason"] == "stalled"
    assert res.termination_condition == TerminationCondition.stalled
    assert (pd.read_csv(trace)["phase"] == "fixed").sum() == W
    assert system.evaluate(paper, res.solution).feasible
    assert res.objective == pytest.approx(system.evaluate(paper, res.solution).objective,
                                          rel=1e-9)


def test_behind_stops_a_trial_only_above_its_target_and_slower_than_the_cutoff():
    """`_OuterIteration.behind`, on its own: J (f_hist) still above the target by more than
    trial_cutoff times its fall over the last BEHIND_WINDOW (2) outer iterations; at exactly
    that many times, not (strict); never at or below the target, in the relaxed phase, without
    a target, with trial_cutoff 0 or before the window has filled."""
    from types import SimpleNamespace
    from cefl_opt.solvers.sca import BEHIND_WINDOW, _OuterIteration

    def behind(f_hist, target=0.0, cutoff=5.0, phase="fixed"):
        it = SimpleNamespace(phase=phase, target=target, k=SimpleNamespace(trial_cutoff=cutoff))
        return _OuterIteration.behind(it, SimpleNamespace(f_hist=f_hist))
    assert BEHIND_WINDOW == 2
    assert not behind([1.5, 1.5, 1.25])                   # gap 1.25 = 5 x fall 0.25: not yet
    assert behind([1.5, 1.5, 1.25], target=-0.0625)       # gap 1.3125 > 1.25
    assert behind([9.0, 1.5, 1.5, 1.25], target=-0.0625)  # the window is the last two only
    assert not behind([1.5, 1.5, 1.25], target=-0.0625, cutoff=6.0)
    assert behind([1.0, 1.0, 1.0], target=0.5)            # no fall at all
    assert not behind([1.0, 1.0, 1.0], target=1.0)        # at the target: not behind
    assert not behind([1.0, 1.0, 0.9], target=1.0)        # below it: the trial is ahead
    assert not behind([1.0, 1.0], target=0.5)             # the window has not filled
    assert not behind([1.0, 1.0, 1.0], target=None)
    assert not behind([1.0, 1.0, 1.0], target=0.5, cutoff=0.0)
    assert not behind([1.0, 1.0, 1.0], target=0.5, phase="relaxed")


def test_a_fixed_phase_behind_its_target_stops_and_one_ahead_runs_as_without(tiny):
    """run_sca's target on a real finishing phase (tiny, indicators fixed at the rounding of
    w^0, stall stop off): a target above every J it passes leaves the run bit for bit as
    without one; an unreachable target stops it "behind" after BEHIND_WINDOW outer
    iterations, on the same path; trial_cutoff 0 turns the stop off."""
    from cefl_opt.solvers.decentralized import _fix_indicators
    from cefl_opt.solvers.sca import BEHIND_WINDOW, run_sca
    st = build_structure(tiny)                  # its own: the fixed bounds stay in this test
    u_fixed = _fix_indicators(st, st.u0)
    k = resolve_constants({"stall_tol": 0.0})

    def phase(target, **consts):
        kk = resolve_constants({"stall_tol": 0.0, **consts})
        return run_sca(st, InnerSolver(st, kk, mode="centralized"), kk, u0=u_fixed,
                       phase="fixed", target=target)
    u0, rec0, why0 = phase(None)
    f0 = [r.f for r in rec0]
    assert why0 != "behind" and len(rec0) > BEHIND_WINDOW and f0[0] > f0[-1]
    u1, rec1, why1 = phase(max(f0) + 1.0)
    assert why1 == why0 and [r.f for r in rec1] == f0 and np.array_equal(u1, u0)
    u2, rec2, why2 = phase(min(f0) - 1.0)
    assert why2 == "behind" and len(rec2) == BEHIND_WINDOW
    assert [r.f for r in rec2] == f0[:BEHIND_WINDOW]
    u3, rec3, why3 = phase(min(f0) - 1.0, trial_cutoff=0.0)
    assert why3 == why0 and [r.f for r in rec3] == f0 and np.array_equal(u3, u0)
    assert k.trial_cutoff > 0                   # the default has the stop on


def test_binary_patience_hands_over_once_the_binaries_settle(tiny, converged_tiny):
    """binary_patience = P: the relaxed phase stops ("binary") after P accepted iterations in a
    row with the forcing penalty on (rho > 0), every indicator binary and the rows held, and not
    before; 0: only on convergence. Either way the finishing phase converges to a feasible
    binary point."""
    for patience in (0, 2):
        sol, info = converged_tiny(patience)
        relaxed = [r for r in info["trace"] if r["phase"] == "relaxed"]
        assert info["stop_reason"] == "converged" and system.evaluate(tiny, sol).feasible
        if patience == 0:
            assert info["stop_reason_relaxed"] == "converged"
            continue
        assert info["stop_reason_relaxed"] == "binary"
        accepted = [r for r in relaxed if not r["rejected"]]   # rejected steps leave u as is
        tail = accepted[-patience:]
        assert all(r["rho"] > 0 and r["forcing_violation"] <= 1e-9 and r["max_violation"] <= 1e-6
                   for r in tail)
        before = accepted[-patience - 1]
        assert before["rho"] == 0 or before["forcing_violation"] > 1e-9 \
            or before["max_violation"] > 1e-6


def test_outer_records_hand_the_callback_the_surrogate_solution_and_keep_scalars_only(tiny,
                                                                                   tiny_st):
    """A run keeps one record per outer iteration: the callback sees the surrogate's solution
    (the trace reads the aggregators off it) and J at w^l; the records returned hold no
    vector (with a vector each, memory grew by megabytes per outer iteration at 1,000 UEs)."""
    from cefl_opt.solvers.sca import run_sca
    k = resolve_constants({"max_outer": 6})
    inner = InnerSolver(tiny_st, k, mode="centralized")
    seen = []
    u, records, _ = run_sca(tiny_st, inner, k, u0=tiny_st.u0, max_outer=6,
                            callback=lambda r: seen.append((r.u_hat.copy(), r.f)))
    assert len(records) == len(seen) >= 2
    assert seen[0][1] == tiny_st.linearise(tiny_st.u0).f        # J at the start
    assert all(s[0].shape == (tiny_st.n,) for s in seen)
    assert all(r.u_hat is None for r in records)
    assert all(isinstance(getattr(r, f.name), (int, float, str, bool, dict))
               for r in records for f in dataclasses.fields(r) if f.name != "u_hat")


def test_a_process_holding_some_nodes_builds_the_maps_of_its_own_rows_only(tiny, tiny_st):
    """One MPI rank's inner solver keeps the Jacobian entries of the rows its nodes host
    (the others' values are other processes'), also under a live mask; a process holding
    every node keeps them all."""
    half = np.arange(tiny_st.n_nodes // 2)

    class HalfComm(LocalComm):
        def local_nodes(self):
            return half

    k = resolve_constants(None)
    own = np.isin(tiny_st.row_host[tiny_st.jac_rows], half)
    assert own.any() and not own.all()
    inner = InnerSolver(tiny_st, k, mode="decentralized",
                        comm=HalfComm(tiny.graph(), tiny_st.node_names))
    assert np.array_equal(inner.live, own)
    mask = np.arange(len(own)) % 2 == 0
    inner.set_active(mask)
    assert np.array_equal(inner.live, own & mask)
    full = InnerSolver(tiny_st, k, mode="decentralized",
                       comm=LocalComm(tiny.graph(), tiny_st.node_names))
    assert full.live is None
