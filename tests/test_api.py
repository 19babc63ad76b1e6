"""The public API is one import, `docs/api.md` documents exactly it, every public function's
docstring has a parameter table matching its signature, and every example runs."""
from __future__ import annotations

import doctest
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cefl_opt

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {"make_instance", "solve", "evaluate", "build_problem", "methods", "Results",
          "Instance", "Solution", "Evaluation", "RoundDecision", "InstanceError",
          "InfeasibleInstance"}
FUNCTIONS = sorted(n for n in PUBLIC if inspect.isfunction(getattr(cefl_opt, n)))


def test_one_import_gives_the_public_api():
    from cefl_opt import (Instance, Results, Solution, build_problem, evaluate,  # noqa: F401
                          make_instance, methods, solve)
    from cefl_opt.generator import make_instance as home
    from cefl_opt.solvers.base import solve as solve_home
    assert make_instance is home and solve is solve_home
    assert set(cefl_opt.__all__) == PUBLIC
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cefl_opt.nope  # noqa: B018


def test_importing_the_package_loads_no_numerics():
    code = "import sys, cefl_opt; print(sorted({'numpy', 'pyomo'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"


def test_api_page_documents_exactly_the_public_api():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = re.findall(r"^::: cefl_opt\.(\w+)$", text, re.M)
    assert sorted(documented) == sorted(PUBLIC)


def test_models_package_exports_no_process_internals():
    import cefl_opt.models as models
    from cefl_opt.models import problem
    internals = {"build_node_rows", "drop_node_terms", "tie_pairs", "node_lifts",
                 "variable_owner_map", "constraint_host", "constraint_nodes", "EPIGRAPH_LEVELS"}
    assert not internals & set(models.__all__)
    assert all(callable(getattr(problem, n)) or n == "EPIGRAPH_LEVELS" for n in internals)
    assert {"build_problem", "node_blocks", "extract_solution", "load_solution"} <= set(
        models.__all__)


def args_section(doc: str) -> list[str]:
    """The parameter names of a Google-style docstring's `Args:` section."""
    m = re.search(r"^Args:\n((?:[ ]{4}.*\n|\n)+)", doc + "\n", re.M)
    if not m:
        return []
    return [re.sub(r"^\*+", "", name) for name in re.findall(r"^ {4}(\**\w+):", m.group(1), re.M)]


def test_args_section_is_read_from_hand_docstrings():
    doc = "Do it.\n\nArgs:\n    a: one.\n        more of a.\n    **kw: rest.\n\nReturns:\n    x\n"
    assert args_section(doc) == ["a", "kw"]
    assert args_section("No sections.") == []


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_documents_every_parameter(name):
    fn = getattr(cefl_opt, name)
    doc = inspect.getdoc(fn)
    assert args_section(doc) == list(inspect.signature(fn).parameters), name
    for section in ("Returns:", "Examples:"):
        assert f"\n{section}\n" in doc, (name, section)


def _examples(obj) -> list[doctest.DocTest]:
    tests = doctest.DocTestFinder(recurse=False).find(obj, obj.__name__, globs={})
    return [t for t in tests if t.examples]


@pytest.mark.parametrize("name", sorted(n for n in PUBLIC if _examples(getattr(cefl_opt, n))))
def test_example_runs(name):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in _examples(getattr(cefl_opt, name)):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_every_function_and_the_main_classes_have_an_example():
    with_examples = {n for n in PUBLIC if _examples(getattr(cefl_opt, n))}
    assert set(FUNCTIONS) | {"Instance", "Solution"} <= with_examples
