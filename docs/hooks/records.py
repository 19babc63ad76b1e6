"""MkDocs hook: the headline numbers of the README and the documentation come from the
measurement records, `docs/results/records/*.csv` (one row per measurement, each stamped with
the commit it ran at and the machine).

* `[[rec:NAME]]` in a page is replaced by the value NAME (`values()`), e.g.
  `[[rec:dec_paper_median_gap]]` by `+0.04 %`;
* `[[cell:NAME/ROW/COLUMN]]` by one cell of record NAME: the row whose first column is ROW,
  the column headed COLUMN;
* a block between `<!-- record: NAME -->` and `<!-- /record -->` is replaced by the text
  `BLOCKS[NAME]` writes from the records (the committed text between the markers is what the
  last `python docs/hooks/records.py` wrote; the tests check that it still agrees);
  `<!-- record: table/NAME -->` is record NAME itself as a table (`table()`): a hand record,
  typed once into its CSV from the run it names.

The README is not part of the site, and a page's Markdown should read right too:
`python docs/hooks/records.py` rewrites the blocks of the README and of every page, and
`tests/test_records.py` fails when a block or a number of a page disagrees with its record.
An unknown name fails the build.
"""
from __future__ import annotations

import csv
import re
import statistics
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "results" / "records"
INLINE = re.compile(r"\[\[rec:([a-z0-9_]+)\]\]")
CELL = re.compile(r"\[\[cell:([a-z0-9_]+)/([^\]/]+)/([^\]]+)\]\]")
BLOCK = re.compile(r"(<!-- record: ([a-z0-9_/-]+) -->\n)(.*?)(<!-- /record -->)", re.S)
STAMP = ("commit", "machine")
DEC_METHODS = ("decentralized", "decentralized-polish", "ipopt-enum")


@lru_cache(maxsize=None)
def load(name: str) -> tuple[dict[str, str], ...]:
    """The rows of record `name` (`docs/results/records/NAME.csv`)."""
    with open(RECORDS / f"{name}.csv", newline="", encoding="utf-8") as f:
        return tuple(csv.DictReader(f))


def _commits(rows) -> str:
    return " / ".join(f"`{c}`" for c in dict.fromkeys(r["commit"] for r in rows))


def dec_quality(preset: str) -> dict[str, dict[str, float]]:
    """{seed: {method: objective}} of the `dec_quality` record for `preset`, with "best" (the
    least answer of the three methods), and "cpu:METHOD" seconds."""
    out: dict[str, dict[str, float]] = {}
    for r in load("dec_quality"):
        if r["preset"] == preset:
            seed = out.setdefault(r["seed"], {})
            seed[r["method"]] = float(r["objective"])
            if r["cpu_s"]:
                seed["cpu:" + r["method"]] = float(r["cpu_s"])
    for seed in out.values():
        seed["best"] = min(seed[m] for m in DEC_METHODS)
    return out


def _options(text: str) -> str:
    """A bound row's options (`time_limit=300 m_levels=2`) as the pages say them."""
    opts = dict(item.split("=", 1) for item in text.split())
    out = [f"{float(opts.pop('time_limit')) / 60:g} min"] if "time_limit" in opts else []
    return ", ".join(out + [f"`{k} = {v}`" for k, v in opts.items()])


def _pct(x: float, sign: bool = True, digits: int = 2) -> str:
    return f"{x:+.{digits}f} %" if sign else f"{x:.{digits}f} %"


def _ratio(x: float) -> str:
    return f"{x:.2f}x"


def _mpi() -> dict[tuple[int, int], dict[str, float]]:
    """{(UEs, ranks): {"wall_s", "peak_rss_mb"}} of the `mpi_scale` record."""
    return {(int(r["ues"]), int(r["ranks"])): {k: float(r[k]) for k in ("wall_s", "peak_rss_mb")}
            for r in load("mpi_scale")}


def _dec_scale() -> dict[tuple[int, str], dict[str, float]]:
    """{(UEs, config): {"wall_s", "peak_rss_mb", "objective"}} of the `dec_scale` record
    (config "default" or "search-free")."""
    return {(int(r["ues"]), r["config"]): {k: float(r[k]) for k in
                                            ("wall_s", "peak_rss_mb", "objective")}
            for r in load("dec_scale")}


@lru_cache(maxsize=None)
def values() -> dict[str, str]:
    """Every named value the pages quote, formatted as they quote it."""
    v: dict[str, str] = {}
    paper, small = dec_quality("paper"), dec_quality("small")
    gaps = {s: 100 * (d["decentralized"] / d["best"] - 1) for s, d in paper.items()}
    worst = max(gaps, key=gaps.get)
    bound = [100 * (d["best"] - d["decomposed-bound"]) / d["best"] for d in paper.values()]
    v["dec_paper_seeds"] = str(len(paper))
    v["dec_paper_median_gap"] = _pct(statistics.median(gaps.values()))
    v["dec_paper_max_gap"] = _pct(gaps[worst])
    v["dec_paper_worst_seed"] = worst
    v["dec_paper_cpu_max"] = f"{max(d['cpu:decentralized'] for d in paper.values()):.0f} s"
    v["dec_paper_cpu_min"] = f"{min(d['cpu:decentralized'] for d in paper.values()):.0f}"
    v["enum_paper_cpu_min_min"] = f"{min(d['cpu:ipopt-enum'] for d in paper.values()) / 60:.0f}"
    v["enum_paper_cpu_max_min"] = f"{max(d['cpu:ipopt-enum'] for d in paper.values()) / 60:.0f}"
    v["enum_best_everywhere"] = "every" if all(
        d["ipopt-enum"] == d["best"] for d in paper.values()) else "not every"
    v["dec_small_seeds"] = str(len(small))
    v["dec_small_max_gap"] = _pct(max(100 * (d["decentralized"] / d["best"] - 1)
                                      for d in small.values()))
    v["bound_median_gap"] = _pct(statistics.median(bound), False, 1)
    v["bound_max_gap"] = _pct(max(bound), False, 1)
    v["bound_min_gap"] = _pct(min(bound), False, 1)
    v["bound_options"] = ", ".join(dict.fromkeys(
        _options(r["options"]) for r in load("dec_quality") if r["method"] == "decomposed-bound"))
    v["dec_quality_commits"] = _commits(load("dec_quality"))
    mpi = _mpi()
    for n in (200, 1000):
        one, two = mpi[(n, 1)], mpi[(n, 2)]
        v[f"mpi_{n}_one_wall"] = f"{one['wall_s']:.1f} s"
        v[f"mpi_{n}_one_mem"] = f"{one['peak_rss_mb']:,.0f} MB"
        v[f"mpi_{n}_two_wall"] = f"{two['wall_s']:.1f} s"
        v[f"mpi_{n}_two_mem"] = f"{two['peak_rss_mb']:,.0f} MB"
        v[f"mpi_{n}_time_ratio"] = _ratio(two["wall_s"] / one["wall_s"])
        v[f"mpi_{n}_mem_ratio"] = _ratio(two["peak_rss_mb"] / one["peak_rss_mb"])
    big = mpi[(5000, 2)]
    v["mpi_5000_wall"] = f"{big['wall_s'] / 60:.1f} min"
    v["mpi_5000_mem"] = f"{big['peak_rss_mb'] / 1000:.1f} GB"
    v["mpi_commits"] = _commits(load("mpi_scale"))
    scale = _dec_scale()
    for n in (200, 1000):
        dflt, free = scale[(n, "default")], scale[(n, "search-free")]
        v[f"dec_{n}_wall"] = (f"{dflt['wall_s']:.1f} s" if dflt["wall_s"] < 600
                              else f"{dflt['wall_s'] / 60:.1f} min")
        v[f"dec_{n}_mem"] = f"{dflt['peak_rss_mb']:,.0f} MB"
        v[f"dec_{n}_below_free"] = _pct(100 * (1 - dflt["objective"] / free["objective"]),
                                        False, 1)
    v["dec_scale_commits"] = _commits([r for r in load("dec_scale")
                                       if r["config"] == "default"])
    ratios = [float(r["ratio_of_medians"]) for r in load("inner_cost")]
    v["inner_cost_range"] = f"{min(ratios):.2f}–{max(ratios):.2f}x"
    v["inner_cost_commits"] = _commits(load("inner_cost"))
    exp1 = sorted(load("exp1_energy"), key=lambda r: float(r["accuracy_pct"]))
    v["exp1_accuracies"] = " / ".join(f"{float(r['accuracy_pct']):.0f}" for r in exp1)
    v["exp1_savings"] = " / ".join(f"−{float(r['energy_saving_pct']):.1f}" for r in exp1) + " %"
    v["exp1_commits"] = _commits(exp1)
    flower = [r for r in load("flower") if "flower" in r["engine"]
              and r["per round, like for like"]]
    v["flower_ratio"] = _ratio(float(flower[0]["per round, like for like"]))
    v["flower_commits"] = _commits(load("flower"))
    return v


def _headline_rows(link: Callable[[str], str]) -> list[tuple[str, str, str]]:
    v = values()
    no_search = "`--set agg_passes=0 --set candidates=1 --set refine_rounds=0`"
    return [
        (f"`decentralized` vs best known, {v['dec_paper_seeds']} unseen `paper` seeds (T = 3)",
         f"median {v['dec_paper_median_gap']}, max {v['dec_paper_max_gap']} (seed "
         f"{v['dec_paper_worst_seed']}); {v['dec_paper_cpu_min']}–{v['dec_paper_cpu_max']} of "
         f"CPU ({link('decentralized')})", v["dec_quality_commits"]),
        (f"proven lower bound (`decomposed-bound`, {v['bound_options']}), same seeds",
         f"gap to best known: median {v['bound_median_gap']}, max {v['bound_max_gap']}",
         v["dec_quality_commits"]),
        (f"`decentralized` vs best known, {v['dec_small_seeds']} unseen `small` seeds (T = 2)",
         f"at most {v['dec_small_max_gap']}", v["dec_quality_commits"]),
        ("`decentralized` with its defaults (the search after the rounding included), 200 UEs "
         "/ 40 BSs / 10 DCs, reach 5",
         f"{v['dec_200_wall']}, {v['dec_200_mem']}, {v['dec_200_below_free']} below the "
         f"search-free run's objective (alone; {link('scale')})", v["dec_scale_commits"]),
        ("the same, 1,000 / 100 / 20, reach 5",
         f"{v['dec_1000_wall']}, {v['dec_1000_mem']}, {v['dec_1000_below_free']} below the "
         "search-free run's objective (alone)", v["dec_scale_commits"]),
        (f"`decentralized` without the search after the rounding ({no_search}), 200 UEs / "
         "40 BSs / 10 DCs, reach 5",
         f"feasible binary solution in {v['mpi_200_one_wall']}, {v['mpi_200_one_mem']} (alone; "
         f"{link('scale')})", v["mpi_commits"]),
        ("the same, 1,000 / 100 / 20, reach 5",
         f"feasible binary solution in {v['mpi_1000_one_wall']}, {v['mpi_1000_one_mem']} "
         "(alone)", v["mpi_commits"]),
        ("`mpiexec -n 2` vs one process, the same runs",
         f"the same objective bit for bit; {v['mpi_200_time_ratio']} the time at 200 UEs, "
         f"{v['mpi_1000_time_ratio']} at 1,000; largest rank {v['mpi_200_mem_ratio']} / "
         f"{v['mpi_1000_mem_ratio']} the memory; 5,000 / 500 / 50 on 2 ranks: "
         f"{v['mpi_5000_wall']}, {v['mpi_5000_mem']}", v["mpi_commits"]),
        ("decentralised / centralised cost per inner iteration, 20 to 1,000 UEs",
         f"{v['inner_cost_range']} (medians of 3)", v["inner_cost_commits"]),
        (f"CE-FL vs FedNova = FedAvg, energy to {v['exp1_accuracies']} % accuracy "
         "(Fashion-MNIST, seed 0)",
         f"{v['exp1_savings']} (paper: −17 to −43 %; {link('experiments')})",
         v["exp1_commits"]),
        ("Flower engine vs in-process trainer (25 DPUs)",
         f"identical models and curves; {v['flower_ratio']} per round like for like "
         f"({link('flower')})", v["flower_commits"]),
    ]


HEADLINE_RECORDS = ("dec_quality", "dec_scale", "exp1_energy", "flower", "inner_cost",
                    "mpi_scale")


def machines() -> str:
    """The machines of the headline's records, as a sentence."""
    names = dict.fromkeys(r["machine"] for name in HEADLINE_RECORDS for r in load(name))
    return "Machines: " + "; ".join(names) + "."


def headline(prefix: str) -> str:
    """The headline table; `prefix` is the path from the page to docs/results/."""
    def link(page: str) -> str:
        return f"[{page}]({prefix}{page}.md)"
    rows = ["| what | result | recorded at |", "|---|---|---|"]
    rows += [f"| {w} | {r} | {c} |" for w, r, c in _headline_rows(link)]
    return "\n".join(rows) + "\n\n" + machines() + "\n"


def limits() -> str:
    """The known limits, with their numbers from the records."""
    from cefl_opt.solvers.primal_dual import TUNED   # the default budget: one source
    v = values()
    return ("the search after the rounding that makes `decentralized` this close has a budget "
            f"of {TUNED.search_budget:g} times the relaxed phase's network passes "
            "(`search_budget`), so its cost grows "
            "with the network no faster than the relaxed phase's, and where the budget ends it "
            "the answer is still never worse than the search-free run's; with it, the default "
            f"`decentralized` takes {v['dec_200_wall']} at 200 UEs and {v['dec_1000_wall']} at "
            "1,000 (2 and 10 min aimed for); "
            f"`ipopt-enum` takes {v['enum_paper_cpu_min_min']}–{v['enum_paper_cpu_max_min']} "
            "min of CPU at paper size, spread over every core (`workers`); `--backend mpi` pays "
            f"from 200 UEs on ({v['mpi_200_time_ratio']} the time and "
            f"{v['mpi_200_mem_ratio']} the memory of one process with 2 ranks there), short of "
            "the 0.75x and 0.65x aimed for.\n")


def mpi_table() -> str:
    v = values()
    return "\n".join([
        "| size | one process | 2 ranks | time | memory (largest rank) |", "|---|---|---|---|---|",
        f"| 200 / 40 / 10 | {v['mpi_200_one_wall']}, {v['mpi_200_one_mem']} | "
        f"{v['mpi_200_two_wall']}, {v['mpi_200_two_mem']} | {v['mpi_200_time_ratio']} | "
        f"{v['mpi_200_mem_ratio']} |",
        f"| 1,000 / 100 / 20 | {v['mpi_1000_one_wall']}, {v['mpi_1000_one_mem']} | "
        f"{v['mpi_1000_two_wall']}, {v['mpi_1000_two_mem']} | {v['mpi_1000_time_ratio']} | "
        f"{v['mpi_1000_mem_ratio']} |",
        f"| 5,000 / 500 / 50 | | {v['mpi_5000_wall']}, {v['mpi_5000_mem']}; feasible | | |",
    ]) + "\n"


def dec_scale_table() -> str:
    """The `dec_scale` record as a table: the default `decentralized` and its search-free run
    per size."""
    rows = ["| UEs / BSs / DCs | seed | config | wall | peak RSS | objective | search stop | "
            "recorded at |", "|---|---|---|---|---|---|---|---|"]
    for r in load("dec_scale"):
        rows.append(f"| {int(r['ues']):,} / {r['bss']} / {r['dcs']} | {r['seed']} | "
                    f"{r['config']} | {float(r['wall_s']):.1f} s | "
                    f"{float(r['peak_rss_mb']):,.0f} MB | {float(r['objective']):.7f} | "
                    f"{r['search_stop'] or '–'} | `{r['commit']}` |")
    return "\n".join(rows) + "\n"


def _num(x: str, fmt: str) -> str:
    return format(float(x), fmt) if x else "–"


def dec_quality_table() -> str:
    """The `dec_quality` record per (preset, seed): each method's objective and gap to the
    best known (the least answer of the three), the proven bound and its gap, and each
    method's wall and CPU seconds."""
    rows = ["| preset, seed | " + " | ".join(f"`{m}` (gap)" for m in DEC_METHODS)
            + " | best known | bound (gap) | " + " | ".join(f"`{m}` s wall / CPU"
                                                          for m in DEC_METHODS) + " |",
            "|---|" + "---|" * (2 * len(DEC_METHODS) + 2)]
    seeds: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    for r in load("dec_quality"):
        seeds.setdefault((r["preset"], r["seed"]), {})[r["method"]] = r
    quality = {p: dec_quality(p) for p in dict.fromkeys(p for p, _ in seeds)}
    for (preset, seed), rec in seeds.items():
        best = quality[preset][seed]["best"]
        cells = [f"{float(rec[m]['objective']):.7f} "
                 f"({_pct(100 * (float(rec[m]['objective']) / best - 1), digits=3)})"
                 for m in DEC_METHODS]
        bound = rec.get("decomposed-bound")
        cells += [f"{best:.7f}", "–" if bound is None else
                  f"{float(bound['objective']):.7f} "
                  f"({_pct(100 * (best - float(bound['objective'])) / best, False, 2)})"]
        cells += [f"{float(rec[m]['wall_s']):.0f} / {float(rec[m]['cpu_s']):.0f}"
                  for m in DEC_METHODS]
        rows.append(f"| {preset} {seed} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def bound_table() -> str:
    """Per paper seed of the `dec_quality` record: the best known, the proven bound and its
    gap, its options, wall and CPU seconds and peak RSS, and the bound of the `dec_bound`
    record (an earlier one) with its gap to the same best known."""
    old = {r["preset, seed"]: float(r["bound (gap to it)"].split()[0]) for r in load("dec_bound")}
    quality = dec_quality("paper")
    rows = ["| seed | best known | bound (gap) | options | s wall / CPU | peak RSS MB | "
            f"bound at {_commits(load('dec_bound'))} (gap) |", "|---|---|---|---|---|---|---|"]
    for r in load("dec_quality"):
        if r["preset"] != "paper" or r["method"] != "decomposed-bound":
            continue
        best, b = quality[r["seed"]]["best"], float(r["objective"])
        was = old.get(f"paper {r['seed']}")
        then = "–" if was is None else f"{was:.4f} ({_pct(100 * (best - was) / best, False)})"
        gap = _pct(100 * (best - b) / best, False)
        rows.append(f"| {r['seed']} | {best:.7f} | {b:.7f} ({gap}) | {_options(r['options'])} | "
                    f"{float(r['wall_s']):.0f} / {float(r['cpu_s']):.0f} | "
                    f"{_num(r['peak_rss_mb'], '.0f')} | {then} |")
    return "\n".join(rows) + "\n"


def main_job_table() -> str:
    """The `main_job` record: each method of the last recorded `cefl-opt run` (the bound's
    row gives its proven bound), then the whole job's time and memory."""
    rows = ["| method | status | objective | gap % to best | gap % to the bound | wall s |",
            "|---|---|---|---|---|---|"]
    recs = load("main_job")
    for r in recs:
        obj = _num(r["objective"], ".7f") if r["objective"] else \
            f"bound {_num(r['bound'], '.7f')}"
        rows.append(f"| `{r['method']}` | {r['status']} | {obj} | "
                    f"{_num(r['gap_to_best_pct'], '.3f')} | {_num(r['gap_to_bound_pct'], '.2f')} "
                    f"| {_num(r['wall_s'], '.1f')} |")
    wall = float(recs[0]["job_wall_s"])
    return ("\n".join(rows) + f"\n\nThe whole job: {int(wall // 60)} min {wall % 60:.0f} s, its "
            f"largest process {float(recs[0]['job_peak_rss_mb']):,.0f} MB peak RSS; recorded "
            f"at {_commits(recs)} ({recs[0]['machine']}).\n")


CAMPAIGN_COLUMNS = ("instance", "regime", "N", "T", "method", "status", "bound_gap", "best",
                    "wall_s", "time_limit", "violations")


def campaign_report() -> str:
    """The `campaign` record (the shards of `python -m benchmarks.campaign`, their rows'
    `CAMPAIGN_COLUMNS`) as the campaign's own report (`benchmarks.campaign.report`), with its
    sizes and stamp."""
    import pandas as pd
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.campaign import report
    df = pd.read_csv(RECORDS / "campaign.csv", dtype={"instance": str, "violations": str})
    inst = df.groupby("instance").agg(N=("N", "first"), T=("T", "first"), best=("best", "first"))
    per_t = ", ".join(f"{t}: {k}" for t, k in inst["T"].value_counts().sort_index().items())
    stamp = df[["commit", "machine"]].drop_duplicates().to_dict("records")
    return (report(df) + f"\n\nSizes: {inst['N'].min()}–{inst['N'].max()} UEs (median "
            f"{inst['N'].median():g}); instances per T: {per_t}; "
            f"{int(inst['best'].notna().sum())} have a feasible point. Recorded at "
            f"{_commits(stamp)} ({stamp[0]['machine']}).\n")


def table(name: str) -> str:
    """Record `name` as a Markdown table: its columns as headed in the CSV, less the stamp;
    the commit per row where the rows' commits differ, and the commits and machines below."""
    recs = load(name)
    if not recs:
        raise ValueError(f"docs: record {name!r} has no rows")
    cols = [c for c in recs[0] if c not in STAMP]
    per_row = len({r["commit"] for r in recs}) > 1
    head = cols + (["recorded at"] if per_row else [])
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in recs:
        cells = [r[c] or "–" for c in cols] + ([f"`{r['commit']}`"] if per_row else [])
        rows.append("| " + " | ".join(cells) + " |")
    where = "; ".join(dict.fromkeys(r["machine"] for r in recs))
    stamp = "" if per_row else f" at {_commits(recs)}"
    return "\n".join(rows) + f"\n\nRecorded{stamp} ({where}).\n"


def cell(name: str, row: str, column: str) -> str:
    """One cell of record `name`: the row whose first column is `row`, the column `column`."""
    recs = load(name)
    first = next(iter(recs[0]))
    hits = [r for r in recs if r[first] == row]
    if len(hits) != 1 or column not in hits[0]:
        raise KeyError(f"docs: record {name!r} has no single row {row!r} with column {column!r}")
    return hits[0][column]


BLOCKS: dict[str, Callable[[], str]] = {
    "headline-readme": lambda: headline("docs/results/"),
    "headline": lambda: headline(""),
    "headline-home": lambda: headline("results/"),
    "mpi-scale": mpi_table,
    "dec-scale": dec_scale_table,
    "main-job": main_job_table,
    "dec-quality": dec_quality_table,
    "bound": bound_table,
    "limits": limits,
    "campaign": campaign_report,
}


def render(markdown: str) -> str:
    """`markdown` with every `[[rec:NAME]]` and every record block filled from the records."""
    def inline(m: re.Match) -> str:
        if m.group(1) not in values():
            raise KeyError(f"docs: unknown record value {m.group(1)!r}")
        return values()[m.group(1)]

    def block(m: re.Match) -> str:
        name = m.group(2)
        if name.startswith("table/") and (RECORDS / f"{name[6:]}.csv").is_file():
            return m.group(1) + table(name[6:]) + m.group(4)
        if name not in BLOCKS:
            raise KeyError(f"docs: unknown record block {name!r}")
        return m.group(1) + BLOCKS[name]() + m.group(4)
    markdown = CELL.sub(lambda m: cell(*m.groups()), BLOCK.sub(block, markdown))
    return INLINE.sub(inline, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' API
    return render(markdown)


MEASURED = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?\s?(?:%|(?:s|ms|min|h|KB|MB|GB|x)\b)"
                      r"|(?<![\w.])\d+\.\d+")
UNTYPED = (re.compile(r"<!-- record: [a-z0-9_/-]+ -->\n.*?<!-- /record -->", re.S),
           re.compile(r"```.*?```", re.S), re.compile(r"`[^`\n]*`"), re.compile(r"\]\([^)]*\)"),
           INLINE, CELL)


def typed_numbers(markdown: str) -> list[str]:
    """The measured-looking numbers typed into `markdown`: a decimal, or a number with a unit
    of time, memory, percent or ratio, outside the record blocks, the inline values, code and
    link targets. The README, the home page and the results pages have none: their numbers
    come from the records."""
    for pattern in UNTYPED:
        markdown = pattern.sub(" ", markdown)
    return MEASURED.findall(markdown)


def recorded_pages() -> list[Path]:
    """The pages whose every number comes from a record."""
    return ([ROOT / "README.md", ROOT / "docs" / "index.md"]
            + sorted((ROOT / "docs" / "results").glob("*.md")))


def pages() -> list[Path]:
    """The README and every documentation page."""
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def write_blocks() -> list[Path]:
    """Rewrite the record blocks of every page from the records; the pages that changed."""
    sys.path.insert(0, str(ROOT))
    from cefl_opt.io import write_atomic
    changed = []
    for path in pages():
        old = path.read_text(encoding="utf-8")
        new = BLOCK.sub(lambda m: render(m.group(0)), old)
        if new != old:
            write_atomic(path, new)
            changed.append(path)
    return changed


if __name__ == "__main__":
    changed = write_blocks()
    print("rewritten: " + ", ".join(str(p.relative_to(ROOT)) for p in changed) if changed
          else "every page already agrees with the records")
