"""Smoke test of the experiment suites (docs/results/experiments.md): each suite of
`benchmarks.run_all` runs with --quick, exits 0 and writes its CSV and PNG files. The suites run
one per test, so that pytest-xdist spreads them over the workers: those `run_all` passes no
suite option to run through `run_all --quick --only KEY` (its summary checked too); the three
sweeps run directly on two of their values (the sweep's code is the same for any number of
values). Minutes each on a 2-core machine, hence `slow`."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = {
    "exp1": ["exp1_energy_delay_to_accuracy.csv", "exp1_energy_delay_to_accuracy_history.csv",
             "exp1_energy_delay_to_accuracy.png"],
    "exp2": ["exp2_floating_aggregator.csv", "exp2_floating_aggregator_summary.csv",
             "exp2_floating_aggregator.png"],
    "exp3": ["exp3_drift.csv", "exp3_drift.png"],
    "exp4": ["exp4_xi1.csv", "exp4_xi1.png"],
    "exp5": ["consensus_gap.csv", "consensus_gap_summary.csv", "consensus_gap.png"],
    "exp6": ["network_size.csv", "network_size_summary.csv", "network_size.png"],
    "exp7": ["exp7_estimation.csv", "exp7_estimation_theta.csv", "exp7_estimation.png"],
}
#: the sweeps, run directly on two values: (option, values, rows of the CSV checked)
SWEEPS = {"exp3": ("--deltas", "0,1", "exp3_drift.csv"),
          "exp4": ("--factors", "0.1,1", "exp4_xi1.csv"),
          "exp6": ("--ues", "10,15", "network_size_summary.csv")}


def test_run_all_lists_every_suite_and_passes_each_the_common_options():
    from benchmarks.run_all import SUITES, takes_common_args
    assert [k for k, _ in SUITES] == sorted(OUTPUTS)
    assert all(takes_common_args(m) for _, m in SUITES)


def _run(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]


@pytest.mark.slow
@pytest.mark.parametrize("suite", sorted(OUTPUTS))
def test_run_all_quick(tmp_path, suite):
    from benchmarks.run_all import SUITES
    if suite in SWEEPS:
        flag, values, csv = SWEEPS[suite]
        _run([dict(SUITES)[suite], "--quick", flag, values, "--out-dir", str(tmp_path)])
        assert len(pd.read_csv(tmp_path / csv)) == 2
    else:
        _run(["benchmarks.run_all", "--quick", "--only", suite, "--out-dir", str(tmp_path)])
        summary = pd.read_csv(tmp_path / "run_all.csv")
        # the exp suites never skip on a complete install (their methods are always registered)
        assert summary["suite"].tolist() == [suite] and summary["status"].tolist() == ["ok"]
    for name in OUTPUTS[suite]:
        f = tmp_path / name
        assert f.is_file() and f.stat().st_size > 0, f"{suite}: {name} missing"
    if suite == "exp2":
        # exp2's own check: ipopt-enum starts from the fixed/greedy choices, so it is never worse
        s = pd.read_csv(tmp_path / "exp2_floating_aggregator_summary.csv")
        enum = s[s["method"] == "ipopt-enum"]
        assert len(enum) > 0 and (enum.filter(like="check_vs_") == "PASS").all(axis=None)


def test_exp1_refuses_a_non_positive_vartheta(tmp_path, capsys):
    """exp1's --vartheta (the constant pair's number) must be > 0: exit 2 with the value named,
    before any work (in this process: argparse's usage error)."""
    from benchmarks.exp1_energy_delay_to_accuracy import main
    with pytest.raises(SystemExit) as exc:
        main(["--quick", "--pair", "constant", "--vartheta", "0", "--out-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "--vartheta must be > 0, got 0.0" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_bench_dec_inner_reads_a_reach_and_its_modes_agree():
    """`bench_dec_inner`'s UESxBSSxDCSxROUNDSxREACH builds the instance with that reach (fewer
    UE-BS links, so fewer shared variables than every link), and both modes end at the same
    iterate."""
    from benchmarks.bench_dec_inner import one
    full, near = one("12x6x3x2", 3, 20, repeats=1), one("12x6x3x2x2", 3, 20, repeats=1)
    assert near["shared_variables"] < full["shared_variables"]
    assert full["same_iterate"] and near["same_iterate"]
