"""``cefl-opt plot``: who offloads where and which DC aggregates, round by round, for one
solution or several side by side, and where each node's delay and energy go."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from ..instance import Instance
from ..io import (InputError, check_distinct, check_new, check_writable, figure_bytes,
                  figure_format, write_all_atomic)
from . import COUNT, PROG, SEED, add_inputs

DEFAULT_THIN = 40   # = cefl_opt.orchestration_plot.UE_THIN (not imported: `--help` stays light)


def register(sub) -> None:
    p = sub.add_parser(
        "plot", help="draw the orchestration of solutions (offloading, routes, aggregator) and "
                     "their cost breakdown",
        description="Draw one panel per round and one row per solution, on one layout of the "
                    "network by sub-network (networkx spring layout, seeded): UE-BS data and "
                    "BS-DC routes with widths proportional to the data they carry, the uplink "
                    "associations, the round's aggregator, each UE coloured by the share of its "
                    "data it keeps. A second figure stacks each node's delay and energy per round "
                    "by part (computation, upload, relay, aggregation, broadcast); --csv writes "
                    "the same numbers. Every number comes from the numpy evaluator (as `cefl-opt "
                    "evaluate`). Formats by extension: .png, .svg, .pdf.")
    add_inputs(p)
    p.add_argument("sols", nargs="+", metavar="SOLUTION",
                   help="solution JSON (cefl-solution/1) of this instance; several: one row each")
    p.add_argument("--out", required=True, metavar="FIG",
                   help="the orchestration figure (.png, .svg or .pdf; written atomically)")
    p.add_argument("--costs", default=None, metavar="FIG",
                   help="the cost breakdown figure (default: FIG with '_costs' before the "
                        "extension; an existing file there is replaced only with --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing default --costs figure (FIG_costs)")
    p.add_argument("--csv", default=None, metavar="CSV",
                   help="also write the cost breakdown as a table: one row per solution, round "
                        "and node")
    p.add_argument("--layout-seed", type=SEED, default=0, metavar="S",
                   help="seed of the layout (default 0: the same picture every time)")
    p.add_argument("--thin", type=COUNT, default=DEFAULT_THIN, metavar="N",
                   help=f"above N UEs, draw the UEs of each sub-network as one group "
                        f"(default {DEFAULT_THIN})")
    p.add_argument("--allow-other-instance", action="store_true",
                   help="draw a solution that records another instance's fingerprint (refused "
                        "by default, exit 2)")
    p.set_defaults(func=cmd_plot)


def costs_path(out: str | Path) -> Path:
    """The default --costs: --out with '_costs' before the extension."""
    p = Path(out)
    return p.with_name(f"{p.stem}_costs{p.suffix}")


def _objectives(inst: Instance, sols, paths) -> None:
    """Refuse a solution whose objective is undefined or infinite; warn about infeasible ones."""
    from ..system import evaluate
    for sol, path in zip(sols, paths):
        try:
            with np.errstate(all="ignore"):
                ev = evaluate(inst, sol)
        except (ValueError, ZeroDivisionError, FloatingPointError) as e:
            raise InputError(f"solution '{path}': its objective is undefined ({e}); "
                             f"`cefl-opt evaluate` lists its violations") from None
        if not math.isfinite(ev.objective):
            raise InputError(f"solution '{path}' has an infinite delay or energy (e.g. it uses "
                             f"an absent UE-BS link); `cefl-opt evaluate` lists its violations")
        if not ev.feasible:
            print(f"{PROG}: warning: solution '{path}' is infeasible ({len(ev.violations)} "
                  f"constraint(s) violated; see `cefl-opt evaluate`)", file=sys.stderr)


def cmd_plot(args) -> int:
    import pandas as pd

    from ..orchestration import cost_table, load_checked, round_summary
    from ..orchestration_plot import plot_costs, plot_orchestration, solution_labels
    from ..plots import pyplot

    costs = Path(args.costs) if args.costs else costs_path(args.out)
    figure_format(args.out, "--out")
    figure_format(costs, "--costs")
    outputs = [("--out", args.out), ("--costs", costs), ("--csv", args.csv)]
    check_distinct(outputs, [args.net, *args.sols])
    for option, path in outputs:
        if path is not None:
            check_writable(path, option)
    if args.costs is None:
        check_new(costs, "--out", overwrite=args.overwrite)
    inst = Instance.load(args.net)
    sols, notes = load_checked(inst, args.sols, allow_other=args.allow_other_instance)
    for note in notes:
        print(note, file=sys.stderr)
    _objectives(inst, sols, args.sols)
    labels = solution_labels(sols)
    plt = pyplot()
    fig, _ = plot_orchestration(inst, sols, labels=labels, seed=args.layout_seed,
                                thin=args.thin)
    items = [(args.out, figure_bytes(fig, args.out))]
    plt.close(fig)
    fig, _ = plot_costs(inst, sols, labels=labels, thin=args.thin)
    items.append((costs, figure_bytes(fig, costs)))
    plt.close(fig)
    if args.csv:
        table = pd.concat([cost_table(inst, s).assign(solution=lab) for s, lab in
                           zip(sols, labels)], ignore_index=True)
        table = table[["solution", *[c for c in table if c != "solution"]]]
        items.append((args.csv, table.to_csv(index=False)))
    for sol, lab in zip(sols, labels):
        print(f"{lab}:")
        print(round_summary(inst, sol).drop(columns="method").to_string(
            index=False, float_format=lambda v: f"{v:.4g}"))
    for path in write_all_atomic(items):
        print(f"wrote {path}")
    return 0
