"""The decentralised method uses `InnerSolver` through its public members only (its collectives
are public methods), so the inner solver's private state can change without breaking it."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def private_uses(source: str, owner: str = "inner") -> list[str]:
    """`X.inner._name` or `inner._name` attribute uses in `source` (private members of the
    object held under the name `owner`)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            held = node.value
            name = held.id if isinstance(held, ast.Name) else getattr(held, "attr", None)
            if name == owner:
                out.append(f"{owner}.{node.attr}")
    return out


def test_private_uses_are_found_in_hand_source():
    assert private_uses("a = self.inner._x + inner._y + inner.z + other._w") == [
        "inner._x", "inner._y"]
    assert private_uses("inner.__class__") == []


def test_decentralized_calls_no_private_member_of_the_inner_solver():
    for module in ("decentralized.py", "aggregator_moves.py", "assoc_moves.py"):
        assert private_uses((ROOT / "solvers" / module).read_text(encoding="utf-8")) == [], module
