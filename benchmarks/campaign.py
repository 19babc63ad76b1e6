"""The instance-space campaign: every solve method on instances drawn across the documented
ranges (docs/formats.md), not only the presets, with the invariants that make a reported
number trustworthy checked on each.

    python -m benchmarks.campaign [--instances 1000] [--profile bench] [--seed 0]
                                  [--out-dir results/campaign]
    python -m benchmarks.campaign --report A/campaign.csv [B/campaign.csv ...]

Writes `campaign.csv` (one row per instance x method), `summary.md` (per regime) and, for every
instance on which an invariant fails, its JSON under `failures/` (`make campaign`).

The instances (`instances`, a `hypothesis` strategy): a generator instance
(`cefl_opt.generator.make_instance`, 1-30 UEs, T = 1-4, reach 1..all) whose fields are then
moved by one regime (`REGIMES`): capacities at the feasibility edge, rates over 4 decades,
weights over 6 decades, sigma/Theta/Delta/zeta large and small, m_floor, z_floor and gamma
at their limits, or several of these at once. Every array draw takes a seed drawn by
hypothesis; every instance passes `Instance.validate`.

The invariants (`check_invariants`), on each instance:

* `feasible`: every solution a method returns is feasible under `system.evaluate`;
* `objective`: the objective a method reports equals `evaluate`'s (relative 1e-6);
* `bound`: every reported bound is at most every feasible objective found (relative 1e-6);
* `infeasible`: a method says "proven infeasible" only when no method finds a feasible point;
* `time`: a method with a wall-clock `time_limit` ends within it plus 20 % (and `TIME_SLACK_S`);
* `enum`: `ipopt-enum`, when it finished its search, is no worse than the methods it is
  seeded from (`fixed`, `greedy-data`, `greedy-rate`, and with `seed_decentralized` the
  decentralised methods);
* `ends`: every method returns (a run past `HANG_S` is killed and counted) without an
  exception.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from cefl_opt import system
from cefl_opt.generator import make_instance
from cefl_opt.instance import FIELDS, Instance

REL_TOL = 1e-6            # the objective, bound and ipopt-enum comparisons (relative)
TIME_FACTOR = 1.2         # a method's wall time may exceed its time_limit by 20 % ...
TIME_SLACK_S = 3.0        # ... plus this much (model build and process start on a loaded host)
HANG_S = 120.0            # a run longer than time_limit + this is killed and counted as a hang

REGIMES = ("base", "capacity", "rates", "weights", "ml", "limits", "mixed")
PERTURBED = ("capacity", "rates", "weights", "ml", "limits")   # what "mixed" combines

# ---------------------------------------------------------------------- instances
RATE_ARRAYS = ("R_nb", "R_bn", "R_sb", "R_ss", "Rmax_bs", "Rmax_s")


def _clip(name: str, arr: np.ndarray) -> np.ndarray:
    """`arr` with its nonzero entries inside FIELDS[name]'s range (zeros stay: absent links)."""
    spec = FIELDS[name]
    return np.where(arr != 0, np.clip(arr, spec.lo, spec.hi), 0.0)


def _decades(rng: np.random.Generator, shape, lo: float, hi: float) -> np.ndarray:
    """Factors 10**U[lo, hi] (log-uniform over hi - lo decades)."""
    return 10.0 ** rng.uniform(lo, hi, shape)


def _capacity(draw, inst: Instance, rng: np.random.Generator) -> dict[str, Any]:
    """Capacities at the feasibility edge: R_floor over 3 decades, Rmax_bs a small factor above
    it, and each DC's ingress Rmax_s at B * R_floor times (1 + margin), margin down to 0 (every
    R_bs at its floor) and, rarely, below 0 (infeasible: `Instance.feasibility_problems`)."""
    r_floor = 10.0 ** draw(st.floats(4.0, 7.0))
    margin = draw(st.sampled_from([0.0, 0.0, 1e-9, 1e-3, 0.05, 0.5, 3.0, -0.01, -0.01]))
    bs_over = draw(st.sampled_from([0.0, 1e-3, 0.5, 10.0, 1e3]))
    rmax_bs = r_floor * (1.0 + bs_over * rng.uniform(0.0, 1.0, inst.Rmax_bs.shape))
    rmax_s = inst.B * r_floor * (1.0 + margin * rng.uniform(0.5, 1.0, inst.S))
    return {"R_floor": r_floor, "Rmax_bs": rmax_bs, "Rmax_s": _clip("Rmax_s", rmax_s)}


def _rates(draw, inst: Instance, rng: np.random.Generator) -> dict[str, Any]:
    """Every rate array times a per-entry factor over 4 decades (10**U[-2, 2]), BS->DC
    capacities kept >= R_floor."""
    out = {k: _clip(k, getattr(inst, k) * _decades(rng, getattr(inst, k).shape, -2, 2))
           for k in RATE_ARRAYS}
    out["Rmax_bs"] = np.maximum(out["Rmax_bs"], inst.R_floor)
    return out


def _weights(draw, inst: Instance, rng: np.random.Generator) -> dict[str, Any]:
    """xi1, xi2, xi3 and the six energy sub-weights over 6 decades (10**U[-3, 3])."""
    out = {k: getattr(inst, k) * 10.0 ** draw(st.integers(-3, 3)) for k in ("xi1", "xi2", "xi3")}
    out["xi3_parts"] = _decades(rng, 6, -3, 3)
    return out


def _ml(draw, inst: Instance, rng: np.random.Generator) -> dict[str, Any]:
    """sigma, Theta, Delta and zeta1, zeta2 large and small (within FIELDS' ranges)."""
    scale = lambda: 10.0 ** draw(st.sampled_from([-4.0, -1.0, 0.0, 1.0, 3.0]))  # noqa: E731
    return {"sigma": _clip("sigma", inst.sigma * scale()),
            "Theta": _clip("Theta", inst.Theta * scale()),
            "Delta": _clip("Delta", inst.Delta * scale()
                           * _decades(rng, inst.Delta.shape, -0.5, 0.5)),
            "zeta1": draw(st.sampled_from([1.0, 1.5, 10.0, 1e3])),
            "zeta2": draw(st.sampled_from([0.0, 1e-4, 1.0, 1e3]))}


def _limits(draw, inst: Instance, rng: np.random.Generator) -> dict[str, Any]:
    """m_floor, z_floor and gamma at the limits of their ranges; f_min = f_max at times."""
    g_min = draw(st.sampled_from([1.0, 1.0, 1.0, 5.0]))   # 5: the step condition fails
    g_max = draw(st.sampled_from([g_min, g_min, 20.0, 1e3]))
    out = {"m_floor": draw(st.sampled_from([1e-12, 1e-6, 1.0])),
           "z_floor": draw(st.sampled_from([1e-12, 1.0])),
           "gamma_min": g_min, "gamma_max": g_max}
    if draw(st.booleans()):
        out["f_min"] = inst.f_max.copy()
    return out


PERTURB: dict[str, Callable] = {"capacity": _capacity, "rates": _rates, "weights": _weights,
                                "ml": _ml, "limits": _limits}


@st.composite
def instances(draw, *, max_ues: int = 30, max_bss: int = 4, max_dcs: int = 3,
              max_rounds: int = 4, regimes: tuple[str, ...] = REGIMES) -> tuple[str, Instance]:
    """(regime, instance): a generator instance of drawn size, seed and reach, with its fields
    moved by the regime (module docstring). Valid by construction (`Instance.copy`
    validates)."""
    regime = draw(st.sampled_from(regimes))
    N, B = draw(st.integers(1, max_ues)), draw(st.integers(1, max_bss))
    S, T = draw(st.integers(1, max_dcs)), draw(st.integers(1, max_rounds))
    seed, reach = draw(st.integers(0, 2 ** 20)), draw(st.integers(1, B))
    inst = make_instance("tiny", ues=N, bss=B, dcs=S, rounds=T, seed=seed, reach=reach)
    rng = np.random.default_rng([seed, 43])
    names = (PERTURBED if regime == "mixed" else (regime,) if regime in PERTURB else ())
    changes: dict[str, Any] = {}
    for name in names:
        if regime != "mixed" or draw(st.booleans()):
            current = inst.copy(**changes) if changes else inst
            changes.update(PERTURB[name](draw, current, rng))
    if "Rmax_bs" in changes or "R_floor" in changes:   # keep Rmax_bs >= R_floor (validated)
        floor = changes.get("R_floor", inst.R_floor)
        changes["Rmax_bs"] = np.maximum(changes.get("Rmax_bs", inst.Rmax_bs), floor)
    return regime, inst.copy(name=f"campaign-{regime}-N{N}-B{B}-S{S}-T{T}-seed{seed}",
                             **changes)


# ---------------------------------------------------------------------- methods
# Methods whose `time_limit` bounds their whole wall time (the `time` invariant).
WALL_LIMITED = ("ipopt-enum", "scip", "decomposed-bound")
# ipopt-enum's seeds that run as methods of their own (the `enum` invariant)
ENUM_SEEDS = ("fixed", "greedy-data", "greedy-rate")
ENUM_DEC_SEEDS = ("decentralized", "decentralized-polish")


def profile(name: str, time_limit: float = 2.0) -> list[tuple[str, dict[str, Any]]]:
    """The methods run on each instance, with their options: 'bench' (greedy-rate, SCIP and
    the bound: the benchmark's thousand instances), 'cheap' (the Ipopt-based methods, ipopt-enum
    without its decentralised seeds, SCIP and the bound with `time_limit`) or 'full' (every
    registered method)."""
    ipopt = {"time_limit": time_limit}
    enum = {"time_limit": 2 * time_limit, "workers": 1}
    scip = [("scip", {"time_limit": time_limit}),
            ("decomposed-bound", {"time_limit": time_limit, "incumbent": "best"})]
    if name == "bench":
        return [("greedy-rate", dict(ipopt)), *scip]
    if name == "cheap":
        return [("fixed", dict(ipopt)), ("greedy-data", dict(ipopt)),
                ("greedy-rate", dict(ipopt)), ("ipopt-enum", {**enum, "seed_decentralized": False}),
                *scip]
    if name == "full":
        return [("decentralized", {}), ("decentralized-polish", {}), ("centralized-pd", {}),
                ("fixed", dict(ipopt)), ("greedy-data", dict(ipopt)),
                ("greedy-rate", dict(ipopt)), ("no-offload", dict(ipopt)),
                ("ipopt-enum", {**enum, "time_limit": 10 * time_limit}), *scip,
                ("decomposed-bound", {"time_limit": time_limit})]
    raise ValueError(f"unknown profile {name!r}: 'bench', 'cheap' or 'full'")


@dataclass
class Run:
    """One method on one instance: what it reported and what `evaluate` says of its point."""
    method: str
    options: dict[str, Any]
    status: str = ""
    solution_status: str = ""
    objective: float | None = None          # as the method reported it
    evaluated: float | None = None          # evaluate(inst, solution).objective
    feasible: bool | None = None            # None: no solution
    violation: str = ""                     # evaluate's worst violation, if any
    bound: float | None = None
    wall_s: float = 0.0
    error: str = ""                         # exception text, or "hang"
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def time_limit(self) -> float | None:
        return self.options.get("time_limit") if self.method in WALL_LIMITED else None

    @property
    def found(self) -> float | None:
        """The feasible objective this run found (None if it found none)."""
        return self.evaluated if self.feasible else None


def _solve_row(inst: Instance, method: str, options: dict[str, Any]) -> Run:
    """`solvers.base.solve` in this process, and the `evaluate` of its point."""
    from cefl_opt.solvers.base import solve
    run = Run(method, options)
    t0 = time.perf_counter()
    try:
        res = solve(inst, method, **options)
    except Exception as e:                                  # recorded: the `ends` invariant
        run.wall_s = time.perf_counter() - t0
        run.error = f"{type(e).__name__}: {e}"[:300]
        run.info["traceback"] = traceback.format_exc()[-2000:]
        return run
    run.wall_s = time.perf_counter() - t0
    run.status, run.solution_status = res.status, res.solution_status.value
    run.objective, run.bound = res.objective, res.bound
    if res.solution is not None and res.solution_status.value in ("optimal", "feasible"):
        with np.errstate(all="ignore"):
            ev = system.evaluate(inst, res.solution, bound=options.get("bound", "corollary"),
                                 weights=options.get("weights"))
        run.evaluated, run.feasible = float(ev.objective), bool(ev.feasible and
                                                                math.isfinite(ev.objective))
        if ev.violations:
            run.violation = f"{ev.violations[0][0]} ({ev.violations[0][1]:.3g})"
    return run


def known_run(inst: Instance, path) -> Run:
    """A stored solution of `inst` (a regression's known point) as a run named 'known-point':
    its objective is the one `evaluate` gives, and it counts as found when feasible."""
    from cefl_opt.solution import Solution
    sol = Solution.load(path, inst)
    ev = system.evaluate(inst, sol)
    run = Run("known-point", {}, status=sol.status, objective=float(ev.objective),
              evaluated=float(ev.objective), feasible=bool(ev.feasible))
    run.violation = f"{ev.violations[0][0]}" if ev.violations else ""
    return run


def _child(conn, inst: Instance, method: str, options: dict[str, Any]) -> None:
    os.setpgid(0, 0)          # its own process group: a kill takes the method's children too
    try:
        conn.send(_solve_row(inst, method, options))
    finally:
        conn.close()


def run_method(inst: Instance, method: str, options: dict[str, Any],
               hang_s: float = HANG_S) -> Run:
    """One method on `inst` in a forked child (the parent's imports are shared), killed when it
    runs past its time limit + `hang_s` (a hang is a finding, not a stuck campaign)."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, inst, method, options))
    t0 = time.perf_counter()
    proc.start()
    send.close()
    limit = (options.get("time_limit") or 0.0) + hang_s
    try:
        if recv.poll(limit):
            return recv.recv()
        run = Run(method, options, error="hang" if proc.is_alive() else
                  f"child died (exit {proc.exitcode})")
        run.wall_s = time.perf_counter() - t0
        return run
    except EOFError:
        proc.join(5)
        return Run(method, options, error=f"child died (exit {proc.exitcode})",
                   wall_s=time.perf_counter() - t0)
    finally:
        recv.close()
        try:
            os.killpg(proc.pid, signal.SIGKILL)     # the child and whatever it started
        except (ProcessLookupError, PermissionError):
            pass
        proc.join(5)


def warm_up(methods: list[tuple[str, dict[str, Any]]]) -> None:
    """Run each method once in this process on a 1-UE instance, so that the forked runs share
    its imports and loaded native libraries (their wall times are then the methods' own)."""
    import logging
    logging.getLogger("pyomo").setLevel(logging.ERROR)   # W1002 floods at m_floor = 1
    inst = make_instance("tiny", ues=1, bss=1, dcs=2, rounds=1, seed=0)
    for method, options in methods:
        opts = {**options, "time_limit": 1.0} if "time_limit" in options else dict(options)
        if method in ("decomposed-bound", "scip"):
            opts["incumbent"] = 1e3          # a cutoff above any point: no incumbent solve
        _solve_row(inst, method, opts)


def run_instance(inst: Instance, methods: list[tuple[str, dict[str, Any]]],
                 hang_s: float = HANG_S) -> list[Run]:
    """Every method on `inst`, in order; an option value "best" (decomposed-bound's and
    scip's `incumbent`) is replaced by the best feasible objective found so far (dropped
    when none)."""
    runs: list[Run] = []
    for method, options in methods:
        opts = dict(options)
        if opts.get("incumbent") == "best":
            found = [r.found for r in runs if r.found is not None]
            opts.pop("incumbent")
            if found:
                opts["incumbent"] = min(found)
        runs.append(run_method(inst, method, opts, hang_s))
    return runs


# ---------------------------------------------------------------------- invariants
INVARIANTS = ("feasible", "objective", "bound", "infeasible", "time", "enum", "ends")


def _above(a: float, b: float) -> bool:
    """a > b beyond the relative tolerance (of b; an infinite a above a finite b is)."""
    return a - b > REL_TOL * max(abs(b), 1e-300)


def check_invariants(runs: list[Run]) -> list[tuple[str, str, str]]:
    """(invariant, method, detail) for every violation among one instance's runs (module
    docstring)."""
    out: list[tuple[str, str, str]] = []
    found = [(r.found, r.method) for r in runs if r.found is not None]
    best = min(found) if found else None
    by = {r.method: r for r in runs}
    for r in runs:
        if r.error:
            out.append(("ends", r.method, r.error))
        if r.feasible is False:
            out.append(("feasible", r.method, f"evaluate rejects its point: {r.violation}"))
        if (r.feasible and r.objective is not None
                and (_above(r.objective, r.evaluated) or _above(r.evaluated, r.objective))):
            out.append(("objective", r.method, f"reported {r.objective!r}, evaluate "
                                               f"{r.evaluated!r}"))
        if r.bound is not None and best is not None and _above(r.bound, best[0]):
            out.append(("bound", r.method, f"bound {r.bound!r} above the feasible "
                                           f"objective {best[0]!r} of {best[1]}"))
        if r.status == "infeasible" and best is not None:
            out.append(("infeasible", r.method, f"says infeasible; {best[1]} found "
                                                f"{best[0]!r}"))
        tl = r.time_limit
        if tl is not None and not r.error and r.wall_s > TIME_FACTOR * tl + TIME_SLACK_S:
            out.append(("time", r.method, f"{r.wall_s:.2f} s for time_limit {tl:g} s"))
    enum = by.get("ipopt-enum")
    if enum is not None and enum.found is not None and enum.status != "time_limit":
        seeds = ENUM_SEEDS + (ENUM_DEC_SEEDS if enum.options.get("seed_decentralized", True)
                              else ())
        for name in seeds:
            s = by.get(name)
            if s is not None and s.found is not None and _above(enum.found, s.found):
                out.append(("enum", "ipopt-enum", f"{enum.found!r} worse than {name}'s "
                                                  f"{s.found!r}"))
    return out


# ---------------------------------------------------------------------- the CLI path
def cli_run(inst: Instance, method: str, options: dict[str, Any], folder) -> Run:
    """`cefl-opt solve` on `inst` (a subprocess): the objective it prints (`objective` of the
    run) against the one in the file it writes (`evaluated`), the file's point checked by
    `evaluate`; exit 3 is status 'infeasible'."""
    import json
    import re
    import subprocess
    import sys
    from pathlib import Path
    from cefl_opt.solution import Solution
    folder = Path(folder)
    net, out = folder / "net.json", folder / "sol.json"
    inst.save(net)
    sets = [a for k, v in options.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    cmd = [sys.executable, "-m", "cefl_opt.cli", "solve", str(net), "--method", method,
           "--out", str(out), *sets]
    run = Run("cli:" + method, options)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          timeout=(options.get("time_limit") or 0.0) + HANG_S)
    run.wall_s = time.perf_counter() - t0
    printed = re.search(r"\bobjective=(\S+)", proc.stdout)
    bound = re.search(r"\bbound=(\S+)", proc.stdout)
    run.bound = float(bound[1]) if bound else None
    if proc.returncode == 3:
        run.status = "infeasible"
    elif proc.returncode == 0:
        sol = Solution.load(out, inst)
        ev = system.evaluate(inst, sol)
        run.status, run.objective = sol.status, float(printed[1]) if printed else None
        run.evaluated, run.feasible = sol.objective, bool(ev.feasible)
        if not math.isclose(sol.objective, ev.objective, rel_tol=REL_TOL):
            run.error = f"written objective {sol.objective!r}, evaluate {ev.objective!r}"
    elif proc.returncode != 4:
        run.error = f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return run


# ---------------------------------------------------------------------- the benchmark
def instance_rows(k: int, regime: str, inst: Instance, runs: list[Run],
                  violations: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """One CSV row per method: what it reported, the instance's best feasible objective and
    the method's bound gap to it, and the invariants it broke."""
    found = [r.found for r in runs if r.found is not None]
    best = min(found) if found else None
    rows = []
    for r in runs:
        broke = sorted({v[0] for v in violations if v[1] == r.method})
        gap = (None if r.bound is None or best is None or not math.isfinite(r.bound)
               else (best - r.bound) / max(abs(best), 1e-300))
        rows.append({
            "instance": k, "name": inst.name, "regime": regime, "N": inst.N, "B": inst.B,
            "S": inst.S, "T": inst.T, "method": r.method, "status": r.status,
            "solution_status": r.solution_status, "objective": r.objective,
            "evaluated": r.evaluated, "feasible": r.feasible, "bound": r.bound,
            "best": best, "bound_gap": gap, "wall_s": round(r.wall_s, 3),
            "time_limit": r.time_limit, "error": r.error, "violations": ";".join(broke),
            "detail": " | ".join(v[2] for v in violations if v[1] == r.method)[:500]})
    return rows


def summary_tables(df) -> dict[str, Any]:
    """From the campaign CSV: per regime, the instances, those with a feasible point and those
    every method called infeasible, the violations of each invariant (instances), and the
    distribution of each bound's gap to the best feasible objective (where both exist)."""
    import pandas as pd
    inst = df.groupby("instance").agg(regime=("regime", "first"), best=("best", "first"))
    per = inst.groupby("regime").agg(instances=("best", "size"),
                                     with_feasible=("best", lambda b: int(b.notna().sum())))
    broke = df["violations"].astype(object).fillna("").astype(str).str.split(";")
    for name in INVARIANTS:
        hit = df[broke.apply(lambda v: name in v)]
        per[name] = hit.groupby("regime")["instance"].nunique()
    per = per.fillna(0).astype(int)
    per.loc["all"] = per.sum()
    gaps = df[df["bound_gap"].notna()]
    dist = (gaps.groupby(["regime", "method"])["bound_gap"]
            .describe(percentiles=[0.1, 0.5, 0.9])[["count", "min", "10%", "50%", "90%", "max"]])
    allg = gaps.groupby("method")["bound_gap"].describe(percentiles=[0.1, 0.5, 0.9])
    allg = allg[["count", "min", "10%", "50%", "90%", "max"]]
    allg.index = pd.MultiIndex.from_product([["all"], allg.index], names=["regime", "method"])
    wall = df.groupby("method")["wall_s"].describe(percentiles=[0.5, 0.9])[
        ["count", "50%", "90%", "max"]]
    return {"per_regime": per, "gap": pd.concat([dist, allg]), "wall": wall}


def combine(frames) -> Any:
    """One campaign table from shards (runs with different hypothesis `--seed`s, e.g. one per
    core): instance numbers become "shard:k" so that no two shards' instances merge."""
    import pandas as pd
    parts = []
    for i, df in enumerate(frames):
        df = df.copy()
        df["instance"] = [f"{i}:{k}" for k in df["instance"]]
        parts.append(df)
    return pd.concat(parts, ignore_index=True)


def report(df) -> str:
    """The campaign's tables as markdown (docs/results/campaign.md)."""
    t = summary_tables(df)
    gap = t["gap"].copy()
    gap["count"] = gap["count"].astype(int)
    for c in ("min", "10%", "50%", "90%", "max"):
        gap[c] = gap[c].map(lambda x: f"{100 * x:.3g} %")
    return "\n\n".join([
        f"{df['instance'].nunique()} instances, {len(df)} method runs.",
        "Instances per regime and invariant violations (instances with at least one):\n\n"
        + t["per_regime"].to_markdown(),
        "Bound gap, (best feasible - bound) / best feasible, per regime and method:\n\n"
        + gap.reset_index().to_markdown(index=False),
        "Wall time per method (s):\n\n" + t["wall"].round(2).to_markdown()])


def main(argv=None) -> int:
    import argparse
    from pathlib import Path
    import tempfile

    import pandas as pd
    from hypothesis import HealthCheck, Phase, given, seed as hseed, settings
    from tqdm import tqdm

    from cefl_opt.io import write_atomic, write_csv_atomic

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=1000)
    ap.add_argument("--profile", default="bench", choices=("bench", "cheap", "full"))
    ap.add_argument("--time-limit", type=float, default=1.0,
                    help="the methods' time limit (s; ipopt-enum gets 3x in 'cheap')")
    ap.add_argument("--max-ues", type=int, default=30)
    ap.add_argument("--max-rounds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="hypothesis' seed")
    ap.add_argument("--cli-every", type=int, default=50,
                    help="every k-th instance also runs greedy-rate through `cefl-opt solve`")
    ap.add_argument("--hang-s", type=float, default=60.0,
                    help="a run past its time limit + this is killed and counted (s)")
    ap.add_argument("--out-dir", default="results/campaign")
    ap.add_argument("--report", metavar="CSV", nargs="+",
                    help="only print the tables of campaign CSVs (several: shards run with "
                         "different --seed, reported together)")
    args = ap.parse_args(argv)
    if args.report:
        print(report(combine(pd.read_csv(f) for f in args.report)))
        return 0
    out = Path(args.out_dir)
    methods = profile(args.profile, args.time_limit)
    warm_up(methods)
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=args.instances, desc="campaign", unit=" instances")
    t0 = time.perf_counter()

    @hseed(args.seed)
    @settings(max_examples=args.instances, deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(instances(max_ues=args.max_ues, max_rounds=args.max_rounds))
    def one(drawn: tuple[str, Instance]) -> None:
        regime, inst = drawn
        k = bar.n
        runs = run_instance(inst, methods, args.hang_s)
        if args.cli_every and k % args.cli_every == 0:
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(cli_run(inst, "greedy-rate", {"time_limit": args.time_limit}, tmp))
        bad = check_invariants(runs)
        rows.extend(instance_rows(k, regime, inst, runs, bad))
        if bad:
            inst.save(out / "failures" / f"{k:05d}-{inst.name}.json")
        bar.update(1)
        bar.set_postfix(violations=sum(1 for r in rows if r["violations"]))
        write_csv_atomic(pd.DataFrame(rows), out / "campaign.csv")

    one()
    bar.close()
    df = pd.DataFrame(rows)
    write_csv_atomic(df, out / "campaign.csv")
    text = report(df) + f"\n\nWall time of the campaign: {time.perf_counter() - t0:.0f} s.\n"
    write_atomic(out / "summary.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
