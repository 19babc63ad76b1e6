"""Association repair: local search over the UE-BS associations by the objective of P.

Used after rounding by the decentralised solver and, before their final Ipopt polish, by the
centralised methods, so that every method's associations get the same treatment and comparisons
isolate the aggregator decision. The objective comes from `cefl_opt.system` (the one numpy
source of the physics); the continuous decisions are held fixed.
"""
from __future__ import annotations

from cefl_opt import system
from cefl_opt.instance import Instance
from cefl_opt.solution import Solution


def repair_associations(inst: Instance, sol: Solution, *, bound: str = "corollary",
                        weights: dict[str, float] | None = None,
                        max_passes: int = 2) -> tuple[Solution, int]:
    """Association repair after rounding: each UE in turn, per round, moves its uplink and then
    its downlink to the BS that gives the smallest objective of P (`system.evaluate`) with every
    other decision of `sol` held; passes repeat until nothing changes (at most `max_passes`).
    Only feasible, strictly better moves are taken, so the objective never rises. Returns the
    repaired solution and the number of moves."""
    cur = Solution(rounds=[r.copy() for r in sol.rounds], method=sol.method, status=sol.status)
    best = system.evaluate(inst, cur, bound=bound, weights=weights).objective
    moves = 0
    links = inst.ue_links()  # candidates: present UE-BS links only
    for _pass in range(max_passes):
        changed = False
        for t in range(inst.T):
            r = cur.rounds[t]
            for n in range(inst.N):
                for field in ("uplink_bs", "downlink_bs"):
                    arr = getattr(r, field)
                    keep = int(arr[n])
                    for b in links[n]:
                        if b == keep:
                            continue
                        arr[n] = b
                        ev = system.evaluate(inst, cur, bound=bound, weights=weights)
                        if ev.feasible and ev.objective < best * (1 - 1e-12):
                            best, keep, changed = ev.objective, b, True
                            moves += 1
                    arr[n] = keep
        if not changed:
            break
    return cur, moves
