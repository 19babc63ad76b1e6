"""MPI backend of the decentralised solver's message passing (`solvers.dec_comm`).

`MpiComm` implements `dec_comm.Comm` over mpi4py: the network nodes are partitioned over the
ranks by a graph partitioner (`partition_nodes`, METIS through pymetis: graph neighbours stay
together, the parts' work is balanced), each rank holds and computes its own nodes only
(`local_nodes`), and messages between nodes on different ranks travel over a
distributed-graph communicator whose edges are the rank pairs that share a graph edge
(`Create_dist_graph_adjacent`, one `neighbor_alltoallv` per exchange round). Messages between
nodes of one rank are copied in memory. No rank talks to a rank it shares no graph edge with.

Layout. Every rank builds the same relay plans (deterministic) and keeps full-length entry
arrays; only the entries of its own nodes are meaningful. `broadcast` returns an entry array
in which every entry of a quantity that reaches one of this rank's nodes holds the root value
(the value is the same at every entry of a quantity), the others NaN; `reduce` returns the
(Q,) sums (or maxima) at the roots this rank owns (others NaN). The message layout of a level is
implied by the plan (same order on both sides), so only payload floats travel.

Accounting. Each rank charges the messages its own nodes send, exactly as `LocalComm` does;
`snapshot` (collective: every rank calls it) sums the per-node counters over the ranks, so
every rank returns the same per-node numbers as the local backend.

Running it. `mpiexec -n R ...` (a host file extends this across machines: `mpiexec -f hosts
-n R ...`). Outside mpiexec (no process manager in the environment and a world of one
rank) `mpi_world()` raises `MpiUnavailable`; more ranks than nodes raise `ValueError` on every
rank before any collective call, so no rank waits for another.
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from .dec_comm import Comm, RelayPlan, cached_on_plan

__all__ = ["MpiComm", "MpiUnavailable", "mpi_world", "node_work", "partition_nodes",
           "under_mpiexec"]

_PM_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "HYDRA_CONTROL_FD",
            "MPI_LOCALNRANKS")


class MpiUnavailable(ValueError):
    """`--backend mpi` without an MPI launch (or without mpi4py)."""


def under_mpiexec() -> bool:
    """True when a process manager (mpiexec / mpirun / srun) started this process."""
    return any(k in os.environ for k in _PM_VARS)


def mpi_world():
    """MPI.COMM_WORLD of a real MPI launch; MpiUnavailable otherwise (never a hang)."""
    if not under_mpiexec():
        raise MpiUnavailable("option '--backend mpi' needs an MPI launch: run it as "
                             "`mpiexec -n R cefl-opt solve ... --backend mpi` (R ranks; "
                             "`mpiexec -n 1` for one rank)")
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - mpi4py is a dependency
        raise MpiUnavailable(f"option '--backend mpi' needs mpi4py: {e}") from None
    return MPI.COMM_WORLD


def abort_launch_on_failure(code: int) -> None:
    """End every rank of this MPI launch when this one fails (`code` != 0), instead of leaving
    the others waiting in a collective for it: `MPI_Abort(COMM_WORLD, code)`, after this rank's
    message is out. A no-op outside a launch of two or more ranks, and where MPI was never
    initialised (mpi4py not imported)."""
    MPI = sys.modules.get("mpi4py.MPI")
    if code == 0 or MPI is None or not MPI.Is_initialized() or MPI.Is_finalized():
        return
    if MPI.COMM_WORLD.Get_size() < 2:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    MPI.COMM_WORLD.Abort(code)


# ---------------------------------------------------------------------- partition
def node_work(inst) -> np.ndarray:
    """Work of each node (ue*, bs*, dc* order): the number of variables its block holds in the
    block form of P (docs/formulation.md "7. Decomposition into node blocks": own variables
    and copies, per round), which sets the cost of its
    linearisation, projection and dual updates."""
    T, N, B, S = inst.T, inst.N, inst.B, inst.S
    nl = np.array([len(x) for x in inst.ue_links()])
    nb = np.array([len(x) for x in inst.bs_links()])
    ue = T * (3 + 3 * nl + S + 1) + 2
    bs = T * (2 * nb + 3 * S + 4)
    dc = T * (nl.sum() + 3 * B + S + 7) + 2
    return np.concatenate([ue, bs, np.full(S, dc)]).astype(np.int64)


def partition_nodes(adj: Sequence[np.ndarray], nparts: int,
                    weights: np.ndarray | None = None) -> np.ndarray:
    """Rank of every node: METIS k-way partition of the communication graph (pymetis) that
    keeps graph neighbours together (minimal edge cut) and balances the summed `weights`
    (default: one per node). Every part gets at least one node. Deterministic."""
    V = len(adj)
    if nparts < 1:
        raise ValueError(f"number of ranks must be >= 1, got {nparts}")
    if nparts > V:
        raise ValueError(f"{nparts} MPI ranks for {V} network nodes: use at most {V} ranks "
                         f"(each rank needs at least one node)")
    if nparts == 1:
        return np.zeros(V, dtype=np.int64)
    import pymetis
    w = np.ones(V, dtype=np.int64) if weights is None else np.asarray(weights, np.int64)
    opts = pymetis.Options(seed=0)
    _cut, parts = pymetis.part_graph(nparts, adjacency=[a.tolist() for a in adj],
                                     vweights=w.tolist(), options=opts)
    parts = np.asarray(parts, dtype=np.int64)
    # METIS may leave a part empty on tiny graphs: give it the lightest node of the largest part
    for r in range(nparts):
        if not (parts == r).any():
            load = np.bincount(parts, weights=w, minlength=nparts)
            big = int(np.argmax(np.where(np.bincount(parts, minlength=nparts) > 1, load, -1)))
            cand = np.flatnonzero(parts == big)
            parts[cand[np.argmin(w[cand])]] = r
    return parts


# ---------------------------------------------------------------------- communicator
class MpiComm(Comm):
    """`Comm` over MPI ranks (module docstring)."""

    backend = "mpi"

    def __init__(self, graph, node_names: Sequence[str], *, world=None,
                 weights: np.ndarray | None = None, missing: float = np.nan):
        super().__init__(graph, node_names)           # adjacency + connectivity, every rank
        self.missing = float(missing)   # value of the entries / roots this rank does not hold
        self.world = mpi_world() if world is None else world
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()
        V = self.n_nodes
        if self.size > V:  # every rank sees the same sizes: all raise, none waits
            raise ValueError(f"{self.size} MPI ranks for {V} network nodes: use at most {V} "
                             f"ranks (each rank needs at least one node)")
        parts = partition_nodes(self.adj, self.size, weights) if self.rank == 0 else None
        self.owner = np.asarray(self.world.bcast(parts, root=0), dtype=np.int64)
        self._local = np.flatnonzero(self.owner == self.rank)
        self.is_local = self.owner == self.rank
        nbr = sorted({int(self.owner[b]) for a in self._local for b in self.adj[a]}
                     - {self.rank})
        self.nbr_ranks = nbr
        self._slot = {r: i for i, r in enumerate(nbr)}
        self.gcomm = self.world.Create_dist_graph_adjacent(nbr, nbr, reorder=False)
        self._plans: dict[int, list] = {}

    def local_nodes(self) -> np.ndarray:
        return self._local

    # ---------------------------------------------------------------- transport
    def _alltoallv(self, chunks: list[np.ndarray], recv_counts: list[int]) -> list[np.ndarray]:
        """One neighbourhood round: chunks[i] to nbr_ranks[i]; returns what each sent us."""
        from mpi4py import MPI
        send = (np.concatenate(chunks) if chunks else np.zeros(0)).astype(np.float64)
        scounts = [int(c.size) for c in chunks]
        recv = np.empty(int(sum(recv_counts)), dtype=np.float64)
        if self.nbr_ranks:
            self.gcomm.Neighbor_alltoallv([send, (scounts, None), MPI.DOUBLE],
                                          [recv, (recv_counts, None), MPI.DOUBLE])
        offs = np.concatenate([[0], np.cumsum(recv_counts)]).astype(int)
        return [recv[offs[i]:offs[i + 1]] for i in range(len(recv_counts))]

    def exchange(self, outboxes):
        """One synchronous round (collective over the rank graph). `outboxes` holds messages of
        this rank's nodes; the inboxes of this rank's nodes come back."""
        for a in outboxes:
            if not self.is_local[a]:
                raise ValueError(f"rank {self.rank} sends for {self.node_names[a]}, a node of "
                                 f"rank {self.owner[a]}")
        self._check_and_count(outboxes)
        inbox: dict[int, dict[int, np.ndarray]] = {}
        remote: list[list[float]] = [[] for _ in self.nbr_ranks]
        for a, box in outboxes.items():
            for b, payload in box.items():
                p = np.asarray(payload, dtype=float).ravel()
                if self.is_local[b]:
                    inbox.setdefault(b, {})[a] = p.copy()
                else:  # header (from, to, length) then the payload, all float64
                    remote[self._slot[int(self.owner[b])]].extend([a, b, p.size, *p.tolist()])
        chunks = [np.asarray(x, float) for x in remote]
        counts = self._counts([c.size for c in chunks])
        for buf in self._alltoallv(chunks, counts):
            i = 0
            while i < buf.size:
                a, b, n = int(buf[i]), int(buf[i + 1]), int(buf[i + 2])
                inbox.setdefault(b, {})[a] = buf[i + 3:i + 3 + n].copy()
                i += 3 + n
        return inbox

    def _counts(self, send_counts: list[int]) -> list[int]:
        """Exchange the message sizes with the neighbour ranks (one integer each way)."""
        if not self.nbr_ranks:
            return []
        from mpi4py import MPI
        s = np.asarray(send_counts, dtype=np.int64)
        r = np.empty(len(self.nbr_ranks), dtype=np.int64)
        self.gcomm.Neighbor_alltoall([s, MPI.INT64_T], [r, MPI.INT64_T])
        return r.tolist()

    # ---------------------------------------------------------------- collectives
    def _routes(self, plan: RelayPlan) -> list:
        """Per level (parent entries pe, child entries ce): the local edges and, per neighbour
        rank, the edges whose parent is ours and child theirs (down) or the reverse (up)."""
        key = id(plan)
        if key in self._plans and self._plans[key][0] is plan:
            return self._plans[key][1]
        routes = []
        for lev, (pe, ce) in enumerate(plan.levels, start=1):
            po, co = self.owner[plan.entry_node[pe]], self.owner[plan.entry_node[ce]]
            me = self.rank
            loc = (po == me) & (co == me)
            p_me_c = [np.flatnonzero((po == me) & (co == r)) for r in self.nbr_ranks]
            c_me_p = [np.flatnonzero((co == me) & (po == r)) for r in self.nbr_ranks]
            # a reduce's sum sends the children's subtrees' raw entries up (`Comm.reduce`)
            sub_in = [plan.subtrees(ce[ix], lev) for ix in p_me_c]
            sub_out = [plan.subtrees(ce[ix], lev) for ix in c_me_p]
            routes.append((pe, ce, np.flatnonzero(loc), p_me_c, c_me_p, sub_in, sub_out))
        self._plans[key] = (plan, routes)
        return routes

    def _charge(self, msgs: np.ndarray, nbytes: np.ndarray, width: int = 1) -> None:
        self.msgs[self._local] += msgs[self._local]
        self.bytes[self._local] += nbytes[self._local] * width

    def broadcast(self, plan: RelayPlan, root_values: np.ndarray) -> np.ndarray:
        """Entry array: this rank's entries hold their quantity's root value, others
        `missing` (NaN by default). A second axis travels in the same messages."""
        rv = np.asarray(root_values, float)
        tail, m = rv.shape[1:], int(np.prod(rv.shape[1:]))
        self._charge(plan.down_msgs, plan.down_bytes, m)
        vals = np.full((len(plan.entry_q),) + tail, np.nan)
        roots = plan.root_entry
        mine = self.is_local[plan.entry_node[roots]]
        vals[roots[mine]] = rv[mine]
        for pe, ce, loc, down, up, _si, _so in self._routes(plan):
            vals[ce[loc]] = vals[pe[loc]]
            got = self._alltoallv([vals[pe[ix]].ravel() for ix in down],
                                  [ix.size * m for ix in up])
            for ix, buf in zip(up, got):
                vals[ce[ix]] = buf.reshape((ix.size,) + tail)
        known = np.full((plan.n_quantities,) + tail, self.missing)
        mine = self.is_local[plan.entry_node]
        known[plan.entry_q[mine]] = vals[mine]
        return known[plan.entry_q]

    def reduce(self, plan: RelayPlan, entry_values: np.ndarray, op: str = "sum") -> np.ndarray:
        """(Q,) sums (op='sum') or maxima (op='max') over each quantity's tree, at the roots
        this rank owns (NaN at the others)."""
        if op not in ("sum", "max"):
            raise ValueError(f"reduce op {op!r}: expected 'sum' or 'max'")
        part = np.asarray(entry_values, float).copy()
        tail, m = part.shape[1:], int(np.prod(part.shape[1:]))
        self._charge(plan.up_msgs, plan.up_bytes, m)
        for pe, ce, loc, down, up, sub_in, sub_out in reversed(self._routes(plan)):
            if op == "sum":     # raw entries up; the roots add them in entry order
                got = self._alltoallv([part[ix].ravel() for ix in sub_out],
                                      [ix.size * m for ix in sub_in])
                for ix, buf in zip(sub_in, got):
                    part[ix] = buf.reshape((ix.size,) + tail)
                continue
            np.maximum.at(part, pe[loc], part[ce[loc]])
            got = self._alltoallv([part[ce[ix]].ravel() for ix in up],
                                  [ix.size * m for ix in down])
            for ix, buf in zip(down, got):
                np.maximum.at(part, pe[ix], buf.reshape((ix.size,) + tail))
        out = plan.summer() @ part if op == "sum" else part[plan.root_entry]
        out[~self.is_local[plan.entry_node[plan.root_entry]]] = self.missing
        return out

    def reduce_product(self, plan: RelayPlan, maps, x: np.ndarray) -> np.ndarray:
        """`Comm.reduce_product` with each map cut to this rank's entries (its nodes' own
        data: the other entries' values are never sent from here)."""
        loc = cached_on_plan(plan, ("mpi_own",), plan,
                             lambda: np.flatnonzero(self.is_local[plan.entry_node]))
        ent = np.zeros((len(plan.entry_q), len(maps)))
        for j, S in enumerate(maps):
            ent[loc, j] = cached_on_plan(plan, ("mpi_rows", j), S, lambda: S[loc]) @ x
        return self.reduce(plan, ent)

    def broadcast_sum(self, plan: RelayPlan, root_values: np.ndarray, maps, powers
                      ) -> np.ndarray:
        """`LocalComm.broadcast_sum`'s one product (the maps side by side, each row's terms in
        one sum: the same floating-point sums) for the rows that read only this rank's
        entries (NaN at the others)."""
        e = self.broadcast(plan, root_values)
        rows, Sl, other = cached_on_plan(
            plan, ("mpi_cols_sum",), tuple(maps),
            lambda: _own_rows(sp.hstack([sp.csr_matrix(S) for S in maps], format="csr"),
                              np.tile(self.is_local[plan.entry_node].astype(float),
                                      len(maps))))
        r = np.zeros(maps[0].shape[0])
        r[other] = np.nan
        r[rows] = Sl @ np.concatenate([e if p == 1 else e ** p for p in powers])
        return r

    def broadcast_product(self, plan: RelayPlan, root_values: np.ndarray, maps, powers
                          ) -> list[np.ndarray]:
        """`Comm.broadcast_product` computed for the rows that read only this rank's entries
        (NaN at the others, as the full product would give)."""
        e = self.broadcast(plan, root_values)
        out = []
        for j, (S, p) in enumerate(zip(maps, powers)):
            rows, Sl, other = cached_on_plan(
                plan, ("mpi_cols", j), S,
                lambda: _own_rows(S, self.is_local[plan.entry_node].astype(float)))
            r = np.zeros(S.shape[0])
            r[other] = np.nan
            r[rows] = Sl @ (e if p == 1 else e ** p)
            out.append(r)
        return out

    # ---------------------------------------------------------------- accounting
    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-node (messages, bytes) since the last snapshot, summed over the ranks
        (collective); resets the counters."""
        from mpi4py import MPI
        m, b = np.empty_like(self.msgs), np.empty_like(self.bytes)
        self.world.Allreduce([self.msgs, MPI.INT64_T], [m, MPI.INT64_T])
        self.world.Allreduce([self.bytes, MPI.INT64_T], [b, MPI.INT64_T])
        self.total_msgs += int(m.sum())
        self.total_bytes += int(b.sum())
        self.msgs[:] = 0
        self.bytes[:] = 0
        return m, b

    def gather_to_root(self, values: dict[int, object]) -> dict[int, object] | None:
        """Rank 0 collects every rank's per-node results {node: value} (for writing the
        solution); None on the other ranks."""
        parts = self.world.gather(values, root=0)
        if self.rank != 0:
            return None
        out: dict[int, object] = {}
        for p in parts:
            out.update(p)
        return out


def _own_rows(S, own: np.ndarray):
    """(rows of S that read only entries marked in `own`, S cut to them, rows reading others)."""
    S = sp.csr_matrix(S)
    nnz = np.diff(S.indptr)
    mine = np.bincount(np.repeat(np.arange(S.shape[0]), nnz), weights=own[S.indices],
                       minlength=S.shape[0])
    rows = np.flatnonzero(mine == nnz)
    return rows, S[rows], np.flatnonzero(mine < nnz)
