"""Interrupt `cefl-opt solve` at random moments and record what is left.

For each method, one uninterrupted run measures its duration d on the instance, then `--runs`
runs get SIGINT (even i) or SIGTERM (odd i) after a delay drawn uniformly from
[0.05, min(0.6 d, 20)] s (seeded), so that the signal lands while the command runs even where
the machine's load changes. Each run has its own TMPDIR, so the temporaries counted are its own. Each row records the exit
code (expected 130 / 143), the lines on stderr, the files left in the run's folder beside the
instance, trace temporaries left in /tmp, and solver processes still alive afterwards. Writes
`interrupts.csv` (one row per run) and `interrupts_summary.csv` (the distribution per method).

    python -m benchmarks.bench_interrupts --runs 20       # paper instance, T = 2
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from benchmarks.common import out_dir, parser, write_csv
from cefl_opt.generator import make_instance

EXE = Path(sys.executable).with_name("cefl-opt")
METHODS = {"scip": ["--time-limit", "20"], "ipopt-enum": ["--sweeps", "3"],
           "decentralized": []}


def processes_naming(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line contains `marker`."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            pids.append(int(d.name))
    return pids


def signal_run(argv: list[str], sig: int, delay: float, folder: Path) -> dict:
    """Run `cefl-opt argv` with TMPDIR a new folder, send `sig` after `delay` s, and inspect
    the aftermath: exit code, stderr, whether it was still running at the signal, files in
    `folder` other than the instance `net.json` and its TMPDIR, files left in that TMPDIR, and
    processes naming `folder` still alive."""
    tmp = folder / "tmpdir"
    tmp.mkdir()
    p = subprocess.Popen([str(EXE), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "TMPDIR": str(tmp)},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(delay)
    running = p.poll() is None
    p.send_signal(sig)
    _, err = p.communicate(timeout=300)
    end = time.monotonic() + 10
    while processes_naming(str(folder)) and time.monotonic() < end:
        time.sleep(0.1)
    left = sorted(x.name for x in folder.iterdir() if x.name not in ("net.json", "tmpdir"))
    temporaries = sorted(x.name for x in tmp.iterdir())
    if not temporaries:
        tmp.rmdir()
    return {"returncode": p.returncode, "stderr": err, "running_at_signal": running,
            "files_left": left, "temporaries_left": temporaries,
            "processes_left": processes_naming(str(folder))}


@contextlib.contextmanager
def _run_folder(inst, method: str):
    """A fresh folder holding the instance, and the solve command writing into it."""
    folder = Path(tempfile.mkdtemp(prefix="cefl-interrupt."))
    try:
        net = folder / "net.json"
        inst.save(net)
        cmd = ["solve", str(net), "--method", method, "--out", str(folder / "s.json"),
               *METHODS.get(method, [])]
        if method == "decentralized":
            cmd += ["--trace", str(folder / "t.csv")]
        yield folder, cmd
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _duration(inst, method: str) -> float:
    """Wall seconds of one uninterrupted `cefl-opt solve` (which must succeed)."""
    with _run_folder(inst, method) as (_folder, cmd):
        t0 = time.perf_counter()
        subprocess.run([str(EXE), *cmd], check=True, capture_output=True)
        return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--runs", type=int, default=20, help="interrupted runs per method")
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--methods", default=",".join(METHODS))
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    inst = make_instance(args.preset, rounds=2, seed=args.seed)
    rows = []
    methods = args.methods.split(",")
    duration = {m: _duration(inst, m) for m in tqdm(methods, desc="uninterrupted runs")}
    jobs = [(m, i) for m in methods for i in range(args.runs)]
    for method, i in tqdm(jobs, desc="interrupted runs"):
        sig = signal.SIGINT if i % 2 == 0 else signal.SIGTERM
        delay = float(rng.uniform(0.05, min(0.6 * duration[method], 20.0)))
        with _run_folder(inst, method) as (folder, cmd):
            r = signal_run(cmd, sig, delay, folder)
        rows.append({"method": method, "run": i, "signal": signal.Signals(sig).name,
                     "delay_s": round(delay, 3), "duration_s": round(duration[method], 2),
                     "exit": r["returncode"],
                     "expected": 130 if sig == signal.SIGINT else 143,
                     "running_at_signal": r["running_at_signal"],
                     "stderr_lines": len(r["stderr"].splitlines()),
                     "traceback": "Traceback" in r["stderr"],
                     "files_left": " ".join(r["files_left"]),
                     "temporaries_left": " ".join(r["temporaries_left"]),
                     "processes_left": len(r["processes_left"])})
    df = pd.DataFrame(rows)
    out = out_dir(args)
    write_csv(df, out / "interrupts.csv")
    summary = summarise(df)
    write_csv(summary, out / "interrupts_summary.csv")
    print(summary.to_string(index=False))
    return 0 if summary["as_expected"].eq(summary["interrupted"]).all() else 1


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Per method: runs, runs still running at the signal (the interrupted ones), exit codes
    seen, interrupted runs as expected (the expected code, one stderr line, no traceback,
    nothing left), and the counts of each kind of debris."""
    ok = (df["running_at_signal"] & (df["exit"] == df["expected"]) & (df["stderr_lines"] == 1)
          & ~df["traceback"] & (df["files_left"] == "") & (df["temporaries_left"] == "")
          & (df["processes_left"] == 0))
    rows = []
    for method, g in df.assign(ok=ok).groupby("method", sort=False):
        codes = Counter(g["exit"].tolist())
        rows.append({"method": method, "runs": len(g),
                     "interrupted": int(g["running_at_signal"].sum()),
                     "exit_codes": " ".join(f"{c}x{n}" for c, n in sorted(codes.items())),
                     "as_expected": int(g["ok"].sum()),
                     "files_left": int((g["files_left"] != "").sum()),
                     "temporaries_left": int((g["temporaries_left"] != "").sum()),
                     "processes_left": int(g["processes_left"].sum())})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    sys.exit(main())
