"""The typed details of `Results` that code reads (reasons, message, rank, accounting) agree with
the method's full record `info`, and the command line and the main job read only them."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from cefl_opt.generator import make_instance
from cefl_opt.solvers.base import (DecentralizedAccounting, TerminationCondition, solve,
                                   solve_together)

ROOT = Path(__file__).resolve().parent.parent


def test_an_infeasible_instance_gives_its_reasons():
    inst = make_instance("small", seed=0)
    bad = inst.copy(Rmax_s=np.full(inst.S, 0.5 * inst.B * inst.R_floor))
    res = solve(bad, "greedy-rate")
    assert res.termination_condition == TerminationCondition.provenInfeasible
    assert res.reasons and res.reasons == list(res.info["reasons"])
    assert "Rmax_s" in res.reasons[0]


@pytest.mark.parametrize("method,central", [("decentralized", ()),
                                            ("decentralized-polish",
                                             ("association_repair", "ipopt_polish"))])
def test_the_decentralised_accounting_is_typed_and_matches_the_record(method, central):
    res = solve(make_instance("tiny", seed=0), method, max_outer=5)
    acc = res.accounting
    assert isinstance(acc, DecentralizedAccounting) and res.rank == 0
    assert acc.central_steps == central
    assert (acc.stop_reason, acc.outer_iterations, acc.inner_iterations) == (
        res.info["stop_reason"], res.info["outer_iterations"], res.info["inner_iterations"])
    assert acc.outer_iterations == res.iterations >= 1
    per = res.info["messages"]["per_node_per_outer"]["count"]
    assert (acc.messages_per_node_outer_mean, acc.messages_per_node_outer_max) == (
        per["mean"], per["max"])


def test_a_centralised_method_has_no_accounting():
    res = solve(make_instance("tiny", seed=0), "greedy-rate")
    assert res.accounting is None and res.rank == 0 and res.reasons == []


def test_the_command_line_and_the_main_job_read_no_info_key():
    """`Results.info` is a record for people: code reads the typed fields."""
    hits = []
    paths = [*sorted((ROOT / "cefl_opt" / "cli").glob("*.py")), ROOT / "cefl_opt" / "pipeline.py"]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "info" and \
                    isinstance(node.value, ast.Name) and node.value.id in ("res", "results"):
                hits.append(f"{path.name}:{node.lineno}")
    assert hits == []


# ---------------------------------------------------------------------- solve_together
def test_solve_together_gives_what_solve_gives_each_method_in_order():
    """Two methods at once in their own children: each result as `solve` alone gives it, bit
    for bit, in the order asked; each wall time is its own child's."""
    inst = make_instance("tiny", rounds=2, seed=4)
    calls = [("greedy-rate", {}), ("fixed", {"aggregator": 1}), ("no-offload", {})]
    together = solve_together(inst, calls, at_once=2)
    for (method, kw), res in zip(calls, together):
        alone = solve(inst, method, **kw)
        assert res.method == method and res.status == alone.status
        assert res.objective == alone.objective
        assert res.solution.to_dict()["rounds"] == alone.solution.to_dict()["rounds"]
        assert res.solution.method == method and 0 < res.wall_s == res.solution.wall_s


def test_solve_together_checks_every_option_before_starting_any(monkeypatch):
    from cefl_opt.solvers import base
    from cefl_opt.solvers.options import OptionError
    started = []
    monkeypatch.setattr(base, "run_together", lambda *a, **k: started.append(a))
    inst = make_instance("tiny", rounds=1, seed=0)
    with pytest.raises(OptionError, match="method 'fixed'.*aggregator"):
        solve_together(inst, [("greedy-rate", {}), ("fixed", {"aggregator": -1})], at_once=2)
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        solve_together(inst, [("greedy-rate", {}), ("nope", {})], at_once=2)
    with pytest.raises(OptionError, match="method 'decentralized': backend 'mpi'"):
        solve_together(inst, [("decentralized", {"backend": "mpi"})], at_once=2)
    assert started == []


def test_solve_together_on_an_infeasible_instance_gives_each_method_its_reasons():
    inst = make_instance("small", seed=0)
    inst = inst.copy(Rmax_s=np.full(inst.S, 0.5 * inst.B * inst.R_floor))
    res = solve_together(inst, [("greedy-rate", {}), ("no-offload", {})], at_once=2)
    assert [r.method for r in res] == ["greedy-rate", "no-offload"]
    assert all(r.termination_condition is TerminationCondition.provenInfeasible
               and "Rmax_s" in r.reasons[0] for r in res)


def test_solve_together_returns_a_native_crash_beside_the_other_results(monkeypatch):
    import os
    from cefl_opt.solvers import centralized
    from cefl_opt.solvers.isolation import NativeCrash
    monkeypatch.setattr(centralized, "greedy_rate", lambda inst, opts: os.abort())
    inst = make_instance("tiny", rounds=1, seed=0)
    crash, ok = solve_together(inst, [("greedy-rate", {}), ("no-offload", {})], at_once=2)
    assert isinstance(crash, NativeCrash) and "aborted (SIGABRT)" in str(crash)
    assert ok.objective == solve(inst, "no-offload").objective
