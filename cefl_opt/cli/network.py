"""``cefl-opt network generate`` and ``cefl-opt network show``."""
from __future__ import annotations

import sys

import numpy as np

from ..instance import FORMAT_TAG, Instance
from ..io import check_writable
from . import COUNT, PROG, SEED


def register(sub) -> None:
    from ..generator import PRESETS
    net = sub.add_parser("network", help="generate or inspect a network instance",
                         description=f"Generate or inspect a network instance ({FORMAT_TAG}).")
    nsub = net.add_subparsers(dest="network_command", required=True, metavar="ACTION")
    g = nsub.add_parser("generate", help="write a seeded instance of a preset",
                        description="Write a seeded instance of a preset (docs/modelling.md) as JSON. "
                                    "Sizes whose arrays cannot fit in this machine's memory are refused "
                                    "with the estimate.")
    g.add_argument("--preset", required=True, choices=sorted(PRESETS))
    g.add_argument("--ues", type=COUNT, default=None, help="number of UEs (default: the preset's)")
    g.add_argument("--bss", type=COUNT, default=None, help="number of BSs (default: the preset's)")
    g.add_argument("--dcs", type=COUNT, default=None, help="number of DCs (default: the preset's)")
    g.add_argument("--rounds", type=COUNT, default=None,
                   help="number of rounds T (default: the preset's)")
    g.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    g.add_argument("--reach", type=COUNT, default=None, metavar="K",
                   help="each UE links to its K nearest BSs only (highest mean uplink rate); "
                        "absent links have no variables (default: every link)")
    g.add_argument("--out", required=True, help="output instance JSON (written atomically)")
    g.set_defaults(func=cmd_network_generate)

    s = nsub.add_parser("show", help="print a readable summary of an instance",
                        description="Sizes, DC names, data per sub-network and round, rate "
                                    "ranges, weights, the communication graph and any capacity "
                                    "problem of an instance.")
    s.add_argument("file", help=f"instance JSON ({FORMAT_TAG}; format 1 files load too)")
    s.set_defaults(func=cmd_network_show)


# ---------------------------------------------------------------------- network generate
def cmd_network_generate(args) -> int:
    from ..generator import PRESETS, check_size, make_instance
    size = {k: getattr(args, k) or PRESETS[args.preset][k] for k in ("ues", "bss", "dcs", "rounds")}
    check_size(**size)
    check_writable(args.out, "--out")
    inst = make_instance(args.preset, ues=args.ues, bss=args.bss, dcs=args.dcs,
                         rounds=args.rounds, seed=args.seed, reach=args.reach)
    inst.save(args.out)
    print(f"wrote {args.out}: {inst.name} ({inst.N} UEs, {inst.B} BSs, {inst.S} DCs, "
          f"{inst.T} rounds, seed {args.seed}, {len(inst.graph_edges)} graph edges, "
          f"{inst.Dbar.sum():.0f} data points)")
    for w in inst.feasibility_problems():
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------- network show
def _rate(x: float) -> str:
    for unit, k in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(x) >= k:
            return f"{x / k:.4g} {unit}"
    return f"{x:.4g} bit/s"


def _range(arr: np.ndarray, fmt=_rate) -> str:
    arr = np.asarray(arr, float)
    return f"{fmt(arr.min())} .. {fmt(arr.max())}" if arr.size else "-"


def show_text(inst: Instance) -> str:
    """The text of `network show` (also used by other commands' verbose output)."""
    import networkx as nx
    import pandas as pd

    lines = [f"instance {inst.name}  (preset {inst.preset}, seed {inst.seed})",
             f"sizes: {inst.N} UEs, {inst.B} BSs, {inst.S} DCs, {inst.T} rounds "
             f"({inst.I} DPUs)"]
    names = inst.dc_names or [f"dc{s}" for s in range(inst.S)]
    lines.append("DCs: " + ", ".join(f"{s}={n}" for s, n in enumerate(names)))

    # data per sub-network (UE sub-network index = the index of its DC) and round
    if inst.ue_subnet:
        sub = np.asarray(inst.ue_subnet, int)
        cols = sorted(set(sub.tolist()))
        label = {k: (names[k] if 0 <= k < len(names) else f"subnet{k}") for k in cols}
        table = pd.DataFrame({f"{label[k]} ({int((sub == k).sum())} UEs)":
                              inst.Dbar[:, sub == k].sum(axis=1) for k in cols})
    else:
        table = pd.DataFrame({f"all ({inst.N} UEs)": inst.Dbar.sum(axis=1)})
    table["total"] = inst.Dbar.sum(axis=1)
    table.index.name = "round"
    lines.append("data points per sub-network and round:")
    lines.append(table.round(0).astype(int).to_string())

    off = ~np.eye(inst.S, dtype=bool)
    rss = inst.R_ss[:, off] if inst.S > 1 else np.array([])
    on = inst.link_mask  # per-link fields over present links only
    rates = [("UE->BS uplink R_nb", _range(inst.R_nb[:, on])),
             ("BS->UE downlink R_bn", _range(inst.R_bn[:, on.T])),
             ("BS->DC capacity Rmax_bs", _range(inst.Rmax_bs)),
             ("DC ingress Rmax_s", _range(inst.Rmax_s)), ("DC->BS R_sb", _range(inst.R_sb)),
             ("DC->DC R_ss (off-diagonal)", _range(rss)),
             ("UE power P_nb", _range(inst.P_nb[:, on], lambda v: f"{v:.4g} W")),
             ("BS power P_b", _range(inst.P_b, lambda v: f"{v:.4g} W")),
             ("UE CPU f", f"{inst.f_min.min():.4g} .. {inst.f_max.max():.4g} Hz")]
    if inst.links is None:
        lines.append(f"UE-BS links: all {inst.N * inst.B}")
    else:
        per = [len(bs) for bs in inst.links]
        lines.append(f"UE-BS links: {sum(per)} of {inst.N * inst.B} ({min(per)}..{max(per)} per "
                     f"UE; rates of absent links are 0 and unused)")
    lines.append("rates and powers:")
    w = max(len(k) for k, _ in rates)
    lines += [f"  {k:<{w}}  {v}" for k, v in rates]
    lines.append(f"bits: beta_D {inst.beta_D:.6g} per data point, beta_M {inst.beta_M:.6g} per "
                 f"gradient;  gamma in [{inst.gamma_min:g}, {inst.gamma_max:g}], m >= {inst.m_floor:g}")
    lines.append(f"weights: xi1 {inst.xi1:.6g}  xi2 {inst.xi2:.6g}  xi3 {inst.xi3:.6g}  "
                 f"xi3_1..6 {', '.join(f'{v:g}' for v in inst.xi3_parts)}")
    vt = (f"vartheta {inst.vartheta:g} (constant)" if inst.vartheta_mode == "constant"
          else "vartheta tau_eff")
    lines.append(f"ML constants: eta {inst.eta:g}  mu {inst.mu:g}  {vt}  "
                 f"L {inst.L:g}  zeta1 {inst.zeta1:g}  zeta2 {inst.zeta2:g}  "
                 f"F0-F* {inst.F0_minus_Fstar:g}  sigma max {float(inst.sigma.max()):g}  "
                 f"Theta max {float(inst.Theta.max()):g}")

    g = inst.graph()
    if inst.graph_edges:
        kinds = {}
        for u, v in inst.graph_edges:
            key = "-".join(sorted((u[:2], v[:2]), key=("ue", "bs", "dc").index))
            kinds[key] = kinds.get(key, 0) + 1
        comps = nx.number_connected_components(g)
        conn = "connected" if comps == 1 else f"NOT connected ({comps} components)"
        lines.append(f"graph: {len(inst.graph_edges)} edges ("
                     + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
                     + f"), {conn}, max degree {max(d for _, d in g.degree())}")
    else:
        lines.append("graph: no edges stored")
    for wmsg in inst.feasibility_problems():
        lines.append(f"warning: {wmsg}")
    return "\n".join(lines)


def cmd_network_show(args) -> int:
    inst = Instance.load(args.file)
    print(show_text(inst))
    return 0
