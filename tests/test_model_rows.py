"""`build_problem(rows=)`: a process that holds some nodes builds their terms, coupling rows
and copies only; every node keeps its own variables and its convex set (over the owners'
variables where the node is not held); the copies' owners are read from `tie_pairs`, not from
consensus rows."""
from __future__ import annotations

import pyomo.environ as pyo
import pytest

from cefl_opt.models import build_problem, node_blocks
from cefl_opt.models.problem import tie_pairs

from conftest import hand_instance


def _rows(blk) -> dict[str, str]:
    return {c.name: str(c.expr) for c in blk.coupling.component_data_objects(pyo.Constraint)}


def _vars(blk) -> list[str]:
    return [v.name for v in blk.component_data_objects(pyo.Var, descend_into=False)]


@pytest.mark.parametrize("bound", ["corollary", "general"])
@pytest.mark.parametrize("with_dc0", [True, False])
def test_held_nodes_get_the_full_models_rows_and_the_others_none(bound, with_dc0):
    from pyomo.repn import generate_standard_repn
    from cefl_opt.models import load_solution
    from cefl_opt.system import reference_solution
    tiny = hand_instance()
    names = tiny.node_names()
    held = [names[0], f"bs{tiny.B - 1}", "dc0" if with_dc0 else f"dc{tiny.S - 1}"]
    full = build_problem(tiny, bound=bound)
    part = build_problem(tiny, bound=bound, rows=held)
    fb, pb = node_blocks(full), node_blocks(part)
    ties = list(full.consensus.component_data_objects(pyo.Constraint))
    owner = {c.expr.args[0].name: c.expr.args[1].name for c in ties}   # copy -> owner

    def convex(blk, to_owner):
        out = []
        for c in blk.convex.component_data_objects(pyo.Constraint):
            r = generate_standard_repn(c.body)
            vs = sorted(owner.get(v.name, v.name) if to_owner else v.name for v in r.linear_vars)
            out.append((vs, c.lower, c.upper))
        return out
    for nm in names:
        if nm in held:
            assert _vars(pb[nm]) == _vars(fb[nm]) and convex(pb[nm], False) == convex(fb[nm], False)
            assert _rows(pb[nm]) == _rows(fb[nm]) and _rows(pb[nm])
            assert str(pb[nm].cost.expr) == str(fb[nm].cost.expr)
            continue
        # its own variables only; its convex set over the owners' variables (a DC's sums of
        # its rho_nb copies are the UEs' own sums, not repeated)
        assert _vars(pb[nm]) == [v for v in _vars(fb[nm]) if v not in owner]
        want = [g for g, c in zip(convex(fb[nm], True), fb[nm].convex.component_data_objects(
            pyo.Constraint)) if "rho_nb_sum" not in c.name]
        assert convex(pb[nm], False) == want and want
        assert _rows(pb[nm]) == {} and not hasattr(pb[nm], "cost")
    # the record of the copies is the consensus rows, in the full model; a part's is the
    # held nodes' rows (by name) and it has no rows
    assert sorted((a.name, b.name) for a, b in tie_pairs(full)) \
        == sorted((c.expr.args[0].name, c.expr.args[1].name) for c in ties)
    held_ties = sorted((c.expr.args[0].name, c.expr.args[1].name) for c in ties
                       if any(c.expr.args[0].name.startswith(f"{nm[:2]}[{nm[2:]}].") for nm in held))
    assert sorted((a.name, b.name) for a, b in tie_pairs(part)) == held_ties and held_ties
    assert not list(part.consensus.component_data_objects(pyo.Constraint))
    sol = reference_solution(tiny)
    load_solution(full, sol)
    load_solution(part, sol)
    assert pyo.value(part.ml_term) == pytest.approx(pyo.value(full.ml_term), rel=1e-14)
    if with_dc0 and bound == "corollary":   # the general bound also reads the other DPUs
        assert str(part.ml_term.expr) == str(full.ml_term.expr)
    assert not hasattr(part, "obj") and hasattr(full, "obj")


def test_every_node_held_is_the_whole_model():
    tiny = hand_instance()
    m = build_problem(tiny, rows=tiny.node_names())
    assert hasattr(m, "obj")
    assert all(_rows(b) for nm, b in node_blocks(m).items() if nm.startswith(("ue", "dc")))


@pytest.mark.parametrize("rows, copies, match", [
    (["ue0", "ue99"], True, r"option 'rows': unknown node\(s\) \['ue99'\]"),
    (["ue0"], False, "option 'rows' needs the block form"),
])
def test_bad_rows_are_refused(rows, copies, match):
    tiny = hand_instance()
    with pytest.raises(ValueError, match=match):
        build_problem(tiny, rows=rows, copies=copies)


def test_deferred_rows_are_built_one_node_at_a_time():
    """`build_problem(rows=, defer=True)`: a held node (dc0 excepted: the step row follows its
    rows) has no terms or rows until `build_node_rows`, which builds the full model's, once;
    `drop_node_terms` removes them again and keeps the variables and convex set."""
    from cefl_opt.models.problem import build_node_rows, drop_node_terms
    tiny = hand_instance()
    held = ["ue0", "bs0", "dc0", f"dc{tiny.S - 1}"]
    full = build_problem(tiny)
    part = build_problem(tiny, rows=held, defer=True)
    fb, pb = node_blocks(full), node_blocks(part)
    assert _rows(pb["dc0"]) == _rows(fb["dc0"])
    for nm in ("ue0", "bs0", f"dc{tiny.S - 1}"):
        assert _rows(pb[nm]) == {} and not hasattr(pb[nm], "cost")
        build_node_rows(part, nm)
        build_node_rows(part, nm)
        assert _rows(pb[nm]) == _rows(fb[nm]) and _rows(pb[nm])
        assert str(pb[nm].cost.expr) == str(fb[nm].cost.expr)
        n_vars = len(_vars(pb[nm]))
        drop_node_terms(pb[nm])
        assert not hasattr(pb[nm], "coupling") and not hasattr(pb[nm], "cost")
        assert len(_vars(pb[nm])) == n_vars and hasattr(pb[nm], "convex")
    build_node_rows(part, "ue1")   # not held: nothing to build
    assert _rows(pb["ue1"]) == {}
