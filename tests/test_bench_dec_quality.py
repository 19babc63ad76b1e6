"""`benchmarks/bench_dec_quality.py`'s table from run records (hand values), its verdicts on
both sides of each target, and one real run of a method in its own process."""
import json

import numpy as np
import pandas as pd
import pytest

from benchmarks import bench_dec_quality as bq


def _job(preset, seed, method, opts=None):
    return {"preset": preset, "seed": seed, "T": 3, "method": method, "options": opts or {}}


def _rec(obj, feasible=True, bound=None, wall=1.0):
    return {"objective": obj, "feasible": feasible, "bound": bound, "status": "x",
            "wall_s": wall, "aggregators": "0 1 2", "peak_rss_mb": 100.0}


def _table():
    jobs = [_job("paper", 1, "decentralized"), _job("paper", 1, "ipopt-enum"),
            _job("paper", 1, "scip", {"time_limit": 10.0}),
            _job("paper", 2, "decentralized"), _job("paper", 2, "ipopt-enum"),
            _job("paper", 2, "scip", {"time_limit": 10.0})]
    recs = [_rec(1.009), _rec(1.00), _rec(1.20, bound=0.90),
            _rec(2.00), _rec(2.50, feasible=False), _rec(None, bound=1.0)]
    return bq.seed_rows(jobs, recs, "scip")


def test_best_known_gaps_and_bound_gap_by_hand():
    df = _table().set_index("seed")
    assert df.loc[1, "best_known"] == 1.00
    assert df.loc[1, "dec_gap"] == pytest.approx(0.009)
    assert df.loc[1, "enum_gap"] == 0.0
    assert df.loc[1, "bound_method_gap"] == pytest.approx(0.2)   # scip's incumbent counts too
    assert df.loc[1, "bound_gap"] == pytest.approx(0.10)
    # an infeasible answer is no best known: seed 2's best known is decentralized's 2.00
    assert df.loc[2, "best_known"] == 2.00 and np.isnan(df.loc[2, "enum_gap"])
    assert df.loc[2, "bound_gap"] == pytest.approx(0.5)


def test_verdicts_on_both_sides_of_the_targets():
    df = _table()
    v = "\n".join(bq.verdicts(df))
    assert "decentralized, paper: max gap to best known: 0.009 (target <= 0.01) PASS" in v
    assert "every method's answer feasible: False" in v   # seed 2's ipopt-enum
    worse = df.assign(dec_gap=df.dec_gap + 0.0011)
    assert "max gap to best known: 0.0101 (target <= 0.01) FAIL" in "\n".join(bq.verdicts(worse))
    # ipopt-enum's NaN gap on seed 2 (infeasible) is ignored by max; 0 passes
    assert "ipopt-enum: max gap to best known: 0 (target <= 0.001) PASS" in v
    assert "bound, paper: median gap: 0.3 (target <= 0.1) FAIL" in v


def test_the_markdown_table_has_one_row_per_seed():
    md = bq.markdown(_table()).splitlines()
    assert md[0].startswith("| preset, seed | dec (gap) | enum (gap) | best known | bound (gap)")
    assert md[2].startswith("| paper 1 | 1.0090 (+0.90 %) | 1.0000 (+0.00 %) | 1.0000 | "
                            "0.9000 (10.0 %)")
    assert len(md) == 4


def test_one_run_in_its_own_process_records_objective_and_peak_rss(tmp_path):
    """A real run (greedy-rate on tiny): the record carries the evaluated objective, the
    child's peak RSS, and is reused only for the same method and options."""
    from cefl_opt.generator import make_instance
    inst = tmp_path / "i.json"
    make_instance("tiny", seed=3).save(inst)
    job = {"method": "greedy-rate", "options": {}, "inst": str(inst), "commit": "c1",
           "reuse": True, "out": str(tmp_path / "r.json"), "solution": str(tmp_path / "s.json"),
           "timeout": 300}
    rec = bq.run_one(job)
    assert rec["rc"] == 0 and rec["feasible"] and rec["peak_rss_mb"] > 10
    assert 0 < rec["cpu_s"] < rec["process_wall_s"] * 2 + 1
    assert (tmp_path / "s.json").is_file() and not list(tmp_path.glob("*.part"))
    assert json.loads((tmp_path / "r.json").read_text())["objective"] == rec["objective"]
    (tmp_path / "r.json").write_text(json.dumps({**rec, "objective": -1.0}))
    assert bq.run_one({**job, "commit": "c2"})["objective"] == -1.0     # reused
    assert bq.run_one({**job, "reuse": False})["objective"] == rec["objective"]   # measured


def test_reuse_answers_the_same_method_and_options_and_a_bound_with_a_larger_incumbent():
    job = {"method": "decomposed-bound", "options": {"time_limit": 60.0, "incumbent": 1.0}}
    rec = {"key": {"commit": "old", "method": "decomposed-bound",
                   "options": {"time_limit": 60.0, "incumbent": 1.1}}}
    assert bq._reusable(rec, job)                                   # larger incumbent: valid
    assert not bq._reusable(rec, {**job, "options": {"time_limit": 60.0, "incumbent": 1.2}})
    assert not bq._reusable(rec, {**job, "options": {"time_limit": 30.0, "incumbent": 1.0}})
    assert not bq._reusable(rec, {**job, "method": "scip"})


def test_the_bound_gets_each_seeds_best_known_as_incumbent(tmp_path):
    jobs = [_job("paper", 1, "decentralized"), _job("paper", 1, "ipopt-enum"),
            _job("paper", 2, "decentralized")]
    best = bq.best_known(jobs, [_rec(1.2), _rec(1.1), _rec(0.9, feasible=False)])
    assert best == {("paper", 1): 1.1}
    import argparse
    args = argparse.Namespace(presets=["paper"], seeds_paper=[1, 2], seeds_small=[],
                              rounds_paper=1, rounds_small=1, bound_time=5.0,
                              bound_method="decomposed-bound", reuse=False, timeout=10.0,
                              bound_presets=["paper"], bound_options={})
    bj = bq.bound_jobs(args, tmp_path, "c", best)
    assert [j["options"] for j in bj] == [{"time_limit": 5.0, "incumbent": 1.1},
                                          {"time_limit": 5.0}]
    assert bq.bound_jobs(argparse.Namespace(**{**vars(args), "bound_time": 0.0}), tmp_path,
                         "c", best) == []
    assert bq.bound_jobs(argparse.Namespace(**{**vars(args), "bound_presets": ["small"]}),
                         tmp_path, "c", best) == []


def test_bound_only_from_a_records_best_known_with_the_bounds_options(tmp_path):
    """--best-known: each seed's least objective of the methods' rows (the bound's row is not
    an answer); --bound-set options reach every bound job; the table's gaps are to that best."""
    import argparse
    rec = tmp_path / "q.csv"
    pd.DataFrame([["paper", 1, "decentralized", 1.02], ["paper", 1, "ipopt-enum", 1.01],
                  ["paper", 1, "decomposed-bound", 0.90], ["paper", 2, "decentralized", 2.0]],
                 columns=["preset", "seed", "method", "objective"]).to_csv(rec, index=False)
    best = bq.record_best(str(rec))
    assert best == {("paper", 1): 1.01, ("paper", 2): 2.0}
    args = argparse.Namespace(presets=["paper"], seeds_paper=[1], seeds_small=[],
                              rounds_paper=1, rounds_small=1, bound_time=5.0,
                              bound_method="decomposed-bound", reuse=False, timeout=10.0,
                              bound_presets=["paper"], bound_options={"m_levels": 2})
    bj = bq.bound_jobs(args, tmp_path, "c", best)
    assert [j["options"] for j in bj] == [{"time_limit": 5.0, "m_levels": 2, "incumbent": 1.01}]
    df = bq.seed_rows(bj, [_rec(None, bound=0.9595)], "decomposed-bound", best).set_index("seed")
    assert df.loc[1, "best_known"] == 1.01
    assert df.loc[1, "bound_gap"] == pytest.approx(0.05)
    empty = tmp_path / "e.csv"
    pd.DataFrame([["paper", 1, "decomposed-bound", 0.9]],
                 columns=["preset", "seed", "method", "objective"]).to_csv(empty, index=False)
    with pytest.raises(ValueError, match="no row of the methods"):
        bq.record_best(str(empty))


@pytest.mark.parametrize("argv, field", [(["--bound-set", "m_levls=1"], "--bound-set"),
                                         (["--bound-set", "m_levels=-1"], "--bound-set"),
                                         (["--best-known", "/nonexistent/q.csv"], "--best-known")])
def test_bad_bound_options_and_records_are_refused_naming_the_flag(tmp_path, capsys, argv,
                                                                  field):
    with pytest.raises(SystemExit) as e:
        bq.main(argv + ["--out-dir", str(tmp_path), "--methods", "", "--bound-time", "0"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert field in err and "Traceback" not in err
