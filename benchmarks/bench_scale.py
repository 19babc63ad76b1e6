"""Scale sweep from 20 UEs / 10 BSs / 5 DCs to 1,000 / 100 / 20 (docs/scale-mpi.md).

    python -m benchmarks.bench_scale [--quick] [--seed 0] [--sizes 20/10/5,200/40/10,...]
                                     [--reach 5] [--ranks 1,2] [--timeout 900]
                                     [--measures floor,dec,ipopt] [--repeats 3]
                                     [--set KEY=VALUE ...]

Per size (T = 2; every link at the paper size and below, `--reach 5` beyond it), each
measurement in its own subprocess so that its peak RSS (`os.wait4`'s ru_maxrss) is its own:

* `gen`: `make_instance` wall time, instance file size, variables of P in the block form
  (`mpi_backend.node_work`, equal to the Pyomo block model's count) and in the compact form;
* `dec` (per rank count): `--method decentralized` (1 rank: in process; R ranks: `mpiexec -n R
  cefl-opt solve ... --backend mpi`): wall time, peak RSS (the largest rank), outer and inner
  iterations, time per outer and per inner iteration, the floor of one outer iteration (one
  linearisation + one projection of the solver's own structure, when it exposes them; with
  `build_structure`'s time and its per-node Hessian entries, max and total), messages
  and bytes per node, objective and feasibility under `cefl_opt.system.evaluate`; with R > 1
  ranks, per rank r (`rank{r}_*`): wall time, time per inner iteration, exchanges between
  the ranks (in total and per inner iteration), bytes sent, the exchanges' share of the wall
  time, peak RSS;
* `decentralized_per_iter` (per rank count, as `dec`), `centralized_pd_per_iter`: `--method
  decentralized` and `--method centralized-pd` (the same iterations with exact global dual
  updates) for `--timing-outer` (5) outer iterations: time per outer and per inner iteration.
  `--repeats K` runs the pair K times, alternating (decentralized, centralized-pd,
  decentralized, ...), so that both see the same load; the ratio of the medians per inner
  iteration is the comparison "a decentralised inner iteration <= 1.5x a centralised"
  (`scale_ratio.csv`);
* `--set KEY=VALUE` (repeatable) passes constants to every `decentralized` run, e.g. the three
  that turn the search after the rounding off (`--set agg_passes=0 --set candidates=1 --set
  refine_rounds=0`); a run the solver refuses records its rc (2);
* `ipopt`: one centralised Ipopt solve on the same instance (the greedy-rate aggregators and
  the association rule fixed, `FixedNLP` on the compact form, no association repair), where it
  finishes within the timeout: build and solve time, Ipopt iterations;
* `base` (per rank count): the `dec` launch, one outer iteration, on a 4 / 2 / 2 instance:
  the peak RSS of the interpreter, the libraries and MPI with next to no data. It gives the
  peak an even split of one process's memory over R ranks would reach (`memory_table`).

Writes results/bench/scale.csv (one row per size, measurement, rank count and repeat),
results/bench/scale_memory.csv (per size and rank count R > 1: peak RSS of one process and of
the largest rank, their ratio, the even split's peak and ratio; `memory_table`),
results/bench/scale_ratio.csv (per size and rank count: the medians of the two timing runs per
inner iteration, columns `decentralized_ms_per_inner` and `centralized_pd_ms_per_inner`, their
ratio, the spread of the repeats) and
results/bench/scale.png (log-log: wall time against the number of variables; decentralised with
1 and 2 ranks, centralised Ipopt, the per-iteration times). The machine's load average is
recorded with every row (timings on the shared 2-core machine are inflated under load). Every
measurement runs with its address space capped at BENCH_SCALE_MEM_GB (default 10 GB), so a run
that would exhaust the shared machine's memory fails on its own (rc != 0, `error` column).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402

PAPER_SIZE = (20, 10, 5)
# the per-iteration timing runs: a fixed number of outer iterations of each method
DECENTRALIZED_TIMING, CENTRALIZED_PD_TIMING = "decentralized_per_iter", "centralized_pd_per_iter"
DECENTRALIZED = ("dec", DECENTRALIZED_TIMING)     # the measures that run `decentralized`
TIMING = (DECENTRALIZED_TIMING, CENTRALIZED_PD_TIMING)
MEASURES = ("floor", "dec", DECENTRALIZED_TIMING, CENTRALIZED_PD_TIMING, "ipopt", "base")
BASE_SIZE = (4, 2, 2)     # the `base` runs' instance: the launch's fixed memory, next to no data
SIZES = "20/10/5,50/15/8,100/20/10,200/40/10,500/60/15,1000/100/20"
QUICK_SIZES = "20/10/5,50/15/8"
BIN = Path(sys.executable).parent


def _size(spec: str) -> tuple[int, int, int]:
    try:
        n, b, s = (int(x) for x in spec.split("/"))
    except ValueError:
        raise SystemExit(f"bench_scale: bad size {spec!r}: expected UES/BSS/DCS") from None
    return n, b, s


def _instance_path(out_dir: Path, n: int, b: int, s: int, reach: int | None, seed: int) -> Path:
    return out_dir / "scale" / f"net-{n}-{b}-{s}-r{reach or 'all'}-s{seed}.json"


# ---------------------------------------------------------------------- workers (subprocess)
def _worker_gen(job: dict) -> dict:
    from cefl_opt.generator import make_instance
    from cefl_opt.models import build_problem
    from cefl_opt.solvers.mpi_backend import node_work
    import pyomo.environ as pyo
    t0 = time.perf_counter()
    inst = make_instance("paper", ues=job["n"], bss=job["b"], dcs=job["s"], rounds=2,
                         reach=job["reach"], seed=job["seed"])
    gen_s = time.perf_counter() - t0
    inst.save(job["path"])
    t0 = time.perf_counter()
    m = build_problem(inst, copies=False)
    build_s = time.perf_counter() - t0
    n_compact = sum(1 for _ in m.component_data_objects(pyo.Var))
    return {"gen_s": gen_s, "file_MB": os.path.getsize(job["path"]) / 1e6,
            "vars_block": int(node_work(inst).sum()), "vars_compact": n_compact,
            "links": int(inst.link_mask.sum()), "compact_build_s": build_s}


def _dec_floor(inst) -> dict:
    """One linearisation + one projection of the decentralised solver's own structure (when
    `solvers.sca` exposes build_structure / linearise / project)."""
    try:
        from cefl_opt.solvers import sca
        st = sca.build_structure(inst)
        u = st.u0() if callable(getattr(st, "u0", None)) else st.u0
    except Exception as e:  # noqa: BLE001 - the floor is optional
        return {"floor_note": f"no structure: {type(e).__name__}: {e}"[:120]}
    if not (hasattr(st, "linearise") and hasattr(st, "project")):
        return {"floor_note": "structure has no linearise/project"}
    best_l, best_p = float("inf"), float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        st.linearise(u)
        t1 = time.perf_counter()
        st.project(u)
        t2 = time.perf_counter()
        best_l, best_p = min(best_l, t1 - t0), min(best_p, t2 - t1)
    nnz = [pv.nnz_hessian() for pv in getattr(st, "providers", []) if hasattr(pv, "nnz_hessian")]
    return {"floor_linearise_s": best_l, "floor_project_s": best_p, "floor_s": best_l + best_p,
            "structure_build_s": getattr(st, "build_s", None),
            "hess_nnz_max": max(nnz) if nnz else None, "hess_nnz_total": sum(nnz) if nnz else None}


def _flatten(prefix: str, d) -> dict:
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(f"{prefix}.{k}" if prefix else str(k), v))
    elif isinstance(d, (int, float, str, bool)) or d is None:
        out[prefix] = d
    return out


def _summary_from_solution(sol_path: str, inst_path: str) -> dict:
    from cefl_opt import system
    from cefl_opt.instance import Instance
    from cefl_opt.solution import Solution
    inst = Instance.load(inst_path)
    sol = Solution.load(sol_path, inst)
    ev = system.evaluate(inst, sol)
    info = sol.info or {}
    keep = {k: info.get(k) for k in ("outer_iterations", "inner_iterations", "stop_reason",
                                     "backend", "ranks", "central_steps",
                                     "sca_s_per_outer", "ipopt_solves")}
    keep["central_steps"] = json.dumps(keep["central_steps"])
    # wall_s of the row is the whole process (imports, build, solve); solver_wall_s the solver's
    row = {"objective": ev.objective, "feasible": ev.feasible,
           "solver_wall_s": info.get("wall_s", sol.wall_s),
           **keep, **_flatten("messages", info.get("messages"))}
    outer, inner = info.get("outer_iterations"), info.get("inner_iterations")
    row.update(_per_rank(info.get("exchanges"), inner))
    wall = info.get("sca_s") or info.get("wall_s") or sol.wall_s
    if outer:
        row["s_per_outer"] = info.get("sca_s_per_outer") or wall / outer
    if inner:
        row["s_per_inner"] = info.get("s_per_inner") or wall / inner
    return row


def _per_rank(ex: dict | None, inner: int | None) -> dict:
    """Columns of the MPI backend's per-rank report (`info['exchanges']`): per rank r, its
    wall time, time per inner iteration, exchanges (and per inner iteration), bytes sent to
    other ranks, the exchanges' share of its wall time, its peak RSS."""
    if not ex:
        return {}
    row = {}
    for r, (n, b, s, share, rss, wall) in enumerate(zip(
            ex["count"], ex["bytes"], ex["seconds"], ex["share_of_wall"], ex["peak_rss_mb"],
            ex["wall_s"])):
        row.update({f"rank{r}_wall_s": wall, f"rank{r}_exchanges": n,
                    f"rank{r}_exchange_bytes": b, f"rank{r}_exchange_s": s,
                    f"rank{r}_exchange_share": share, f"rank{r}_peak_rss_MB": rss})
        if inner:
            row[f"rank{r}_s_per_inner"] = wall / inner
            row[f"rank{r}_exchanges_per_inner"] = n / inner
    return row


def _worker_floor(job: dict) -> dict:
    from cefl_opt.instance import Instance
    return _dec_floor(Instance.load(job["path"]))


def _worker_ipopt(job: dict) -> dict:
    """One centralised Ipopt solve: the greedy-rate aggregators and the association rule fixed,
    Ipopt on the continuous variables of the compact form (no association repair)."""
    from cefl_opt.instance import Instance
    from cefl_opt.solvers.centralized import FixedNLP, decisions_for, greedy_rate_aggregators
    inst = Instance.load(job["path"])
    t0 = time.perf_counter()
    nlp = FixedNLP(inst, time_limit=job.get("time_limit"))
    t1 = time.perf_counter()
    sol, status, obj = nlp.solve(decisions_for(inst, greedy_rate_aggregators(inst)))
    t2 = time.perf_counter()
    return {"objective": obj, "feasible": sol is not None, "status": str(status),
            "ipopt_build_s": t1 - t0, "ipopt_solve_s": t2 - t1,
            "ipopt_iterations": nlp.iterations,
            "s_per_ipopt_iteration": (t2 - t1) / max(nlp.iterations, 1)}


WORKERS = {"gen": _worker_gen, "floor": _worker_floor, "ipopt": _worker_ipopt}


def _peak_rss_child(cmd: list[str], timeout: float) -> tuple[int, float, float, str]:
    """(exit code, wall s, peak RSS MB of the child tree's largest process, output tail)
    (`common.run_child`). The child's address space is capped at BENCH_SCALE_MEM_GB (default
    10 GB): a run that needs more fails with a MemoryError instead of calling the machine's OOM
    killer."""
    import resource
    cap = int(float(os.environ.get("BENCH_SCALE_MEM_GB", "10")) * 2 ** 30)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    run = common.run_child(cmd, timeout, preexec_fn=limit)
    return run.rc, run.wall_s, run.peak_rss_mb, run.output


def _worker_cmd(kind: str, job: dict) -> list[str]:
    return [sys.executable, "-m", "benchmarks.bench_scale", "--worker", kind, json.dumps(job)]


# ---------------------------------------------------------------------- driver
def measure(args) -> pd.DataFrame:
    out_dir = Path(args.out_dir)
    rows = []
    specs = [(spec, False) for spec in args.sizes.split(",")]
    if "base" in args.measures:
        specs.insert(0, ("/".join(map(str, BASE_SIZE)), True))
    for spec, is_base in specs:
        n, b, s = _size(spec)
        reach = None if (n, b, s) <= PAPER_SIZE or args.reach is None else args.reach
        path = _instance_path(out_dir, n, b, s, reach, args.seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        base = {"size": spec, "N": n, "B": b, "S": s, "T": 2, "reach": reach or "all"}
        job = {"n": n, "b": b, "s": s, "reach": reach, "seed": args.seed, "path": str(path)}

        def record(kind: str, ranks, rc, wall, rss, extra: dict, tail: str, rep: int = 0
                   ) -> None:
            row = {**base, "measure": kind, "ranks": ranks, "repeat": rep, "rc": rc,
                   "constants": " ".join(args.set) if kind in DECENTRALIZED else "",
                   "wall_s": wall,
                   "peak_rss_MB": rss, "load1": os.getloadavg()[0], **extra}
            if rc != 0:
                row["error"] = " ".join(tail.strip().splitlines()[-2:])[:200]
            rows.append(row)
            print(f"[{spec}] {kind:6s} ranks={ranks} rc={rc} wall={wall:.1f}s "
                  f"rss={rss:.0f}MB " + " ".join(f"{k}={v}" for k, v in extra.items()
                                                 if k in ("objective", "feasible", "s_per_inner",
                                                          "s_per_outer", "floor_s",
                                                          "structure_build_s", "hess_nnz_max",
                                                          "vars_block", "stop_reason",
                                                          "ipopt_solve_s", "ipopt_iterations")),
                  flush=True)

        rc, wall, rss, tail = _peak_rss_child(_worker_cmd("gen", job), args.timeout)
        gen = _parse_worker(tail) if rc == 0 else {}
        record("gen", 1, rc, wall, rss, gen, tail)
        if rc != 0:
            continue
        base.update({k: gen[k] for k in ("vars_block", "vars_compact", "links")})
        if is_base:
            for ranks in args.ranks:
                sol = path.with_name(path.stem + f"-base-{ranks}.json")
                rc, wall, rss, tail = _peak_rss_child(
                    _dec_cmd(path, "decentralized", ranks, args, sol, max_outer=1),
                    args.timeout)
                record("base", ranks, rc, wall, rss, {}, tail)
            continue
        if "floor" in args.measures:
            rc, wall, rss, tail = _peak_rss_child(_worker_cmd("floor", job), args.timeout)
            record("floor", 1, rc, wall, rss, _parse_worker(tail) if rc == 0 else {}, tail)
        methods = [("dec", "decentralized", r) for r in args.ranks]
        methods += [(DECENTRALIZED_TIMING, "decentralized", r) for r in args.ranks]
        methods += [(CENTRALIZED_PD_TIMING, "centralized-pd", 1)]
        if "ipopt" in args.measures:
            rc, wall, rss, tail = _peak_rss_child(
                _worker_cmd("ipopt", {**job, "time_limit": args.timeout}), args.timeout + 60)
            record("ipopt", 1, rc, wall, rss, _parse_worker(tail) if rc == 0 else {}, tail)
        timing = [m for m in methods if m[0] in TIMING and m[0] in args.measures]
        runs = [(m, 0) for m in methods if m[0] in args.measures and m not in timing]
        runs += [(m, rep) for rep in range(args.repeats) for m in timing]   # alternating
        for (kind, method, ranks), rep in runs:
            sol = path.with_name(path.stem + f"-{kind}-{ranks}.json")
            cmd = _dec_cmd(path, method, ranks, args, sol,
                           max_outer=args.timing_outer if kind in TIMING else None)
            if sol.exists():
                sol.unlink()
            rc, wall, rss, tail = _peak_rss_child(cmd, args.timeout)
            extra = _summary_from_solution(str(sol), str(path)) if rc == 0 and sol.exists() \
                else {}
            record(kind, ranks, rc, wall, rss, extra, tail, rep)
    return pd.DataFrame(rows)


def _dec_cmd(path: Path, method: str, ranks: int, args, sol: Path,
             max_outer: int | None = None) -> list[str]:
    """`cefl-opt solve` of one measurement into the solution file `sol`: `mpiexec -n R ...
    --backend mpi` for R > 1 ranks, `--set` constants for `decentralized`."""
    cmd = [str(BIN / "cefl-opt"), "solve", str(path), "--method", method, "--out", str(sol)]
    if max_outer:
        cmd += ["--max-outer", str(max_outer)]
    if method == "decentralized":
        cmd += [a for kv in args.set for a in ("--set", kv)]
    if ranks > 1:
        cmd = [str(BIN / "mpiexec"), "-n", str(ranks)] + cmd + ["--backend", "mpi"]
    return cmd


def memory_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per size and rank count R > 1 (the `dec` runs, medians over repeats): peak RSS of one
    process and of the largest of the R ranks, and their ratio. With the `base` runs (the same
    launch on a `BASE_SIZE` instance: interpreter, libraries, MPI, next to no data), the peak
    an even split would give, `even_split_MB` = base_R + (one - base_1) / R: each rank holding
    its launch's base and 1/R of what one process holds above its own; `even_split_ratio` is
    that over one process's peak, the ratio the split can reach."""
    ok = df[(df.rc == 0) & (df.measure.isin(["dec", "base"]))]
    base = ok[ok.measure == "base"].groupby("ranks").peak_rss_MB.median()
    rows = []
    for size, g in ok[ok.measure == "dec"].groupby("size", sort=False):
        one = g[g.ranks == 1].peak_rss_MB
        if not len(one):
            continue
        p1 = float(one.median())
        for ranks, gr in g[g.ranks > 1].groupby("ranks"):
            pr = float(gr.peak_rss_MB.median())
            row = {"size": size, "ranks": ranks, "one_MB": p1, "largest_rank_MB": pr,
                   "ratio": pr / p1}
            if 1 in base.index and ranks in base.index:
                even = base[ranks] + (p1 - base[1]) / ranks
                row.update(base_one_MB=base[1], base_rank_MB=base[ranks], even_split_MB=even,
                           even_split_ratio=even / p1)
            rows.append(row)
    return pd.DataFrame(rows)


def ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per size and rank count: median seconds per inner iteration of the decentralised timing
    runs over the centralised primal-dual's."""
    if "s_per_inner" not in df:
        return pd.DataFrame()
    ok = df[(df.rc == 0) & df.measure.isin(TIMING) & df.s_per_inner.notna()]
    central = ok[ok.measure == CENTRALIZED_PD_TIMING].groupby("size", sort=False).s_per_inner
    rows = []
    decentral = ok[ok.measure == DECENTRALIZED_TIMING]
    for (size, ranks), d in decentral.groupby(["size", "ranks"], sort=False):
        if size not in central.groups:
            continue
        g, c = d.s_per_inner, central.get_group(size)
        rows.append({"size": size, "ranks": ranks, "repeats": len(g),
                     "decentralized_ms_per_inner": 1e3 * g.median(),
                     "centralized_pd_ms_per_inner": 1e3 * c.median(),
                     "ratio": g.median() / c.median(),
                     "ratio_min": g.min() / c.max(), "ratio_max": g.max() / c.min()})
    return pd.DataFrame(rows)


def _parse_worker(tail: str) -> dict:
    line = [x for x in tail.splitlines() if x.startswith("##")]
    return json.loads(line[-1][2:]) if line else {}


def figure(df: pd.DataFrame, path: Path, timing_outer: int = 5) -> Path:
    plt = common.plt()
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    ok = df[(df.rc == 0) & df.vars_block.notna()]
    for (kind, ranks), g in ok.groupby(["measure", "ranks"]):
        if kind in ("gen", "floor", "base"):
            continue
        g = g.groupby("vars_block", as_index=False).median(numeric_only=True)   # the repeats
        label = {"dec": f"decentralized, {ranks} rank(s)",
                 DECENTRALIZED_TIMING: f"decentralized ({timing_outer} outer), {ranks} rank(s)",
                 CENTRALIZED_PD_TIMING: f"centralized-pd ({timing_outer} outer)",
                 "ipopt": "one Ipopt solve (greedy-rate)"}[kind]
        if kind in ("dec", "ipopt"):
            ax[0].loglog(g.vars_block, g.wall_s, "o-", label=label)
        if kind in TIMING and "s_per_inner" in g and g.s_per_inner.notna().any():
            ax[1].loglog(g.vars_block, g.s_per_inner, "o-", label=f"{label}: per inner it.")
            ax[1].loglog(g.vars_block, g.s_per_outer, "s:", label=f"{label}: per outer it.")
    fl = ok[ok.measure == "floor"]
    if "floor_s" in fl and fl.floor_s.notna().any():
        ax[1].loglog(fl.vars_block, fl.floor_s, "k--", label="floor: 1 linearisation + 1 projection")
    ax[0].set(xlabel="variables of P (block form)", ylabel="wall time (s)",
              title="time to a binary solution")
    ax[1].set(xlabel="variables of P (block form)", ylabel="seconds", title="per iteration")
    for a in ax:
        a.grid(True, which="both", alpha=0.3)
        if a.get_legend_handles_labels()[0]:      # a panel whose measures did not run: empty
            a.legend(fontsize=7)
    fig.tight_layout()
    return common.save_fig(fig, path)




def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--sizes", default=None, help=f"UES/BSS/DCS list (default {SIZES})")
    ap.add_argument("--reach", type=int, default=5, help="links per UE beyond the paper size")
    ap.add_argument("--ranks", default="1,2", help="rank counts of the decentralised runs")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement")
    ap.add_argument("--timing-outer", type=int, default=5,
                    help="outer iterations of the timing runs `{}` and `{}`: their "
                         "per-iteration times are what counts".format(*TIMING))
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each of `{}` and `{}` per size, alternating; the ratio "
                         "uses their medians".format(*TIMING))
    ap.add_argument("--measures", default=",".join(MEASURES),
                    help=f"which measurements after `gen` (default: {','.join(MEASURES)}; "
                         "none: `gen` alone)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a constant of the decentralised runs, passed on as `cefl-opt solve "
                         "--set KEY=VALUE` (repeatable; recorded in the `constants` column)")
    ap.add_argument("--worker", nargs=2, metavar=("KIND", "JOB"), help=argparse_hidden())
    args = ap.parse_args(argv)
    if args.worker:
        kind, job = args.worker
        print("##" + json.dumps(WORKERS[kind](json.loads(job))), flush=True)
        return 0
    args.sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    args.ranks = [int(x) for x in str(args.ranks).split(",")]
    args.measures = set(args.measures.split(","))
    unknown = args.measures - {*MEASURES, "none"}
    if unknown:
        ap.error(f"--measures: unknown {','.join(sorted(unknown))} "
                 f"(known: {','.join(MEASURES)}, or none)")
    df = measure(args)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv = out / "scale.csv"
    common.write_csv(df, csv)
    print(f"wrote {csv}")
    mem = memory_table(df)
    if len(mem):
        print(mem.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        common.write_csv(mem, out / "scale_memory.csv")
        print(f"wrote {out / 'scale_memory.csv'}")
    rt = ratios(df)
    if len(rt):
        print(rt.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        common.write_csv(rt, out / "scale_ratio.csv")
        print(f"wrote {out / 'scale_ratio.csv'}")
    print(f"wrote {figure(df, out / 'scale.png', args.timing_outer)}")
    return 0


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
