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
* *Batches* (`take_batch`): moves whose regions do not interact are tried together, in one
  finishing phase. A move's *region* is the set of (round, block) pairs whose variables or
  rows it changes; two moves *conflict* when their regions meet (`conflict`). An aggregator
  move of round t changes Is[t, :], which enters every row of round t, so its region is
  {(t, "round")}: aggregator moves of different rounds never conflict, two of one round always
  do. At the start of every cycle over the rounds (with the screen's estimates), each round
  whose best estimate *promises a gain* (is `better` than the finished incumbent: the epigraphs
  tightened on the incumbent's continuous variables already lower J) proposes that move; with
  two or more proposals they form one batch, finished once. Each move then takes its own test
  at the batch's finished point (its round set back, estimated: the move is dropped when that
  estimate is better than the batch's point); the dropped ones are left out and the rest
  finished again, and a batch whose moves all pass their tests but whose point is not better
  than the incumbent is bisected. Only a finished point better than the incumbent is ever
  taken, so J falls with every accepted batch. The cyclic visits follow as before, so the
  search still ends at a coordinate minimum.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .sca import DecStructure

#: a move must lower J by more than this many times `viol_tol`, relative to max(1, |J|), to be
#: accepted: a finished point's rows hold to `viol_tol` only, so the network's J is P's objective
#: to about that resolution, and a smaller fall is not told from it
GAIN_PER_TOL = 10.0


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


#: `finish(u, against)`: the finished candidate of the binary point u; `against` is the
#: candidate it must beat to be taken, so its finishing phase may stop once it falls behind
#: (`sca.run_sca`'s "behind")
Finish = Callable[[np.ndarray, Candidate], Candidate]


def better(a: Candidate, b: Candidate, viol_tol: float) -> bool:
    """Whether candidate a beats b: a feasible candidate (violation <= viol_tol) beats an
    infeasible one; two feasible ones by J (a ends below `target_of(b)`); two infeasible ones
    by the violation."""
    fa, fb = a.viol <= viol_tol, b.viol <= viol_tol
    if fa != fb:
        return fa
    if not fa:
        return a.viol < b.viol
    return a.J < target_of(b, viol_tol)


def target_of(c: Candidate, viol_tol: float) -> float | None:
    """The J a feasible trial must end below to beat c (`better`); None when c is infeasible
    (then every feasible trial beats it, whatever its J)."""
    if c.viol > viol_tol:
        return None
    return c.J - GAIN_PER_TOL * viol_tol * max(1.0, abs(c.J))


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


@dataclass(frozen=True)
class Move:
    """A move of the search: `key` names it, `region` is the set of (round, block) pairs whose
    variables or rows it changes (module docstring, *Batches*), `apply(u)` is u with it made."""
    key: tuple
    region: frozenset
    apply: Callable[[np.ndarray], np.ndarray]


def conflict(a: Move, b: Move) -> bool:
    """Whether two moves interact: their regions share a (round, block) pair."""
    return not a.region.isdisjoint(b.region)


def non_conflicting(moves: list[Move]) -> list[Move]:
    """A batch from `moves` (best first): each move kept when it conflicts with no move kept
    before it."""
    kept: list[Move] = []
    for m in moves:
        if not any(conflict(m, k) for k in kept):
            kept.append(m)
    return kept


@dataclass
class BatchTally:
    """What the batches cost and did: finishing phases paid, moves finished (a move once per
    finishing phase it is in), moves dropped by their own test, moves accepted."""
    phases: int = 0
    trials: int = 0
    dropped: int = 0
    accepted: int = 0


def take_batch(inc: Candidate, batch: list[Move], finish: Finish,
               *, viol_tol: float, tally: BatchTally,
               keeps: Callable[[Move, Candidate], bool] = lambda m, c: True,
               afford: Callable[[], bool] = lambda: True, depth: int | None = None
               ) -> tuple[Candidate, list[Move]]:
    """The batch of non-conflicting moves made together at `inc` and finished once; then each
    move's own test at the finished point (`keeps`). When some fail it, the others are
    finished again without them (recursively) and the better of the two finished points is
    kept; when all pass and the point is not better than `inc`, the batch is bisected (the
    better-estimated half first, the other from its result). A point is returned only when it
    is better than `inc` (`better`), so J never rises; `afford()` (the search's budget) is
    asked before every finishing phase, and at most `depth` levels of dropping or bisection
    follow the first (None: no limit). Returns (the candidate, the moves it holds)."""
    if not batch or depth is not None and depth < 0 or not afford():
        return inc, []
    deeper = None if depth is None else depth - 1
    u = inc.u
    for m in batch:
        u = m.apply(u)
    cand = finish(u, inc)
    tally.phases, tally.trials = tally.phases + 1, tally.trials + len(batch)
    if len(batch) == 1:
        return (cand, batch) if better(cand, inc, viol_tol) else (inc, [])
    kept = [m for m in batch if keeps(m, cand)]
    if len(kept) < len(batch):       # drop the moves that fail their own test, finish again
        tally.dropped += len(batch) - len(kept)
        sub, acc = take_batch(inc, kept, finish, viol_tol=viol_tol, tally=tally, keeps=keeps,
                              afford=afford, depth=deeper)
        if better(cand, sub, viol_tol) and better(cand, inc, viol_tol):
            return cand, batch
        return sub, acc
    if better(cand, inc, viol_tol):
        return cand, batch
    half = len(batch) // 2
    mid, first = take_batch(inc, batch[:half], finish, viol_tol=viol_tol, tally=tally,
                            keeps=keeps, afford=afford, depth=deeper)
    end, second = take_batch(mid, batch[half:], finish, viol_tol=viol_tol, tally=tally,
                             keeps=keeps, afford=afford, depth=deeper)
    return end, first + second


def _agg_move(st: DecStructure, t: int, s: int) -> Move:
    """Round t's aggregator to DC s (region: round t, module docstring)."""
    return Move(key=(t, s), region=frozenset({(t, "round")}),
                apply=lambda u: set_aggregator(st, u, t, s))


def _ranked(inc: Candidate, t: int, st: DecStructure, screen: int | None,
            estimate: Callable[[np.ndarray], Candidate] | None, viol_tol: float
            ) -> tuple[list[int], list[Candidate | None], int]:
    """Round t's other DCs in the order a visit finishes them and their estimates: every other
    DC unestimated (None), or, when there are more than `screen` of them and an `estimate` is
    given, all of them estimated and ranked (`rank_estimates`). Also the number of estimates."""
    S = st.idx["Is"].shape[1]
    cur = aggregators(st, inc.u)[t]
    dcs = [s for s in range(S) if s != cur]
    if estimate is None or screen is None or len(dcs) <= screen:
        return dcs, [None] * len(dcs), 0
    ests = [estimate(set_aggregator(st, inc.u, t, s)) for s in dcs]
    order = rank_estimates(ests, viol_tol)
    return [dcs[i] for i in order], [ests[i] for i in order], len(dcs)


def _batch_step(inc: Candidate, finish: Finish, st: DecStructure,
                ranked: Callable[[Candidate, int], tuple[list[int], list]],
                estimate: Callable[[np.ndarray], Candidate], viol_tol: float,
                afford: Callable[[], bool], tally: BatchTally
                ) -> tuple[Candidate, list[Move]]:
    """Every round whose best estimate promises a gain proposes that move; two or more form
    one batch (`take_batch`), each move's own test being its round set back at the batch's
    finished point and estimated (module docstring, *Batches*)."""
    T = st.idx["Is"].shape[0]
    props = []
    for t in range(T):
        if not afford():
            break
        dcs, ests = ranked(inc, t)
        if ests and ests[0] is not None and better(ests[0], inc, viol_tol):
            props.append((ests[0].J, t, dcs[0]))
    if len(props) < 2:
        return inc, []
    old = aggregators(st, inc.u)

    def keeps(m: Move, cand: Candidate) -> bool:
        back = estimate(set_aggregator(st, cand.u, m.key[0], old[m.key[0]]))
        return not better(back, cand, viol_tol)
    batch = non_conflicting([_agg_move(st, t, s) for _J, t, s in sorted(props)])
    return take_batch(inc, batch, finish, viol_tol=viol_tol, tally=tally, keeps=keeps,
                      afford=afford)


def aggregator_search(inc: Candidate, finish: Finish,
                      st: DecStructure, *, passes: int, viol_tol: float,
                      screen: int | None = None,
                      estimate: Callable[[np.ndarray], Candidate] | None = None,
                      afford: Callable[[], bool] = lambda: True, batch: bool = True
                      ) -> tuple[Candidate, dict[str, int]]:
    """Coordinate descent over the rounds from the finished incumbent `inc` (module
    docstring): the rounds are visited cyclically; a visit of round t finishes every other DC
    s' (`finish(u, inc)`, indicators fixed at u's), or only the `screen` best by `estimate` when
    there are more (the screen), and keeps the best if it beats the incumbent. With estimates,
    every cycle starts with a batch of the rounds' promising moves (`_batch_step`), finished
    together (`batch`; False: the visits alone). It stops once T visits in a row accepted
    nothing (no single-round move then improves) or after `passes` x T visits, or when `afford()` (the search's budget) says no
    before an estimate or a finishing phase. Returns the best candidate and counts
    {"aggregator_trials" (finishing phases), "aggregator_moves", "aggregator_visits",
    "aggregator_screened" (estimates), "aggregator_batches", "aggregator_batch_moves",
    "aggregator_batch_dropped"}."""
    T, S = st.idx["Is"].shape
    trials = moves = visits = quiet = batches = 0
    tally = BatchTally()
    est_calls = [0]
    counted = None if estimate is None else _counting(estimate, est_calls)
    cache: dict[int, tuple] = {}

    def ranked(at: Candidate, t: int) -> tuple[list[int], list]:
        if t not in cache or cache[t][0] is not at:
            dcs, ests, _n = _ranked(at, t, st, screen, counted, viol_tol)
            cache[t] = (at, dcs, ests)
        return cache[t][1], cache[t][2]
    t = 0
    while S > 1 and visits < passes * T and quiet < T and afford():
        if batch and t == 0 and counted is not None and T > 1:
            before = tally.phases
            inc_b, acc = _batch_step(inc, finish, st, ranked, counted, viol_tol, afford, tally)
            batches += tally.phases > before
            if acc:
                inc, moves, quiet = inc_b, moves + len(acc), 0
                tally.accepted += len(acc)
            if not afford():
                break
        dcs, ests = ranked(inc, t)
        n_fin = len(dcs) if ests and ests[0] is None else min(screen or len(dcs), len(dcs))
        best_t = None
        for s in dcs[:n_fin]:
            if not afford():
                break
            trials += 1
            cand = finish(set_aggregator(st, inc.u, t, s), inc)
            if best_t is None or better(cand, best_t, viol_tol):
                best_t = cand
        if best_t is not None and better(best_t, inc, viol_tol):
            inc, moves, quiet = best_t, moves + 1, 1     # round t is at its best now
        else:
            quiet += 1
        t, visits = (t + 1) % T, visits + 1
    return inc, {"aggregator_trials": trials + tally.phases, "aggregator_moves": moves,
                 "aggregator_visits": visits, "aggregator_screened": est_calls[0],
                 "aggregator_batches": batches, "aggregator_batch_moves": tally.accepted,
                 "aggregator_batch_dropped": tally.dropped}


def _counting(fn: Callable, box: list[int]) -> Callable:
    def wrapped(*a, **kw):
        box[0] += 1
        return fn(*a, **kw)
    return wrapped
