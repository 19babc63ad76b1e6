"""Wall time of the decentralised solver (simulated on this machine: all nodes in one process)
against the centralised `ipopt-enum` (Ipopt per aggregator choice, coordinate sweeps), on the
paper network (20 UEs, 10 BSs, 5 DCs) and on 100 UEs / 20 BSs / 10 DCs, with their ratio.

    python -m benchmarks.bench_dec_vs_ipopt [--quick] [--seed 0] [--sizes 20x10x5x5,100x20x10x2]
        [--rounds 5] [--max-outer N] [--ipopt-time 600] [--no-ipopt]

Writes results/bench/dec_vs_ipopt.csv (per size and method: wall time, the phases of the
decentralised run, objective of P, aggregators; per size the ratio t_decentralized /
t_ipopt-enum) and results/bench/dec_vs_ipopt.png.

Reading the numbers. The decentralised wall time is that of a sequential simulation of all V
network nodes in one process (`--method decentralized`: node-local steps and neighbour messages,
no central step), model and per-node NLP build included (`build_s`). `per_node_s` = the SCA
time / V is the share of one node if the nodes ran in parallel (it ignores message latency).
--quick: `small` and the reduced 10x6x3 network, 2 rounds. --no-ipopt: the decentralised row
only.

One BLAS thread (set before numpy loads): stable timings on the shared 2-core machine.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import time  # noqa: E402

import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402


def _size(s: str) -> tuple[int, int, int, int | None]:
    try:
        a = [int(x) for x in s.lower().split("x")]
    except ValueError:
        a = []
    if len(a) not in (3, 4) or min(a) < 1:
        raise ValueError(f"size {s!r}: expected UESxBSSxDCS or UESxBSSxDCSxROUNDS, e.g. 20x10x5")
    return a[0], a[1], a[2], (a[3] if len(a) == 4 else None)


def run(args) -> pd.DataFrame:
    from cefl_opt import system
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.base import solve
    from cefl_opt.solvers.decentralized import solve_decentralized

    rows = []
    for spec in args.sizes:
        if spec == "small":
            inst = make_instance("small", seed=args.seed, rounds=args.rounds)
        else:
            N, B, S, T = _size(spec)
            inst = make_instance("paper", seed=args.seed, ues=N, bss=B, dcs=S,
                                 rounds=T or args.rounds)
        base = {"size": spec, "instance": inst.name, "N": inst.N, "B": inst.B, "S": inst.S,
                "T": inst.T}
        t0 = time.perf_counter()
        sol, info = solve_decentralized(inst, method="decentralized", max_outer=args.max_outer)
        t_dec = time.perf_counter() - t0
        ev = system.evaluate(inst, sol)
        rows.append({**base, "method": "decentralized", "wall_s": t_dec,
                     "build_s": info["build_s"], "sca_s": info["sca_s"],
                     "per_node_s": info["sca_s"] / info["n_nodes"],
                     "objective": ev.objective, "feasible": ev.feasible,
                     "stop_reason": info["stop_reason"],
                     "aggregators": " ".join(map(str, info["aggregators_final"])),
                     "n_shared_variables": info["n_shared_variables"],
                     "n_duals": info["n_coupling"],
                     "n_nodes": info["n_nodes"], "outer_iterations": info["outer_iterations"],
                     "inner_iterations": info["inner_iterations"],
                     "msgs_per_node_outer": info["messages"]["per_node_per_outer"]["count"]["mean"],
                     "bytes_per_node_outer":
                         info["messages"]["per_node_per_outer"]["bytes"]["mean"]})
        print(f"{spec}: decentralized {t_dec:.1f} s (build {info['build_s']:.1f} s, SCA "
              f"{info['sca_s']:.1f} s), {info['stop_reason']}, objective {ev.objective:.6g}",
              flush=True)
        if not args.ipopt:
            continue
        t0 = time.perf_counter()
        res = solve(inst, "ipopt-enum", time_limit=args.ipopt_time)
        t_ip = time.perf_counter() - t0
        row = {**base, "method": "ipopt-enum", "wall_s": t_ip, "status": res.status,
               "ipopt_solves": res.info.get("ipopt_solves")}
        if res.solution is not None:
            ev = system.evaluate(inst, res.solution)
            row.update(objective=ev.objective, feasible=ev.feasible,
                       aggregators=" ".join(str(r.aggregator) for r in res.solution.rounds))
        rows.append(row)
        rows[-2]["ratio_dec_over_ipopt"] = t_dec / t_ip
        rows[-2]["objective_gap_vs_ipopt"] = (rows[-2]["objective"] / row["objective"] - 1.0
                                              if row.get("objective") else None)
        print(f"{spec}: ipopt-enum {t_ip:.1f} s, ratio {t_dec / t_ip:.3g}; objectives "
              f"{rows[-2]['objective']:.6g} vs {row.get('objective')}", flush=True)
    return pd.DataFrame(rows)


def figure(df: pd.DataFrame, path) -> None:
    plt = common.plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    sizes = list(dict.fromkeys(df["size"]))
    x = range(len(sizes))
    dec = df[df.method == "decentralized"].set_index("size").reindex(sizes)
    ip = df[df.method == "ipopt-enum"].set_index("size").reindex(sizes)
    w = 0.38
    a1.bar([i - w / 2 for i in x], dec.build_s, w, label="decentralized: build")
    a1.bar([i - w / 2 for i in x], dec.sca_s, w, bottom=dec.build_s,
           label="decentralized: SCA (simulated)")
    if len(ip):
        a1.bar([i + w / 2 for i in x], ip.wall_s, w, label="ipopt-enum")
    a1.set_xticks(list(x), sizes)
    a1.set_yscale("log")
    a1.set_ylim(bottom=1.0)
    a1.set_ylabel("wall time (s)")
    a1.legend(fontsize=8)
    a2.bar([i - w / 2 for i in x], dec.objective, w, label="decentralized")
    if len(ip):
        a2.bar([i + w / 2 for i in x], ip.objective, w, label="ipopt-enum")
    a2.set_xticks(list(x), sizes)
    a2.set_ylabel("objective of P")
    a2.legend(fontsize=8)
    common.save_fig(fig, path)


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--sizes", default=None,
                    help="UESxBSSxDCS[xROUNDS] list (default 20x10x5x5,100x20x10x2)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds T where a size gives none (5; quick 2)")
    ap.add_argument("--max-outer", type=int, default=None, help="outer iterations per SCA phase")
    ap.add_argument("--no-ipopt", dest="ipopt", action="store_false",
                    help="decentralized only (no ipopt-enum)")
    ap.add_argument("--ipopt-time", type=float, default=600.0,
                    help="Ipopt time limit per solve (s)")
    args = ap.parse_args(argv)
    if args.sizes is None:
        args.sizes = "small,10x6x3" if args.quick else "20x10x5x5,100x20x10x2"
    args.sizes = [s for s in args.sizes.split(",") if s]
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    common.quiet()
    t0 = time.perf_counter()
    out = common.out_dir(args)
    df = run(args)
    f1 = common.write_csv(df, out / "dec_vs_ipopt.csv")
    f2 = out / "dec_vs_ipopt.png"
    figure(df, f2)
    common.print_table(df, "decentralized vs ipopt-enum",
                       [c for c in ("size", "T", "method", "wall_s", "build_s", "sca_s",
                                    "per_node_s", "stop_reason", "objective",
                                    "ratio_dec_over_ipopt", "aggregators")
                        if c in df])
    common.footer("bench_dec_vs_ipopt", t0, [f1, f2])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
