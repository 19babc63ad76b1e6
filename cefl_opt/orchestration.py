"""What an orchestration decided, node by node: where the data goes (UE -> BS -> DC, eq:
dataRemainAtDevice, eq:DataCollecteatServer), which DC aggregates, and where each round's delay
and energy go (paper §II-E; docs/formulation.md, '4. Delays and energies').

Every number here is read from the numpy evaluator's per-round terms
(:func:`cefl_opt.system.round_terms`), so these tables, the figures drawn from them
(:mod:`cefl_opt.orchestration_plot`) and ``cefl-opt evaluate`` cannot disagree.

Cost parts (columns ``delay_<part>_s`` and ``energy_<part>_J`` of :func:`cost_table`):

* delay: the terms of each node's own path in P's delay constraints. UE n: computation dP_n and
  aggregation dA_n (its gradient via its uplink BS to the aggregator), dA_n + dP_n <= dA.
  DC s: upload max_{n,b} dD_nb (the slowest UE->BS data transfer), relay max_b dD_bs
  (together dD_s, eq:delayAtDCdataCollect), computation dP_s, aggregation dA_s
  (dD_s + dP_s + dA_s <= dA) and broadcast dR_s <= dR. BS b: broadcast dR_b + dB_b <= dR.
  So a round's delay dA + dR is the largest node path before the broadcast plus the largest
  broadcast.
* energy: each term goes to the node the evaluator indexes it by. UE n: upload sum_b E^D_nb,
  computation EP_n, aggregation EA_n (both hops of its gradient). BS b: relay sum_s E^D_bs and
  broadcast ER_b + EB_b. DC s: computation EP_s, aggregation EA_s, broadcast ER_s. The parts sum
  to the evaluator's raw energy; ``energy_weighted_J`` applies the weights xi3_1..6.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .instance import Instance
from .io import InputError, read_json
from .solution import RoundDecision, Solution
from .system import round_terms

OFFLOAD_TOL = 1e-6  # a UE offloads when it sends more than this share of its data
PARTS = ("computation", "upload", "relay", "aggregation", "broadcast")
# (kind, energy part) -> index of its weight in xi3_parts (E_D_ue, E_D_bs, E_P_ue, E_P_dc, E_A, E_R)
XI3_INDEX = {("ue", "upload"): 0, ("bs", "relay"): 1, ("ue", "computation"): 2,
             ("dc", "computation"): 3, ("ue", "aggregation"): 4, ("dc", "aggregation"): 4,
             ("bs", "broadcast"): 5, ("dc", "broadcast"): 5}


# ---- which instance a solution belongs to ----------------------------------------------------
def check_solution_matches(inst: Instance, sol: Solution, label: str, *,
                           allow_other: bool = False) -> str | None:
    """Refuse (InputError) a solution of another instance: its sizes N, B, S, T must match the
    instance's, and its recorded instance fingerprint too (`Solution.check_instance`, which
    `allow_other` relaxes to a note). Returns that note, if any."""
    r0 = sol.rounds[0] if sol.rounds else None
    have = {"T": len(sol.rounds)}
    if r0 is not None:
        have.update(N=r0.rho_nb.shape[0], B=r0.rho_nb.shape[1], S=r0.rho_bs.shape[1])
    want = {k: getattr(inst, k) for k in have}
    if have != want:
        bad = next(k for k in have if have[k] != want[k])
        raise InputError(f"solution '{label}' has {bad} = {have[bad]}, the instance "
                         f"'{inst.name}' has {bad} = {want[bad]}: it is a solution of another "
                         f"instance")
    try:
        return sol.check_instance(inst, allow_other=allow_other)
    except InputError as e:
        raise type(e)(f"solution '{label}': {e}") from None


# ---- sub-networks ---------------------------------------------------------------------------
def subnets(inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """(UE sub-network [N], BS sub-network [B]) as DC indices. The instance's own when it stores
    them; else a BS joins the DC of its largest capacity Rmax_bs and a UE the sub-network of its
    BS of highest mean uplink rate."""
    if inst.bs_subnet and max(inst.bs_subnet) < inst.S:
        bs = np.asarray(inst.bs_subnet, int)
    else:
        bs = np.argmax(inst.Rmax_bs, axis=1)
    if inst.ue_subnet and max(inst.ue_subnet) < inst.S:
        ue = np.asarray(inst.ue_subnet, int)
    else:
        ue = bs[np.argmax(np.where(inst.link_mask, inst.R_nb.mean(axis=0), -np.inf), axis=1)]
    return ue, bs


# ---- flows ----------------------------------------------------------------------------------
def round_flows(inst: Instance, t: int, r: RoundDecision) -> dict[str, np.ndarray]:
    """Data points moved in round t: ue_bs [N, B] = Dbar_n rho_nb, bs_dc [B, S] = D_b rho_bs,
    kept [N] = D_n (eq:dataRemainAtDevice), at_dc [S] = D_s (eq:DataCollecteatServer)."""
    rt = round_terms(inst, t, r)
    return {"ue_bs": inst.Dbar[t][:, None] * r.rho_nb, "bs_dc": rt["D_b"][:, None] * r.rho_bs,
            "kept": rt["D_n"], "at_dc": rt["D_s"], "D": rt["D"]}


# ---- where the cost goes --------------------------------------------------------------------
def _node_rows(inst: Instance, t: int, r: RoundDecision) -> list[dict]:
    """One row per node of round t: its delay and energy parts (module docstring)."""
    rt = round_terms(inst, t, r)
    agg = int(r.aggregator)
    rows = []
    for n in range(inst.N):
        rows.append({"node": f"ue{n}", "kind": "ue",
                     "delay": {"computation": rt["dP_n"][n], "aggregation": rt["dA_n"][n]},
                     "energy": {"upload": rt["ED_nb"][n].sum(), "computation": rt["EP_n"][n],
                                "aggregation": rt["EA_n"][n]}})
    for b in range(inst.B):
        rows.append({"node": f"bs{b}", "kind": "bs",
                     "delay": {"broadcast": rt["dR_b"][b] + rt["dB_b"][b]},
                     "energy": {"relay": rt["ED_bs"][b].sum(),
                                "broadcast": rt["ER_b"][b] + rt["EB_b"][b]}})
    up = float(rt["dD_nb"].max())
    for s in range(inst.S):
        rows.append({"node": f"dc{s}", "kind": "dc", "aggregator": s == agg,
                     "delay": {"upload": up, "relay": rt["dD_bs"][:, s].max(),
                               "computation": rt["dP_s"][s], "aggregation": rt["dA_s"][s],
                               "broadcast": rt["dR_s"][s]},
                     "energy": {"computation": rt["EP_s"][s], "aggregation": rt["EA_s"][s],
                                "broadcast": rt["ER_s"][s]}})
    return rows


def cost_table(inst: Instance, sol: Solution) -> pd.DataFrame:
    """One row per round and node: delay_<part>_s and energy_<part>_J for each part of PARTS,
    delay_path_s (the node's path before the broadcast), delay_s, energy_J (raw) and
    energy_weighted_J (xi3_1..6 applied), and whether the node is the round's aggregator."""
    w = np.asarray(inst.xi3_parts, float)
    out = []
    for t, r in enumerate(sol.rounds):
        for row in _node_rows(inst, t, r):
            d, e, kind = row["delay"], row["energy"], row["kind"]
            rec = {"method": sol.method, "round": t, "node": row["node"], "kind": kind,
                   "aggregator": bool(row.get("aggregator", False))}
            rec.update({f"delay_{p}_s": float(d.get(p, 0.0)) for p in PARTS})
            rec["delay_path_s"] = float(sum(v for p, v in d.items() if p != "broadcast"))
            rec["delay_s"] = rec["delay_path_s"] + float(d.get("broadcast", 0.0))
            rec.update({f"energy_{p}_J": float(e.get(p, 0.0)) for p in PARTS})
            rec["energy_J"] = float(sum(e.values()))
            rec["energy_weighted_J"] = float(sum(w[XI3_INDEX[kind, p]] * v for p, v in e.items()))
            out.append(rec)
    return pd.DataFrame(out)


def round_summary(inst: Instance, sol: Solution) -> pd.DataFrame:
    """Per round: the aggregator, the share of the data kept on the UEs, the UEs that offload,
    the data each DC trains on, the slowest node before the broadcast (its path is dA) and the
    slowest broadcast (dR), the delay dA + dR and the xi3-weighted energy."""
    costs = cost_table(inst, sol)
    names = inst.dc_names or [f"dc{s}" for s in range(inst.S)]
    rows = []
    for t, r in enumerate(sol.rounds):
        fl, c = round_flows(inst, t, r), costs[costs["round"] == t]
        slow_a = c.loc[c["delay_path_s"].idxmax()]
        slow_r = c.loc[c["delay_broadcast_s"].idxmax()]
        rows.append({"method": sol.method, "round": t,
                     "aggregator": f"dc{r.aggregator} ({names[r.aggregator]})",
                     "kept %": round(100.0 * float(fl["kept"].sum() / fl["D"]), 1),
                     "UEs offloading": int((r.rho_nb.sum(axis=1) > OFFLOAD_TOL).sum()),
                     "data at DCs": " ".join(f"{v:.0f}" for v in fl["at_dc"]),
                     "slowest path": slow_a["node"], "dA s": float(slow_a["delay_path_s"]),
                     "slowest broadcast": slow_r["node"],
                     "dR s": float(slow_r["delay_broadcast_s"]),
                     "delay s": float(slow_a["delay_path_s"] + slow_r["delay_broadcast_s"]),
                     "energy J": float(c["energy_weighted_J"].sum())})
    return pd.DataFrame(rows)


def load_checked(inst: Instance, paths: list[str | Path], *,
                 allow_other: bool = False) -> tuple[list[Solution], list[str]]:
    """The solution files `paths`, each checked against `inst` (shapes, indices, identity),
    and the notes of the checks (old files without a fingerprint, `allow_other`)."""
    sols, notes = [], []
    for p in paths:
        data = read_json(p, what="solution")
        note = check_solution_matches(inst, Solution.from_dict(data), str(p),
                                      allow_other=allow_other)
        notes += [f"{p}: {note}"] if note else []
        sols.append(Solution.from_dict(data, inst))
    return sols, notes
