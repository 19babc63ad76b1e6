"""Aggregator moves and candidate selection of the `decentralized` method, after the rounding.

The rounding fixes one aggregator per round (`Is[t, :]`, owned by dc[0]) and nothing after it
revisits that choice: the association moves (`solvers/assoc_moves.py`) move UEs only. Here
every round's aggregator is revisited, and more than one start is finished and compared.

* A *finished candidate* is a binary point after the association moves and the finishing
  phase (Alg. 1 with the indicators fixed), with J (`eqn:objective`: the nodes' objective
  shares summed over the spanning tree and broadcast back) and its largest scaled row
  violation (a max-reduce): every node learns both by neighbour messages, so every node
  takes the same decision.
* An *aggregator move* of round t to DC s': dc[0] sets Is[t, :] to the unit vector of s'
  (the indicators stay fixed by bounds), the epigraphs are tightened, and the point is
  finished. The move is accepted only when the finished candidate is better than the
  incumbent (`better`: feasible before infeasible, then a lower J by more than a relative
  1e-9), so P falls with every accepted move.
* A visit of round t tries every other DC and keeps the best finished trial if it beats the
  incumbent; with more than `agg_screen` other DCs, every trial is first *estimated* (the
  aggregator set, the indicators fixed, the epigraphs tightened on the incumbent's continuous
  variables, J summed over the spanning tree and the violation max-reduced: no finishing
  phase) and only the `agg_screen` best estimates are finished, so a visit costs at most
  `agg_screen` finishing phases whatever the number of DCs; the rounds are visited
  cyclically until T visits in a row accepted nothing (a
  coordinate minimum: no single-round move improves), at most `agg_passes` x T visits.
* With `candidates` >= 2 the rounding of the start w^0 (each owner rounds its own start
  indicators: no relaxed phase) is searched the same way; the network keeps the candidate of
  least J (`best_of`: the comparison every node makes on the broadcast J values, a minimum
  over neighbour messages).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .sca import DecStructure

#: a move must lower J by more than this (relative to max(1, |J|)) to be accepted
REL_GAIN = 1e-9


@dataclass
class Candidate:
    """A finished binary point: u, J at u, the largest scaled violation of the non-forcing
    rows, the finishing phase's records and stop reason, and which start it came from."""
    u: np.ndarray
    J: float
    viol: float
    records: list = field(default_factory=list)
    reason: str = ""
    start: str = ""


def aggregators(st: DecStructure, u: np.ndarray) -> list[int]:
    """The aggregator DC of every round at u (argmax of Is[t, :]; ties to the lowest index)."""
    ix = st.idx["Is"]
    return [int(np.argmax(u[ix[t]] * st.scale[ix[t]])) for t in range(ix.shape[0])]


def set_aggregator(st: DecStructure, u: np.ndarray, t: int, s: int) -> np.ndarray:
    """u with round t's aggregator indicators Is[t, :] set to the unit vector of DC s."""
    ix = st.idx["Is"][t]
    out = u.copy()
    out[ix] = 0.0
    out[ix[s]] = 1.0 / st.scale[ix[s]]
    return out


def better(a: Candidate, b: Candidate, viol_tol: float) -> bool:
    """Whether candidate a beats b: a feasible candidate (violation <= viol_tol) beats an
    infeasible one; two feasible ones by J (a lower by more than REL_GAIN relative); two
    infeasible ones by the violation."""
    fa, fb = a.viol <= viol_tol, b.viol <= viol_tol
    if fa != fb:
        return fa
    if not fa:
        return a.viol < b.viol
    return a.J < b.J - REL_GAIN * max(1.0, abs(b.J))


def best_of(cands: list[Candidate], viol_tol: float) -> Candidate:
    """The network's minimum over the finished candidates (the first one on ties)."""
    best = cands[0]
    for c in cands[1:]:
        if better(c, best, viol_tol):
            best = c
    return best


def rank_estimates(ests: list[Candidate], viol_tol: float) -> list[int]:
    """The order in which a visit finishes its trials, from their estimates: feasible ones
    (violation <= viol_tol) by J, then the infeasible ones by violation; ties keep the DC
    order (every node sorts the same broadcast values, so every node takes the same order)."""
    def key(i: int) -> tuple[int, float]:
        e = ests[i]
        return (0, e.J) if e.viol <= viol_tol else (1, e.viol)
    return sorted(range(len(ests)), key=key)


def _visit_trials(inc: Candidate, t: int, st: DecStructure, screen: int | None,
                  estimate: Callable[[np.ndarray], Candidate] | None, viol_tol: float
                  ) -> tuple[list[np.ndarray], int]:
    """The trial points a visit of round t finishes: every other DC, or, when there are more
    than `screen` of them and an `estimate` is given, the `screen` best by their estimates
    (`rank_estimates`). Returns (points, number of estimates)."""
    S = st.idx["Is"].shape[1]
    cur = aggregators(st, inc.u)[t]
    pts = [set_aggregator(st, inc.u, t, s) for s in range(S) if s != cur]
    if estimate is None or screen is None or len(pts) <= screen:
        return pts, 0
    order = rank_estimates([estimate(p) for p in pts], viol_tol)
    return [pts[i] for i in order[:screen]], len(pts)


def aggregator_search(inc: Candidate, finish: Callable[[np.ndarray], Candidate],
                      st: DecStructure, *, passes: int, viol_tol: float,
                      screen: int | None = None,
                      estimate: Callable[[np.ndarray], Candidate] | None = None,
                      afford: Callable[[], bool] = lambda: True
                      ) -> tuple[Candidate, dict[str, int]]:
    """Coordinate descent over the rounds from the finished incumbent `inc` (module
    docstring): the rounds are visited cyclically; a visit of round t finishes every other DC
    s' (`finish(u)`, indicators fixed at u's), or only the `screen` best by `estimate` when
    there are more (the screen), and keeps the best if it beats the incumbent.
    It stops once T visits in a row accepted nothing (no single-round move then improves) or
    after `passes` x T visits, or when `afford()` (the search's budget) says no before an
    estimate or a trial. Returns the best candidate and counts {"aggregator_trials",
    "aggregator_moves", "aggregator_visits", "aggregator_screened"}."""
    T, S = st.idx["Is"].shape
    trials = moves = visits = quiet = screened = 0
    t = 0
    while S > 1 and visits < passes * T and quiet < T and afford():
        pts, n_est = _visit_trials(inc, t, st, screen, estimate, viol_tol)
        screened += n_est
        best_t = None
        for p in pts:
            if not afford():
                break
            trials += 1
            cand = finish(p)
            if best_t is None or better(cand, best_t, viol_tol):
                best_t = cand
        if best_t is not None and better(best_t, inc, viol_tol):
            inc, moves, quiet = best_t, moves + 1, 1     # round t is at its best now
        else:
            quiet += 1
        t, visits = (t + 1) % T, visits + 1
    return inc, {"aggregator_trials": trials, "aggregator_moves": moves,
                 "aggregator_visits": visits, "aggregator_screened": screened}
