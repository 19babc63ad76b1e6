"""Run under `mpiexec -n R python tests/mpi/comm_check.py PRESET [--reach K]`: MpiComm's
neighbour exchange, broadcast, reduce (sum, max) and per-node accounting equal LocalComm's on
every rank's own nodes. Exit 0 when every rank agrees, 1 otherwise; rank 0 prints a summary."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from cefl_opt.generator import make_instance
from cefl_opt.solvers.dec_comm import LocalComm
from cefl_opt.solvers.mpi_backend import MpiComm, node_work


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("preset")
    ap.add_argument("--ues", type=int)
    ap.add_argument("--bss", type=int)
    ap.add_argument("--dcs", type=int)
    ap.add_argument("--reach", type=int)
    a = ap.parse_args()
    inst = make_instance(a.preset, ues=a.ues, bss=a.bss, dcs=a.dcs, reach=a.reach, seed=4)
    g, names = inst.graph(), inst.node_names()
    try:
        comm = MpiComm(g, names, weights=node_work(inst))
    except ValueError as e:
        print(f"rank error: {e}", file=sys.stderr)
        return 2
    ref = LocalComm(g, names)
    me, V = comm.local_nodes(), comm.n_nodes
    bad: list[str] = []
    # 1. exchange: node a sends f(a, b) to every neighbour b (some payloads empty)
    def payload(x, y):
        return x * 1000.0 + y + 0.5 * np.arange((x + y) % 3)
    full = {x: {int(y): payload(x, int(y)) for y in ref.adj[x]} for x in range(V)}
    got = comm.exchange({x: full[x] for x in me})
    want = ref.exchange(full)
    for y in me:
        w = {k: v for k, v in want.get(int(y), {}).items()}
        gy = got.get(int(y), {})
        if set(gy) != set(w) or any(not np.array_equal(gy[k], w[k]) for k in w):
            bad.append(f"exchange inbox of {names[y]}")
    # 2. collectives on a random plan (same seed on every rank)
    rng = np.random.default_rng(7)
    Q = 60
    roots = rng.integers(0, V, Q)
    members = [rng.choice(V, size=int(rng.integers(1, min(V, 12) + 1)), replace=False)
               for _ in range(Q)]
    plan, plan_ref = comm.plan(roots, members), ref.plan(roots, members)
    rv = rng.normal(size=Q)
    ent = rng.normal(size=len(plan.entry_q))
    b1, b0 = comm.broadcast(plan, rv), ref.broadcast(plan_ref, rv)
    mine = comm.is_local[plan.entry_node]
    seen = np.isin(plan.entry_q, plan.entry_q[mine])  # quantities reaching one of our nodes
    if not np.array_equal(b1[seen], b0[seen]) or not np.isnan(b1[~seen]).all():
        bad.append("broadcast")
    owned = comm.is_local[roots]
    r1, r0 = comm.reduce(plan, ent), ref.reduce(plan_ref, ent)
    if not np.array_equal(r1[owned], r0[owned]):      # the same sums, bit for bit
        bad.append("reduce sum")
    truth = np.array([ent[plan.entry_q == q].max() for q in range(Q)])
    if not np.array_equal(comm.reduce(plan, ent, op="max")[owned], truth[owned]):
        bad.append("reduce max")
    ref.reduce(plan_ref, ent)  # charge the same messages as the max reduce
    # 3. the composed collectives: per-entry maps of per-row data (each entry's row data on
    # its own node: rows are hosted where they read), and per-row maps of the entries
    import scipy.sparse as sp
    K = 40
    host = rng.integers(0, V, K)
    E = len(plan.entry_q)
    pairs = [(e, k) for e in range(E) for k in range(K) if plan.entry_node[e] == host[k]
             and rng.random() < 0.3]
    er = np.array([p[0] for p in pairs], int)
    kr = np.array([p[1] for p in pairs], int)
    vals = rng.normal(size=len(pairs))
    Se = sp.csr_matrix((vals, (er, kr)), shape=(E, K))
    Sr = sp.csr_matrix((vals, (kr, er)), shape=(K, E))
    x = rng.normal(size=K)
    p1, p0 = comm.reduce_product(plan, [Se, 2 * Se], x), ref.reduce_product(plan_ref,
                                                                           [Se, 2 * Se], x)
    if not np.array_equal(p1[owned], p0[owned]):
        bad.append(f"reduce_product: largest difference "
                   f"{np.max(np.abs(p1[owned] - p0[owned]), initial=0.0)}")
    # a rank knows its own entries' pattern only (e.g. the live Jacobian entries, which each
    # host finds for its own rows): the same sums, bit for bit
    mine = Se.copy()                      # the rows of other ranks' entries emptied
    mine.data[~np.repeat(comm.is_local[plan.entry_node], np.diff(Se.indptr))] = 0.0
    mine.eliminate_zeros()
    p2 = comm.reduce_product(plan, [mine, 2 * mine], x)
    ref.reduce_product(plan_ref, [Se, 2 * Se], x)   # the same messages
    if not np.array_equal(p2[owned], p0[owned]):
        bad.append("reduce_product with each rank's own pattern only")
    q1 = comm.broadcast_product(plan, rv, [Sr, Sr], (1, 2))
    q0 = ref.broadcast_product(plan_ref, rv, [Sr, Sr], (1, 2))
    mine_rows = comm.is_local[host]
    for a, b in zip(q1, q0):
        if not np.array_equal(a[mine_rows], b[mine_rows]):
            bad.append("broadcast_product")
    m1, by1 = comm.snapshot()
    m0, by0 = ref.snapshot()
    if not (np.array_equal(m1, m0) and np.array_equal(by1, by0)):
        bad.append("per-node messages/bytes")
    sizes = np.bincount(comm.owner, minlength=comm.size).tolist()
    cut = sum(int(comm.owner[x] != comm.owner[y]) for x in range(V) for y in ref.adj[x]) // 2
    hops = max(comm._rank_routes(plan)["rounds"], comm._diameter)   # rank hops of a value
    return verdict(comm, bad, f"ranks {comm.size}, nodes per rank {sizes}, cut edges {cut}, "
                              f"messages {int(m1.sum())}, bytes {int(by1.sum())}, "
                              f"rank hops {hops}")


def verdict(comm, bad: list[str], header: str) -> int:
    """Every rank's mismatches, printed by rank 0 after `header`, then OK or FAILED; the exit
    code (0 when no rank found one)."""
    flags = comm.world.allgather(bad)
    if comm.rank == 0:
        print(header)
        for r, f in enumerate(flags):
            for x in f:
                print(f"rank {r}: MISMATCH {x}")
        print("OK" if not any(flags) else "FAILED")
    return 0 if not any(flags) else 1


if __name__ == "__main__":
    sys.exit(main())
