"""Ipopt's own verdict on an `ipopt_options` entry, asked before any work.

Ipopt checks an option when it is set (its registered options: name, type, range, valid
strings). `ipopt_value(name, value)` sets the entry on a throwaway one-variable problem
(cyipopt is imported here, on first use) and returns the value Ipopt takes: an integer given
for a real option (TOML writes `tol = 1`) becomes a float, as Ipopt's typed setter needs. A
refused entry is an `OptionError` naming it and quoting Ipopt's reason, which Ipopt prints on
the standard output and which is captured here instead of shown.
"""
from __future__ import annotations

import functools
import os
import tempfile
from typing import Any, Mapping

from .options import OptionError


class _Nothing:
    """The throwaway problem's callbacks (it is never solved)."""

    def objective(self, x):
        return 0.0

    def gradient(self, x):
        return x * 0.0


@functools.lru_cache(maxsize=1)
def _problem():
    import cyipopt
    return cyipopt.Problem(n=1, m=0, problem_obj=_Nothing(), lb=[0.0], ub=[1.0])


def _try_set(name: str, value: Any) -> str | None:
    """None when Ipopt takes `name = value`; else Ipopt's reason (its first printed line)."""
    with tempfile.TemporaryFile(mode="w+b") as cap:
        saved = os.dup(1)
        try:
            os.dup2(cap.fileno(), 1)
            try:
                _problem().add_option(name, value)
                ok = True
            except TypeError:      # cyipopt: "Error while assigning an option"
                ok = False
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        if ok:
            return None
        cap.seek(0)
        lines = [ln.strip() for ln in cap.read().decode(errors="replace").splitlines()]
    why = next((ln for ln in lines if ln), "Ipopt refuses it")
    return " ".join(why.split())


def ipopt_value(name: Any, value: Any) -> Any:
    """The value Ipopt takes for option `name`, or OptionError naming the entry and Ipopt's
    reason (an unknown option, a value of the wrong type or out of its range)."""
    entry = f"option 'ipopt_options' entry {name!r} = {value!r}"
    if not isinstance(name, str) or not name:
        raise OptionError(f"{entry}: an option name must be a non-empty string")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise OptionError(f"{entry}: Ipopt takes a number or a string (e.g. \"yes\")")
    why = _try_set(name, value)
    if why is not None and isinstance(value, int) and _try_set(name, float(value)) is None:
        return float(value)
    if why is not None:
        raise OptionError(f"{entry} is refused by Ipopt: {why}")
    return value


def ipopt_values(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """`options` with every entry checked by Ipopt (`ipopt_value`)."""
    return {k: ipopt_value(k, v) for k, v in (options or {}).items()}


def check_ipopt_options(options: Mapping[str, Any]) -> str | None:
    """The `check` of an `ipopt_options` field: None, or the first refused entry's reason."""
    try:
        ipopt_values(options)
    except OptionError as e:
        return str(e).removeprefix("option 'ipopt_options' ")
    return None
