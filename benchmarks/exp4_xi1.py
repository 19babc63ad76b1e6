"""Experiment 4 (paper fig:ml_importance_plots; docs/results/experiments.md): the ML weight xi1 vs
the average mini-batch ratio m and the DPUs' processing energy E_P_ue + E_P_dc. The paper's claim:
more weight on the ML bound -> larger mini-batches and more processing energy.

    python -m benchmarks.exp4_xi1 [--quick] [--factors 0.1,0.3,1,3,10] [--method ipopt-enum]

xi1 = factor x the default (normalised) xi1 of the instance; xi2 and xi3 stay at their defaults.
Reported per factor: the mean of m over all DPUs and rounds, its data-weighted mean (a DPU that
holds no data has no cost for its m, so its m is arbitrary), min m (the corollary bound depends
on m only through min_{t,i} m), and the processing energies.

ML constants: measured on Fashion-MNIST by default (L, Theta, zeta1, zeta2, sigma;
`cefl_opt.learning.estimation.measured_constants`, dynamic over the instance's rounds, cached in
results/cache), with the instance's default vartheta_mode; `--placeholder-constants` keeps the
preset's 1s. The mean gamma P chooses (over units holding data, weighted by data) is reported.

Writes results/bench/exp4_xi1.csv and exp4_xi1.png.
Default: the paper network, T = 2, ipopt-enum (measured constants from the cache: 21 minutes,
190-370 s per factor, under a load average of 4-6 on the 2-core machine).
--quick: the same on a reduced paper-style network (10 UEs, 6 BSs, 3 DCs).
"""
from __future__ import annotations

import pandas as pd

from benchmarks import common

NAME = "exp4_xi1"


def main(argv=None) -> int:
    suite = common.Suite(NAME, __doc__, net_args=True, sweep=("--factors", "0.1,0.3,1,3,10"))
    common.add_constants_args(suite.ap)
    args = suite.start(argv)
    factors = [float(x) for x in args.factors.split(",")]
    base = common.sweep_instance(args)
    w = common.print_weights(NAME, base, args.method, "default")

    def make(f):
        return base.copy(**{**w, "xi1": f * w["xi1"]})

    df = common.run_sweep(NAME, "xi1_factor", factors, make, args.method, args.quick)
    df.insert(0, "instance", base.name)
    df.insert(2, "xi1", [f * w["xi1"] for f in df["xi1_factor"]])
    df["E_P_kJ"] = df["E_P_J"] / 1e3
    suite.csv(df, f"{NAME}.csv")
    suite.table(df, f"xi1 sweep ({args.method})",
                ["xi1_factor", "objective", "ml_bound", "delay_s", "energy_J", "mean_m",
                 "mean_m_data_weighted", "min_m", "mean_gamma", "mean_gamma_data_weighted",
                 "max_gamma", "E_P_ue_J", "E_P_dc_J", "E_P_J", "offload_share", "aggregators",
                 "wall_s"])
    ok = df.dropna(subset=["objective"])
    common.report_trends(ok, "xi1_factor", [
        ("mean m", "mean_m", "up"), ("data-weighted m", "mean_m_data_weighted", "up"),
        ("DPU energy E_P", "E_P_J", "up")],
        "paper's direction (more ML weight -> larger mini-batches, more DPU energy):")
    plot(ok, suite.path(f"{NAME}.png"), base.name, args.method)
    return suite.finish()


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
    return common.save_fig(fig, path, title=f"{name}: importance of the ML bound ({method})",
                           grid_xlabel="xi1 / default xi1")


if __name__ == "__main__":
    raise SystemExit(main())
