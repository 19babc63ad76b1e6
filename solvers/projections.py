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

This module depends on numpy only.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "project_box",
    "project_simplex",
    "project_capped_simplex",
    "project_knapsack",
    "project_rows",
    "PROJECTIONS",
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
    try:
        L = np.broadcast_to(np.asarray(lo, dtype=float), shape)
        H = np.broadcast_to(np.asarray(hi, dtype=float), shape)
    except ValueError as exc:
        raise ValueError(f"lo/hi do not broadcast to the rows' shape {shape}: {exc}") from None
    if np.isnan(L).any() or np.isnan(H).any():
        raise ValueError("lo/hi contain NaN")
    if (L == np.inf).any() or (H == -np.inf).any():
        raise ValueError("lo must be < +inf and hi must be > -inf")
    bad = L > H
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(f"empty box: lo > hi at row {r}, column {c} "
                         f"(lo={L[r, c]!r}, hi={H[r, c]!r})")
    return L, H


def _finite_abs_sum(A: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(A), np.abs(A), 0.0).sum(axis=1)


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
    if m == 0:
        return X.copy()
    rows = np.arange(m)[:, None]
    # Breakpoints: element i leaves its upper bound at lam = x_i - hi_i (type "hi", index i)
    # and reaches its lower bound at lam = x_i - lo_i (type "lo", index n + i).
    B = np.concatenate([X - H, X - L], axis=1)                     # (m, 2n)
    order = np.argsort(B, axis=1, kind="stable")                   # hi-type first on ties
    b = B[rows, order]
    is_hi = order < n
    elem = np.where(is_hi, order, order - n)
    xs, ls, hs = X[rows, elem], L[rows, elem], H[rows, elem]

    # s(b_k) = sum_{U_k} hi + sum_{L_k} lo + sum_{F_k} (x - b_k) where, in sorted order,
    #   U_k: hi-breakpoint at position > k, L_k: lo-breakpoint at position <= k, F_k: the rest.
    val_hi = np.where(is_hi, hs, 0.0)
    suf = np.cumsum(val_hi[:, ::-1], axis=1)[:, ::-1]              # positions >= k
    suf_hi = np.zeros_like(suf)
    suf_hi[:, :-1] = suf[:, 1:]                                    # positions > k
    pre_lo = np.cumsum(np.where(is_hi, 0.0, ls), axis=1)
    n_free = np.cumsum(np.where(is_hi, 1, -1), axis=1)
    x_free = np.cumsum(np.where(is_hi, xs, -xs), axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        s = suf_hi + pre_lo + x_free - n_free * b
    s[b == -np.inf] = np.inf          # lam -> -inf: some hi is +inf
    s[b == np.inf] = -np.inf          # lam -> +inf: some lo is -inf

    # First breakpoint with s <= t: lam* lies in (b_{k-1}, b_k]. None -> t < sum lo -> y = lo.
    below = s <= t[:, None]
    k = np.where(below.any(axis=1), np.argmax(below, axis=1), 2 * n)

    # Active set on the open segment (b_{k-1}, b_k): exact linear solve for lam.
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.broadcast_to(np.arange(2 * n), order.shape), axis=1)
    at_hi = pos[:, :n] >= k[:, None]
    at_lo = pos[:, n:] <= (k - 1)[:, None]
    free = ~(at_hi | at_lo)
    nf = free.sum(axis=1)
    rhs = (np.where(free, X, 0.0).sum(axis=1) + np.where(at_hi, H, 0.0).sum(axis=1)
           + np.where(at_lo, L, 0.0).sum(axis=1) - t)
    lam = np.where(nf > 0, rhs / np.maximum(nf, 1), 0.0)
    Y = np.where(at_hi, H, np.where(at_lo, L, X - lam[:, None]))
    # Guard against a segment mis-located by rounding (changes y by ~ulps only).
    return np.clip(Y, L, H)


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
    sum_hi = H.sum(axis=1)
    tol = _FEAS_RTOL * (1.0 + np.abs(t) + _finite_abs_sum(L) + _finite_abs_sum(H)) * max(n, 1)
    bad = sum_lo > t + tol
    if bad.any():
        r = int(np.argmax(bad))
        raise ValueError(f"infeasible projection: sum(lo) = {sum_lo[r]!r} > total = {t[r]!r} "
                         f"(row {r}; {int(bad.sum())} infeasible row(s))")
    if equality:
        bad = sum_hi < t - tol
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
# dispatch
# --------------------------------------------------------------------------------------------
def _box_rows(X: Any, lo: Any = -np.inf, hi: Any = np.inf) -> np.ndarray:
    return project_box(X, lo, hi)


def _capped_rows(X: Any, lo: Any = 0.0, hi: Any = 1.0, total: Any = 1.0) -> np.ndarray:
    return project_capped_simplex(X, lo, hi, total, equality=True)


PROJECTIONS = {
    "box": _box_rows,                    # lo, hi
    "simplex": project_simplex,          # total
    "capped_simplex": _capped_rows,      # lo, hi, total  (sum = total)
    "knapsack_le": project_knapsack,     # lo, hi, total  (sum <= total)
}


def project_rows(kind: str, X: Any, **params: Any) -> np.ndarray:
    """Dispatch a row-wise projection by name.

    ``kind`` is one of ``"box"`` (``lo``, ``hi``), ``"simplex"`` (``total``),
    ``"capped_simplex"`` (``lo``, ``hi``, ``total``; equality) and ``"knapsack_le"``
    (``lo``, ``hi``, ``total``; ``sum <= total``).
    """
    try:
        fn = PROJECTIONS[kind]
    except KeyError:
        raise ValueError(f"unknown projection kind {kind!r}; "
                         f"expected one of {sorted(PROJECTIONS)}") from None
    try:
        return fn(X, **params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for projection {kind!r}: {exc}") from None
