"""Run under `mpiexec -n 2 python tests/mpi/exchange_check.py`: the MPI backend's exchanges
between the ranks, counted against independent truth on two ranks (one rank hop apart):

* a broadcast is one exchange carrying, from each rank, one float per quantity rooted there
  that reaches a node of the other rank; a reduce is one exchange carrying every raw entry
  value whose root lives on the other rank (width floats each); `global_max` is one exchange
  of one float;
* `reduce_product` carries only the entries with terms in some map (the others are 0.0 and
  add nothing): one exchange of 2 floats per such entry rooted on the other rank, after one
  exchange per new set of maps that tells the ranks which entries those are; its sums equal
  the reduce of every entry's value bit for bit;
* an inner solve (PDHG) of `it` iterations is 2 + 2 it + (its KKT tests) exchanges: the step
  sizes' reduce and the surrogate's marks of the entries with terms, then per iteration one
  reduce and one broadcast (the KKT test's broadcast travels with the step's), and one max
  per KKT test.
Exit 0 when every rank agrees, 1 otherwise; rank 0 prints a summary."""
from __future__ import annotations

import sys

import numpy as np

from cefl_opt.generator import make_instance
from cefl_opt.solvers import primal_dual
from cefl_opt.solvers.decentralized import make_comm, solve_decentralized
from comm_check import verdict   # this folder is on sys.path: the checks run as scripts


def _delta(comm, fn):
    x0, b0 = comm.exchanges, comm.exchange_bytes
    fn()
    return comm.exchanges - x0, comm.exchange_bytes - b0


def collectives(comm, bad: list[str]) -> None:
    rng = np.random.default_rng(11)
    V, Q, me = comm.n_nodes, 50, comm.rank
    roots = rng.integers(0, V, Q)
    members = [rng.choice(V, size=int(rng.integers(1, min(V, 10) + 1)), replace=False)
               for _ in range(Q)]
    plan = comm.plan(roots, members)
    er = comm.owner[plan.entry_node]
    root_rank = comm.owner[roots]
    other_has = np.zeros(Q, dtype=bool)
    other_has[plan.entry_q[er != me]] = True
    want_b = 8 * int(np.sum((root_rank == me) & other_has))
    got = _delta(comm, lambda: comm.broadcast(plan, rng.normal(size=Q)))
    if got != (1, want_b):
        bad.append(f"broadcast: (exchanges, bytes) {got}, expected (1, {want_b})")
    want_r = 16 * int(np.sum((er == me) & (root_rank[plan.entry_q] != me)))
    got = _delta(comm, lambda: comm.reduce(plan, rng.normal(size=(len(er), 2))))
    if got != (1, want_r):
        bad.append(f"reduce: (exchanges, bytes) {got}, expected (1, {want_r})")
    got = _delta(comm, lambda: comm.broadcast_sums(
        plan, [rng.normal(size=Q), rng.normal(size=Q)], [np.eye(len(er))[:3]], (1,)))
    if got != (1, 2 * want_b):
        bad.append(f"broadcast_sums: (exchanges, bytes) {got}, expected (1, {2 * want_b})")
    product(comm, plan, rng, bad)
    gplan = comm.plan(np.array([0]), [np.arange(V)])
    vals = rng.normal(size=len(gplan.entry_q))
    top = {}
    got = _delta(comm, lambda: top.setdefault("v", comm.global_max(gplan, vals)))
    if got != (1, 8) or top["v"] != vals.max():
        bad.append(f"global_max: (exchanges, bytes) {got}, value {top['v']} vs {vals.max()}")


def product(comm, plan, rng, bad: list[str]) -> None:
    """Two maps (entries x 30) that fill this rank's entries only, half of them with no terms:
    the bytes of a call after the first, and its sums against `reduce`'s."""
    import scipy.sparse as sp
    E, me = len(plan.entry_q), comm.rank
    er = comm.owner[plan.entry_node]
    mask = np.repeat((er == me) & (np.arange(E) % 2 == 0), 30).reshape(E, 30)
    maps = [sp.csr_matrix(np.where(mask & (rng.random((E, 30)) < 0.3),
                                   rng.normal(size=(E, 30)), 0.0)) for _ in range(2)]
    x = rng.normal(size=30)
    comm.reduce_product(plan, maps, x)                 # the marks travel with the first call
    out = {}
    got = _delta(comm, lambda: out.setdefault("v", comm.reduce_product(plan, maps, x)))
    live = (np.diff(maps[0].indptr) > 0) | (np.diff(maps[1].indptr) > 0)
    root_rank = comm.owner[plan.entry_node[plan.root_entry]][plan.entry_q]
    want = 16 * int(np.sum(live & (root_rank != me)))
    if got != (1, want):
        bad.append(f"reduce_product: (exchanges, bytes) {got}, expected (1, {want})")
    ref = comm.reduce(plan, np.column_stack([S @ x for S in maps]))
    if not np.array_equal(out["v"], ref, equal_nan=True):
        bad.append("reduce_product: sums differ from the reduce of every entry's value")


def inner_solves(comm, bad: list[str]) -> int:
    seen: list[tuple[int, int, int]] = []
    orig = primal_dual.InnerSolver.solve

    def counted(self, *a, **kw):
        x0 = comm.exchanges
        out = orig(self, *a, **kw)
        seen.append((comm.exchanges - x0, out[1]["inner_iters"], self.k.inner_iters))
        return out
    primal_dual.InnerSolver.solve = counted
    try:
        inst = make_instance("paper", rounds=2, seed=7101)
        solve_decentralized(inst, max_outer=2, comm=comm)
    finally:
        primal_dual.InnerSolver.solve = orig
    for x, it, cap in seen:
        checks = it // 10 + (1 if it == cap and it % 10 else 0)
        if x != 2 + 2 * it + checks:
            bad.append(f"inner solve of {it} iterations: {x} exchanges, expected "
                       f"{2 + 2 * it + checks}")
    return sum(s[1] for s in seen)


def main() -> int:
    inst = make_instance("paper", rounds=2, seed=7101)
    comm = make_comm(inst, "mpi", "decentralized")
    if comm.size != 2:
        print("exchange_check runs on exactly 2 ranks", file=sys.stderr)
        return 2
    bad: list[str] = []
    collectives(comm, bad)
    inner = inner_solves(comm, bad)
    return verdict(comm, bad, f"inner iterations {inner}")


if __name__ == "__main__":
    sys.exit(main())
