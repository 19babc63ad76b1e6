"""`cefl-opt run` (the main job) end to end on a small instance."""
import json

import pandas as pd
import pytest

from cefl_opt import cli, system
from cefl_opt.instance import Instance
from cefl_opt.pipeline import REPORT_COLUMNS, gap_columns, report_table, solvers_figure
from cefl_opt.solution import Solution


def test_run_writes_a_complete_report(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["run", "--out", str(out), "--preset", "tiny", "--rounds", "2",
                   "--methods", "decentralized,ipopt-enum,greedy-rate,no-offload",
                   "--dataset", "digits", "--train-rounds", "2", "--targets", "0.3,0.5",
                   "--cache-dir", str(tmp_path / "cache")])
    assert rc == 0
    printed = capsys.readouterr().out
    assert f"report: {out / 'report.md'}" in printed and "measured ML constants" in printed
    # the constants were measured on the data and cached once
    assert len(list((tmp_path / "cache").glob("estimates-*.json"))) == 1
    for f in ("report.md", "summary.json", "instance.json", "solvers.csv", "solvers.png",
              "training.csv", "targets.csv", "accuracy_vs_cost.png",
              "solution_ipopt-enum.json", "solution_greedy-rate.json",
              "trace_decentralized.csv", "sca_trace.png", "solution_decentralized.json",
              "orchestration.png", "costs.png", "costs.csv"):
        assert (out / f).is_file(), f
    for png in ("solvers.png", "accuracy_vs_cost.png", "sca_trace.png", "orchestration.png",
                "costs.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert "![solvers](solvers.png)" in report and "![curves](accuracy_vs_cost.png)" in report
    assert not list(out.glob("*.tmp"))                      # atomic writes left nothing behind
    inst = Instance.load(out / "instance.json")
    assert inst.sigma.min() > 1.5 and inst.L != 1.0          # not the placeholders (1)
    solvers = pd.read_csv(out / "solvers.csv").set_index("method")
    for m in ("decentralized", "ipopt-enum", "greedy-rate", "no-offload"):
        sol = Solution.load(out / f"solution_{m}.json")
        ev = system.evaluate(inst, sol)
        assert ev.feasible
        assert solvers.loc[m, "objective"] == pytest.approx(ev.objective, rel=1e-9)
    # gaps to the best known answer of the run; ipopt-enum is never worse than greedy-rate
    best = solvers["objective"].min()
    assert solvers["gap_to_best_known"].tolist() == pytest.approx(
        (solvers["objective"] / best - 1.0).tolist(), rel=1e-12)
    assert solvers["gap_to_best_known"].min() == 0.0
    assert solvers.loc["ipopt-enum", "objective"] <= solvers.loc["greedy-rate", "objective"] + 1e-9
    assert "gap_to_bound" not in solvers          # no method of this run proved a bound
    assert "No method of this run proved a lower bound" in report
    # the report's table is the compact one; the CSV keeps every column
    header = next(ln for ln in report.splitlines() if ln.startswith("| method"))
    assert [c.strip() for c in header.strip("|").split("|")] == list(REPORT_COLUMNS)
    assert {"delay_s", "energy_J", "stop_reason", "central_steps"} <= set(solvers.columns)
    # the decentralised method's accounting: no central step, its own stop reason
    assert solvers.loc["decentralized", "central_steps"] == "none"
    assert solvers.loc["decentralized", "stop_reason"] in ("converged", "stalled", "max_outer")
    assert "![trace](sca_trace.png)" in report
    # the orchestration of decentralized and ipopt-enum side by side, and where the cost goes
    assert "## Orchestration: `decentralized` and `ipopt-enum`" in report
    assert "![orchestration](orchestration.png)" in report and "![costs](costs.png)" in report
    costs = pd.read_csv(out / "costs.csv")
    assert list(costs["method"].unique()) == ["decentralized", "ipopt-enum"]
    for m, c in costs.groupby("method"):
        ev = system.evaluate(inst, Solution.load(out / f"solution_{m}.json"))
        assert c.groupby("round")["energy_weighted_J"].sum().tolist() == pytest.approx(
            [r["energy"] for r in ev.rounds], rel=1e-12)
    trace = pd.read_csv(out / "trace_decentralized.csv")
    assert len(trace) == solvers.loc["decentralized", "outer_iters"]
    hist = pd.read_csv(out / "training.csv")
    assert set(hist["method"]) == {"cefl", "fednova", "fedavg"}
    assert hist.groupby("method").size().eq(2).all()
    assert json.loads((out / "summary.json").read_text())["cefl_source"] == "decentralized"


def test_gap_columns_against_hand_values():
    """Best known is the least objective; the bound gap uses the largest proven bound."""
    from cefl_opt.pipeline import gap_columns
    df = gap_columns(pd.DataFrame({"method": ["a", "b", "c"], "objective": [2.0, 2.5, None],
                                   "bound": [None, 1.5, 1.0]}))
    assert df["gap_to_best_known"].tolist()[:2] == pytest.approx([0.0, 0.25])
    assert df["gap_to_bound"].tolist()[:2] == pytest.approx([0.25, 0.4])
    assert pd.isna(df["gap_to_best_known"].iloc[2])
    assert "gap_to_bound" not in gap_columns(pd.DataFrame({"method": ["a"], "objective": [1.0],
                                                           "bound": [None]}))


def _hand_solvers(bound: float | None = 1.5) -> pd.DataFrame:
    """Three solved methods and a bound-only row, with round numbers."""
    return gap_columns(pd.DataFrame({
        "method": ["decentralized", "decentralized-polish", "no-offload", "decomposed-bound"],
        "status": ["ok", "ok", "ok", "bound"], "objective": [2.0, 2.000615, 2.5, None],
        "bound": [None, None, None, bound], "delay_s": [1.0, 1.0, 2.0, None],
        "energy_J": [3.0, 3.0, 1.0, None], "wall_s": [12.34, 56.0, 0.04, 300.0],
        "stop_reason": ["converged", "converged", None, None]}))


def test_the_report_table_has_the_compact_columns_and_gaps_in_per_cent():
    """Hand values: gap to best 0.000615 / 2 = 0.0308 % -> '0.03'; to the bound 1.5:
    (2 - 1.5) / 2 = 25 %, (2.5 - 1.5) / 2.5 = 40 %; '-' where a method has no value."""
    t = report_table(_hand_solvers()).set_index("method")
    assert ["method", *t.columns] == list(REPORT_COLUMNS)
    assert t["gap to best (%)"].tolist() == ["0.00", "0.03", "25.00", "-"]
    assert t["gap to bound (%)"].tolist() == ["25.00", "25.02", "40.00", "-"]
    assert t["objective"].tolist() == ["2.000000", "2.000615", "2.500000", "-"]
    assert t["wall (s)"].tolist() == ["12.3", "56.0", "0.0", "300.0"]
    assert t.loc["decomposed-bound", "status"] == "bound"
    no_bound = report_table(_hand_solvers(bound=None))
    assert no_bound["gap to bound (%)"].eq("-").all()
    assert report_table(pd.DataFrame({"method": ["m"], "status": ["crashed"]})).iloc[0].tolist() \
        == ["m", "crashed", "-", "-", "-", "-"]


def test_the_objective_chart_draws_the_proven_bound_as_a_horizontal_line():
    import matplotlib.pyplot as plt
    fig = solvers_figure(_hand_solvers())
    lines = [ln for ln in fig.axes[0].get_lines() if ln.get_gid() == "bound"]
    assert len(lines) == 1 and set(lines[0].get_ydata()) == {1.5}
    assert list(lines[0].get_xdata()) == [0, 1]            # axes coordinates: the full width
    assert fig.axes[0].get_ylim()[1] > 2.5                  # every bar and the line in view
    plt.close(fig)
    fig = solvers_figure(_hand_solvers(bound=None))
    assert not [ln for ln in fig.axes[0].get_lines() if ln.get_gid() == "bound"]
    plt.close(fig)


@pytest.mark.parametrize("n", [3, 8, 14])
def test_the_method_names_under_the_charts_do_not_overlap(n):
    """The drawn tick labels' boxes are pairwise disjoint for the default methods and more."""
    import matplotlib.pyplot as plt
    from cefl_opt.pipeline import DEFAULT_METHODS
    names = [*DEFAULT_METHODS, "centralized-pd", "ipopt-enum-restarts", "random-search"] * 2
    names = [f"{m}-{i}" if i >= len(DEFAULT_METHODS) else m for i, m in enumerate(names[:n])]
    df = gap_columns(pd.DataFrame({"method": names, "status": "ok",
                                   "objective": [1.0 + i for i in range(n)],
                                   "delay_s": 1.0, "energy_J": 1.0, "wall_s": 1.0}))
    fig = solvers_figure(df)
    fig.canvas.draw()
    labels = fig.axes[-1].get_xticklabels()
    assert [lb.get_text().replace("\n", "") for lb in labels] == names
    boxes = [lb.get_window_extent() for lb in labels]
    assert all(boxes[i].x1 < boxes[i + 1].x0 for i in range(n - 1))
    plt.close(fig)


def test_run_rejects_an_unknown_method_before_writing(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["run", "--out", str(out), "--methods", "ipopt-enum,magic"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "magic" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("methods,shown", [(["ipopt-enum", "no-offload"], ["ipopt-enum"]),
                                           (["no-offload"], [])])
def test_the_report_draws_the_orchestrations_it_has(tmp_path, methods, shown):
    """Only decentralized and ipopt-enum are drawn; without either, no orchestration section."""
    from cefl_opt.pipeline import run_pipeline
    report = run_pipeline(tmp_path, preset="tiny", rounds=2, methods=methods, train=False,
                          measure=False).read_text()
    assert ("## Orchestration" in report) == bool(shown)
    for f in ("orchestration.png", "costs.png", "costs.csv"):
        assert (tmp_path / f).exists() == bool(shown), f
    if shown:
        assert pd.read_csv(tmp_path / "costs.csv")["method"].unique().tolist() == shown
        assert "`ipopt-enum`" in report.split("## Orchestration")[1]


def test_a_method_whose_native_solver_crashes_is_reported_and_the_run_goes_on(tmp_path,
                                                                             monkeypatch):
    """A crash inside a native solver (here an abort in ipopt-enum's child process) leaves the
    other methods' results and marks the method 'crashed' in the report."""
    import os
    from cefl_opt.pipeline import run_pipeline
    from cefl_opt.solvers import centralized
    monkeypatch.setattr(centralized, "ipopt_enum", lambda inst, opts: os.abort())
    run_pipeline(tmp_path, preset="tiny", rounds=2, methods=["ipopt-enum", "no-offload"],
                 train=False, measure=False)
    table = pd.read_csv(tmp_path / "solvers.csv").set_index("method")
    assert table.loc["ipopt-enum", "status"] == "crashed"
    assert table.loc["no-offload", "status"] != "crashed"
    assert (tmp_path / "solution_no-offload.json").exists()
    assert not (tmp_path / "solution_ipopt-enum.json").exists()


def test_the_report_gives_the_gap_to_a_proven_bound(tmp_path, monkeypatch):
    """decomposed-bound runs after ipopt-enum, beside the baselines, with the best answer
    before it as incumbent; its bound is at most every method's objective and the exhaustive
    optimum (tiny), and the report gives each method's gap to it."""
    from cefl_opt import pipeline
    from cefl_opt.generator import make_instance
    from cefl_opt.solvers.centralized import exhaustive
    monkeypatch.setattr(pipeline, "BOUND_SECONDS", 5.0)   # any bound is valid; it runs to its limit
    pipeline.run_pipeline(tmp_path, preset="tiny", rounds=1, seed=0,
                          methods=["greedy-rate", "ipopt-enum", "decomposed-bound"],
                          train=False, measure=False, progress=False)
    df = pd.read_csv(tmp_path / "solvers.csv").set_index("method")
    bound = df.loc["decomposed-bound", "bound"]
    best, _sol, _n = exhaustive(make_instance("tiny", rounds=1, seed=0))
    assert bound <= best + 1e-9 and bound <= df["objective"].min() + 1e-9
    got = df.loc[["greedy-rate", "ipopt-enum"], "gap_to_bound"]
    want = (df.loc[got.index, "objective"] - bound) / df.loc[got.index, "objective"]
    assert got.tolist() == pytest.approx(want.tolist(), rel=1e-12) and (got >= -1e-12).all()
    report = (tmp_path / "report.md").read_text()
    assert f"Best proven lower bound: {bound:.7g} (`decomposed-bound`)" in report
    row = next(ln for ln in report.splitlines() if ln.startswith("| ipopt-enum"))
    assert f"{100 * df.loc['ipopt-enum', 'gap_to_bound']:.2f} |" in row


@pytest.mark.parametrize("meths,stages", [
    (["decentralized", "decentralized-polish", "ipopt-enum", "greedy-rate", "greedy-data",
      "fixed", "no-offload", "decomposed-bound"],
     [["decentralized", "decentralized-polish"], ["ipopt-enum"],
      ["decomposed-bound", "greedy-rate", "greedy-data", "fixed", "no-offload"]]),
    (["decomposed-bound", "fixed", "decentralized"],
     [["decentralized"], ["decomposed-bound", "fixed"]]),
    (["ipopt-enum"], [["ipopt-enum"]]),
    (["fixed", "greedy-rate"], [["fixed", "greedy-rate"]]),
])
def test_the_run_solves_ipopt_enums_seeds_first_then_it_alone_then_the_rest(meths, stages):
    from cefl_opt.pipeline import solve_stages
    assert solve_stages(meths) == stages
