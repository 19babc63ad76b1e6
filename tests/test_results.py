"""The typed details of `Results` that code reads (reasons, message, rank, accounting) agree with
the method's full record `info`, and the command line and the main job read only them."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from cefl_opt.generator import make_instance
from cefl_opt.solvers.base import DecentralizedAccounting, TerminationCondition, solve

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
