"""Network instances of CE-FL (SPEC §1, §6): every given quantity of Problem P, per round.

All quantities are stored in SI units (bit/s, W, Hz, data points, s). The Pyomo model and the
solvers rescale internally (GHz, Gbit/s, ...); the instance file stays physical.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_TAG = "cefl-instance/1"


class InstanceError(ValueError):
    """A malformed or physically impossible instance; the message names the field and value."""


class InfeasibleInstance(InstanceError):
    """A well-formed instance for which Problem P has no feasible point (e.g. capacities)."""


# name -> (shape spec, kind). Shape letters: T rounds, N UEs, B BSs, S DCs, I = N+S DPUs.
ARRAY_FIELDS: dict[str, tuple[str, str]] = {
    "Dbar": ("TN", "pos"),          # data points held by UE n at round t
    "R_nb": ("TNB", "pos"),         # UE->BS uplink rate (bit/s)
    "P_nb": ("TNB", "pos"),         # UE transmit power (W)
    "R_bn": ("TBN", "pos"),         # BS->UE downlink rate (bit/s)
    "P_b": ("TB", "pos"),           # BS broadcast power (W)
    "Rmax_bs": ("BS", "pos"),       # BS->DC link capacity (bit/s)
    "Rmax_s": ("S", "pos"),         # DC ingress capacity (bit/s)
    "P_bs": ("BS", "pos"),          # BS->DC transmit power (W)
    "R_sb": ("TSB", "pos"),         # DC->BS rate (bit/s)
    "P_sb": ("SB", "pos"),          # DC->BS power (W)
    "R_ss": ("TSS", "pos_offdiag"),  # DC->DC rate (bit/s); diagonal unused (delta_ss = 0)
    "P_ss": ("SS", "nonneg"),       # DC->DC power (W)
    "c": ("N", "pos"),              # UE CPU cycles per data point (per SGD sample)
    "alpha": ("N", "pos"),          # UE effective capacitance (energy = c g m D f^2 alpha/2)
    "f_min": ("N", "pos"),          # Hz
    "f_max": ("N", "pos"),          # Hz
    "M": ("S", "pos"),              # machines per DC
    "C": ("S", "pos"),              # per-machine capacity (data points/s)
    "Pbar": ("S", "pos"),           # peak power per machine (W)
    "Theta": ("I", "nonneg"),       # local data variability (Assumption 2)
    "sigma": ("I", "nonneg"),       # data standard deviation sigma~_i
    "Delta": ("TI", "nonneg"),      # model drift per unit time
    "xi3": ("K6", "nonneg"),        # energy sub-weights xi_{3,1..6}
}

SCALAR_FIELDS: dict[str, str] = {
    "beta_D": "pos", "beta_M": "pos", "rho_idle": "unit",
    "eta": "pos", "mu": "nonneg", "vartheta": "pos", "L": "pos",
    "zeta1": "ge1", "zeta2": "nonneg", "F0_minus_Fstar": "nonneg",
    "gamma_min": "ge1", "gamma_max": "ge1", "m_floor": "unit_pos", "z_floor": "unit_pos",
    "R_floor": "pos", "xi1": "nonneg", "xi2": "nonneg", "xi3_total": "nonneg",
}

META_FIELDS = ("name", "preset", "seed", "dc_names", "ue_subnet", "bs_subnet", "dc_subnet",
               "ue_labels", "graph_edges", "links", "notes")

# Per-link fields: their entries of an absent UE-BS link (see `Instance.links`) must be 0.
LINK_FIELDS = {"R_nb": "TNB", "P_nb": "TNB", "R_bn": "TBN"}


@dataclass
class Instance:
    """Every given quantity of Problem P (SPEC §1). Arrays are numpy, rounds first."""

    name: str
    Dbar: np.ndarray
    R_nb: np.ndarray
    P_nb: np.ndarray
    R_bn: np.ndarray
    P_b: np.ndarray
    Rmax_bs: np.ndarray
    Rmax_s: np.ndarray
    P_bs: np.ndarray
    R_sb: np.ndarray
    P_sb: np.ndarray
    R_ss: np.ndarray
    P_ss: np.ndarray
    c: np.ndarray
    alpha: np.ndarray
    f_min: np.ndarray
    f_max: np.ndarray
    M: np.ndarray
    C: np.ndarray
    Pbar: np.ndarray
    Theta: np.ndarray
    sigma: np.ndarray
    Delta: np.ndarray
    xi3: np.ndarray
    beta_D: float = 6272.0
    beta_M: float = 4.0e7
    rho_idle: float = 0.4
    eta: float = 0.001
    mu: float = 0.01
    vartheta: float = 0.01
    L: float = 1.0
    zeta1: float = 1.5
    zeta2: float = 1.0
    F0_minus_Fstar: float = 2.3
    gamma_min: float = 1.0
    gamma_max: float = 20.0
    m_floor: float = 0.01
    z_floor: float = 0.01
    R_floor: float = 1.0e6
    xi1: float = 1.0
    xi2: float = 1.0
    xi3_total: float = 1.0
    preset: str = "custom"
    seed: int | None = None
    dc_names: list[str] = field(default_factory=list)
    ue_subnet: list[int] = field(default_factory=list)
    bs_subnet: list[int] = field(default_factory=list)
    dc_subnet: list[int] = field(default_factory=list)
    ue_labels: list = field(default_factory=list)      # [T][N] -> list of label ids held
    graph_edges: list = field(default_factory=list)    # [[u, v], ...] node names "ue0","bs1","dc2"
    # UE-BS links: links[n] = sorted BS indices UE n can reach; None = every UE reaches every BS.
    # An absent link has no variables (rho_nb, I_nb, I_bn) and its R_nb, P_nb, R_bn entries are 0.
    links: list | None = None
    notes: dict = field(default_factory=dict)

    # ---- sizes -------------------------------------------------------------------------
    @property
    def T(self) -> int:
        return int(self.Dbar.shape[0])

    @property
    def N(self) -> int:
        return int(self.Dbar.shape[1])

    @property
    def B(self) -> int:
        return int(self.Rmax_bs.shape[0])

    @property
    def S(self) -> int:
        return int(self.Rmax_bs.shape[1])

    @property
    def I(self) -> int:  # noqa: E743 - the paper's name for the DPU set
        return self.N + self.S

    def dims(self) -> dict[str, int]:
        return {"T": self.T, "N": self.N, "B": self.B, "S": self.S, "I": self.I, "K6": 6}

    # ---- UE-BS links -----------------------------------------------------------------------
    @property
    def link_mask(self) -> np.ndarray:
        """Boolean [N, B]: True where UE n has a link to BS b (all True when `links` is None)."""
        if self.links is None:
            return np.ones((self.N, self.B), bool)
        mask = np.zeros((self.N, self.B), bool)
        rows = np.repeat(np.arange(len(self.links)), [len(bs) for bs in self.links])
        mask[rows, np.fromiter(itertools.chain.from_iterable(self.links), int, rows.size)] = True
        return mask

    def ue_links(self) -> list[list[int]]:
        """links[n]: the BSs UE n reaches (every BS when `links` is None)."""
        if self.links is None:
            return [list(range(self.B)) for _ in range(self.N)]
        return [sorted(int(b) for b in bs) for bs in self.links]

    def bs_links(self) -> list[list[int]]:
        """The UEs each BS reaches, in UE order."""
        out: list[list[int]] = [[] for _ in range(self.B)]
        for n, bs in enumerate(self.ue_links()):
            for b in bs:
                out[b].append(n)
        return out

    def link_pairs(self) -> list[tuple[int, int]]:
        """Every present link (n, b), UE-major."""
        return [(n, b) for n, bs in enumerate(self.ue_links()) for b in bs]

    # ---- validation --------------------------------------------------------------------
    def validate(self) -> "Instance":
        """Check shapes, signs and structure; raise InstanceError naming the field and value."""
        if self.Dbar.ndim != 2 or self.Rmax_bs.ndim != 2:
            raise InstanceError("field 'Dbar' must be [T][N] and 'Rmax_bs' [B][S]")
        d = self.dims()
        if min(d["T"], d["N"], d["B"], d["S"]) < 1:
            raise InstanceError(f"instance needs at least one round, UE, BS and DC; got {d}")
        self._validate_links()
        present = self.link_mask
        for name, (shape, kind) in ARRAY_FIELDS.items():
            arr = getattr(self, name)
            want = tuple(d[ch] if ch in d else None for ch in _shape_letters(shape))
            if arr.shape != want:
                raise InstanceError(f"field '{name}' has shape {list(arr.shape)}, expected "
                                    f"{list(want)} ({shape})")
            if not np.all(np.isfinite(arr)):
                bad = _first_bad(arr, ~np.isfinite(arr))
                raise InstanceError(f"field '{name}' has a non-finite value {bad[1]} at {bad[0]}")
            mask = _kind_violation(arr, kind)
            if name in LINK_FIELDS:  # only present links must be positive; absent ones are 0
                on = present if LINK_FIELDS[name] == "TNB" else present.T
                given = np.broadcast_to(~on, arr.shape) & (arr != 0)
                if given.any():
                    idx, val = _first_bad(arr, given)
                    n, b = (idx[1], idx[2]) if LINK_FIELDS[name] == "TNB" else (idx[2], idx[1])
                    raise InstanceError(f"field '{name}' has value {val} at index {idx} for an "
                                        f"absent link (UE {n} - BS {b} is not in 'links'); "
                                        f"absent links carry 0")
                mask &= np.broadcast_to(on, arr.shape)
            if mask.any():
                idx, val = _first_bad(arr, mask)
                raise InstanceError(f"field '{name}' has invalid value {val} at index {idx} "
                                    f"(must be {_KIND_TEXT[kind]})")
        for name, kind in SCALAR_FIELDS.items():
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                raise InstanceError(f"field '{name}' must be a finite number, got {v!r}")
            if _kind_violation(np.array([float(v)]), kind).any():
                raise InstanceError(f"field '{name}' has invalid value {v} (must be {_KIND_TEXT[kind]})")
        if np.any(self.f_min > self.f_max):
            n = int(np.argmax(self.f_min > self.f_max))
            raise InstanceError(f"field 'f_min' value {self.f_min[n]} exceeds f_max "
                                f"{self.f_max[n]} at UE {n}")
        if self.gamma_min > self.gamma_max:
            raise InstanceError(f"field 'gamma_min' value {self.gamma_min} exceeds gamma_max {self.gamma_max}")
        if self.eta * self.mu >= 1:
            raise InstanceError(f"field 'mu' value {self.mu}: eta*mu must be < 1")
        if np.any(self.R_floor > self.Rmax_bs):
            b, s = np.unravel_index(int(np.argmax(self.R_floor > self.Rmax_bs)), self.Rmax_bs.shape)
            raise InstanceError(f"field 'Rmax_bs' value {self.Rmax_bs[b, s]} at [{b}][{s}] is below "
                                f"R_floor {self.R_floor}")
        for key in ("dc_names", "ue_subnet", "bs_subnet", "dc_subnet", "ue_labels", "graph_edges"):
            if not isinstance(getattr(self, key), (list, tuple)):
                raise InstanceError(f"field '{key}' must be a list, got {_short(getattr(self, key))}")
        if not isinstance(self.notes, dict):
            raise InstanceError(f"field 'notes' must be an object, got {_short(self.notes)}")
        for key, n_expect in (("ue_subnet", self.N), ("bs_subnet", self.B), ("dc_subnet", self.S),
                              ("dc_names", self.S)):
            val = getattr(self, key)
            if val and len(val) != n_expect:
                raise InstanceError(f"field '{key}' has {len(val)} entries, expected {n_expect}")
            ok = (lambda x: isinstance(x, str)) if key == "dc_names" else (
                lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0)
            bad = [x for x in val if not ok(x)]
            if bad:
                raise InstanceError(f"field '{key}' has an invalid entry {bad[0]!r}")
        if self.ue_labels and (len(self.ue_labels) != self.T
                               or any(not isinstance(r, (list, tuple)) or len(r) != self.N
                                      for r in self.ue_labels)):
            raise InstanceError(f"field 'ue_labels' must be [T][N] = [{self.T}][{self.N}]")
        names = {x: i for i, x in enumerate(self.node_names())}  # one set lookup per end
        for e in self.graph_edges:
            if (not isinstance(e, (list, tuple)) or len(e) != 2
                    or any(not isinstance(x, str) or x not in names for x in e)):
                raise InstanceError(f"field 'graph_edges' has an invalid edge {e!r}")
            u, v = sorted(e, key=names.__getitem__)
            if (u[:2], v[:2]) == ("ue", "bs") and not present[names[u], names[v] - self.N]:
                raise InstanceError(f"field 'graph_edges' has the edge {list(e)!r} over an absent "
                                    f"UE-BS link (not in 'links')")
        return self

    def _validate_links(self) -> None:
        """`links`: None, or one non-empty list of distinct BS indices per UE."""
        if self.links is None:
            return
        if not isinstance(self.links, (list, tuple)) or len(self.links) != self.N:
            raise InstanceError(f"field 'links' must be a list of {self.N} BS lists (one per UE), "
                                f"got {_short(self.links)}")
        for n, bs in enumerate(self.links):
            if not isinstance(bs, (list, tuple)):
                raise InstanceError(f"field 'links' entry {n} must be a list of BS indices, "
                                    f"got {_short(bs)}")
            if not bs:
                raise InstanceError(f"field 'links' entry {n}: UE {n} has no link to any BS")
            bad = [b for b in bs if isinstance(b, bool) or not isinstance(b, int)
                   or not 0 <= b < self.B]
            if bad:
                raise InstanceError(f"field 'links' entry {n} has an invalid BS index {bad[0]!r} "
                                    f"(expected 0..{self.B - 1})")
            if len(set(bs)) != len(bs):
                raise InstanceError(f"field 'links' entry {n} repeats a BS: {_short(bs)}")

    def feasibility_problems(self) -> list[str]:
        """Capacity conditions without which Problem P has no feasible point.

        Every BS must route its collected data somewhere (sum_s rho_bs = 1) over links with
        R_bs >= R_floor, so each DC must admit B*R_floor of ingress: sum_b R_bs[b,s] <= Rmax_s[s].
        """
        out = []
        need = self.B * self.R_floor
        for s in range(self.S):
            if self.Rmax_s[s] < need:
                out.append(f"field 'Rmax_s' value {self.Rmax_s[s]:.6g} at DC {s} is smaller than "
                           f"the {need:.6g} bit/s that any routing needs ({self.B} BS links x "
                           f"R_floor {self.R_floor:.6g})")
        return out

    # ---- derived -----------------------------------------------------------------------
    def ue_bs_e2e_rate(self) -> np.ndarray:
        """End-to-end rate max_b 1/(1/R_nb + 1/Rmax_bs) per (t, n, s): SPEC §8 exp. 2."""
        R = np.where(self.link_mask[None], self.R_nb, np.inf)[:, :, :, None]  # absent: never
        inv = 1.0 / R + 1.0 / self.Rmax_bs[None, None, :, :]
        e2e = np.where(np.isfinite(R), 1.0 / inv, 0.0)
        return e2e.max(axis=2)

    def node_names(self) -> list[str]:
        return ([f"ue{n}" for n in range(self.N)] + [f"bs{b}" for b in range(self.B)]
                + [f"dc{s}" for s in range(self.S)])

    def graph(self):
        """The communication graph H of SPEC §5 as a networkx Graph (nodes ue*, bs*, dc*)."""
        import networkx as nx
        g = nx.Graph()
        g.add_nodes_from(self.node_names())
        g.add_edges_from(tuple(e) for e in self.graph_edges)
        return g

    # ---- JSON ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT_TAG}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.tolist() if isinstance(v, np.ndarray) else v
        if out["links"] is None:  # every link present: the file reads as before `links` existed
            del out["links"]
        return out

    @classmethod
    def from_dict(cls, data: Any, *, validate: bool = True) -> "Instance":
        if not isinstance(data, dict):
            raise InstanceError("instance file must hold a JSON object")
        fmt = data.get("format")
        if fmt != FORMAT_TAG:
            raise InstanceError(f"field 'format' is {fmt!r}, expected {FORMAT_TAG!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"format"})
        if unknown:
            raise InstanceError(f"unknown key {unknown[0]!r} in instance (known: format, "
                                f"{', '.join(sorted(known))})")
        required = set(ARRAY_FIELDS) | {"name"}
        missing = sorted(required - set(data))
        if missing:
            raise InstanceError(f"field {missing[0]!r} is missing")
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            v = data[f.name]
            if f.name in ARRAY_FIELDS:
                try:
                    arr = np.asarray(v, dtype=float)
                except (TypeError, ValueError):
                    raise InstanceError(f"field '{f.name}' is not a numeric array: "
                                        f"{_short(v)}") from None
                if arr.dtype == object:
                    raise InstanceError(f"field '{f.name}' is a ragged array")
                kw[f.name] = arr
            elif f.name in SCALAR_FIELDS:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise InstanceError(f"field '{f.name}' must be a number, got {_short(v)}")
                try:
                    kw[f.name] = float(v)
                except OverflowError:
                    raise InstanceError(f"field '{f.name}' value {_short(v)} is too large") from None
            else:
                kw[f.name] = v
        inst = cls(**kw)
        return inst.validate() if validate else inst

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path, *, validate: bool = True) -> "Instance":
        return cls.from_dict(read_json(path, what="instance"), validate=validate)

    def copy(self, **changes: Any) -> "Instance":
        d = self.to_dict()
        d.pop("format")
        d.update({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in changes.items()})
        d["format"] = FORMAT_TAG
        return Instance.from_dict(d)


# ---- helpers ---------------------------------------------------------------------------
_KIND_TEXT = {"pos": "> 0", "nonneg": ">= 0", "unit": "in [0, 1]", "unit_pos": "in (0, 1]",
              "ge1": ">= 1", "pos_offdiag": "> 0 off the diagonal"}


def _shape_letters(shape: str) -> list[str]:
    return ["K6"] if shape == "K6" else list(shape)


def _kind_violation(arr: np.ndarray, kind: str) -> np.ndarray:
    if kind == "pos":
        return ~(arr > 0)
    if kind == "nonneg":
        return ~(arr >= 0)
    if kind == "unit":
        return ~((arr >= 0) & (arr <= 1))
    if kind == "unit_pos":
        return ~((arr > 0) & (arr <= 1))
    if kind == "ge1":
        return ~(arr >= 1)
    if kind == "pos_offdiag":
        off = ~np.eye(arr.shape[-1], dtype=bool)
        return ~(arr > 0) & np.broadcast_to(off, arr.shape)
    raise AssertionError(kind)


def _first_bad(arr: np.ndarray, mask: np.ndarray):
    idx = tuple(int(i) for i in np.argwhere(mask)[0])
    return list(idx), float(arr[idx])


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) < 60 else s[:57] + "..."


def read_json(path: str | Path, *, what: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise InstanceError(f"{what} file '{p}' does not exist")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise InstanceError(f"{what} file '{p}' is not valid JSON: {e.msg} at line {e.lineno} "
                            f"column {e.colno}") from None
    except UnicodeDecodeError:
        raise InstanceError(f"{what} file '{p}' is not UTF-8 text") from None


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON to a temporary file and rename it: never a partly written output."""
    write_atomic(path, json.dumps(data, indent=1))


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write text or bytes to a temporary file in the same folder and rename it over `path`."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # a unique temporary name in the same folder, removed if anything fails before the rename
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 -> the usual permissions
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as fh:
            fh.write(data)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
