"""Where the default `decentralized` spends its time, from the paper size up (docs/results/scale.md).

    python -m benchmarks.bench_dec_scale [--sizes 20/10/5,200/40/10] [--seed 11] [--reach 5]
                                         [--rounds 2] [--configs default,search-free]
                                         [--timeout 1800] [--set KEY=VALUE ...]

Per size (T = `--rounds`; every link at the paper size, `--reach` beyond it) and per
configuration (`default`; `search-free`: `agg_passes=0 candidates=1 refine_rounds=0`), one
`decentralized` run in a subprocess of its own, so that its peak RSS (`getrusage` ru_maxrss)
is its own. Each row: wall time, the structure's build, the relaxed phase, the first finishing
phase, the search after it (its estimates, its finishing phases, the priced, exact and group
moves), its finishing phases and network passes against its budget (`search_budget` x the
relaxed phase's passes) and its stop reason, outer and inner iterations, the objective under
`cefl_opt.system.evaluate` and peak RSS. `--set` passes constants to every run. Writes
results/bench/dec_scale.csv and prints a Markdown table (the one on the scale page).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402

CONFIGS = {"default": {},
           "search-free": {"agg_passes": 0, "candidates": 1, "refine_rounds": 0}}
SEARCH_TIMES = ("estimate_s", "finishing_s", "priced_moves_s", "exact_moves_s", "group_moves_s")
TABLE = ("size", "config", "wall_s", "relaxed_s", "finishing_s", "search_s",
         "search.estimate_s", "search.finishing_s", "search.priced_moves_s",
         "search.exact_moves_s", "search.group_moves_s", "search_finishing_phases",
         "search_passes", "search_budget_passes", "search_stop", "outer", "inner", "objective",
         "peak_rss_MB")


def _worker(job: dict) -> dict:
    """One run (in the subprocess): the instance, then `decentralized` with the job's
    constants; the phases' seconds and counts from its info."""
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.decentralized import solve_decentralized
    n, b, s = job["size"]
    inst = make_instance("paper", ues=n, bss=b, dcs=s, rounds=job["rounds"],
                         reach=job["reach"], seed=job["seed"])
    t0 = time.perf_counter()
    sol, info = solve_decentralized(inst, constants=job["constants"] or None)
    row = {"wall_s": time.perf_counter() - t0, "build_s": info.get("build_s"),
           "relaxed_s": info.get("relaxed_s"), "finishing_s": info.get("finishing_s"),
           "search_s": info.get("search_s"), "outer": info.get("outer_iterations"),
           "inner": info.get("inner_iterations"),
           "outer_relaxed": info.get("outer_iterations_relaxed"),
           "objective": sol.objective, "feasible": info.get("feasible"),
           "stop_reason": info.get("stop_reason")}
    for key in ("search_stop", "search_passes", "search_budget_passes",
                "search_finishing_phases", "aggregator_trials", "aggregator_screened",
                "refine_rounds", "exact_trials", "exact_screened", "group_trials",
                "aggregator_batches", "aggregator_batch_moves", "refine_subsets",
                "refine_subset_moves"):
        row[key] = info.get(key)
    times = info.get("search_times") or {}
    row.update({f"search.{k}": times.get(k, 0.0) for k in SEARCH_TIMES})
    import resource
    row["peak_rss_MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kB
    return row


def _run(job: dict, timeout: float) -> dict:
    """`_worker(job)` in a subprocess of its own; its row, or its error."""
    code = ("import json, sys; from benchmarks.bench_dec_scale import _worker; "
            "print(json.dumps(_worker(json.loads(sys.argv[1]))))")
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", code, json.dumps(job)], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:g} s"}
    row = {"total_s": time.perf_counter() - t0}
    if p.returncode != 0:
        return {**row, "error": p.stderr.strip().splitlines()[-1] if p.stderr.strip()
                else p.returncode}
    return {**row, **json.loads(p.stdout.strip().splitlines()[-1])}


def _size(spec: str) -> tuple[int, int, int]:
    try:
        n, b, s = (int(x) for x in spec.split("/"))
    except ValueError:
        raise SystemExit(f"bench_dec_scale: bad size {spec!r}: expected UES/BSS/DCS") from None
    return n, b, s


def _constants(pairs: list[str]) -> dict:
    out = {}
    for p in pairs:
        key, _, value = p.partition("=")
        out[key] = json.loads(value) if value not in ("", None) else value
    return out


def main(argv: list[str] | None = None) -> pd.DataFrame:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20/10/5,200/40/10")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--reach", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--configs", default="default,search-free")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default="results/bench")
    args = ap.parse_args(argv)
    extra, rows = _constants(args.set), []
    for spec in args.sizes.split(","):
        size = _size(spec)
        for config in args.configs.split(","):
            if config not in CONFIGS:
                raise SystemExit(f"bench_dec_scale: unknown config {config!r}: "
                                 f"{sorted(CONFIGS)}")
            job = {"size": size, "rounds": args.rounds, "seed": args.seed,
                   "reach": None if size[0] <= 20 else args.reach,
                   "constants": {**CONFIGS[config], **extra}}
            row = {"size": spec, "config": config, **_run(job, args.timeout),
                   "load_1min": os.getloadavg()[0]}
            rows.append(row)
            print(json.dumps(row, default=str), flush=True)
    df = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from cefl_opt.io import write_csv_atomic
    write_csv_atomic(df, out / "dec_scale.csv")
    print(df.reindex(columns=list(TABLE)).to_markdown(index=False, floatfmt=".4g"))
    return df


if __name__ == "__main__":
    main()
