"""Trainer throughput: CE-FL rounds per second on the paper network (20 UEs + 5 DCs = 25 DPUs)
on Fashion-MNIST, MLP and CNN, on this machine's CPU, against the analytic FLOP count.

Orchestration: ``cefl_opt.system.reference_solution`` of the ``paper`` preset (mid-range
gamma = 10.5 -> 11 steps, m = 0.505) with every UE offloading 30 % of its data to its uplink BS,
so that all 25 DPUs train. Without ``cefl_opt.generator``/``system`` it falls back to
``cefl_opt.learning.toy`` (same sizes, stand-in costs) and says so.

FLOPs: per sample, forward = 2 x multiply-adds of the Linear/Conv2d layers; training (forward +
backward) = 3 x forward. A round's training FLOPs = sum_i gamma_i * batch_i * 3 * forward;
evaluation = |test set| * forward. GFLOP/s = training FLOPs / training wall time.

    python -m benchmarks.bench_trainer [--quick] [--models mlp,cnn] [--rounds-mlp 3] [--rounds-cnn 1]

Writes ``bench_trainer.csv`` into ``--out-dir`` (default results/bench/, atomically) and prints
a table; ``--quick``: MLP 2 rounds, CNN 1 round. Default run: about
2 minutes (most of it the CNN round).

Threads: the default is 1 torch thread (``--threads 1,2`` runs both). On this shared 2-core
machine two OpenMP threads were faster only while the other core was idle (MLP 0.72 vs 0.42
rounds/s) and far slower while another job held it (MLP 0.023 rounds/s, CNN 0.0039), because
every parallel region waits for the descheduled thread; one thread gives stable numbers.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402
from cefl_opt.learning.data import load_dataset  # noqa: E402
from cefl_opt.learning.models import forward_flops, make_model, train_flops_per_sample  # noqa: E402
from cefl_opt.learning.strategies import CEFL  # noqa: E402
from cefl_opt.learning.trainer import DEFAULT_LR, Trainer  # noqa: E402


def paper_network(seed: int = 0, offload: float = 0.3):
    """(instance, solution, cost_fn, source) for the 25-DPU paper network."""
    try:
        from cefl_opt.generator import make_instance
        from cefl_opt.system import reference_solution, round_costs
    except ImportError:
        from cefl_opt.learning.toy import toy_instance, toy_round_costs, toy_solution
        inst = toy_instance(N=20, B=10, S=5, T=5, D=2000.0, seed=seed)
        sol = toy_solution(inst, offload=offload, gamma=10.5, m=0.505, seed=seed)
        return inst, sol, toy_round_costs, "toy fallback (cefl_opt.generator/system missing)"
    inst = make_instance("paper", seed=seed)
    sol = reference_solution(inst)
    for r in sol.rounds:
        r.rho_nb = np.zeros((inst.N, inst.B))
        r.rho_nb[np.arange(inst.N), r.uplink_bs] = offload
    return inst, sol, round_costs, "generator 'paper' preset + reference_solution, 30 % offload"


def bench_model(kind, inst, sol, cost_fn, data, rounds, lr, seed):
    shape = data[0].shape[1:]
    model = make_model(kind, shape, 10, seed=seed)
    fwd = forward_flops(model, shape)
    per_sample = train_flops_per_sample(model, shape)
    tr = Trainer(inst, CEFL(inst, sol), data, model=model, lr=lr, seed=seed, cost_fn=cost_fn)
    t0 = time.perf_counter()
    hist = tr.run(rounds)
    wall = time.perf_counter() - t0
    tim = pd.DataFrame(tr.timings)
    train_s, eval_s = float(tim["train_s"].sum()), float(tim["eval_s"].sum())
    samples = int(tim["samples_processed"].sum())
    train_flops = samples * per_sample
    eval_flops = rounds * int(data[2].shape[0]) * fwd
    return {
        "model": kind, "params": sum(p.numel() for p in model.parameters()),
        "dpus": inst.N + inst.S, "dpus_trained": int(hist["dpus_trained"].mean()),
        "rounds": rounds, "threads": torch.get_num_threads(),
        "fwd_MFLOP_per_sample": fwd / 1e6, "train_MFLOP_per_sample": per_sample / 1e6,
        "samples_per_round": samples / rounds, "steps_per_round": float(hist["steps"].mean()),
        "train_GFLOP_per_round": train_flops / rounds / 1e9,
        "eval_GFLOP_per_round": eval_flops / rounds / 1e9,
        "train_s_per_round": train_s / rounds, "eval_s_per_round": eval_s / rounds,
        "rounds_per_s": rounds / wall, "train_GFLOP_per_s": train_flops / train_s / 1e9,
        "final_accuracy": float(hist["accuracy"].iloc[-1]),
        "delay_s_per_round": float(hist["delay_s"].mean()),
        "energy_J_per_round": float(hist["energy_J"].mean()),
    }


def main(argv=None) -> int:
    suite = common.Suite("bench_trainer", __doc__)
    ap = suite.ap
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--rounds-mlp", type=int, default=3)
    ap.add_argument("--rounds-cnn", type=int, default=1)
    ap.add_argument("--threads", default="1",
                    help="comma-separated torch thread counts to run (default 1; see above)")
    ap.add_argument("--lr", type=float, default=DEFAULT_LR)
    a = suite.start(argv, seed=False)           # --quick: MLP 2 rounds, CNN 1 round
    if a.quick:
        a.rounds_mlp, a.rounds_cnn = 2, 1
    t_load = time.perf_counter()
    data = load_dataset(a.dataset, a.data_dir, seed=a.seed)
    t_load = time.perf_counter() - t_load
    inst, sol, cost_fn, source = paper_network(a.seed)
    threads = [int(v) for v in a.threads.split(",")]
    rows = []
    for th in threads:
        torch.set_num_threads(th)
        for kind in a.models.split(","):
            rounds = a.rounds_mlp if kind == "mlp" else a.rounds_cnn
            row = bench_model(kind, inst, sol, cost_fn, data, rounds, a.lr, a.seed)
            row.update({"dataset": a.dataset, "network": source, "cpu": platform.processor()
                        or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__})
            rows.append(row)
            print(f"  {kind} threads={th}: {row['rounds_per_s']:.4f} rounds/s, "
                  f"{row['train_GFLOP_per_s']:.1f} GFLOP/s", flush=True)
    df = pd.DataFrame(rows)
    suite.csv(df, "bench_trainer.csv")
    cols = ["model", "threads", "dpus_trained", "rounds", "samples_per_round",
            "train_GFLOP_per_round", "train_s_per_round", "eval_s_per_round", "rounds_per_s",
            "train_GFLOP_per_s", "final_accuracy"]
    print(f"network: {source}; data {a.dataset} loaded in {t_load:.1f} s; "
          f"{os.cpu_count()} cores, torch {torch.__version__}")
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        print(df[cols].to_string(index=False))
    return suite.finish()


if __name__ == "__main__":
    sys.exit(main())
