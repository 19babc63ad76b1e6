"""The native solvers' own verdict on the entries of `ipopt_options` and `scip_options`,
asked when the options are built, before any work.

Ipopt and SCIP check a parameter when it is set (name, type, range, valid strings).
`ipopt_value(name, value)` sets the entry on a throwaway one-variable cyipopt problem and
returns the value Ipopt takes: an integer given for a real option (TOML writes `tol = 1`)
becomes a float, as Ipopt's typed setter needs. `scip_value` sets it on a throwaway SCIP
model; a value SCIP would store differently (1.5 for an integer parameter) is refused too. A
refused entry is an `OptionError` naming it and quoting the solver's reason, which the
solver prints on the standard streams: they are captured here instead of shown. cyipopt and
pyscipopt are imported on first use.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
from typing import Any, Iterator, Mapping

from .errors import OptionError


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


@contextlib.contextmanager
def _captured(fds: tuple[int, ...] = (1,)) -> Iterator[list[str]]:
    """The lines a native library writes on the descriptors `fds` while the block runs
    (filled in on leaving), instead of on the terminal."""
    lines: list[str] = []
    for stream in (sys.stdout, sys.stderr):   # what Python holds goes out first, uncaptured
        with contextlib.suppress(Exception):
            stream.flush()
    with tempfile.TemporaryFile(mode="w+b") as cap:
        saved = [os.dup(fd) for fd in fds]
        try:
            for fd in fds:
                os.dup2(cap.fileno(), fd)
            yield lines
        finally:
            for fd, old in zip(fds, saved):
                os.dup2(old, fd)
                os.close(old)
            cap.seek(0)
            lines.extend(ln.strip() for ln in cap.read().decode(errors="replace").splitlines()
                         if ln.strip())


def _first(lines: list[str], default: str) -> str:
    return " ".join((lines[0] if lines else default).split())


def _try_set(name: str, value: Any) -> str | None:
    """None when Ipopt takes `name = value`; else Ipopt's reason (its first printed line)."""
    with _captured() as lines:
        try:
            _problem().add_option(name, value)
            ok = True
        except TypeError:          # cyipopt: "Error while assigning an option"
            ok = False
    return None if ok else _first(lines, "Ipopt refuses it")


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


# ---------------------------------------------------------------------- SCIP
@functools.lru_cache(maxsize=1)
def _scip_model():
    import pyscipopt
    m = pyscipopt.Model()
    m.hideOutput()
    return m


def scip_value(name: Any, value: Any) -> Any:
    """`value` when SCIP takes parameter `name` = `value` and stores it as given; else
    OptionError naming the entry and SCIP's reason (an unknown parameter, a value of the
    wrong type or out of its range)."""
    entry = f"option 'scip_options' entry {name!r} = {value!r}"
    if not isinstance(name, str) or not name:
        raise OptionError(f"{entry}: a parameter name must be a non-empty string")
    if not isinstance(value, (bool, int, float, str)):
        raise OptionError(f"{entry}: SCIP takes a number, true/false or a string")
    m = _scip_model()
    with _captured((1, 2)) as lines:
        try:
            old = m.getParam(name)
            m.setParam(name, value)
            got = m.getParam(name)
            m.setParam(name, old)
            why = None
        except KeyError:
            why = "not a SCIP parameter"
        except (ValueError, TypeError, OverflowError) as e:
            why = str(e)
    if why is not None:
        from .scip_interface import scip_error  # SCIP's own error line (loads pyomo's SCIP)
        raise OptionError(f"{entry} is refused by SCIP: "
                          f"{scip_error(chr(10).join(lines)) or why}")
    if not isinstance(value, str) and got != value:
        raise OptionError(f"{entry} is refused: SCIP would store it as {got!r}")
    return value


def check_scip_options(options: Mapping[str, Any]) -> str | None:
    """The `check` of a `scip_options` field: None, or the first refused entry's reason."""
    try:
        for k, v in options.items():
            scip_value(k, v)
    except OptionError as e:
        return str(e).removeprefix("option 'scip_options' ")
    return None
