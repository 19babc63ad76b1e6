"""A cost model of the MPI backend fitted to `bench_scale` measurements, and its prediction for
10,000 UEs on 8-64 ranks (docs/scale-mpi.md, "Predicting larger runs").

    python -m benchmarks.mpi_model [--scale-csv results/bench/scale.csv [MORE.csv ...]]
                                   [--out DIR]
                                   [--ues 10000 --bss 1000 --dcs 100 --reach 5 --seed 0]
                                   [--ranks 8,16,32,64] [--alpha-us 50 --gbps 10]

Model of one inner iteration on R ranks (the slowest rank sets the pace):

    t(R) = c * W_max + X(R) * (alpha + beta * B_max)

* W_max: the largest rank's work, the sum of `mpi_backend.node_work` (variables of its node
  blocks) over its nodes of the METIS partition `mpi_backend.partition_nodes`;
* c: seconds per unit of work per inner iteration, fitted (least squares through the origin)
  to the 1-rank runs' time per inner iteration at several sizes; the largest size is held out
  and predicted from the others;
* X(R) = X_2 * D(R): the exchanges per inner iteration measured with 2 ranks (rank graph
  diameter 1) times the diameter D(R) of the rank graph (ranks joined where their nodes share a
  graph edge): a broadcast or reduce costs one exchange per rank hop (assumed: every
  collective of an inner iteration travels the whole diameter, an upper bound);
* B_max = p * E_max: the largest rank's bytes per exchange, the payload p per cut graph edge
  (fitted to the 2-rank runs' bytes per exchange over their cut) times the largest rank's cut
  edges E_max (graph edges with one end on the rank);
* alpha, beta: per-exchange latency and per-byte cost, fitted (non-negative least squares) to
  the 2-rank runs' seconds per exchange against bytes per exchange. On one host those
  seconds include the wait for the other rank (imbalance, shared cores), so the same-host
  alpha is an upper bound of the latency. A second, *assumed* multi-host interconnect
  (`--alpha-us`, `--gbps`) replaces alpha and beta. One latency per exchange assumes the
  neighbour messages of one `Ineighbor_alltoallv` overlap; the column
  `s_per_inner_alpha_per_neighbour` charges one latency per neighbour rank instead.

Inner iterations per run: I(W) = a * W^k fitted (log-log) to the full `dec` runs (with one
measured size: k = 0, its count at every size); the time per
run is I * t(R) (the build, the association moves and the process start are not in it); a
second column assumes instead the inner iterations measured at the largest size.
Memory per rank: RSS = base + m_own * W_rank + m_all * W_total, fitted (non-negative least
squares) to the peak RSS of every rank of the 1- and 2-rank runs (every rank still builds the
whole block model and full-length vectors, hence the W_total term).

Writes DIR/mpi_model.csv (predictions), DIR/mpi_model_fit.csv (fitted values against the
measured points, with residuals and the held-out size), DIR/mpi_model.png and
DIR/mpi_model.md (the tables for the docs). Bad input: one line `mpi_model: error: ...`, exit 2.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, asdict
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks import common

SAME_HOST, MULTI_HOST = "same host (measured)", "multi-host (assumed)"


class InputError(ValueError):
    """Bad input: reported as one line, exit 2."""


# ---------------------------------------------------------------------- partition quantities
def rank_loads(adj, parts: np.ndarray, work: np.ndarray) -> tuple[pd.DataFrame, list[set]]:
    """(per rank: its work (sum of `work` over its nodes), its cut edges (graph edges with one
    end on the rank and the other elsewhere), its neighbour-rank count; the neighbour ranks of
    every rank)."""
    parts = np.asarray(parts, dtype=np.int64)
    R = int(parts.max()) + 1
    w = np.bincount(parts, weights=np.asarray(work, float), minlength=R)
    cut = np.zeros(R, dtype=np.int64)
    nbrs = [set() for _ in range(R)]
    for a, bs in enumerate(adj):
        for b in bs:
            if b > a and parts[a] != parts[b]:
                cut[parts[a]] += 1
                cut[parts[b]] += 1
                nbrs[parts[a]].add(int(parts[b]))
                nbrs[parts[b]].add(int(parts[a]))
    return pd.DataFrame({"rank": np.arange(R), "work": w, "cut_edges": cut,
                         "nbr_ranks": [len(s) for s in nbrs]}), nbrs


def rank_diameter(nbrs) -> int:
    """Diameter of the rank graph (hops), by BFS from every rank."""
    import networkx as nx
    g = nx.Graph()
    g.add_nodes_from(range(len(nbrs)))
    g.add_edges_from((r, s) for r, ns in enumerate(nbrs) for s in ns)
    return int(nx.diameter(g)) if len(nbrs) > 1 else 0


def partition_summary(inst, ranks: int) -> dict:
    """W_max, W_total, E_max (the largest cut of a rank), the rank graph's diameter and the
    largest rank's neighbour count for the METIS partition of `inst` over `ranks`."""
    from cefl_opt.solvers.dec_comm import graph_adjacency
    from cefl_opt.solvers.mpi_backend import node_weights, node_work, partition_nodes
    work = node_work(inst)
    adj = graph_adjacency(inst.graph(), inst.node_names())
    parts = partition_nodes(adj, ranks, node_weights(inst))
    loads, nbrs = rank_loads(adj, parts, work)
    return {"ranks": ranks, "W_total": int(work.sum()), "W_max": int(loads.work.max()),
            "E_max": int(loads.cut_edges.max()), "diameter": rank_diameter(nbrs),
            "nbr_ranks_max": int(loads.nbr_ranks.max())}


# ---------------------------------------------------------------------- fits
def fit_through_origin(x, y) -> float:
    """Least-squares slope of y = c x."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    return float(x @ y / (x @ x))


def fit_nonneg(A, y) -> np.ndarray:
    """Non-negative least squares of y = A theta."""
    from scipy.optimize import nnls
    return nnls(np.asarray(A, float), np.asarray(y, float))[0]


def fit_power(x, y) -> tuple[float, float]:
    """(a, k) of y = a x^k, least squares in log-log."""
    k, loga = np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)
    return float(np.exp(loga)), float(k)


@dataclass
class Fit:
    """The model's parameters (module docstring)."""

    c: float            # s per unit of work per inner iteration
    x2: float           # exchanges per inner iteration with 2 ranks (diameter 1)
    p: float            # bytes per exchange per cut edge of the rank
    alpha: float        # s per exchange, same host
    beta: float         # s per byte, same host
    inner_a: float      # inner iterations per run = inner_a * W^inner_k
    inner_k: float
    rss_base: float     # MB
    rss_own: float      # MB per unit of the rank's work
    rss_all: float      # MB per unit of the whole problem's work
    inner_largest: float = float("nan")   # inner iterations measured at the largest size


def t_inner(fit: Fit, w_max, x, b_max, alpha=None, beta=None):
    """Seconds per inner iteration: c W_max + X (alpha + beta B_max)."""
    a = fit.alpha if alpha is None else alpha
    b = fit.beta if beta is None else beta
    return fit.c * np.asarray(w_max, float) + np.asarray(x, float) * (a + b * np.asarray(b_max,
                                                                                       float))


def rss_mb(fit: Fit, w_rank, w_total):
    """Peak RSS of a rank (MB): base + m_own W_rank + m_all W_total."""
    return fit.rss_base + fit.rss_own * np.asarray(w_rank, float) + \
        fit.rss_all * np.asarray(w_total, float)


def fit_model(one: pd.DataFrame, two: pd.DataFrame, runs: pd.DataFrame) -> Fit:
    """Fit every parameter. `one`: 1-rank rows (W, s_per_inner); `two`: one row per rank of the
    2-rank runs (exchanges_per_inner, bytes_per_exchange, s_per_exchange, cut_edges);
    `runs`: full runs (W, inner_iterations); memory: rows of `one` and `two` with
    (w_rank, W, rss_MB)."""
    c = fit_through_origin(one.W, one.s_per_inner)
    x2 = float(two.exchanges_per_inner.mean())
    p = fit_through_origin(two.cut_edges, two.bytes_per_exchange)
    alpha, beta = fit_nonneg(np.c_[np.ones(len(two)), two.bytes_per_exchange], two.s_per_exchange)
    if runs.W.nunique() >= 2:
        a, k = fit_power(runs.W, runs.inner_iterations)
    else:                       # one measured size: its inner iterations at every size (k = 0)
        a, k = float(runs.inner_iterations.median()), 0.0
    mem = pd.concat([one[["w_rank", "W", "rss_MB"]], two[["w_rank", "W", "rss_MB"]]])
    base, own, every = fit_nonneg(np.c_[np.ones(len(mem)), mem.w_rank, mem.W], mem.rss_MB)
    largest = float(runs[runs.W == runs.W.max()].inner_iterations.median())
    return Fit(c, x2, p, float(alpha), float(beta), a, k, float(base), float(own), float(every),
               largest)


# ---------------------------------------------------------------------- measured inputs
def _instance(row, seed: int):
    from cefl_opt.generator import make_instance
    reach = None if str(row["reach"]) == "all" else int(float(row["reach"]))
    return make_instance("paper", ues=int(row.N), bss=int(row.B), dcs=int(row.S), rounds=2,
                         reach=reach, seed=seed)


def read_scale_csvs(paths: list[Path]) -> pd.DataFrame:
    """bench_scale's CSVs, concatenated."""
    for p in paths:
        if not p.is_file():
            raise InputError(f"--scale-csv: no such file: {p}")
    return pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)


def _two_loads(r, seed: int, csv: str) -> pd.DataFrame:
    """`rank_loads` of the 2-way METIS partition of row r's instance (regenerated)."""
    from cefl_opt.solvers.dec_comm import graph_adjacency
    from cefl_opt.solvers.mpi_backend import node_weights, node_work, partition_nodes
    inst = _instance(r, seed)
    work = node_work(inst)
    if int(work.sum()) != int(r.vars_block):
        raise InputError(f"{csv}: field 'vars_block': {r.vars_block} at size {r['size']} is "
                         f"not the regenerated instance's {work.sum()} (preset paper, T = 2)")
    adj = graph_adjacency(inst.graph(), inst.node_names())
    return rank_loads(adj, partition_nodes(adj, 2, node_weights(inst)), work)[0]


def _two_rank_rows(two_rows: pd.DataFrame, seed: int, csv: str) -> pd.DataFrame:
    """One row per rank of each 2-rank run: its work and cut, exchanges per inner iteration,
    bytes and seconds per exchange, peak RSS."""
    parts, rows = {}, []
    for _, r in two_rows.iterrows():
        key = (r.N, r.B, r.S, str(r.reach))
        if key not in parts:
            parts[key] = _two_loads(r, seed, csv)
        loads = parts[key]
        for k in range(2):
            n = r[f"rank{k}_exchanges"]
            rows.append({"size": r["size"], "measure": r.measure, "rank": k, "W": r.W,
                         "w_rank": loads.work[k], "cut_edges": loads.cut_edges[k],
                         "s_per_inner": r.s_per_inner,
                         "exchanges_per_inner": n / r.inner_iterations,
                         "bytes_per_exchange": r[f"rank{k}_exchange_bytes"] / n,
                         "s_per_exchange": r[f"rank{k}_exchange_s"] / n,
                         "rss_MB": r[f"rank{k}_peak_rss_MB"]})
    return pd.DataFrame(rows)


def load_measurements(csvs: list[Path], seed: int
                      ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(1-rank rows, per-rank rows of the 2-rank runs, full runs) from bench_scale's CSVs; the
    2-rank rows get their rank's work and cut from the METIS partition of the same instance
    (regenerated with `seed`, bench_scale's `--seed`)."""
    df = read_scale_csvs(csvs)
    csv = ", ".join(str(p) for p in csvs)
    need = {"measure", "ranks", "rc", "N", "B", "S", "reach", "vars_block", "s_per_inner",
            "inner_iterations", "peak_rss_MB"}
    missing = sorted(need - set(df.columns))
    if missing:
        raise InputError(f"{csv}: missing column(s) {', '.join(missing)}")
    ok = df[(df.rc == 0) & df.measure.isin(["dec", "decentralized_per_iter"])
            & df.s_per_inner.notna()].copy()
    ok["W"] = ok.vars_block.astype(float)
    one = ok[ok.ranks == 1].copy()
    one["w_rank"], one["rss_MB"] = one.W, one.peak_rss_MB
    if one.W.nunique() < 2:
        raise InputError(f"{csv}: field 'ranks': 1-rank rows at {one.W.nunique()} size(s), "
                         "need at least 2 sizes")
    two_rows = ok[ok.ranks == 2]
    if two_rows.empty or "rank0_exchanges" not in df.columns:
        raise InputError(f"{csv}: field 'ranks': no successful 2-rank rows (rank{{r}}_* "
                         "columns); run bench_scale --ranks 1,2")
    two = _two_rank_rows(two_rows, seed, csv)
    runs = ok[(ok.measure == "dec") & ok.inner_iterations.notna()]
    if runs.empty:
        raise InputError(f"{csv}: field 'measure': no successful 'dec' (full run) rows")
    return one, two, runs


def residuals(fit: Fit, one, two, runs) -> pd.DataFrame:
    """Model against every measured point (relative residual = model / measured - 1)."""
    out = []
    for _, r in one.iterrows():
        out.append(("s_per_inner", r["size"], 1, r.measure, r.s_per_inner, fit.c * r.W))
        out.append(("rss_MB", r["size"], 1, r.measure, r.rss_MB, rss_mb(fit, r.W, r.W)))
    for (size, meas), g in two.groupby(["size", "measure"], sort=False):
        w_max, b_max = g.w_rank.max(), fit.p * g.cut_edges.max()
        out.append(("s_per_inner", size, 2, meas, g.s_per_inner.iloc[0],
                    t_inner(fit, w_max, g.exchanges_per_inner.max(), b_max)))
        for _, r in g.iterrows():
            out.append(("rss_MB", size, 2, f"{meas} rank{r['rank']}", r.rss_MB,
                        rss_mb(fit, r.w_rank, r.W)))
    for _, r in runs.iterrows():
        out.append(("inner_iterations", r["size"], r.ranks, r.measure, r.inner_iterations,
                    fit.inner_a * r.W ** fit.inner_k))
    df = pd.DataFrame(out, columns=["quantity", "size", "ranks", "run", "measured", "model"])
    df["rel_residual"] = df.model / df.measured - 1
    df["held_out"] = False
    return df


def held_out(one, two, runs) -> pd.DataFrame:
    """Refit without the largest size and predict it."""
    big = one.W.max()
    f = fit_model(one[one.W < big], two[two.W < big] if (two.W < big).any() else two,
                  runs[runs.W < big] if (runs.W < big).sum() >= 2 else runs)
    df = residuals(f, one[one.W == big], two[two.W == big], runs[runs.W == big])
    df["held_out"] = True
    return df


# ---------------------------------------------------------------------- prediction
def predict(fit: Fit, parts: list[dict], alpha_mh: float, beta_mh: float) -> pd.DataFrame:
    """Per rank count and interconnect: time per inner iteration, per run, memory per rank."""
    rows = []
    for ps in parts:
        x = fit.x2 * max(ps["diameter"], 1)
        b_max = fit.p * ps["E_max"]
        inner = fit.inner_a * ps["W_total"] ** fit.inner_k
        for net, a, b in ((SAME_HOST, fit.alpha, fit.beta), (MULTI_HOST, alpha_mh, beta_mh)):
            t = float(t_inner(fit, ps["W_max"], x, b_max, a, b))
            t_nbr = float(t_inner(fit, ps["W_max"], x, b_max, a * ps["nbr_ranks_max"], b))
            rows.append({**ps, "interconnect": net, "alpha_s": a, "beta_s_per_B": b,
                         "exchanges_per_inner": x, "B_max_bytes": b_max,
                         "compute_s_per_inner": fit.c * ps["W_max"],
                         "s_per_inner": t, "s_per_inner_alpha_per_neighbour": t_nbr,
                         "inner_iterations": inner, "s_per_run": t * inner,
                         "s_per_run_inner_as_largest": t * fit.inner_largest,
                         "rss_MB_per_rank": float(rss_mb(fit, ps["W_max"], ps["W_total"]))})
    return pd.DataFrame(rows)


def markdown(fit: Fit, pred: pd.DataFrame, res: pd.DataFrame, net: str) -> str:
    """The fitted parameters, the residuals and the prediction as markdown tables."""
    f = asdict(fit)
    lines = [f"Fitted ({net}):", "", "| parameter | value |", "|---|---|"]
    units = {"c": "s per unit work per inner it.", "x2": "exchanges per inner it. (2 ranks)",
             "p": "bytes per exchange per cut edge", "alpha": "s per exchange (same host)",
             "beta": "s per byte (same host)", "inner_a": "inner its = a W^k: a",
             "inner_k": "k", "rss_base": "MB", "rss_own": "MB per unit of the rank's work",
             "rss_all": "MB per unit of the total work",
             "inner_largest": "inner its measured at the largest size"}
    lines += [f"| {k} ({units[k]}) | {v:.4g} |" for k, v in f.items()]
    lines += ["", "| quantity | size | ranks | run | measured | model | residual | held out |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.quantity} | {r['size']} | {r.ranks} | {r.run} | {r.measured:.4g} | "
              f"{r.model:.4g} | {100 * r.rel_residual:+.0f} % | {'yes' if r.held_out else ''} |"
              for _, r in res.iterrows()]
    lines += ["", "| ranks | interconnect | W_max | cut edges (max) | rank-graph diameter | "
              "ms per inner it. (compute; alpha per neighbour rank) | inner its (fit) | "
              "time per run (fit; with the largest measured size's inner its) | GB per rank |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.ranks} | {r.interconnect} | {r.W_max:,} | {r.E_max:,} | {r.diameter} | "
              f"{1e3 * r.s_per_inner:.1f} ({1e3 * r.compute_s_per_inner:.1f}; "
              f"{1e3 * r.s_per_inner_alpha_per_neighbour:.1f}) | "
              f"{r.inner_iterations:,.0f} | {r.s_per_run / 3600:.2f} h; "
              f"{r.s_per_run_inner_as_largest / 3600:.2f} h | "
              f"{r.rss_MB_per_rank / 1024:.1f} |" for _, r in pred.iterrows()]
    return "\n".join(lines) + "\n"


def figure(pred: pd.DataFrame, one, two, runs, fit: Fit, path: Path) -> Path:
    """Predicted time per run and memory per rank against R; the measured points (each rank
    count's largest measured size, its measured inner iterations) and the model's values
    there marked."""
    plt = common.plt()
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    size = pred["size"].iloc[0]
    for net, g in pred.groupby("interconnect"):
        line, = ax[0].loglog(g.ranks, g.s_per_run / 3600, "o-",
                             label=f"{size}, predicted, {net}")
        ax[0].loglog(g.ranks, g.s_per_run_inner_as_largest / 3600, "o--", color=line.get_color(),
                     label=f"{size}, {net}, largest measured size's inner its")
    g = pred.groupby("ranks").rss_MB_per_rank.first() / 1024
    ax[1].loglog(g.index, g.values, "o-", label=f"{size}, predicted")
    for r, rows in ((1, one), (2, two)):       # each rank count's largest measured size
        if rows.empty:
            continue
        W = rows.W.max()
        big = rows[rows.W == W]
        at = runs[runs.W == W].inner_iterations
        inner = float(at.median()) if len(at) else fit.inner_a * W ** fit.inner_k
        w_max = big.w_rank.max()
        t_f = fit.c * W if r == 1 else float(t_inner(
            fit, w_max, big.exchanges_per_inner.max(), fit.p * big.cut_edges.max()))
        name = big["size"].iloc[0]
        ax[0].loglog([r], [big.s_per_inner.median() * inner / 3600], "kx", ms=9,
                     label=f"measured ({name} at R = {r})")
        ax[0].loglog([r], [t_f * inner / 3600], "k+", ms=11, label=f"model ({name} at R = {r})")
        ax[1].loglog([r], [big.rss_MB.max() / 1024], "kx", ms=9,
                     label=f"measured ({name} at R = {r})")
        ax[1].loglog([r], [float(rss_mb(fit, w_max, W)) / 1024], "k+", ms=11,
                     label=f"model ({name} at R = {r})")
    ax[0].set(xlabel="ranks R", ylabel="hours (inner iterations only)", title="time per run")
    ax[1].set(xlabel="ranks R", ylabel="GB", title="peak memory per rank")
    ticks = sorted({1, 2, *pred.ranks.tolist()})
    for a in ax:
        a.set_xticks(ticks, [str(t) for t in ticks])
        a.minorticks_off()
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    return common.save_fig(fig, path)


# ---------------------------------------------------------------------- driver
def run(args) -> int:
    csvs = [Path(p) for p in args.scale_csv]
    one, two, runs = load_measurements(csvs, args.seed)
    fit = fit_model(one, two, runs)
    res = pd.concat([residuals(fit, one, two, runs), held_out(one, two, runs)])
    from tqdm import tqdm
    inst = _predicted_instance(args)
    parts = [partition_summary(inst, R) for R in tqdm(args.ranks, desc="METIS partitions")]
    beta_mh = 8.0 / (args.gbps * 1e9)
    pred = predict(fit, parts, args.alpha_us * 1e-6, beta_mh)
    pred.insert(0, "size", f"{args.ues}/{args.bss}/{args.dcs}")
    out = Path(args.out)
    common.write_csv(pred, out / "mpi_model.csv")
    common.write_csv(res, out / "mpi_model_fit.csv")
    net = (f"multi-host assumed alpha = {args.alpha_us:g} us, {args.gbps:g} Gbit/s; "
           f"load average at the measurements {_load_range(csvs)}")
    from cefl_opt.io import write_atomic
    write_atomic(out / "mpi_model.md", markdown(fit, pred, res, net))
    figure(pred, one, two, runs, fit, out / "mpi_model.png")
    print(markdown(fit, pred, res, net))
    print(f"wrote {out / 'mpi_model.csv'}, mpi_model_fit.csv, mpi_model.md, mpi_model.png")
    return 0


def _predicted_instance(args):
    """The instance to predict: `--net` or generated (preset paper, T = 2)."""
    if args.net:
        from cefl_opt.instance import Instance
        if not Path(args.net).is_file():
            raise InputError(f"--net: no such file: {args.net}")
        inst = Instance.load(args.net)
        args.ues, args.bss, args.dcs = inst.N, inst.B, inst.S
        return inst
    from cefl_opt.generator import make_instance
    return make_instance("paper", ues=args.ues, bss=args.bss, dcs=args.dcs, rounds=2,
                         reach=args.reach, seed=args.seed)


def _load_range(csvs: list[Path]) -> str:
    df = read_scale_csvs(csvs)
    return f"{df.load1.min():.1f}-{df.load1.max():.1f}" if "load1" in df else "not recorded"


def _ranks(text: str) -> list[int]:
    try:
        r = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"--ranks: {text!r} is not a list of integers") from None
    if min(r) < 2:
        raise InputError(f"--ranks: {text!r}: every rank count must be >= 2")
    return r


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the measured instances (bench_scale's --seed) and the "
                         "predicted one")
    ap.add_argument("--net", default=None,
                    help="instance file of the predicted size (default: generated from "
                         "--ues/--bss/--dcs/--reach/--seed)")
    ap.add_argument("--scale-csv", nargs="+", default=[str(common.OUT / "scale.csv")],
                    help="bench_scale's CSV(s) (with --ranks 1,2), read together")
    ap.add_argument("--out", default=str(common.OUT), help="where the outputs go")
    ap.add_argument("--ues", type=int, default=10000)
    ap.add_argument("--bss", type=int, default=1000)
    ap.add_argument("--dcs", type=int, default=100)
    ap.add_argument("--reach", type=int, default=5)
    ap.add_argument("--ranks", default="8,16,32,64", help="rank counts to predict")
    ap.add_argument("--alpha-us", type=float, default=50.0,
                    help="assumed multi-host latency per exchange (us)")
    ap.add_argument("--gbps", type=float, default=10.0,
                    help="assumed multi-host bandwidth (Gbit/s)")
    args = ap.parse_args(argv)
    try:
        args.ranks = _ranks(args.ranks)
        if args.net and not Path(args.net).is_file():
            raise InputError(f"--net: no such file: {args.net}")
        for k in ("alpha_us", "gbps"):
            if not getattr(args, k) > 0:
                raise InputError(f"--{k.replace('_', '-')}: must be > 0, got {getattr(args, k)}")
        return run(args)
    except InputError as e:
        print(f"mpi_model: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
