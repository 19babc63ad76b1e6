"""The proven bounds of the quality record, `docs/results/records/dec_quality.csv`, from the
run records of `python -m benchmarks.bench_dec_quality --best-known ...` (the bound only): per
seed the bound, the process's wall and CPU seconds and peak RSS, and the bound's options
(`time_limit=300 m_levels=2`), stamped with the commit the bound's code was at and the
machine. The bound rows of those seeds are replaced; every other row stays. The documentation
build turns the record into the tables of the decentralised results page
(`docs/hooks/records.py`).

    python -m benchmarks.bench_dec_quality --presets paper --bound-time 300 \\
        --bound-set m_levels=2 --best-known docs/results/records/dec_quality.csv \\
        --out-dir results/bench/bounds
    python -m benchmarks.record_bounds results/bench/bounds/dec_quality_runs \\
        --commit abc1234 --machine "dev-vm: 2 CPU cores, CPU only, two bounds at a time"
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from benchmarks.bench_dec_quality import RUN_RECORD
from benchmarks.common import check_stamp, write_record

RECORD = Path(__file__).resolve().parents[1] / "docs" / "results" / "records" / "dec_quality.csv"
COLUMNS = ("preset", "seed", "method", "objective", "wall_s", "cpu_s", "peak_rss_mb",
           "options", "commit", "machine")


def bound_rows(runs: Path, commit: str, machine: str) -> pd.DataFrame:
    """One row per bound run record in folder `runs` (`bench_dec_quality`'s run records whose
    method is `decomposed-bound` and that proved a bound)."""
    check_stamp(commit, machine)
    rows = []
    for path in sorted(runs.glob("*.decomposed-bound.record.json")):
        m, rec = RUN_RECORD.fullmatch(path.name), json.loads(path.read_text(encoding="utf-8"))
        if m is None or rec.get("bound") is None:
            raise ValueError(f"{path}: not a bound run's record with a bound")
        opts = {k: v for k, v in rec["key"]["options"].items() if k != "incumbent"}
        rows.append({"preset": m["preset"], "seed": int(m["seed"]),
                     "method": "decomposed-bound", "objective": rec["bound"],
                     "wall_s": round(rec["process_wall_s"], 1), "cpu_s": round(rec["cpu_s"], 1),
                     "peak_rss_mb": round(rec["peak_rss_mb"]),
                     "options": " ".join(f"{k}={v:g}" for k, v in opts.items()),
                     "commit": commit, "machine": machine})
    if not rows:
        raise ValueError(f"{runs}: no bound run records")
    return pd.DataFrame(rows, columns=list(COLUMNS))


def merged(record: pd.DataFrame, bounds: pd.DataFrame) -> pd.DataFrame:
    """`record` with the bound rows of `bounds`' seeds replaced by `bounds`' rows."""
    record = record.reindex(columns=list(COLUMNS))
    seeds = set(zip(bounds["preset"], bounds["seed"]))
    old = [(p, s) in seeds and m == "decomposed-bound"
           for p, s, m in zip(record["preset"], record["seed"], record["method"])]
    out = pd.concat([record[[not x for x in old]], bounds], ignore_index=True)
    out["peak_rss_mb"] = out["peak_rss_mb"].astype("Int64")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, help="bench_dec_quality's dec_quality_runs folder")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--record", type=Path, default=RECORD)
    args = ap.parse_args(argv)
    return write_record(ap, lambda: merged(pd.read_csv(args.record), bound_rows(
        args.runs, args.commit, args.machine)), args.record)


if __name__ == "__main__":
    raise SystemExit(main())
