"""Feasibility restoration of the max terms (`sca.restore_epigraphs`): the epigraph variables of
`models.EPIGRAPH_LEVELS` enter every row linearly, the restoration closes exactly the violation
those rows can close (no more), touches nothing else, and its message-passing form computes what
the one-process form computes.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from cefl_opt.generator import make_instance
from cefl_opt.models.problem import EPIGRAPH_LEVELS
from cefl_opt.solvers.dec_comm import LocalComm
from cefl_opt.solvers.decentralized import DistributedEvaluator
from cefl_opt.solvers.primal_dual import InnerSolver, resolve_constants
from cefl_opt.solvers.sca import _central_restore, build_structure

warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture(scope="module")
def small_st():
    return build_structure(make_instance("small", seed=7, rounds=2))


def _random_point(st, rng):
    """A point inside the bounds with the epigraph variables pushed low (rows violated)."""
    lo = np.where(np.isfinite(st.lo), st.lo, -1.0)
    hi = np.where(np.isfinite(st.hi), st.hi, lo + 2.0)
    u = st.project(lo + rng.uniform(size=st.n) * (hi - lo))
    epi = st.epi_level >= 0
    u[epi] = np.where(st.epi_dir[epi] > 0, 0.2, 1.5) * np.abs(st.u0[epi]) + 1e-3
    return np.clip(u, st.lo, st.hi)


def test_every_epigraph_name_is_found_and_linear(small_st):
    st = small_st
    names = {nm for group in EPIGRAPH_LEVELS for nm, _ in group}
    found = set()
    for pv in st.providers:
        for v, j in zip(pv.variables, pv.comp):
            if st.epi_level[j] >= 0:
                found.add(v.parent_component().local_name)
    assert found == names      # corollary bound: m_min; every max term of the block form
    # linear: each epigraph variable's Jacobian entries are the same at two unrelated points
    rng = np.random.default_rng(3)
    a1 = st.linearise(_random_point(st, rng)).a
    a2 = st.linearise(_random_point(st, rng)).a
    epi_nz = st.epi_level[st.jac_cols] >= 0
    assert epi_nz.any()
    assert np.allclose(a1[epi_nz], a2[epi_nz], rtol=1e-12, atol=1e-14)


def test_restoration_closes_exactly_what_the_epigraph_rows_need(small_st):
    st = small_st
    rng = np.random.default_rng(11)
    u = _random_point(st, rng)
    free = np.ones(st.n_rows, bool)
    free[st.force_rows] = False
    lin = st.linearise(u)
    epi_rows = np.zeros(st.n_rows, bool)
    np.logical_or.at(epi_rows, st.jac_rows,
                     (st.epi_level[st.jac_cols] >= 0) & (st.epi_dir[st.jac_cols] * lin.a < 0))
    assert np.any(epi_rows & (lin.c > 1e-6))          # the point violates such rows
    u2, moved = _central_restore(st)(u, lin, free)
    assert moved
    lin2 = st.linearise(u2)
    epi = st.epi_level >= 0
    # only epigraph variables moved, each in its own direction
    assert np.array_equal(u2[~epi], u[~epi])
    assert np.all(st.epi_dir[epi] * (u2[epi] - u[epi]) >= 0)
    # every row with a restoring epigraph variable holds (to round-off) ...
    assert np.all(lin2.c[epi_rows & free] <= 1e-10)
    # ... other rows are untouched where no epigraph variable enters them
    other = ~np.isin(np.arange(st.n_rows), st.jac_rows[epi[st.jac_cols]])
    assert np.allclose(lin2.c[other], lin.c[other], atol=1e-13)
    # and no variable moved further than needed: each moved one has an active row
    for j in np.flatnonzero(u2 != u):
        rows = st.jac_rows[(st.jac_cols == j) & (st.epi_dir[j] * lin2.a < 0)]
        assert np.min(np.abs(lin2.c[rows])) <= 1e-10, j


def test_message_passing_restoration_equals_one_process(small_st):
    st = small_st
    inst = st.inst
    rng = np.random.default_rng(5)
    u = _random_point(st, rng)
    free = np.ones(st.n_rows, bool)
    free[st.force_rows] = False
    lin = st.linearise(u)
    comm = LocalComm(inst.graph(), st.node_names)
    ops = DistributedEvaluator(st, InnerSolver(st, resolve_constants(None), mode="decentralized", comm=comm))
    comm.snapshot()
    u_dec, moved_dec = ops.restore(u, lin, free)
    msgs, _ = comm.snapshot()
    u_cen, moved_cen = _central_restore(st)(u, lin, free)
    assert moved_dec == moved_cen
    assert np.allclose(u_dec, u_cen, rtol=0, atol=1e-14)
    assert msgs.sum() > 0     # it talks (to neighbours: the plan's edges, tested elsewhere)


# ---------------------------------------------------------------- per-variable prox factor
def test_prox_factor_walks_a_linear_trade_off_geometrically():
    from cefl_opt.solvers.sca import _adapt_prox
    phi, d_prev = np.ones(4), np.zeros(4)
    steps = [np.array([1e-2, 1e-2, -1e-2, 0.0]),     # first step: no history, nothing changes
             np.array([1e-2, 2e-3, -1e-2, 0.0]),     # 0: same way; 1: slowing (converging)
             np.array([1e-2, 5e-4, 1e-2, 0.0])]      # 2: sign flip; 1 still slowing
    phi, d_prev = _adapt_prox(phi, steps[0], d_prev, False, 1e-3)
    assert np.array_equal(phi, np.ones(4))
    phi, d_prev = _adapt_prox(phi, steps[1], d_prev, False, 1e-3)
    assert np.array_equal(phi, [0.5, 1.0, 0.5, 1.0])
    phi, d_prev = _adapt_prox(phi, steps[2], d_prev, False, 1e-3)
    assert np.array_equal(phi, [0.25, 1.0, 1.0, 1.0])   # flip: x4, capped at 1
    for _ in range(30):                                   # floor
        phi, d_prev = _adapt_prox(phi, steps[2], d_prev, False, 1e-3)
    assert phi[0] == 1e-3
    phi2, d2 = _adapt_prox(phi, steps[2], d_prev, True, 1e-3)   # rejected: x4, history kept
    assert phi2[0] == 4e-3 and d2 is d_prev


def test_prox_factor_and_restoration_keep_the_tiny_optimum():
    """Both step rules change the path, not the point: tiny converges to the same objective
    with them on (default) and off, in fewer outer iterations with them on."""
    from cefl_opt.solvers.decentralized import solve_decentralized
    inst = make_instance("tiny", seed=0)
    plain = {"stall_tol": 0.0, "descent": False}   # to convergence, the SCA's own steps
    on_sol, on = solve_decentralized(inst, constants=plain)
    off_sol, off = solve_decentralized(inst, constants={"restore": False, "prox_min": 1.0,
                                                        **plain})
    assert on["stop_reason"] == off["stop_reason"] == "converged"
    assert on_sol.objective == pytest.approx(off_sol.objective, rel=1e-6)
    assert on["outer_iterations"] <= off["outer_iterations"]


def test_direct_library_calls_evaluate_as_pynumeros_own_bit_for_bit():
    """The node NLPs' evaluations are bound to the AMPL library's functions directly
    (`node_structure._direct_calls`); with the bindings removed (PyNumero's own calls) the
    linearisation, the values and the curvature at random points are the same bit for bit.
    Its own structure: the bindings are removed from it."""
    st = build_structure(make_instance("small", seed=7, rounds=2))
    nlps = [nlp for pv in st.providers for nlp in [pv.nlp] + [lv.nlp for lv in pv.levels]]
    names = ("eval_f", "eval_deriv_f", "eval_g", "eval_jac_g", "eval_hes_lag")
    assert all(n in vars(nlp._asl) for nlp in nlps for n in names)
    rng = np.random.default_rng(3)
    pts = [_random_point(st, rng) for _ in range(3)]

    def everything():
        out = []
        for u in pts:
            lin, val = st.linearise(u), st.values(u)
            h = st.curvature(u, np.abs(rng.normal(size=st.n_rows)))
            out.append(np.concatenate([[lin.f, val.f], lin.g, lin.c, lin.a, val.c, h]))
        return np.concatenate(out)
    state = rng.bit_generator.state
    direct = everything()
    for nlp in nlps:
        for n in names:
            delattr(nlp._asl, n)
        nlp.set_primals(nlp.get_primals())          # drop PyNumero's cached values
    for pv in st.providers:
        pv._at = None
    rng.bit_generator.state = state
    assert everything().tobytes() == direct.tobytes()


def test_the_primal_step_is_its_array_form_bit_for_bit():
    """`InnerSolver._primal_step` (the compiled point and clip, then the groups' projections)
    equals its numpy array form, H = q + GH_1 + 1/tau, v = (du/tau - g - GH_0) / H + u
    projected in the metric 1/H, bit for bit, at random points with signed zeros (two twin
    structures: the projections' warm starts follow the same calls)."""
    st, twin = (build_structure(make_instance("small", seed=7, rounds=2)) for _ in range(2))
    k = resolve_constants(None)
    comm = LocalComm(make_instance("small", seed=7, rounds=2).graph(), st.node_names)
    inner = InnerSolver(st, k, mode="decentralized", comm=comm)
    rng = np.random.default_rng(5)
    for trial in range(4):
        u = _random_point(st, rng)
        lin = st.linearise(u)
        q = rng.uniform(0.01, 2.0, st.n)
        tau_inv = rng.uniform(0.1, 5.0, st.n)
        GH = np.column_stack([rng.normal(size=st.n) * 10.0 ** rng.integers(-6, 6, st.n),
                              rng.uniform(0.0, 3.0, st.n)])
        du = rng.normal(size=st.n) * 0.1
        du[rng.random(st.n) < 0.1] = -0.0
        H = q + GH[:, 1]
        H += tau_inv
        v = du * tau_inv
        v -= lin.g
        v -= GH[:, 0]
        v /= H
        v += lin.u
        want = twin.project(v, 1.0 / H) - lin.u
        assert inner._primal_step(lin, q, tau_inv, GH, du).tobytes() == want.tobytes(), trial
