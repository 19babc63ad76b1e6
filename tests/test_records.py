"""The headline numbers of the README and the documentation are the measurement records'
(`docs/results/records/*.csv`, through `docs/hooks/records.py`): every record block of every
page agrees with the records, every inline value resolves, the detailed tables agree with the
rows they were transcribed to, and no page speaks of releases the project has not made."""
from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hook(records: Path | None = None):
    spec = importlib.util.spec_from_file_location("docs_records_hook",
                                                  ROOT / "docs" / "hooks" / "records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if records is not None:
        mod.RECORDS = records
    return mod


@pytest.fixture(scope="module")
def hook():
    return _hook()


def _write(path: Path, head: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(rows)


def test_values_from_hand_records(tmp_path):
    m = "hand machine"
    rows = []
    # best known per seed is the least of the three methods; dec gaps 0 %, 1 %, 3 %
    for seed, dec, pol, enum, bound in ((1, 1.00, 1.10, 1.00, 0.90), (2, 2.02, 2.00, 2.01, 1.90),
                                        (3, 1.03, 1.05, 1.00, 0.95)):
        rows += [["paper", seed, "decentralized", dec, 40, 30 + seed, "", "", "aaaaaaa", m],
                 ["paper", seed, "decentralized-polish", pol, 9, 9, "", "", "bbbbbbb", m],
                 ["paper", seed, "ipopt-enum", enum, 300, 120 * seed, "", "", "aaaaaaa", m],
                 ["paper", seed, "decomposed-bound", bound, 301.5, 290, 446,
                  "time_limit=300 m_levels=2", "bbbbbbb", m]]
    rows += [["small", 7, meth, obj, 1, 1, "", "", "aaaaaaa", m] for meth, obj in
             (("decentralized", 1.005), ("decentralized-polish", 1.0), ("ipopt-enum", 1.0))]
    _write(tmp_path / "dec_quality.csv", ["preset", "seed", "method", "objective", "wall_s",
                                          "cpu_s", "peak_rss_mb", "options", "commit",
                                          "machine"], rows)
    _write(tmp_path / "dec_bound.csv", ["preset, seed", "bound (gap to it)", "commit",
                                        "machine"],
           [["paper 1", "0.8000 (20.0 %)", "eeeeeee", m], ["paper 3", "0.9000 (9.0 %)",
                                                           "eeeeeee", m]])
    _write(tmp_path / "mpi_scale.csv", ["ues", "bss", "dcs", "ranks", "wall_s", "peak_rss_mb",
                                        "objective", "commit", "machine"],
           [[200, 40, 10, 1, 20.0, 400, 1, "ccccccc", m], [200, 40, 10, 2, 15.0, 300, 1, "ccccccc", m],
            [1000, 100, 20, 1, 100.0, 2000, 1, "ccccccc", m],
            [1000, 100, 20, 2, 90.0, 1000, 1, "ccccccc", m],
            [5000, 500, 50, 2, 1800, 9000, "", "ccccccc", m]])
    _write(tmp_path / "inner_cost.csv", ["ues", "ratio_of_medians", "commit", "machine"],
           [[20, 1.5, "ddddddd", m], [50, 0.9, "ddddddd", m]])
    _write(tmp_path / "exp1_energy.csv", ["pair", "seed", "accuracy_pct", "energy_saving_pct",
                                          "commit", "machine"],
           [["3/3", 0, 70, 20.0, "eeeeeee", m], ["3/3", 0, 60, 10.0, "eeeeeee", m]])
    _write(tmp_path / "flower.csv", ["engine", "per round, like for like", "commit", "machine"],
           [["local", 1.0, "fffffff", m], ["flower, Ray 1 CPU", 1.25, "fffffff", m],
            ["flower, Ray 2 CPUs", "", "fffffff", m]])
    _write(tmp_path / "dec_scale.csv", ["ues", "bss", "dcs", "seed", "config", "wall_s",
                                        "peak_rss_mb", "objective", "search_stop", "commit",
                                        "machine"],
           [[200, 40, 10, 1, "default", 100.0, 500, 0.9, "completed", "ggggggg", m],
            [200, 40, 10, 1, "search-free", 20.0, 490, 1.0, "", "hhhhhhh", m],
            [1000, 100, 20, 2, "default", 900.0, 2100, 0.75, "search budget", "ggggggg", m],
            [1000, 100, 20, 2, "search-free", 150.0, 2000, 1.0, "", "hhhhhhh", m]])
    quality = _hook(tmp_path).dec_quality_table().splitlines()
    assert quality[2] == ("| paper 1 | 1.0000000 (+0.000 %) | 1.1000000 (+10.000 %) | "
                          "1.0000000 (+0.000 %) | 1.0000000 | 0.9000000 (10.00 %) | 40 / 31 | "
                          "9 / 9 | 300 / 120 |")
    assert quality[3].startswith("| paper 2 | 2.0200000 (+1.000 %) | 2.0000000 (+0.000 %) | "
                                 "2.0100000 (+0.500 %) | 2.0000000 | 1.9000000 (5.00 %) |")
    assert quality[5] == ("| small 7 | 1.0050000 (+0.500 %) | 1.0000000 (+0.000 %) | "
                          "1.0000000 (+0.000 %) | 1.0000000 | – | 1 / 1 | 1 / 1 | 1 / 1 |")
    table = _hook(tmp_path).dec_scale_table().splitlines()
    assert table[2:] == [
        "| 200 / 40 / 10 | 1 | default | 100.0 s | 500 MB | 0.9000000 | completed | `ggggggg` |",
        "| 200 / 40 / 10 | 1 | search-free | 20.0 s | 490 MB | 1.0000000 | – | `hhhhhhh` |",
        "| 1,000 / 100 / 20 | 2 | default | 900.0 s | 2,100 MB | 0.7500000 | search budget | "
        "`ggggggg` |",
        "| 1,000 / 100 / 20 | 2 | search-free | 150.0 s | 2,000 MB | 1.0000000 | – | `hhhhhhh` |"]
    v = _hook(tmp_path).values()
    assert (v["dec_200_wall"], v["dec_200_mem"], v["dec_200_below_free"]) == (
        "100.0 s", "500 MB", "10.0 %")
    assert (v["dec_1000_wall"], v["dec_1000_mem"], v["dec_1000_below_free"]) == (
        "15.0 min", "2,100 MB", "25.0 %")
    assert v["dec_scale_commits"] == "`ggggggg`"
    assert v["dec_paper_median_gap"] == "+1.00 %" and v["dec_paper_max_gap"] == "+3.00 %"
    assert v["dec_paper_worst_seed"] == "3" and v["dec_paper_cpu_max"] == "33 s"
    assert v["dec_small_max_gap"] == "+0.50 %"
    # bound gaps (best - bound) / best: 10 %, 5 %, 5 %
    assert (v["bound_median_gap"], v["bound_max_gap"], v["bound_min_gap"]) == (
        "5.0 %", "10.0 %", "5.0 %")
    assert v["enum_best_everywhere"] == "not every"          # seed 2: polish is best
    assert (v["enum_paper_cpu_min_min"], v["enum_paper_cpu_max_min"]) == ("2", "6")
    assert (v["mpi_200_time_ratio"], v["mpi_200_mem_ratio"]) == ("0.75x", "0.75x")
    assert (v["mpi_1000_time_ratio"], v["mpi_1000_mem_ratio"]) == ("0.90x", "0.50x")
    assert (v["mpi_5000_wall"], v["mpi_5000_mem"]) == ("30.0 min", "9.0 GB")
    assert v["inner_cost_range"] == "0.90–1.50x"
    assert v["exp1_savings"] == "−10.0 / −20.0 %" and v["exp1_accuracies"] == "60 / 70"
    assert v["flower_ratio"] == "1.25x"
    assert v["dec_quality_commits"] == "`aaaaaaa` / `bbbbbbb`"
    assert v["bound_options"] == "5 min, `m_levels = 2`"
    table = _hook(tmp_path).bound_table().splitlines()
    assert table[0].endswith("| bound at `eeeeeee` (gap) |")
    # seed 1: best 1.00 (ipopt-enum), bound 0.90: 10 %; the earlier bound 0.80: 20 % of it
    assert table[2] == ("| 1 | 1.0000000 | 0.9000000 (10.00 %) | 5 min, `m_levels = 2` | "
                        "302 / 290 | 446 | 0.8000 (20.00 %) |")
    assert table[3].endswith("| – |")                   # seed 2 has no earlier bound
    assert table[4].startswith("| 3 | 1.0000000 | 0.9500000 (5.00 %) |")


def _run_folder(path: Path) -> Path:
    """A finished run's two files the main job's record reads (hand values)."""
    path.mkdir()
    _write(path / "solvers.csv", ["method", "status", "objective", "bound", "wall_s",
                                  "gap_to_best_known", "gap_to_bound"],
           [["decentralized", "stalled", 1.02, "", 20.5, 0.02, 0.2],
            ["ipopt-enum", "locally_optimal", 1.0, "", 100.25, 0.0, 0.25],
            ["decomposed-bound", "time_limit", "", 0.8, 30.0, "", ""]])
    (path / "summary.json").write_text('{"wall_s": 232.4}', encoding="utf-8")
    return path


def test_the_main_job_record_and_its_table_from_a_hand_run(tmp_path):
    from benchmarks.record_main_job import record
    machine = "hand machine"
    df = record(_run_folder(tmp_path / "run"), 1279.0, "abc1234", machine)
    assert df["gap_to_best_pct"].tolist()[:2] == [2.0, 0.0]
    assert df["gap_to_bound_pct"].tolist()[:2] == [20.0, 25.0]
    assert set(df["job_wall_s"]) == {232.4} and set(df["commit"]) == {"abc1234"}
    (tmp_path / "records").mkdir()
    df.to_csv(tmp_path / "records" / "main_job.csv", index=False)
    table = _hook(tmp_path / "records").main_job_table().splitlines()
    assert table[2:5] == [
        "| `decentralized` | stalled | 1.0200000 | 2.000 | 20.00 | 20.5 |",
        "| `ipopt-enum` | locally_optimal | 1.0000000 | 0.000 | 25.00 | 100.2 |",
        "| `decomposed-bound` | time_limit | bound 0.8000000 | – | – | 30.0 |"]
    assert table[-1] == ("The whole job: 3 min 52 s, its largest process 1,279 MB peak RSS; "
                         "recorded at `abc1234` (hand machine).")


@pytest.mark.parametrize("field, args", [
    ("--commit", (1.0, "HEAD", "m")), ("--machine", (1.0, "abc1234", " ")),
    ("--peak-rss-mb", (0.0, "abc1234", "m"))])
def test_the_main_job_record_refuses_a_bad_stamp(tmp_path, field, args):
    from benchmarks.record_main_job import record
    with pytest.raises(ValueError, match=f"^{field}"):
        record(_run_folder(tmp_path / "run"), *args)


def test_every_record_row_is_stamped_and_every_record_is_shown(hook):
    files = sorted(hook.RECORDS.glob("*.csv"))
    shown = (ROOT / "docs" / "hooks" / "records.py").read_text("utf-8") + "".join(
        p.read_text("utf-8") for p in hook.pages())
    for path in files:
        assert (f'load("{path.stem}")' in shown or f"table/{path.stem} " in shown
                or f"cell:{path.stem}/" in shown or f"<!-- record: {path.stem} -->" in shown), \
            f"{path.name}: no page shows it"
        for row in hook.load(path.stem):
            assert re.fullmatch(r"[0-9a-f]{7}( / [0-9a-f]{7})*", row["commit"]), (path.name, row)
            assert row["machine"].strip(), (path.name, row)


def test_record_blocks_of_every_page_agree_with_the_records(hook):
    stale = [str(p.relative_to(ROOT)) for p in hook.pages()
             if hook.BLOCK.sub(lambda m: hook.render(m.group(0)), p.read_text("utf-8"))
             != p.read_text("utf-8")]
    assert stale == [], "run `python docs/hooks/records.py`"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("headline-readme", "limits", "mpi-scale"):
        assert f"<!-- record: {name} -->" in readme
    scale = (ROOT / "docs" / "results" / "scale.md").read_text(encoding="utf-8")
    for name in ("dec-scale", "mpi-scale"):      # the page's latest records, at its top
        assert f"<!-- record: {name} -->" in scale.split("\n## ", 2)[1]
    job = (ROOT / "docs" / "results" / "main-job.md").read_text(encoding="utf-8")
    assert "<!-- record: main-job -->" in job.split("\n## ", 2)[1]


def test_a_changed_number_in_a_block_is_caught(hook):
    text = "x\n<!-- record: mpi-scale -->\n" + hook.mpi_table() + "<!-- /record -->\n"
    assert hook.render(text) == text
    wrong = text.replace(hook.values()["mpi_200_time_ratio"], "0.70x")
    assert hook.render(wrong) != wrong


def test_every_inline_value_resolves(hook):
    names = {n for p in hook.pages() for n in hook.INLINE.findall(p.read_text("utf-8"))}
    assert len(names) > 10
    assert sorted(names - set(hook.values())) == []
    with pytest.raises(KeyError, match="unknown record value 'nope'"):
        hook.render("[[rec:nope]]")
    with pytest.raises(KeyError, match="unknown record block 'nope'"):
        hook.render("<!-- record: nope -->\n<!-- /record -->")


def _section(page: str, heading: str) -> str:
    text = (ROOT / "docs" / "results" / page).read_text(encoding="utf-8")
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_quality_page_opens_with_its_record():
    """results/decentralized.md's first section is the `dec_quality` record's table (the
    build fills it; `test_record_blocks_of_every_page_agree_with_the_records` checks it)."""
    page = (ROOT / "docs" / "results" / "decentralized.md").read_text(encoding="utf-8")
    assert "<!-- record: dec-quality -->" in page.split("\n## ", 2)[1]


def test_scale_table_agrees_with_its_record(hook):
    objective = {}
    for r in hook.load("mpi_scale"):        # the pages say: the same objective, bit for bit
        objective.setdefault(r["ues"], set()).add(r["objective"])
    assert all(len(v) == 1 for v in objective.values()), objective
    table = (ROOT / "docs" / "history" / "scale.md").read_text(encoding="utf-8").split(
        "## Only the entries with terms travel", 1)[1].split("\n## ", 1)[0]
    for r in hook.load("mpi_scale"):
        size = f"{r['ues']}/{r['bss']}/{r['dcs']}"
        m = re.search(rf"^\| {size} \| {r['ranks']} \| ([\d.]+) \|[^|]*\| ([\d,]+) \|", table,
                      re.M)
        if r["ues"] == "5000":
            continue                         # recorded in the section's prose
        assert m, size
        assert float(m.group(1)) == float(r["wall_s"])
        assert float(m.group(2).replace(",", "")) == float(r["peak_rss_mb"])


def test_no_page_speaks_of_releases():
    """There are no tagged releases: the pages say "at commit X" or "this change"."""
    found = []
    for path in [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md")):
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\b(this|previous|last|next|the) releases?\b|release before|"
                         r"release after|release's", line, re.I):
                found.append(f"{path.relative_to(ROOT)}:{k}")
    assert found == []


@pytest.mark.parametrize("text, typed", [
    ("took 95.4 s and 12 %", ["95.4 s", "12 %"]),
    ("0.82x the time, 1,279 MB", ["0.82x", "1,279 MB"]),
    ("an objective of 1.3705", ["1.3705"]), ("T = 3 on 200 UEs, seeds 9401–9412", []),
    ("`--time-limit 1.5` and [x](a/1.5.md)", []),
    ("[[rec:dec_200_wall]] and [[cell:a/b/1.5 s]]", []),
    ("<!-- record: table/a -->\n| 1.5 s |\n<!-- /record -->", []), ("```\n2.5 s\n```", [])])
def test_typed_numbers_finds_measurements_outside_records(hook, text, typed):
    assert hook.typed_numbers(text) == typed


@pytest.mark.parametrize("page", [p.name if p.parent.name != "results" else "results/" + p.name
                                  for p in _hook().recorded_pages()])
def test_recorded_pages_type_no_measured_number(hook, page):
    path = ROOT / page if page == "README.md" else ROOT / "docs" / page
    assert hook.typed_numbers(path.read_text(encoding="utf-8")) == []


def test_table_block_renders_a_hand_record_with_its_stamp(tmp_path):
    _write(tmp_path / "t.csv", ["engine", "s per round", "commit", "machine"],
           [["local", "10.34", "aaaaaaa", "m1"], ["flower", "", "aaaaaaa", "m1"]])
    _write(tmp_path / "u.csv", ["k", "v", "commit", "machine"],
           [["a", "1", "aaaaaaa", "m1"], ["b", "2", "bbbbbbb", "m2"]])
    mod = _hook(tmp_path)
    assert mod.table("t") == ("| engine | s per round |\n|---|---|\n| local | 10.34 |\n"
                              "| flower | – |\n\nRecorded at `aaaaaaa` (m1).\n")
    assert mod.table("u").splitlines()[2:4] == ["| a | 1 | `aaaaaaa` |", "| b | 2 | `bbbbbbb` |"]
    assert mod.table("u").endswith("Recorded (m1; m2).\n")
    page = ("<!-- record: table/t -->\nstale\n<!-- /record -->\n"
            "local: [[cell:t/local/s per round]] s")
    assert mod.render(page).endswith("<!-- /record -->\nlocal: 10.34 s")
    with pytest.raises(KeyError, match="'nope'"):
        mod.render("[[cell:t/nope/s per round]]")
    with pytest.raises(KeyError, match="table/missing"):
        mod.render("<!-- record: table/missing -->\n<!-- /record -->")


def test_campaign_block_is_the_campaigns_report_of_its_record(tmp_path):
    cols = list(_hook().CAMPAIGN_COLUMNS) + ["commit", "machine"]
    rows = [["0:0", "base", 2, 1, "greedy-rate", "ok", "", 4.0, 0.5, "", "", "aaaaaaa", "m"],
            ["0:0", "base", 2, 1, "scip", "ok", 0.25, 4.0, 1.0, 1.0, "", "aaaaaaa", "m"],
            ["1:0", "rates", 5, 3, "greedy-rate", "infeasible", "", "", 0.7, "", "", "aaaaaaa",
             "m"]]
    _write(tmp_path / "campaign.csv", cols, rows)
    text = _hook(tmp_path).campaign_report()
    assert text.startswith("2 instances, 3 method runs.")
    assert "| base     | scip     |       1 | 25 %  |" in text
    assert text.endswith("Sizes: 2–5 UEs (median 3.5); instances per T: 1: 1, 3: 1; 1 have a "
                         "feasible point. Recorded at `aaaaaaa` (m).\n")
