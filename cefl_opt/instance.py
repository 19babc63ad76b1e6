"""Network instances of CE-FL: every given quantity of Problem P, per round (docs/formulation.md,
'1. Network and data'; the presets: docs/modelling.md, 'Units and presets').

All quantities are stored in SI units (bit/s, W, Hz, data points, s). The Pyomo model and the
solvers rescale internally (GHz, Gbit/s, ...); the instance file stays physical.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import numbers
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from .io import InputError, read_json, write_json_atomic

# Format 2 names the objective's energy weight xi3 (the paper's xi_3) and its six sub-weights
# xi3_parts; format 1 called them xi3_total and xi3. Both load; files are written in format 2.
FORMAT_TAG = "cefl-instance/2"
FORMAT_1 = "cefl-instance/1"
FORMAT_1_RENAMES = {"xi3": "xi3_parts", "xi3_total": "xi3"}


class InstanceError(InputError):
    """A malformed or physically impossible instance; the message names the field and value."""


class InfeasibleInstance(InstanceError):
    """A well-formed instance for which Problem P has no feasible point (e.g. capacities)."""


# Rates in bit/s, powers in W, frequencies in Hz; "pts" = data points.
RATE, POWER = (1e-3, 1e15, "bit/s"), (1e-12, 1e6, "W")


@dataclass(frozen=True)
class FieldSpec:
    """One numeric field of an instance: its shape (letters T rounds, N UEs, B BSs, S DCs,
    I = N+S DPUs, K6 the six energy sub-weights; "" for a scalar), its sign kind (see
    `_KIND_TEXT`), and the range [lo, hi] its nonzero entries must lie in (`unit`). The ranges
    keep every term of P finite (delays, energies and the ML bound stay far below 1e308 even
    with every field at an extreme); `kind` says whether 0 is allowed."""
    shape: str
    kind: str
    lo: float
    hi: float
    unit: str


# The single source of truth for numeric fields: name -> FieldSpec (README, "Instance format").
FIELDS: dict[str, FieldSpec] = {
    "Dbar": FieldSpec("TN", "pos", 1e-3, 1e12, "pts"),     # data points held by UE n at round t
    "R_nb": FieldSpec("TNB", "pos", *RATE),                 # UE->BS uplink rate
    "P_nb": FieldSpec("TNB", "pos", *POWER),                # UE transmit power
    "R_bn": FieldSpec("TBN", "pos", *RATE),                 # BS->UE downlink rate
    "P_b": FieldSpec("TB", "pos", *POWER),                  # BS broadcast power
    "Rmax_bs": FieldSpec("BS", "pos", *RATE),               # BS->DC link capacity
    "Rmax_s": FieldSpec("S", "pos", *RATE),                 # DC ingress capacity
    "P_bs": FieldSpec("BS", "pos", *POWER),                 # BS->DC transmit power
    "R_sb": FieldSpec("TSB", "pos", *RATE),                 # DC->BS rate
    "P_sb": FieldSpec("SB", "pos", *POWER),                 # DC->BS power
    "R_ss": FieldSpec("TSS", "pos_offdiag", *RATE),         # DC->DC rate; diagonal unused
    "P_ss": FieldSpec("SS", "nonneg", *POWER),              # DC->DC power
    "c": FieldSpec("N", "pos", 1e-6, 1e15, "cycles/pt"),    # UE CPU cycles per data point
    "alpha": FieldSpec("N", "pos", 1e-40, 1.0, "J/(cycle Hz^2)"),  # UE effective capacitance
    "f_min": FieldSpec("N", "pos", 1.0, 1e12, "Hz"),
    "f_max": FieldSpec("N", "pos", 1.0, 1e12, "Hz"),
    "M": FieldSpec("S", "pos", 1e-6, 1e9, "machines"),      # machines per DC
    "C": FieldSpec("S", "pos", 1e-6, 1e15, "pts/s"),        # per-machine capacity
    "Pbar": FieldSpec("S", "pos", *POWER),                  # peak power per machine
    "Theta": FieldSpec("I", "nonneg", 1e-12, 1e6, ""),     # local data variability (Asm. 2)
    "sigma": FieldSpec("I", "nonneg", 1e-12, 1e6, ""),     # data standard deviation sigma~_i
    "Delta": FieldSpec("TI", "nonneg", 1e-12, 1e6, "1/s"),  # model drift per unit time
    "xi3_parts": FieldSpec("K6", "nonneg", 1e-12, 1e6, ""),  # xi_{3,1..6} (format 1: 'xi3')
    "beta_D": FieldSpec("", "pos", 1e-6, 1e15, "bit/pt"),
    "beta_M": FieldSpec("", "pos", 1e-6, 1e15, "bit"),
    "rho_idle": FieldSpec("", "unit", 1e-12, 1.0, ""),
    "eta": FieldSpec("", "pos", 1e-12, 1e3, ""),
    "mu": FieldSpec("", "nonneg", 1e-12, 1e6, ""),
    "vartheta": FieldSpec("", "pos", 1e-12, 1e6, ""),
    "L": FieldSpec("", "pos", 1e-12, 1e6, ""),
    "zeta1": FieldSpec("", "ge1", 1.0, 1e6, ""),
    "zeta2": FieldSpec("", "nonneg", 1e-12, 1e6, ""),
    "F0_minus_Fstar": FieldSpec("", "nonneg", 1e-12, 1e12, ""),
    "gamma_min": FieldSpec("", "ge1", 1.0, 1e6, "iterations"),
    "gamma_max": FieldSpec("", "ge1", 1.0, 1e6, "iterations"),
    "m_floor": FieldSpec("", "unit_pos", 1e-12, 1.0, ""),
    "z_floor": FieldSpec("", "unit_pos", 1e-12, 1.0, ""),
    "R_floor": FieldSpec("", "pos", *RATE),
    "xi1": FieldSpec("", "nonneg", 1e-12, 1e12, ""),
    "xi2": FieldSpec("", "nonneg", 1e-12, 1e12, "1/s"),
    "xi3": FieldSpec("", "nonneg", 1e-12, 1e12, "1/J"),
}

# name -> (shape spec, kind) of the array fields, and name -> kind of the scalar ones (views
# of FIELDS)
ARRAY_FIELDS: dict[str, tuple[str, str]] = {k: (f.shape, f.kind) for k, f in FIELDS.items()
                                            if f.shape}
SCALAR_FIELDS: dict[str, str] = {k: f.kind for k, f in FIELDS.items() if not f.shape}

# name -> allowed values (strings)
CHOICE_FIELDS: dict[str, tuple[str, ...]] = {
    # one vartheta for the bound and the trainer (docs/modelling.md, 'The ML term'): the number
    # `vartheta` used by both ("constant"), or FedNova's tau_eff = sum_i p_i ||a_i||_1 used by
    # both ("tau_eff")
    "vartheta_mode": ("constant", "tau_eff"),
}

META_FIELDS = ("name", "preset", "seed", "dc_names", "ue_subnet", "bs_subnet", "dc_subnet",
               "ue_labels", "graph_edges", "links", "notes")

# Labels that do not change P nor training: left out of `Instance.fingerprint`.
FINGERPRINT_SKIPS = ("format", "name", "preset", "seed", "dc_names", "notes")

# Per-link fields: their entries of an absent UE-BS link (see `Instance.links`) must be 0.
LINK_FIELDS = {"R_nb": "TNB", "P_nb": "TNB", "R_bn": "TBN"}


@dataclass
class Instance:
    """Every given quantity of Problem P (docs/formulation.md, '1. Network and data'). Arrays are
    numpy, rounds first; each field, its shape, range and unit is listed on the File formats
    page. `make_instance` draws one; `Instance.load` reads one from its JSON file.

    Examples:
        >>> import tempfile, pathlib
        >>> from cefl_opt import Instance, make_instance
        >>> inst = make_instance("tiny", seed=0)
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "net.json"
        >>> inst.save(path)
        >>> Instance.load(path).fingerprint() == inst.fingerprint()
        True
    """

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
    xi3_parts: np.ndarray
    beta_D: float = 6272.0
    beta_M: float = 4.0e7
    rho_idle: float = 0.4
    eta: float = 0.001
    mu: float = 0.01
    # one vartheta in bound and trainer (docs/modelling.md, 'The ML term'); the default pair (the
    # number 3 in both) was chosen by measuring exp1 (docs/results/experiments.md, '1. Energy
    # and delay to a target accuracy'); the paper's 0.01 freezes training
    vartheta: float = 3.0
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
    xi3: float = 1.0
    vartheta_mode: str = "constant"
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

    # ---- compatibility ---------------------------------------------------------------------
    @property
    def xi3_total(self) -> float:
        """Format 1's name of the energy weight xi3 (kept for old call sites)."""
        return self.xi3

    @xi3_total.setter
    def xi3_total(self, value: float) -> None:
        self.xi3 = value

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
        """Check types, shapes, signs and structure; raise InstanceError naming the field and
        value. Every entry point of the library (build_problem, solve, evaluate, training,
        estimation) calls it through :func:`validated`."""
        for name in ARRAY_FIELDS:
            _check_array_type(name, getattr(self, name))
        if self.Dbar.ndim != 2 or self.Rmax_bs.ndim != 2:
            raise InstanceError(f"field 'Dbar' must be [T][N] and 'Rmax_bs' [B][S]; got shapes "
                                f"{list(self.Dbar.shape)} and {list(self.Rmax_bs.shape)}")
        d = self.dims()
        if min(d["T"], d["N"], d["B"], d["S"]) < 1:
            raise InstanceError(f"instance needs at least one round, UE, BS and DC; got {d}")
        self._validate_rounds()
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
            out = _range_violation(arr, FIELDS[name])
            if out.any():
                idx, val = _first_bad(arr, out)
                raise InstanceError(f"field '{name}' value {val:g} at index {idx} is out of "
                                    f"range ({_range_text(FIELDS[name])})")
        for name, kind in SCALAR_FIELDS.items():
            v = getattr(self, name)
            if (isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real)
                    or not math.isfinite(float(v))):
                raise InstanceError(f"field '{name}' must be a finite number, got {_short(v)}")
            if _kind_violation(np.array([float(v)]), kind).any():
                raise InstanceError(f"field '{name}' has invalid value {v} (must be {_KIND_TEXT[kind]})")
            if _range_violation(np.array([float(v)]), FIELDS[name]).any():
                raise InstanceError(f"field '{name}' value {float(v):g} is out of range "
                                    f"({_range_text(FIELDS[name])})")
        if not isinstance(self.name, str):
            raise InstanceError(f"field 'name' must be a string, got {_short(self.name)}")
        for name, choices in CHOICE_FIELDS.items():
            v = getattr(self, name)
            if v not in choices:
                raise InstanceError(f"field '{name}' is {_short(v)}, expected one of "
                                    f"{', '.join(repr(c) for c in choices)}")
        if np.any(self.f_min > self.f_max):
            n = int(np.argmax(self.f_min > self.f_max))
            raise InstanceError(f"field 'f_min' value {self.f_min[n]} exceeds f_max "
                                f"{self.f_max[n]} at UE {n}")
        if self.gamma_min > self.gamma_max:
            raise InstanceError(f"field 'gamma_min' value {self.gamma_min} exceeds gamma_max {self.gamma_max}")
        if self.eta * self.mu >= 1:
            raise InstanceError(f"fields 'eta' (value {self.eta:g}) and 'mu' (value "
                                f"{self.mu:g}): eta*mu must be < 1")
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
                raise InstanceError(f"field 'graph_edges' has an invalid edge {_short(e)}")
            u, v = sorted(e, key=names.__getitem__)
            if (u[:2], v[:2]) == ("ue", "bs") and not present[names[u], names[v] - self.N]:
                raise InstanceError(f"field 'graph_edges' has the edge {list(e)!r} over an absent "
                                    f"UE-BS link (not in 'links')")
        return self

    def _validate_rounds(self) -> None:
        """Every per-round field has the same number of rounds T; otherwise name the fields
        that disagree with the others (T is read from Dbar, so a cut Dbar is named itself)."""
        counts: dict[int, list[str]] = {}
        for name, (shape, _) in ARRAY_FIELDS.items():
            arr = getattr(self, name)
            if shape.startswith("T") and arr.ndim == len(shape):
                counts.setdefault(int(arr.shape[0]), []).append(name)
        if len(counts) > 1:
            most = max(counts, key=lambda t: len(counts[t]))
            odd = sorted((n, t) for t, names in counts.items() if t != most for n in names)
            raise InstanceError("field " + ", ".join(f"'{n}' has {t} round(s)" for n, t in odd)
                                + f"; the other per-round fields ({', '.join(counts[most])}) "
                                  f"have {most}")

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
        """End-to-end rate max_b 1/(1/R_nb + 1/Rmax_bs) per (t, n, s): the data-rate-greedy
        aggregator of the paper's experiment 2 (Fig. `active_switching`)."""
        R = np.where(self.link_mask[None], self.R_nb, np.inf)[:, :, :, None]  # absent: never
        inv = 1.0 / R + 1.0 / self.Rmax_bs[None, None, :, :]
        e2e = np.where(np.isfinite(R), 1.0 / inv, 0.0)
        return e2e.max(axis=2)

    def node_names(self) -> list[str]:
        return ([f"ue{n}" for n in range(self.N)] + [f"bs{b}" for b in range(self.B)]
                + [f"dc{s}" for s in range(self.S)])

    def graph(self):
        """The communication graph H (paper Appendix "Network graph construction";
        docs/formulation.md, '1. Network and data') as a networkx Graph (nodes ue*, bs*, dc*)."""
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
        """An instance from its JSON object (format 2, or format 1 with its old names). Every
        array and scalar field is required; booleans are not numbers."""
        if not isinstance(data, dict):
            raise InstanceError(f"an instance must be a JSON object, got {_short(data)}")
        fmt = data.get("format")
        if fmt == FORMAT_1:
            data = {FORMAT_1_RENAMES.get(k, k): v for k, v in data.items()}
        elif fmt != FORMAT_TAG:
            raise InstanceError(f"field 'format' is {_short(fmt)}, expected {FORMAT_TAG!r} "
                                f"(or {FORMAT_1!r})")
        old = {v: k for k, v in FORMAT_1_RENAMES.items()} if fmt == FORMAT_1 else {}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"format"})
        if unknown:
            raise InstanceError(f"unknown key {unknown[0]!r} in instance (known: format, "
                                f"{', '.join(sorted(old.get(k, k) for k in known))})")
        # format 1 predates the choice fields: their defaults apply; format 2 needs them
        required = ("name", *ARRAY_FIELDS, *SCALAR_FIELDS,
                    *(CHOICE_FIELDS if fmt == FORMAT_TAG else ()))
        missing = [k for k in required if k not in data]
        if missing:
            names = [old.get(k, k) for k in missing]
            raise InstanceError(f"field {names[0]!r} is missing"
                                + (f" (also missing: {', '.join(names[1:])})" if names[1:] else ""))
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            v, label = data[f.name], old.get(f.name, f.name)
            if f.name in ARRAY_FIELDS:
                kw[f.name] = numeric_array(v, label)
            elif f.name in SCALAR_FIELDS:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise InstanceError(f"field '{label}' must be a number, got {_short(v)}")
                kw[f.name] = float(v)
            else:
                kw[f.name] = v
        inst = cls(**kw)
        if validate:
            try:
                inst.validate()
            except InstanceError as e:
                raise InstanceError(_old_names(str(e), old)) from None
        return inst

    def fingerprint(self) -> str:
        """SHA-256 (hex) of the instance's canonical content: every field of its JSON form
        except the free labels that do not enter P nor training (FINGERPRINT_SKIPS), as compact
        JSON with sorted keys and floats in Python's shortest round-trip form. The same instance
        read from a format 1 or a format 2 file, or with another name, has the same
        fingerprint; a solution records it (`Solution.instance_sha256`)."""
        d = {k: v for k, v in self.to_dict().items() if k not in FINGERPRINT_SKIPS}
        d["links"] = self.ue_links()   # None (every link) and the full list are one instance
        for name in FIELDS:
            d[name] = np.asarray(getattr(self, name), dtype=float).tolist()
        text = json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def save(self, path: str | Path) -> None:
        """Write the instance's JSON file atomically (nothing partly written on failure).

        Args:
            path: the file to write.
        """
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path, *, validate: bool = True) -> "Instance":
        """Read an instance file (format 2, or format 1 with its old names).

        Args:
            path: the JSON file.
            validate: check every field (types, shapes, ranges, structure).

        Returns:
            The instance.

        Raises:
            InstanceError: the file is missing, not JSON, or a field is invalid; the message
                names the field and value.
        """
        return cls.from_dict(read_json(path, what="instance"), validate=validate)

    def copy(self, **changes: Any) -> "Instance":
        """A validated copy with fields replaced (format 1's name xi3_total is accepted)."""
        if "xi3_total" in changes:
            changes["xi3"] = changes.pop("xi3_total")
        d = self.to_dict()
        d.update({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in changes.items()})
        return Instance.from_dict(d)


def validated(obj: Any) -> Instance:
    """`obj` if it is a valid Instance; otherwise InstanceError naming the problem. The one
    check every entry point of the library runs on its instance argument."""
    if not isinstance(obj, Instance):
        raise InstanceError(f"expected a cefl_opt.Instance, got {type(obj).__name__} "
                            f"{_short(obj)}")
    return obj.validate()


def numeric_array(value: Any, name: str) -> np.ndarray:
    """`value` (nested JSON lists of numbers) as a float array; InstanceError naming `name`
    for booleans, strings, nulls and ragged nesting."""
    stack = [(value, ())]
    while stack:
        x, idx = stack.pop()
        if isinstance(x, list):
            stack.extend((y, idx + (i,)) for i, y in enumerate(x))
        elif isinstance(x, bool) or not isinstance(x, (int, float)):
            raise InstanceError(f"field '{name}' has a non-number {_short(x)} at {list(idx)}")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise InstanceError(f"field '{name}' is a ragged array: {_short(value)}") from None
    return arr


def _old_names(msg: str, old: dict[str, str]) -> str:
    """A validation message of a format 1 file, with the format 1 field names."""
    return re.sub(r"field '(\w+)'", lambda m: f"field '{old.get(m[1], m[1])}'", msg)


# ---- helpers ---------------------------------------------------------------------------
_KIND_TEXT = {"pos": "> 0", "nonneg": ">= 0", "unit": "in [0, 1]", "unit_pos": "in (0, 1]",
              "ge1": ">= 1", "pos_offdiag": "> 0 off the diagonal"}


def _range_violation(arr: np.ndarray, spec: FieldSpec) -> np.ndarray:
    """Entries outside [spec.lo, spec.hi] (0 is the kind's business; a diagonal marked
    unused is not checked)."""
    out = (arr != 0) & ((np.abs(arr) < spec.lo) | (np.abs(arr) > spec.hi))
    if spec.kind == "pos_offdiag":
        out &= np.broadcast_to(~np.eye(arr.shape[-1], dtype=bool), arr.shape)
    return out


def _range_text(spec: FieldSpec) -> str:
    zero = "0 or " if spec.kind in ("nonneg", "unit") else ""
    return f"must be {zero}in [{spec.lo:g}, {spec.hi:g}] {spec.unit}".rstrip()


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


def _check_array_type(name: str, arr: Any) -> None:
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "fiu":
        raise InstanceError(f"field '{name}' must be a numeric numpy array, got "
                            f"{type(arr).__name__} {_short(arr)}")
