"""Tests for two of the planted bugs the suite used to miss (issue 12, "Tests that let real bugs
through"): a lost sample when partition sizes truncate a fractional Dbar, and ipopt-enum skipping
a constant aggregator schedule."""
from __future__ import annotations

import numpy as np

from cefl_opt.generator import make_instance
from cefl_opt.learning.partition import DynamicPartition
from cefl_opt.learning.toy import toy_instance


def test_partition_rounds_fractional_sizes_half_up():
    inst = toy_instance(N=3, B=1, S=1, T=2, D=30, seed=0).copy(
        Dbar=[[20.5, 3.49, 0.5], [7.5, 1.51, 12.0]])
    y = np.arange(1000) % 10
    part = DynamicPartition(inst, y, seed=0)
    want = {0: [21, 3, 1], 1: [8, 2, 12]}                      # half up, never truncated
    for r in (0, 1, 2, 3):                                     # rounds 2, 3 cycle 0, 1
        assert part.sizes(r).tolist() == want[r % 2], r
        assert [len(ix) for ix in part.round(r)] == want[r % 2], r


def test_ipopt_enum_tries_every_constant_schedule(monkeypatch):
    """Every fixed aggregator [s] * T is a start of ipopt-enum (plus both greedy rules), so it
    is never worse than any `fixed` baseline; spy on the starts it builds."""
    from cefl_opt.solvers import centralized
    from cefl_opt.solvers.base import solve

    inst = make_instance("paper", ues=2, bss=1, dcs=3, rounds=2, seed=1)
    starts = []
    real = centralized.decisions_for

    def spy(inst_, aggs, *a, **kw):
        starts.append(tuple(int(s) for s in aggs))
        return real(inst_, aggs, *a, **kw)
    monkeypatch.setattr(centralized, "decisions_for", spy)
    res = solve(inst, "ipopt-enum")
    assert res.solution is not None
    S, T = inst.S, inst.T
    assert len(starts) == S + 2                                 # S constants, 2 greedy rules
    for s in range(S):
        assert (s,) * T in starts[:S], (s, starts)
    fixed = [solve(inst, "fixed", aggregator=s).objective for s in range(S)]
    assert res.objective <= min(fixed) * (1 + 1e-9)
