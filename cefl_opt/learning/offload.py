"""Offloading as data movement (docs/training.md): a round's ``rho_nb``, ``rho_bs`` move real sample
indices UE -> BS -> DC.

Fractional shares become integer counts by largest-remainder rounding, so counts are conserved
exactly at every hop: UE n keeps ``Dbar_n - sum_b n_nb[n, b]`` samples, BS b collects
``sum_n n_nb[n, b]`` and forwards all of them, split over the DCs by ``rho_bs[b, :]``.
"""
from __future__ import annotations

import numpy as np

from ..instance import InstanceError


def largest_remainder(total: int, shares) -> np.ndarray:
    """Integers ``k`` with ``sum(k) == total`` and ``k ~ total * shares / sum(shares)``.

    Floors first, then gives the leftover units to the largest fractional parts (ties: lower
    index first). ``shares`` must be >= 0 with a positive sum (or total == 0).
    """
    total = int(total)
    w = np.asarray(shares, dtype=float)
    if total < 0:
        raise InstanceError(f"cannot split a negative count {total}")
    if w.size == 0 or np.any(~np.isfinite(w)) or np.any(w < 0):
        raise InstanceError(f"shares must be finite and >= 0, got {w.tolist()}")
    s = w.sum()
    if total == 0:
        return np.zeros(w.shape, dtype=np.int64)
    if s <= 0:
        raise InstanceError(f"cannot split {total} samples over all-zero shares")
    exact = total * (w / s)
    k = np.floor(exact).astype(np.int64)
    left = total - int(k.sum())
    if left > 0:
        order = np.argsort(-(exact - k), kind="stable")
        k[order[:left]] += 1
    return k


#: slack of the share checks: a solver's round-off (P's own feasibility tolerance is 1e-6)
SHARE_TOL = 1e-6


def check_shares(rho_nb, rho_bs, where: str = "") -> None:
    """InstanceError unless the shares can move real data: every rho >= 0 and each UE sends
    at most all of its data (sum_b rho_nb <= 1, eq. rhoUE-BS), within `SHARE_TOL` (rho_bs is
    normalised per BS by `offload_counts`). `where` prefixes the message."""
    rho_nb, rho_bs = np.asarray(rho_nb, float), np.asarray(rho_bs, float)
    for name, rho in (("rho_nb", rho_nb), ("rho_bs", rho_bs)):
        if rho.size and rho.min() < -SHARE_TOL:
            idx = np.unravel_index(int(np.argmin(rho)), rho.shape)
            raise InstanceError(f"{where}field '{name}' has a negative share "
                                f"{rho[idx]:.6g} at {list(map(int, idx))}")
    sent = rho_nb.sum(axis=1)
    if sent.size and sent.max() > 1.0 + SHARE_TOL:
        n = int(np.argmax(sent))
        raise InstanceError(f"{where}field 'rho_nb': UE {n} offloads {100 * sent[n]:.6g} % of "
                            f"its data (sum_b rho_nb = {sent[n]:.6g} > 1)")


def offload_counts(sizes, rho_nb, rho_bs):
    """Integer data movement of one round.

    Returns ``(n_nb[N, B], n_bs[B, S], D[I])``: samples UE n sends to BS b, samples BS b sends to
    DC s, and the samples each DPU (N UEs then S DCs) trains on. ``sum(D) == sum(sizes)``.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    check_shares(rho_nb, rho_bs)
    rho_nb = np.clip(np.asarray(rho_nb, dtype=float), 0.0, 1.0)
    rho_bs = np.clip(np.asarray(rho_bs, dtype=float), 0.0, 1.0)
    N, B = rho_nb.shape
    S = rho_bs.shape[1]
    if sizes.shape != (N,) or rho_bs.shape[0] != B:
        raise InstanceError(f"offload shapes do not match: sizes {list(sizes.shape)}, rho_nb "
                            f"{list(rho_nb.shape)}, rho_bs {list(rho_bs.shape)}")
    n_nb = np.zeros((N, B), dtype=np.int64)
    for n in range(N):
        keep = max(0.0, 1.0 - rho_nb[n].sum())   # sum_b rho_nb <= 1 up to round-off
        k = largest_remainder(sizes[n], np.append(rho_nb[n], keep))
        n_nb[n] = k[:B]
    D_b = n_nb.sum(axis=0)
    n_bs = np.zeros((B, S), dtype=np.int64)
    for b in range(B):
        if D_b[b] == 0:
            continue
        if rho_bs[b].sum() <= 0:
            raise InstanceError(f"BS {b} receives {D_b[b]} samples but rho_bs[{b}] is all zero")
        n_bs[b] = largest_remainder(D_b[b], rho_bs[b])
    D = np.concatenate([sizes - n_nb.sum(axis=1), n_bs.sum(axis=0)])
    return n_nb, n_bs, D


def offload(ue_indices: list[np.ndarray], rho_nb, rho_bs, rng: np.random.Generator | None = None):
    """Move sample indices UE -> BS -> DC. Returns one index array per DPU (N UEs, then S DCs).

    Which of a UE's (or BS's) samples go where is random when ``rng`` is given, in order
    otherwise. The multiset of all indices is unchanged.
    """
    sizes = np.array([len(ix) for ix in ue_indices], dtype=np.int64)
    n_nb, n_bs, _ = offload_counts(sizes, rho_nb, rho_bs)
    N, B = n_nb.shape
    S = n_bs.shape[1]
    at_bs: list[list[np.ndarray]] = [[] for _ in range(B)]
    out: list[np.ndarray] = []
    for n in range(N):
        ix = np.asarray(ue_indices[n], dtype=np.int64)
        if rng is not None:
            ix = ix[rng.permutation(ix.size)]
        pos = 0
        for b in range(B):
            k = int(n_nb[n, b])
            if k:
                at_bs[b].append(ix[pos:pos + k])
                pos += k
        out.append(ix[pos:])
    at_dc: list[list[np.ndarray]] = [[] for _ in range(S)]
    for b in range(B):
        ix = np.concatenate(at_bs[b]) if at_bs[b] else np.zeros(0, dtype=np.int64)
        if rng is not None and ix.size:
            ix = ix[rng.permutation(ix.size)]
        pos = 0
        for s in range(S):
            k = int(n_bs[b, s])
            if k:
                at_dc[s].append(ix[pos:pos + k])
                pos += k
    for s in range(S):
        out.append(np.concatenate(at_dc[s]) if at_dc[s] else np.zeros(0, dtype=np.int64))
    return out
