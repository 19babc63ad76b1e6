"""`build_problem(rows=)`: a process that holds some nodes builds their terms and coupling rows
only; every node keeps its variables, copies and convex set, and the consensus is complete."""
from __future__ import annotations

import pyomo.environ as pyo
import pytest

from cefl_opt.models import build_problem, node_blocks

from conftest import hand_instance


def _rows(blk) -> dict[str, str]:
    return {c.name: str(c.expr) for c in blk.coupling.component_data_objects(pyo.Constraint)}


def _vars(blk) -> list[str]:
    return [v.name for v in blk.component_data_objects(pyo.Var, descend_into=False)]


@pytest.mark.parametrize("bound", ["corollary", "general"])
@pytest.mark.parametrize("with_dc0", [True, False])
def test_held_nodes_get_the_full_models_rows_and_the_others_none(bound, with_dc0):
    tiny = hand_instance()
    names = tiny.node_names()
    held = [names[0], f"bs{tiny.B - 1}", "dc0" if with_dc0 else f"dc{tiny.S - 1}"]
    full = build_problem(tiny, bound=bound)
    part = build_problem(tiny, bound=bound, rows=held)
    fb, pb = node_blocks(full), node_blocks(part)
    for nm in names:
        assert _vars(pb[nm]) == _vars(fb[nm])          # variables and copies everywhere
        assert [str(c.expr) for c in pb[nm].convex.component_data_objects(pyo.Constraint)] \
            == [str(c.expr) for c in fb[nm].convex.component_data_objects(pyo.Constraint)]
        if nm in held:
            assert _rows(pb[nm]) == _rows(fb[nm]) and _rows(pb[nm])
            assert str(pb[nm].cost.expr) == str(fb[nm].cost.expr)
        else:
            assert _rows(pb[nm]) == {} and not hasattr(pb[nm], "cost")
    assert len(list(part.consensus.component_data_objects(pyo.Constraint))) \
        == len(list(full.consensus.component_data_objects(pyo.Constraint)))
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
