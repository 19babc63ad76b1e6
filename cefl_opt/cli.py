"""The ``cefl-opt`` command line (console script ``cefl-opt = cefl_opt.cli:main``).

Sub-commands defined here:

* ``network generate --preset P [--ues N --bss B --dcs S] [--rounds T] [--seed K] --out FILE``
* ``network show FILE``
* ``evaluate NET SOL [--json OUT] [--bound corollary|general]``

and, when their modules exist, ``solve`` (``cefl_opt.solvers.cli``), ``train``/``estimate``
(``cefl_opt.learning.cli``) and ``run`` (``cefl_opt.pipeline``); each module's ``register``
adds parsers whose ``func`` is a handler ``func(args) -> int``.

Exit status: 0 success; 1 ``evaluate`` found the solution infeasible; 2 bad input (argparse
errors, any ``InstanceError`` or ``ValueError`` raised for user input, unreadable/unwritable
files), reported as one line ``cefl-opt: error: <message>`` on stderr, never a traceback. Set
``CEFL_OPT_DEBUG=1`` to get the traceback instead. Every output file is written atomically.
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from typing import Any, Sequence

import numpy as np

from .instance import Instance, InstanceError, write_json_atomic

PROG = "cefl-opt"
CORE_COMMANDS = ("network", "evaluate")
# (module, what it adds); a module that does not exist yet is skipped silently.
OPTIONAL_MODULES = (("cefl_opt.solvers.cli", "solve"), ("cefl_opt.learning.cli", "train, estimate"),
                    ("cefl_opt.pipeline", "run"))
MAX_VIOLATIONS_SHOWN = 10


# ---------------------------------------------------------------------- parser
def build_parser(include_optional: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Optimisation-modelling toolkit for CE-FL (cooperative edge-assisted "
                               "dynamic federated learning with a floating aggregation point).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    net = sub.add_parser("network", help="generate or inspect a network instance",
                         description="Generate or inspect a network instance (cefl-instance/1).")
    nsub = net.add_subparsers(dest="network_command", required=True, metavar="ACTION")
    from .generator import PRESETS
    g = nsub.add_parser("generate", help="write a seeded instance of a preset",
                        description="Write a seeded instance of a preset (SPEC §6) as JSON.")
    g.add_argument("--preset", required=True, choices=sorted(PRESETS))
    g.add_argument("--ues", type=int, default=None, help="number of UEs (default: the preset's)")
    g.add_argument("--bss", type=int, default=None, help="number of BSs (default: the preset's)")
    g.add_argument("--dcs", type=int, default=None, help="number of DCs (default: the preset's)")
    g.add_argument("--rounds", type=int, default=None, help="number of rounds T (default: the preset's)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--reach", type=int, default=None, metavar="K",
                   help="each UE links to its K nearest BSs only (highest mean uplink rate); "
                        "absent links have no variables (default: every link)")
    g.add_argument("--out", required=True, help="output instance JSON (written atomically)")
    g.set_defaults(func=cmd_network_generate)

    s = nsub.add_parser("show", help="print a readable summary of an instance",
                        description="Sizes, DC names, data per sub-network and round, rate "
                                    "ranges, weights, the communication graph and any capacity "
                                    "problem of an instance.")
    s.add_argument("file", help="instance JSON (cefl-instance/1)")
    s.set_defaults(func=cmd_network_show)

    e = sub.add_parser("evaluate", help="objective, delays, energies and feasibility of a solution",
                       description="Evaluate a solution (cefl-solution/1) on an instance with the "
                                   "numpy system model: objective, its three terms, the ML bound's "
                                   "parts and a per-round table. Exit 0 when the solution is "
                                   "feasible (every constraint within cefl_opt.system.FEAS_TOL), "
                                   "1 when infeasible, 2 on bad input.")
    e.add_argument("net", help="instance JSON (cefl-instance/1)")
    e.add_argument("sol", help="solution JSON (cefl-solution/1)")
    e.add_argument("--bound", choices=("corollary", "general"), default="corollary",
                   help="form of the ML bound: corollary (eq:convSpecial, default) or general "
                        "(Theorem 1, eq:GenConvBound)")
    e.add_argument("--json", default=None, metavar="OUT", help="also write the evaluation as JSON")
    e.set_defaults(func=cmd_evaluate)

    if include_optional:
        for modname, _ in OPTIONAL_MODULES:
            mod = _import_optional(modname)
            if mod is not None:
                mod.register(sub)
    return parser


def _import_optional(modname: str):
    """The module, or None when exactly that module does not exist (yet)."""
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name == modname:
            return None
        raise


def _command_word(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


# ---------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The core commands need none of the optional modules; skipping them saves importing torch
    # (about 1.5 s) on every `network` / `evaluate` call. Help and other commands load them all.
    parser = build_parser(include_optional=_command_word(argv) not in CORE_COMMANDS)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        return int(args.func(args) or 0)
    except (InstanceError, ValueError, OSError) as e:
        if os.environ.get("CEFL_OPT_DEBUG"):
            raise
        print(f"{PROG}: error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _message(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None:
        return f"cannot access '{e.filename}': {e.strerror or e}"
    return " ".join(str(e).split()) or type(e).__name__


# ---------------------------------------------------------------------- network generate
def cmd_network_generate(args) -> int:
    from .generator import make_instance
    if args.seed < 0:
        raise InstanceError(f"option '--seed' must be >= 0, got {args.seed}")
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
    lines.append(f"weights: xi1 {inst.xi1:.6g}  xi2 {inst.xi2:.6g}  xi3 {inst.xi3_total:.6g}  "
                 f"xi3_1..6 {', '.join(f'{v:g}' for v in inst.xi3)}")
    lines.append(f"ML constants: eta {inst.eta:g}  mu {inst.mu:g}  vartheta {inst.vartheta:g}  "
                 f"L {inst.L:g}  zeta1 {inst.zeta1:g}  zeta2 {inst.zeta2:g}  "
                 f"F0-F* {inst.F0_minus_Fstar:g}")

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


# ---------------------------------------------------------------------- evaluate
def _finite(x: Any) -> Any:
    """JSON-safe value: non-finite floats become null."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, np.ndarray):
        return _finite(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


ROUND_KEYS = ("dA", "dR", "delay", "energy", "energy_raw", "E_D_ue", "E_D_bs", "E_P_ue", "E_P_dc",
              "E_A", "E_R", "aggregator")


def cmd_evaluate(args) -> int:
    import pandas as pd

    from .solution import Solution
    from .system import FEAS_TOL, constraint_violations, evaluate

    inst = Instance.load(args.net)
    sol = Solution.load(args.sol, inst)
    viol = constraint_violations(inst, sol, bound=args.bound)
    try:
        with np.errstate(all="ignore"):
            ev = evaluate(inst, sol, bound=args.bound)
    except (ValueError, ZeroDivisionError, FloatingPointError) as e:
        if not viol:
            raise
        ev = None  # the objective is undefined outside the bounds (e.g. m = 0, gamma < 0)
        err = str(e)

    w = {"xi1": inst.xi1, "xi2": inst.xi2, "xi3": inst.xi3_total}
    print(f"instance {inst.name}; solution by {sol.method} ({sol.status}); bound {args.bound}")
    if ev is not None:
        print(f"objective {ev.objective:.10g}")
        parts = pd.DataFrame(
            [("ML bound (a)", w["xi1"], ev.terms["ml_bound"]),
             ("delay (b), s", w["xi2"], ev.terms["delay"]),
             ("energy (c)-(e), J", w["xi3"], ev.terms["energy"])],
            columns=["term", "weight xi", "value"])
        parts["xi * value"] = parts["weight xi"] * parts["value"]
        print(parts.to_string(index=False, float_format=lambda v: f"{v:.6g}"))
        print("ML bound parts: " + "  ".join(f"{k} {v:.6g}" for k, v in ev.ml_parts.items()))
        table = ev.per_round_table().set_index("round")
        print("per round (delays in s, energies in J; energy = xi3_k-weighted sum):")
        print(table.to_string(float_format=lambda v: f"{v:.6g}"))
        if sol.objective is not None and isinstance(sol.objective, (int, float)) \
                and not math.isclose(float(sol.objective), ev.objective, rel_tol=1e-6):
            print(f"note: the solution file records objective {sol.objective:.10g}")
    else:
        print(f"objective undefined at this point ({err})")

    if args.json:
        out = {"format": "cefl-evaluation/1", "instance": str(args.net), "solution": str(args.sol),
               "bound": args.bound, "feasible": not viol, "feas_tol": FEAS_TOL,
               "violations": [{"constraint": n, "excess": v} for n, v in viol],
               "weights": w,
               "objective": ev.objective if ev else None,
               "terms": ev.terms if ev else None, "ml_parts": ev.ml_parts if ev else None,
               "rounds": ([{k: r[k] for k in ROUND_KEYS} for r in ev.rounds] if ev else None)}
        write_json_atomic(args.json, _finite(out))
        print(f"wrote {args.json}")

    if viol:
        worst = sorted(viol, key=lambda x: -x[1])[:MAX_VIOLATIONS_SHOWN]
        print(f"INFEASIBLE: {len(viol)} constraint(s) violated beyond the relative tolerance "
              f"{FEAS_TOL:g}; worst {len(worst)}:")
        for name, excess in worst:
            print(f"  {name}: relative excess {excess:.6g}")
        return 1
    print(f"feasible (every constraint within {FEAS_TOL:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
