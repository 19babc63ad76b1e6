"""Input files, output files, `run`'s argument checks and what reaches stderr, at their edges.

The one input opener (`cefl_opt.io.read_input`): every input (an instance, a solution, an
``--options`` file) must be a regular file within a size limit; a FIFO, a link to one or
/dev/zero is refused at once (exit 2) and never read; a byte that is not UTF-8 names the file
and the option. The one writer (`cefl_opt.io.write_all_atomic`): every output of every command,
siblings included, is written through symbolic links (dangling ones too); an implicit sibling
output never replaces an existing file without ``--overwrite``; a full disk names the output and
leaves no folder behind. `run` refuses bad arguments before any work. Libraries' own
diagnostics never precede the command's one line on stderr, and progress bars are drawn only
on a terminal unless asked for.
"""
from __future__ import annotations

import errno
import io
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cefl_opt import cli
from cefl_opt import io as cefl_io
from cefl_opt.generator import make_instance
from cefl_opt.io import InputError, read_input, write_all_atomic
from cefl_opt.learning.toy import toy_instance, toy_solution
from cefl_opt.system import reference_solution

FULL = os.strerror(errno.ENOSPC)
RUN = ["run", "--preset", "tiny", "--methods", "greedy-rate", "--skip-training",
       "--placeholder-constants"]


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root`: its type and its bytes (a regular file) or target (a link)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        body = (os.readlink(p) if stat.S_ISLNK(st.st_mode) else
                p.read_bytes() if stat.S_ISREG(st.st_mode) else None)
        out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), body)
    return out


def call(argv, capsys) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_error_line(err: str) -> str:
    """The one line a failure writes on stderr (no traceback, no library noise before it)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cefl-opt: error:"), err
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    tiny = make_instance("tiny", seed=0)
    tiny.save(d / "tiny.json")
    reference_solution(tiny).save(d / "tiny_sol.json")
    inst = toy_instance(N=3, B=2, S=2, T=2, D=80, seed=0)
    inst.save(d / "net.json")
    toy_solution(inst, gamma=2, m=0.3).save(d / "sol.json")
    return d


@pytest.fixture
def alarm():
    """A read that blocks fails the test after 60 s instead of hanging the suite."""
    def ring(*_):
        raise TimeoutError("blocked on an input file")
    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _mount_tmpfs(where: Path, *options: str) -> bool:
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(["size=64k", *options]),
                           "tmpfs", str(where)], capture_output=True)
    return proc.returncode == 0


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs filled to the last byte (needs root; skipped otherwise)."""
    full = tmp_path / "full"
    if os.geteuid() != 0 or not _mount_tmpfs(full):
        pytest.skip("mounting a tmpfs needs root")
    fd = os.open(full / "fill", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    yield full
    subprocess.run(["umount", str(full)], check=True)


@pytest.fixture
def read_only(tmp_path):
    """A folder this process cannot write: a read-only tmpfs as root, else mode 0555."""
    ro = tmp_path / "ro"
    if os.geteuid() == 0:
        if not _mount_tmpfs(ro, "ro"):
            pytest.skip("mounting a read-only tmpfs failed")
        yield ro
        subprocess.run(["umount", str(ro)], check=True)
    else:
        ro.mkdir()
        ro.chmod(0o555)
        yield ro
        ro.chmod(0o755)


# ---------------------------------------------------------------------- the one input opener
def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["fifo", "link to fifo", "dev zero", "socket", "folder"])
def test_options_file_must_be_a_regular_file(kind, files, tmp_path, capsys, alarm):
    """Refused at once (a FIFO is never opened for a blocking read, /dev/zero never read)."""
    if kind == "dev zero":
        path, said = Path("/dev/zero"), "a device node"
    elif kind == "socket":
        path, said = tmp_path / "sock", "a socket"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif kind == "folder":
        path, said = tmp_path / "d", "a folder"
        path.mkdir()
    else:
        path, said = _fifo(tmp_path / "fifo"), "a FIFO"
        if kind == "link to fifo":
            path = tmp_path / "to_fifo"
            path.symlink_to("fifo")
    before = snapshot(tmp_path)
    rc, _, err = call(["solve", files / "tiny.json", "--method", "greedy-rate", "--out",
                       tmp_path / "s.json", "--options", path], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"'{path}'" in line and "'--options'" in line and said in line, line
    assert snapshot(tmp_path) == before


def test_options_file_accepted_and_read(tmp_path):
    """The other branch: a regular options file is read and its value used."""
    from cefl_opt.solvers.base import method_spec
    from cefl_opt.solvers.options import load_options_file
    (tmp_path / "o.toml").write_text("time-limit = 7.5\n")
    cls = method_spec("greedy-rate").options_class()
    assert load_options_file(cls, str(tmp_path / "o.toml")) == {"time_limit": 7.5}


def test_instance_and_solution_must_be_regular_files(files, tmp_path, capsys, alarm):
    fifo = _fifo(tmp_path / "net.fifo")
    rc, _, err = call(["network", "show", fifo], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"instance file '{fifo}'" in line and "a FIFO" in line
    rc, _, err = call(["evaluate", files / "tiny.json", "/dev/zero"], capsys)
    line = one_error_line(err)
    assert rc == 2 and "solution file '/dev/zero'" in line and "a device node" in line


def test_size_limit_boundary(tmp_path):
    """At most `limit` bytes: `limit` is read whole, one byte more is refused naming both."""
    f = tmp_path / "o.toml"
    f.write_bytes(b"x" * 10)
    assert read_input(f, what="options", option="--options", limit=10) == b"x" * 10
    f.write_bytes(b"x" * 11)
    with pytest.raises(InputError, match=r"options file .*o\.toml' \(option '--options'\) is "
                                         r"too large \(11 bytes; at most 10\)"):
        read_input(f, what="options", option="--options", limit=10)


def test_options_file_over_the_limit_is_refused(files, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cefl_io, "MAX_OPTIONS_BYTES", 16)
    opts = tmp_path / "o.toml"
    opts.write_text("time_limit = 5.0\n")            # 17 bytes
    rc, _, err = call(["solve", files / "tiny.json", "--method", "greedy-rate", "--out",
                       tmp_path / "s.json", "--options", opts], capsys)
    line = one_error_line(err)
    assert rc == 2 and "too large" in line and "'--options'" in line and str(opts) in line
    opts.write_text("time_limit = 50\n")             # 16 bytes: read
    rc, _, err = call(["solve", files / "tiny.json", "--method", "greedy-rate", "--out",
                       tmp_path / "s.json", "--options", opts], capsys)
    assert rc == 0, err


def test_instance_over_the_limit_is_refused(files, capsys, monkeypatch):
    size = (files / "tiny.json").stat().st_size
    monkeypatch.setattr(cefl_io, "MAX_INPUT_BYTES", size - 1)
    rc, _, err = call(["network", "show", files / "tiny.json"], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"instance file '{files / 'tiny.json'}'" in line and "too large" in line
    monkeypatch.setattr(cefl_io, "MAX_INPUT_BYTES", size)
    rc, _, err = call(["network", "show", files / "tiny.json"], capsys)
    assert rc == 0, err


def test_non_utf8_inputs_name_the_file_and_the_option(files, tmp_path, capsys):
    opts = tmp_path / "o.toml"
    opts.write_bytes(b'name = "caf\xe9"\n')
    rc, _, err = call(["solve", files / "tiny.json", "--method", "greedy-rate", "--out",
                       tmp_path / "s.json", "--options", opts], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"'{opts}'" in line and "'--options'" in line and "UTF-8" in line
    assert "0xe9" in line
    net = tmp_path / "net.json"
    net.write_bytes((files / "tiny.json").read_bytes().replace(b'"tiny', b'"t\xffiny', 1))
    rc, _, err = call(["network", "show", net], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"instance file '{net}'" in line and "UTF-8" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json", "o.toml"]


@pytest.mark.parametrize("keys", [("time_limit", "time-limit"), ("time-limit", "TIME_LIMIT")])
def test_one_option_twice_in_a_file_is_refused(keys, files, tmp_path, capsys):
    opts = tmp_path / "o.toml"
    opts.write_text(f"{keys[0]} = 5.0\n{keys[1]} = 9.0\n")
    rc, _, err = call(["solve", files / "tiny.json", "--method", "greedy-rate", "--out",
                       tmp_path / "s.json", "--options", opts], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"'{keys[0]}'" in line and f"'{keys[1]}'" in line and "twice" in line
    assert not (tmp_path / "s.json").exists()
    opts.write_text(f"{keys[1]} = 9.0\n")             # once: accepted
    rc, _, err = call(["solve", files / "tiny.json", "--method", "greedy-rate", "--out",
                       tmp_path / "s.json", "--options", opts], capsys)
    assert rc == 0, err


# ---------------------------------------------------------------------- the one writer
def test_plot_writes_through_links(files, tmp_path, capsys):
    """A link to a file: the file is replaced, the link stays. A dangling link: its target is
    created, the link stays."""
    (tmp_path / "real.png").write_text("old")
    (tmp_path / "fig.png").symlink_to("real.png")
    rc, _, err = call(["plot", files / "tiny.json", files / "tiny_sol.json", "--out",
                       tmp_path / "fig.png", "--costs", tmp_path / "c.png"], capsys)
    assert rc == 0, err
    assert os.readlink(tmp_path / "fig.png") == "real.png"
    assert (tmp_path / "real.png").read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "sub").mkdir()
    (tmp_path / "dangling.png").symlink_to("sub/made.png")
    (tmp_path / "costs.svg").symlink_to("sub/costs_made.svg")
    rc, _, err = call(["plot", files / "tiny.json", files / "tiny_sol.json", "--out",
                       tmp_path / "dangling.png", "--costs", tmp_path / "costs.svg"], capsys)
    assert rc == 0, err
    assert os.readlink(tmp_path / "dangling.png") == "sub/made.png"
    assert os.readlink(tmp_path / "costs.svg") == "sub/costs_made.svg"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["costs_made.svg",
                                                                    "made.png"]
    assert (tmp_path / "sub" / "made.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_never_replaces_an_existing_default_costs_figure(files, tmp_path, capsys):
    (tmp_path / "fig_costs.png").write_text("mine")
    before = snapshot(tmp_path)
    rc, _, err = call(["plot", files / "tiny.json", files / "tiny_sol.json", "--out",
                       tmp_path / "fig.png"], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"'{tmp_path / 'fig_costs.png'}'" in line and "--overwrite" in line
    assert snapshot(tmp_path) == before                          # fig.png not written either
    rc, _, err = call(["plot", files / "tiny.json", files / "tiny_sol.json", "--out",
                       tmp_path / "fig.png", "--overwrite"], capsys)
    assert rc == 0, err
    assert (tmp_path / "fig_costs.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_replaces_an_explicit_costs_figure(files, tmp_path, capsys):
    """The file named by --costs is the user's explicit output: replaced as --out is."""
    (tmp_path / "c.png").write_text("old")
    rc, _, err = call(["plot", files / "tiny.json", files / "tiny_sol.json", "--out",
                       tmp_path / "fig.png", "--costs", tmp_path / "c.png"], capsys)
    assert rc == 0, err
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_train_never_replaces_an_existing_targets_table(files, tmp_path, capsys):
    (tmp_path / "t.targets.csv").write_text("mine")
    before = snapshot(tmp_path)
    argv = ["train", files / "net.json", files / "sol.json", "--dataset", "digits",
            "--train-rounds", "1", "--test-max", "50", "--out", tmp_path / "t.csv"]
    rc, _, err = call(argv, capsys)
    line = one_error_line(err)
    assert rc == 2 and f"'{tmp_path / 't.targets.csv'}'" in line and "--overwrite" in line
    assert snapshot(tmp_path) == before
    rc, _, err = call(argv + ["--overwrite", "--no-progress"], capsys)
    assert rc == 0, err
    assert (tmp_path / "t.targets.csv").read_text() != "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.targets.csv"]


def test_estimate_writes_out_and_apply_both_or_neither(files, tmp_path, capsys, monkeypatch):
    """--apply cannot be written: --out, staged first, is not written either (the success of
    both: tests/test_learning_cli.py)."""
    real_stage = cefl_io._stage

    def failing_stage(p, data):
        if p.name == "a.json":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(p))
        return real_stage(p, data)
    monkeypatch.setattr(cefl_io, "_stage", failing_stage)
    rc, _, err = call(["estimate", files / "net.json", "--dataset", "digits", "--draws", "2",
                       "--sample-size", "8", "--grad-max", "20", "--out", tmp_path / "e.json",
                       "--apply", tmp_path / "a.json"], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"cannot write '{tmp_path / 'a.json'}'" in line, line
    assert list(tmp_path.iterdir()) == []


def test_writer_removes_the_folders_it_made_on_failure(tmp_path):
    """The second output fails (its parent is a file): nothing committed, the folders made for
    the first are gone, the folders that existed stay."""
    (tmp_path / "keep").mkdir()
    (tmp_path / "file").write_text("a file")
    with pytest.raises(OSError) as e:
        write_all_atomic([(tmp_path / "keep" / "a" / "b" / "x.png", b"x"),
                          (tmp_path / "file" / "y.csv", "y")])
    assert str(tmp_path / "file" / "y.csv") in str(e.value)
    assert snapshot(tmp_path) == {"file": (stat.S_IFREG, b"a file"),
                                  "keep": (stat.S_IFDIR, None)}


class _FullDisk(io.RawIOBase):
    def writable(self):
        return True

    def write(self, b):
        raise OSError(errno.ENOSPC, FULL)


def _argv_full(kind: str, files: Path, root: Path) -> tuple[list, Path]:
    if kind == "plot":
        out = root / "a" / "b" / "fig.png"
        return ["plot", files / "tiny.json", files / "tiny_sol.json", "--out", out], out
    if kind == "run":              # the report file is named as in --out, not the staging folder
        return RUN + ["--out", root / "x" / "rep"], root / "x" / "rep" / "instance.json"
    out = root / "n1" / "n2" / "s.json"
    return ["solve", files / "tiny.json", "--method", "greedy-rate", "--out", out], out


@pytest.mark.parametrize("kind", ["plot", "solve", "run"])
def test_full_disk_simulated_names_the_output_and_leaves_no_folder(kind, files, tmp_path,
                                                                   capsys, monkeypatch):
    real = os.fdopen

    def fdopen(fd, mode="r", *a, **kw):        # every file under tmp_path is on a full disk
        if not os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)):
            return real(fd, mode, *a, **kw)
        os.close(fd)
        return io.BufferedWriter(_FullDisk())
    argv, out = _argv_full(kind, files, tmp_path)
    monkeypatch.setattr(cefl_io.os, "fdopen", fdopen)
    rc = cli.main([str(a) for a in argv])
    monkeypatch.undo()
    line = one_error_line(capsys.readouterr().err)
    assert rc == 2 and line == f"cefl-opt: error: cannot write '{out}': {FULL}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["plot", "solve", "run"])
def test_full_tmpfs_names_the_output_and_leaves_no_folder(kind, files, full_disk, capsys):
    argv, out = _argv_full(kind, files, full_disk)
    rc, _, err = call(argv, capsys)
    line = one_error_line(err)
    assert rc == 2 and line == f"cefl-opt: error: cannot write '{out}': {FULL}"
    assert [p.name for p in full_disk.iterdir()] == ["fill"]


# ---------------------------------------------------------------------- run: checks first
def test_run_refuses_a_method_named_twice_before_any_work(tmp_path, capsys):
    rc, _, err = call(["run", "--preset", "tiny", "--methods", "greedy-rate,fixed,greedy-rate",
                       "--skip-training", "--placeholder-constants", "--out",
                       tmp_path / "rep"], capsys)
    line = one_error_line(err)
    assert rc == 2 and "'--methods'" in line and "'greedy-rate'" in line and "once" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("out", [".", "..", "sub/.."])
def test_run_refuses_the_current_folder_or_an_ancestor(out, tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "keep.txt").write_text("mine")
    monkeypatch.chdir(work)
    before = snapshot(tmp_path)
    rc, _, err = call(RUN + ["--out", out, "--overwrite"], capsys)
    line = one_error_line(err)
    assert rc == 2 and "'--out'" in line and f"'{out}'" in line and "current folder" in line
    assert snapshot(tmp_path) == before


def test_run_refuses_an_out_that_holds_the_cache(tmp_path, capsys):
    rc, _, err = call(RUN + ["--out", tmp_path / "rep", "--cache-dir",
                             tmp_path / "rep" / "cache"], capsys)
    line = one_error_line(err)
    assert rc == 2 and "'--cache-dir'" in line and "'--out'" in line
    assert list(tmp_path.iterdir()) == []
    rc, _, err = call(RUN + ["--out", tmp_path / "rep", "--cache-dir", tmp_path / "cache"],
                      capsys)                                      # beside it: accepted
    assert rc == 0, err


def test_run_out_in_a_read_only_folder_says_not_writable(read_only, tmp_path, capsys):
    rc, _, err = call(RUN + ["--out", read_only / "rep"], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"'{read_only}' is not writable" in line and "created" not in line
    rc, _, err = call(RUN + ["--out", read_only / "a" / "rep"], capsys)
    line = one_error_line(err)
    assert rc == 2 and f"'{read_only / 'a'}' cannot be created" in line
    assert f"'{read_only}' is not writable" in line
    assert list(read_only.iterdir()) == []


# ---------------------------------------------------------------------- stderr
def test_progress_bars_only_on_a_terminal(monkeypatch):
    from cefl_opt.cli import build_parser, show_progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    argv = ["run", "--preset", "tiny"]
    parse = build_parser(["run"]).parse_args
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert show_progress(parse(argv), True) is False
    assert show_progress(parse(argv + ["--progress"]), True) is True
    monkeypatch.setattr(sys, "stderr", Tty())
    assert show_progress(parse(argv), True) is True
    assert show_progress(parse(argv + ["--no-progress"]), True) is False
    assert show_progress(parse(argv + ["--quiet"]), True) is False


def test_run_logs_one_line_per_phase_off_a_terminal(tmp_path, capsys):
    rc, out, err = call(RUN + ["--out", tmp_path / "rep"], capsys)
    assert rc == 0, err
    assert "\r" not in out + err
    assert any(line.startswith("[2/3] solving P with greedy-rate") for line in out.splitlines())


NOISY = """
import logging, sys, warnings
import numpy as np
from cefl_opt import cli
from cefl_opt.instance import Instance
from cefl_opt.io import InputError

def noisy(*a, **k):
    logging.getLogger("pyomo.core").warning("Setting Var 'x' to a numeric value `2` outside "
                                            "the bounds (0, 1).", extra={"id": "W1002"})
    np.log(np.zeros(1))                       # RuntimeWarning: divide by zero
    raise InputError("instance file 'x' is bad")

if sys.argv[1] == "outside":
    try:
        noisy()
    except InputError:
        pass
else:
    Instance.load = noisy
    sys.exit(cli.main(["network", "show", "x.json"]))
"""


def test_library_noise_never_precedes_the_error_line(tmp_path):
    """Pyomo's log and numpy's RuntimeWarnings raised during a command stay off stdout and
    stderr; the same calls outside the command line do reach them (the check can fail)."""
    import pyomo.environ  # noqa: F401  (Pyomo's log handler, as the commands have it)
    script = tmp_path / "noisy.py"
    script.write_text("import pyomo.environ\n" + NOISY)

    def run(where: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script), where], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
    outside = run("outside")
    assert "W1002" in outside.stdout + outside.stderr     # Pyomo's handler writes to stdout
    assert "RuntimeWarning" in outside.stderr
    inside = run("cli")
    assert inside.returncode == 2 and inside.stdout == ""
    assert inside.stderr == "cefl-opt: error: instance file 'x' is bad\n"


def test_scip_errors_go_into_the_message(files, tmp_path, capsys):
    pytest.importorskip("pyscipopt")
    opts = tmp_path / "o.toml"
    opts.write_text('[scip_options]\n"limits/time" = 1e308\n')
    proc = subprocess.run([str(Path(sys.executable).with_name("cefl-opt")), "solve",
                           str(files / "tiny.json"), "--method", "scip", "--out",
                           str(tmp_path / "s.json"), "--options", str(opts)],
                          capture_output=True, text=True, timeout=300)
    line = one_error_line(proc.stderr)
    assert proc.returncode == 2 and "limits/time" in line and "[0,1e+20]" in line, line
    assert "paramset.c" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.toml"]
