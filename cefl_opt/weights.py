"""The objective's weights xi1, xi2, xi3 (eqn: optimization objective text): their names and
the check of an override, below both `system` and `solution` (a solution file records them)."""
from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

WEIGHT_KEYS = ("xi1", "xi2", "xi3")


def weights_problem(weights: Any) -> str | None:
    """Why `weights` cannot override the objective's weights (a mapping of some of xi1, xi2,
    xi3 to finite numbers >= 0), or None."""
    if not isinstance(weights, Mapping):
        return f"must be a mapping of {', '.join(WEIGHT_KEYS)}, got {type(weights).__name__}"
    bad = sorted(set(map(str, weights)) - set(WEIGHT_KEYS))
    if bad:
        return f"has unknown key {bad[0]!r} (expected {', '.join(WEIGHT_KEYS)})"
    for k, x in weights.items():
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) \
                or x < 0:
            return f"entry {k!r} must be a finite number >= 0, got {x!r}"
    return None
