"""Orchestrations (solutions of Problem P) and their JSON format `cefl-solution/1`.

A solution records the fingerprint of the instance it was computed for (key ``instance_sha256``,
`Instance.fingerprint`); :meth:`Solution.check_instance` is the one check every command that
reads a solution with an instance (``evaluate``, ``train``, ``plot``) runs. Files written before
the key existed still load: the check then returns a note instead of refusing."""
from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .instance import Instance, InstanceError, numeric_array
from .io import InputError, read_json, write_json_atomic
from .weights import weights_problem

FORMAT_TAG = "cefl-solution/1"

# per-round field -> (shape letters, dtype)
ROUND_FIELDS: dict[str, tuple[str, type]] = {
    "rho_nb": ("NB", float), "rho_bs": ("BS", float), "f": ("N", float), "z": ("S", float),
    "gamma_ue": ("N", float), "gamma_dc": ("S", float), "m_ue": ("N", float), "m_dc": ("S", float),
    "uplink_bs": ("N", int), "downlink_bs": ("N", int), "R_bs": ("BS", float),
}


@dataclass
class RoundDecision:
    """Every decision of one round t (docs/formulation.md, '2. Variables'), physical units: f in
    Hz, z in data points/s, R_bs in bit/s. `aggregator` is the DC index s with I_s = 1;
    `uplink_bs[n]` the b with I_nb = 1, `downlink_bs[n]` the b with I_bn = 1."""

    rho_nb: np.ndarray
    rho_bs: np.ndarray
    f: np.ndarray
    z: np.ndarray
    gamma_ue: np.ndarray
    gamma_dc: np.ndarray
    m_ue: np.ndarray
    m_dc: np.ndarray
    aggregator: int
    uplink_bs: np.ndarray
    downlink_bs: np.ndarray
    R_bs: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k).tolist() for k in ROUND_FIELDS}
        d["aggregator"] = int(self.aggregator)
        return d

    def copy(self) -> "RoundDecision":
        return RoundDecision(**{k: getattr(self, k).copy() for k in ROUND_FIELDS},
                             aggregator=int(self.aggregator))


def _checked_round(t: int, arrays: dict[str, np.ndarray], agg: Any,
                   instance: Instance | None) -> RoundDecision:
    """Round t's decision from its field arrays, each checked: finite; with `instance`, of the
    shape its dimensions give (ROUND_FIELDS), the BS indices in 0..B-1 and the aggregator a
    DC index 0..S-1. InstanceError (a ValueError) naming the field."""
    dims = instance.dims() if instance is not None else None
    kw: dict[str, np.ndarray] = {}
    for k, (shape, dtype) in ROUND_FIELDS.items():
        name, arr = f"rounds[{t}].{k}", arrays[k]
        if not np.all(np.isfinite(arr)):
            bad = np.argwhere(~np.isfinite(arr))[0].tolist()
            raise InstanceError(f"field '{name}' has a non-finite value {arr[tuple(bad)]} at "
                                f"{bad}")
        if dims is not None:
            want = tuple(dims[ch] for ch in shape)
            if arr.shape != want:
                raise InstanceError(f"field '{name}' has shape {list(arr.shape)}, expected "
                                    f"{list(want)}")
        if dtype is int:
            if np.any(arr != np.round(arr)):
                raise InstanceError(f"field '{name}' must hold integers")
            if np.any(np.abs(arr) > 2 ** 31):
                raise InstanceError(f"field '{name}' has an index out of range")
            arr = arr.astype(int)
            if instance is not None and (np.any(arr < 0) or np.any(arr >= instance.B)):
                raise InstanceError(f"field '{name}' has a BS index outside "
                                    f"0..{instance.B - 1}: {arr.tolist()}")
        kw[k] = arr
    if isinstance(agg, (bool, np.bool_)) or not isinstance(agg, numbers.Integral):
        raise InstanceError(f"field 'rounds[{t}].aggregator' must be an integer, got {agg!r}")
    if instance is not None and not 0 <= agg < instance.S:
        raise InstanceError(f"field 'rounds[{t}].aggregator' value {agg} is not a DC index "
                            f"0..{instance.S - 1}")
    return RoundDecision(**kw, aggregator=int(agg))


class InstanceMismatch(InputError):
    """A solution's recorded instance fingerprint is not the given instance's."""


@dataclass
class Solution:
    """A full orchestration (one `RoundDecision` per round, docs/formulation.md '2. Variables')
    plus how it was obtained: the method, its status, wall time, objective and its terms, and
    the proven bound and gap where the method has one. Its file format is on the File formats
    page.

    Examples:
        >>> import tempfile, pathlib
        >>> from cefl_opt import Solution, make_instance, solve
        >>> sol = solve(make_instance("tiny", seed=0), "fixed", aggregator=1).solution
        >>> [r.aggregator for r in sol.rounds]
        [1, 1]
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "sol.json"
        >>> sol.save(path)
        >>> Solution.load(path).objective == sol.objective
        True
    """

    rounds: list[RoundDecision]
    method: str = "manual"
    status: str = "unknown"
    wall_s: float = 0.0
    objective: float | None = None
    terms: dict[str, float] = field(default_factory=dict)
    bound: float | None = None
    gap: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    instance_sha256: str | None = None   # `Instance.fingerprint` of its instance; None: unknown
    weights: dict[str, float] | None = None   # xi1, xi2, xi3 it was scored with; None: unknown

    def to_dict(self) -> dict[str, Any]:
        d = {"format": FORMAT_TAG, "method": self.method, "status": self.status,
             "wall_s": self.wall_s, "objective": self.objective, "terms": self.terms,
             "bound": self.bound, "gap": self.gap, "info": self.info,
             "rounds": [r.to_dict() for r in self.rounds]}
        if self.instance_sha256 is not None:
            d["instance_sha256"] = self.instance_sha256
        if self.weights is not None:
            d["weights"] = dict(self.weights)
        return d

    def save(self, path: str | Path) -> None:
        """Write the solution atomically; a non-finite objective is refused (InputError) and
        nothing is written (JSON cannot carry it)."""
        if self.objective is not None and not np.isfinite(self.objective):
            raise InputError(f"solution for '{path}' has a non-finite objective "
                             f"{self.objective}; not written")
        write_json_atomic(path, self.to_dict())

    def check_shapes(self, inst: Instance) -> "Solution":
        """Self when every round fits `inst`: T rounds, each field of the shape the instance's
        dimensions give, finite, the BS indices in 0..B-1 and the aggregator in 0..S-1 (the
        checks a solution file gets on loading); else InstanceError (a ValueError) naming the
        field. A round that is not a RoundDecision, or a field that is not a numeric numpy
        array, is a TypeError naming it."""
        if not isinstance(self.rounds, (list, tuple)):
            raise TypeError(f"field 'rounds' must be a list of RoundDecision, got "
                            f"{type(self.rounds).__name__}")
        if len(self.rounds) != inst.T:
            raise InstanceError(f"field 'rounds' has {len(self.rounds)} rounds, the instance "
                                f"has {inst.T}")
        for t, r in enumerate(self.rounds):
            if not isinstance(r, RoundDecision):
                raise TypeError(f"field 'rounds[{t}]' must be a RoundDecision, got "
                                f"{type(r).__name__}")
            arrays = {}
            for k in ROUND_FIELDS:
                v = getattr(r, k)
                if not isinstance(v, np.ndarray) or v.dtype.kind not in "biuf":
                    what = f"{v.dtype} array" if isinstance(v, np.ndarray) else type(v).__name__
                    raise TypeError(f"field 'rounds[{t}].{k}' must be a numeric numpy array, "
                                    f"got {what}")
                arrays[k] = v.astype(float)
            _checked_round(t, arrays, r.aggregator, inst)
        return self

    def for_instance(self, inst: Instance) -> "Solution":
        """Record `inst`'s fingerprint (the solution was computed for it); returns self."""
        self.instance_sha256 = inst.fingerprint()
        return self

    def check_instance(self, inst: Instance, *, allow_other: bool = False,
                       option: str = "--allow-other-instance") -> str | None:
        """Whether this solution belongs to `inst`: None when its recorded fingerprint is
        `inst`'s; a note (a string to show) when the solution records none (an old file) or
        when it records another one and `allow_other`; else InstanceMismatch naming both
        fingerprints and `option`, the flag that proceeds anyway."""
        if self.instance_sha256 is None:
            return ("note: the solution records no instance fingerprint (written before "
                    "'instance_sha256' existed); it cannot be checked against the instance")
        have = inst.fingerprint()
        if self.instance_sha256 == have:
            return None
        text = (f"the solution was computed for another instance (its 'instance_sha256' "
                f"{self.instance_sha256[:12]}... is not the instance's {have[:12]}...)")
        if allow_other:
            return f"note: {text}; going on as {option} asks"
        raise InstanceMismatch(f"{text}; pass {option} to use it anyway")

    @classmethod
    def from_dict(cls, data: Any, instance: Instance | None = None) -> "Solution":
        if not isinstance(data, dict):
            raise InstanceError("solution file must hold a JSON object")
        if data.get("format") != FORMAT_TAG:
            raise InstanceError(f"field 'format' is {data.get('format')!r}, expected {FORMAT_TAG!r}")
        known = {"format", "method", "status", "wall_s", "objective", "terms", "bound", "gap",
                 "info", "rounds", "instance_sha256", "weights"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InstanceError(f"unknown key {unknown[0]!r} in solution")
        rounds_raw = data.get("rounds")
        if not isinstance(rounds_raw, list):
            raise InstanceError("field 'rounds' must be a list")
        if instance is not None and len(rounds_raw) != instance.T:
            raise InstanceError(f"field 'rounds' has {len(rounds_raw)} rounds, the instance has "
                                f"{instance.T}")
        rounds = []
        for t, r in enumerate(rounds_raw):
            if not isinstance(r, dict):
                raise InstanceError(f"field 'rounds[{t}]' must be an object")
            extra = sorted(set(r) - set(ROUND_FIELDS) - {"aggregator"})
            if extra:
                raise InstanceError(f"unknown key {extra[0]!r} in rounds[{t}]")
            kw: dict[str, Any] = {}
            for k in ROUND_FIELDS:
                if k not in r:
                    raise InstanceError(f"field 'rounds[{t}].{k}' is missing")
                kw[k] = numeric_array(r[k], f"rounds[{t}].{k}")
            rounds.append(_checked_round(t, kw, r.get("aggregator"), instance))
        for k in ("wall_s", "objective", "bound", "gap"):
            v = data.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not np.isfinite(v)):
                raise InstanceError(f"field '{k}' must be a finite number or null, got {v!r}")
        for k in ("terms", "info"):
            if data.get(k) is not None and not isinstance(data.get(k), dict):
                raise InstanceError(f"field '{k}' must be an object, got {data.get(k)!r}")
        fp = data.get("instance_sha256")
        if fp is not None and (not isinstance(fp, str)
                               or not re.fullmatch(r"[0-9a-f]{64}", fp)):
            raise InstanceError(f"field 'instance_sha256' must be 64 hex digits, got {fp!r}")
        weights = data.get("weights")
        if weights is not None:
            why = weights_problem(weights)
            if why:
                raise InstanceError(f"field 'weights' {why}")
            weights = {k: float(v) for k, v in weights.items()}
        terms = data.get("terms") or {}
        return cls(instance_sha256=fp, weights=weights, rounds=rounds, method=str(data.get("method", "unknown")),
                   status=str(data.get("status", "unknown")), wall_s=float(data.get("wall_s") or 0.0),
                   objective=data.get("objective"), terms=dict(terms), bound=data.get("bound"),
                   gap=data.get("gap"), info=dict(data.get("info") or {}))

    @classmethod
    def load(cls, path: str | Path, instance: Instance | None = None) -> "Solution":
        """Read a solution file.

        Args:
            path: the JSON file.
            instance: when given, the solution's shapes are checked against it (whether it
                was computed for it: `check_instance`).

        Returns:
            The solution.

        Raises:
            InputError: the file is missing, malformed, or not for `instance`.
        """
        return cls.from_dict(read_json(path, what="solution"), instance)
