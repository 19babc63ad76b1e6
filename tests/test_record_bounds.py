"""`benchmarks/record_bounds.py`: the quality record's bound rows from bench_dec_quality's run
records (hand records), the other rows kept, and a bad stamp or folder refused by name."""
import json

import pandas as pd
import pytest

from benchmarks import record_bounds as rb


def _run(folder, seed, bound, options):
    rec = {"status": "time_limit", "bound": bound, "wall_s": 299.0, "process_wall_s": 302.04,
           "cpu_s": 190.26, "peak_rss_mb": 445.66,
           "key": {"commit": "x", "method": "decomposed-bound", "options": options}}
    (folder / f"paper_{seed}_T3.decomposed-bound.record.json").write_text(json.dumps(rec))


def _record():
    return pd.DataFrame([
        ["paper", 1, "decentralized", 1.2, 20.0, 21.0, "aaaaaaa", "m"],
        ["paper", 1, "decomposed-bound", 1.0, 171, 115, "bbbbbbb", "m"],
        ["paper", 2, "decomposed-bound", 2.0, 100, 90, "bbbbbbb", "m"]],
        columns=["preset", "seed", "method", "objective", "wall_s", "cpu_s", "commit",
                 "machine"])


def test_bound_rows_replace_only_their_seeds_bounds(tmp_path):
    _run(tmp_path, 1, 1.1, {"time_limit": 300.0, "m_levels": 2, "incumbent": 1.2})
    rows = rb.bound_rows(tmp_path, "ccccccc", "quiet")
    assert rows.iloc[0].to_dict() == {
        "preset": "paper", "seed": 1, "method": "decomposed-bound", "objective": 1.1,
        "wall_s": 302.0, "cpu_s": 190.3, "peak_rss_mb": 446,
        "options": "time_limit=300 m_levels=2", "commit": "ccccccc", "machine": "quiet"}
    out = rb.merged(_record(), rows)
    bounds = out[out["method"] == "decomposed-bound"].set_index("seed")
    assert bounds.loc[1, "objective"] == 1.1 and bounds.loc[1, "commit"] == "ccccccc"
    assert bounds.loc[2, "objective"] == 2.0 and bounds.loc[2, "commit"] == "bbbbbbb"
    assert len(out) == 3 and list(out.columns) == list(rb.COLUMNS)


@pytest.mark.parametrize("commit, machine, field", [("abc", "m", "--commit"),
                                                    ("ccccccc", " ", "--machine")])
def test_a_bad_stamp_is_refused_naming_it(tmp_path, commit, machine, field):
    _run(tmp_path, 1, 1.1, {"time_limit": 300.0})
    with pytest.raises(ValueError, match=f"^{field}"):
        rb.bound_rows(tmp_path, commit, machine)


def test_a_folder_without_bound_records_is_refused_and_the_record_kept(tmp_path, capsys):
    _record().to_csv(tmp_path / "r.csv", index=False)
    before = (tmp_path / "r.csv").read_text()
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit) as e:
        rb.main([str(tmp_path / "runs"), "--commit", "ccccccc", "--machine", "m",
                 "--record", str(tmp_path / "r.csv")])
    assert e.value.code == 2
    assert "no bound run records" in capsys.readouterr().err
    assert (tmp_path / "r.csv").read_text() == before
