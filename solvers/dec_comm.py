"""Message passing of the decentralised solver: the one place where network nodes talk.

Every inter-node communication of `--method decentralized` goes through a `Comm` object built on
the instance's communication graph (`inst.graph()`). Nodes are numbered 0..V-1 in the solver's
node order (`models.node_blocks`: ue0.., bs0.., dc0..); a message is only ever sent from a node
to one of its graph neighbours. Quantities whose holders are not adjacent are *relayed* along a
shortest path of the graph, and every hop is a counted message.

Shared quantities and relay trees (`RelayPlan`)
-----------------------------------------------
A plan describes a family of Q shared quantities (e.g. every shared primal variable): quantity
q has a *root* (the node that owns it) and *members* (the nodes that need it). `build_plan`
joins the BFS shortest paths from the root to every member into a tree (members that are not
adjacent to the root are reached through relay nodes). The plan stores one *entry* per
(quantity, tree node), sorted by node, so node d's entries are the slice
`entry_ptr[d]:entry_ptr[d+1]` of any entry-indexed array: that slice is all node d holds.
Two collectives run on a plan:

* `broadcast(plan, root_values)`: the root's value reaches every tree node (root -> leaves,
  one exchange round per tree level);
* `reduce(plan, entry_values)`: the sum over the tree's entries reaches the root (leaves ->
  root: each node forwards its own entry's value with the raw values its children's subtrees
  sent it, and the root adds all of its tree's entries in entry order, so every backend and
  every partition of the nodes over processes computes the same floating-point sum; a max
  forwards the max of its entry and its children's).

Interface for backends (what an MPI backend implements)
-------------------------------------------------------
`Comm.exchange(outboxes) -> inboxes` is the only primitive: one synchronous round in which
node d sends `outboxes[d][e]` (a 1-D float64 array) to each neighbour e; it returns
`inboxes[e][d]`. It raises `ValueError` for a message to a non-neighbour. `Comm.broadcast` and
`Comm.reduce` are implemented generically on top of `exchange` (`Comm._broadcast_rounds`,
`Comm._reduce_rounds`, using the per-level edge index arrays `plan.down` / `plan.up`), so a
backend that implements `exchange` (and `local_nodes`: the nodes whose entries this process
holds) gets both collectives. An mpi4py backend maps nodes to ranks (keeping graph neighbours
together), builds a distributed-graph communicator over the rank graph
(`Create_dist_graph_adjacent`) and implements `exchange` with one `neighbor_alltoallv` per
round (messages between nodes on the same rank stay local); its collectives route between the
ranks over the rank graph instead of per tree level (`mpi_backend`, 'Exchanges'); entry
arrays then hold meaningful values only at the entries of `local_nodes`. Every backend adds in the same order (`reduce`
above, and each node's own sums by the same sparse products), so the solver's iterates agree
bit for bit across backends and partitions.

Two composed collectives serve the inner loop: `reduce_product(plan, maps, x)` (each node maps
its own data x to its entries by sparse maps, then one reduce carries all of them) and
`broadcast_product(plan, root_values, maps, powers)` (one broadcast, then each node maps its
copies, or their powers, to its own rows; `broadcast_sum`: the maps' results added up).
Generic forms apply the maps and call `reduce` / `broadcast`.

`LocalComm` (all nodes in one process) overrides the collectives with vectorised numpy
(gather / one sparse product over the entries: the same sums; `broadcast_product` and
`broadcast_sum` compose their maps with the plan once per surrogate, and the inner loop's two,
`reduce_product` and `broadcast_sum`, add in compiled passes (`compiled_sums`) in the order of
the products they stand for) and charges the messages the generic rounds would send (tallied
per kind, added at `snapshot`). It is checked against the generic rounds in
`tests/test_dec_comm.py`.

Accounting (`Comm.counter`)
---------------------------
Per node: messages sent and bytes sent (8 bytes per float; a message is one (directed edge,
round) pair that carries at least one value; no header bytes). `snapshot()` returns and resets
the per-node counters; the solver takes one snapshot per outer iteration.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp

from . import compiled_sums

__all__ = ["DisconnectedGraphError", "RelayPlan", "build_plan", "Comm", "LocalComm",
           "cached_on_plan", "graph_adjacency", "summer"]

FLOAT_BYTES = 8


class DisconnectedGraphError(ValueError):
    """The communication graph does not connect the holders of a shared quantity."""


def graph_adjacency(graph, node_names: Sequence[str]) -> list[np.ndarray]:
    """Sorted neighbour indices of every node (self-loops dropped); names as in `node_names`."""
    index = {nm: i for i, nm in enumerate(node_names)}
    missing = [nm for nm in node_names if nm not in graph]
    extra = [nm for nm in graph.nodes if nm not in index]
    if missing or extra:
        raise ValueError(f"communication graph does not match the network nodes (missing "
                         f"{missing[:5]}, unknown {extra[:5]})")
    adj: list[set[int]] = [set() for _ in node_names]
    for a, b in graph.edges():
        if a != b:
            adj[index[a]].add(index[b])
            adj[index[b]].add(index[a])
    return [np.array(sorted(s), dtype=np.int64) for s in adj]


def check_connected(adj: list[np.ndarray], node_names: Sequence[str]) -> None:
    """Raise DisconnectedGraphError naming the nodes that node 0 cannot reach."""
    if not adj:
        return
    seen = np.zeros(len(adj), dtype=bool)
    seen[0] = True
    dq = deque([0])
    while dq:
        a = dq.popleft()
        for b in adj[a]:
            if not seen[b]:
                seen[b] = True
                dq.append(int(b))
    if not seen.all():
        cut = [node_names[i] for i in np.flatnonzero(~seen)]
        raise DisconnectedGraphError(
            f"the communication graph is not connected: {len(cut)} node(s) cannot be reached "
            f"from {node_names[0]} ({', '.join(cut[:8])}{' ...' if len(cut) > 8 else ''}); "
            "consensus cannot reach every node")


def _adjacency_csr(adj: list[np.ndarray]) -> sp.csr_matrix:
    """The adjacency lists as a CSR matrix, each row's columns in the list's order."""
    indptr = np.concatenate([[0], np.cumsum([len(a) for a in adj])]).astype(np.int64)
    indices = np.concatenate([np.asarray(a, np.int64) for a in adj]) if len(adj) else \
        np.zeros(0, np.int64)
    return sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(adj), len(adj)))


def _bfs_parents(G: sp.csr_matrix, root: int) -> np.ndarray:
    """BFS tree from `root` over the adjacency `G` (`_adjacency_csr`): each node's parent, -1
    at the root, -2 where unreachable. First-in first-out, neighbours in list order (sorted:
    ties go to the smallest index, deterministic)."""
    from scipy.sparse.csgraph import breadth_first_order
    _order, pred = breadth_first_order(G, root, directed=True, return_predecessors=True)
    parent = np.where(pred < 0, -2, pred).astype(np.int64)
    parent[root] = -1
    return parent


def summer(index: np.ndarray, size: int) -> sp.csr_matrix:
    """(size, len(index)) 0/1 matrix S with S @ w == np.bincount(index, w, size) (column by
    column for a 2-D w): one sparse product instead of a bincount per call (the gathers of the
    collectives and of the inner loop)."""
    n = len(index)
    return sp.csr_matrix((np.ones(n), (np.asarray(index, np.int64), np.arange(n))),
                         shape=(size, n))


@dataclass
class RelayPlan:
    """Relay trees of Q shared quantities (module docstring). Entry arrays are sorted by node."""
    n_nodes: int
    n_quantities: int
    entry_q: np.ndarray          # (E,) quantity of each entry
    entry_node: np.ndarray       # (E,) node holding it
    entry_member: np.ndarray     # (E,) bool: the node needs q (False: a relay only)
    entry_ptr: np.ndarray        # (V+1,) node d's entries: entry_ptr[d]:entry_ptr[d+1]
    root_entry: np.ndarray       # (Q,) entry index of q's root
    parent_entry: np.ndarray     # (E,) entry of the parent on q's tree (-1 at the root)
    depth: np.ndarray            # (E,) hops from the root
    # per level l = 1..max depth: the tree edges (parent entry, child entry) at that level
    levels: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    # per-node messages / bytes of one broadcast (down) and of one reduce (up)
    down_msgs: np.ndarray | None = None
    down_bytes: np.ndarray | None = None
    up_msgs: np.ndarray | None = None
    up_bytes: np.ndarray | None = None
    edges: set[tuple[int, int]] = field(default_factory=set)   # undirected tree edges used
    _summer: sp.csr_matrix | None = field(default=None, repr=False, compare=False)
    _derived: dict = field(default_factory=dict, repr=False, compare=False)   # `cached_on_plan`

    @property
    def n_rounds(self) -> int:
        return len(self.levels)

    def summer(self) -> sp.csr_matrix:
        """(Q, E) 0/1 matrix: S @ entry_values = the sums per quantity (built once)."""
        if self._summer is None:
            self._summer = summer(self.entry_q, self.n_quantities)
        return self._summer

    def ancestors(self) -> np.ndarray:
        """(max depth + 1, E): row l holds each entry's ancestor at depth l (the entry itself
        at its own depth, -1 above it and where it has none)."""
        def make():
            E = len(self.entry_q)
            out = np.full((len(self.levels) + 1, E), -1, dtype=np.int64)
            cur = np.arange(E)
            d = self.depth.copy()
            for lev in range(len(self.levels), -1, -1):
                at = d == lev
                out[lev, at] = cur[at]
                step = at & (self.parent_entry[cur] >= 0)
                cur = np.where(step, self.parent_entry[cur], cur)
                d = np.where(step, d - 1, d)
            return out
        return cached_on_plan(self, ("ancestors",), self, make)

    def subtrees(self, children: np.ndarray, level: int) -> np.ndarray:
        """The entries (ascending) of the subtrees of `children`, entries at depth `level`:
        what a reduce sends up for them (`Comm.reduce`: raw entry values, not partial sums)."""
        if not len(children):
            return np.zeros(0, dtype=np.int64)
        anc = self.ancestors()[level]
        mark = np.zeros(len(self.entry_q), dtype=bool)
        mark[children] = True
        return np.flatnonzero((anc >= 0) & mark[np.maximum(anc, 0)])


def build_plan(adj: list[np.ndarray], roots: np.ndarray, members: Sequence[np.ndarray],
               node_names: Sequence[str] | None = None) -> RelayPlan:
    """Relay trees for quantities with owners `roots[q]` and the nodes `members[q]` needing
    them (the root is always a member). Quantities with the same root and member set share one
    tree. Raises DisconnectedGraphError when a member cannot be reached from its root."""
    V = len(adj)
    names = list(node_names) if node_names is not None else [str(i) for i in range(V)]
    roots = np.asarray(roots, dtype=np.int64)
    Q = len(roots)
    G = _adjacency_csr(adj)
    parents: dict[int, np.ndarray] = {}
    sig_index: dict[tuple, int] = {}
    sig_trees: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    sig_of = np.empty(Q, dtype=np.int64)
    for q in range(Q):
        r = int(roots[q])
        mem = tuple(sorted(set(int(x) for x in members[q]) | {r}))
        key = (r, mem)
        s = sig_index.get(key)
        if s is None:
            if r not in parents:
                parents[r] = _bfs_parents(G, r)
            par = parents[r]
            tree_par: dict[int, int] = {r: -1}
            for d in mem:
                if par[d] == -2:
                    raise DisconnectedGraphError(
                        f"the communication graph is not connected: {names[d]} cannot be "
                        f"reached from {names[r]}; consensus cannot reach every node")
                a = d
                while a not in tree_par:
                    tree_par[a] = int(par[a])
                    a = int(par[a])
            tnodes = np.array(sorted(tree_par), dtype=np.int64)
            tpar = np.array([tree_par[a] for a in tnodes], dtype=np.int64)
            depth = np.zeros(len(tnodes), dtype=np.int64)
            pos = {a: i for i, a in enumerate(tnodes)}
            for i, a in enumerate(tnodes):
                k, b = 0, a
                while tree_par[b] != -1:
                    b, k = tree_par[b], k + 1
                depth[i] = k
            is_mem = np.isin(tnodes, np.array(mem))
            ppos = np.array([pos[p] if p >= 0 else -1 for p in tpar], dtype=np.int64)
            s = len(sig_trees)
            sig_index[key] = s
            sig_trees.append((tnodes, ppos, depth, is_mem))
        sig_of[q] = s
    # entries: for every quantity, one per node of its tree
    sizes = np.array([len(sig_trees[s][0]) for s in sig_of], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(sizes)])
    E = int(start[-1])
    e_q = np.repeat(np.arange(Q), sizes)
    e_node = np.empty(E, dtype=np.int64)
    e_par_local = np.empty(E, dtype=np.int64)
    e_depth = np.empty(E, dtype=np.int64)
    e_mem = np.empty(E, dtype=bool)
    for s, (tnodes, ppos, depth, is_mem) in enumerate(sig_trees):
        qs = np.flatnonzero(sig_of == s)
        if not len(qs):
            continue
        k = len(tnodes)
        idx = (start[qs][:, None] + np.arange(k)[None, :]).ravel()
        e_node[idx] = np.tile(tnodes, len(qs))
        e_par_local[idx] = np.where(np.tile(ppos, len(qs)) >= 0,
                                    (start[qs][:, None] + np.maximum(ppos, 0)[None, :]).ravel(),
                                    -1)
        e_depth[idx] = np.tile(depth, len(qs))
        e_mem[idx] = np.tile(is_mem, len(qs))
    # sort entries by (node, quantity): node d's entries are contiguous
    order = np.lexsort((e_q, e_node))
    inv = np.empty(E, dtype=np.int64)
    inv[order] = np.arange(E)
    e_q, e_node, e_depth, e_mem = e_q[order], e_node[order], e_depth[order], e_mem[order]
    par = e_par_local[order]
    par = np.where(par >= 0, inv[np.maximum(par, 0)], -1)
    ptr = np.zeros(V + 1, dtype=np.int64)
    np.add.at(ptr, e_node + 1, 1)
    ptr = np.cumsum(ptr)
    root_entry = np.empty(Q, dtype=np.int64)
    is_root = par < 0
    root_entry[e_q[is_root]] = np.flatnonzero(is_root)
    plan = RelayPlan(n_nodes=V, n_quantities=Q, entry_q=e_q, entry_node=e_node,
                     entry_member=e_mem, entry_ptr=ptr, root_entry=root_entry,
                     parent_entry=par, depth=e_depth)
    maxd = int(e_depth.max(initial=0))
    for lev in range(1, maxd + 1):
        child = np.flatnonzero(e_depth == lev)
        # order by (child node, parent node, quantity) for a deterministic message layout
        pe = par[child]
        o = np.lexsort((e_q[child], e_node[pe], e_node[child]))
        plan.levels.append((pe[o], child[o]))
    _account(plan, adj)
    return plan


def _account(plan: RelayPlan, adj: list[np.ndarray]) -> None:
    """Messages and bytes per node of one broadcast / one reduce; checks every tree edge."""
    V = plan.n_nodes
    nb = [set(a.tolist()) for a in adj]
    dm, db = np.zeros(V, dtype=np.int64), np.zeros(V, dtype=np.int64)
    um, ub = np.zeros(V, dtype=np.int64), np.zeros(V, dtype=np.int64)
    sub = np.ones(len(plan.entry_q), dtype=np.int64)      # subtree sizes
    for pe, ce in reversed(plan.levels):
        np.add.at(sub, pe, sub[ce])
    for pe, ce in plan.levels:
        src, dst = plan.entry_node[pe], plan.entry_node[ce]
        for a, b in set(zip(src.tolist(), dst.tolist())):
            if b not in nb[a]:
                raise AssertionError(f"relay tree edge {a}-{b} is not a graph edge")
            plan.edges.add((min(a, b), max(a, b)))
        pair = src * V + dst
        uniq, inv, cnt = np.unique(pair, return_inverse=True, return_counts=True)
        up_cnt = np.bincount(inv, weights=sub[ce], minlength=len(uniq)).astype(np.int64)
        np.add.at(dm, uniq // V, 1)               # down: parent sends to child
        np.add.at(db, uniq // V, FLOAT_BYTES * cnt)
        np.add.at(um, uniq % V, 1)                # up: child sends its subtrees' entries
        np.add.at(ub, uniq % V, FLOAT_BYTES * up_cnt)
    plan.down_msgs, plan.down_bytes, plan.up_msgs, plan.up_bytes = dm, db, um, ub


class Comm:
    """Message passing over a communication graph (module docstring). Subclasses implement
    `exchange` (and may override the collectives with faster equivalents)."""

    backend = "abstract"

    def __init__(self, graph, node_names: Sequence[str]):
        self.node_names = list(node_names)
        self.adj = graph_adjacency(graph, self.node_names)
        check_connected(self.adj, self.node_names)
        self._nb = [set(a.tolist()) for a in self.adj]
        V = len(self.node_names)
        self.msgs = np.zeros(V, dtype=np.int64)
        self.bytes = np.zeros(V, dtype=np.int64)
        self.total_msgs = 0
        self.total_bytes = 0
        self._pending: dict = {}     # tallied charges (`_charge_width`)

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    def local_nodes(self) -> np.ndarray:
        """Nodes whose entries this process holds (all of them for the local backend)."""
        return np.arange(self.n_nodes)

    def plan(self, roots: np.ndarray, members: Sequence[np.ndarray]) -> RelayPlan:
        return build_plan(self.adj, roots, members, self.node_names)

    # ---------------------------------------------------------------- the primitive
    def exchange(self, outboxes: dict[int, dict[int, np.ndarray]]
                 ) -> dict[int, dict[int, np.ndarray]]:
        raise NotImplementedError

    def _check_and_count(self, outboxes: dict[int, dict[int, np.ndarray]]) -> None:
        for a, box in outboxes.items():
            for b, payload in box.items():
                if b not in self._nb[a]:
                    raise ValueError(f"message from {self.node_names[a]} to "
                                     f"{self.node_names[b]}: not a graph neighbour")
                n = int(np.size(payload))
                if n:
                    self.msgs[a] += 1
                    self.bytes[a] += FLOAT_BYTES * n

    # ---------------------------------------------------------------- collectives
    def broadcast(self, plan: RelayPlan, root_values: np.ndarray) -> np.ndarray:
        """Entry-indexed array with every entry set to its quantity's root value (a second
        axis, if any, travels in the same messages)."""
        return self._broadcast_rounds(plan, root_values)

    def reduce(self, plan: RelayPlan, entry_values: np.ndarray, op: str = "sum") -> np.ndarray:
        """(Q,) sums (op="sum") or maxima (op="max") of `entry_values` over each quantity's
        tree, delivered at the root. Arrays may have a second axis (several values per entry,
        sent in the same messages)."""
        return self._reduce_rounds(plan, entry_values, op)

    def reduce_product(self, plan: RelayPlan, maps: Sequence[sp.spmatrix], x: np.ndarray
                       ) -> np.ndarray:
        """``reduce(plan, column_stack([S @ x for S in maps]))``: per-entry values that each
        node computes from its own data by sparse maps (e.g. its rows' multipliers summed into
        its entries), reduced together (len(maps) floats per entry)."""
        return self.reduce(plan, np.column_stack([S @ x for S in maps]))

    def broadcast_take(self, plan: RelayPlan, root_values: np.ndarray, at: np.ndarray,
                       slot: str = "take") -> np.ndarray:
        """``broadcast(plan, root_values)[at]``: the broadcast read at fixed entries (e.g. a
        row host's copy of each variable its rows read; `slot` names the cached selection of
        a backend that keeps one, one per caller)."""
        return self.broadcast(plan, root_values)[at]

    def reduce_max_at(self, plan: RelayPlan, at: np.ndarray, values: np.ndarray
                      ) -> np.ndarray:
        """``reduce(plan, e, op="max")`` where e holds the max of `values` at the entries `at`
        (repeats allowed) and -inf elsewhere."""
        e = np.full(len(plan.entry_q), -np.inf)
        np.maximum.at(e, at, values)
        return self.reduce(plan, e, op="max")

    def broadcast_product(self, plan: RelayPlan, root_values: np.ndarray,
                          maps: Sequence[sp.spmatrix], powers: Sequence[int]) -> list[np.ndarray]:
        """``[S @ e**p for S, p in zip(maps, powers)]`` with ``e = broadcast(plan,
        root_values)``: what each node computes from its copies by sparse maps of its own
        (e.g. its rows' linear and quadratic terms); one broadcast."""
        e = self.broadcast(plan, root_values)
        return [S @ (e if p == 1 else e ** p) for S, p in zip(maps, powers)]

    def broadcast_sum(self, plan: RelayPlan, root_values: np.ndarray,
                      maps: Sequence[sp.spmatrix], powers: Sequence[int]) -> np.ndarray:
        """``sum(broadcast_product(plan, root_values, maps, powers))``: each node's rows' terms
        added up (e.g. a row's linear plus quadratic part); one broadcast, then the maps side
        by side in one product (each row's terms in one sum: the order every backend uses)."""
        e = self.broadcast(plan, root_values)
        M = sp.hstack([sp.csr_matrix(S) for S in maps], format="csr")
        return M @ np.concatenate([e if p == 1 else e ** p for p in powers])

    def broadcast_sums(self, plan: RelayPlan, root_values: Sequence[np.ndarray],
                       maps: Sequence[sp.spmatrix], powers: Sequence[int]) -> list[np.ndarray]:
        """``[broadcast_sum(plan, v, maps, powers) for v in root_values]``: several vectors
        through the same maps, charged as one broadcast each (a backend may carry them in the
        same messages)."""
        return [self.broadcast_sum(plan, v, maps, powers) for v in root_values]

    def global_max(self, plan: RelayPlan, entry_values: np.ndarray) -> float:
        """The largest entry value of a one-quantity spanning-tree plan, known at every node:
        a max-reduce to the root, then a broadcast back (read at this process's first node)."""
        top = self.reduce(plan, entry_values, op="max")
        return float(self.broadcast(plan, top)[int(plan.entry_ptr[int(self.local_nodes()[0])])])

    def _broadcast_rounds(self, plan: RelayPlan, root_values: np.ndarray) -> np.ndarray:
        rv = np.asarray(root_values, float)
        vals = np.zeros((len(plan.entry_q),) + rv.shape[1:])
        vals[plan.root_entry] = rv
        for pe, ce in plan.levels:
            pairs, sels = _edge_pairs(plan.entry_node[pe], plan.entry_node[ce])
            out: dict[int, dict[int, np.ndarray]] = {}
            for (a, b), sel in zip(pairs, sels):
                out.setdefault(a, {})[b] = vals[pe[sel]].ravel()
            inbox = self.exchange(out)
            for (a, b), sel in zip(pairs, sels):
                vals[ce[sel]] = inbox[b][a].reshape(vals[ce[sel]].shape)
        return vals

    def _reduce_rounds(self, plan: RelayPlan, entry_values: np.ndarray, op: str = "sum"
                       ) -> np.ndarray:
        """Max: each node forwards the max of its entry and its children's. Sum: each node
        forwards its children's subtrees' raw entry values with its own (`RelayPlan.subtrees`)
        and the root adds all of its tree's entries in entry order (`plan.summer()`): the
        same floating-point sum on every backend and partition."""
        part = np.asarray(entry_values, float).copy()
        nlev = len(plan.levels)
        for i, (pe, ce) in enumerate(reversed(plan.levels)):
            pairs, sels = _edge_pairs(plan.entry_node[ce], plan.entry_node[pe])  # child -> parent
            sent = [ce[sel] if op == "max" else plan.subtrees(ce[sel], nlev - i)
                    for sel in sels]
            out: dict[int, dict[int, np.ndarray]] = {}
            for (a, b), ix in zip(pairs, sent):
                out.setdefault(a, {})[b] = part[ix].ravel()
            inbox = self.exchange(out)
            for (a, b), sel, ix in zip(pairs, sels, sent):
                got = inbox[b][a].reshape(part[ix].shape)
                if op == "sum":
                    part[ix] = got
                else:
                    np.maximum.at(part, pe[sel], got)
        if op == "sum":
            return plan.summer() @ part
        return part[plan.root_entry]

    # ---------------------------------------------------------------- accounting
    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-node (messages, bytes) sent since the last snapshot; resets the counters."""
        self._flush_charges()
        m, b = self.msgs.copy(), self.bytes.copy()
        self.total_msgs += int(m.sum())
        self.total_bytes += int(b.sum())
        self.msgs[:] = 0
        self.bytes[:] = 0
        return m, b

    def _charge_width(self, msgs: np.ndarray, nbytes: np.ndarray, width: int) -> None:
        """Count one collective's messages (per node: msgs, and nbytes x width); tallied per
        kind and added up at the next `snapshot` (the same totals, fewer array operations in
        the inner loop)."""
        key = (id(msgs), id(nbytes), width)
        hit = self._pending.get(key)
        if hit is None:
            self._pending[key] = [msgs, nbytes, width, 1]
        else:
            hit[3] += 1

    def _flush_charges(self) -> None:
        """Add the tallied collectives (`_charge_width`) to the counters of the nodes this
        process holds."""
        own = self.local_nodes()
        for msgs, nbytes, width, count in self._pending.values():
            self.msgs[own] += msgs[own] * count
            self.bytes[own] += nbytes[own] * (width * count)
        self._pending = {}


class LocalComm(Comm):
    """All nodes in one process: `exchange` delivers directly; the collectives are vectorised
    (same sums as the generic rounds) and charge the messages those rounds send."""

    backend = "local"

    def exchange(self, outboxes):
        self._check_and_count(outboxes)
        inbox: dict[int, dict[int, np.ndarray]] = {}
        for a, box in outboxes.items():
            for b, payload in box.items():
                inbox.setdefault(b, {})[a] = np.array(payload, dtype=float, copy=True)
        return inbox

    def broadcast(self, plan: RelayPlan, root_values: np.ndarray) -> np.ndarray:
        rv = np.asarray(root_values, float)
        self._charge(plan.down_msgs, plan.down_bytes, rv)
        return rv[plan.entry_q]

    def reduce(self, plan: RelayPlan, entry_values: np.ndarray, op: str = "sum") -> np.ndarray:
        ev = np.asarray(entry_values, float)
        self._charge(plan.up_msgs, plan.up_bytes, ev)
        if op == "max":
            out = np.full((plan.n_quantities,) + ev.shape[1:], -np.inf)
            np.maximum.at(out, plan.entry_q, ev)
            return out
        return plan.summer() @ ev

    def reduce_product(self, plan: RelayPlan, maps: Sequence[sp.spmatrix], x: np.ndarray
                       ) -> np.ndarray:
        """The same sums as `Comm.reduce_product` (each entry's value as ``S @ x`` adds it,
        then the root adds its entries in entry order), in compiled passes
        (`compiled_sums.entry_sums`: two maps of one pattern in one pass, others one each)
        over the entries of each quantity, their terms laid out once per set of maps in the
        order they are added (`_entry_lists`)."""
        xv = np.ascontiguousarray(x, dtype=float)
        m = len(maps)
        self._charge_width(plan.up_msgs, plan.up_bytes, m)
        lists = cached_on_plan(plan, ("product",), tuple(maps),
                               lambda: _entry_lists(plan, maps))
        out = np.empty((m, plan.n_quantities))
        row = 0
        for qptr, eptr, xi, datas in lists:
            pair = len(datas) == 2      # a map alone: the kernel's second sum is thrown away
            compiled_sums.entry_sums(qptr, eptr, xi, datas[0], datas[-1], xv,
                                     out[row], out[row + 1] if pair else np.empty(len(out[row])))
            row += len(datas)
        return out.T

    def broadcast_take(self, plan: RelayPlan, root_values: np.ndarray, at: np.ndarray,
                       slot: str = "take") -> np.ndarray:
        """Same values as `Comm.broadcast_take`, with ``plan.entry_q[at]`` composed once."""
        rv = np.asarray(root_values, float)
        self._charge(plan.down_msgs, plan.down_bytes, rv)
        return rv[cached_on_plan(plan, (slot,), at, lambda: plan.entry_q[at])]

    def reduce_max_at(self, plan: RelayPlan, at: np.ndarray, values: np.ndarray
                      ) -> np.ndarray:
        """Same values as `Comm.reduce_max_at` (a max is exact, so the order is free), from
        the entries `at` alone; messages as the full reduce's."""
        self._charge_width(plan.up_msgs, plan.up_bytes, 1)
        out = np.full(plan.n_quantities, -np.inf)
        np.maximum.at(out, plan.entry_q[at], values)
        return out

    def broadcast_product(self, plan: RelayPlan, root_values: np.ndarray,
                          maps: Sequence[sp.spmatrix], powers: Sequence[int]) -> list[np.ndarray]:
        """Same values as `Comm.broadcast_product`, with each map composed once with the
        broadcast's entry -> quantity selection (a power of an entry is the power of its root
        value: the entry is a copy)."""
        rv = np.asarray(root_values, float)
        self._charge(plan.down_msgs, plan.down_bytes, rv)
        out = []
        for j, (S, p) in enumerate(zip(maps, powers)):
            M = cached_on_plan(plan, ("at_root", j), S, lambda: _at_root(plan, S))
            out.append(M @ (rv if p == 1 else rv ** p))
        return out

    def broadcast_sum(self, plan: RelayPlan, root_values: np.ndarray,
                      maps: Sequence[sp.spmatrix], powers: Sequence[int]) -> np.ndarray:
        """`Comm.broadcast_sum` with the maps composed with the plan (columns: quantities):
        the sums of ``hstack(maps) @ concatenate(root values' powers)``, one running sum per
        row through the maps in turn (`compiled_sums.accumulate_rows`)."""
        rv = np.ascontiguousarray(root_values, dtype=float)
        self._charge(plan.down_msgs, plan.down_bytes, rv)
        blocks = cached_on_plan(plan, ("at_root_sum",), tuple(maps),
                                lambda: [_at_root_rows(plan, S) for S in maps])
        out = np.zeros(len(blocks[0][0]) - 1)
        for (indptr, indices, data), p in zip(blocks, powers):
            x, square = (rv, p == 2) if p in (1, 2) else (rv ** p, False)
            compiled_sums.accumulate_rows(indptr, indices, data, x, square, out)
        return out

    def _charge(self, msgs: np.ndarray, nbytes: np.ndarray, arr: np.ndarray) -> None:
        self._charge_width(msgs, nbytes, int(np.prod(arr.shape[1:])) if arr.ndim > 1 else 1)


def _entry_lists(plan: RelayPlan, maps: Sequence[sp.spmatrix]) -> list[tuple]:
    """What `compiled_sums.entry_sums` reads, per map S (rows: entries), or once for two maps
    of one pattern: (qptr, eptr, xi, [S's values, ...]), the terms of the entries with terms
    in the order they are added: entries grouped by quantity in entry order (the order of
    `plan.summer()`, the root's own sum), each entry's terms in S's stored order; qptr where
    each quantity's entries start, eptr where each entry's terms start, xi their columns."""
    order = plan.summer().indices
    mats = [sp.csr_matrix(S) for S in maps]
    shared = len(mats) == 2 and all(np.array_equal(getattr(mats[0], f), getattr(mats[1], f))
                                    for f in ("indptr", "indices"))
    out = []
    for group in ([mats] if shared else [[S] for S in mats]):
        S = group[0]
        lens = np.diff(S.indptr)[order]
        ents = order[lens > 0]
        lens = lens[lens > 0]
        qptr = np.concatenate([[0], np.cumsum(np.bincount(plan.entry_q[ents],
                                                          minlength=plan.n_quantities))])
        eptr = np.concatenate([[0], np.cumsum(lens)])
        terms = np.repeat(S.indptr[ents] - eptr[:-1], lens) + np.arange(eptr[-1])
        eptr, xi = compiled_sums.unsigned_csr(eptr, S.indices[terms])
        out.append((qptr.astype(np.uint64), eptr, xi,
                    [np.ascontiguousarray(A.data[terms], dtype=float) for A in group]))
    return out


def cached_on_plan(plan: RelayPlan, key: tuple, owner: Any, make: Callable[[], Any]
                   ) -> Any:
    """A value derived from (plan, owner), kept on the plan in slot `key` until another owner
    comes for that slot (one entry per slot: a new surrogate's maps replace the last ones,
    which are let go before the new ones are made, so the two are never held together).
    Owners compare by identity; a tuple owner element by element."""
    cache = plan._derived
    hit = cache.get(key)
    if hit is None or not _same_owner(hit[0], owner):
        hit = None
        cache.pop(key, None)
        hit = cache[key] = (owner, make())
    return hit[1]


def _same_owner(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))
    return a is b


def _at_root(plan: RelayPlan, S: sp.spmatrix) -> sp.csr_matrix:
    """S (columns: entries) with each column moved to its quantity: S @ e == M @ root values
    when e = the broadcast of the root values."""
    S = sp.csr_matrix(S)
    return sp.csr_matrix((S.data, plan.entry_q[S.indices], S.indptr),
                         shape=(S.shape[0], plan.n_quantities))


def _at_root_rows(plan: RelayPlan, S: sp.spmatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_at_root(plan, S)` as `compiled_sums.accumulate_rows` reads it: (row pointers,
    quantity per nonzero, values), each row in S's stored order."""
    M = _at_root(plan, S)
    indptr, indices = compiled_sums.unsigned_csr(M.indptr, M.indices)
    return indptr, indices, np.ascontiguousarray(M.data, dtype=float)


def _edge_pairs(src: np.ndarray, dst: np.ndarray) -> tuple[list[tuple[int, int]], list[np.ndarray]]:
    """Distinct (src, dst) node pairs in increasing order and the entry mask of each."""
    pairs = sorted(set(zip(src.tolist(), dst.tolist())))
    return pairs, [(src == a) & (dst == b) for a, b in pairs]
