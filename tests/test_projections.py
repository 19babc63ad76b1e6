"""Row-wise projections (cefl_opt.solvers.projections) against independent truth.

Truth used: (a) a reference QP solve with scipy SLSQP at tight tolerance on small seeded
instances, (b) exact active-set enumeration on tiny instances, (c) KKT optimality conditions on
large batches, plus idempotence, invariances and the infeasibility errors.
"""
from __future__ import annotations

import itertools
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize

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

from cefl_opt.solvers.projections import (  # noqa: E402
    project_box,
    project_capped_simplex,
    project_knapsack,
    project_weighted,
    project_simplex,
)

INF = np.inf


# --------------------------------------------------------------------------------------------
# independent references
# --------------------------------------------------------------------------------------------
def qp_reference(x, lo, hi, total, equality):
    """min 0.5||y - x||^2 s.t. lo <= y <= hi, sum y (= or <=) total, by SLSQP (tight ftol).

    Started from a few feasible points; keeps the best converged, feasible result.
    """
    x = np.asarray(x, float)
    n = x.size
    lo = np.broadcast_to(np.asarray(lo, float), x.shape)
    hi = np.broadcast_to(np.asarray(hi, float), x.shape)
    bounds = [(None if np.isinf(a) else a, None if np.isinf(b) else b) for a, b in zip(lo, hi)]
    if equality:
        con = {"type": "eq", "fun": lambda y: np.sum(y) - total, "jac": lambda y: np.ones(n)}
    else:
        con = {"type": "ineq", "fun": lambda y: total - np.sum(y), "jac": lambda y: -np.ones(n)}
    big = 10.0 + abs(total) + np.abs(x).max()
    lo_f = np.where(np.isfinite(lo), lo, -big)
    hi_f = np.where(np.isfinite(hi), hi, big)
    # a feasible start: lo_f + w (hi_f - lo_f) with sum = total (or the sum of lo_f)
    span = hi_f.sum() - lo_f.sum()
    w = 0.0 if span == 0 else np.clip((total - lo_f.sum()) / span, 0.0, 1.0)
    starts = [lo_f + w * (hi_f - lo_f), np.clip(x, lo_f, hi_f)]
    best = None
    for start in starts:
        res = minimize(lambda y: 0.5 * np.sum((y - x) ** 2), start, jac=lambda y: y - x,
                       bounds=bounds, constraints=[con], method="SLSQP",
                       options={"ftol": 1e-12, "maxiter": 1000})
        y = res.x
        s = y.sum()
        feasible = (np.all(y >= lo - 1e-9) and np.all(y <= hi + 1e-9)
                    and (abs(s - total) < 1e-9 if equality else s <= total + 1e-9))
        if (res.success or res.get("status") == 8) and feasible and (best is None or res.fun < best.fun):
            best = res
    assert best is not None, "reference SLSQP failed"
    return best.x


def enumerate_reference(x, lo, hi, total, equality):
    """Exact projection for tiny n by brute force.

    Every candidate below is a feasible point, and the optimum is among them (its pattern of
    lower / upper / free coordinates, with the sum constraint tight or -- inequality only --
    slack, where it is the box clip); so the nearest feasible candidate is the projection.
    """
    n = x.size
    cands = [np.clip(x, lo, hi)] if not equality else []
    for pattern in itertools.product((0, 1, 2), repeat=n):  # 0 at lo, 1 at hi, 2 free
        p = np.array(pattern)
        if np.any((p == 0) & np.isinf(lo)) or np.any((p == 1) & np.isinf(hi)):
            continue
        free = p == 2
        y = np.where(p == 0, lo, np.where(p == 1, hi, 0.0))
        if free.any():
            lam = (x[free].sum() + y[~free].sum() - total) / free.sum()
            y = np.where(free, x - lam, y)
        cands.append(y)
    best, best_d = None, INF
    for yc in cands:
        if np.any(yc < lo - 1e-12) or np.any(yc > hi + 1e-12):
            continue
        s = yc.sum()
        if (equality and abs(s - total) > 1e-9) or (not equality and s > total + 1e-9):
            continue
        d = np.sum((yc - x) ** 2)
        if d < best_d:
            best, best_d = yc, d
    return best


def kkt_violation(X, Y, lo, hi, total, equality):
    """Per-row violation of feasibility + KKT conditions, relative to 1 + max|x| + |total|."""
    X = np.atleast_2d(X)
    Y = np.atleast_2d(Y)
    L = np.broadcast_to(np.asarray(lo, float), X.shape)
    H = np.broadcast_to(np.asarray(hi, float), X.shape)
    t = np.broadcast_to(np.asarray(total, float), (X.shape[0],))
    scale = 1.0 + np.abs(X).max(axis=1) + np.abs(t)
    atol = 1e-9 * scale[:, None]
    viol = np.max(np.maximum(L - Y, 0.0), axis=1)
    viol = np.maximum(viol, np.max(np.maximum(Y - H, 0.0), axis=1))
    s = Y.sum(axis=1)
    viol = np.maximum(viol, np.abs(s - t) if equality else np.maximum(s - t, 0.0))
    # stationarity: y = clip(x - lam, lo, hi) <=> max_{y<hi}(x-y) <= lam <= min_{y>lo}(x-y)
    G = X - Y
    not_hi = Y < H - atol
    not_lo = Y > L + atol
    lam_min = np.max(np.where(not_hi, G, -INF), axis=1)
    lam_max = np.min(np.where(not_lo, G, INF), axis=1)
    gap = np.maximum(lam_min - lam_max, 0.0)
    if not equality:  # lam >= 0, and lam = 0 when the sum constraint is slack
        gap = np.maximum(gap, np.maximum(-lam_max, 0.0))
        slack = s < t - 1e-9 * scale
        gap = np.where(slack, np.maximum(gap, np.maximum(lam_min, 0.0)), gap)
    gap = np.where(np.isfinite(gap), gap, 0.0)
    return np.maximum(viol, gap) / scale


def random_boxes(rng, m, n, p_equal=0.1, p_inf=0.0):
    lo = rng.uniform(-1.0, 0.5, size=(m, n))
    hi = lo + rng.uniform(0.0, 1.5, size=(m, n))
    eq = rng.random((m, n)) < p_equal
    hi[eq] = lo[eq]
    if p_inf:
        hi[rng.random((m, n)) < p_inf] = INF
        lo[rng.random((m, n)) < p_inf / 2] = -INF
    return lo, hi


def feasible_totals(rng, lo, hi, spill=0.0):
    slo = np.where(np.isfinite(lo), lo, -2.0).sum(axis=1)
    shi = np.where(np.isfinite(hi), hi, 2.0).sum(axis=1)
    slo = np.maximum(slo, lo.sum(axis=1))
    shi = np.minimum(shi, hi.sum(axis=1))
    w = rng.uniform(0.0, 1.0 + spill, size=lo.shape[0])
    return slo + w * (shi - slo)


# --------------------------------------------------------------------------------------------
# box
# --------------------------------------------------------------------------------------------
def test_box_clips_with_broadcasting():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 6)) * 3
    lo = rng.uniform(-1, 0, size=6)
    hi = np.full((50, 1), 0.7)
    Y = project_box(X, lo, hi)
    assert Y.shape == X.shape
    np.testing.assert_array_equal(Y, np.minimum(np.maximum(X, lo), hi))
    np.testing.assert_array_equal(project_box(Y, lo, hi), Y)
    assert project_box(5.0, 0.0, 1.0) == 1.0
    with pytest.raises(ValueError, match="lo > hi"):
        project_box(X, 1.0, 0.0)


# --------------------------------------------------------------------------------------------
# simplex
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_simplex_matches_reference_qp(seed):
    rng = np.random.default_rng(100 + seed)
    for n in range(1, 8):
        X = rng.normal(size=(6, n)) * rng.choice([0.1, 1.0, 5.0])
        total = rng.uniform(0.1, 3.0)
        Y = project_simplex(X, total)
        for x, y in zip(X, Y):
            ref = qp_reference(x, 0.0, INF, total, True)
            np.testing.assert_allclose(y, ref, atol=1e-6)


def test_simplex_kkt_large_batch_and_per_row_total():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(3000, 40)) * rng.uniform(0.01, 10, size=(3000, 1))
    t = rng.uniform(0.0, 5.0, size=3000)
    Y = project_simplex(X, t)
    assert kkt_violation(X, Y, 0.0, INF, t, True).max() < 1e-10
    assert np.all(Y >= 0)
    np.testing.assert_allclose(Y.sum(axis=1), t, atol=1e-12 * 40 * 10)


def test_simplex_equals_capped_with_infinite_upper_bound():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(500, 12))
    np.testing.assert_allclose(project_simplex(X, 2.0),
                               project_capped_simplex(X, 0.0, INF, 2.0), atol=1e-13)


def test_simplex_shift_invariance_idempotence_and_edge_cases():
    rng = np.random.default_rng(9)
    X = rng.normal(size=(200, 7))
    Y = project_simplex(X)
    np.testing.assert_allclose(project_simplex(X + 3.7), Y, atol=1e-12)
    np.testing.assert_allclose(project_simplex(Y), Y, atol=1e-14)
    # a point already in the simplex is fixed
    P = rng.dirichlet(np.ones(7), size=20)
    np.testing.assert_allclose(project_simplex(P), P, atol=1e-14)
    # total 0 -> zeros; 1-D in, 1-D out; single coordinate -> total
    np.testing.assert_array_equal(project_simplex(X, 0.0), np.zeros_like(X))
    y = project_simplex(np.array([0.3, 2.0, -1.0]))
    assert y.shape == (3,)
    np.testing.assert_allclose(y, [0.0, 1.0, 0.0])
    np.testing.assert_allclose(project_simplex(np.array([[-5.0]]), 2.5), [[2.5]])
    # ties
    np.testing.assert_allclose(project_simplex(np.array([1.0, 1.0, 1.0, 0.0])),
                               [1 / 3, 1 / 3, 1 / 3, 0.0], atol=1e-15)
    with pytest.raises(ValueError, match="total"):
        project_simplex(X, -1.0)
    with pytest.raises(ValueError):
        project_simplex(X, np.ones(3))  # wrong per-row length
    with pytest.raises(ValueError):
        project_simplex(np.array([[np.nan, 1.0]]))


# --------------------------------------------------------------------------------------------
# capped simplex / knapsack
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_capped_simplex_matches_reference_qp(seed):
    rng = np.random.default_rng(200 + seed)
    for n in (1, 2, 3, 5, 8):
        m = 6
        X = rng.normal(size=(m, n)) * rng.choice([0.3, 1.0, 4.0])
        lo, hi = random_boxes(rng, m, n, p_equal=0.15)
        t = feasible_totals(rng, lo, hi)
        Y = project_capped_simplex(X, lo, hi, t, equality=True)
        for i in range(m):
            ref = qp_reference(X[i], lo[i], hi[i], t[i], True)
            np.testing.assert_allclose(Y[i], ref, atol=1e-6)
        assert kkt_violation(X, Y, lo, hi, t, True).max() < 1e-10


@pytest.mark.parametrize("seed", range(5))
def test_knapsack_le_matches_reference_qp(seed):
    rng = np.random.default_rng(300 + seed)
    for n in (1, 2, 4, 6, 8):
        m = 6
        X = rng.normal(size=(m, n)) * rng.choice([0.3, 1.0, 4.0]) + rng.choice([-1, 0, 1])
        lo, hi = random_boxes(rng, m, n)
        t = feasible_totals(rng, lo, hi, spill=0.5)  # some totals above sum(hi): never tight
        Y = project_capped_simplex(X, lo, hi, t, equality=False)
        for i in range(m):
            ref = qp_reference(X[i], lo[i], hi[i], t[i], False)
            np.testing.assert_allclose(Y[i], ref, atol=1e-6)
        assert kkt_violation(X, Y, lo, hi, t, False).max() < 1e-10
        np.testing.assert_array_equal(project_knapsack(X, lo, hi, t), Y)


def test_knapsack_le_both_regimes_present():
    """Slack rows return the clip exactly; tight rows sit on sum = total."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(400, 5))
    Y = project_capped_simplex(X, 0.0, 1.0, 1.0, equality=False)
    C = np.clip(X, 0.0, 1.0)
    slack = C.sum(axis=1) <= 1.0
    assert 50 < slack.sum() < 350
    np.testing.assert_array_equal(Y[slack], C[slack])
    np.testing.assert_allclose(Y[~slack].sum(axis=1), 1.0, atol=1e-13)
    assert kkt_violation(X, Y, 0.0, 1.0, 1.0, False).max() < 1e-12


@pytest.mark.parametrize("equality", [True, False])
def test_capped_matches_exact_enumeration(equality):
    rng = np.random.default_rng(12 + equality)
    for _ in range(60):
        n = rng.integers(1, 6)
        x = rng.normal(size=n) * 2
        lo, hi = random_boxes(rng, 1, n, p_equal=0.2, p_inf=0.15)
        lo, hi = lo[0], hi[0]
        t = feasible_totals(rng, lo[None], hi[None], spill=0.0 if equality else 0.5)[0]
        ref = enumerate_reference(x, lo, hi, t, equality)
        y = project_capped_simplex(x, lo, hi, t, equality=equality)
        np.testing.assert_allclose(y, ref, atol=1e-10)


@pytest.mark.parametrize("equality", [True, False])
def test_capped_kkt_large_batch(equality):
    rng = np.random.default_rng(13 + equality)
    m, n = 4000, 25
    X = rng.normal(size=(m, n)) * rng.uniform(0.01, 20, size=(m, 1))
    X[::7, ::3] = 0.25          # ties in x
    lo, hi = random_boxes(rng, m, n, p_equal=0.05, p_inf=0.1)
    t = feasible_totals(rng, lo, hi, spill=0.0 if equality else 0.3)
    Y = project_capped_simplex(X, lo, hi, t, equality=equality)
    assert np.all(np.isfinite(Y))
    assert kkt_violation(X, Y, lo, hi, t, equality).max() < 1e-10
    # idempotence
    np.testing.assert_allclose(project_capped_simplex(Y, lo, hi, t, equality=equality), Y,
                               atol=1e-11)


def test_capped_large_scale_values():
    rng = np.random.default_rng(14)
    X = rng.normal(size=(300, 10)) * 1e6
    lo = np.zeros(10)
    hi = rng.uniform(1e4, 5e5, size=10)
    Y = project_capped_simplex(X, lo, hi, 1e6)
    assert kkt_violation(X, Y, lo, hi, 1e6, True).max() < 1e-10
    np.testing.assert_allclose(Y.sum(axis=1), 1e6, rtol=1e-13)


def test_capped_translation_invariance_and_unbounded():
    rng = np.random.default_rng(15)
    X = rng.normal(size=(100, 6))
    lo, hi = random_boxes(rng, 100, 6)
    t = feasible_totals(rng, lo, hi)
    Y = project_capped_simplex(X, lo, hi, t)
    np.testing.assert_allclose(project_capped_simplex(X - 2.5, lo, hi, t), Y, atol=1e-12)
    # no bounds at all: orthogonal projection onto the hyperplane sum y = t
    Z = project_capped_simplex(X, -INF, INF, t)
    np.testing.assert_allclose(Z, X - ((X.sum(axis=1) - t) / 6)[:, None], atol=1e-13)


def test_capped_boundary_totals_and_fixed_coordinates():
    rng = np.random.default_rng(16)
    X = rng.normal(size=(50, 4))
    lo, hi = random_boxes(rng, 50, 4)
    np.testing.assert_allclose(project_capped_simplex(X, lo, hi, lo.sum(axis=1)), lo, atol=1e-14)
    np.testing.assert_allclose(project_capped_simplex(X, lo, hi, hi.sum(axis=1)), hi, atol=1e-14)
    np.testing.assert_allclose(project_capped_simplex(X, lo, hi, lo.sum(axis=1), equality=False),
                               lo, atol=1e-14)
    # every coordinate fixed (lo == hi)
    np.testing.assert_allclose(project_capped_simplex(X, lo, lo, lo.sum(axis=1)), lo, atol=1e-14)
    # totals a few ulps outside [sum lo, sum hi] are accepted (rounding), not rejected
    np.testing.assert_allclose(project_capped_simplex(np.zeros(3), 0.5, 1.0, 1.5 - 1e-15),
                               [0.5, 0.5, 0.5], atol=0)
    np.testing.assert_allclose(project_capped_simplex(np.zeros(3), 0.0, 0.5, 1.5 + 1e-15),
                               [0.5, 0.5, 0.5], atol=0)
    # total on a flat piece of s(lam) (no free coordinate at the solution)
    np.testing.assert_allclose(project_capped_simplex([[5.0, -5.0], [-5.0, 5.0]], 0.0, 1.0, 1.0),
                               [[1.0, 0.0], [0.0, 1.0]], atol=0)
    # zero rows
    for eq in (True, False):
        assert project_capped_simplex(np.zeros((0, 4)), 0.0, 1.0, 1.0, eq).shape == (0, 4)
    assert project_simplex(np.zeros((0, 4))).shape == (0, 4)
    # 1-D in, 1-D out
    y = project_capped_simplex(np.array([2.0, 0.1, -3.0]), 0.0, 1.0, 1.5)
    assert y.shape == (3,)
    np.testing.assert_allclose(y, [1.0, 0.5, 0.0], atol=1e-15)


def test_infeasible_inputs_raise():
    X = np.zeros((3, 4))
    with pytest.raises(ValueError, match="sum\\(lo\\)"):
        project_capped_simplex(X, 0.5, 1.0, 1.0)                  # 2.0 > 1.0
    with pytest.raises(ValueError, match="sum\\(lo\\)"):
        project_capped_simplex(X, 0.5, 1.0, 1.0, equality=False)
    with pytest.raises(ValueError, match="sum\\(hi\\)"):
        project_capped_simplex(X, 0.0, 0.2, 1.0)                  # 0.8 < 1.0
    with pytest.raises(ValueError, match="sum\\(hi\\)"):
        project_capped_simplex(X, 0.0, 0.2, [0.5, 1.0, 0.5])       # only row 1 infeasible
    with pytest.raises(ValueError, match="lo > hi"):
        project_capped_simplex(X, 1.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        project_capped_simplex(X, np.zeros(3), 1.0, 1.0)           # does not broadcast
    # sum(hi) < total is fine for the inequality version: the clip is the answer
    Xr = np.random.default_rng(0).normal(size=(3, 4))
    np.testing.assert_array_equal(project_capped_simplex(Xr, 0.0, 0.2, 1.0, equality=False),
                                  np.clip(Xr, 0.0, 0.2))


@pytest.mark.parametrize("equality", [True, False])
def test_weighted_projection_satisfies_kkt_and_reduces_to_unweighted(equality):
    rng = np.random.default_rng(23)
    X = rng.normal(0, 2, size=(200, 6))
    lo = rng.uniform(-1.0, 0.0, size=X.shape)
    hi = lo + rng.uniform(0.1, 2.0, size=X.shape)
    total = rng.uniform(lo.sum(axis=1), hi.sum(axis=1))
    # equal weights: the Euclidean projection
    np.testing.assert_allclose(project_weighted(X, 1.0, lo, hi, total, equality),
                               project_capped_simplex(X, lo, hi, total, equality), atol=1e-12)
    W = rng.uniform(0.05, 5.0, size=X.shape)
    Y = project_weighted(X, W, lo, hi, total, equality)
    assert np.all(Y >= lo - 1e-12) and np.all(Y <= hi + 1e-12)
    sums = Y.sum(axis=1)
    assert np.all(sums <= total + 1e-10)
    if equality:
        np.testing.assert_allclose(sums, total, atol=1e-10)
    # KKT: (x - y)/w = mu on free coordinates (one mu per row), >= mu at lo, <= mu at hi
    g = (X - Y) / W
    free = (Y > lo + 1e-9) & (Y < hi - 1e-9)
    for r in range(len(X)):
        if free[r].any():
            mu = g[r, free[r]].mean()
            np.testing.assert_allclose(g[r, free[r]], mu, atol=1e-9)
            assert np.all(g[r, Y[r] <= lo[r] + 1e-9] <= mu + 1e-9)
            assert np.all(g[r, Y[r] >= hi[r] - 1e-9] >= mu - 1e-9)
            if not equality:
                assert mu >= -1e-9


def test_weighted_batch_warm_newton_equals_the_exact_projection():
    """`WeightedBatch` (warm-started Newton steps, sort-based fallback) returns what
    `project_weighted` returns, on a drifting sequence of points and weights that moves rows
    across breakpoints, with capped simplices, active and slack knapsacks and padding."""
    from cefl_opt.solvers.projections import WeightedBatch
    rng = np.random.default_rng(31)
    m, n = 120, 7
    lo = rng.uniform(-1.0, 0.0, size=(m, n))
    hi = lo + rng.uniform(0.1, 2.0, size=(m, n))
    lo[:10, 5:] = hi[:10, 5:] = 0.0                      # padding entries
    eq = rng.random(m) < 0.6
    total = rng.uniform(lo.sum(axis=1), hi.sum(axis=1))
    batch = WeightedBatch(lo, hi, total, eq)
    X = rng.normal(0, 1, size=(m, n))
    W = rng.uniform(0.05, 5.0, size=(m, n))
    slack = 0
    for it in range(60):
        step = 1.0 if it % 20 == 0 else 0.02            # big jumps and small drifts
        X = X + step * rng.normal(size=X.shape)
        W = W * np.exp(0.05 * rng.normal(size=W.shape))
        X[:10, 5:] = 0.0
        W[:10, 5:] = 1.0
        got = batch(X, W)
        want = np.vstack([project_weighted(X[r], W[r], lo[r], hi[r], total[r], bool(eq[r]))
                          for r in range(m)])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
        slack += int(np.sum(~eq & (np.clip(X, lo, hi).sum(axis=1) < total - 1e-9)))
    assert slack > 0                                     # slack knapsacks were exercised
    assert 0 < batch.fallback_rows < 60 * m              # both paths were exercised


@pytest.mark.parametrize("width", [5, 12])
def test_project_into_writes_what_a_call_returns_at_its_rows(width):
    """`WeightedBatch.project_into(v, w, idx, out)` (gathers and scatter compiled) writes at
    out[idx] what a call on v[idx], w[idx] returns, bit for bit, with the same multipliers
    and fallback count, over a drifting sequence; the other entries of out stay as they
    were."""
    from cefl_opt.solvers.projections import WeightedBatch
    rng = np.random.default_rng(7 + width)
    m = 60
    lo = rng.uniform(-1.0, 0.0, size=(m, width))
    hi = lo + rng.uniform(0.1, 2.0, size=(m, width))
    eq = rng.random(m) < 0.5
    total = rng.uniform(lo.sum(axis=1), hi.sum(axis=1))
    into, call = WeightedBatch(lo, hi, total, eq), WeightedBatch(lo, hi, total, eq)
    size = m * width + 9
    idx = np.asfortranarray(rng.permutation(size)[:m * width].reshape(m, width))
    others = np.setdiff1d(np.arange(size), idx)
    v, w = rng.normal(size=size), rng.uniform(0.05, 5.0, size=size)
    for it in range(30):
        v = v + (1.0 if it % 10 == 0 else 0.02) * rng.normal(size=size)
        out = rng.normal(size=size)
        before = out.copy()
        into.project_into(v, w, idx, out)
        assert out[idx].tobytes() == call(v[idx], w[idx]).tobytes()
        assert into.mu.tobytes() == call.mu.tobytes()
        assert np.array_equal(out[others], before[others])
    assert into.fallback_rows == call.fallback_rows > 0


@pytest.mark.parametrize("width", [0, 1, 2, 7, 8, 9, 15, 16, 17, 40, 128, 129, 130, 257, 300])
def test_the_kernels_row_sum_is_the_array_forms_bit_for_bit(width):
    """`_row_sum` (the compiled kernel's) adds a row as `_row_sums` does: in order below 8
    terms, numpy's own pairwise sum from 8 on (blocks of 128 and halves above), on values
    spread over 16 orders of magnitude, where any other order rounds differently."""
    from cefl_opt.solvers.projections import _row_sum, _row_sums
    rng = np.random.default_rng(width)
    Y = rng.normal(size=(400, width)) * 10.0 ** rng.integers(-8, 8, size=(400, width))
    want = _row_sums(Y)
    got = np.array([_row_sum(np.ascontiguousarray(y)) for y in Y])
    assert got.tobytes() == want.tobytes()
    if width >= 8:     # the test can fail: a plain left-to-right sum differs somewhere
        seq = np.array([sum(y.tolist()) for y in Y])
        assert seq.tobytes() != want.tobytes()


def _weighted_batch_array_form(X, W, L, H, t, tol, floor, mu, newton):
    """`WeightedBatch`'s Newton steps as whole-array numpy operations (the form the compiled
    kernel replaces): the warm start, then up to `newton` steps, each tested but the last (the
    first always). Y (at each row's last tested multiplier), the multipliers and the rows
    left to the sort method."""
    from cefl_opt.solvers.projections import _row_sums

    def ev(m):
        Z = X - W * m[:, None]
        Y = np.minimum(np.maximum(Z, L), H)
        return Z, Y, _row_sums(Y) - t

    def ok_rows(r, m):
        return (np.abs(r) <= tol) | ((r <= 0.0) & (m <= floor))
    Z, Y, r = ev(mu)
    ok = ok_rows(r, mu)
    for k in range(1, newton + 1):
        if ok.all():
            break
        wf = _row_sums(np.where((Z > L) & (Z < H), W, 0.0))
        move = ~ok & (wf > 0)
        mu = np.maximum(np.where(move, mu + r / np.where(move, wf, 1.0), mu), floor)
        if k > max(newton - 1, 1):
            break
        Z1, Y1, r1 = ev(mu)
        Z, Y = np.where(ok[:, None], Z, Z1), np.where(ok[:, None], Y, Y1)
        r = np.where(ok, r, r1)
        ok = ok | ok_rows(r, mu)
    return Y, mu, ~ok


@pytest.mark.parametrize("newton", [1, 2, 3])
@pytest.mark.parametrize("width", [1, 5, 10, 40, 130])
def test_weighted_batch_kernel_equals_the_array_form_bit_for_bit(width, newton):
    """The compiled Newton steps (`_newton_steps`; rows narrower than 8 by their own pass)
    give the array form's projections, multipliers and rows left, bit for bit, over a
    drifting sequence (warm starts that hold, one and several Newton steps, rows left to the
    sort method), with padding and both row kinds."""
    from cefl_opt.solvers.projections import _newton_steps
    rng = np.random.default_rng(100 + width)
    m = 90
    L = np.where(rng.random((m, width)) < 0.5, 0.0, -rng.random((m, width)))
    H = L + rng.uniform(0.1, 3.0, size=(m, width))
    pad = rng.random((m, width)) < 0.1
    L[pad] = H[pad] = 0.0
    eq = rng.random(m) < 0.5
    t = rng.uniform(L.sum(axis=1), H.sum(axis=1))
    tol = 1e-13 * (np.abs(t) + 1.0)
    floor = np.where(eq, -np.inf, 0.0)
    X = rng.normal(size=(m, width))
    mu = np.zeros(m)
    stepped = left_seen = 0
    for it in range(40):
        X = X + (0.5 if it % 10 == 0 else 0.01) * rng.normal(size=X.shape)
        W = np.exp(0.3 * rng.normal(size=X.shape)) if it % 3 else np.ones(X.shape)
        Xf, Wf = np.asfortranarray(X), np.asfortranarray(W)
        Y, mu_new, left = np.empty(X.shape), np.empty(m), np.empty(m, dtype=np.bool_)
        any_left = _newton_steps(Xf, Wf, np.asfortranarray(L), np.asfortranarray(H), t, tol,
                                 floor, mu, newton, Y, mu_new, left)
        Y0, mu0, left0 = _weighted_batch_array_form(X, W, L, H, t, tol, floor, mu, newton)
        assert Y.tobytes() == np.ascontiguousarray(Y0).tobytes()
        assert mu_new.tobytes() == np.ascontiguousarray(mu0, dtype=float).tobytes()
        assert np.array_equal(left, left0) and any_left == bool(left0.any())
        stepped += int(not np.array_equal(mu_new, mu))
        left_seen += int(left.sum())
        mu = mu_new
    assert stepped > 0 and left_seen > 0          # both the step and the rows left occurred
