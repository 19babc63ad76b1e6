"""The instance-space campaign (benchmarks/campaign.py): the instance strategy spans the
documented ranges, the invariant checks flag exactly the violations, and every method keeps
the invariants on drawn instances (default suite: a few small ones with a fixed hypothesis
seed; slow suite: more and larger, every method) and on the regression instances that earlier
campaigns found (tests/data/campaign/)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from benchmarks import campaign as cp
from cefl_opt.instance import Instance

DATA = Path(__file__).parent / "data" / "campaign"
QUIET = dict(deadline=None, database=None, derandomize=True,
             suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------------- the strategy
def _spread(regimes: tuple[str, ...], examples: int) -> dict[str, list]:
    """What a fixed-seed draw of `examples` instances of `regimes` reaches."""
    seen: dict[str, list] = {k: [] for k in ("N", "T", "reach1", "all_links", "edge",
                                              "infeasible", "rate_decades", "weight_decades",
                                              "m_floor", "gamma_eq", "sigma", "regime")}

    @settings(max_examples=150, phases=[Phase.generate], **QUIET)
    @given(cp.instances(regimes=regimes))
    def draw(drawn):
        regime, inst = drawn
        inst.validate()                                   # valid by construction
        seen["regime"].append(regime)
        seen["N"].append(inst.N)
        seen["T"].append(inst.T)
        links = inst.link_mask
        seen["reach1"].append(inst.B > 1 and bool((links.sum(axis=1) == 1).all()))
        seen["all_links"].append(bool(links.all()))
        seen["edge"].append(bool(np.any(inst.Rmax_s == inst.B * inst.R_floor)))
        seen["infeasible"].append(bool(inst.feasibility_problems()))
        r = inst.R_nb[inst.R_nb > 0]
        seen["rate_decades"].append(np.log10(r.max() / r.min()))
        w = np.array([inst.xi1, inst.xi2, inst.xi3])
        seen["weight_decades"].append(np.log10(w.max() / w.min()))
        seen["m_floor"].append(inst.m_floor)
        seen["gamma_eq"].append(inst.gamma_min == inst.gamma_max)
        seen["sigma"].append(float(inst.sigma.max()))

    draw()
    return seen


def test_strategy_spans_the_documented_ranges():
    """Over a fixed-seed draw, the instances reach both ends of every range the campaign
    promises (sizes, reach, capacity edge, decades of rates and weights, floors and gamma)."""
    seen = _spread(cp.REGIMES, 150)
    assert set(seen["regime"]) == set(cp.REGIMES)
    assert min(seen["N"]) == 1 and max(seen["N"]) >= 25
    assert set(seen["T"]) == {1, 2, 3, 4}
    assert any(seen["reach1"]) and any(seen["all_links"])
    assert max(seen["rate_decades"]) > 3.0
    assert max(seen["weight_decades"]) > 4.0
    assert min(seen["sigma"]) <= 1e-3 and max(seen["sigma"]) >= 1e2


@pytest.mark.parametrize("regime", ["capacity", "limits"])
def test_strategy_reaches_the_edges(regime):
    """The capacity regime puts DC ingress exactly at the feasibility edge and, at times, just
    below it (an infeasible instance); the limits regime puts m_floor at both ends of its range
    and gamma_min = gamma_max."""
    seen = _spread((regime,), 40)
    if regime == "capacity":
        assert any(seen["edge"]) and any(seen["infeasible"]) and not all(seen["infeasible"])
    else:
        assert {1e-12, 1.0} <= set(seen["m_floor"]) and any(seen["gamma_eq"])


# ---------------------------------------------------------------------- the checks
def _run(method, found=None, **kw):
    """A Run that found the feasible objective `found` (None: no point)."""
    run = cp.Run(method, kw.pop("options", {}), status=kw.pop("status", "locally_optimal"))
    if found is not None:
        run.objective = run.evaluated = found
        run.feasible = True
    for k, v in kw.items():
        setattr(run, k, v)
    return run


def _broken(runs):
    return sorted((v[0], v[1]) for v in cp.check_invariants(runs))


def test_checks_accept_a_consistent_campaign():
    runs = [_run("fixed", 10.0), _run("greedy-rate", 9.0),
            _run("ipopt-enum", 9.0, options={"time_limit": 3.0}, wall_s=3.0 * 1.2 + 2.9),
            _run("scip", None, status="time_limit", bound=9.0 * (1 + 0.5e-6)),
            _run("decomposed-bound", None, status="optimal", bound=8.0,
                 options={"time_limit": 1.0}, wall_s=1.0)]
    assert _broken(runs) == []


@pytest.mark.parametrize("bad, expect", [
    (_run("scip", None, status="optimal", bound=9.0 * (1 + 2e-6)), ("bound", "scip")),
    (_run("decomposed-bound", None, status="optimal", bound=float("inf")),
     ("bound", "decomposed-bound")),
    (_run("scip", None, status="infeasible"), ("infeasible", "scip")),
    (_run("scip", None, status="time_limit", options={"time_limit": 1.0}, wall_s=4.3),
     ("time", "scip")),
    (_run("fixed", 9.5, feasible=False, violation="x"), ("feasible", "fixed")),
    (_run("greedy-data", 9.5, objective=9.6), ("objective", "greedy-data")),
    (_run("ipopt-enum", 9.0 * (1 + 2e-6)), ("enum", "ipopt-enum")),
    (_run("decomposed-bound", None, error="hang"), ("ends", "decomposed-bound")),
])
def test_checks_flag_each_violation(bad, expect):
    """One broken invariant among consistent runs is flagged, naming the invariant and method
    (the consistent runs: a feasible 9.0 by greedy-rate)."""
    runs = [_run("greedy-rate", 9.0), bad]
    assert _broken(runs) == [expect]


def test_checks_boundaries():
    """At the tolerances: a bound 0.5e-6 above, 20 % + slack of time, and ipopt-enum worse than
    a seed only when it finished (not at its time limit) are not violations; no feasible point
    makes 'infeasible' and any bound fine."""
    ok = [_run("greedy-rate", 9.0),
          _run("scip", None, bound=9.0 * (1 + 0.5e-6), options={"time_limit": 1.0},
               wall_s=1.2 + cp.TIME_SLACK_S - 1e-3),
          _run("ipopt-enum", 12.0, status="time_limit")]
    assert _broken(ok) == []
    none = [_run("fixed", None, status="locally_infeasible"),
            _run("scip", None, status="infeasible", bound=float("inf"))]
    assert _broken(none) == []


# ---------------------------------------------------------------------- the campaign
@pytest.fixture(scope="module")
def cheap():
    methods = cp.profile("cheap", time_limit=1.0)
    cp.warm_up(methods)
    return methods


@pytest.mark.filterwarnings("ignore")
@pytest.mark.slow
def test_campaign_default(cheap):
    """A few small drawn instances (fixed hypothesis seed), every cheap method: no invariant
    breaks (about a minute)."""
    found: list = []

    @settings(max_examples=5, phases=[Phase.generate], **QUIET)
    @given(cp.instances(max_ues=4, max_bss=2, max_dcs=2, max_rounds=2))
    def one(drawn):
        regime, inst = drawn
        bad = cp.check_invariants(cp.run_instance(inst, cheap, hang_s=60.0))
        found.extend((inst.name, *v) for v in bad)

    one()
    assert found == []


@pytest.mark.filterwarnings("ignore")
def test_benchmark_writes_its_csv_and_summary(tmp_path, cheap):
    """`python -m benchmarks.campaign` on 2 one-round instances: one CSV row per instance and
    method, the summary's tables, and no failures folder when nothing broke."""
    import pandas as pd
    assert cp.main(["--instances", "2", "--max-ues", "2", "--max-rounds", "1", "--cli-every",
                    "0", "--time-limit", "1", "--out-dir", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "campaign.csv")
    assert df["instance"].nunique() == 2
    assert len(df) == 2 * len(cp.profile("bench"))
    assert df["violations"].isna().all() and not (tmp_path / "failures").exists()
    assert "Instances per regime" in (tmp_path / "summary.md").read_text()


def test_cli_prints_the_objective_it_writes(tmp_path):
    """`cefl-opt solve` through its command line: the printed objective is the written one,
    and the written point is feasible under evaluate."""
    from cefl_opt.generator import make_instance
    inst = make_instance("tiny", ues=2, bss=2, dcs=2, rounds=2, seed=5, reach=1)
    run = cp.cli_run(inst, "greedy-rate", {"time_limit": 5.0}, tmp_path)
    assert run.error == "" and run.feasible is True
    assert cp.check_invariants([run]) == []
    assert run.objective == pytest.approx(run.evaluated, rel=1e-8)


# ---------------------------------------------------------------------- regressions
def _regressions():
    """tests/data/campaign/*.json, each with its `notes.campaign` record: the methods to run
    (with options) and what an earlier campaign found on it."""
    out = []
    for path in sorted(p for p in DATA.glob("*.json") if not p.name.endswith(".point.json")):
        note = json.loads(path.read_text())["notes"]["campaign"]
        out.append(pytest.param(path, note, id=path.stem))
    return out


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("path, note", _regressions())
def test_regression_instances(path, note, cheap):
    """Each kept instance with the methods that broke an invariant on it: no invariant breaks
    now."""
    inst = Instance.load(path)
    methods = [(m, dict(o)) for m, o in note["methods"]]
    point = path.with_suffix(".point.json")
    known = [cp.known_run(inst, point)] if point.exists() else []
    assert all(r.feasible for r in known)
    bad = cp.check_invariants(known + cp.run_instance(inst, methods, hang_s=60.0))
    assert bad == [], note["found"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_campaign_slow():
    """More and larger drawn instances (8, up to 8 UEs, 4 rounds), every method (at most 15
    minutes)."""
    methods = cp.profile("full", time_limit=2.0)
    cp.warm_up(methods)
    found: list = []

    @settings(max_examples=8, phases=[Phase.generate], **QUIET)
    @given(cp.instances(max_ues=8, max_bss=3, max_dcs=3, max_rounds=4))
    def one(drawn):
        regime, inst = drawn
        found.extend((inst.name, *v) for v in
                     cp.check_invariants(cp.run_instance(inst, methods, hang_s=180.0)))

    one()
    assert found == []


# ---------------------------------------------------------------------- the report
def test_summary_counts_instances_violations_and_gaps_by_hand():
    """Two instances of regime 'a' (one with a bound violation), one of 'b' without a feasible
    point: the per-regime table and the gap percentiles are the hand counts."""
    from cefl_opt.generator import make_instance
    inst = make_instance("tiny", ues=1, bss=1, dcs=1, rounds=1, seed=0)
    rows = []
    runs_a0 = [_run("greedy-rate", 10.0), _run("scip", None, bound=8.0)]
    runs_a1 = [_run("greedy-rate", 4.0), _run("scip", None, bound=5.0)]
    runs_b = [_run("greedy-rate", None, status="locally_infeasible"),
              _run("scip", None, status="infeasible")]
    for k, (regime, runs) in enumerate((("a", runs_a0), ("a", runs_a1), ("b", runs_b))):
        rows += cp.instance_rows(k, regime, inst, runs, cp.check_invariants(runs))
    import pandas as pd
    df = pd.DataFrame(rows)
    t = cp.summary_tables(df)
    per = t["per_regime"]
    assert per.loc["a", "instances"] == 2 and per.loc["a", "with_feasible"] == 2
    assert per.loc["b", "instances"] == 1 and per.loc["b", "with_feasible"] == 0
    assert per.loc["a", "bound"] == 1 and per.loc["b", "bound"] == 0
    assert per.loc["all", "instances"] == 3 and per.loc["all", "bound"] == 1
    gap = t["gap"].loc[("a", "scip")]
    assert gap["count"] == 2
    assert gap["max"] == pytest.approx(0.2) and gap["min"] == pytest.approx(-0.25)
    assert "| a " in cp.report(df)
    # two shards of the same rows: twice the instances, none merged across shards
    both = cp.summary_tables(cp.combine([df, df]))["per_regime"]
    assert both.loc["all", "instances"] == 6 and both.loc["all", "bound"] == 2


def test_summary_of_a_campaign_csv_without_violations(tmp_path):
    """Read back from its CSV, a campaign with no violation has an all-empty (float) violations
    column: every invariant counts 0, without pandas' warning on filling floats with text."""
    import warnings

    import pandas as pd
    from cefl_opt.generator import make_instance
    inst = make_instance("tiny", ues=1, bss=1, dcs=1, rounds=1, seed=0)
    runs = [_run("greedy-rate", 4.0), _run("scip", None, bound=3.0)]
    pd.DataFrame(cp.instance_rows(0, "a", inst, runs, cp.check_invariants(runs))).to_csv(
        tmp_path / "c.csv", index=False)
    df = pd.read_csv(tmp_path / "c.csv")
    assert df["violations"].isna().all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        per = cp.summary_tables(df)["per_regime"]
    assert per.loc["all", list(cp.INVARIANTS)].tolist() == [0] * len(cp.INVARIANTS)
    assert per.loc["all", "instances"] == 1 and per.loc["all", "with_feasible"] == 1
