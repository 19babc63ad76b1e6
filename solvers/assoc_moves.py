"""Association moves of the `decentralized` method, between rounding and the finishing phase:
the node-local counterpart of `cefl_opt.association.repair_associations`.

Every UE's uplink and downlink choice per round is a one-hot group of indicators whose primary
is the UE. A *trial* moves a group's 1 from its BS j to another linked BS j' with every other
variable held, except the epigraph variables of the max terms (`models.EPIGRAPH_LEVELS`),
which follow. Its change of J is computed exactly from the linearisation at the current point
(the rows and J are affine in one group's indicators and in the epigraph variables with the
rest held; `tests/test_assoc_moves.py` checks the claim against the model):

* each host of a row that reads the group computes its rows' change; an epigraph variable all
  of whose rows it hosts (a BS's delta^B_b) moves to the new max of its rows, down as well as
  up, and its move enters the rows it feeds (the BS's reception row); an epigraph variable
  held by several nodes (dA, dR: the last level) is priced by its rise only (a fall needs the
  whole network's rows: ignoring it can only under-state the gain);
* the hosts' parts reach the UE by one reduce, the UE adds its own objective share's change
  and picks its best trial (a strictly lower J).

The trials chosen in one pass are applied together. Their joint change is at most the sum of
their predicted changes when (i) no row reads two groups (checked) and (ii) no local
epigraph variable has one chosen trial lowering it while another raises one of its rows: a max
falls by at least the sum of its rows' separate falls and rises by at most the largest
separate rise.
Where both kinds meet at a variable, the hosts keep the kind of the best trial there and veto
the other (one broadcast of the choices and their gains, one reduce of the vetoes); the best
trial overall always stays, so a pass with a proposal moves. After each pass the epigraph
variables are tightened (moved to the max of their rows, inner levels first) and J is
re-evaluated; a pass that did not lower it is undone (a safeguard of the bound). Messages
per pass: broadcasts of g, u, the choices and their gains to the rows' hosts, reduces of the
trials' parts and of the vetoes over the same relay trees, the global tests.

*Exact trials* (`exact_top_moves`, at a finished point): a trial that lets a shared max fall
is priced by its rise only, so it can look worse than it is (a downlink move that ends a
round's slowest downlink lowers dR, and with it the delay and the ML bound). The UEs whose
leaving lets dA or dR fall are found by the rows' hosts (the rows are affine in the UE's
indicators: the change of its rows, the epigraphs tightened on it, a sum-reduce of the falls),
after one prefilter for all UEs together: only a UE with a *tight* row (at its epigraph
variable's max) that reads its BS can let a max fall, since at a tightened point an epigraph
variable falls only when all its tight rows fall and at first only the UE's rows move;
each of their trials is evaluated exactly (the moved point's epigraphs tightened, J summed over
the spanning tree, the largest violation max-reduced), and the best is taken when it is
feasible and lowers J, one UE at a time.

*Batches of a refinement round* (`moved_groups`, `move_components`): the UE groups whose BS
changed between two points, the same list on every process, joined where their regions (the UE
and its old and new BS in its round) meet, as moves that never conflict
(`aggregator_moves.take_batch`).

*Group moves* (`exact_group_moves`, at a finished point): a BS's downlink delay delta^B_b is
the max over the UEs it serves (and enters a round's dR), so it falls only when every one of
them leaves: a move of one UE never sees that gain, whatever its pricing. Per round, the UEs a
BS serves on the downlink (at least two; the BS hosts their rows) are moved together to each
other BS they all link to, each such trial evaluated exactly as above, and the best is taken
when it is feasible and lowers J, one group at a time. (The uplink has no such max per BS: a
UE's uplink enters its own rows only.)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from cefl_opt.models.problem import EPIGRAPH_LEVELS

from .aggregator_moves import Move
from .sca import DecStructure, Linearisation

_BIG = 1e30          # the cost of a trial that would leave a row violated or a bound crossed


@dataclass
class MoveViews:
    """The collectives the moves use (message passing in `decentralized`, plain array
    operations in `centralized-pd`).
    at_nonzeros(per_var, nz=None) -> per_nonzero: the rows' hosts' copies (a broadcast), at
    the nonzeros nz (sorted; every one when None);
    sum_to_vars(per_nonzero) -> per_var: sums at the primaries (a reduce);
    max_to_vars(per_nonzero, nz=None) -> per_var: maxima at the primaries (-inf where nothing
    came) of values given at the nonzeros nz (every one when None);
    var_sum(per_var) -> float: the sum over all primaries (spanning tree, every process);
    sync(u) -> u: every process's copies of the shared variables set from their primaries;
    local_rows: (K,) bool, the rows this process hosts; local_vars: (n,) bool, the shared
    variables this process is the primary of; node_sum((V, k)) -> (k,): the column sums of
    rows that each process fills for its own nodes (spanning tree, every process gets them)."""
    at_nonzeros: Callable[..., np.ndarray]
    sum_to_vars: Callable[[np.ndarray], np.ndarray]
    max_to_vars: Callable[..., np.ndarray]
    var_sum: Callable[[np.ndarray], float]
    sync: Callable[[np.ndarray], np.ndarray]
    local_rows: np.ndarray
    local_vars: np.ndarray
    node_sum: Callable[[np.ndarray], np.ndarray] = lambda a: np.asarray(a, float).sum(axis=0)


def central_views(st: DecStructure) -> MoveViews:
    """`MoveViews` of a process that holds every row and shared variable."""
    cols, n = st.jac_cols, st.n

    def vmax(per_nz: np.ndarray, nz: np.ndarray | None = None) -> np.ndarray:
        out = np.full(n, -np.inf)
        np.maximum.at(out, cols if nz is None else cols[nz], per_nz)
        return out
    return MoveViews(at_nonzeros=lambda v, nz=None: v[cols if nz is None else cols[nz]],
                     sum_to_vars=lambda z: np.bincount(cols, weights=z, minlength=n),
                     max_to_vars=vmax, var_sum=lambda v: float(np.sum(v)), sync=lambda u: u,
                     local_rows=np.ones(st.n_rows, dtype=bool),
                     local_vars=np.ones(n, dtype=bool))


def tighten_epigraphs(st: DecStructure, u: np.ndarray, lin: Linearisation, free: np.ndarray,
                      views: MoveViews) -> np.ndarray:
    """Every epigraph variable of a max (direction +1) moves to the max of its rows
    (c_k / |a_kv| over the rows it bounds: exact, the rows are linear in it), level by level,
    inner maxima first, within its bounds. Lowers J (J is non-decreasing in each).
    Only the nonzeros of each level's variables are read (`_epigraph_nonzeros`): every other
    term of the full form is zero, and its sums add the same terms in the same order."""
    rows = st.jac_rows
    c, out = lin.c.copy(), u.copy()
    for lev, nz in enumerate(_epigraph_nonzeros(st)):
        on = (st.epi_level == lev) & (st.epi_dir > 0)
        rz, az = rows[nz], lin.a[nz]
        sel = free[rz] & (az < 0)
        top = views.max_to_vars(np.where(sel, c[rz] / np.maximum(np.abs(az), 1e-300), -np.inf),
                                nz)
        dv = np.where(on & np.isfinite(top), np.clip(top, st.lo - out, st.hi - out), 0.0)
        dv = np.where(views.local_vars, dv, 0.0)
        out = out + dv
        c = c + np.bincount(rz, weights=az * views.at_nonzeros(dv, nz), minlength=st.n_rows)
    return views.sync(out)


def _epigraph_nonzeros(st: DecStructure) -> list[np.ndarray]:
    """Per level of `EPIGRAPH_LEVELS`: the Jacobian nonzeros (sorted) in the columns of that
    level's epigraph variables of direction +1 (built once per structure)."""
    if st.epigraph_nz is None:
        on = st.epi_dir[st.jac_cols] > 0
        lev = st.epi_level[st.jac_cols]
        st.epigraph_nz = [np.flatnonzero(on & (lev == k)) for k in range(len(EPIGRAPH_LEVELS))]
    return st.epigraph_nz


def _column_nonzeros(st: DecStructure, vars_: np.ndarray) -> np.ndarray:
    """The Jacobian nonzeros (sorted) in the columns `vars_` (a column index built once per
    structure)."""
    if st.column_nz is None:
        order = np.argsort(st.jac_cols, kind="stable")
        st.column_nz = (order, np.searchsorted(st.jac_cols[order], np.arange(st.n + 1)))
    order, ptr = st.column_nz
    if len(vars_) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.concatenate([order[ptr[v]:ptr[v + 1]] for v in vars_.tolist()]))


class _Hosts:
    """The trials' data at the rows' hosts: the Jacobian by columns, each row's epigraph
    entries, which variables are held by one node (built once), and the current point's
    linearisation with g and u at the hosts (`at`, once per pass)."""

    def __init__(self, st: DecStructure, free: np.ndarray, views: MoveViews,
                 groups: list[np.ndarray]):
        rows, cols = st.jac_rows, st.jac_cols
        self.st, self.views = st, views
        nz = np.flatnonzero(free[rows] & views.local_rows[rows])
        order = nz[np.argsort(cols[nz], kind="stable")]
        self.col_nz = np.split(order, np.searchsorted(cols[order], np.arange(1, st.n)))
        self.level = st.epi_level
        self.top = len(EPIGRAPH_LEVELS) - 1
        self.single = np.array([len(mb) == 1 for mb in st.members])   # held by one node
        self.shared_rows = _rows_of_two_groups(st, nz, groups)
        epi_nz = nz[st.epi_level[cols[nz]] >= 0]
        self.row_epi: dict[int, list[int]] = {}
        for z in epi_nz.tolist():
            self.row_epi.setdefault(int(rows[z]), []).append(z)

    def at(self, lin: Linearisation, u: np.ndarray) -> "_Hosts":
        """Take the point u and its linearisation (g and u reach the hosts by broadcast)."""
        self.lin = lin
        self.g_nz = self.views.at_nonzeros(lin.g)
        self.u_nz = self.views.at_nonzeros(u)
        return self

    def by_host(self, g: np.ndarray, keep: np.ndarray | None = None
                ) -> dict[int, dict[int, int]]:
        """host -> {variable of group g it reads: one nonzero of it} (only the nonzeros where
        `keep` is nonzero, if given)."""
        rows, host = self.st.jac_rows, self.st.row_host
        out: dict[int, dict[int, int]] = {}
        for v in g.tolist():
            for z in self.col_nz[v].tolist():
                if keep is None or keep[z] != 0.0:
                    out.setdefault(int(host[rows[z]]), {}).setdefault(v, z)
        return out

    def at_host(self, v: int, h: int) -> np.ndarray:
        z = self.col_nz[v]
        return z[self.st.row_host[self.st.jac_rows[z]] == h]

    def effect(self, h: int, dx: dict[int, float]
               ) -> tuple[float, dict[int, tuple[float, bool]]]:
        """Change of J from host h's rows when the indicators change by dx (x units), with
        the epigraph chain of those rows (module docstring); (_BIG, {}) if the trial would
        leave a row violated or cross a bound. Also, per local epigraph variable it touches,
        (its shift, whether one of its rows rose)."""
        st, lin = self.st, self.lin
        rows, a, c = st.jac_rows, lin.a, lin.c
        dC: dict[int, float] = {}
        for v, d in dx.items():
            du = d / st.scale[v]
            for z in self.at_host(v, h).tolist():
                k = int(rows[z])
                dC[k] = dC.get(k, 0.0) + a[z] * du
        if any(k in self.shared_rows for k in dC):
            return _BIG, {}                 # joint changes would not add up: not tried
        cost, shifts = 0.0, {}
        bounded: set[int] = set()
        for lev in range(self.top + 1):
            cand: dict[int, list[int]] = {}
            for k in list(dC):
                for z in self.row_epi.get(k, ()):
                    e = int(st.jac_cols[z])
                    if self.level[e] == lev and st.epi_dir[e] * a[z] < 0:
                        cand.setdefault(e, []).append(z)
                        bounded.add(k)
            for e, zs in cand.items():
                dr = st.epi_dir[e]
                if self.single[e]:        # all its rows are h's: the new max, down or up
                    bz = self.at_host(e, h)
                    bz = bz[dr * a[bz] < 0]
                    d_b = np.array([dC.get(int(k), 0.0) for k in rows[bz]])
                    shift = float(np.max((c[rows[bz]] + d_b) / np.abs(a[bz])))
                    shifts[e] = (shift, bool(np.any(d_b > 0)))
                elif lev == self.top:     # held by many: its rise only
                    shift = max(0.0, max((c[rows[z]] + dC[int(rows[z])]) / abs(a[z]) for z in zs))
                else:
                    return _BIG, {}
                new = self.u_nz[zs[0]] + dr * shift
                if new > st.hi[e] + 1e-12 or new < st.lo[e] - 1e-12:
                    return _BIG, {}
                if shift == 0.0:
                    continue
                cost += self.g_nz[zs[0]] * dr * shift
                if self.single[e]:
                    for z in self.at_host(e, h).tolist():
                        if dr * a[z] > 0:       # a row it feeds
                            k = int(rows[z])
                            dC[k] = dC.get(k, 0.0) + a[z] * dr * shift
        for k, d in dC.items():
            if k not in bounded and c[k] + d > max(c[k], 0.0) + 1e-12:
                return _BIG, {}
        return cost, shifts


def _groups(st: DecStructure) -> list[np.ndarray]:
    """The one-hot groups of present UE-BS links (Inb, Ibn per round and UE)."""
    out = []
    for key in ("Inb", "Ibn"):
        ix = st.idx[key]
        for flat in ix.reshape(-1, ix.shape[-1]):
            g = flat[flat >= 0]
            if len(g) > 1:
                out.append(g)
    return out


def _rows_of_two_groups(st: DecStructure, nz: np.ndarray, groups: list[np.ndarray]
                        ) -> set[int]:
    """Rows (among the nonzeros nz) that read the indicators of more than one group."""
    gid = np.full(st.n, -1, dtype=np.int64)
    for i, g in enumerate(groups):
        gid[g] = i
    z = nz[gid[st.jac_cols[nz]] >= 0]
    pairs = np.unique(np.column_stack([st.jac_rows[z], gid[st.jac_cols[z]]]), axis=0)
    r, cnt = np.unique(pairs[:, 0], return_counts=True)
    return set(r[cnt > 1].tolist())


def _trials(H: _Hosts, groups: list[np.ndarray], x_nz: np.ndarray
            ) -> tuple[np.ndarray, dict]:
    """Every host's parts of every trial, placed on one nonzero per (host, variable): at the
    group's current 1 (host reads it): the part of leaving it; at a candidate j' (host reads
    it): the part of the whole trial minus the leaving part. Also the local shifts per
    (host, target variable) for the veto."""
    part = np.zeros(len(H.st.jac_cols))
    shifts: dict[tuple[int, int], dict[int, tuple[float, bool]]] = {}
    for g in groups:
        for h, seen in H.by_host(g).items():
            hot = [v for v, z in seen.items() if x_nz[z] > 0.5]
            j = hot[0] if hot else None
            leave = (0.0, {}) if j is None else H.effect(h, {j: -1.0})
            if j is not None:
                part[seen[j]] += leave[0]
                shifts[(h, j)] = leave[1]
            for v, z in seen.items():
                if v == j:
                    continue
                dx = {v: 1.0} if j is None else {j: -1.0, v: 1.0}
                full, sh = H.effect(h, dx)
                part[z] += full - leave[0] if max(full, leave[0]) < _BIG else _BIG
                shifts[(h, v)] = sh
    return part, shifts


def _vetoes(H: _Hosts, groups: list[np.ndarray], prop_nz: np.ndarray, gain_nz: np.ndarray,
            shifts: dict) -> np.ndarray:
    """Per nonzero: 1 on a chosen trial's (host, variable) nonzero where the host vetoes it.
    At a local epigraph variable with chosen trials that lower it and others that raise one of
    its rows (a lowering trial's fall assumed the other rows held), the kind of the trial with
    the largest predicted fall stays and the other kind is vetoed: the best trial overall is
    never vetoed, so every pass with a proposal moves. A host reading the trial's target sees
    the whole trial, one reading only the current 1 its leaving part."""
    veto = np.zeros(len(H.st.jac_cols))
    chosen: dict[int, list[tuple]] = {}    # var -> (nonzero, lowers, rose, (gain, variable))
    for g in groups:
        for h, seen in H.by_host(g, prop_nz).items():
            tgt = [v for v, z in seen.items() if prop_nz[z] > 0]
            v = tgt[0] if tgt else next(iter(seen))
            rank = (gain_nz[seen[v]], int(g[0]))
            for e, (s, rose) in shifts.get((h, v), {}).items():
                chosen.setdefault(e, []).append((seen[v], s < 0 and not rose, rose, rank))
    for lst in chosen.values():
        if any(x[1] for x in lst) and any(x[2] for x in lst):
            keep_raise = max(lst, key=lambda x: x[3])[2]
            for z, lowers, rose, _ in lst:
                if (lowers and keep_raise) or (rose and not keep_raise):
                    veto[z] = 1.0
    return veto


def association_moves(st: DecStructure, u: np.ndarray, free: np.ndarray, *,
                      linearise: Callable[[np.ndarray], Linearisation], views: MoveViews,
                      passes: int) -> tuple[np.ndarray, dict[str, Any]]:
    """Up to `passes` passes of trials (module docstring) from the rounded point u (the
    indicators fixed by bounds lo = hi, which follow the moves). Returns (u', info)."""
    lin = linearise(u)
    u = tighten_epigraphs(st, u, lin, free, views)
    lin = linearise(u)
    groups = _groups(st)
    hosts = _Hosts(st, free, views, groups)
    f0, moves, done, predicted, vetoed = lin.f, 0, 0, 0.0, 0
    for _ in range(passes):
        H = hosts.at(lin, u)
        x_nz = views.at_nonzeros(u * st.scale)
        part, shifts = _trials(H, groups, x_nz)
        tot = views.sum_to_vars(part)
        prop, gain = _choose(st, u, lin, tot, groups, views)
        prop_nz, gain_nz = views.at_nonzeros(prop), views.at_nonzeros(gain)
        veto = views.max_to_vars(_vetoes(H, groups, prop_nz, gain_nz, shifts))
        kept = _drop_vetoed(prop, veto, groups, views)
        vetoed += int(round(views.var_sum((views.local_vars & (prop > 0) & (kept == 0))
                                          .astype(float))))
        prop = kept
        acc = views.local_vars & (prop > 0)
        n_acc = int(round(views.var_sum(acc.astype(float))))
        if n_acc == 0:
            break
        pred = views.var_sum(np.where(acc, gain, 0.0))     # once per group: at j' only
        u_new = views.sync(np.where(views.local_vars, u + prop / st.scale, u))
        lin_new = linearise(u_new)
        u_new = tighten_epigraphs(st, u_new, lin_new, free, views)
        lin_new = linearise(u_new)
        if lin_new.f > lin.f - 1e-12 * max(1.0, abs(lin.f)):
            break                  # not lower: undone (the pass is not taken)
        fix_indicators_at(st, u_new)
        u, lin, moves, done = u_new, lin_new, moves + n_acc, done + 1
        predicted += pred
    return u, {"association_moves": moves, "association_passes": done,
               "association_gain": f0 - lin.f, "association_predicted": predicted,
               "association_vetoed": vetoed}


def _choose(st: DecStructure, u: np.ndarray, lin: Linearisation, tot: np.ndarray,
            groups: list[np.ndarray], views: MoveViews) -> tuple[np.ndarray, np.ndarray]:
    """At each group's primary: the best trial if it lowers J by more than 1e-9 relative;
    returned as the proposed change of x (-1 at j, +1 at j', 0 elsewhere) and its predicted
    fall of J (at j and j')."""
    prop, gain = np.zeros(st.n), np.zeros(st.n)
    eps = 1e-9 * max(1.0, abs(lin.f))
    x = u * st.scale
    for g in groups:
        if not views.local_vars[g[0]]:
            continue
        j = int(g[np.argmax(x[g])])
        best, arg = -eps, -1
        for v in g.tolist():
            if v == j:
                continue
            t = tot[j] + tot[v] + lin.g[v] / st.scale[v] - lin.g[j] / st.scale[j]
            if t < best:
                best, arg = t, v
        if arg >= 0:
            prop[j], prop[arg] = -1.0, 1.0
            gain[j] = gain[arg] = -best
    return prop, gain


def _drop_vetoed(prop: np.ndarray, veto: np.ndarray, groups: list[np.ndarray],
                 views: MoveViews) -> np.ndarray:
    out = prop.copy()
    for g in groups:
        if views.local_vars[g[0]] and np.any(prop[g] != 0) and np.any(veto[g] > 0):
            out[g] = 0.0
    return out


def fix_indicators_at(st: DecStructure, u: np.ndarray) -> None:
    """Every indicator's bounds are its value in u (lo = hi): the moves' new associations,
    and on every process its copies of the owners' rounding."""
    lo, hi = st.lo.copy(), st.hi.copy()
    ix = np.concatenate([st.idx[k].ravel() for k in ("Is", "Inb", "Ibn")])
    ix = ix[ix >= 0]
    lo[ix] = hi[ix] = u[ix]
    st.set_bounds(lo, hi)


def _rows_moved(st: DecStructure, lin: Linearisation, du: np.ndarray, views: MoveViews
                ) -> Linearisation:
    """`lin` with its rows moved by du, a change of indicators only: the non-forcing rows are
    affine in each group's indicators and no row reads two groups (module docstring), so each
    host adds its rows' Jacobian entries times du, broadcast to it (`views.at_nonzeros`). What
    the tightening reads (the rows and the Jacobian); J and its gradient stay lin's."""
    nz = _column_nonzeros(st, np.flatnonzero(du))    # the other terms are zero
    c = lin.c + np.bincount(st.jac_rows[nz], weights=lin.a[nz] * views.at_nonzeros(du, nz),
                            minlength=st.n_rows)
    return replace(lin, c=c)


def _shared_tops(st: DecStructure) -> np.ndarray:
    """The epigraph variables of the last level held by several nodes (a round's dA, dR)."""
    single = np.array([len(mb) == 1 for mb in st.members])
    return (st.epi_level == len(EPIGRAPH_LEVELS) - 1) & (st.epi_dir > 0) & ~single


def _lowers_a_shared_max(st: DecStructure, u: np.ndarray, lin: Linearisation, free: np.ndarray,
                         views: MoveViews, j: int, tops: np.ndarray) -> bool:
    """Whether the UE leaving its BS (indicator j to 0, the rows affine in it) lets a shared
    max fall: the rows' change (at their hosts), the epigraphs tightened on it, then one
    max-reduce of the falls."""
    du = np.zeros(st.n)
    du[j] = -u[j] if views.local_vars[j] else 0.0
    du = views.sync(du)
    out = tighten_epigraphs(st, u + du, _rows_moved(st, lin, du, views), free, views)
    fall = np.where(tops & views.local_vars, (u - out) * st.scale, 0.0)
    return views.var_sum(np.maximum(fall, 0.0)) > 1e-12


def _tight_leavers(st: DecStructure, u: np.ndarray, lin: Linearisation, free: np.ndarray,
                   views: MoveViews, groups: list[np.ndarray]) -> np.ndarray:
    """(len(groups),) bool, the same on every process: whether the group's UE, leaving its BS
    (its indicator j to 0), lowers a *tight* row of an epigraph variable (a row at its max,
    within a relative 1e-9, that reads j with a positive coefficient). At a tightened point no
    epigraph variable falls unless every one of its tight rows falls, and at first only rows
    that read j move, so a UE without such a row cannot let a shared max fall: the screen
    `_lowers_a_shared_max` runs only for the flagged ones. One max-reduce, one broadcast, one
    max-reduce and one spanning-tree sum for all groups together."""
    if not groups:
        return np.zeros(0, dtype=bool)
    rows, cols, a = st.jac_rows, st.jac_cols, lin.a
    on = (st.epi_level >= 0) & (st.epi_dir > 0)
    sel = on[cols] & free[rows] & (a < 0)                     # row k bounds epigraph e
    val = np.where(sel, lin.c[rows] / np.maximum(np.abs(a), 1e-300), -np.inf)
    top = views.at_nonzeros(views.max_to_vars(val))
    tight = sel & (val >= top - 1e-9 * np.maximum(1.0, np.abs(top)))
    tight_row = np.zeros(st.n_rows, dtype=bool)
    tight_row[rows[tight]] = True
    reads = views.max_to_vars(np.where(tight_row[rows] & (a > 0), 1.0, -np.inf)) > 0
    x = u * st.scale
    own = np.zeros((st.n_nodes, len(groups)))
    for i, g in enumerate(groups):
        if views.local_vars[g[0]]:
            own[st.primary[g[0]], i] = float(reads[int(g[np.argmax(x[g])])])
    return views.node_sum(own) > 0.5


def _tightened(st: DecStructure, u: np.ndarray, free: np.ndarray,
               linearise: Callable[[np.ndarray], Linearisation], views: MoveViews
               ) -> tuple[np.ndarray, Linearisation]:
    """u with its epigraphs tightened, and the linearisation there."""
    u = tighten_epigraphs(st, u, linearise(u), free, views)
    return u, linearise(u)


def _trial_point(st: DecStructure, ut: np.ndarray, free: np.ndarray, base: Linearisation,
                 views: MoveViews) -> np.ndarray:
    """A trial point, its indicators fixed and its epigraphs tightened. The rows at the moved
    point, which the tightening reads, come from the current point's linearisation `base` (ut
    differs from base.u in the moved groups' indicators only: `_rows_moved`), and the
    tightening reads the Jacobian only at the epigraph variables, whose coefficients are
    constant, so base's serves. No evaluation of the nodes' blocks."""
    fix_indicators_at(st, ut)
    return tighten_epigraphs(st, ut, _rows_moved(st, base, ut - base.u, views), free, views)


def _exact_value(st: DecStructure, ut: np.ndarray, free: np.ndarray,
                 values: Callable[[np.ndarray], Linearisation],
                 global_max: Callable[[np.ndarray], float]) -> tuple[Linearisation, float]:
    """The trial point ut (`_trial_point`) evaluated exactly: J summed over the spanning tree
    and the largest violation of the non-forcing rows (max-reduced); one evaluation of J and
    the rows (`values`)."""
    fix_indicators_at(st, ut)
    vt = values(ut)
    return vt, global_max(np.where(free, np.maximum(vt.c, 0.0), 0.0))


def _screened(base: Linearisation, points: list[np.ndarray], views: MoveViews, keep: int
              ) -> list[int]:
    """Which of a group's trial points (`_trial_point`) are evaluated exactly: every one when
    `keep` is 0 or there are at most `keep`; else the `keep` of least predicted J, the
    linearisation's base.f + g . (ut - u) (the moved indicators and the epigraph variables
    that followed them; one spanning-tree sum each), in the trials' order. Every process
    computes the same sums, so every process keeps the same trials."""
    if keep == 0 or len(points) <= keep:
        return list(range(len(points)))
    pred = [views.var_sum(np.where(views.local_vars, base.g * (p - base.u), 0.0))
            for p in points]
    return sorted(sorted(range(len(points)), key=lambda i: pred[i])[:keep])


def _best_trial(st: DecStructure, base: Linearisation, points: list[np.ndarray],
                free: np.ndarray, views: MoveViews,
                values: Callable[[np.ndarray], Linearisation],
                global_max: Callable[[np.ndarray], float], viol_tol: float, keep: int
                ) -> tuple[int, int]:
    """The screened trials (`_screened`) evaluated exactly; (the index of the feasible one of
    least J when it lowers base's J, else -1; the trials evaluated). A move is taken only on
    this test, so J falls with every move."""
    best, best_v = -1, None
    chosen = _screened(base, points, views, keep)
    for i in chosen:
        vt, viol = _exact_value(st, points[i], free, values, global_max)
        if viol <= viol_tol and (best_v is None or vt.f < best_v.f):
            best, best_v = i, vt
    if best_v is None or best_v.f >= base.f - 1e-12 * max(1.0, abs(base.f)):
        return -1, len(chosen)
    return best, len(chosen)


def exact_top_moves(st: DecStructure, u: np.ndarray, free: np.ndarray, *,
                    linearise: Callable[[np.ndarray], Linearisation],
                    values: Callable[[np.ndarray], Linearisation], views: MoveViews,
                    global_max: Callable[[np.ndarray], float], viol_tol: float,
                    passes: int, afford: Callable[..., bool] = lambda passes=0: True,
                    keep: int = 0) -> tuple[np.ndarray, dict[str, Any]]:
    """Moves the priced trials cannot see: a trial of a UE whose leaving lets a shared max
    (dA, dR) fall is priced by its rise only (module docstring). Such UEs are found by
    `_lowers_a_shared_max`, run once per sweep for the UEs the prefilter `_tight_leavers`
    keeps; each of their trials is evaluated exactly (the moved point, its epigraphs
    tightened, J summed over the spanning tree and the largest violation of the non-forcing
    rows max-reduced) and the best is taken when it is feasible and lowers J, one UE at a time
    (so J falls with every move); up to `passes` sweeps, stopped when `afford(passes)` (the
    search's budget, charged the prefilter's and each screen's pass) says no. Returns (u',
    info)."""
    tops = _shared_tops(st)
    u, lin = _tightened(st, u, free, linearise, views)
    f0, moves, tried, screened = lin.f, 0, 0, 0
    groups = _groups(st)
    for _ in range(passes):
        moved = False
        if not afford(1):        # the prefilter `_tight_leavers`: one pass
            break
        tight = _tight_leavers(st, u, lin, free, views, groups)
        for g in (g for g, f in zip(groups, tight) if f):
            if not afford(1):    # the screen `_lowers_a_shared_max`: one pass
                break
            screened += 1
            x = u * st.scale
            j = int(g[np.argmax(x[g])])
            if not _lowers_a_shared_max(st, u, lin, free, views, j, tops):
                continue
            pts = []
            for v in (v for v in g.tolist() if v != j):
                ut = u.copy()
                ut[j], ut[v] = 0.0, 1.0 / st.scale[v]
                pts.append(_trial_point(st, ut, free, lin, views))
            i, n = _best_trial(st, lin, pts, free, views, values, global_max, viol_tol, keep)
            tried += n
            if i >= 0:
                u, lin, moves, moved = pts[i], linearise(pts[i]), moves + 1, True
            fix_indicators_at(st, u)
        if not moved:
            break
    return u, {"exact_moves": moves, "exact_trials": tried, "exact_screened": screened,
               "exact_gain": f0 - lin.f}


def _downlinks(st: DecStructure, u: np.ndarray, views: MoveViews) -> np.ndarray:
    """(T, N) downlink BS of every UE in every round, the same on every process: each UE
    writes its own (the primary of its I_bn row, the largest entry) in its node's row, and the
    rows are summed over the spanning tree (`views.node_sum`)."""
    ix = st.idx["Ibn"]
    T, N, B = ix.shape
    x = np.where(ix >= 0, (u * st.scale)[np.maximum(ix, 0)], -np.inf)
    own = np.zeros((st.n_nodes, T * N))
    for t in range(T):
        for n in range(N):
            prim = ix[t, n][ix[t, n] >= 0]
            if views.local_vars[prim[0]]:
                own[st.primary[prim[0]], t * N + n] = 1.0 + float(np.argmax(x[t, n]))
    return np.rint(views.node_sum(own)).astype(np.int64).reshape(T, N) - 1


def _bs_groups(st: DecStructure, down: np.ndarray
               ) -> list[tuple[int, int, np.ndarray, np.ndarray, list[int]]]:
    """Every BS's downlink group per round, from the downlinks `down` (T, N): the UEs it
    serves, when there are at least two, as (round, BS, the UEs, their indicator rows (UE x
    BS, -1 where absent), the BSs every one of them links to, the BS itself excepted)."""
    ix = st.idx["Ibn"]
    out = []
    for t in range(ix.shape[0]):
        for j in range(ix.shape[-1]):
            ues = np.flatnonzero(down[t] == j)
            if len(ues) < 2:
                continue
            rows = ix[t][ues]
            tgt = [b for b in range(ix.shape[-1]) if b != j and np.all(rows[:, b] >= 0)]
            out.append((t, j, ues, rows, tgt))
    return out


def exact_group_moves(st: DecStructure, u: np.ndarray, free: np.ndarray, *,
                      linearise: Callable[[np.ndarray], Linearisation],
                      values: Callable[[np.ndarray], Linearisation], views: MoveViews,
                      global_max: Callable[[np.ndarray], float], viol_tol: float,
                      passes: int, afford: Callable[..., bool] = lambda passes=0: True,
                      keep: int = 0) -> tuple[np.ndarray, dict[str, Any]]:
    """Moves of a BS's whole downlink group (module docstring, *Group moves*): per round,
    every UE the BS serves moves to one other BS together. The BS's delta^B_b (a max over
    them) falls only when every one of them leaves, so no single trial sees the gain. Each
    target BS is tried exactly (`_trial_point`, `_exact_value`); the best is taken when it is feasible and
    lowers J, one group at a time (so J falls with every move); up to `passes` sweeps, stopped
    when `afford()` (the search's budget) says no before a group. The groups come from
    `_downlinks`, the same on every process. Returns (u', info)."""
    u, lin = _tightened(st, u, free, linearise, views)
    f0, moves, tried = lin.f, 0, 0
    for _ in range(passes):
        moved = False
        down = _downlinks(st, u, views)
        for t, j, ues, rows, targets in _bs_groups(st, down):
            if not afford():
                break
            if np.any(down[t, ues] != j):   # an earlier move of this sweep
                continue
            pts = []
            for b in targets:
                ut = u.copy()
                ut[rows[:, j]] = 0.0
                ut[rows[:, b]] = 1.0 / st.scale[rows[:, b]]
                pts.append(_trial_point(st, ut, free, lin, views))
            i, n = _best_trial(st, lin, pts, free, views, values, global_max, viol_tol, keep)
            tried += n
            if i >= 0:
                u, lin, moves, moved = pts[i], linearise(pts[i]), moves + 1, True
                down[t, ues] = targets[i]
            fix_indicators_at(st, u)
        if not moved:
            break
    return u, {"group_moves": moves, "group_trials": tried, "group_gain": f0 - lin.f}


def moved_groups(st: DecStructure, u0: np.ndarray, u1: np.ndarray, views: MoveViews
                 ) -> list[tuple[int, int, int, int, np.ndarray]]:
    """The UE groups whose BS differs between u0 and u1, the same list on every process: each
    UE writes its own groups' (old BS, new BS) in its node's row and the rows are summed over
    the spanning tree (`views.node_sum`), as in `_downlinks`. Each as (round, UE, old BS, new
    BS, the group's indicator row (BS -> index, -1 where absent)); uplinks then downlinks."""
    out = []
    x0, x1 = u0 * st.scale, u1 * st.scale
    for key in ("Inb", "Ibn"):
        ix = st.idx[key]
        T, N, _B = ix.shape
        own = np.zeros((st.n_nodes, 2 * T * N))
        for t, n in np.ndindex(T, N):
            g = ix[t, n][ix[t, n] >= 0]
            if len(g) < 2 or not views.local_vars[g[0]]:
                continue
            at = np.maximum(ix[t, n], 0)
            old = int(np.argmax(np.where(ix[t, n] >= 0, x0[at], -np.inf)))
            new = int(np.argmax(np.where(ix[t, n] >= 0, x1[at], -np.inf)))
            own[st.primary[g[0]], [2 * (t * N + n), 2 * (t * N + n) + 1]] = old + 1, new + 1
        ob = np.rint(views.node_sum(own)).astype(np.int64).reshape(T, N, 2) - 1
        for t, n in np.ndindex(T, N):
            if ob[t, n, 0] >= 0 and ob[t, n, 0] != ob[t, n, 1]:
                out.append((t, n, int(ob[t, n, 0]), int(ob[t, n, 1]), ix[t, n]))
    return out


def move_components(st: DecStructure, moved: list[tuple[int, int, int, int, np.ndarray]]
                    ) -> list[Move]:
    """The moved groups as batch moves (`aggregator_moves.Move`): a group's region is its UE
    and its old and new BS in its round (their rows read its indicators, and the BSs' maxima
    over their UEs); groups whose regions meet are joined (a whole BS's group move is one),
    so the moves returned never conflict. Each move sets its groups' indicators to the new BS."""
    regions = [frozenset({(t, "ue", n), (t, "bs", a), (t, "bs", b)}) for t, n, a, b, _ in moved]
    parent = list(range(len(moved)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    seen: dict = {}
    for i, reg in enumerate(regions):
        for item in sorted(reg, key=repr):
            j = seen.setdefault(item, i)
            parent[root(i)] = root(j)
    comps: dict[int, list[int]] = {}
    for i in range(len(moved)):
        comps.setdefault(root(i), []).append(i)

    def setter(members: list[int]):
        def apply(u: np.ndarray) -> np.ndarray:
            out = u.copy()
            for i in members:
                row, b = moved[i][4], moved[i][3]
                out[row[row >= 0]] = 0.0
                out[row[b]] = 1.0 / st.scale[row[b]]
            return out
        return apply
    return [Move(key=tuple((moved[i][0], moved[i][1]) for i in m),
                 region=frozenset().union(*(regions[i] for i in m)), apply=setter(m))
            for m in sorted(comps.values())]
