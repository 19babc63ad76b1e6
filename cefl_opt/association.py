"""UE-BS association rules, in one place.

* `best_rate_uplink` / `best_rate_downlink`: the BS with the best R_nb / R_bn (the reference
  orchestration, docs/modelling.md, 'Weights and infeasible capacity'; defined in `system`,
  whose `reference_solution` uses them, and re-exported here);
* `fastest_path_uplink`: the BS with the fastest gradient path to the aggregator,
  argmin_b beta_M/R_nb + beta_M/Rmax_bs[b, agg] (the start of the fixed-choice methods);
* `association_rule`: fastest-path uplink and best-rate downlink for a given aggregator;
* `round_associations`: fractional indicators (a relaxation's I_nb, I_bn) rounded to one BS per
  UE, the largest entry, ties broken towards the best-rate BS;
* `repair_associations`: local search over the associations by the objective of P (used after
  rounding by `decentralized-polish` and before the final Ipopt polish of the centralised
  methods, so that every method's associations get the same treatment).

The `decentralized` method's own moves (the same criterion, each UE's trials priced by the
hosts of its rows, no whole-network evaluation) are in `solvers/assoc_moves.py`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import system
from .instance import Instance
from .solution import Solution
from .system import best_rate_downlink, best_rate_uplink  # noqa: F401  (the rules, re-exported)

TIE_BREAK = 1e-9  # weight of the normalised rate in `round_associations` (ties only)


def fastest_path_uplink(inst: Instance, t: int, aggregator: int) -> np.ndarray:
    """[N] argmin_b 1/R_nb + 1/Rmax_bs[b, aggregator] (beta_M cancels; an absent link costs
    +inf, `system.link_coef`)."""
    return np.argmin(system.link_coef(inst, 1.0, inst.R_nb[t])
                     + 1.0 / inst.Rmax_bs[None, :, aggregator], axis=1).astype(int)


def association_rule(inst: Instance, t: int, aggregator: int) -> tuple[np.ndarray, np.ndarray]:
    """(uplink, downlink) of round t for `aggregator`: fastest path up, best rate down."""
    return fastest_path_uplink(inst, t, aggregator), best_rate_downlink(inst, t)


def round_associations(inst: Instance, t: int, Inb: np.ndarray, Ibn: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """One BS per UE from (fractional) indicators Inb, Ibn [N, B]: the largest entry; exact
    ties go to the BS of the better rate (R_nb for the uplink, R_bn for the downlink). Absent
    links carry -inf (`models.codec`) and are never chosen."""
    up = np.asarray(inst.R_nb[t], float)
    down = np.asarray(inst.R_bn[t], float).T
    Inb = np.asarray(Inb, float) + TIE_BREAK * up / up.max()
    Ibn = np.asarray(Ibn, float) + TIE_BREAK * down / down.max()
    return np.argmax(Inb, axis=1).astype(int), np.argmax(Ibn, axis=1).astype(int)


def repair_associations(inst: Instance, sol: Solution, *, bound: str = "corollary",
                        weights: dict[str, float] | None = None,
                        max_passes: int = 2, rounds: Sequence[int] | None = None
                        ) -> tuple[Solution, int]:
    """Association repair after rounding: each UE in turn, per round, moves its uplink and then
    its downlink to the BS that gives the smallest objective of P (`system.evaluate`) with every
    other decision of `sol` held; passes repeat until nothing changes (at most `max_passes`).
    Only feasible, strictly better moves are taken, so the objective never rises. Returns the
    repaired solution and the number of moves. `rounds`: repair only these rounds (all by
    default)."""
    cur = Solution(rounds=[r.copy() for r in sol.rounds], method=sol.method, status=sol.status)
    best = system.evaluate(inst, cur, bound=bound, weights=weights).objective  # validates inst
    moves = 0
    links = inst.ue_links()  # candidates: present UE-BS links only
    for _pass in range(max_passes):
        changed = False
        for t in (range(inst.T) if rounds is None else rounds):
            r = cur.rounds[t]
            for n in range(inst.N):
                for field in ("uplink_bs", "downlink_bs"):
                    arr = getattr(r, field)
                    keep = int(arr[n])
                    for b in links[n]:
                        if b == keep:
                            continue
                        arr[n] = b
                        ev = system.evaluate(inst, cur, bound=bound, weights=weights,
                                             validate=False)
                        if ev.feasible and ev.objective < best * (1 - 1e-12):
                            best, keep, changed = ev.objective, b, True
                            moves += 1
                    arr[n] = keep
        if not changed:
            break
    return cur, moves
