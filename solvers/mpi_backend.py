"""MPI backend of the decentralised solver's message passing (`solvers.dec_comm`).

`MpiComm` implements `dec_comm.Comm` over mpi4py: the network nodes are partitioned over the
ranks by a graph partitioner (`partition_nodes`, METIS through pymetis: graph neighbours stay
together, the parts' work and memory are balanced: `node_weights`), each rank holds and
computes its own nodes only (`local_nodes`), and messages between nodes on different ranks
travel over a distributed-graph communicator whose edges are the rank pairs that share a graph
edge (`Create_dist_graph_adjacent`, one `neighbor_alltoallv` per exchange; 'Exchanges' below).
Messages between nodes of one rank are copied in memory. No rank talks to a rank it shares no
graph edge with.

Layout. Every rank builds the same relay plans (deterministic), then sizes its collectives'
arrays by what it holds: a broadcast works on the quantities this rank roots, hears or relays
(`_broadcast_layout`), a reduce on the entries of its own nodes and those it relays or sums
(`MpiComm._reduce_layout`, rows of a (entries, width) array: its own entries' send chunks
leave as slices and every received chunk lands in one). `broadcast` returns an entry array
in which every entry of a quantity that reaches one of this rank's nodes holds the root value
(the value is the same at every entry of a quantity), the others `missing`; `reduce` returns
the (Q,) sums (or maxima) at the roots this rank owns (others `missing`). The inner loop's
composed collectives never touch a full-length entry array: `reduce_product` maps its nodes'
data to its entries by one product, `broadcast_sum` maps the heard values to its rows.

Exchanges. The relay trees fix what each node sends and is charged for (`dec_comm`); between
the ranks a value travels the BFS tree of the rank graph rooted at its root's rank (ties to
the smallest rank, `_rank_bfs`), one exchange per rank hop, each carrying every quantity of
that hop from all the nodes of the rank (`_rank_routes`). A broadcast sends each quantity once
per rank hop towards every rank holding one of its entries; a reduce moves every raw entry
value to its root's rank (a rank at depth k of the tree sends in round `rounds - k + 1`, after
the ranks below it), where the root adds its quantity's entries in entry order, the sum one
process computes (a rank's partial sums would send fewer floats but add in another order, and
the solver's path depends on the last bits of these sums: docs/scale-mpi.md). The inner
loop's reduce (`reduce_product`) moves only the entries with terms in its maps: the others
are 0.0 and add nothing to any sum, and which ones they are travels once per set of maps
(`_live_layout`). The layout of every round follows from the plan (the same on both sides),
so only payload floats travel, and a round's received values land in place. No rank waits
inside a blocking MPI call: every exchange and sum is a non-blocking request, and the few
blocking collectives (start-up, reports) follow a non-blocking barrier; a rank tests the
request and yields its core between tests (`wait`; on a machine with as many cores as ranks
this costs nothing, on a loaded one the rank it waits for gets the core sooner), so a signal
reaches every rank, each of which says why it ends. `broadcast_sums` carries several
vectors in one broadcast; `global_max` floods each rank's max over the rank graph (its
diameter in exchanges). Each rank counts its exchanges, the bytes it sends and the time inside
them (`exchange_report`).

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
import time
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from .dec_comm import Comm, RelayPlan, cached_on_plan

__all__ = ["MpiComm", "MpiUnavailable", "arrive", "mpi_world", "node_memory", "node_weights",
           "node_work", "partition_nodes", "under_mpiexec", "wait"]

_PM_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "HYDRA_CONTROL_FD",
            "MPI_LOCALNRANKS")
_HYDRA_VARS = ("HYDI_CONTROL_FD", "HYDRA_CONTROL_FD")   # set by Hydra's proxy in each rank


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
    the others waiting in a collective for it, after this rank's message is out. Under MPICH's
    Hydra (`mpiexec`; `_HYDRA_VARS` in the rank's environment) the rank exits with `code`
    without finalising MPI, and Hydra ends the other ranks and exits with that code, removing
    its files in /tmp; its `MPI_Abort` would leave its topology file there. Under any other
    launcher: `MPI_Abort(COMM_WORLD, code)`. A no-op outside a launch of two or more ranks,
    and where MPI was never initialised (mpi4py not imported)."""
    MPI = sys.modules.get("mpi4py.MPI")
    if code == 0 or MPI is None or not MPI.Is_initialized() or MPI.Is_finalized():
        return
    if MPI.COMM_WORLD.Get_size() < 2:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if any(k in os.environ for k in _HYDRA_VARS):
        os._exit(code)
    MPI.COMM_WORLD.Abort(code)


def wait(req) -> None:
    """Wait for the non-blocking MPI request `req`, testing it and yielding the core between
    tests (on a loaded machine the rank waited for gets it sooner). Unlike a blocking call,
    the wait returns to Python between tests, so a signal's handler (Ctrl-C, SIGTERM) runs in
    a rank whose peers have not arrived yet: every rank of an interrupted launch says why it
    ends, instead of being killed by the launcher while deaf inside a collective."""
    while not req.Test():
        os.sched_yield()


def arrive(comm) -> None:
    """Return once every rank of `comm` has called it (a non-blocking barrier, `wait`ed on): a
    blocking collective right after it finds every rank there, so it holds none for long."""
    wait(comm.Ibarrier())


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


def node_memory(inst) -> np.ndarray:
    """Relative memory of each node (ue*, bs*, dc* order) on the rank that holds it: its
    variables (`node_work`) plus 4 per nonlinear term of its rows and share, as the AMPL
    library holds several times a Pyomo variable's memory per term (the factor and its
    measurements: docs/scale-mpi.md, "MPI backend"). A UE's delay row and energy each have a
    term per (link, DC) pair, so UEs weigh far more here than in `node_work`."""
    T, N, B, S = inst.T, inst.N, inst.B, inst.S
    nl = np.array([len(x) for x in inst.ue_links()])
    nb = np.array([len(x) for x in inst.bs_links()])
    terms = np.concatenate([T * (2 * nl * S + 3 * nl + 6), T * (3 * S + 2 * nb),
                            np.full(S, T * (3 * B + 2 * S + 8))])
    return node_work(inst) + 4 * terms.astype(np.int64)


def node_weights(inst) -> np.ndarray:
    """(V, 2): `node_work` and `node_memory`, the two loads `partition_nodes` weighs."""
    return np.stack([node_work(inst), node_memory(inst)], axis=1)


def partition_nodes(adj: Sequence[np.ndarray], nparts: int,
                    weights: np.ndarray | None = None) -> np.ndarray:
    """Rank of every node: METIS k-way partition of the communication graph (pymetis) that
    keeps graph neighbours together (minimal edge cut) and balances the summed `weights`
    (default: one per node). With (V, k) weights (k loads, e.g. `node_weights`): of the
    partitions balancing each load and the sum of the loads as fractions of their totals, the
    one whose largest share of any load on one rank is the smallest (the first on ties).
    Every part gets at least one node. Deterministic."""
    V = len(adj)
    if nparts < 1:
        raise ValueError(f"number of ranks must be >= 1, got {nparts}")
    if nparts > V:
        raise ValueError(f"{nparts} MPI ranks for {V} network nodes: use at most {V} ranks "
                         f"(each rank needs at least one node)")
    if nparts == 1:
        return np.zeros(V, dtype=np.int64)
    w = np.ones(V, dtype=np.int64) if weights is None else np.asarray(weights, np.int64)
    if w.ndim == 1:
        return _metis_parts(adj, nparts, w)
    frac = w / np.maximum(w.sum(axis=0), 1)
    cands = [w[:, j] for j in range(w.shape[1])] + [np.maximum(
        np.rint(frac.sum(axis=1) * 1e9), 1).astype(np.int64)]
    parts = [_metis_parts(adj, nparts, c) for c in cands]
    worst = [max(np.bincount(p, weights=frac[:, j], minlength=nparts).max()
                 for j in range(w.shape[1])) for p in parts]
    return parts[int(np.argmin(worst))]


def _metis_parts(adj: Sequence[np.ndarray], nparts: int, w: np.ndarray) -> np.ndarray:
    """`partition_nodes` for one load `w` (V,)."""
    import pymetis
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
        arrive(self.world)          # rank 0 partitions while the others wait
        self.owner = np.asarray(self.world.bcast(parts, root=0), dtype=np.int64)
        self._local = np.flatnonzero(self.owner == self.rank)
        self.is_local = self.owner == self.rank
        nbr = sorted({int(self.owner[b]) for a in self._local for b in self.adj[a]}
                     - {self.rank})
        self.nbr_ranks = nbr
        self._slot = {r: i for i, r in enumerate(nbr)}
        self.gcomm = self.world.Create_dist_graph_adjacent(nbr, nbr, reorder=False)
        self._plans: dict[int, tuple] = {}
        self._rank_tree = _rank_bfs(self.owner, self.adj, self.size)
        self._diameter = int(self._rank_tree[1].max())
        self.exchanges = 0           # neighbour exchanges (collectives over the rank graph)
        self.exchange_bytes = 0      # payload bytes this rank sent to other ranks
        self.exchange_s = 0.0        # wall time inside them (mostly waiting for the others)

    def local_nodes(self) -> np.ndarray:
        return self._local

    # ---------------------------------------------------------------- transport
    def _alltoallv(self, chunks: list[np.ndarray], recv_counts: list[int],
                   recv: np.ndarray | None = None) -> list[np.ndarray]:
        """One neighbourhood round: chunks[i] to nbr_ranks[i]; returns what each sent us, as
        consecutive views of `recv` (a float64 buffer of sum(recv_counts) values that the
        caller may pass, so that the values land where it wants them: no copy)."""
        from mpi4py import MPI
        t0 = time.perf_counter()
        if len(chunks) == 1:
            send = np.ascontiguousarray(chunks[0], dtype=np.float64)
        else:
            send = np.concatenate(chunks).astype(np.float64, copy=False) if chunks \
                else np.zeros(0)
        scounts = [int(c.size) for c in chunks]
        if recv is None:
            recv = np.empty(int(sum(recv_counts)), dtype=np.float64)
        if self.nbr_ranks:
            req = self.gcomm.Ineighbor_alltoallv([send, (scounts, None), MPI.DOUBLE],
                                                 [recv, (recv_counts, None), MPI.DOUBLE])
            wait(req)
        self.exchanges += 1
        self.exchange_bytes += 8 * send.size
        self.exchange_s += time.perf_counter() - t0
        out, at = [], 0
        for c in recv_counts:
            out.append(recv[at:at + c])
            at += c
        return out

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
        t0 = time.perf_counter()
        s = np.asarray(send_counts, dtype=np.int64)
        r = np.empty(len(self.nbr_ranks), dtype=np.int64)
        wait(self.gcomm.Ineighbor_alltoall([s, MPI.INT64_T], [r, MPI.INT64_T]))
        self.exchanges += 1
        self.exchange_bytes += 8 * s.size
        self.exchange_s += time.perf_counter() - t0
        return r.tolist()

    # ---------------------------------------------------------------- rank-level routing
    def _rank_routes(self, plan: RelayPlan) -> dict:
        """The plan between the ranks (module docstring, 'Exchanges'): per round, per
        neighbour rank, the quantities a broadcast sends / receives and the entries a reduce
        sends / receives. Every rank computes the same rounds from the same plan."""
        key = id(plan)
        hit = self._plans.get(key)
        if hit is not None and hit[0] is plan:
            return hit[1]
        er = self.owner[plan.entry_node]
        root_rank = er[plan.root_entry]
        h, rounds = self._broadcast_hops(plan, er, root_rank)
        down = [self._by_peer(h[3] == k, h[1], h[2], h[0]) for k in range(1, rounds + 1)]
        u = self._reduce_steps(plan, er, root_rank, rounds)
        upward = [self._by_peer(u[3] == k, u[1], u[2], u[0]) for k in range(1, rounds + 1)]
        me = self.rank
        loc_ent = np.flatnonzero(er == me)
        routes = {"rounds": rounds, "down": down, "up": upward,
                  "heard": np.unique(plan.entry_q[loc_ent]),
                  "own_q": np.flatnonzero(root_rank == me), "loc_ent": loc_ent}
        routes.update(self._reduce_layout(plan, loc_ent, routes["own_q"], upward))
        routes.update(_broadcast_layout(routes["own_q"], routes["heard"], down))
        self._plans[key] = (plan, routes)
        return routes

    def _broadcast_hops(self, plan: RelayPlan, er: np.ndarray, root_rank: np.ndarray
                        ) -> tuple[np.ndarray, int]:
        """A broadcast between the ranks: every (quantity, rank holding entries of it) pair,
        the root's rank excepted, hears the value along the rank tree from the root's rank.
        Returns the distinct hops as rows (quantity, from, to, round) of a (4, H) array, and
        the number of rounds."""
        R = self.size
        rpar, rdep = self._rank_tree
        qr = np.unique(plan.entry_q * R + er)
        q, cur = qr // R, qr % R
        keep = cur != root_rank[q]
        q, cur = q[keep], cur[keep]
        rounds = int(rdep[root_rank[q], cur].max(initial=0))
        hops = []
        while len(q):
            src = rpar[root_rank[q], cur]
            hops.append(np.stack([q, src, cur, rdep[root_rank[q], cur]]))
            go = src != root_rank[q]
            q, cur = q[go], src[go]
        h = np.unique(np.concatenate(hops, axis=1), axis=1) if hops else np.zeros((4, 0), int)
        return h, rounds

    def _reduce_steps(self, plan: RelayPlan, er: np.ndarray, root_rank: np.ndarray,
                      rounds: int) -> np.ndarray:
        """A reduce between the ranks: every entry's raw value climbs the rank tree to its
        root's rank (a rank at depth k sends in round rounds - k + 1, after the ranks below
        it). Returns the steps as rows (entry, from, to, round) of a (4, S) array."""
        rpar, rdep = self._rank_tree
        steps = []
        ents = np.flatnonzero(er != root_rank[plan.entry_q])
        cur = er[ents]
        while len(ents):
            rr = root_rank[plan.entry_q[ents]]
            nxt = rpar[rr, cur]
            steps.append(np.stack([ents, cur, nxt, rounds - rdep[rr, cur] + 1]))
            go = nxt != rr
            ents, cur = ents[go], nxt[go]
        return np.concatenate(steps, axis=1) if steps else np.zeros((4, 0), int)

    @staticmethod
    def _reduce_layout(plan: RelayPlan, loc_ent: np.ndarray, own_q: np.ndarray, upward
                       ) -> dict:
        """A reduce's rank-local layout: the rows of a (len(work), m) array. `work`: the
        entries this rank ever holds: its own (`loc_order`: those it sends, peer chunk by
        peer chunk in the order they travel, then the rest), then those it receives on their
        way to a root, round by round and peer by peer. So a chunk of its own entries leaves
        as a slice and every received chunk lands in one (`up_at`: per round, the send chunks
        as slices or positions, the receive slices). `own_ents`, `own_ptr`: its roots'
        entries, quantity by quantity in entry order (CSR rows of `plan.summer()`);
        `sum_work`: their sums over `work` (the same sums as `plan.summer()`)."""
        lay = _work_layout(len(plan.entry_q), loc_ent, upward)
        pos_of, work = lay["pos_of"], lay.pop("work")
        S = plan.summer()[own_q].tocsr()
        S.sort_indices()                  # each row in entry order: the order of the sum
        own_ents, own_ptr = S.indices, S.indptr
        S = sp.csr_matrix((S.data, pos_of[own_ents], own_ptr), shape=(len(own_q), len(work)))
        mp = np.flatnonzero(np.isin(plan.entry_q[work], own_q))
        return {**lay, "sum_work": S, "max_pos": mp, "max_q": plan.entry_q[work[mp]],
                "own_ents": own_ents, "own_ptr": own_ptr}

    def _live_layout(self, plan: RelayPlan, mats: list) -> dict:
        """The reduce's work layout (`_work_layout`) over the entries that have terms in some
        map only. Each rank marks its own entries that have terms; the marks travel the
        reduce's rounds once (one exchange per round), so every rank knows which of the
        entries it sends or receives carry a value. An entry without terms is 0.0 and adds
        nothing to its quantity's sum (`_product_layout`), so it is neither computed nor
        sent."""
        rt = self._rank_routes(plan)
        has = np.zeros(len(plan.entry_q), dtype=bool)
        for A in mats:
            has |= np.diff(A.indptr) > 0
        lo = rt["loc_order"]
        marks = np.zeros((rt["work_n"], 1))
        marks[:len(lo), 0] = has[lo]
        self._travel_up(rt, marks)
        held = np.flatnonzero(rt["pos_of"] >= 0)
        live = np.zeros(len(plan.entry_q), dtype=bool)
        live[held] = marks[rt["pos_of"][held], 0] > 0
        upward = [([ix[live[ix]] for ix in send], [ix[live[ix]] for ix in recv])
                  for send, recv in rt["up"]]
        lay = _work_layout(len(plan.entry_q), rt["loc_ent"], upward)
        del lay["work"]
        return lay

    def _by_peer(self, at: np.ndarray, src: np.ndarray, dst: np.ndarray, item: np.ndarray
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per neighbour rank (in `nbr_ranks` order): the items (ascending) this rank sends to
        it and the items it receives from it, among the transfers marked `at`."""
        me = self.rank
        send = [np.sort(item[at & (src == me) & (dst == r)]) for r in self.nbr_ranks]
        recv = [np.sort(item[at & (dst == me) & (src == r)]) for r in self.nbr_ranks]
        return send, recv

    # ---------------------------------------------------------------- collectives
    def _charge(self, msgs: np.ndarray, nbytes: np.ndarray, width: int = 1) -> None:
        self._charge_width(msgs, nbytes, width)

    def _known_work(self, plan: RelayPlan, root_values: np.ndarray) -> np.ndarray:
        """The root values of the quantities this rank holds, hears or relays (`kwork` of
        `_broadcast_layout`, in that order): its roots' values, then the others forwarded
        rank to rank (one exchange per round). Arrays sized by those quantities only."""
        rv = np.asarray(root_values, float)
        tail, m = rv.shape[1:], int(np.prod(rv.shape[1:]))
        rt = self._rank_routes(plan)
        known = np.empty((len(rt["kwork"]),) + tail)
        known[rt["own_pos"]] = rv[rt["own_q"]]
        for send, recv in rt["down_pos"]:
            got = self._alltoallv([known[ix].ravel() for ix in send],
                                  [ix.size * m for ix in recv])
            for ix, buf in zip(recv, got):
                known[ix] = buf.reshape((ix.size,) + tail)
        return known

    def _known(self, plan: RelayPlan, root_values: np.ndarray) -> np.ndarray:
        """(Q,) root values of the quantities that reach this rank's nodes (`missing` at the
        others)."""
        rv = np.asarray(root_values, float)
        rt = self._rank_routes(plan)
        out = np.full((plan.n_quantities,) + rv.shape[1:], self.missing)
        out[rt["heard"]] = self._known_work(plan, rv)[rt["heard_pos"]]
        return out

    def broadcast(self, plan: RelayPlan, root_values: np.ndarray) -> np.ndarray:
        """Entry array: the entries of every quantity that reaches one of this rank's nodes
        hold its root value, the others `missing`. A second axis travels in the same
        messages."""
        rv = np.asarray(root_values, float)
        self._charge(plan.down_msgs, plan.down_bytes, int(np.prod(rv.shape[1:])))
        return self._known(plan, rv)[plan.entry_q]

    def reduce(self, plan: RelayPlan, entry_values: np.ndarray, op: str = "sum") -> np.ndarray:
        """(Q,) sums (op='sum') or maxima (op='max') over each quantity's tree, at the roots
        this rank owns (`missing` at the others). Every entry's raw value reaches its root's
        rank, which adds its quantity's entries in entry order (`Comm.reduce`). Only this
        rank's entries of `entry_values` are read."""
        rt = self._rank_routes(plan)
        v = np.asarray(entry_values, float)
        lo = rt["loc_order"]
        part = np.empty((rt["work_n"],) + v.shape[1:])
        part[:len(lo)] = v[lo]
        out = self._reduce_work(plan, part.reshape(len(part), -1), op)
        return out[:, 0] if v.ndim == 1 else out.reshape((plan.n_quantities,) + v.shape[1:])

    def _reduce_work(self, plan: RelayPlan, part: np.ndarray, op: str = "sum") -> np.ndarray:
        """`reduce` on the rank-local layout (`_reduce_layout`): `part` is (len(work), m) with
        this rank's entries' values in its first rows; returns the (Q, m) results (`missing`
        where this rank owns no root)."""
        if op not in ("sum", "max"):
            raise ValueError(f"reduce op {op!r}: expected 'sum' or 'max'")
        m = part.shape[1]
        self._charge(plan.up_msgs, plan.up_bytes, m)
        rt = self._rank_routes(plan)
        self._travel_up(rt, part)
        own = rt["own_q"]
        out = np.full((plan.n_quantities, m), self.missing)
        if op == "sum":
            out.reshape(-1)[self._own_flat(rt, m)] = (rt["sum_work"] @ part).ravel()
        else:
            top = np.full((plan.n_quantities, m), -np.inf)
            mp = rt["max_pos"]
            np.maximum.at(top, rt["max_q"], part[mp])
            out[own] = top[own]
        return out

    def reduce_product(self, plan: RelayPlan, maps, x: np.ndarray) -> np.ndarray:
        """`Comm.reduce_product`: the entries this rank sends get their values by one product
        of its nodes' maps (`_product_layout`), the received ones land in the reduce's layout,
        and each root quantity's entries are added in entry order by one product reading x
        itself for this rank's one-term entries (as `LocalComm.reduce_product` does), the
        multi-term sums and the received values: the sums of one process, bit for bit."""
        rt = self._rank_routes(plan)
        m, xv = len(maps), np.asarray(x, float)
        PM, n_p, F, n, lay = cached_on_plan(plan, ("mpi_product",), tuple(maps),
                                            lambda: self._product_layout(plan, maps))
        self._charge(plan.up_msgs, plan.up_bytes, m)
        z = np.empty(F.shape[1])              # [x, multi-term sums, the live layout]
        z[:n] = xv
        z[n:n + PM.shape[0]] = PM @ xv        # the multi-term sums, then the sent entries
        part = z[n + n_p:].reshape(lay["work_n"], m)
        self._travel_up(lay, part)
        out = np.full((plan.n_quantities, m), self.missing)
        out.reshape(-1)[self._own_flat(rt, m)] = F @ z
        return out

    def _product_layout(self, plan: RelayPlan, maps) -> tuple:
        """(PM, rows of P, F, n, layout) for `reduce_product` with these maps (n: length of
        x; layout: `_live_layout`, the entries with terms, the only ones that travel). PM:
        P above M, one product for both (each row keeps its stored order, the order of its
        sum). P: the multi-term rows of this rank's entries of its own roots' quantities, the
        maps one after the other; M: the rows of the entries it sends, the maps interleaved
        (their values land at the start of the reduce's layout, right after P's); F: per
        (own quantity, map), rows in that order, the quantity's entries in entry order over
        z = [x, P x, the reduce's layout] (a one-term entry of this rank as its term, a
        multi-term one as 1 x its sum in P, a received one as 1 x its value; an entry without
        terms left out, as `LocalComm` leaves it out: it is 0.0 and adds nothing, since a sum
        starting at +0.0 is never -0.0, and s + 0.0 == s for every other s)."""
        rt = self._rank_routes(plan)
        mats = [sp.csr_matrix(S) for S in maps]
        lay = self._live_layout(plan, mats)
        m, n = len(mats), mats[0].shape[1]
        own = rt["own_q"]
        ents = rt["own_ents"]                            # own quantities' entries, in order
        qrow = np.repeat(np.arange(len(own)), np.diff(rt["own_ptr"]))
        local = self.is_local[plan.entry_node[ents]]
        cnts = [A.indptr[ents + 1] - A.indptr[ents] for A in mats]   # terms per entry
        off_part = n + sum(int(((cnt > 1) & local).sum()) for cnt in cnts)
        rows, cols, vals, prows, p_at = [], [], [], [], n
        for j, (A, cnt) in enumerate(zip(mats, cnts)):
            multi = local & (cnt > 1)
            c = np.empty(len(ents), dtype=np.int64)
            v = np.ones(len(ents))
            one = local & (cnt == 1)
            c[one] = A.indices[A.indptr[ents[one]]]
            v[one] = A.data[A.indptr[ents[one]]]
            c[multi] = p_at + np.arange(int(multi.sum()))
            prows.append(ents[multi])
            p_at += int(multi.sum())
            far = ~local & (lay["pos_of"][ents] >= 0)      # received: they have terms
            c[far] = off_part + lay["pos_of"][ents[far]] * m + j
            keep = far | (cnt > 0)
            rows.append(qrow[keep] * m + j)
            cols.append(c[keep])
            vals.append(v[keep])
        r = np.concatenate(rows)
        order = np.argsort(r, kind="stable")             # per row: entry order, as gathered
        indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=len(own) * m))])
        F = sp.csr_matrix((np.concatenate(vals)[order], np.concatenate(cols)[order], indptr),
                          shape=(len(own) * m, off_part + lay["work_n"] * m))
        sent = lay["loc_order"][:lay["n_sent"]]
        parts = [A[pr] for A, pr in zip(mats, prows)] + [_interleave_rows([A[sent] for A in mats])]
        PM = sp.vstack(parts, format="csr")
        return PM, p_at - n, F, n, lay

    @staticmethod
    def _own_flat(rt: dict, m: int) -> np.ndarray:
        """Flat positions in a (Q, m) array of this rank's roots' m values (rows of a 2-D
        array are slow to scatter)."""
        flat = rt.get(("own_flat", m))
        if flat is None:
            own = rt["own_q"]
            flat = rt[("own_flat", m)] = (own[:, None] * m + np.arange(m)).ravel()
        return flat

    def _travel_up(self, rt: dict, part: np.ndarray) -> None:
        """A reduce's rounds between the ranks on its layout `part` (rows: `work`, a
        C-contiguous array). A round's received chunks are consecutive rows of `part`
        (`_reduce_layout`), so they are received in place."""
        m = part.shape[1]
        for send, recv in rt["up_at"]:
            counts = [(r.stop - r.start) * m for r in recv]
            into = part[recv[0].start:recv[-1].stop].reshape(-1) if _consecutive(recv) else None
            got = self._alltoallv([part[ix].ravel() for ix in send], counts, into)
            if into is None:
                for r, buf in zip(recv, got):
                    part[r] = buf.reshape(-1, m)

    def _own_row_map(self, plan: RelayPlan, slot: tuple, maps, owner):
        """(rows that read only this rank's entries, or None when that is every row; the
        maps side by side cut to them with each entry's column moved to its quantity's place
        in `kwork` (a copy holds its root's value; the same terms in the same order in every
        row: the same sums); a (K,) array with NaN at the rows that read other entries and 0
        at the others)."""
        rt = self._rank_routes(plan)
        W = len(rt["kwork"])

        def make():
            M = sp.hstack([sp.csr_matrix(S) for S in maps], format="csr")
            own = np.tile(self.is_local[plan.entry_node].astype(float), len(maps))
            rows, Sl, other = _own_rows(M, own)
            qpos = np.searchsorted(rt["kwork"], plan.entry_q)
            col = np.concatenate([j * W + qpos for j in range(len(maps))])
            Sc = sp.csr_matrix((Sl.data, col[Sl.indices], Sl.indptr),
                               shape=(len(rows), W * len(maps)))
            blank = np.zeros(M.shape[0])
            blank[other] = np.nan
            return (None if len(rows) == M.shape[0] else rows), Sc, blank
        return cached_on_plan(plan, slot, owner, make)

    def _sum_rows(self, plan, maps, powers, e: np.ndarray, slot=("mpi_cols_sum",)) -> np.ndarray:
        """The maps' terms of this rank's rows added up from `e` (the `kwork` values)."""
        rows, Sc, blank = self._own_row_map(plan, slot, maps, tuple(maps))
        return _at_rows(rows, blank, Sc @ np.concatenate([e if p == 1 else e ** p
                                                          for p in powers]))

    def broadcast_sum(self, plan: RelayPlan, root_values: np.ndarray, maps, powers
                      ) -> np.ndarray:
        """`LocalComm.broadcast_sum`'s one product (the maps side by side, each row's terms in
        one sum: the same floating-point sums) for the rows that read only this rank's
        entries (NaN at the others)."""
        rv = np.asarray(root_values, float)
        self._charge(plan.down_msgs, plan.down_bytes, 1)
        return self._sum_rows(plan, maps, powers, self._known_work(plan, rv))

    def broadcast_sums(self, plan: RelayPlan, root_values: Sequence[np.ndarray], maps,
                       powers) -> list[np.ndarray]:
        """`Comm.broadcast_sums`: the vectors travel together (one exchange per round, each
        charged as its own broadcast)."""
        for _ in root_values:
            self._charge(plan.down_msgs, plan.down_bytes, 1)
        e = self._known_work(plan, np.column_stack(root_values))
        return [self._sum_rows(plan, maps, powers, np.ascontiguousarray(e[:, j]))
                for j in range(len(root_values))]

    def broadcast_product(self, plan: RelayPlan, root_values: np.ndarray, maps, powers
                          ) -> list[np.ndarray]:
        """`Comm.broadcast_product` computed for the rows that read only this rank's entries
        (NaN at the others, as the full product would give)."""
        rv = np.asarray(root_values, float)
        self._charge(plan.down_msgs, plan.down_bytes, 1)
        e = self._known_work(plan, rv)
        out = []
        for j, (S, p) in enumerate(zip(maps, powers)):
            rows, Sc, blank = self._own_row_map(plan, ("mpi_cols", j), [S], S)
            out.append(_at_rows(rows, blank, Sc @ (e if p == 1 else e ** p)))
        return out

    def global_max(self, plan: RelayPlan, entry_values: np.ndarray) -> float:
        """`Comm.global_max`, charged as the plan's reduce and broadcast; between the ranks
        each rank's max is flooded over the rank graph (its diameter in exchanges, one float
        per neighbour each), a max needing no order."""
        self._charge(plan.up_msgs, plan.up_bytes, 1)
        self._charge(plan.down_msgs, plan.down_bytes, 1)
        loc = self._rank_routes(plan)["loc_ent"]
        top = np.array([np.max(np.asarray(entry_values, float)[loc], initial=-np.inf)])
        for _ in range(self._diameter):
            got = self._alltoallv([top] * len(self.nbr_ranks), [1] * len(self.nbr_ranks))
            for buf in got:
                top = np.maximum(top, buf)
        return float(top[0])

    # ---------------------------------------------------------------- accounting
    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-node (messages, bytes) since the last snapshot, summed over the ranks
        (collective); resets the counters."""
        from mpi4py import MPI
        self._flush_charges()
        m, b = np.empty_like(self.msgs), np.empty_like(self.bytes)
        reqs = [self.world.Iallreduce([self.msgs, MPI.INT64_T], [m, MPI.INT64_T]),
                self.world.Iallreduce([self.bytes, MPI.INT64_T], [b, MPI.INT64_T])]
        for req in reqs:
            wait(req)
        self.total_msgs += int(m.sum())
        self.total_bytes += int(b.sum())
        self.msgs[:] = 0
        self.bytes[:] = 0
        return m, b

    def exchange_report(self, wall_s: float) -> dict[str, list]:
        """Per rank (collective; every rank gets all): neighbour exchanges, payload bytes sent
        to other ranks, seconds inside the exchanges, their share of `wall_s`, peak RSS (MB),
        `wall_s` (the solver's time so far on that rank)."""
        import resource
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        rows = self.allgather((self.exchanges, self.exchange_bytes, self.exchange_s,
                               self.exchange_s / wall_s if wall_s > 0 else 0.0, rss, wall_s))
        keys = ("count", "bytes", "seconds", "share_of_wall", "peak_rss_mb", "wall_s")
        return {k: [r[i] for r in rows] for i, k in enumerate(keys)}

    def allgather(self, value: object) -> list:
        """Every rank's `value`, in rank order, on every rank (collective)."""
        arrive(self.world)
        return self.world.allgather(value)

    def gather_to_root(self, values: dict[int, object]) -> dict[int, object] | None:
        """Rank 0 collects every rank's per-node results {node: value} (for writing the
        solution); None on the other ranks."""
        arrive(self.world)
        parts = self.world.gather(values, root=0)
        if self.rank != 0:
            return None
        out: dict[int, object] = {}
        for p in parts:
            out.update(p)
        return out


def _rank_bfs(owner: np.ndarray, adj: Sequence[np.ndarray], size: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """BFS trees of the rank graph (ranks joined where their nodes share a graph edge), one
    per root rank: (parent[root, rank] (-1 at the root), depth[root, rank]). Ties go to the
    smallest rank: every rank computes the same trees."""
    nb = [set() for _ in range(size)]
    for a, bs in enumerate(adj):
        for b in bs:
            if owner[a] != owner[b]:
                nb[int(owner[a])].add(int(owner[b]))
    par = np.full((size, size), -1, dtype=np.int64)
    dep = np.full((size, size), -1, dtype=np.int64)
    for r in range(size):
        dep[r, r] = 0
        frontier = [r]
        while frontier:
            nxt = []
            for x in frontier:
                for y in sorted(nb[x]):
                    if dep[r, y] < 0:
                        dep[r, y], par[r, y] = dep[r, x] + 1, x
                        nxt.append(y)
            frontier = nxt
    return par, dep


def _broadcast_layout(own_q: np.ndarray, heard: np.ndarray, down) -> dict:
    """A broadcast's rank-local layout: the quantities this rank roots, hears or relays
    (`kwork`, ascending), where its roots' values go, every round's send / receive quantities
    as positions in `kwork`, and where the heard quantities sit."""
    got = [ix for send, recv in down for ix in (*send, *recv)]
    kwork = np.unique(np.concatenate([own_q, heard, *got]))
    pos = lambda ix: np.searchsorted(kwork, ix)
    return {"kwork": kwork, "own_pos": pos(own_q), "heard_pos": pos(heard),
            "down_pos": [([pos(ix) for ix in send], [pos(ix) for ix in recv])
                         for send, recv in down]}


def _as_slice(pos: np.ndarray):
    """Consecutive positions as a slice (a view when it indexes rows), others as they are."""
    if not len(pos):
        return slice(0, 0)
    a = int(pos[0])
    return slice(a, a + len(pos)) if np.array_equal(pos, np.arange(a, a + len(pos))) else pos


def _work_layout(n_entries: int, loc_ent: np.ndarray, upward) -> dict:
    """A reduce's rank-local positions (`MpiComm._reduce_layout`): `work`, this rank's own
    entries (`loc_order`: those it sends first, peer chunk by peer chunk in the order they
    travel, then the rest) and then those it receives, round by round and peer by peer;
    `pos_of`, each entry's position in `work` (-1: never here); `up_at`, per round the send
    chunks as slices or positions and the receive slices."""
    mine = np.zeros(n_entries, dtype=bool)
    mine[loc_ent] = True
    sent = [ix[mine[ix]] for send, _recv in upward for ix in send]
    first = np.concatenate(sent) if sent else np.zeros(0, np.int64)
    mine[first] = False                   # the rest of its own entries, ascending
    loc_order = np.concatenate([first, np.flatnonzero(mine)]).astype(np.int64)
    got = [ix for _send, recv in upward for ix in recv]
    work = np.concatenate([loc_order, *got]).astype(np.int64)
    pos_of = np.full(n_entries, -1, dtype=np.int64)
    pos_of[work] = np.arange(len(work))
    up_at = [([_as_slice(pos_of[ix]) for ix in send], [_as_slice(pos_of[ix]) for ix in recv])
             for send, recv in upward]
    return {"work": work, "work_n": len(work), "loc_order": loc_order, "n_sent": len(first),
            "up_at": up_at, "pos_of": pos_of}


def _at_rows(rows: np.ndarray | None, blank: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A (K,) array with `values` at `rows` and `blank` elsewhere (`values` itself when the
    rows are all of them, None)."""
    if rows is None:
        return values
    out = blank.copy()
    out[rows] = values
    return out


def _consecutive(slices: list) -> bool:
    """Whether the slices are non-empty in number and each starts where the last one stops."""
    return bool(slices) and all(a.stop == b.start for a, b in zip(slices, slices[1:]))


def _interleave_rows(mats) -> sp.csr_matrix:
    """CSR matrices of equal shape with their rows interleaved (row i of each in turn). Row
    stacking and row selection keep every row's stored order, the order of its sum (as
    `LocalComm.reduce_product` adds)."""
    n, k = mats[0].shape[0], len(mats)
    return sp.vstack(mats, format="csr")[np.arange(n * k).reshape(k, n).T.ravel()]


def _own_rows(S, own: np.ndarray):
    """(rows of S that read only entries marked in `own`, S cut to them, rows reading others)."""
    S = sp.csr_matrix(S)
    nnz = np.diff(S.indptr)
    mine = np.bincount(np.repeat(np.arange(S.shape[0]), nnz), weights=own[S.indices],
                       minlength=S.shape[0])
    rows = np.flatnonzero(mine == nnz)
    return rows, S[rows], np.flatnonzero(mine < nnz)
