"""Experiment 3 (paper fig:model_drift_plots; docs/results/experiments.md): model drift Delta vs the
aggregation delay and the UEs' CPU frequency. The paper's claim: more drift -> shorter rounds
(smaller aggregation delay) and faster UE CPUs.

    python -m benchmarks.exp3_drift [--quick] [--deltas 0,0.1,0.3,1,3] [--method ipopt-enum]
                                    [--beta-M-scale 1] [--tag NAME]

For each Delta the instance is the same network with ``Delta[t, i] = Delta`` for every round and
DPU; the objective weights xi1, xi2, xi3 stay those of the default instance (Delta = 0.3), so
that only the drift changes (make_instance would otherwise re-normalise them for each Delta).
Reported per Delta: sum over rounds of the aggregation delay dA, the mean UE CPU frequency
(over all UEs, and weighted by the data each UE processes: a UE that offloads all its data has
no processing cost and an arbitrary f), and the objective's parts.

Why the default network does not show the direction, and the variant that does: on the default
instance (beta_M = 4e7 bit, a 5 MB model, over ~60 Mbit/s uplinks) the round's aggregation delay
is the slowest UE's gradient upload beta_M/R_nb + beta_M/R_bs at every Delta (column
`sum_max_ue_upload_s` equals `sum_dA_s`): P already offloads ~90 % of the data and runs no
processing on the critical path, so no decision can shorten the round and more drift only raises
the bound. `--beta-M-scale 0.05` (a 2 Mbit model, e.g. a 60k-parameter CNN) takes the upload off
the critical path; then processing sets dA and the drift term can act on it. Outputs of a
variant carry its tag (default `bM<scale>`) in the file names.

Writes results/bench/exp3_drift.csv and exp3_drift.png.
Default: the paper network, T = 2, ipopt-enum (measured 10 minutes each, default and --beta-M-scale
0.05, with another job running on the 2-core machine).
--quick: the same on a reduced paper-style network (10 UEs, 6 BSs, 3 DCs).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks import common

NAME = "exp3_drift"


def main(argv=None) -> int:
    suite = common.Suite(NAME, __doc__, net_args=True, sweep=("--deltas", "0,0.1,0.3,1,3"))
    suite.ap.add_argument("--beta-M-scale", type=float, default=1.0,
                          help="multiply the model size beta_M (bits) by this factor")
    suite.ap.add_argument("--tag", default=None, help="suffix of the output files of a variant")
    args = suite.start(argv)
    if args.beta_M_scale <= 0:
        suite.ap.error(f"--beta-M-scale must be > 0, got {args.beta_M_scale}")
    deltas = [float(x) for x in args.deltas.split(",")]
    base = common.sweep_instance(args)
    if args.beta_M_scale != 1.0:
        from cefl_opt.system import normalising_weights
        base = base.copy(beta_M=base.beta_M * args.beta_M_scale)
        base = base.copy(**normalising_weights(base))
    tag = args.tag or ("" if args.beta_M_scale == 1.0 else f"bM{args.beta_M_scale:g}")
    stem = f"{NAME}_{tag}" if tag else NAME
    w = common.print_weights(NAME, base, args.method, "fixed")

    def make(d):
        return base.copy(Delta=np.full((base.T, base.N + base.S), d), **w)

    df = common.run_sweep(NAME, "Delta", deltas, make, args.method, args.quick)
    df.insert(0, "instance", base.name)
    df["mean_dA_s"] = df["sum_dA_s"] / base.T
    df.insert(1, "beta_M_bits", float(base.beta_M))
    suite.csv(df, f"{stem}.csv")
    suite.table(df, f"Delta sweep ({args.method})",
                ["Delta", "objective", "ml_bound", "delay_s", "energy_J", "sum_dA_s",
                 "sum_max_ue_upload_s", "sum_max_ue_path_s", "sum_max_dc_path_s",
                 "mean_f_GHz", "mean_f_GHz_data_weighted", "mean_gamma", "mean_m",
                 "offload_share", "aggregators", "wall_s"])
    ok = df.dropna(subset=["objective"])
    common.report_trends(ok, "Delta", [
        ("sum of dA", "sum_dA_s", "down"), ("mean UE f", "mean_f_GHz", "up"),
        ("data-weighted UE f", "mean_f_GHz_data_weighted", "up")],
        "paper's direction (more drift -> shorter aggregation, faster UE CPUs):")
    pinned = np.isclose(ok["sum_dA_s"], ok["sum_max_ue_upload_s"], rtol=1e-6)
    if pinned.any():
        print(f"  note: at Delta in {list(ok.loc[pinned, 'Delta'])} the aggregation delay equals the "
              f"slowest UE's gradient upload alone (beta_M/R_nb + beta_M/R_bs): processing is off "
              f"the critical path there, so faster UE CPUs cannot shorten the round")
    plot(ok, suite.path(f"{stem}.png"), base.name, args.method)
    return suite.finish()


def plot(df: pd.DataFrame, path, name, method):
    plt = common.plt()
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    x = np.arange(len(df))
    ax[0].plot(x, df["sum_dA_s"], "o-")
    ax[0].set_ylabel("aggregation delay, sum over rounds (s)")
    ax[1].plot(x, df["mean_f_GHz"], "o-", label="mean over UEs")
    ax[1].plot(x, df["mean_f_GHz_data_weighted"], "s--", label="weighted by processed data")
    ax[1].set_ylabel("UE CPU frequency (GHz)")
    ax[1].legend(fontsize=8)
    for a in ax:
        a.set_xticks(x)
        a.set_xticklabels([f"{d:g}" for d in df["Delta"]])
    return common.save_fig(fig, path, title=f"{name}: model drift ({method})",
                           grid_xlabel="model drift Delta")


if __name__ == "__main__":
    raise SystemExit(main())
