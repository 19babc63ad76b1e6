"""The project's module graph: every import statement (module level, inside functions,
relative and absolute) of every module that pyproject's `package-dir` installs, read with `ast`.

* the graph has no cycle (an import inside a function may avoid a heavy optional dependency,
  never hide a cycle);
* no module imports another module's private name (`from X import _name`) or uses one as an
  attribute (`X._name`);
* no module reaches into `InnerSolver`'s private members (its collectives are public).

The checker itself is tested on a small package written here, with a cycle hidden inside a
function and a private import, so that it is known to find both."""
from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Import:
    """One imported name: `source` imports `name` from module `target` (line `line`)."""

    source: str
    target: str
    name: str | None        # None for `import X`
    line: int
    in_function: bool


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """{package: folder} from pyproject's [tool.setuptools] package-dir and packages."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = cfg.get("package-dir", {})
    return {p: root / dirs.get(p, p.replace(".", "/")) for p in cfg["packages"]}


def project_modules(packages: dict[str, Path]) -> dict[str, tuple[Path, bool]]:
    """{dotted module name: (file, is a package)} of every .py file directly in each package
    folder (sub-packages are listed packages of their own)."""
    mods = {}
    for pkg, folder in packages.items():
        for f in sorted(folder.glob("*.py")):
            is_pkg = f.stem == "__init__"
            mods[pkg if is_pkg else f"{pkg}.{f.stem}"] = (f, is_pkg)
    return mods


def _owner(name: str, mods) -> str | None:
    """The project module that `name` (a module or an attribute path) lives in, or None."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _from_base(node: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    """The absolute module of `from ... import` in `module` (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_pkg else module.split(".")[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports_in_functions(tree: ast.AST) -> set[int]:
    """ids of the import nodes that sit inside a function body."""
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(fn)
                          if isinstance(n, (ast.Import, ast.ImportFrom)))
    return inside


def imports(mods: dict[str, tuple[Path, bool]]) -> list[Import]:
    """Every import of a project module by a project module, wherever the statement is. An
    `import a.b.c` or `from a.b import c` counts as an import of the module named (`a.b.c`, or
    `a.b` when `c` is not a module), not of its parent packages."""
    out = []
    for module, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        in_fn = _imports_in_functions(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    target = _owner(a.name, mods)
                    if target:
                        out.append(Import(module, target, None, node.lineno, id(node) in in_fn))
            elif isinstance(node, ast.ImportFrom):
                base = _from_base(node, module, is_pkg)
                for a in node.names:
                    full = f"{base}.{a.name}"
                    target = full if full in mods else _owner(base, mods)
                    if target:
                        out.append(Import(module, target, a.name, node.lineno,
                                          id(node) in in_fn))
    return out


def module_graph(edges: list[Import]) -> nx.DiGraph:
    g = nx.DiGraph()
    for e in edges:
        if e.source != e.target:
            g.add_edge(e.source, e.target)
            g.edges[e.source, e.target].setdefault("at", []).append(e)
    return g


def cycles(g: nx.DiGraph, limit: int = 20) -> list[str]:
    """Up to `limit` cycles, each as its chain of imports with file lines."""
    found = []
    for cyc in nx.simple_cycles(g):
        steps = []
        for a, b in zip(cyc, cyc[1:] + cyc[:1]):
            e = g.edges[a, b]["at"][0]
            where = "in a function" if e.in_function else "module level"
            steps.append(f"{a} -> {b} (line {e.line}, {where})")
        found.append("; ".join(steps))
        if len(found) >= limit:
            break
    return found


def private_imports(edges: list[Import]) -> list[str]:
    """`from X import _name` across modules (dunders such as `__doc__` are not private)."""
    return [f"{e.source} line {e.line}: from {e.target} import {e.name}" for e in edges
            if e.name and e.name.startswith("_") and not e.name.startswith("__")
            and e.source != e.target]


def private_attributes(mods: dict[str, tuple[Path, bool]]) -> list[str]:
    """`module._name` in another module, where `module` is a project module bound by an import
    (`from . import isolation`, `import cefl_opt.io as cio`)."""
    bad = []
    for module, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        bound = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _from_base(node, module, is_pkg)
                bound.update({a.asname or a.name: f"{base}.{a.name}" for a in node.names
                              if f"{base}.{a.name}" in mods})
            elif isinstance(node, ast.Import):
                bound.update({a.asname: a.name for a in node.names if a.asname and a.name in mods})
        for n in ast.walk(tree):
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                    and bound.get(n.value.id, module) != module
                    and n.attr.startswith("_") and not n.attr.startswith("__")):
                bad.append(f"{module} line {n.lineno}: {n.value.id}.{n.attr}")
    return bad


@pytest.fixture(scope="module")
def project():
    mods = project_modules(package_dirs())
    return mods, imports(mods)


# ---------------------------------------------------------------------- the project
def test_the_graph_covers_every_installed_module_and_the_imports_inside_functions(project):
    mods, edges = project
    files = {p for folder in package_dirs().values() for p in folder.glob("*.py")}
    assert {f for f, _ in mods.values()} == files
    assert {"cefl_opt.solvers.base", "cefl_opt.models.problem", "cefl_opt.cli.solve",
            "cefl_opt.learning.trainer", "cefl_opt.system"} <= set(mods)
    # an import inside a function, relative and two levels up (`from ..solvers.options`), is read
    assert [e.in_function for e in edges if (e.source, e.target, e.name) == (
        "cefl_opt.cli.solve", "cefl_opt.solvers.options", "split_optional")] == [True]
    assert sum(e.in_function for e in edges) > 0 and sum(not e.in_function for e in edges) > 0


def test_the_module_graph_has_no_cycle(project):
    _mods, edges = project
    found = cycles(module_graph(edges))
    assert not found, "import cycles:\n" + "\n".join(found)


def test_no_private_name_is_imported_across_modules(project):
    _mods, edges = project
    bad = private_imports(edges)
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_no_module_uses_another_modules_private_name_as_an_attribute(project):
    mods, _edges = project
    bad = private_attributes(mods)
    assert not bad, "private names of other modules used:\n" + "\n".join(bad)


def _private_members(cls_node: ast.ClassDef) -> set[str]:
    """The class's `_name` methods and `self._name` attributes."""
    names = {n.name for n in cls_node.body if isinstance(n, ast.FunctionDef)}
    names |= {n.attr for n in ast.walk(cls_node) if isinstance(n, ast.Attribute)
              and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_no_module_reaches_into_the_inner_solvers_private_members(project):
    """`InnerSolver`'s collectives are public methods; other modules use no `_member` of it."""
    mods, _edges = project
    tree = ast.parse(mods["cefl_opt.solvers.primal_dual"][0].read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "InnerSolver")
    private = _private_members(cls)
    assert "_tree_sum" in private            # the scan sees the class's private members
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert {"global_max", "global_max_var", "global_sum", "global_sum_nodes",
            "nonzero_view"} <= methods
    bad = []
    for module, (path, _pkg) in mods.items():
        if module == "cefl_opt.solvers.primal_dual":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Attribute) and n.attr in private and not (
                    isinstance(n.value, ast.Name) and n.value.id == "self"):
                bad.append(f"{module} line {n.lineno}: .{n.attr}")
    assert not bad, "InnerSolver's private members used outside it:\n" + "\n".join(bad)


def test_moved_names_keep_their_old_import_paths():
    """Each name moved down to break a cycle is the same object at its old path."""
    from cefl_opt import association, solution, system, weights
    from cefl_opt.solvers import base, bound, centralized, errors, fixed_nlp, options, scip
    from cefl_opt.solvers import scip_interface as si
    assert system.weights_problem is weights.weights_problem
    assert system.WEIGHT_KEYS is weights.WEIGHT_KEYS
    assert solution.weights_problem is weights.weights_problem
    assert association.best_rate_uplink is system.best_rate_uplink
    assert association.best_rate_downlink is system.best_rate_downlink
    assert base.SolverError is errors.SolverError and options.OptionError is errors.OptionError
    assert issubclass(options.UnknownOptionError, errors.OptionError)
    assert centralized.FixedNLP is fixed_nlp.FixedNLP
    assert centralized.IPOPT_DEFAULTS is fixed_nlp.IPOPT_DEFAULTS
    assert scip.QuietScip is si.QuietScip is bound.QuietScip
    assert scip.scip_params is si.scip_params and scip.IPOPT_OPTIONS_FILE is si.IPOPT_OPTIONS_FILE


# ---------------------------------------------------------------------- the checker itself
def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


@pytest.fixture
def toy(tmp_path):
    """A package `toy` with sub-package `toy.sub` installed from folder `lib/`, as pyproject's
    package-dir does for models/ and solvers/."""
    _write(tmp_path, {
        "pyproject.toml": '[tool.setuptools]\npackage-dir = {"toy" = "toy", "toy.sub" = "lib"}\n'
                          'packages = ["toy", "toy.sub"]\n',
        "toy/__init__.py": "",
        "toy/low.py": "import numpy\n\ndef _hidden():\n    pass\n",
        "toy/high.py": "from . import low\n",
        "lib/__init__.py": "",
        "lib/a.py": "from ..high import low\n",
        "lib/b.py": "import toy.sub.a\n",
    })
    return tmp_path


def _toy_edges(root: Path) -> tuple[dict, list[Import]]:
    mods = project_modules(package_dirs(root))
    return mods, imports(mods)


def test_the_checker_reads_package_dir_and_resolves_imports(toy):
    mods, edges = _toy_edges(toy)
    assert set(mods) == {"toy", "toy.low", "toy.high", "toy.sub", "toy.sub.a", "toy.sub.b"}
    got = {(e.source, e.target, e.name) for e in edges}
    assert got == {("toy.high", "toy.low", "low"),            # `from . import low`: the module
                   ("toy.sub.a", "toy.high", "low"),          # an attribute of toy.high
                   ("toy.sub.b", "toy.sub.a", None)}          # numpy is not the project's
    assert not cycles(module_graph(edges)) and not private_imports(edges)


def test_the_checker_finds_a_cycle_hidden_inside_a_function(toy):
    _write(toy, {"toy/low.py": "def f():\n    from .high import low\n"})
    _mods, edges = _toy_edges(toy)
    found = cycles(module_graph(edges))
    assert len(found) == 1 and "toy.low -> toy.high (line 2, in a function)" in found[0]


def test_the_checker_finds_a_cycle_through_a_relative_import_two_levels_up(toy):
    _write(toy, {"toy/low.py": "import toy.sub.b\n"})
    _mods, edges = _toy_edges(toy)
    assert len(cycles(module_graph(edges))) == 1


def test_the_checker_finds_a_private_import_but_not_a_dunder(toy):
    _write(toy, {"toy/high.py": "from .low import _hidden\nfrom . import __doc__\n"})
    _mods, edges = _toy_edges(toy)
    assert private_imports(edges) == ["toy.high line 1: from toy.low import _hidden"]


def test_the_checker_finds_a_private_attribute_of_another_module_but_not_its_own(toy):
    _write(toy, {"toy/high.py": "from . import low\nimport toy.high as me\n"
                                "low._hidden()\nme._mine = 1\n"})
    mods, _edges = _toy_edges(toy)
    assert private_attributes(mods) == ["toy.high line 3: low._hidden"]
