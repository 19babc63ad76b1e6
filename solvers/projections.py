"""Row-wise Euclidean projections onto the per-node convex sets of the decentralised solver.

Used by the primal step of the CE-FL primal-dual method (Algorithms 2-3): every network node
projects its primal block onto a simple convex set. All functions act on a *batch* of rows at
once (2-D array, one problem per row; a 1-D array is treated as a single row and returned 1-D)
and are fully vectorised -- there is no Python loop over rows.

Sets
----
* box             ``{y : lo <= y <= hi}``
* simplex         ``{y : y >= 0, sum(y) = total}``
* capped simplex  ``{y : lo <= y <= hi, sum(y) = total}``   (``equality=True``)
* knapsack (<=)   ``{y : lo <= y <= hi, sum(y) <= total}``  (``equality=False``)

The capped simplex / box-bounded knapsack is solved exactly: the projection is
``y(lam) = clip(x - lam, lo, hi)`` where ``s(lam) = sum(y(lam))`` is monotone piecewise linear
with breakpoints ``x - hi`` and ``x - lo``. All ``2n`` breakpoints of every row are sorted at
once, ``s`` is evaluated at each of them with prefix sums, the segment holding ``s = total`` is
located, and ``lam`` is then obtained from one exact linear solve on that segment's active set.
Cost is ``O(m n log n)`` for ``m`` rows of length ``n``.

`WeightedBatch` is the solver's inner-loop form of the weighted projection (`project_weighted`):
a fixed batch of rows, warm-started Newton steps on the multiplier, the sort-based method for
the rows the steps do not settle. The Newton steps run in one compiled pass over the rows
(`_newton_steps`, numba), with numpy's sums and numpy's maximum and minimum, without numpy's
per-call cost on the small arrays of the inner loop.

This module depends on numpy and numba.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = [
    "project_box",
    "project_simplex",
    "project_capped_simplex",
    "project_knapsack",
    "project_weighted",
    "WeightedBatch",
]

# Relative slack on the feasibility tests (sum lo <= total <= sum hi): sums that miss by a few
# ulps are accepted and projected onto the (then single-point) face.
_FEAS_RTOL = 1e-12


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _as_2d(X: Any, name: str = "X") -> tuple[np.ndarray, bool]:
    """Return ``X`` as a finite float 2-D array and whether it was 1-D."""
    A = np.asarray(X, dtype=float)
    if A.ndim == 1:
        A, squeeze = A[None, :], True
    elif A.ndim == 2:
        squeeze = False
    else:
        raise ValueError(f"{name} must be 1-D or 2-D (rows are projected), got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or infinite entries")
    return A, squeeze


def _row_param(value: Any, m: int, name: str) -> np.ndarray:
    """Scalar or per-row parameter -> float array of shape ``(m,)``."""
    v = np.asarray(value, dtype=float)
    if v.ndim == 0:
        v = np.full(m, float(v))
    elif v.shape == (m,):
        v = v.copy()
    elif v.shape == (m, 1):
        v = v[:, 0].copy()
    else:
        raise ValueError(f"{name} must be a scalar or have one entry per row ({m}), "
                         f"got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def _bounds(lo: Any, hi: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Broadcast ``lo``/``hi`` to ``shape`` and check ``lo <= hi``, no NaN, no wrong infinity."""
    lo_a = np.asarray(lo, dtype=float)
    hi_a = np.asarray(hi, dtype=float)
    try:
        L = np.broadcast_to(lo_a, shape)
        H = np.broadcast_to(hi_a, shape)
    except ValueError as exc:
        raise ValueError(f"lo/hi do not broadcast to the rows' shape {shape}: {exc}") from None
    # checks on the (usually small) arrays as given, not on the broadcast views
    if np.isnan(lo_a).any() or np.isnan(hi_a).any():
        raise ValueError("lo/hi contain NaN")
    if (lo_a == np.inf).any() or (hi_a == -np.inf).any():
        raise ValueError("lo must be < +inf and hi must be > -inf")
    bad = lo_a > hi_a
    if bad.any():
        idx = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
        lo_b, hi_b = np.broadcast_arrays(lo_a, hi_a)
        raise ValueError(f"empty box: lo > hi at index {tuple(int(i) for i in idx)} "
                         f"(lo={float(lo_b[idx])!r}, hi={float(hi_b[idx])!r})")
    return L, H


def _feas_tol(t: np.ndarray, L: np.ndarray, H: np.ndarray) -> np.ndarray:
    """Per-row slack for ``sum lo <= total <= sum hi`` (a few ulps of the magnitudes involved)."""
    def fin_abs(A: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(A), np.abs(A), 0.0).sum(axis=1)
    return _FEAS_RTOL * max(L.shape[1], 1) * (1.0 + np.abs(t) + fin_abs(L) + fin_abs(H))


# --------------------------------------------------------------------------------------------
# box
# --------------------------------------------------------------------------------------------
def project_box(x: Any, lo: Any, hi: Any) -> np.ndarray:
    """Projection onto the box ``lo <= y <= hi`` (elementwise clip; all arguments broadcast).

    Raises ``ValueError`` if some ``lo > hi`` (empty box).
    """
    x = np.asarray(x, dtype=float)
    lo_a = np.asarray(lo, dtype=float)
    hi_a = np.asarray(hi, dtype=float)
    if np.any(lo_a > hi_a):
        raise ValueError("empty box: some lo > hi")
    return np.clip(x, lo_a, hi_a)


# --------------------------------------------------------------------------------------------
# simplex
# --------------------------------------------------------------------------------------------
def project_simplex(X: Any, total: Any = 1.0) -> np.ndarray:
    """Project every row of ``X`` onto ``{y >= 0, sum(y) = total}``.

    Sort-based closed form (Held et al. / Duchi et al.): with ``u`` the row sorted in
    decreasing order, ``rho = max{j : u_j - (sum_{i<=j} u_i - total)/j > 0}`` and
    ``theta = (sum_{i<=rho} u_i - total)/rho``, the projection is ``max(x - theta, 0)``.
    ``total`` is a scalar or one value per row and must be ``>= 0``.
    """
    A, squeeze = _as_2d(X)
    m, n = A.shape
    if n == 0:
        raise ValueError("cannot project rows of length 0 onto a simplex")
    t = _row_param(total, m, "total")
    if (t < 0).any():
        raise ValueError(f"simplex total must be >= 0, got min total {t.min()!r}")
    U = -np.sort(-A, axis=1)                      # rows sorted in decreasing order
    css = np.cumsum(U, axis=1) - t[:, None]
    j = np.arange(1, n + 1, dtype=float)
    cond = U - css / j > 0
    # rho = last index where cond holds (1-based); at least 1 (covers total == 0).
    any_c = cond.any(axis=1)
    rho = np.where(any_c, n - np.argmax(cond[:, ::-1], axis=1), 1)
    theta = css[np.arange(m), rho - 1] / rho
    Y = np.maximum(A - theta[:, None], 0.0)
    return Y[0] if squeeze else Y


# --------------------------------------------------------------------------------------------
# capped simplex / box-bounded knapsack
# --------------------------------------------------------------------------------------------
def _knapsack_eq(X: np.ndarray, L: np.ndarray, H: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Rows of ``X`` onto ``{L <= y <= H, sum y = t}`` by exact breakpoint search.

    Assumes (checked by the caller) ``L <= H`` and ``sum L <= t <= sum H`` up to rounding.
    If ``t`` is (slightly) above ``sum H`` the row returns ``H``; below ``sum L`` returns ``L``.
    """
    m, n = X.shape
    if m == 0 or n == 0:
        return X.copy()
    # y_i(lam) = clip(x_i - lam, lo_i, hi_i) leaves hi_i at the breakpoint lam = x_i - hi_i
    # ("hi" type, columns :n) and reaches lo_i at lam = x_i - lo_i ("lo" type, columns n:).
    B = np.empty((m, 2 * n))
    np.subtract(X, H, out=B[:, :n])
    np.subtract(X, L, out=B[:, n:])
    order = np.argsort(B, axis=1)
    base = np.arange(m) * (2 * n)
    b = np.take(B, order + base[:, None])                          # sorted breakpoints
    sgn = np.where(order < n, 1.0, -1.0)                           # +1 hi type, -1 lo type
    # With the breakpoints sorted (b_1 <= ... <= b_2n) and n_free(k) = sum_{j<=k} sgn_j,
    #   s(b_k) = sum(hi) + sum_{j<=k} sgn_j (x - bound)_j - n_free(k) b_k,
    # where (x - bound)_j is b_j itself for finite bounds. An infinite bound only changes the
    # bookkeeping: hi = +inf never leaves the free set (term x, share of sum(hi) 0) and
    # lo = -inf never enters the lower set. Ties between breakpoints do not change s.
    n_free = np.cumsum(sgn, axis=1)
    inf_h, inf_l = np.isinf(H), np.isinf(L)
    if inf_h.any() or inf_l.any():
        Hf = np.where(inf_h, 0.0, H)
        Lf = np.where(inf_l, 0.0, L)
        V = np.take(np.concatenate([X - Hf, Lf - X], axis=1), order + base[:, None])
        sum_hi = Hf.sum(axis=1)
    else:
        V = sgn * b
        sum_hi = H.sum(axis=1)
    s = np.cumsum(V, axis=1)
    with np.errstate(invalid="ignore"):
        s -= n_free * b
    s += sum_hi[:, None]
    s[b == -np.inf] = np.inf          # lam -> -inf: some hi = +inf, s unbounded above
    s[b == np.inf] = -np.inf          # lam -> +inf: some lo = -inf, s unbounded below

    # s is nonincreasing: the first breakpoint with s <= t gives lam* in [b_{k-1}, b_k].
    # None (t < sum lo, within the feasibility slack) -> k = 2n, y = lo.
    below = s <= t[:, None]
    k = np.argmax(below, axis=1)
    found = np.take(below, base + k)
    k[~found] = 2 * n
    b_k = np.where(found, np.take(b, base + np.minimum(k, 2 * n - 1)), np.inf)
    b_km1 = np.where(k > 0, np.take(b, base + np.maximum(k - 1, 0)), -np.inf)

    # Active set on the segment (b_{k-1}, b_k), then one exact linear solve for lam:
    # upper where x - hi >= b_k, lower where x - lo <= b_{k-1} (both only if lo == hi).
    at_hi = B[:, :n] >= b_k[:, None]
    at_lo = B[:, n:] <= b_km1[:, None]
    at_lo &= ~at_hi
    free = ~(at_hi | at_lo)
    nf = np.count_nonzero(free, axis=1)
    lam = (np.where(at_hi, H, np.where(at_lo, L, X)).sum(axis=1) - t) / np.maximum(nf, 1)
    # No free entry: s is flat on the segment, any lam in it will do.
    lam = np.where(nf > 0, lam, np.where(np.isfinite(b_k), b_k, b_km1))
    # clip(x - lam) reproduces the active set (and absorbs a segment mis-located by rounding,
    # which moves y by ~ulps only).
    Y = X - lam[:, None]
    return np.clip(Y, L, H, out=Y)


def project_capped_simplex(X: Any, lo: Any = 0.0, hi: Any = 1.0, total: Any = 1.0,
                           equality: bool = True) -> np.ndarray:
    """Project every row of ``X`` onto the box-bounded knapsack set.

    ``equality=True``:  ``{lo <= y <= hi, sum(y) = total}`` (capped simplex);
    ``equality=False``: ``{lo <= y <= hi, sum(y) <= total}`` (if ``clip(x, lo, hi)`` already
    has ``sum <= total`` it is the answer, otherwise the constraint is tight).

    ``lo``/``hi`` broadcast to ``X``'s shape (``-inf``/``+inf`` allowed); ``total`` is a scalar
    or one value per row. Exact: sorted-breakpoint search plus a linear solve on the active set.

    Raises ``ValueError`` if a row is infeasible (``sum lo > total``, or with ``equality``
    ``sum hi < total``) or the box is empty.
    """
    A, squeeze = _as_2d(X)
    m, n = A.shape
    L, H = _bounds(lo, hi, A.shape)
    t = _row_param(total, m, "total")
    sum_lo = L.sum(axis=1)
    bad = sum_lo > t
    if bad.any():  # allow a few ulps of slack before calling the row infeasible
        bad &= sum_lo > t + _feas_tol(t, L, H)
        if bad.any():
            r = int(np.argmax(bad))
            raise ValueError(f"infeasible projection: sum(lo) = {sum_lo[r]!r} > total = "
                             f"{t[r]!r} (row {r}; {int(bad.sum())} infeasible row(s))")
    if equality:
        sum_hi = H.sum(axis=1)
        bad = sum_hi < t
        if bad.any():
            bad &= sum_hi < t - _feas_tol(t, L, H)
            if bad.any():
                r = int(np.argmax(bad))
                raise ValueError(f"infeasible projection: sum(hi) = {sum_hi[r]!r} < total = "
                                 f"{t[r]!r} with equality (row {r}; {int(bad.sum())} "
                                 f"infeasible row(s))")
        Y = _knapsack_eq(A, L, H, t)
    else:
        Y = np.clip(A, L, H)
        tight = Y.sum(axis=1) > t
        if tight.any():
            Y[tight] = _knapsack_eq(A[tight], L[tight], H[tight], t[tight])
    return Y[0] if squeeze else Y


def project_knapsack(X: Any, lo: Any = 0.0, hi: Any = 1.0, total: Any = 1.0) -> np.ndarray:
    """Rows onto ``{lo <= y <= hi, sum(y) <= total}`` (``project_capped_simplex(..., False)``)."""
    return project_capped_simplex(X, lo, hi, total, equality=False)


# --------------------------------------------------------------------------------------------
# weighted capped simplex / knapsack (diagonal metric)
# --------------------------------------------------------------------------------------------
def project_weighted(X: Any, W: Any, lo: Any, hi: Any, total: Any, equality: bool = True
                     ) -> np.ndarray:
    """Rows of ``X`` onto ``{lo <= y <= hi, sum y = total}`` (``<=`` if not ``equality``) in
    the metric ``sum_i (y_i - x_i)^2 / w_i`` (``w > 0``: the minimiser of a separable
    quadratic with curvature ``1/w`` over the set). Finite bounds only. Exact: the solution is
    ``y(mu) = clip(x - w mu, lo, hi)``; ``s(mu) = sum y(mu)`` is piecewise linear with
    breakpoints ``(x - hi)/w`` and ``(x - lo)/w``, all sorted at once, and ``mu`` comes from one
    linear solve on the segment that holds ``total``."""
    A, squeeze = _as_2d(X)
    Wt = np.broadcast_to(np.asarray(W, dtype=float), A.shape)
    L, H = _bounds(lo, hi, A.shape)
    if not (np.all(np.isfinite(L)) and np.all(np.isfinite(H))):
        raise ValueError("project_weighted needs finite bounds")
    if np.any(Wt <= 0):
        raise ValueError("weights must be > 0")
    m, n = A.shape
    t = _row_param(total, m, "total")
    Y = np.clip(A, L, H)
    todo = np.ones(m, dtype=bool) if equality else (Y.sum(axis=1) > t)
    if todo.any():
        Y[todo] = _weighted_eq(A[todo], Wt[todo], L[todo], H[todo], t[todo])
    return Y[0] if squeeze else Y


class WeightedBatch:
    """`project_weighted` for the solver's inner loop, on a fixed batch of rows (bounds, totals
    and row kinds set once; no input checks): rows with ``eq[r]`` are capped simplices, the
    others knapsacks (``sum <= t``); padding entries with ``lo = hi = 0`` stay 0.

    Each call starts from the previous call's multipliers ``mu`` (the inner loop's points move
    little between calls) and takes Newton steps on ``s(mu) = t``: ``s`` is linear on the
    current active set, so a step from the right segment lands on the root. A row is accepted
    when ``|s(mu) - t| <= rtol (|t| + 1)`` (knapsacks: or ``mu = 0`` with ``s(0) <= t``); rows
    not accepted after ``newton`` steps (a step across several breakpoints, a flat segment) are
    solved by the exact sort-based method (`_weighted_eq`). Column-major (Fortran-ordered)
    inputs are the fast layout: the per-row multipliers then broadcast along whole columns."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, total: np.ndarray, eq: np.ndarray, *,
                 newton: int = 3, rtol: float = 1e-13):
        self.L = np.asfortranarray(lo, dtype=float)
        self.H = np.asfortranarray(hi, dtype=float)
        self.t = np.asarray(total, float)
        self.eq = np.asarray(eq, bool)
        self.floor = np.where(self.eq, -np.inf, 0.0)     # knapsacks: mu >= 0
        self.tol = rtol * (np.abs(self.t) + 1.0)
        self.newton = max(int(newton), 1)
        self.mu = np.zeros(len(self.t))
        self.fallback_rows = 0      # rows solved by the sort method (diagnostics)

    def __call__(self, X: np.ndarray, W: np.ndarray) -> np.ndarray:
        # the Newton steps, row by row in one compiled pass (`_newton_steps`); the rows they
        # leave by the sort method
        Y = np.empty(X.shape)
        mu = np.empty(len(self.t))
        left = np.empty(len(self.t), dtype=np.bool_)
        if _newton_steps(X, W, self.L, self.H, self.t, self.tol, self.floor, self.mu,
                         self.newton, Y, mu, left):
            todo = np.flatnonzero(left)
            Y[todo] = self._sorted_rows(X[todo], W[todo], todo, mu)
        self.mu = mu
        return Y

    def project_into(self, v: np.ndarray, w: np.ndarray, idx: np.ndarray, out: np.ndarray
                     ) -> None:
        """``out[idx] = self(v[idx], w[idx])``, the gathers, the Newton steps and the scatter
        in one compiled pass (`_gathered_newton_steps`); the rows they leave as `__call__`
        solves them."""
        mu = np.empty(len(self.t))
        left = np.empty(len(self.t), dtype=np.bool_)
        if _gathered_newton_steps(v, w, idx, self.L, self.H, self.t, self.tol, self.floor,
                                  self.mu, self.newton, mu, left, out):
            todo = np.flatnonzero(left)
            X, W = v[idx], w[idx]
            out[idx[todo]] = self._sorted_rows(X[todo], W[todo], todo, mu)
        self.mu = mu

    def _sorted_rows(self, X, W, todo, mu):
        """The rows `todo` (values X, weights W) that no Newton step settled, by the sort
        method; their multipliers read off its solution (mu[todo] updated)."""
        self.fallback_rows += len(todo)
        L, H, t, floor = self.L[todo], self.H[todo], self.t[todo], self.floor[todo]
        Y = np.minimum(np.maximum(X, L), H)
        need = self.eq[todo] | (Y.sum(axis=1) > t)
        if need.any():
            Y[need] = _weighted_eq(X[need], W[need], L[need], H[need], t[need])
        mu[todo] = _multiplier(X, W, Y, L, H, mu[todo], floor)
        return Y


@njit(cache=True, nogil=True)
def _row_sum(v: np.ndarray) -> float:
    """The sum of one row as `_row_sums` takes it: below 8 terms from the first term on, in
    order; from 8 on, numpy's pairwise sum of a contiguous row (8 running sums, combined as
    ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the rest in order; above 128
    terms, halves at a multiple of 8)."""
    n = len(v)
    if n < 8:
        if n == 0:
            return 0.0
        s = v[0]
        for j in range(1, n):
            s += v[j]
        return s
    return _pairwise(v, 0, n)


@njit(cache=True, nogil=True)
def _pairwise(v: np.ndarray, lo: int, n: int) -> float:
    """numpy's pairwise sum of v[lo:lo + n] (numpy/_core/src/umath/loops_utils.h.src): blocks
    of at most 128 terms (`_block`); a longer range is the sum of its halves, split at a
    multiple of 8 (the recursion, evaluated with an explicit stack)."""
    if n <= 128:
        return _block(v, lo, n)
    los = np.empty(64, np.int64)
    lens = np.empty(64, np.int64)
    phase = np.zeros(64, np.int64)
    vals = np.empty(64)
    top, nv = 0, 0
    los[0], lens[0] = lo, n
    while top >= 0:
        a, k = los[top], lens[top]
        if k <= 128:
            vals[nv] = _block(v, a, k)
            nv += 1
            top -= 1
            continue
        k2 = k // 2
        k2 -= k2 % 8
        if phase[top] == 2:          # both halves done: left + right
            vals[nv - 2] = vals[nv - 2] + vals[nv - 1]
            nv -= 1
            top -= 1
            continue
        phase[top] += 1
        first = phase[top] == 1
        top += 1
        los[top] = a if first else a + k2
        lens[top] = k2 if first else k - k2
        phase[top] = 0
    return vals[0]


@njit(cache=True, nogil=True)
def _block(v: np.ndarray, lo: int, n: int) -> float:
    """numpy's pairwise sum of at most 128 terms: below 8 in order from 0.0; else 8 running
    sums, combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the rest."""
    if n < 8:
        s = 0.0
        for j in range(n):
            s += v[lo + j]
        return s
    r0, r1, r2, r3 = v[lo], v[lo + 1], v[lo + 2], v[lo + 3]
    r4, r5, r6, r7 = v[lo + 4], v[lo + 5], v[lo + 6], v[lo + 7]
    i = 8
    while i < n - n % 8:
        r0 += v[lo + i]
        r1 += v[lo + i + 1]
        r2 += v[lo + i + 2]
        r3 += v[lo + i + 3]
        r4 += v[lo + i + 4]
        r5 += v[lo + i + 5]
        r6 += v[lo + i + 6]
        r7 += v[lo + i + 7]
        i += 8
    s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        s += v[lo + i]
        i += 1
    return s


@njit(cache=True, nogil=True)
def _gathered_newton_steps(v, w, idx, L, H, t, tol, floor, mu0, newton, mu, left, out) -> bool:
    """`_newton_steps` on X = v[idx] and W = w[idx], its rows Y written to out[idx]."""
    m_rows, n = idx.shape
    X = np.empty((m_rows, n))
    W = np.empty((m_rows, n))
    for i in range(m_rows):
        for j in range(n):
            X[i, j] = v[idx[i, j]]
            W[i, j] = w[idx[i, j]]
    Y = np.empty((m_rows, n))
    any_left = _newton_steps(X, W, L, H, t, tol, floor, mu0, newton, Y, mu, left)
    for i in range(m_rows):
        for j in range(n):
            out[idx[i, j]] = Y[i, j]
    return any_left


@njit(cache=True, nogil=True, error_model="numpy")
def _newton_steps(X, W, L, H, t, tol, floor, mu0, newton, Y, mu, left) -> bool:
    """`WeightedBatch`'s Newton steps per row i: y = clip(x - w m, lo, hi) and r = sum y - t_i
    from m = mu0_i; the row is accepted when |r| <= tol_i, or r <= 0 at m <= floor_i (a
    knapsack with slack at mu = 0); else a step m + r / (sum of w over the entries with
    lo < z < hi) (none where that sum is 0), floored, and y and its test again. A row takes at
    most `newton` steps, each tested except the last (the first always): a row still not
    accepted is left for the sort method (`left`), with the multiplier of its last step.
    Writes Y, the multipliers mu and `left`; returns whether any row is left. Once any row
    has stepped, every row's mu is floored. Sums run in numpy's order (`_row_sum`)."""
    m_rows, n = X.shape
    if 0 < n < 8:
        return _newton_steps_narrow(X, W, L, H, t, tol, floor, mu0, newton, Y, mu, left)
    y = np.empty(n)
    z = np.empty(n)
    wf_row = np.empty(n)
    tested = max(newton - 1, 1)
    any_moved = False
    for i in range(m_rows):
        m = mu0[i]
        _clip_row(X, W, L, H, i, m, y, z)
        r = _row_sum(y) - t[i]
        ok = abs(r) <= tol[i] or (r <= 0.0 and m <= floor[i])
        k = 0
        while not ok and k < newton:
            any_moved = True
            for j in range(n):
                wf_row[j] = W[i, j] if (z[j] > L[i, j] and z[j] < H[i, j]) else 0.0
            wf = _row_sum(wf_row)
            if wf > 0:
                m = m + r / wf
            m = m if (m >= floor[i] or m != m) else floor[i]
            k += 1
            if k <= tested:
                _clip_row(X, W, L, H, i, m, y, z)
                r = _row_sum(y) - t[i]
                ok = abs(r) <= tol[i] or (r <= 0.0 and m <= floor[i])
        left[i] = not ok
        mu[i] = m
        for j in range(n):
            Y[i, j] = y[j]
    _floor_all(mu, floor, any_moved)
    return bool(left.any())


@njit(cache=True, nogil=True, error_model="numpy")
def _newton_steps_narrow(X, W, L, H, t, tol, floor, mu0, newton, Y, mu, left) -> bool:
    """`_newton_steps` on rows narrower than 8 (sums in order from the first term), each
    row's clip, sum and free weight in one pass over it (`_clip_sum_row`), without scratch
    rows: the same numbers, a few times faster on the inner loop's width-5 groups."""
    m_rows, n = X.shape
    tested = max(newton - 1, 1)
    any_moved = False
    for i in range(m_rows):
        m = mu0[i]
        s, wf = _clip_sum_row(X, W, L, H, Y, i, m)
        r = s - t[i]
        ok = (abs(r) <= tol[i]) | ((r <= 0.0) & (m <= floor[i]))
        k = 0
        while not ok and k < newton:
            any_moved = True
            if wf > 0:
                m = m + r / wf
            m = m if ((m >= floor[i]) | (m != m)) else floor[i]
            k += 1
            if k <= tested:
                s, wf = _clip_sum_row(X, W, L, H, Y, i, m)
                r = s - t[i]
                ok = (abs(r) <= tol[i]) | ((r <= 0.0) & (m <= floor[i]))
        left[i] = not ok
        mu[i] = m
    _floor_all(mu, floor, any_moved)
    return bool(left.any())


@njit(cache=True, nogil=True)
def _floor_all(mu, floor, any_moved) -> None:
    """mu = max(mu, floor) on every row (numpy's maximum: a NaN stays), once any row moved."""
    if any_moved:
        for i in range(len(mu)):
            m = mu[i]
            mu[i] = m if (m >= floor[i] or m != m) else floor[i]


@njit(cache=True, nogil=True)
def _clip_row(X, W, L, H, i, m, y, z) -> None:
    """z = x - w m and y = clip(z, lo, hi) on row i, with numpy's maximum and minimum (a NaN
    propagates)."""
    for j in range(X.shape[1]):
        zj = X[i, j] - W[i, j] * m
        z[j] = zj
        yj = zj if (zj >= L[i, j] or zj != zj) else L[i, j]
        y[j] = yj if (yj <= H[i, j] or yj != yj) else H[i, j]


@njit(cache=True, nogil=True, inline="always")
def _clip_sum_row(X, W, L, H, Y, i, m) -> tuple[float, float]:
    """Row i: Y = clip(x - w m, lo, hi) (`_clip_row`), and (sum of Y, sum of w over the
    entries with lo < z < hi), each summed in order from its first term."""
    s = 0.0
    wf = 0.0
    for j in range(X.shape[1]):
        zj = X[i, j] - W[i, j] * m
        lj = L[i, j]
        hj = H[i, j]
        yj = zj if ((zj >= lj) | (zj != zj)) else lj
        yj = yj if ((yj <= hj) | (yj != yj)) else hj
        Y[i, j] = yj
        wj = W[i, j] if ((zj > lj) & (zj < hj)) else 0.0
        if j == 0:
            s, wf = yj, wj
        else:
            s += yj
            wf += wj
    return s, wf


def _row_sums(Y: np.ndarray) -> np.ndarray:
    """Y.sum(axis=1) as numpy sums a row-major row; rows narrower than 8 by column adds (the
    sequential order numpy uses below 8 terms, without its per-row reduction overhead)."""
    if Y.shape[1] >= 8 or Y.shape[1] == 0:
        return np.ascontiguousarray(Y).sum(axis=1)
    out = Y[:, 0].copy()
    for j in range(1, Y.shape[1]):
        out += Y[:, j]
    return out


def _multiplier(X, W, Y, L, H, mu_old, floor):
    """mu with Y = clip(X - W mu, L, H), read off a free entry (mu_old where none is free)."""
    free = (Y > L) & (Y < H)
    j = np.argmax(free, axis=1)
    r = np.arange(len(X))
    mu = np.where(free[r, j], (X[r, j] - Y[r, j]) / W[r, j], mu_old)
    return np.maximum(mu, floor)


def _weighted_eq(X, Wt, L, H, t):
    m, n = X.shape
    B = np.concatenate([(X - H) / Wt, (X - L) / Wt], axis=1)
    order = np.argsort(B, axis=1)
    rowi = np.arange(m)[:, None]
    b = B[rowi, order]
    w2 = np.concatenate([Wt, Wt], axis=1)[rowi, order]
    sgn = np.where(order < n, 1.0, -1.0)
    # s(mu) = sum(hi) + sum_{b_j <= mu} sgn_j w_j (b_j - mu)
    s = H.sum(axis=1)[:, None] + np.cumsum(sgn * w2 * b, axis=1) - np.cumsum(sgn * w2, axis=1) * b
    below = s <= t[:, None]
    k = np.argmax(below, axis=1)
    found = below[np.arange(m), k]
    k[~found] = 2 * n
    b_k = np.where(found, b[np.arange(m), np.minimum(k, 2 * n - 1)], np.inf)
    b_km1 = np.where(k > 0, b[np.arange(m), np.maximum(k - 1, 0)], -np.inf)
    at_hi = B[:, :n] >= b_k[:, None]
    at_lo = (B[:, n:] <= b_km1[:, None]) & ~at_hi
    free = ~(at_hi | at_lo)
    wf = np.where(free, Wt, 0.0).sum(axis=1)
    fixed_sum = np.where(at_hi, H, np.where(at_lo, L, 0.0)).sum(axis=1)
    mu = (np.where(free, X, 0.0).sum(axis=1) + fixed_sum - t) / np.where(wf > 0, wf, 1.0)
    mu = np.where(wf > 0, mu, np.where(np.isfinite(b_k), b_k, b_km1))
    return np.clip(X - Wt * mu[:, None], L, H)
