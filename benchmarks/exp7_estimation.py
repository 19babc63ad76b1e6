"""Experiment 7 (paper Appendix "ML Parameter Estimation"; docs/results/experiments.md): one-shot vs
dynamic Monte-Carlo estimation of L, Theta_i, zeta1, zeta2 over rounds, on the paper network's
dynamic partition (``cefl_opt.learning.estimation``).

    python -m benchmarks.exp7_estimation [--quick] [--rounds 6] [--J 10] [--dataset fmnist]

Each round's DPU datasets are the instance's dynamic non-i.i.d. UE partition moved UE -> BS -> DC
by an orchestration (``--orchestration``: a solve method, default greedy-rate, one Ipopt solve;
``none`` keeps all data at the UEs and the DCs then get the UEs' largest Theta). Dynamic
estimation (Alg. dynamic_est_algo, ``estimate_dynamic``) re-estimates on every round's data and
keeps the running maximum; the one-shot estimate is the estimate on round 0's data, kept for all
rounds (identical to ``estimate(..., seed=seed)`` on round 0, which is estimate_dynamic's first
step). Every value is scaled by 1.5 (the paper's "Simulation Value").

Writes results/bench/exp7_estimation.csv (per round: one-shot, dynamic running max and the
round's own estimate of L, max/mean Theta, zeta1, zeta2), exp7_estimation_theta.csv (Theta per
DPU and round) and exp7_estimation.png.
Default: Fashion-MNIST, MLP, the paper network (T = 5), 6 rounds, J = 10, |D~_i| = 32 (measured
5 minutes). --quick: MNIST-5k, T = 2, 3 rounds, J = 3, |D~_i| = 16, zeta gradients on at most
300 samples per DPU.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from tqdm import tqdm

from benchmarks import common

NAME = "exp7_estimation"
QUANTITIES = ("L", "Theta_max", "Theta_mean", "zeta1", "zeta2")


def flat(e: dict) -> dict:
    th = np.asarray(e["Theta"], float)
    return {"L": float(e["L"]), "Theta_max": float(th.max()), "Theta_mean": float(th.mean()),
            "zeta1": float(e["zeta1"]), "zeta2": float(e["zeta2"])}


def main(argv=None) -> int:
    suite = common.Suite(NAME, __doc__, net_args=True)
    ap = suite.ap
    ap.add_argument("--dataset", default=None, help="fmnist (quick: mnist5k)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rounds", type=int, default=None, help="estimation rounds (6; quick 3)")
    ap.add_argument("--T", type=int, default=None, help="instance horizon (5; quick 2)")
    ap.add_argument("--J", type=int, default=None, help="random parameter draws (10; quick 3)")
    ap.add_argument("--sample-size", type=int, default=None, help="|D~_i| (32; quick 16)")
    ap.add_argument("--grad-max", type=int, default=None,
                    help="cap on samples per DPU for the zeta gradients (all; quick 300)")
    ap.add_argument("--orchestration", default="greedy-rate",
                    choices=["none"] + common.method_names(),
                    help="solve method that moves the data, or 'none' (UEs keep all data)")
    ap.add_argument("--model", default="mlp")
    args = suite.start(argv)
    q = args.quick
    dataset = args.dataset or ("mnist5k" if q else "fmnist")
    R = args.rounds or (3 if q else 6)
    T = args.T or (2 if q else 5)
    J = args.J or (3 if q else 10)
    ss = args.sample_size or (16 if q else 32)
    gmax = args.grad_max if args.grad_max is not None else (300 if q else None)

    from cefl_opt.learning.data import load_dataset
    from cefl_opt.learning.estimation import dpu_datasets, estimate_dynamic
    from cefl_opt.learning.models import make_model

    inst = common.instance("paper", seed=args.seed, rounds=T, **common.net_kwargs(args, reduce_quick=False))
    sol = None
    if args.orchestration != "none":
        res = common.solve_timed(inst, args.orchestration, **common.solve_opts(args.orchestration, q))
        sol = res.solution
        if sol is None:
            print(f"{NAME}: orchestration {args.orchestration} found no solution ({res.status}); "
                  f"using none")
    data = load_dataset(dataset, args.data_dir, seed=args.seed)
    Xtr, ytr = data[0], data[1]
    model = make_model(args.model, tuple(Xtr.shape[1:]), 10, seed=args.seed)
    parts = [dpu_datasets(inst, ytr, round=r, seed=args.seed, solution=sol) for r in range(R)]
    sizes = np.array([[len(ix) for ix in p] for p in parts])
    print(f"{NAME}: {inst.name}, {dataset}, orchestration "
          f"{args.orchestration if sol is not None else 'none'}, {R} rounds, J={J}, "
          f"|D~_i|={ss}, grad_max={gmax}; DPUs holding data per round: "
          f"{(sizes > 0).sum(axis=1).tolist()}, samples per round {sizes.sum(axis=1).tolist()}",
          flush=True)
    est = estimate_dynamic(model, Xtr, ytr, tqdm(parts, desc=NAME, unit="round"), J=J,
                           sample_size=ss, grad_max=gmax, seed=args.seed)
    one = flat(est["per_round_raw"][0])
    rows, theta_rows = [], []
    for r in range(R):
        dyn, own = flat(est["per_round"][r]), flat(est["per_round_raw"][r])
        row = {"round": r}
        for k in QUANTITIES:
            row[f"{k}_oneshot"], row[f"{k}_dynamic"], row[f"{k}_round"] = one[k], dyn[k], own[k]
        rows.append(row)
        for i, (a, b, c) in enumerate(zip(est["per_round_raw"][0]["Theta"], est["per_round"][r]["Theta"],
                                          est["per_round_raw"][r]["Theta"])):
            theta_rows.append({"round": r, "dpu": i, "kind": "ue" if i < inst.N else "dc",
                               "D_i": int(sizes[r, i]), "Theta_oneshot": a, "Theta_dynamic": b,
                               "Theta_round": c})
    df = pd.DataFrame(rows)
    df.insert(0, "dataset", dataset)
    df.insert(1, "J", J)
    suite.csv(df, f"{NAME}.csv")
    suite.csv(pd.DataFrame(theta_rows), f"{NAME}_theta.csv")
    suite.table(df, "one-shot vs dynamic estimates (scaled by 1.5) per round",
                ["round"] + [f"{k}_{v}" for k in ("L", "Theta_max", "zeta1", "zeta2")
                             for v in ("oneshot", "dynamic", "round")])
    last = df.iloc[-1]
    print("\ndynamic / one-shot after the last round: " + ", ".join(
        f"{k} x{last[f'{k}_dynamic'] / last[f'{k}_oneshot']:.3g}" for k in QUANTITIES))
    plot(df, suite.path(f"{NAME}.png"), inst.name, dataset)
    return suite.finish()


def plot(df: pd.DataFrame, path, name, dataset):
    plt = common.plt()
    keys = [("L", "L"), ("Theta_max", "max_i Theta_i"), ("zeta1", "zeta1"), ("zeta2", "zeta2")]
    fig, ax = plt.subplots(1, 4, figsize=(16, 3.6))
    for a, (k, title) in zip(ax, keys):
        a.plot(df["round"], df[f"{k}_oneshot"], "-", color="C0", label="one-shot (round 0)")
        a.step(df["round"], df[f"{k}_dynamic"], where="post", color="C3", label="dynamic (running max)")
        a.plot(df["round"], df[f"{k}_round"], "o:", color="grey", ms=4, label="this round's estimate")
        a.set_title(title)
        a.set_xlabel("round")
        a.set_xticks(df["round"])
        a.grid(alpha=0.3)
    ax[0].legend(fontsize=7)
    fig.suptitle(f"{name}, {dataset}: one-shot vs dynamic parameter estimation")
    return common.save_fig(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())
