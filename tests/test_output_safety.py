"""Where the commands write and how they fail at the edges of the file system and the terminal.

Outputs: a FIFO, a device node or a socket given as an output (of any command, any output
option) is refused before any work with exit 2 and is left as it was; a symbolic link is written
through (the link stays, its target is replaced); a full disk names the output and leaves
nothing; JSON never carries NaN or Infinity. Streams: a closed stdout, a reader that went away
and an encoding that cannot show a name never give a traceback. `run`: an existing report
folder is refused unless --overwrite (then replaced whole), and report folders follow the umask.
"""
from __future__ import annotations

import errno
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cefl_opt import cli
from cefl_opt import io as cefl_io
from cefl_opt.generator import make_instance
from cefl_opt.io import InputError, NonFiniteOutput, write_atomic, write_json_atomic
from cefl_opt.learning.toy import toy_instance, toy_solution
from cefl_opt.solution import Solution
from cefl_opt.system import reference_solution

EXE = Path(sys.executable).with_name("cefl-opt")


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root`: its type, and its bytes for a regular file, its target for a
    link (a special file is never opened)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        kind = stat.S_IFMT(st.st_mode)
        body = (os.readlink(p) if stat.S_ISLNK(st.st_mode) else
                p.read_bytes() if stat.S_ISREG(st.st_mode) else st.st_rdev)
        out[str(p.relative_to(root))] = (kind, body)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    inst = toy_instance(N=3, B=2, S=2, T=2, D=80, seed=0)
    inst.save(d / "net.json")
    toy_solution(inst, gamma=2, m=0.3).save(d / "sol.json")
    tiny = make_instance("tiny", seed=0)
    tiny.save(d / "tiny.json")
    reference_solution(tiny).save(d / "tiny_sol.json")
    return d


def _cases(d: Path, net: Path, sol: Path, tiny: Path, tiny_sol: Path):
    """(argv, option, name) for every output option of every command; the output is d/name."""
    f = d / "out"
    return [
        (["network", "generate", "--preset", "tiny", "--out", f], "--out", "out"),
        (["solve", tiny, "--method", "greedy-rate", "--out", f], "--out", "out"),
        (["solve", tiny, "--method", "decentralized", "--out", d / "s.json", "--trace", f],
         "--trace", "out"),
        (["evaluate", tiny, tiny_sol, "--json", f], "--json", "out"),
        (["train", net, sol, "--dataset", "digits", "--out", f], "--out", "out"),
        (["train", net, sol, "--dataset", "digits", "--out", d / "h.csv"],
         "--out (targets table)", "h.targets.csv"),
        (["estimate", net, "--dataset", "digits", "--out", f], "--out", "out"),
        (["estimate", net, "--dataset", "digits", "--out", d / "e.json", "--apply", f],
         "--apply", "out"),
        (["run", "--preset", "tiny", "--out", f, "--skip-training",
          "--placeholder-constants"], "--out", "out"),
    ]


def _special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))   # a null device of our own
    elif kind == "socket":
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()


KINDS = ["fifo", "socket", pytest.param("device", marks=pytest.mark.skipif(
    os.geteuid() != 0, reason="mknod of a device node needs root"))]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("via_link", [False, True])
@pytest.mark.parametrize("case", range(9))
def test_special_file_as_output_is_refused_and_kept(case, kind, via_link, files, tmp_path,
                                                    capsys):
    """Exit 2 before any work, one line naming the option and the path, and the special file
    (and the link to it) exactly as before: nothing replaced, nothing left behind."""
    argv, option, name = _cases(tmp_path, files / "net.json", files / "sol.json",
                                files / "tiny.json", files / "tiny_sol.json")[case]
    if via_link:
        _special(kind, tmp_path / "special")
        (tmp_path / name).symlink_to("special")
    else:
        _special(kind, tmp_path / name)
    before = snapshot(tmp_path)
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cefl-opt: error:"), err
    assert "Traceback" not in err
    assert f"'{option}'" in err and str(tmp_path / name) in err, err
    if argv[0] == "run":                                  # a report folder, not a file
        assert "not a folder" in err
    else:
        assert {"fifo": "a FIFO", "device": "a device node", "socket": "a socket"}[kind] in err
    assert snapshot(tmp_path) == before


def test_write_atomic_refuses_special_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path / "to_fifo"):
        if target.name == "to_fifo":
            target.symlink_to(fifo)
        with pytest.raises(InputError, match="FIFO"):
            write_atomic(target, "x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "to_fifo"]


def test_symlink_output_is_written_through(tmp_path, capsys):
    """A link to a regular file: the file is replaced, the link stays a link to it. A link to a
    new path in an existing folder: the file is created there."""
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    assert cli.main(["network", "generate", "--preset", "tiny", "--out", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert json.loads(real.read_text())["format"] == "cefl-instance/2"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "sub" / "made.json")
    (tmp_path / "sub").mkdir()
    assert cli.main(["network", "generate", "--preset", "tiny", "--out", str(dangling)]) == 0
    assert dangling.is_symlink() and (tmp_path / "sub" / "made.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.json", "link.json",
                                                          "real.json", "sub"]
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["made.json"]


def test_symlink_to_a_folder_is_refused(tmp_path, capsys):
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to("dir")
    before = snapshot(tmp_path)
    assert cli.main(["network", "generate", "--preset", "tiny", "--out",
                     str(tmp_path / "link")]) == 2
    assert "folder" in capsys.readouterr().err
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------------- full disk, JSON
class _FullDisk(io.RawIOBase):
    def writable(self):
        return True

    def write(self, b):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_names_the_output_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    real_fdopen = os.fdopen

    def fdopen(fd, mode="r", *a, **kw):
        os.close(fd)
        raw = _FullDisk()
        return io.TextIOWrapper(io.BufferedWriter(raw)) if "b" not in mode else \
            io.BufferedWriter(raw)
    monkeypatch.setattr(cefl_io.os, "fdopen", fdopen)
    old = tmp_path / "net.json"
    old.write_text("keep me")
    rc = cli.main(["network", "generate", "--preset", "tiny", "--out", str(old)])
    monkeypatch.setattr(cefl_io.os, "fdopen", real_fdopen)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.strip() == (f"cefl-opt: error: cannot write '{old}': "
                           f"{os.strerror(errno.ENOSPC)}")
    assert snapshot(tmp_path) == {"net.json": (stat.S_IFREG, b"keep me")}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_json_output_never_carries_non_finite_numbers(tmp_path, bad):
    with pytest.raises(NonFiniteOutput, match="out.json"):
        write_json_atomic(tmp_path / "out.json", {"a": [1.0, {"b": bad}]})
    assert list(tmp_path.iterdir()) == []
    write_json_atomic(tmp_path / "ok.json", {"a": [1.0, 1e308]})       # finite: written
    assert json.loads((tmp_path / "ok.json").read_text()) == {"a": [1.0, 1e308]}


def test_solution_with_a_non_finite_objective_is_not_written(tmp_path):
    sol = reference_solution(make_instance("tiny", seed=0))
    for bad in (float("inf"), float("nan")):
        sol.objective = bad
        with pytest.raises(InputError, match="non-finite objective"):
            sol.save(tmp_path / "s.json")
    assert list(tmp_path.iterdir()) == []
    text = json.dumps(dict(reference_solution(make_instance("tiny", seed=0)).to_dict(),
                           objective=1e308 * 10))
    (tmp_path / "s.json").write_text(text)          # Python writes Infinity; reading refuses it
    with pytest.raises(InputError, match="'objective'.*finite"):
        Solution.load(tmp_path / "s.json")


# ---------------------------------------------------------------------- streams
def _cli(args, **kw):
    return subprocess.run([str(EXE), *map(str, args)], capture_output=kw.pop("capture", True),
                          text=True, timeout=300, **kw)


def test_closed_stdout_is_no_failure(files, tmp_path):
    """`cefl-opt ... >&-`: the command still works and writes its file; no traceback (a
    solver's captured output used to fail on the missing stream)."""
    for argv, out in ((["solve", files / "tiny.json", "--method", "greedy-rate", "--out",
                        tmp_path / "s.json"], tmp_path / "s.json"),
                      (["network", "generate", "--preset", "tiny", "--out", tmp_path / "n.json"],
                       tmp_path / "n.json")):
        p = subprocess.run([str(EXE), *map(str, argv)], stderr=subprocess.PIPE, text=True,
                           timeout=300, preexec_fn=lambda: os.close(1))
        assert p.returncode == 0, p.stderr
        assert "Traceback" not in p.stderr and "error" not in p.stderr
        assert out.is_file()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["n.json", "s.json"]


def test_reader_gone_ends_quietly_with_141(files, tmp_path):
    """`cefl-opt evaluate ... | head -1` once head has gone: no message, exit 141 (128 +
    SIGPIPE, as a shell reports a tool killed by SIGPIPE); nothing written."""
    for argv in (["evaluate", files / "tiny.json", files / "tiny_sol.json", "--json",
                  tmp_path / "e.json"], ["network", "show", files / "tiny.json"]):
        r, w = os.pipe()
        os.close(r)
        p = subprocess.run([str(EXE), *map(str, argv)], stdout=w, stderr=subprocess.PIPE,
                           text=True, timeout=300)
        os.close(w)
        assert p.returncode == 141 and p.stderr == "", p.stderr
    assert [x.name for x in tmp_path.iterdir()] in ([], ["e.json"])   # written before printing


def test_unencodable_names_are_escaped_not_fatal(tmp_path):
    inst = make_instance("tiny", seed=0)
    inst.name, inst.dc_names = "réseau-α", ["Zürich", "東京"]
    inst.save(tmp_path / "net.json")
    env = dict(os.environ, PYTHONIOENCODING="ascii")
    p = _cli(["network", "show", tmp_path / "net.json"], env=env)
    assert p.returncode == 0, p.stderr
    assert "r\\xe9seau-\\u03b1" in p.stdout and "Z\\xfcrich" in p.stdout
    assert "\\u6771\\u4eac" in p.stdout
    bad = tmp_path / "ré.json"                       # an error message with the name
    p = _cli(["network", "show", bad], env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith("cefl-opt: error: instance file") and "r\\xe9.json" in p.stderr


# ---------------------------------------------------------------------- run's report folder
RUN = ["run", "--preset", "tiny", "--rounds", "1", "--methods", "greedy-rate",
       "--skip-training", "--placeholder-constants"]


def test_run_refuses_an_existing_report_folder_unless_overwrite(tmp_path, capsys):
    rep = tmp_path / "rep"
    rep.mkdir()
    (rep / "stale.txt").write_text("from an old run")
    before = snapshot(tmp_path)
    assert cli.main(RUN + ["--out", str(rep)]) == 2
    err = capsys.readouterr().err
    assert "'--out'" in err and str(rep) in err and "--overwrite" in err
    assert snapshot(tmp_path) == before
    assert cli.main(RUN + ["--out", str(rep), "--overwrite"]) == 0, capsys.readouterr().err
    names = sorted(p.name for p in rep.iterdir())
    assert "stale.txt" not in names and "report.md" in names      # replaced whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]   # no staging folder left
    (tmp_path / "empty").mkdir()                                    # an empty folder is fine
    assert cli.main(RUN + ["--out", str(tmp_path / "empty")]) == 0
    assert "report.md" in [p.name for p in (tmp_path / "empty").iterdir()]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_run_report_folder_follows_the_umask(tmp_path, umask, capsys):
    old = os.umask(umask)
    try:
        assert cli.main(RUN + ["--out", str(tmp_path / "a" / "rep")]) == 0
    finally:
        os.umask(old)
    for p in (tmp_path / "a", tmp_path / "a" / "rep"):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o777 & ~umask, p
    for f in (tmp_path / "a" / "rep").iterdir():
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o666 & ~umask, f


# ---------------------------------------------------------------------- reading
def test_duplicate_json_keys_are_refused(files, tmp_path, capsys):
    text = (files / "tiny.json").read_text()
    dup = text.replace('"xi1":', '"xi1": 5.0, "xi1":', 1)
    assert dup != text
    (tmp_path / "net.json").write_text(dup)
    sol = json.loads((files / "tiny_sol.json").read_text())
    sol_text = json.dumps(sol).replace('"aggregator": 0', '"aggregator": 1, "aggregator": 0', 1)
    (tmp_path / "sol.json").write_text(sol_text)
    before = snapshot(tmp_path)
    for argv, name, what in ((["network", "show", tmp_path / "net.json"], "xi1", "net.json"),
                             (["evaluate", files / "tiny.json", tmp_path / "sol.json"],
                              "aggregator", "sol.json")):
        assert cli.main([str(a) for a in argv]) == 2
        err = capsys.readouterr().err
        assert f"'{name}'" in err and what in err and "twice" in err, err
    assert snapshot(tmp_path) == before


def test_folder_as_input_says_folder(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    assert cli.main(["network", "show", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert f"'{tmp_path / 'd'}' is a folder" in err and "does not exist" not in err
    assert cli.main(["network", "show", str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_deep_nesting_message_uses_the_right_article(tmp_path, capsys):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert cli.main(["network", "show", str(tmp_path / "deep.json")]) == 2
    err = capsys.readouterr().err
    assert "to be an instance" in err and "a instance" not in err
