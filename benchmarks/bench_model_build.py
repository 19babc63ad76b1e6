"""Build time and size of the Pyomo model of Problem P (cefl_opt.models.build_problem).

For the `paper` preset (20 UEs, 10 BSs, 5 DCs) and a large network (200 UEs, 40 BSs, 10 DCs),
each with `--rounds` rounds (default 5; `--quick`: 1), and for binaries = relaxed / binary
(and copies = True / False when build_problem accepts `copies`), reports:

* build_s: wall time of build_problem (instance generation excluded), best of `--repeat`;
* variables (all VarData), constraints (active ConstraintData) and per role: convex (the node
  sets D_d), coupling (hosted C(w) <= 0), consensus (G(w) = 0);
* peak_rss_mb: peak resident memory of the process that built the model (each configuration
  is built in a fresh forked process, so this includes the interpreter and Pyomo, ~0.2 GB).

    python -m benchmarks.bench_model_build [--rounds 5] [--quick] [--bound corollary]
                                           [--sizes paper,200x40x10] [--repeat 1]

Writes ``model_build.csv`` into ``--out-dir`` (default results/bench/, atomically) and prints
the table.
"""
from __future__ import annotations

import inspect
import multiprocessing as mp
import os
import platform
import resource
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pyomo.environ as pyo  # noqa: E402

from cefl_opt.generator import make_instance  # noqa: E402
from benchmarks import common  # noqa: E402
from cefl_opt.models import (build_problem, consensus_constraints, node_blocks,  # noqa: E402
                             node_constraints)

SIZES = {"paper": ("paper", {}), "200x40x10": ("paper", {"ues": 200, "bss": 40, "dcs": 10})}


def parse_size(text: str) -> tuple[str, tuple[str, dict]]:
    if text in SIZES:
        return text, SIZES[text]
    try:
        n, b, s = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"bench_model_build: --sizes entry {text!r} is neither a known size "
                         f"({', '.join(SIZES)}) nor NxBxS") from None
    return text, ("paper", {"ues": n, "bss": b, "dcs": s})


def supports_copies() -> bool:
    return "copies" in inspect.signature(build_problem).parameters


def measure(size: str, preset: str, kw: dict, rounds: int, binaries: str, bound: str,
            copies: bool | None, repeat: int) -> dict:
    inst = make_instance(preset, rounds=rounds, seed=0, **kw)
    extra = {} if copies is None else {"copies": copies}
    best, m = float("inf"), None
    for _ in range(repeat):
        m = None
        t0 = time.perf_counter()
        m = build_problem(inst, binaries=binaries, bound=bound, **extra)
        best = min(best, time.perf_counter() - t0)
    blocks = node_blocks(m)
    convex = sum(len(node_constraints(b, "convex")) for b in blocks.values())
    coupling = sum(len(node_constraints(b, "coupling")) for b in blocks.values())
    consensus = len(consensus_constraints(m))
    n_vars = sum(1 for _ in m.component_data_objects(pyo.Var))
    n_cons = sum(1 for _ in m.component_data_objects(pyo.Constraint, active=True))
    n_bin = sum(1 for v in m.component_data_objects(pyo.Var) if v.is_binary())
    return {"size": size, "N": inst.N, "B": inst.B, "S": inst.S, "T": inst.T,
            "binaries": binaries, "bound": bound,
            "copies": "n/a" if copies is None else bool(copies),
            "build_s": round(best, 3), "variables": n_vars, "binary_vars": n_bin,
            "constraints": n_cons, "convex": convex, "coupling": coupling,
            "consensus": consensus, "other": n_cons - convex - coupling - consensus,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _child(q, args):
    try:
        q.put(("ok", measure(*args)))
    except BaseException as e:  # report, do not hang the parent
        q.put(("error", f"{type(e).__name__}: {e}"))


def run_isolated(args: tuple) -> dict:
    """measure(*args) in a fresh forked process (clean peak-memory figure)."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q, args))
    p.start()
    status, res = q.get()
    p.join()
    if status != "ok":
        raise RuntimeError(f"build failed for {args[:2]}: {res}")
    return res


def main(argv=None) -> int:
    suite = common.Suite("bench_model_build", __doc__)
    ap = suite.ap
    ap.add_argument("--rounds", type=int, default=5, help="rounds T (default 5; --quick: 1)")
    ap.add_argument("--bound", choices=("corollary", "general"), default="corollary")
    ap.add_argument("--sizes", default="paper,200x40x10",
                    help="comma-separated: paper, 200x40x10 or NxBxS (default: paper,200x40x10)")
    ap.add_argument("--repeat", type=int, default=1, help="builds per configuration (best time)")
    a = suite.start(argv, seed=False)
    rounds = 1 if a.quick else a.rounds
    if rounds < 1 or a.repeat < 1:
        ap.error("--rounds and --repeat must be >= 1")
    copies_opts = [True, False] if supports_copies() else [None]
    rows = []
    for size_text in a.sizes.split(","):
        size, (preset, kw) = parse_size(size_text.strip())
        for binaries in ("relaxed", "binary"):
            for copies in copies_opts:
                r = run_isolated((size, preset, kw, rounds, binaries, a.bound, copies, a.repeat))
                print(f"  {size} T={rounds} {binaries:<7} copies={r['copies']}: "
                      f"{r['build_s']:.2f} s, {r['variables']} vars, {r['constraints']} cons",
                      flush=True)
                rows.append(r)
    df = pd.DataFrame(rows)
    df["machine"] = f"{platform.machine()} {os.cpu_count()} cpu, python {platform.python_version()}"
    suite.csv(df, "model_build.csv")
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(df.drop(columns=["machine"]).to_string(index=False))
    return suite.finish()


if __name__ == "__main__":
    sys.exit(main())
