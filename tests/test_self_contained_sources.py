"""The sources cite only what the repository holds: the paper's equation labels and the docs pages,
never an issue tracker's numbers or a formulation file outside the repository.

A clone of the repository has neither the tracker nor the formulation that the project started
from, so a comment that cites them explains nothing to its reader. The files checked are listed
by path pattern below; `CITATION` is the rule, `FILES` the part of the tree it covers.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# an issue number, the formulation file outside the repository, or one of its sections
CITATION = re.compile(r"\bissue #?\d+|\.\./shared|\bSPEC\s§|\bSPEC\.md", re.I)

FILES = ("cefl_opt/**/*.py", "solvers/*.py", "models/*.py", "benchmarks/*.py", "examples/*.py",
         "tests/*.py", "tests/mpi/*.py", "tools/*.py", "flower_app/*.toml", "docs/**/*.md",
         "docs/hooks/*.py", "README.md")


def _checked_files() -> list[Path]:
    return sorted({p for pattern in FILES for p in ROOT.glob(pattern) if p.is_file()})


def test_the_patterns_cover_the_files_they_name():
    files = {p.relative_to(ROOT).as_posix() for p in _checked_files()}
    for pattern in FILES:
        assert any(Path(f).match(pattern) or f == pattern for f in files), pattern
    assert "tests/test_self_contained_sources.py" in files          # this file checks itself


def test_sources_cite_no_issue_number_and_no_file_outside_the_repository():
    hits = [f"{p.relative_to(ROOT)}:{no}: {line.strip()}"
            for p in _checked_files()
            for no, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if CITATION.search(line)]
    assert hits == [], "\n".join(hits)


def test_the_rule_catches_each_kind_of_citation():
    """The rule is not vacuous: each kind of outside citation is caught, and the repository's
    own citations pass."""
    # (written in pieces, so that this file does not cite what it tests for)
    outside = ["# (issue" + " 12: the one-BS fixture)", '"""Issue' + ' 15, item 3."""',
               "see ../" + "shared/", "SPEC" + ".md", "(SPEC" + " §3, audit resolution)"]
    inside = ["(eq:delayAtDCdataCollect)", "Theorem 1's step-size condition",
              "docs/modelling.md, 'The ML term'", "Alg. 1", "an issue with the input"]
    assert all(CITATION.search(s) for s in outside)
    assert not any(CITATION.search(s) for s in inside)
