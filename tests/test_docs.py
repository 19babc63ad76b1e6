"""The documentation site builds with warnings as errors, and its generated reference pages
cover every command-line argument, every options field and every file-format field."""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import html
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook",
                                                  ROOT / "docs" / "hooks" / "reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def site(tmp_path_factory, worker_id) -> Path:
    """The site built once per test session: the xdist workers share one build (the first to
    take the lock builds it into a folder of its own and renames it into place; the others wait
    and read it)."""
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent   # this session's, all workers'
    out = shared / "docs-site"
    with open(shared / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_dir():
            part = Path(tempfile.mkdtemp(prefix="docs-site.", dir=shared))
            proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                                   "--site-dir", str(part)], cwd=ROOT, capture_output=True,
                                  text=True, timeout=600,
                                  env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            part.rename(out)
    return out


class _Loads(HTMLParser):
    """Every address an HTML page loads: the src of scripts, images, frames and media, the href
    of every <link>, and url(...) / @import in its <style> blocks and style attributes."""
    SRC = {"script", "img", "iframe", "source", "audio", "video", "embed", "track", "input"}

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self._style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in self.SRC and a.get("src"):
            self.urls.append(a["src"])
        if tag in {"img", "source"} and a.get("srcset"):
            self.urls += [part.split()[0] for part in a["srcset"].split(",") if part.strip()]
        if tag == "link" and a.get("href"):
            self.urls.append(a["href"])
        if tag == "object" and a.get("data"):
            self.urls.append(a["data"])
        self.urls += _css_loads(a.get("style") or "")
        self._style = tag == "style"

    def handle_endtag(self, tag):
        self._style = False

    def handle_data(self, data):
        if self._style:
            self.urls += _css_loads(data)


def _css_loads(css: str) -> list[str]:
    """The addresses that CSS text loads (url(...) and @import "...")."""
    urls = re.findall(r"""url\(\s*['"]?([^'")\s]+)""", css)
    return urls + re.findall(r"""@import\s+['"]([^'"]+)""", css)


def remote_loads(page_text: str, css: bool = False) -> list[str]:
    """The addresses on another host (a scheme or //) that an HTML page, or CSS text, loads."""
    if css:
        urls = _css_loads(page_text)
    else:
        parser = _Loads()
        parser.feed(page_text)
        urls = parser.urls
    return [u for u in urls if re.match(r"^([a-z][a-z0-9+.-]*:)?//", u, re.I)]


def _codes(page: Path) -> set[str]:
    """The text of every <code> element of a built page."""
    text = page.read_text(encoding="utf-8")
    return {html.unescape(re.sub(r"<[^>]+>", "", c)) for c in
            re.findall(r"<code[^>]*>(.*?)</code>", text, re.S)}


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    out = set()
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                out |= _option_strings(sub)
        elif not isinstance(a, argparse._HelpAction):
            out |= set(a.option_strings) or {a.metavar or a.dest}
    return out


def test_cli_reference_lists_every_argument(site):
    from cefl_opt.cli import build_parser
    codes = _codes(site / "cli" / "index.html")
    wanted = _option_strings(build_parser())
    assert len(wanted) > 50
    assert sorted(wanted - codes) == []


def test_options_reference_lists_every_field_and_flag(site):
    from cefl_opt.solvers.base import options_classes
    from cefl_opt.solvers.options import cli_fields, settable_fields
    codes = _codes(site / "options" / "index.html")
    page = (site / "options" / "index.html").read_text(encoding="utf-8")
    for method, cls in options_classes().items():
        assert method in codes
        assert f'id="{cls.__name__.lower()}"' in page, cls.__name__
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in codes]
        assert missing == [], (cls.__name__, missing)
        flags = {f.metadata.get("flag") or "--" + f.name.replace("_", "-") for f in cli_fields(cls)}
        assert not {fl for fl in flags if not any(c.startswith(fl) for c in codes)}, cls.__name__
        keys = {f"--set {f.name}=…" for f in settable_fields(cls)}   # every --set key
        assert sorted(keys - codes) == [], cls.__name__


def test_format_reference_lists_every_field(site):
    from cefl_opt import instance, solution
    codes = _codes(site / "formats" / "index.html")
    fields = set(getattr(instance, "FIELDS", {})) | set(instance.ARRAY_FIELDS) \
        | set(instance.SCALAR_FIELDS) | set(instance.CHOICE_FIELDS) | set(solution.ROUND_FIELDS)
    assert sorted(fields - codes) == []


def test_api_reference_documents_the_public_api(site):
    import cefl_opt
    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in cefl_opt.__all__:
        assert f'id="cefl_opt.{name}"' in page, name
    assert page.count('doc-section-title">Parameters') >= 5   # the functions' tables


def test_remote_loads_finds_what_a_page_loads_from_another_host():
    page = """<html><head>
      <link rel="preconnect" href="https://fonts.gstatic.com">
      <link rel="stylesheet" href="../assets/main.css">
      <script src="//cdn.example.org/mathjax.js"></script><script src="js/local.js"></script>
      <style>@import "https://fonts.example.org/roboto.css"; b {background: url('img/a.png')}</style>
      </head><body><a href="https://www.pyomo.org">a link loads nothing</a>
      <img src="http://img.example.org/x.png"><img src="local.png">
      <p style="background: url(https://bg.example.org/b.png)"></p></body></html>"""
    assert sorted(remote_loads(page)) == ["//cdn.example.org/mathjax.js",
                                          "http://img.example.org/x.png",
                                          "https://bg.example.org/b.png",
                                          "https://fonts.example.org/roboto.css",
                                          "https://fonts.gstatic.com"]
    assert remote_loads("<p><a href='https://x.org'>x</a><img src='a.png'></p>") == []
    assert remote_loads("@font-face{src:url(https://f.org/a.woff2)} a{b:url(c.png)}",
                        css=True) == ["https://f.org/a.woff2"]


def test_site_loads_nothing_from_another_host(site):
    bad = {}
    for path in sorted(site.rglob("*")):
        if path.suffix in {".html", ".css"}:
            found = remote_loads(path.read_text(encoding="utf-8", errors="replace"),
                                 css=path.suffix == ".css")
            if found:
                bad[str(path.relative_to(site))] = found
    assert bad == {}


def test_site_serves_its_math_renderer(site):
    """Every page loads MathJax from the site, and MathJax's fonts and TeX extensions are there
    (MathJax looks for them beside its script)."""
    mathjax = site / "javascripts" / "mathjax"
    assert (mathjax / "tex-mml-chtml.js").stat().st_size > 500_000
    assert len(list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))) > 20
    assert (mathjax / "input" / "tex" / "extensions").is_dir()
    formulation = (site / "formulation" / "index.html").read_text(encoding="utf-8")
    assert '<script src="../javascripts/mathjax/tex-mml-chtml.js"></script>' in formulation
    assert formulation.count('class="arithmatex"') > 100


def test_every_record_value_is_filled_in(site):
    left = [str(p.relative_to(site)) for p in site.rglob("*.html")
            if re.search(r"\[\[rec:[a-z0-9_]+\]\]", p.read_text(encoding="utf-8"))]
    assert left == []
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "recorded at" in home and "Machines:" in home      # the headline block, filled


def test_missing_math_renderer_fails_the_build_with_a_clear_error(monkeypatch, tmp_path):
    hook = _hook()
    monkeypatch.setattr(hook.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="MathJax is not installed.*make install"):
        hook.copy_mathjax(tmp_path)
    assert not (tmp_path / "javascripts").exists()


def test_check_descriptions_against_hand_values():
    from cefl_opt.solvers.options import at_least, in_interval, positive
    hook = _hook()
    assert hook.describe_check(at_least(1), None) == "≥ 1"
    assert hook.describe_check(positive, None) == "> 0"
    assert hook.describe_check(in_interval(0.0, 1.0, lo_open=True), None) == "in (0, 1]"
    assert hook.describe_check(in_interval(-2.0, 3.5, hi_open=True), None) == "in [-2, 3.5)"
    assert hook.describe_check(None, ("a", "b")) == "one of `a`, `b`"
    assert hook.describe_check(None, None) == ""


def test_unknown_marker_fails_the_build():
    hook = _hook()
    assert hook.render("text\n") == "text\n"
    with pytest.raises(KeyError, match="unknown generated block 'nope'"):
        hook.render("<!-- generated: nope -->\n")


def test_readme_is_short_and_self_contained():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert not re.search(r"\.\./shared", text)
    assert not re.search(r"\bissue \d+", text, re.I)
    assert not re.search(r"\bthis release\b", text, re.I)
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link


def test_results_pages_hold_tables_from_records():
    """Each results page shows at least one record (`docs/hooks/records.py` fills it and
    `tests/test_records.py` checks its stamp); the history pages keep their commit stamps."""
    for page in sorted((ROOT / "docs" / "results").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(r"<!-- record: [a-z0-9_/-]+ -->\n(.*?)<!-- /record -->", text, re.S)
        assert any(re.search(r"^\|.*\|$", b, re.M) for b in blocks), page.name
    for page in sorted((ROOT / "docs" / "history").glob("*.md")):
        assert re.search(r"`[0-9a-f]{7}`", page.read_text(encoding="utf-8")), page.name


def test_the_package_layout_is_made_once_and_remade_when_it_differs(tmp_path):
    """`lay_out_package` (run by every load of the hook: the docs build and these tests, at the
    same time under xdist) leaves a complete layout alone, so that a build reading it is not
    cut short, and remakes a layout that differs."""
    hook = _hook()
    dest = tmp_path / "api"
    hook.lay_out_package(dest=dest)
    links = hook._links_under(dest)
    assert links == hook._package_links(hook.ROOT)
    assert Path("cefl_opt/solvers/projections.py") in links       # a mapped sub-package
    assert not any("__pycache__" in str(p) for p in links)
    marker = dest / "cefl_opt" / "marker"       # not a link: ignored, and gone with a remake
    marker.write_text("")
    hook.lay_out_package(dest=dest)
    assert marker.exists()                                          # left alone
    (dest / "cefl_opt" / "io.py").unlink()
    hook.lay_out_package(dest=dest)
    assert hook._links_under(dest) == links and not marker.exists()  # remade
