"""Compiled sparse sums of the inner loop, adding in scipy's order (bit for bit).

scipy's `csr_matvec` computes row k of ``A @ x`` as one running sum from 0.0,
``s += data[t] * x[indices[t]]`` over the row's nonzeros in storage order. The kernels here
make the same additions in the same order, so they return the numbers of the products they
replace, without the per-call cost of scipy's dispatch and of the temporaries around it
(stacked vectors, squared copies). Indices are read as unsigned integers: numba then skips
its negative-index test on every access, which otherwise costs more than the product.

* `accumulate_rows(indptr, indices, data, x, square, out)`: ``out += A @ x`` (or
  ``A @ x**2``) as one running sum per row that continues from ``out[k]``: called once per
  block of ``hstack([A0, A1]) @ concatenate([x0, x1])`` it adds as that product does.
* `entry_sums(qptr, eptr, xi, data0, data1, x, out0, out1)`: per quantity, its entries'
  term sums added in entry order, for two maps of one pattern in one pass, from the terms
  laid out in the order they are added (`dec_comm.LocalComm.reduce_product`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["accumulate_rows", "entry_sums", "unsigned_csr"]


def unsigned_csr(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A CSR pattern as the kernels read it: row pointers as uint64, column indices as
    uint32."""
    return (np.ascontiguousarray(indptr, dtype=np.uint64),
            np.ascontiguousarray(indices, dtype=np.uint32))


@njit(cache=True, nogil=True)
def accumulate_rows(indptr, indices, data, x, square, out) -> None:
    """out[k] = out[k] + sum_t data[t] * x[indices[t]] (x squared as x * x where `square`,
    as numpy squares an array) over row k's nonzeros in storage order, one running sum per
    row starting from out[k]."""
    for k in range(len(out)):
        s = out[k]
        t = indptr[k]
        end = indptr[k + 1]
        if square:
            while t < end:
                xv = x[indices[t]]
                s += data[t] * (xv * xv)
                t += np.uint64(1)
        else:
            while t < end:
                s += data[t] * x[indices[t]]
                t += np.uint64(1)
        out[k] = s


@njit(cache=True, nogil=True)
def entry_sums(qptr, eptr, xi, data0, data1, x, out0, out1) -> None:
    """out0[q] and out1[q], for two maps of one pattern: the sum over quantity q's entries
    k in qptr[q]:qptr[q + 1] (in that order; entries without terms left out) of each
    entry's terms data[t] * x[xi[t]], t in eptr[k]:eptr[k + 1] (the terms stored in the
    order they are added, so only x is gathered): an entry with one term adds that
    product, a longer one the running sum of its terms from 0.0: `Comm.reduce_product`'s
    sums (``S @ x`` per entry, then the root's sum in entry order; an entry without terms
    adds 0.0, which changes no sum that starts from +0.0)."""
    for q in range(len(out0)):
        s0 = 0.0
        s1 = 0.0
        k = qptr[q]
        kend = qptr[q + 1]
        while k < kend:
            t = eptr[k]
            end = eptr[k + np.uint64(1)]
            if end - t == np.uint64(1):
                xv = x[xi[t]]
                s0 += data0[t] * xv
                s1 += data1[t] * xv
            else:
                p0 = 0.0
                p1 = 0.0
                while t < end:
                    xv = x[xi[t]]
                    p0 += data0[t] * xv
                    p1 += data1[t] * xv
                    t += np.uint64(1)
                s0 += p0
                s1 += p1
            k += np.uint64(1)
        out0[q] = s0
        out1[q] = s1
