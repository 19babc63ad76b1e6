"""Smoke test of the experiment suites (docs/results/experiments.md): `python -m benchmarks.run_all
--quick` runs every suite whose module exists and whose solve methods are registered, each must
exit 0 and write its CSV and PNG files. Several minutes on a 2-core machine, hence `slow`."""
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
    "exp7": ["exp7_estimation.csv", "exp7_estimation_theta.csv", "exp7_estimation.png"],
}


@pytest.mark.slow
def test_run_all_quick(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run_all", "--quick",
                           "--out-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=3600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    summary = pd.read_csv(tmp_path / "run_all.csv")
    assert set(OUTPUTS) <= set(summary["suite"])
    for row in summary.itertuples():
        assert row.status in ("ok", "skipped"), row
        if row.suite in OUTPUTS and row.status == "ok":
            for name in OUTPUTS[row.suite]:
                f = tmp_path / name
                assert f.is_file() and f.stat().st_size > 0, f"{row.suite}: {name} missing"
    # the exp suites never skip on a complete install (their methods are always registered)
    ran = summary.set_index("suite")["status"]
    assert all(ran[k] == "ok" for k in OUTPUTS), ran.to_dict()
    # exp2's own check: ipopt-enum starts from the fixed/greedy choices, so it is never worse
    s = pd.read_csv(tmp_path / "exp2_floating_aggregator_summary.csv")
    enum = s[s["method"] == "ipopt-enum"]
    assert (enum.filter(like="check_vs_") == "PASS").all(axis=None)


def test_exp1_refuses_a_non_positive_vartheta(tmp_path, capsys):
    """exp1's --vartheta (the constant pair's number) must be > 0: exit 2 with the value named,
    before any work (in this process: argparse's usage error)."""
    from benchmarks.exp1_energy_delay_to_accuracy import main
    with pytest.raises(SystemExit) as exc:
        main(["--quick", "--pair", "constant", "--vartheta", "0", "--out-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "--vartheta must be > 0, got 0.0" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
