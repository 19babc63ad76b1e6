"""Cost of one inner iteration, decentralised (per-node arrays, relay-tree messages through
`LocalComm`) against centralised (the same arithmetic on global arrays), and what each node
stores (sparse duals, work per node proportional to its rows and degree: docs/decentralized.md,
'Per-node blocks').

    python -m benchmarks.bench_dec_inner [--quick] [--seed 0] [--sizes small,20x10x5x5]
        [--iters 300]

A size is a preset or UESxBSSxDCSxROUNDS, with xREACH added for each UE's nearest BSs only
(the generator's `reach`; every link without it), e.g. 200x40x10x2x5.

For each size: build the per-node structure, linearise at w^0, run `--iters` inner iterations
of the same surrogate in both modes (same iterates; checked; three alternating runs per mode,
the best time of each counts: the shared machine's load only adds) and report the time per inner
iteration, its ratio, the largest number of multipliers and shared-variable entries a node
holds against V x K (a dense layout, every node holding every row), and messages per node per inner
iteration. Writes results/bench/dec_inner.csv.

One BLAS thread (set before numpy loads): stable timings on the shared 2-core machine.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import time  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402


def one(spec: str, seed: int, iters: int, repeats: int = 3) -> dict:
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.dec_comm import LocalComm
    from cefl_opt.solvers.primal_dual import InnerSolver, resolve_constants
    from cefl_opt.solvers.sca import build_structure
    if spec in ("tiny", "small", "paper"):
        inst = make_instance(spec, seed=seed, rounds=2)
    else:
        N, B, S, T, *reach = (int(x) for x in spec.split("x"))
        inst = make_instance("paper", seed=seed, ues=N, bss=B, dcs=S, rounds=T,
                             **({"reach": reach[0]} if reach else {}))
    st = build_structure(inst)
    lin = st.linearise(st.u0)
    k = resolve_constants({"inner_iters": iters})
    free = np.ones(st.n_rows, bool)
    free[st.force_rows] = False
    L = np.where(free, k.L_C, 0.0)
    q = np.full(st.n, k.lambda1)
    fixed = np.zeros(st.n_rows)
    out = {}
    comm = LocalComm(inst.graph(), st.node_names)
    msgs = None
    for _rep in range(repeats):   # modes alternate; the best time of each counts (load noise)
        for mode in ("centralized", "decentralized"):
            inner = InnerSolver(st, k, mode=mode,
                                comm=comm if mode == "decentralized" else None)
            comm.snapshot()
            t0 = time.perf_counter()
            u, stats = inner.solve(lin, q, L, free, fixed, 0.0)
            dt = time.perf_counter() - t0
            if mode == "decentralized" and msgs is None:
                msgs, _ = comm.snapshot()
            best = out.get(mode, (None, np.inf))[1]
            out[mode] = (u, min(best, dt / stats["inner_iters"]), inner)
    dec = out["decentralized"][2]
    V = st.n_nodes
    entries = np.bincount(dec.plan.entry_node, minlength=V)
    rows = np.diff(st.row_ptr)
    return {"size": spec, "V": V, "shared_variables": st.n, "rows": st.n_rows,
            "t_inner_central_ms": 1e3 * out["centralized"][1],
            "t_inner_dec_ms": 1e3 * out["decentralized"][1],
            "ratio_dec_over_central": out["decentralized"][1] / out["centralized"][1],
            "same_iterate": bool(np.allclose(out["centralized"][0], out["decentralized"][0],
                                             atol=1e-9)),
            "max_rows_per_node": int(rows.max()), "max_entries_per_node": int(entries.max()),
            "dense_VxK": V * st.n_rows,
            "msgs_per_node_per_inner": float(msgs.mean() / iters)}


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--sizes", default=None, help="presets or UESxBSSxDCSxROUNDS[xREACH] list")
    ap.add_argument("--iters", type=int, default=300)
    args = ap.parse_args(argv)
    sizes = args.sizes or ("small" if args.quick else "small,20x10x5x5")
    common.quiet()
    t0 = time.perf_counter()
    out = common.out_dir(args)
    df = pd.DataFrame([one(s, args.seed, args.iters) for s in sizes.split(",") if s])
    f1 = common.write_csv(df, out / "dec_inner.csv")
    common.print_table(df, "inner iteration: decentralized vs centralized", list(df.columns))
    common.footer("bench_dec_inner", t0, [f1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
