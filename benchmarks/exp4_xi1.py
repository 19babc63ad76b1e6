"""Experiment 4 (SPEC §8.4; paper fig:ml_importance_plots): the ML weight xi1 vs the average
mini-batch ratio m and the DPUs' processing energy E_P_ue + E_P_dc. The paper's claim: more
weight on the ML bound -> larger mini-batches and more processing energy.

    python -m benchmarks.exp4_xi1 [--quick] [--factors 0.1,0.3,1,3,10] [--method ipopt-enum]

xi1 = factor x the default (normalised) xi1 of the instance; xi2 and xi3 stay at their defaults.
Reported per factor: the mean of m over all DPUs and rounds, its data-weighted mean (a DPU that
holds no data has no cost for its m, so its m is arbitrary), min m (the corollary bound depends
on m only through min_{t,i} m), and the processing energies.

ML constants (issue 15): measured on Fashion-MNIST by default (L, Theta, zeta1, zeta2, sigma;
`cefl_opt.learning.estimation.measured_constants`, dynamic over the instance's rounds, cached in
results/cache), with the instance's default vartheta_mode; `--placeholder-constants` keeps the
preset's 1s. The mean gamma P chooses (over units holding data, weighted by data) is reported.

Writes results/bench/exp4_xi1.csv and exp4_xi1.png.
Default: the paper network, T = 2, ipopt-enum (measured 10 minutes with another job running on
the 2-core machine; the factors 0.1 and 10 take longest).
--quick: the same on a reduced paper-style network (10 UEs, 6 BSs, 3 DCs).
"""
from __future__ import annotations

import time

import pandas as pd

from benchmarks import common

NAME = "exp4_xi1"
REQUIRES = ("ipopt-enum",)


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--factors", default="0.1,0.3,1,3,10")
    ap.add_argument("--T", type=int, default=None, help="rounds (2; quick 2)")
    ap.add_argument("--method", default="ipopt-enum")
    ap.add_argument("--placeholder-constants", action="store_true",
                    help="keep the preset's placeholder ML constants (no measurement)")
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--cache-dir", default="results/cache")
    common.add_net_args(ap)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    common.quiet()
    common.seed_everything(args.seed)
    out = common.out_dir(args)
    if not common.has_method(args.method):
        print(f"{NAME}: SKIPPED, method {args.method!r} is not registered")
        return 0
    T = args.T or 2
    net = common.net_kwargs(args)
    factors = [float(x) for x in args.factors.split(",")]
    base = common.instance("paper", seed=args.seed, rounds=T, **net)
    if not args.placeholder_constants:
        from cefl_opt.learning.data import load_dataset
        from cefl_opt.learning.estimation import apply_estimates, measured_constants
        data = load_dataset(args.dataset, args.data_dir, seed=args.seed)
        base = apply_estimates(base, measured_constants(base, data, dataset=args.dataset,
                                                        seed=args.seed, cache_dir=args.cache_dir))
    print(f"{NAME}: {'placeholder' if args.placeholder_constants else 'measured'} constants L "
          f"{base.L:.4g} zeta1 {base.zeta1:.4g} zeta2 {base.zeta2:.4g} Theta max "
          f"{base.Theta.max():.4g} sigma max {base.sigma.max():.4g}, vartheta "
          f"{base.vartheta_mode}", flush=True)
    w = common.weights_of(base)
    print(f"{NAME}: {base.name}, method {args.method}, default weights "
          + ", ".join(f"{k}={v:.4g}" for k, v in w.items()), flush=True)

    def make(f):
        return base.copy(**{**w, "xi1": f * w["xi1"]})

    df = common.run_sweep(NAME, "xi1_factor", factors, make, args.method, args.quick)
    df.insert(0, "instance", base.name)
    df.insert(2, "xi1", [f * w["xi1"] for f in df["xi1_factor"]])
    df["E_P_kJ"] = df["E_P_J"] / 1e3
    f_csv = common.write_csv(df, out / f"{NAME}.csv")
    common.print_table(df, f"xi1 sweep ({args.method})",
                       ["xi1_factor", "objective", "ml_bound", "delay_s", "energy_J", "mean_m",
                        "mean_m_data_weighted", "min_m", "mean_gamma", "mean_gamma_data_weighted",
                        "max_gamma", "E_P_ue_J", "E_P_dc_J",
                        "E_P_J", "offload_share", "aggregators", "wall_s"])
    ok = df.dropna(subset=["objective"])
    checks = [("mean m", "mean_m", "up"), ("data-weighted m", "mean_m_data_weighted", "up"),
              ("DPU energy E_P", "E_P_J", "up")]
    print("\npaper's direction (more ML weight -> larger mini-batches, more DPU energy):")
    for label, col, want in checks:
        tr = common.trend(ok["xi1_factor"], ok[col])
        print(f"  {label:<17} increases with xi1: {common.verdict(tr, want)}  "
              f"({tr['first']:.4g} -> {tr['last']:.4g}, Spearman {tr['spearman']:+.2f})")
    f_png = plot(ok, out / f"{NAME}.png", base.name, args.method)
    common.footer(NAME, t_start, [f_csv, f_png])
    return 0


def plot(df: pd.DataFrame, path, name, method):
    plt = common.plt()
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    x = df["xi1_factor"]
    ax[0].semilogx(x, df["mean_m"], "o-", label="mean over DPUs")
    ax[0].semilogx(x, df["mean_m_data_weighted"], "s--", label="weighted by data")
    ax[0].set_ylabel("average mini-batch ratio m")
    ax[0].legend(fontsize=8)
    ax[1].semilogx(x, df["E_P_J"], "o-", label="E_P_ue + E_P_dc")
    ax[1].semilogx(x, df["E_P_ue_J"], ":", label="UEs")
    ax[1].semilogx(x, df["E_P_dc_J"], "--", label="DCs")
    ax[1].set_ylabel("DPU processing energy (J, sum over rounds)")
    ax[1].legend(fontsize=8)
    for a in ax:
        a.set_xlabel("xi1 / default xi1")
        a.grid(alpha=0.3)
    fig.suptitle(f"{name}: importance of the ML bound ({method})")
    return common.save_fig(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())
