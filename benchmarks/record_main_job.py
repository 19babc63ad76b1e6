"""The main job's record, `docs/results/records/main_job.csv`, from a finished `cefl-opt run`:
per method its status, objective, gaps and wall time (`RUN/solvers.csv`), with the whole
job's wall time (`RUN/summary.json`) and its largest process's peak RSS as measured around it,
stamped with the commit the run's code was at and the machine. The documentation build turns
the record into the main job page's table (`docs/hooks/records.py`).

    /usr/bin/time -v cefl-opt run --out RUN --overwrite      # "Maximum resident set size"
    python -m benchmarks.record_main_job RUN --peak-rss-mb 1279 --commit abc1234 \\
        --machine "dev-vm: 2 CPU cores, CPU only, nothing else running"
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from benchmarks.common import check_stamp, write_record

RECORD = Path(__file__).resolve().parents[1] / "docs" / "results" / "records" / "main_job.csv"
COLUMNS = ("method", "status", "objective", "bound", "gap_to_best_pct", "gap_to_bound_pct",
           "wall_s", "job_wall_s", "job_peak_rss_mb", "commit", "machine")


def record(run: Path, peak_rss_mb: float, commit: str, machine: str) -> pd.DataFrame:
    """The record's rows for the run in folder `run` (gaps in per cent)."""
    check_stamp(commit, machine)
    if not peak_rss_mb > 0:
        raise ValueError(f"--peak-rss-mb: {peak_rss_mb!r} is not positive")
    s = pd.read_csv(run / "solvers.csv")
    job_wall = json.loads((run / "summary.json").read_text(encoding="utf-8"))["wall_s"]
    out = pd.DataFrame({"method": s["method"], "status": s["status"],
                        "objective": s["objective"], "bound": s["bound"],
                        "gap_to_best_pct": 100 * s["gap_to_best_known"],
                        "gap_to_bound_pct": 100 * s["gap_to_bound"], "wall_s": s["wall_s"]})
    out["job_wall_s"], out["job_peak_rss_mb"] = job_wall, peak_rss_mb
    out["commit"], out["machine"] = commit, machine
    return out[list(COLUMNS)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="the folder `cefl-opt run --out` wrote")
    ap.add_argument("--peak-rss-mb", type=float, required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--out", type=Path, default=RECORD)
    args = ap.parse_args(argv)
    return write_record(ap, lambda: record(args.run, args.peak_rss_mb, args.commit,
                                           args.machine), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
