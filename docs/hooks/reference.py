"""MkDocs hook: the reference pages are generated from the code at build time.

A page holds a marker line `<!-- generated: NAME -->`; this hook replaces it with the table that
NAME's generator writes from the code itself, so the pages follow the code without a generated
file in the repository:

* `cli`: every command of `cefl_opt.cli.build_parser()`, its usage and every argument;
* `methods`: the registered solve methods (`cefl_opt.solvers.base.methods()`);
* `options`: every field of every options dataclass (`cefl_opt.solvers.base.options_classes()`,
  declared in `solvers/options.py`) with its type, default, check, flag and documentation;
* `instance-fields`, `solution-fields`: the fields of the file formats
  (`cefl_opt.instance`, `cefl_opt.solution`) with their shapes, checks and units.

An unknown marker, or a generator that fails, fails the build.

The site renders its formulas offline: `on_post_build` copies MathJax 3 (the static files of
the dev extra's `django-static-mathjax`) into `javascripts/mathjax/`, and the theme loads no
fonts from another host (`theme.font: false` in mkdocs.yml).

The package's folders do not nest as its modules do (`pyproject.toml`'s package-dir puts
`cefl_opt.models` in `models/` and `cefl_opt.solvers` in `solvers/`), so mkdocstrings could not
find them by path. `lay_out_package()` builds the installed layout from links under
`build/docs-api/` when this hook is loaded, and mkdocs.yml points the handler there.
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import importlib.util
import inspect
import os
import re
import shutil
import typing
from pathlib import Path
from typing import Any, Callable

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, vendored by pip
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
API_DIR = ROOT / "build" / "docs-api"
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


# ---------------------------------------------------------------------- helpers
def _cell(text: Any) -> str:
    """Text for one cell of a Markdown table: pipes escaped outside code spans (inside one,
    the table extension reads them literally)."""
    parts = " ".join(str(text).split()).split("`")
    return "`".join(p if k % 2 else p.replace("|", "\\|") for k, p in enumerate(parts))


def _code(text: Any) -> str:
    return f"`{text}`" if str(text) else ""


def _table(head: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------- command line
def _arg_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if getattr(action, "use", None):   # a deprecated flag (cefl_opt.cli.Deprecated)
        return f"deprecated: use `{action.use}`"
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)  # expands %(default)s and the like


def _arg_default(action: argparse.Action) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return ""
    d = action.default
    if d is None or d is argparse.SUPPRESS:
        return ""
    return _code(d)


def _arg_name(action: argparse.Action) -> str:
    if not action.option_strings:
        return _code(action.metavar or action.dest)
    names = " ".join(_code(o) for o in action.option_strings)
    takes_value = action.nargs != 0 and not isinstance(action, argparse.BooleanOptionalAction)
    if takes_value:
        metavar = action.metavar or (
            "{" + ",".join(map(str, action.choices)) + "}" if action.choices
            else action.dest.upper())
        names += f" {_code(metavar)}"
    return names


def _subcommands(parser: argparse.ArgumentParser):
    """(name, help, sub-parser) of each sub-command of `parser`, in declaration order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _prose(text: str, raw: bool) -> list[str]:
    """A parser's description as Markdown: paragraphs joined into lines, except, under a raw
    formatter, paragraphs laid out with indented lines (kept as a text block)."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text.strip()):
        lines = para.splitlines()
        if raw and any(line.startswith(" ") for line in lines):
            out += ["```text", para, "```", ""]
        else:
            out += [" ".join(line.strip() for line in lines), ""]
    return out


def _command_section(words: list[str], help_: str, parser: argparse.ArgumentParser,
                     level: int) -> list[str]:
    out = [f"{'#' * level} `{' '.join(words)}`", ""]
    desc = parser.description or ""
    if help_ and not desc.lower().startswith(help_.lower()):
        out += [help_[0].upper() + help_[1:] + ".", ""]
    raw = issubclass(parser.formatter_class, argparse.RawDescriptionHelpFormatter)
    if desc:
        out += _prose(desc, raw)
    subs = list(_subcommands(parser))
    if not subs:
        usage = parser.format_usage().strip().removeprefix("usage: ")
        out += ["```text", usage, "```", ""]
        rows = [[_arg_name(a), _arg_default(a), _arg_help(parser, a)] for a in parser._actions
                if not isinstance(a, argparse._HelpAction)]
        if rows:
            out += [_table(["argument", "default", "meaning"], rows), ""]
        if parser.epilog:
            out += _prose(parser.epilog, raw)
    for name, sub_help, sub in subs:
        out += _command_section(words + [name], sub_help or "", sub, level + 1)
    return out


def gen_cli() -> str:
    from cefl_opt.cli import build_parser
    parser = build_parser()
    out = [parser.description or "", ""]
    for name, help_, sub in _subcommands(parser):
        out += _command_section([parser.prog, name], help_ or "", sub, 2)
    return "\n".join(out)


# ---------------------------------------------------------------------- solve methods and options
def gen_methods() -> str:
    from cefl_opt.solvers.base import methods, options_classes
    classes = options_classes()
    rows = [[_code(name), f"[`{classes[name].__name__}`](#{classes[name].__name__.lower()})", doc]
            for name, doc in methods().items()]
    return _table(["method", "options", "what it does"], rows)


def describe_check(check: Callable | None, choices: tuple | None) -> str:
    """A check function of `solvers/options.py` in words (closures are read for their
    parameters; an unknown check is named by its function)."""
    if choices:
        return "one of " + ", ".join(f"`{c}`" for c in choices)
    if check is None:
        return ""
    owner = check.__qualname__.split(".<locals>")[0]
    cells = dict(zip(check.__code__.co_freevars, (c.cell_contents for c in check.__closure__ or ())))
    from cefl_opt.solvers.options import _num
    if owner == "at_least":
        return f"≥ {_num(cells['lo'])}"
    if owner == "in_interval":
        lo = "(" if cells.get("lo_open") else "["
        hi = ")" if cells.get("hi_open") else "]"
        return f"in {lo}{_num(cells['lo'])}, {_num(cells['hi'])}{hi}"
    if owner == "positive":
        return "> 0"
    doc = inspect.getdoc(check)
    return doc.splitlines()[0] if doc else f"see `{owner}` in `solvers/options.py`"


def _type_name(hint: Any) -> str:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args and len(args) < len(typing.get_args(hint)):
        return " | ".join(getattr(a, "__name__", str(a)) for a in args) + " | None"
    return getattr(hint, "__name__", str(hint))


def _how_set(cls: type, f: dataclasses.Field, hints: dict) -> str:
    """How the command line sets field `f`: its flag (and `--set`), `--set` only, the
    `--options` file only, or the command-level display switch."""
    from cefl_opt.solvers.options import _flag, cli_fields
    meta = f.metadata
    if meta.get("display"):
        return "display switch: `--progress` / `--no-progress`"
    if not meta.get("cli", True):
        return "`--options FILE` (a TOML table) or Python"
    set_ = f"`--set {f.name}=…`"
    if f.name in {g.name for g in cli_fields(cls)}:
        flag = _flag(f)
        if _type_name(hints[f.name]).startswith("bool"):
            flag = f"{flag} / --no-{flag[2:]}"
        return f"`{flag}`, {set_}"
    return set_


def options_rows(cls: type, fields: list[dataclasses.Field]) -> list[list[str]]:
    from cefl_opt.solvers.options import default_text
    hints = typing.get_type_hints(cls)
    rows = []
    for f in fields:
        meta = f.metadata
        rows.append([_code(f.name), _code(_type_name(hints[f.name])), _code(default_text(f)),
                     describe_check(meta.get("check"), meta.get("choices")),
                     _how_set(cls, f, hints), meta.get("doc", "")])
    return rows


def gen_options() -> str:
    """Each options class's fields in the groups of `--list-options` (`option_groups`), with
    their actual defaults (`default_text`), then the display switch every class has."""
    from cefl_opt.solvers.base import options_classes
    from cefl_opt.solvers.options import option_groups
    by_class: dict[type, list[str]] = {}
    for method, cls in options_classes().items():
        by_class.setdefault(cls, []).append(method)
    head = ["field", "type", "default", "check", "command line", "meaning"]
    out = []
    for cls, meths in by_class.items():
        out += [f"### `{cls.__name__}`", "",
                "Methods: " + ", ".join(f"`{m}`" for m in meths) + ".", ""]
        doc = inspect.getdoc(cls)
        if doc and not doc.startswith(cls.__name__ + "("):  # not the dataclass signature
            out += [doc, ""]
        for group, fields in option_groups(cls):
            out += [f"**{group[0].upper() + group[1:]}**", "",
                    _table(head, options_rows(cls, fields)), ""]
        display = [f for f in dataclasses.fields(cls) if f.metadata.get("display")]
        if display:
            out += ["**Display**", "", _table(head, options_rows(cls, display)), ""]
    return "\n".join(out)


# ---------------------------------------------------------------------- file formats
SHAPE_WORDS = {"T": "rounds", "N": "UEs", "B": "BSs", "S": "DCs", "I": "DPUs (UEs, then DCs)",
               "K": "6 energy parts"}


def _source_comments(module) -> dict[str, str]:
    """{field name: trailing comment} of the field tables in `module`'s source."""
    out = {}
    for line in inspect.getsource(module).splitlines():
        m = re.match(r'\s*"(\w+)":.*#\s*(.+)$', line)
        if m:
            out.setdefault(m.group(1), m.group(2).strip())
    return out


def _shape(shape: str) -> str:
    if not shape:
        return "scalar"
    letters = re.findall(r"K6|[TNBSI]", shape)
    return "[" + ", ".join("6" if x == "K6" else x for x in letters) + "]"


def gen_instance_fields() -> str:
    from cefl_opt import instance as mod
    comments = _source_comments(mod)
    kind_text = mod._KIND_TEXT
    specs = getattr(mod, "FIELDS", None)  # name -> spec with shape, kind, lo, hi, unit
    defaults = {f.name: f.default for f in dataclasses.fields(mod.Instance)}
    rows = []
    names = list(specs) if specs else list(mod.ARRAY_FIELDS) + list(mod.SCALAR_FIELDS)
    for name in names:
        if specs:
            spec = specs[name]
            shape, kind = spec.shape, spec.kind
            rng = f"{spec.lo:g} to {spec.hi:g}" if hasattr(spec, "lo") else ""
            unit = getattr(spec, "unit", "")
        else:
            shape, kind = mod.ARRAY_FIELDS.get(name, ("", mod.SCALAR_FIELDS.get(name)))
            rng, unit = "", ""
        d = defaults.get(name, dataclasses.MISSING)
        default = "" if shape or d is dataclasses.MISSING else _code(f"{d:g}")
        row = [_code(name), _shape(shape), kind_text.get(kind, kind)]
        if specs and hasattr(specs[name], "lo"):
            row += [rng, unit]
        rows.append(row + [default, comments.get(name, "")])
    head = ["field", "shape", "values"]
    if specs and all(hasattr(s, "lo") for s in specs.values()):
        head += ["range of nonzero entries", "unit"]
    head += ["default (`Instance`)", "meaning"]
    choice_rows = [[_code(k), "string", "one of " + ", ".join(f"`{c}`" for c in v),
                    *([""] * (len(head) - 5)), _code(defaults.get(k, "")),
                    comments.get(k, "")] for k, v in mod.CHOICE_FIELDS.items()]
    letters = ", ".join(f"{k} {v}" for k, v in SHAPE_WORDS.items())
    return "\n".join([f"Format tag `{mod.FORMAT_TAG}`. Shape letters: {letters}.", "",
                      _table(head, rows + choice_rows), "",
                      "Descriptive fields (not used by P's equations): "
                      + ", ".join(f"`{k}`" for k in mod.META_FIELDS) + "."])


#: What each decision of a round means (the variables of formulation.md, '2. Variables'; the units
#: are the file's, SI).
ROUND_MEANINGS = {
    "rho_nb": "share of UE n's data offloaded to BS b, \\(\\rho_{n,b}\\in[0,1]\\), "
              "\\(\\sum_b \\rho_{n,b}\\le 1\\) (0 on absent links)",
    "rho_bs": "share of BS b's collected data sent to DC s, \\(\\sum_s \\rho_{b,s}=1\\)",
    "f": "UE CPU frequency, Hz, in [f_min, f_max]",
    "z": "DC per-machine speed, data points/s, in [z_floor C, C]",
    "gamma_ue": "local SGD iterations of each UE, in [gamma_min, gamma_max] (relaxed to reals)",
    "gamma_dc": "local SGD iterations of each DC",
    "m_ue": "mini-batch ratio of each UE, in [m_floor, 1]",
    "m_dc": "mini-batch ratio of each DC",
    "uplink_bs": "the BS b with \\(I_{n,b}=1\\): UE n uploads its gradient through it",
    "downlink_bs": "the BS b with \\(I_{b,n}=1\\): UE n receives the global model from it",
    "R_bs": "deployed BS->DC rate, bit/s, in [R_floor, Rmax_bs], "
            "\\(\\sum_b R_{b,s}\\le R^{max}_s\\)",
    "aggregator": "the DC s with \\(I_s=1\\) (the round's aggregation point)",
}


def gen_solution_fields() -> str:
    from cefl_opt import solution as mod
    rows = [[_code(k), _shape(shape), dtype.__name__, ROUND_MEANINGS.get(k, "")]
            for k, (shape, dtype) in mod.ROUND_FIELDS.items()]
    rows.append([_code("aggregator"), "scalar", "int", ROUND_MEANINGS["aggregator"]])
    return "\n".join([f"Format tag `{mod.FORMAT_TAG}`. Each entry of `rounds` holds:", "",
                      _table(["field", "shape", "type", "meaning"], rows)])


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": gen_cli, "methods": gen_methods, "options": gen_options,
    "instance-fields": gen_instance_fields, "solution-fields": gen_solution_fields,
}


def render(markdown: str) -> str:
    """`markdown` with every marker replaced by its generated text."""
    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise KeyError(f"docs: unknown generated block {name!r}")
        return GENERATORS[name]()
    return MARKER.sub(sub, markdown)


def lay_out_package(root: Path = ROOT, dest: Path = API_DIR) -> None:
    """Under `dest`, each package of pyproject.toml's package-dir at its import path: a folder
    per package whose files are links to the sources (sub-packages mapped elsewhere become
    links to their own folders). Under a lock, and left alone when already laid out: the docs
    build and the tests that load this hook may do it at the same time."""
    links = _package_links(root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _links_under(dest) == links:
            return
        if dest.exists():
            shutil.rmtree(dest)
        for rel, src in links.items():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).symlink_to(src)


def _package_links(root: Path) -> dict[Path, Path]:
    """The layout `lay_out_package` makes: link path (relative) -> source."""
    setup = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setup["package-dir"]
    links: dict[Path, Path] = {}
    for pkg in sorted(mapping, key=lambda p: p.count(".")):
        target = Path(*pkg.split("."))
        for src in sorted((root / mapping[pkg]).iterdir()):
            if src.name == "__pycache__" or f"{pkg}.{src.name}" in mapping:
                continue
            links.setdefault(target / src.name, src)
    return links


def _links_under(dest: Path) -> dict[Path, Path]:
    """Every link under `dest` (not followed) -> its target."""
    out: dict[Path, Path] = {}
    for top, dirs, files in os.walk(dest):
        for name in dirs + files:
            path = Path(top) / name
            if path.is_symlink():
                out[path.relative_to(dest)] = Path(os.readlink(path))
    return out


#: The parts of MathJax's es5 folder the site does not need: the speech engine, the SVG and
#: MathML-only combined components and the Node entry point.
MATHJAX_SKIP = ("sre", "svg", "*-svg.js", "*-full*.js", "mml-chtml.js", "node-main.js")


def mathjax_source() -> Path:
    """MathJax 3's es5 folder as installed by the `django-static-mathjax` package; a clear
    error when it is absent (the site would show raw TeX)."""
    spec = importlib.util.find_spec("mathjax")
    es5 = Path(spec.origin).parent / "static" / "mathjax" / "es5" if spec and spec.origin else None
    if es5 is None or not (es5 / "tex-mml-chtml.js").is_file():
        raise FileNotFoundError("docs: MathJax is not installed (the dev extra's "
                                "django-static-mathjax); run `make install`")
    return es5


def copy_mathjax(site_dir: Path) -> Path:
    """MathJax's combined TeX component, its extensions and its CHTML fonts under
    `site_dir/javascripts/mathjax/`, where mkdocs.yml's extra_javascript loads it."""
    dest = site_dir / "javascripts" / "mathjax"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(mathjax_source(), dest, ignore=shutil.ignore_patterns(*MATHJAX_SKIP))
    return dest


lay_out_package()


def on_post_build(config) -> None:  # MkDocs' API
    copy_mathjax(Path(config["site_dir"]))


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' API
    return render(markdown)
