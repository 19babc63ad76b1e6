"""The Flower engine's cost (docs/training.md, 'CE-FL on Flower'): seconds per CE-FL round through
Flower's simulation engine (Ray, one SuperNode per DPU) against the in-process trainer, on the paper
network (20 UEs + 5 DCs = 25 DPUs, Fashion-MNIST, MLP), both in one run with the same seed and
orchestration, and whether the two accuracy curves are the same.

Orchestration: ``bench_trainer.paper_network`` (the ``paper`` preset's reference solution with 30 %
offloading, so that all 25 DPUs train). Per round: ``train_s`` (plan, local steps, aggregation; with
Flower also the messages) + ``eval_s`` (the 10k test set), and ``fit_s``, the seconds inside
``local_fedprox`` summed over the DPUs (measured by the ClientApps under Flower). The Flower
engine's first round also pays Ray's start-up and the ClientApps' imports and data loading, so it is
reported apart (``startup_s`` = whole Flower run - its rounds 2..R) and the overhead ratio is over
rounds 2..R of both engines (the local engine runs first and last, both runs count). ``--cpus 1,2``:
one Flower run per Ray CPU budget; with 1 CPU one ClientApp runs at a time, as the local trainer
runs its DPUs one after the other (the ratio is Flower's overhead alone), with 2 the two ClientApps
overlap.

    python -m benchmarks.bench_flower [--rounds 5] [--cpus 1,2] [--quick]

Writes ``results/bench/bench_flower.csv`` (one row per engine and round) and prints the summary.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_trainer import paper_network  # noqa: E402
from benchmarks.common import parser, seed_everything, write_csv  # noqa: E402
from cefl_opt.learning import flower  # noqa: E402
from cefl_opt.learning.trainer import run_training  # noqa: E402


def seconds_per_round(df: pd.DataFrame) -> float:
    """Mean train_s + eval_s over rounds 2..R (round 1 of Flower holds its start-up)."""
    steady = df[df["round"] > 0]
    return float((steady["train_s"] + steady["eval_s"]).mean())


def summarise(df: pd.DataFrame, engine: str, wall: float) -> dict:
    loc, flw = df[df.engine.str.startswith("local")], df[df.engine == engine]
    steady = flw[flw["round"] > 0]
    return {
        "engine": engine, "rounds": len(flw),
        # the local steps alone (summed over the DPUs, wherever they ran) and the rest of a
        # round's train_s: planning and aggregation, with Flower also the messaging. With more
        # than one CPU the ClientApps overlap and the difference is not defined.
        "fit_s_per_round_local": float(loc[loc["round"] > 0]["fit_s"].mean()),
        "fit_s_per_round": float(steady["fit_s"].mean()),
        "rest_s_per_round_local": float((loc[loc["round"] > 0]["train_s"]
                                         - loc[loc["round"] > 0]["fit_s"]).mean()),
        "rest_s_per_round": float((steady["train_s"] - steady["fit_s"]).mean())
        if engine == "flower-1cpu" else float("nan"),
        "local_s_per_round": seconds_per_round(loc), "s_per_round": seconds_per_round(flw),
        "overhead_ratio": seconds_per_round(flw) / seconds_per_round(loc),
        "startup_s": wall - float((steady["train_s"] + steady["eval_s"]).sum()), "wall_s": wall,
        "max_abs_accuracy_diff": float(np.abs(df[df.engine == "local"]["accuracy"].to_numpy()
                                              - flw["accuracy"].to_numpy()).max()),
        "final_accuracy_local": float(df[df.engine == "local"]["accuracy"].iloc[-1]),
        "final_accuracy": float(flw["accuracy"].iloc[-1]),
    }


def main(argv=None) -> int:
    ap = parser(__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpus", default="1,2",
                    help="comma-separated CPU budgets of Ray, one Flower run each (default 1,2)")
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds = 3
    seed_everything(a.seed)
    inst, sol, cost_fn, source = paper_network(a.seed)
    spec = flower.DataSpec(a.dataset, a.data_dir, a.seed)
    kw = dict(rounds=a.rounds, seed=a.seed, cost_fn=cost_fn)
    walls, res = {}, {}
    t = time.perf_counter()
    res["local"] = run_training(inst, sol, spec.load(), **kw)
    walls["local"] = time.perf_counter() - t
    for c in (int(v) for v in a.cpus.split(",")):
        t = time.perf_counter()
        res[f"flower-{c}cpu"] = flower.run_simulation(inst, sol, spec, cpus=c, **kw)
        walls[f"flower-{c}cpu"] = time.perf_counter() - t
    # the local engine again: the machine's load drifts, both local runs enter the ratio
    t = time.perf_counter()
    res["local-2"] = run_training(inst, sol, spec.load(), **kw)
    walls["local-2"] = time.perf_counter() - t
    rows = []
    for eng, r in res.items():
        tim = pd.DataFrame(r.trainer.timings)
        h = r.history
        rows += [{"engine": eng, "round": int(h["round"][k]), "accuracy": float(h["accuracy"][k]),
                  "test_loss": float(h["test_loss"][k]), "delay_s": float(h["delay_s"][k]),
                  "energy_J": float(h["energy_J"][k]), "train_s": float(tim["train_s"][k]),
                  "eval_s": float(tim["eval_s"][k]), "fit_s": float(tim["fit_s"][k])}
                 for k in range(len(h))]
    df = pd.DataFrame(rows)
    summary = pd.DataFrame([
        {**summarise(df, eng, walls[eng]),
         "max_abs_param_diff": float((res["local"].params - r.params).abs().max()),
         "network": source, "dataset": a.dataset, "dpus": inst.N + inst.S,
         "torch_threads": torch.get_num_threads()}
        for eng, r in res.items() if not eng.startswith("local")])
    out = Path(a.out_dir) / "bench_flower.csv"
    write_csv(df, out)
    write_csv(summary, out.with_name("bench_flower_summary.csv"))
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        print(df.pivot(index="round", columns="engine",
                       values=["accuracy", "train_s", "eval_s"]).to_string())
        print(summary.drop(columns=["network", "dataset"]).T.to_string(header=False))
    print(f"network: {source}; {a.dataset}; local trainer and ClientApps with "
          f"{torch.get_num_threads()} torch thread(s)")
    print(f"wrote {out} and {out.with_name('bench_flower_summary.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
