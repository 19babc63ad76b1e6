"""How far each method is from the best known answer and from a proven bound, per seed: the
comparison of decentralised and centralised solutions as users see it.

    python -m benchmarks.bench_dec_quality [--quick] [--presets small,paper]
        [--seeds-paper 9401,...,9412] [--seeds-small 9501,...,9508]
        [--rounds-paper 3] [--rounds-small 2]
        [--methods decentralized,decentralized-polish,ipopt-enum]
        [--bound-method decomposed-bound] [--bound-time 600] [--bound-presets paper]
        [--bound-set KEY=VALUE ...] [--best-known RECORD.csv] [--jobs 1] [--reuse]

For every (preset, seed) the instance is written with `cefl-opt network generate`'s generator,
and each method runs with its defaults in a process of its own (`--worker`), so that its wall
time and peak RSS (`os.wait4`) are its own. Then `--bound-method` (default `decomposed-bound`,
`--bound-time` seconds) gives the proven lower bound, with the seed's best known objective as
its `incumbent` (a bound is valid for any incumbent; the least gives the tightest);
`--bound-time 0` skips it; `--bound-presets` says whose seeds get one (paper). Per seed:

* each method's objective of P, whether `cefl_opt.system.evaluate` finds it feasible (the
  check `cefl-opt evaluate` runs), its status, aggregators, wall time and peak RSS;
* best known: the minimum over every feasible answer of the row (the bound method's incumbent
  included);
* each method's gap to best known, objective / best known - 1;
* the bound and its gap (best known - bound) / best known.

Writes, in --out-dir: dec_quality.csv (one row per seed), dec_quality.png (each method's gap
per seed, and the bound's gap), dec_quality.md (the table the README and
docs/results/decentralized.md carry) and dec_quality_runs/ (one JSON record and one solution
file per run; `--reuse` takes a record again when it was made with the same method and
options, whatever commit made it, so that an interrupted benchmark resumes; the CSV names each
run's commit). The targets, printed with their verdicts:
`decentralized` at most 1 % above best known on every paper seed, median at most 0.3 %, at most
60 s per run, small seeds within 1 %; `ipopt-enum` within 0.1 % of best known on every seed;
the bound's median gap at most 10 %.

The measurement of record ran as: `--bound-time 180` (3 min, not the issue's 10), with the
methods of each seed in several processes at once (`--methods`, then `--reuse` to assemble),
so wall times are under load; the CPU seconds are the time alone.

`--bound-set KEY=VALUE` passes an option to the bound method (as `cefl-opt solve --set`, e.g.
`m_levels=2`). `--best-known RECORD.csv` takes each seed's best known objective from a quality
record (`docs/results/records/dec_quality.csv`: the least objective of its methods' rows) and
runs the bound only, without the methods.

The default seeds are seeds no test uses. --quick: two small seeds, a 20 s bound.
--jobs J: runs in J processes (wall times are then measured under that load).
One BLAS thread per run (set before numpy loads): stable timings on the shared 2-core machine.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402

METHODS = ("decentralized", "decentralized-polish", "ipopt-enum")
INCUMBENT_METHODS = ("decomposed-bound", "scip")     # take a known objective as `incumbent`
SHORT = {"decentralized": "dec", "decentralized-polish": "polish", "ipopt-enum": "enum"}
LONG = {**{v: k for k, v in SHORT.items()}, "bound_method": "bound method's incumbent"}
TARGETS = {"dec_max": 0.01, "dec_median": 0.003, "dec_wall_s": 60.0, "enum_max": 0.001,
           "bound_median": 0.10}


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def _commit() -> str:
    """The commit that runs (with "+dirty" when the work tree differs), recorded per run."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=common.ROOT, capture_output=True,
                              text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


# ---------------------------------------------------------------------- one run, in its process
def worker(inst_path: str, method: str, options: str, out: str, sol_path: str) -> int:
    """Solve the instance with `method` and its options (JSON); write the run's record to `out`
    and the solution to `sol_path`. Runs as `--worker`, in a process of its own."""
    import warnings
    warnings.simplefilter("ignore")
    common.quiet()
    from cefl_opt import system
    from cefl_opt.instance import Instance
    from cefl_opt.io import write_json_atomic
    from cefl_opt.solvers.base import solve
    inst = Instance.load(inst_path)
    res = solve(inst, method, **json.loads(options))
    rec = {"status": res.status, "solution_status": res.solution_status.value,
           "bound": res.bound, "wall_s": res.wall_s, "objective": None, "feasible": None}
    if res.solution is not None:
        ev = system.evaluate(inst, res.solution)
        rec.update(objective=ev.objective, feasible=bool(ev.feasible),
                   aggregators=" ".join(str(int(r.aggregator)) for r in res.solution.rounds))
        res.solution.save(sol_path)
    if res.accounting is not None:
        rec.update(stop_reason=res.accounting.stop_reason,
                   central_steps=list(res.accounting.central_steps))
    write_json_atomic(out, rec)
    return 0


def _reusable(rec: dict, job: dict) -> bool:
    """A record answers a job under --reuse when the method and its options are the same (any
    commit: the table names each run's commit). A bound made with a larger incumbent stays
    valid, so it answers a job whose incumbent is lower or equal."""
    key = rec.get("key", {})
    if key.get("method") != job["method"]:
        return False
    a, b = dict(key.get("options", {})), dict(job["options"])
    u_rec, u_job = a.pop("incumbent", None), b.pop("incumbent", None)
    if a != b:
        return False
    return u_rec == u_job or (u_rec is not None and u_job is not None and u_rec >= u_job)


def run_one(job: dict) -> dict:
    """The record of one (preset, seed, method) run: reused when `job["reuse"]` and a record
    answers it (`_reusable`), else measured in a process of its own."""
    out = Path(job["out"])
    key = {"commit": job["commit"], "method": job["method"], "options": job["options"]}
    if job["reuse"] and out.exists():
        rec = json.loads(out.read_text())
        if _reusable(rec, job):
            return rec
    tmp = out.with_name(out.name + ".part")
    tmp.unlink(missing_ok=True)
    run = common.run_child([sys.executable, "-m", "benchmarks.bench_dec_quality", "--worker",
                            job["inst"], job["method"], json.dumps(job["options"]), str(tmp),
                            job["solution"]], job["timeout"], tail=800)
    if run.rc == 0 and tmp.exists():
        rec = json.loads(tmp.read_text())
    else:
        rec = {"status": "crashed" if run.rc else "no_record", "objective": None,
               "feasible": None, "bound": None, "output": run.output}
    rec.update(key=key, rc=run.rc, process_wall_s=run.wall_s, peak_rss_mb=run.peak_rss_mb,
               cpu_s=run.cpu_s)
    from cefl_opt.io import write_json_atomic
    write_json_atomic(out, rec)
    tmp.unlink(missing_ok=True)
    return rec


# ---------------------------------------------------------------------- the runs of one seed
def _instance(preset: str, seed: int, rounds: int, runs: Path) -> Path:
    """The instance of (preset, seed, rounds), written once in the runs folder."""
    from cefl_opt.generator import make_instance
    path = runs / f"{preset}_{seed}_T{rounds}.instance.json"
    if not path.exists():
        make_instance(preset, seed=seed, rounds=rounds).save(path)
    return path


#: the name of a run's record in the runs folder (`_job`'s stem + ".record.json")
RUN_RECORD = re.compile(r"(?P<preset>[a-z]+)_(?P<seed>\d+)_T(?P<T>\d+)\.(?P<method>[a-z-]+)"
                        r"\.record\.json")


def _job(args, runs: Path, commit: str, preset: str, seed: int, method: str,
         options: dict) -> dict:
    rounds = args.rounds_small if preset == "small" else args.rounds_paper
    stem = runs / f"{preset}_{seed}_T{rounds}.{method}"
    return {"preset": preset, "seed": seed, "T": rounds, "method": method, "options": options,
            "inst": str(_instance(preset, seed, rounds, runs)), "commit": commit,
            "reuse": args.reuse, "out": f"{stem}.record.json",
            "solution": f"{stem}.solution.json", "timeout": args.timeout + 2 * args.bound_time}


def seeds_of(args) -> list[tuple[str, int]]:
    return [(p, s) for p in args.presets
            for s in (args.seeds_small if p == "small" else args.seeds_paper)]


def method_jobs(args, runs: Path, commit: str) -> list[dict]:
    """Stage 1: every (preset, seed, method) run."""
    return [_job(args, runs, commit, p, s, m, {}) for p, s in seeds_of(args)
            for m in args.methods]


def bound_jobs(args, runs: Path, commit: str, best: dict) -> list[dict]:
    """Stage 2: the bound method per seed, given the seed's best known objective of stage 1 as
    its incumbent (valid for any value; the least gives the tightest bound)."""
    if args.bound_time <= 0:
        return []
    out = []
    for p, s in seeds_of(args):
        if p not in args.bound_presets:
            continue
        opts = {"time_limit": args.bound_time, **args.bound_options}
        if np.isfinite(best.get((p, s), np.nan)) and args.bound_method in INCUMBENT_METHODS:
            opts["incumbent"] = float(best[(p, s)])
        out.append(_job(args, runs, commit, p, s, args.bound_method, opts))
    return out


def best_known(jobs: list[dict], recs: list[dict]) -> dict:
    """(preset, seed) -> the least feasible objective of the records."""
    best: dict = {}
    for j, r in zip(jobs, recs):
        if r.get("objective") is not None and r.get("feasible"):
            k = (j["preset"], j["seed"])
            best[k] = min(best.get(k, np.inf), float(r["objective"]))
    return best


def run_all(jobs: list[dict], n_jobs: int) -> list[dict]:
    """The records of every job, in order, with a progress bar."""
    from tqdm import tqdm
    bar = tqdm(total=len(jobs), desc="bench_dec_quality", unit="run", file=sys.stderr)
    recs: list[dict | None] = [None] * len(jobs)
    if n_jobs > 1:
        from concurrent.futures import ThreadPoolExecutor, as_completed
        with ThreadPoolExecutor(n_jobs) as ex:
            futs = {ex.submit(run_one, j): i for i, j in enumerate(jobs)}
            for f in as_completed(futs):
                recs[futs[f]] = f.result()
                bar.update(1)
    else:
        for i, j in enumerate(jobs):
            bar.set_postfix_str(f"{j['preset']} {j['seed']} {j['method']}")
            recs[i] = run_one(j)
            bar.update(1)
    bar.close()
    return recs


def record_best(path: str) -> dict:
    """(preset, seed) -> the least objective of the methods' rows (not the bound's) of a
    quality record (columns preset, seed, method, objective)."""
    rec = pd.read_csv(path)
    rec = rec[rec["method"].isin(METHODS)]
    if rec.empty:
        raise ValueError(f"no row of the methods {', '.join(METHODS)}")
    return {(p, int(s)): float(v) for (p, s), v in
            rec.groupby(["preset", "seed"])["objective"].min().items()}


def seed_rows(jobs: list[dict], recs: list[dict], bound_method: str,
              best: dict | None = None) -> pd.DataFrame:
    """One row per (preset, seed): each method's columns, best known (the least feasible
    objective of the row, or `best`'s where given), the gaps and the bound."""
    rows: dict[tuple, dict] = {}
    for j, r in zip(jobs, recs):
        row = rows.setdefault((j["preset"], j["seed"]),
                              {"preset": j["preset"], "seed": j["seed"], "T": j["T"]})
        m = j["method"]
        pre = "bound_method" if m == bound_method and j["options"].get("time_limit") else \
            SHORT.get(m, m)
        ok = r.get("objective") is not None and bool(r.get("feasible"))
        row.update({f"{pre}_objective": r.get("objective") if ok else np.nan,
                    f"{pre}_commit": r.get("key", {}).get("commit"),
                    f"{pre}_feasible": r.get("feasible"), f"{pre}_status": r.get("status"),
                    f"{pre}_aggregators": r.get("aggregators", ""),
                    f"{pre}_wall_s": r.get("wall_s", r.get("process_wall_s")),
                    f"{pre}_cpu_s": r.get("cpu_s"),
                    f"{pre}_peak_rss_mb": r.get("peak_rss_mb")})
        if pre == "bound_method":
            row["bound"] = np.nan if r.get("bound") is None else float(r["bound"])
            row["bound_incumbent"] = r.get("key", {}).get("options", {}).get("incumbent")
    df = pd.DataFrame(list(rows.values()))
    objs = df.filter(regex="_objective$")
    df["best_known"] = objs.min(axis=1) if best is None else \
        [best.get((p, s), np.nan) for p, s in zip(df["preset"], df["seed"])]
    for col in objs.columns:
        df[col.replace("_objective", "_gap")] = df[col] / df["best_known"] - 1.0
    if "bound" in df:
        df["bound_gap"] = (df["best_known"] - df["bound"]) / df["best_known"]
    return df


# ---------------------------------------------------------------------- outputs
def verdicts(df: pd.DataFrame) -> list[str]:
    """The targets (module docstring), each with its measured value and PASS / FAIL."""
    out = []

    def check(label, value, limit):
        ok = bool(np.isfinite(value) and value <= limit)
        out.append(f"{label}: {value:.4g} (target <= {limit:.4g}) {'PASS' if ok else 'FAIL'}")

    paper, small = df[df.preset == "paper"], df[df.preset == "small"]
    if "dec_gap" in df:
        if len(paper):
            check("decentralized, paper: max gap to best known", paper.dec_gap.max(),
                  TARGETS["dec_max"])
            check("decentralized, paper: median gap", paper.dec_gap.median(),
                  TARGETS["dec_median"])
            check("decentralized, paper: max wall s", paper.dec_wall_s.max(),
                  TARGETS["dec_wall_s"])
            if "dec_cpu_s" in paper:
                check("decentralized, paper: max CPU s (the time alone, under load)",
                      paper.dec_cpu_s.max(), TARGETS["dec_wall_s"])
        if len(small):
            check("decentralized, small: max gap", small.dec_gap.max(), TARGETS["dec_max"])
    if "enum_gap" in df:
        check("ipopt-enum: max gap to best known", df.enum_gap.max(), TARGETS["enum_max"])
    if "bound_gap" in df and len(paper):
        check("bound, paper: median gap", paper.bound_gap.median(), TARGETS["bound_median"])
    feas = df.filter(regex="_feasible$").drop(columns="bound_method_feasible", errors="ignore")
    out.append(f"every method's answer feasible: "
               f"{bool(feas.fillna(False).astype(bool).all(axis=None))}")
    return out


def figure(df: pd.DataFrame, path: Path) -> Path:
    """Each method's gap to best known per seed (%, symlog) and the bound's gap."""
    plt = common.plt()
    gaps = [c for c in df.columns if c.endswith("_gap") and c != "bound_gap"]
    fig, axes = plt.subplots(1, 2 if "bound_gap" in df else 1, figsize=(11, 3.8),
                             squeeze=False, gridspec_kw={"width_ratios": [3, 1.3][:1 + (
                                 "bound_gap" in df)]})
    ax = axes[0, 0]
    x = np.arange(len(df))
    w = 0.8 / max(1, len(gaps))
    for k, c in enumerate(gaps):
        ax.bar(x + (k - (len(gaps) - 1) / 2) * w, 100 * df[c], w, label=LONG.get(c[:-4], c[:-4]))
    ax.axhline(100 * TARGETS["dec_max"], color="k", ls="--", lw=1, label="1 % (decentralized)")
    ax.axhline(100 * TARGETS["enum_max"], color="k", ls=":", lw=1, label="0.1 % (ipopt-enum)")
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xticks(x, [f"{p}\n{s}" for p, s in zip(df.preset, df.seed)], fontsize=7)
    ax.set_ylabel("objective / best known - 1 (%)")
    ax.legend(fontsize=7, ncol=2)
    if "bound_gap" in df:
        ax2 = axes[0, 1]
        shown = np.minimum(100 * df.bound_gap, 100.0)     # a negative bound: over 100 %
        ax2.bar(x, shown, color=["C4" if g <= 1 else "C7" for g in df.bound_gap])
        for xi, g in zip(x, df.bound_gap):
            if g > 1:
                ax2.text(xi, 100, f"{100 * g:.0f}", ha="center", va="bottom", fontsize=6)
        ax2.axhline(100 * TARGETS["bound_median"], color="k", ls="--", lw=1, label="10 % goal")
        ax2.set_xticks(x, [str(s) for s in df.seed], fontsize=7, rotation=90)
        ax2.set_ylabel("(best known - bound) / best known (%)")
        ax2.legend(fontsize=7)
    return common.save_fig(fig, path, title="Gap to the best known answer and to the bound")


def _num(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.0f}"


def markdown(df: pd.DataFrame) -> str:
    """The table of the README and the results page: per seed, each method's objective and gap,
    best known, the bound and its gap, the decentralised and ipopt-enum wall times."""
    def pct(v):
        return "" if pd.isna(v) else f"{100 * v:+.2f} %"
    meths = [c[:-10] for c in df.columns if c.endswith("_objective") and c != "bound_method_objective"]
    head = (["preset, seed"] + [f"{m} (gap)" for m in meths] + ["best known", "bound (gap)"]
            + [f"{m} s wall / CPU" for m in meths if f"{m}_wall_s" in df])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in df.iterrows():
        cells = [f"{r.preset} {r.seed}"]
        cells += [f"{r[f'{m}_objective']:.4f} ({pct(r[f'{m}_gap'])})" for m in meths]
        cells.append(f"{r.best_known:.4f}")
        cells.append(f"{r.bound:.4f} ({100 * r.bound_gap:.1f} %)" if "bound" in r and
                     pd.notna(r.get("bound")) else "-")
        cells += [f"{_num(r[f'{m}_wall_s'])} / {_num(r.get(f'{m}_cpu_s'))}"
                  for m in meths if f"{m}_wall_s" in df]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(*sys.argv[2:7])
    suite = common.Suite("bench_dec_quality", __doc__)
    ap = suite.ap
    ap.add_argument("--presets", default="small,paper")
    ap.add_argument("--seeds-small", default="9501,9502,9503,9504,9505,9506,9507,9508")
    ap.add_argument("--seeds-paper", default=",".join(str(s) for s in range(9401, 9413)))
    ap.add_argument("--rounds-small", type=int, default=2)
    ap.add_argument("--rounds-paper", type=int, default=3)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--bound-method", default="decomposed-bound")
    ap.add_argument("--bound-time", type=float, default=600.0,
                    help="seconds for the bound method (0: no bound)")
    ap.add_argument("--bound-presets", default="paper",
                    help="presets whose seeds get a bound (the tests check small's)")
    ap.add_argument("--timeout", type=float, default=3600.0,
                    help="seconds after which a run is killed and recorded as crashed")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    ap.add_argument("--bound-set", action="append", default=[], metavar="KEY=VALUE",
                    help="an option of the bound method (repeatable)")
    ap.add_argument("--best-known", metavar="RECORD.csv",
                    help="each seed's best known from this quality record; the methods do not run")
    ap.add_argument("--reuse", action="store_true",
                    help="take a run's record again when it has the same method and options")
    args = suite.start(argv, seed=False)
    args.presets = [p for p in args.presets.split(",") if p]
    for p in args.presets:
        if p not in ("small", "paper"):
            ap.error(f"--presets: unknown preset {p!r} (small, paper)")
    args.methods = [m for m in args.methods.split(",") if m]
    args.bound_presets = [p for p in args.bound_presets.split(",") if p]
    known = common.method_names()
    for m in args.methods + [args.bound_method]:
        if m not in known:
            ap.error(f"--methods/--bound-method: unknown method {m!r} ({', '.join(known)})")
    if args.bound_time < 0 or args.jobs < 1:
        ap.error(f"--bound-time must be >= 0 and --jobs >= 1, got {args.bound_time}, {args.jobs}")
    from cefl_opt.solvers.base import options_classes
    from cefl_opt.solvers.options import OptionError, build_options, parse_set_items
    cls = options_classes()[args.bound_method]
    try:
        args.bound_options = parse_set_items(cls, args.bound_set)
        build_options(cls, args.bound_options)           # each value's range, as `solve`'s
    except OptionError as e:
        ap.error(f"--bound-set: {e}")
    given = None                                     # best known from --best-known
    if args.best_known is not None:
        try:
            given = record_best(args.best_known)
        except (OSError, KeyError, ValueError) as e:
            ap.error(f"--best-known: cannot read {args.best_known!r}: {e}")
    args.seeds_small, args.seeds_paper = _ints(args.seeds_small), _ints(args.seeds_paper)
    if args.quick:
        args.presets, args.seeds_small, args.bound_time = ["small"], args.seeds_small[:2], 20.0
    runs = suite.out / "dec_quality_runs"
    runs.mkdir(parents=True, exist_ok=True)
    commit = _commit()
    jobs = [] if given is not None else method_jobs(args, runs, commit)
    recs = run_all(jobs, args.jobs)
    bjobs = bound_jobs(args, runs, commit, best_known(jobs, recs) if given is None else given)
    df = seed_rows(jobs + bjobs, recs + run_all(bjobs, args.jobs), args.bound_method, given)
    suite.csv(df, "dec_quality.csv")
    figure(df, suite.path("dec_quality.png"))
    from cefl_opt.io import write_atomic
    write_atomic(suite.path("dec_quality.md"), markdown(df))
    print("\n" + markdown(df))
    print("\n".join(verdicts(df)))
    return suite.finish()


if __name__ == "__main__":
    raise SystemExit(main())
