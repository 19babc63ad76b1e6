"""The scripts in examples/ keep working: each runs with --quick in a subprocess from a fresh
temporary folder (not the repository), exits 0, prints the lines that say what it shows and
writes its files there. The examples check their own numbers (Pyomo objective = numpy
evaluator, SCIP's bound <= a brute-force optimum, ...) and exit non-zero when a check fails."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, cwd: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), "--quick", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def test_every_example_says_what_it_shows_and_how_to_run_it():
    scripts = sorted(EXAMPLES.glob("*.py"))
    assert {p.name for p in scripts} >= {"model_builder.py", "benchmark_suite.py",
                                         "centralised_vs_decentralised.py",
                                         "train_cefl_vs_fednova.py", "plot_orchestration.py"}
    for p in scripts:
        head = p.read_text().split('"""')[1]
        assert "Shows:" in head and f"examples/{p.name}" in head, p.name
        assert len(p.read_text().splitlines()) <= 130, p.name


def cli_lines(text: str) -> list[str]:
    """The `cefl-opt ...` command lines quoted in a docstring (backslash continuations joined,
    trailing `# comments` dropped)."""
    text = re.sub(r"\\\n\s*", " ", text)
    return [re.sub(r"\s+#.*$", "", ln.strip()) for ln in text.splitlines()
            if ln.strip().startswith("cefl-opt ")]


def test_the_cli_commands_quoted_in_the_examples_parse():
    from cefl_opt.cli import build_parser
    lines = [ln for p in sorted(EXAMPLES.glob("*.py")) for ln in cli_lines(p.read_text())]
    assert len(lines) >= 8
    for ln in lines:
        args = build_parser().parse_args(shlex.split(ln)[1:])  # OptionError on a stale option
        assert callable(args.func), ln


@pytest.mark.slow
def test_model_builder(tmp_path):
    out = run_example("model_builder.py", tmp_path)
    for blk in ("ue[0]", "bs[0]", "dc[1]"):
        assert re.search(rf"block {re.escape(blk)}: own .* \| copies ", out), blk
    assert re.search(r"consensus G\(w\)=0: \d+ rows", out)
    assert re.search(r"fixed-binary NLP \(cyipopt, optimal\): objective [\d.]+, Pyomo and numpy agree", out)
    assert re.search(r"SCIP on tiny-.*incumbent [\d.]+, proven lower bound", out)
    assert "lower bound <= best + 1e-6: True" in out
    # halving the uplink rates cannot shorten the rounds; less weight on the ML bound: a larger
    # bound and no larger mini-batches
    d0, d1 = map(float, re.search(r"delay ([\d.]+) -> ([\d.]+) s", out).groups())
    b0, b1 = map(float, re.search(r"ML bound ([\d.]+) -> ([\d.]+)", out).groups())
    m0, m1 = map(float, re.search(r"mini-batch ratio ([\d.]+) -> ([\d.]+)", out).groups())
    assert d1 > d0 and b1 >= b0 and m1 <= m0
    assert "model_builder: done" in out


@pytest.mark.slow
def test_benchmark_suite(tmp_path):
    out = run_example("benchmark_suite.py", tmp_path)
    assert "running: python -m benchmarks.exp4_xi1" in out
    assert "benchmarks.run_all --quick" in out
    for f in ("exp4_xi1.csv", "exp4_xi1.png", "benchmark_suite.png"):
        assert (tmp_path / f).stat().st_size > 0, f
    df = pd.read_csv(tmp_path / "exp4_xi1.csv")
    assert len(df) == 2 and df["objective"].notna().all()
    assert f"read {tmp_path / 'exp4_xi1.csv'}: 2 rows" in out


@pytest.mark.slow
def test_centralised_vs_decentralised(tmp_path):
    out = run_example("centralised_vs_decentralised.py", tmp_path)
    for m in ("ipopt-enum", "scip", "decentralized", "centralized-pd"):
        assert f"method={m} " in out, m
    assert "method=decentralized-polish " in out
    assert re.search(r"^\s*method\s+status\s+objective\s+wall_s\s+outer_it\s+msgs_per_node",
                     out, re.M)
    # the decentralised method counts its messages and takes no central step; centralized-pd
    # sends none; the polish names its two central steps
    row = re.search(r"^\s*decentralized \S+ +[\d.]+ +[\d.]+ +\d+ +([\d.e+]+) +none ", out, re.M)
    assert row and float(row.group(1)) > 0, out
    assert re.search(r"^\s*centralized-pd .* n/a +global_primal_dual ", out, re.M), out
    assert re.search(r"^\s*decentralized-polish .* association_repair\+ipopt_polish ", out, re.M), out
    trace = pd.read_csv(tmp_path / "decentralized_trace.csv")
    assert len(trace) >= 1 and "outer" in trace
    assert (tmp_path / "centralised_vs_decentralised.png").stat().st_size > 0


@pytest.mark.slow
def test_train_cefl_vs_fednova(tmp_path):
    out = run_example("train_cefl_vs_fednova.py", tmp_path, "--rounds", "2")
    assert "method=decentralized " in out
    for m in ("cefl", "fednova"):
        assert re.search(rf"^{m}: 2 rounds on digits, final accuracy [\d.]+", out, re.M), m
    hist = pd.read_csv(tmp_path / "train_cefl_vs_fednova.csv")
    assert sorted(hist["method"].unique()) == ["cefl", "fednova"]
    assert (hist.groupby("method")["cum_energy_kJ"].diff().dropna() > 0).all()
    assert (tmp_path / "train_cefl_vs_fednova.png").stat().st_size > 0


@pytest.mark.slow
def test_plot_orchestration(tmp_path):
    out = run_example("plot_orchestration.py", tmp_path)
    for m in ("decentralized", "ipopt-enum"):
        assert f"method={m} " in out and f"\n{m}:\n" in out, m       # the table of plot
        assert re.search(rf"^{m}: aggregator by round dc\d dc\d; the UEs keep [\d.]+ %", out, re.M)
    assert re.search(r"^\s*round\s+aggregator\s+kept %", out, re.M)
    assert ("4 panels; the drawn flows are the solutions' data and the cost parts add up to the "
            "evaluator's totals: True") in out
    assert "cefl-opt plot: exit 0; costs.csv has 32 rows (2 rounds x 8 nodes x 2 methods)" in out
    for f in ("orchestration.png", "orchestration_costs.png"):
        assert (tmp_path / f).read_bytes()[:4] == b"\x89PNG", f
    assert "plot_orchestration: done" in out
