"""The solver layer's exceptions, below every solver module (`base`, `options`, `isolation`,
`native_check` all raise them; `base` and `options` re-export them)."""
from __future__ import annotations


class SolverError(RuntimeError):
    """A solver is missing or failed in a way that leaves no honest answer."""


class OptionError(ValueError):
    """An option value is wrong: the message names the option and the value."""
