"""The successive convex approximation of the decentralised solver (paper Alg.
`alg:dist_NOVA main`): `run_sca`, one outer iteration split into its parts
(`_OuterIteration`: surrogate solve, trial step with epigraph restoration, L_k update,
accept/reject with backtracking, stop tests).

The per-node structure it iterates on (`build_structure`, `NodeProvider`, `DecStructure`,
`Linearisation`, `restore_epigraphs`) is in `solvers/node_structure.py`; its names are
re-exported here.

Outer update (eqn:NOVA param update): u^{l+1} = u^l + zeta (u_hat - u^l), then the epigraph
variables of the max terms restored (`restore_epigraphs`); stop when ||u_hat - u^l||_inf <= tol
and the scaled violation <= viol_tol (`run_sca`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from cefl_opt.io import check_interrupt
from cefl_opt.models.codec import take

from .node_structure import (DecStructure, GroupBatch, Linearisation, NodeProvider,
                             build_structure, restore_epigraphs)

__all__ = ["DecStructure", "GroupBatch", "Linearisation", "NodeProvider", "OuterRecord",
           "build_structure", "next_step_factor", "restore_epigraphs", "run_sca", "take"]

#: outer iterations over which a trial's fall of J is measured (`_OuterIteration.behind`)
BEHIND_WINDOW = 2


# ------------------------------------------------------------------------------ Alg. 1
def _node_max(st: DecStructure, per_var: np.ndarray) -> np.ndarray:
    """Per-row view of a per-variable maximum for `global_max` (each primary's max, placed on
    one of its rows; primaries without rows are covered by the row of any node)."""
    out = np.zeros(st.n_rows)
    if st.n_rows:
        node_max = np.zeros(st.n_nodes)
        np.maximum.at(node_max, st.primary, per_var)
        first = st.row_ptr[:-1]
        has = np.diff(st.row_ptr) > 0
        np.maximum.at(out, first[has], node_max[has])
        out[0] = max(out[0], float(node_max[~has].max(initial=0.0)))
    return out


def _central_restore(st: DecStructure) -> Callable[..., tuple[np.ndarray, bool]]:
    """`restore_epigraphs` with this process holding every row and variable."""
    def var_max(per_nz: np.ndarray) -> np.ndarray:
        out = np.zeros(st.n)
        np.maximum.at(out, st.jac_cols, per_nz)
        return out
    return lambda u, lin, free: restore_epigraphs(
        st, u, lin, free, var_max=var_max, nonzero_view=lambda v: v[st.jac_cols],
        any_positive=lambda v: bool(np.any(v > 0)))


def _adapt_prox(phi: np.ndarray, d: np.ndarray, d_prev: np.ndarray, rejected: bool,
                floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-variable prox factor (each primary from its own steps, no message): halved while
    the variable keeps moving the same way by at least half its last step (a nearly linear
    trade-off, e.g. a UE's data split between two BSs, which a fixed prox walks at a constant
    Delta g / lambda1 per iteration), quadrupled back (up to 1) when its step changes sign;
    after a rejected step every factor is quadrupled (a smaller prox overshot)."""
    if rejected:
        return np.minimum(4.0 * phi, 1.0), d_prev
    same = (d * d_prev > 0) & (np.abs(d) >= 0.5 * np.abs(d_prev))
    flip = d * d_prev < 0
    phi = np.where(same, np.maximum(phi / 2.0, floor), np.where(flip, np.minimum(4.0 * phi, 1.0),
                                                                  phi))
    return phi, d.copy()


@dataclass
class OuterRecord:
    """What one outer iteration produced (the trace row is built from it). A run keeps one
    per outer iteration, so it holds scalars only once recorded: `u_hat` is for the callback
    and is None in the records `run_sca` returns."""
    it: int
    phase: str
    f: float                 # J at w^l (before the update)
    u_hat: np.ndarray | None  # solution of the surrogate (the callback's; None afterwards)
    step_inf: float          # ||u_hat - u^l||_inf
    stationarity: float      # max_i q_i |u_hat_i - u^l_i| (gradient mapping)
    violation: float         # max scaled C_k(w^{l+1})^+ over non-forcing rows
    forcing: float           # max sum I (1 - I) at w^{l+1}
    rho: float               # forcing penalty weight of this surrogate
    inner: dict[str, Any]
    rejected: bool = False
    L_raised: int = 0
    zeta: float = 1.0        # the step factor of this iteration: u^{l+1} = u^l + zeta d


def next_step_factor(zeta_eff: float, zeta: float, rejected: bool) -> float:
    """Backtracking of the step factor (`run_sca`): halved after a rejected step, doubled back
    after an accepted one, never above the constant `zeta`."""
    return zeta_eff / 2.0 if rejected else min(zeta, 2.0 * zeta_eff)


@dataclass
class _OuterState:
    """What Alg. 1 carries from one outer iteration to the next."""
    u: np.ndarray                # w^l (scaled)
    lin: Linearisation           # J, C at w^l
    L: np.ndarray                # per-row prox weights L_k (0 on the forcing rows)
    phi: np.ndarray              # per-variable prox factors (`_adapt_prox`)
    d_prev: np.ndarray           # the last step direction (`_adapt_prox`)
    zeta_eff: float              # the step factor of the next try (backtracking)
    rho: float = 0.0             # forcing penalty weight
    forcing_prev: float = np.inf
    tol_in: float = 1e-4         # inner tolerance of the next surrogate
    settled: int = 0             # consecutive accepted iterations with binaries and rows held
    f_hist: list = field(default_factory=list)   # J at the current point after each iteration


@dataclass
class _Surrogate:
    """One surrogate's solution and its step measures."""
    u_hat: np.ndarray
    stats: dict[str, Any]
    d: np.ndarray                # u_hat - u^l
    step: float                  # ||d||_inf
    stat: float                  # max_i q_i |d_i| (gradient mapping)
    forcing_on: bool


class _OuterIteration:
    """The parts of one outer iteration of Alg. 1 (`run_sca`): surrogate solve, trial step
    with epigraph restoration, L_k update, accept/reject with backtracking, stop tests."""

    def __init__(self, st: DecStructure, inner, k, phase: str, *, gmax, lin_fn, curv, restore,
                 distributed, target: float | None = None):
        self.st, self.inner, self.k, self.phase = st, inner, k, phase
        self.target = target
        self.gmax, self.lin_fn, self.curv = gmax, lin_fn, curv
        self.restore, self.distributed = restore, distributed
        self.force = np.zeros(st.n_rows, dtype=bool)
        self.force[st.force_rows] = True
        self.free = ~self.force
        self.has_forcing = bool(len(st.row_norm[self.force]))
        self.live = inner.live            # S_k: the row's live entries (None: all)

    def start(self, u0: np.ndarray) -> _OuterState:
        u = u0.copy()
        lin = self.lin_fn(u)
        return _OuterState(u=u, lin=lin, L=np.where(self.force, 0.0, float(self.k.L_C)),
                           phi=np.ones(self.st.n), d_prev=np.zeros(self.st.n),
                           zeta_eff=float(self.k.zeta), f_hist=[lin.f])

    def solve_surrogate(self, s: _OuterState, it: int) -> _Surrogate:
        """The surrogate at w^l (objective + lambda1 q/2 |du|^2, non-forcing rows linearised +
        L_k/2 |du_{S_k}|^2, forcing rows as the penalty rho C_k from `force_after` on), solved
        by the inner method (Alg. 2) to tolerance `tol_in`."""
        k, free = self.k, self.free
        forcing_on = self.phase == "relaxed" and it >= k.force_after
        if forcing_on:   # grows while an indicator is fractional, capped at rho_max
            s.rho = k.rho0 if s.rho == 0.0 else min(s.rho * (k.rho_growth if s.forcing_prev
                                                             > 1e-9 else 1.0), k.rho_max)
        fixed = np.where(self.force, s.rho, 0.0)
        q = float(k.lambda1) * s.phi
        if k.curvature:
            h = self.curv(s.u, np.where(free, self.inner.lam, fixed))
            q = q + np.maximum(h, 0.0)
        u_hat, stats = self.inner.solve(s.lin, q, s.L, free, fixed, s.tol_in)
        d = u_hat - s.u
        if self.distributed is None:
            step = float(np.max(np.abs(d), initial=0.0))
            stat = self.gmax(_node_max(self.st, q * np.abs(d)))   # prox-scaled step
        else:
            step = self.distributed.max_var(np.abs(d))
            stat = self.distributed.max_var(q * np.abs(d))
        return _Surrogate(u_hat=u_hat, stats=stats, d=d, step=step, stat=stat,
                          forcing_on=forcing_on)

    def trial_point(self, s: _OuterState, d: np.ndarray) -> tuple[np.ndarray, Linearisation]:
        """u^l + zeta d (eqn:NOVA param update), its epigraph variables restored
        (`k.restore`), and the linearisation there."""
        u_next = s.u + s.zeta_eff * d
        lin_next = self.lin_fn(u_next)
        if self.k.restore:
            u_restored, moved = self.restore(u_next, lin_next, self.free)
            if moved:
                u_next, lin_next = u_restored, self.lin_fn(u_restored)
        return u_next, lin_next

    def update_row_prox(self, s: _OuterState, u_next: np.ndarray,
                        lin_next: Linearisation) -> int:
        """L_k: raised where the surrogate's row k was no upper bound of C_k at the new point
        (x2, or 1.5x what would have made it one; cap L_max), decayed by 0.7 elsewhere (floor
        L_C/100). Returns the number of rows raised (over all processes)."""
        st, k, lin, dist, free = self.st, self.k, s.lin, self.distributed, self.free
        K, L = st.n_rows, s.L
        du = u_next - s.u
        dcol = du[st.jac_cols] if dist is None else dist.nonzero_view(du)
        lin_part = lin.c + np.bincount(st.jac_rows, weights=lin.a * dcol, minlength=K)
        quad = np.bincount(st.jac_rows, weights=dcol * dcol if self.live is None
                           else np.where(self.live, dcol * dcol, 0.0), minlength=K)
        miss = lin_next.c - (lin_part + 0.5 * L * quad)
        bad = free & (miss > 1e-12 * (1.0 + np.abs(lin.c))) & (quad > 0)
        if dist is None:
            raised = int(bad.sum())
        else:
            bad &= dist.local_rows
            raised = int(round(dist.sum_rows(bad.astype(float))))
        if raised:
            need = 2.0 * (lin_next.c[bad] - lin_part[bad]) / quad[bad]
            L[bad] = np.minimum(np.maximum(2.0 * L[bad], 1.5 * need), k.L_max)
        s.L = np.where(free & ~bad, np.maximum(0.7 * L, k.L_C / 100.0), L)
        return raised

    def violations(self, s: _OuterState, lin_next: Linearisation) -> tuple[float, float]:
        """Largest scaled violation of the non-forcing rows at w^l and at the new point."""
        free, gmax = self.free, self.gmax
        viol_next = gmax(np.where(free, np.maximum(lin_next.c, 0.0), 0.0))
        viol_now = gmax(np.where(free, np.maximum(s.lin.c, 0.0), 0.0))
        return viol_now, viol_next

    def rejects(self, s: _OuterState, lin_next: Linearisation, raised: int, viol_now: float,
                viol_next: float) -> bool:
        """A step is rejected when it raised some L_k and left the rows violated beyond
        viol_tol and worse than before, or (phase fixed, `descent`) when it raised J by more
        than 1e-8 x max(1, |J|); after six halvings of zeta the short step is taken."""
        k, lin = self.k, s.lin
        rejected = bool(raised) and viol_next > max(k.viol_tol, viol_now)
        if self.phase == "fixed" and k.descent and viol_next <= k.viol_tol \
                and lin_next.f > lin.f + 1e-8 * max(1.0, abs(lin.f)):
            rejected = True      # J rose: an inexact surrogate solution; a shorter step
        if rejected and s.zeta_eff <= k.zeta / 64.0:   # backtracked enough: the short step
            rejected = False
        return rejected

    def forcing_residual(self, lin_next: Linearisation) -> float:
        """max over the forcing rows of sum I (1 - I) at the new point (unscaled)."""
        force, st = self.force, self.st
        if not self.has_forcing:
            return 0.0
        return self.gmax(np.where(force, np.maximum(lin_next.c, 0.0), 0.0) *
                         np.where(force, st.row_norm, 0.0))

    def inner_tolerance(self, step: float, viol_now: float, viol_next: float) -> float:
        """Tightened with the step, and below the violation being removed (an inexact
        surrogate solution would otherwise leave rows violated and be rejected)."""
        k = self.k
        return max(k.inner_tol, min(1e-4, k.tol_ratio * step,
                                    0.5 * max(min(viol_now, viol_next), k.viol_tol)))

    def stop_after_accept(self, s: _OuterState, sur: _Surrogate, viol_next: float,
                          forcing: float) -> str | None:
        """"converged" (step or stationarity, violation and, phase relaxed, binaries) or
        "binary" (binaries and rows held for `binary_patience` accepted iterations)."""
        k = self.k
        binary_ok = self.phase != "relaxed" or (sur.forcing_on and forcing <= 1e-9)
        if (sur.step <= k.outer_tol or sur.stat <= k.stat_tol) and viol_next <= k.viol_tol \
                and binary_ok:
            return "converged"
        s.settled = s.settled + 1 if (self.phase == "relaxed" and binary_ok
                                      and viol_next <= k.viol_tol) else 0
        if k.binary_patience and s.settled >= k.binary_patience:
            return "binary"
        return None

    def stalled(self, s: _OuterState, violation: float) -> bool:
        """Phase fixed: J fell by at most stall_tol x max(1, |J|) over the last stall_window
        outer iterations, with the violation held."""
        k, f_hist = self.k, s.f_hist
        return self.phase == "fixed" and k.stall_tol > 0 and len(f_hist) > k.stall_window \
            and violation <= k.viol_tol \
            and f_hist[-1 - k.stall_window] - f_hist[-1] <= k.stall_tol * max(1.0, abs(f_hist[-1]))

    def behind(self, s: _OuterState) -> bool:
        """Phase fixed with a `target` (the J a trial must get below to be taken): J at the
        current point is still above it by more than `trial_cutoff` times what J fell over
        the last BEHIND_WINDOW outer iterations, accepted or rejected."""
        k, f_hist = self.k, s.f_hist
        if self.phase != "fixed" or self.target is None or not k.trial_cutoff \
                or len(f_hist) <= BEHIND_WINDOW:
            return False
        gap = f_hist[-1] - self.target
        return gap > 0.0 and gap > k.trial_cutoff * (f_hist[-1 - BEHIND_WINDOW] - f_hist[-1])


def run_sca(st: DecStructure, inner, consts, *, u0: np.ndarray, phase: str = "relaxed",
            max_outer: int | None = None, global_max: Callable[[np.ndarray], float] | None = None,
            linearise: Callable[[np.ndarray], Linearisation] | None = None,
            curvature: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
            callback: Callable[[OuterRecord], Any] | None = None,
            distributed: Any = None,
            restore: Callable[..., tuple[np.ndarray, bool]] | None = None,
            target: float | None = None) -> tuple[np.ndarray, list[OuterRecord], str]:
    """Alg. 1 (`alg:dist_NOVA main`) on `st` from u0. phase "relaxed": indicators in [0, 1];
    the forcing rows sum I (1 - I) <= 0 (`con1add`-`con12add`) enter from outer iteration
    `force_after` on as a penalty rho * C_k with rho growing by `rho_growth` per iteration
    (concave rows: their linearisation is an upper bound, so the penalised surrogate still
    majorises), until every indicator is binary. phase "fixed": the indicators are fixed by the
    caller (bounds), forcing rows left out.

    Each outer iteration (`_OuterIteration`): the surrogate solve (objective linearised +
    lambda1/2 |du|^2; non-forcing rows linearised + L_k/2 |du_{S_k}|^2, solved by `inner.solve`
    to a tolerance tightened with the step); the trial step u^l + zeta (u_hat - u^l)
    (eqn:NOVA param update) with the max terms' epigraph variables restored (`k.restore`,
    `restore_epigraphs`; `restore(u, lin, free)` is its message-passing form); the L_k update
    (raised when the surrogate missed row k, decayed otherwise); the accept/reject test with
    backtracking (a rejection halves zeta for the next try, an accepted step doubles it back;
    after six halvings the short step is taken, since L_k may be at its cap and a surrogate
    that keeps missing would otherwise repeat the same rejected step forever); in phase
    "fixed" (`k.descent`) a step that raises J by more than 1e-8 x max(1, |J|) is rejected
    the same way (the surrogates majorise J, so only an inexact inner solution raises it);
    then the stop tests. The prox weight of each variable is lambda1 x its factor
    (`_adapt_prox`, floor `k.prox_min`) plus its curvature.

    Stop ("converged"): ||u_hat - u^l||_inf <= outer_tol or the gradient mapping
    max_i q_i |u_hat_i - u^l_i| <= stat_tol, scaled violation <= viol_tol and (phase relaxed)
    every indicator binary; "binary" (phase relaxed) when every indicator has been binary and
    the violation <= viol_tol for `binary_patience` accepted iterations in a row (a rejected
    step in between neither counts nor breaks the run: it leaves u unchanged); "stalled"
    (phase fixed, `stall_tol` > 0) when J at the current point fell by at most
    stall_tol x max(1, |J|) over the last `stall_window` outer iterations, accepted or
    rejected, with the violation <= viol_tol (no stationarity claim); "behind" (phase fixed,
    a `target` given: a search's trial, which is taken only if its J ends below the target)
    when J is still above the target by more than `trial_cutoff` times its fall over the last
    BEHIND_WINDOW outer iterations (`_OuterIteration.behind`: at that pace the trial would
    not reach the target; every node holds the same J, so every node stops together);
    "stopped" when the callback asks; else "max_outer".
    global_max(per-row values) -> float: the max over all hosts (a message-passing max in the
    decentralised method).
    distributed: None (this process holds every shared variable and row), or, when the nodes
    are spread over processes (MPI backend), an object with `local_rows` ((K,) bool: rows this
    process hosts), `max_var(per_var)` / `sum_rows(per_row)` (collectives over all processes)
    and `nonzero_view(du)` (du at the Jacobian nonzeros as the rows' hosts hold it): every
    decision then comes from collectives, so every process takes the same branch."""
    k = consts
    max_outer = k.max_outer if max_outer is None else max_outer
    outer = _OuterIteration(st, inner, k, phase,
                            gmax=global_max or (lambda v: float(np.max(v, initial=0.0))),
                            lin_fn=linearise or st.linearise, curv=curvature or st.curvature,
                            restore=restore or _central_restore(st), distributed=distributed,
                            target=target)
    s = outer.start(u0)
    records: list[OuterRecord] = []
    reason = "max_outer"
    for it in range(max_outer):
        check_interrupt()   # a Ctrl-C swallowed inside the last iteration (a finaliser's raise)
        sur = outer.solve_surrogate(s, it)
        u_next, lin_next = outer.trial_point(s, sur.d)
        raised = outer.update_row_prox(s, u_next, lin_next)
        viol_now, viol_next = outer.violations(s, lin_next)
        rejected = outer.rejects(s, lin_next, raised, viol_now, viol_next)
        zeta_used, s.zeta_eff = s.zeta_eff, next_step_factor(s.zeta_eff, k.zeta, rejected)
        forcing = outer.forcing_residual(lin_next)
        rec = OuterRecord(it=it, phase=phase, f=s.lin.f, u_hat=sur.u_hat,
                          step_inf=sur.step, stationarity=sur.stat,
                          violation=viol_now if rejected else viol_next,
                          forcing=forcing, rho=s.rho, inner=sur.stats, rejected=rejected,
                          L_raised=raised, zeta=zeta_used)
        records.append(rec)
        s.forcing_prev = forcing
        stop = callback(rec) if callback is not None else False
        rec.u_hat = None            # the records hold scalars: no vector per outer iteration
        s.tol_in = outer.inner_tolerance(sur.step, viol_now, viol_next)
        if k.prox_min < 1.0:
            s.phi, s.d_prev = _adapt_prox(s.phi, sur.d, s.d_prev, rejected, k.prox_min)
        if not rejected:
            s.u, s.lin = u_next, lin_next
            done = outer.stop_after_accept(s, sur, viol_next, forcing)
            if done is not None:
                reason = done
                break
        s.f_hist.append(s.lin.f)     # J at the current point: unchanged by a rejected step
        if outer.stalled(s, rec.violation):
            reason = "stalled"
            break
        if outer.behind(s):
            reason = "behind"
            break
        if stop:
            reason = "stopped"
            break
    return s.u, records, reason
