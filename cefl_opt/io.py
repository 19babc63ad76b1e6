"""The one place where cefl-opt reads input files and writes output files.

* :class:`InputError`: bad input from a user (a file, an option, an argument of the Python API).
  Its message names the field or option and the value. The command line turns it into exit
  status 2 and one line on stderr; ``InstanceError``, the solution format's errors and option
  errors derive from it.
* :func:`read_input` (and :func:`read_input_text`): the one opener of every input file
  (instances, solutions, ``--options`` files). The file must be a regular file (a FIFO, a
  device node such as /dev/zero, a socket, or a link to one, is refused at once, never read)
  of at most a size limit; its messages name the file and the option that gave it.
* :func:`read_json`: JSON with the failures of hostile files turned into ``InputError``
  (nesting too deep, integer literals too large for a float, not UTF-8, not JSON).
* :func:`write_all_atomic` (one output: :func:`write_atomic`, and its wrappers for JSON, CSV
  and PNG): the one writer of every output. Each output is written to a temporary file in the
  target folder and renamed over the target, so a reader never sees a partly written file; a
  failure names the output and leaves nothing behind (no temporary file, no folder it made).
  JSON output never carries NaN or Infinity (:class:`NonFiniteOutput`, a bug when it happens).
* :func:`check_writable`, :func:`check_distinct` and :func:`check_new`: the checks the
  commands run on an output path before any work (:func:`check_new`: an output the user did
  not name, written beside one they did, never replaces an existing file unless asked).

What an output path may be (every command, every output option): a new path, or an existing
regular file (replaced whole). Anything else that exists (a FIFO, a device node, a socket) is
refused with an InputError: the rename would replace the special file by a regular one. A
symbolic link is written through: the file it points to (resolved, however many links deep)
is the output and must itself be a new path or a regular file; the link stays a link.
* :func:`note_interrupt` / :func:`check_interrupt`: once Ctrl-C is noted, no output is committed.
  Python cannot raise an interrupt that lands inside a finaliser or a weakref callback (it is
  reported to ``sys.unraisablehook`` and the work goes on); the note is kept all the same.
"""
from __future__ import annotations

import io as _io
import json
import os
import stat
import tempfile
import threading
from contextlib import suppress as _suppress
from pathlib import Path
from typing import Any, Iterable

# An integer literal with more digits than this is read as a float (inf when out of range), so
# that a huge literal becomes a non-finite value that the format checks name, not an
# OverflowError (or Python's 4300-digit limit) deep inside numpy.
MAX_INT_DIGITS = 18

# The largest input file read (instances of 5,000 UEs take tens of MB); an options file is
# far smaller (MAX_OPTIONS_BYTES).
MAX_INPUT_BYTES = 1 << 30
MAX_OPTIONS_BYTES = 1 << 20

# The largest seed and thread count an option takes (every command): numpy's seed range (a
# 32-bit unsigned integer, which `numpy.random.seed` and `RandomState` need), and torch's
# threads far above any machine's cores and below the C int the libraries take.
SEED_MAX = 2 ** 32 - 1
THREADS_MAX = 1024


def range_end(x: float) -> str:
    """A range end in a message: integers exactly (4294967295, not 4.29497e+09)."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


class InputError(ValueError):
    """Bad user input; the message names the field or option and the offending value."""


class NonFiniteOutput(RuntimeError):
    """A NaN or an infinity was about to be written to a JSON output (not valid JSON). The
    commands refuse non-finite results before writing, so this is an internal error."""


class OutputWriteError(OSError):
    """Writing an output failed (e.g. no space left on the device); `filename` is the output."""


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook of :func:`read_json`: a key given twice in one object is an error
    (json's default keeps the last one silently)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


# ---- reading --------------------------------------------------------------------------------
def _parse_int(text: str) -> int | float:
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else float(text)


def read_json(path: str | Path, *, what: str, option: str | None = None) -> Any:
    """Parse the JSON file `path` (a `what`: 'instance', 'solution', ...; given with `option`,
    if any) or raise InputError (the checks of :func:`read_input_text`, then JSON's)."""
    p = Path(path)
    text = read_input_text(p, what=what, option=option)
    label = _label(p, what, option)
    try:
        return json.loads(text, parse_int=_parse_int, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as e:
        raise InputError(f"{label} gives the key {e.key!r} twice in one object")
    except json.JSONDecodeError as e:
        raise InputError(f"{label} is not valid JSON: {e.msg} at line {e.lineno} "
                         f"column {e.colno}") from None
    except RecursionError:
        raise InputError(f"{label} is nested too deeply to be {_article(what)} "
                         f"{what}") from None


def _label(p: Path, what: str, option: str | None) -> str:
    return f"{what} file '{p}'" + (f" (option '{option}')" if option else "")


def read_input(path: str | Path, *, what: str, option: str | None = None,
               limit: int | None = None) -> bytes:
    """The bytes of the input file `path` (a `what`, given with `option` if any), or InputError
    naming both: the file (where its symbolic links lead) must be a regular file of at most
    `limit` bytes (default MAX_INPUT_BYTES). A FIFO, a device node (/dev/zero) or a socket is
    refused at once: it is opened without blocking and never read."""
    p = Path(path)
    limit = MAX_INPUT_BYTES if limit is None else limit
    label = _label(p, what, option)
    try:
        _check_regular(os.stat(p).st_mode, label)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{label} does not exist") from None
    except OSError as e:
        raise InputError(f"{label} cannot be read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        _check_regular(st.st_mode, label)   # what was opened (it may have been swapped)
        if st.st_size > limit:
            raise InputError(f"{label} is too large ({st.st_size} bytes; at most {limit})")
        chunks, total = [], 0
        while total <= limit:
            b = os.read(fd, min(1 << 20, limit + 1 - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
        if total > limit:   # it grew while read
            raise InputError(f"{label} is too large (more than {limit} bytes)")
        return b"".join(chunks)
    except OSError as e:
        raise InputError(f"{label} cannot be read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def read_input_text(path: str | Path, *, what: str, option: str | None = None,
                    limit: int | None = None) -> str:
    """:func:`read_input` decoded as UTF-8; a byte that is not UTF-8 is an InputError naming
    the file, the option and where the byte is."""
    data = read_input(path, what=what, option=option, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{_label(Path(path), what, option)} is not UTF-8 text (byte "
                         f"0x{data[e.start]:02x} at offset {e.start})") from None


def _check_regular(mode: int, label: str) -> None:
    if stat.S_ISDIR(mode):
        raise InputError(f"{label} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{label} is {_special_kind(mode)}, not a regular file")


def _special_kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else
            "a device node" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a special file")


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


# ---- interruption ---------------------------------------------------------------------------
class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as an interrupt so that every clean-up path of Ctrl-C runs for it too
    (the command line exits 143 instead of 130)."""


_INTERRUPTED = threading.Event()
_TERMINATED = threading.Event()


def note_interrupt(terminated: bool = False) -> None:
    """Ctrl-C (or SIGTERM, `terminated`) arrived: from now on :func:`check_interrupt` raises."""
    if terminated:
        _TERMINATED.set()
    _INTERRUPTED.set()


def clear_interrupt() -> None:
    _INTERRUPTED.clear()
    _TERMINATED.clear()


def interrupt_noted() -> bool:
    return _INTERRUPTED.is_set()


def terminate_noted() -> bool:
    """Whether the interrupt noted was SIGTERM."""
    return _TERMINATED.is_set()


def check_interrupt() -> None:
    """Raise KeyboardInterrupt (Terminated after SIGTERM) if an interrupt was noted, even where
    its first raise was swallowed."""
    if _TERMINATED.is_set():
        raise Terminated
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt


# ---- writing --------------------------------------------------------------------------------
def output_target(path: str | Path) -> Path:
    """The file an output `path` names: `path` itself, or where its symbolic links lead."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def _refuse_special(p: Path, shown: str | Path, option: str | None) -> None:
    """InputError when `p` exists and is not a regular file (a folder, a FIFO, a device node, a
    socket), naming `option` when given, else the output `shown`."""
    if not p.exists() or p.is_file():
        return
    what = ("a folder, not a file" if p.is_dir() else "a FIFO" if p.is_fifo() else
            "a device node" if p.is_char_device() or p.is_block_device() else
            "a socket" if p.is_socket() else "not a regular file")
    head = f"option '{option}' value '{shown}'" if option else f"output '{shown}'"
    target = f" links to '{p}', which" if Path(shown) != p else ""
    raise InputError(f"{head}{target} is {what}; an output must be a regular file or a new path")


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """One output written as :func:`write_all_atomic` writes several."""
    return write_all_atomic([(path, data)])[0]


def write_all_atomic(items: Iterable[tuple[str | Path, str | bytes]]) -> list[Path]:
    """The one writer of every output, all or none. Each (path, text or bytes) is written whole
    to a temporary file beside its target (the file `path` links to, when it is a symbolic
    link: the link stays); only when every one is written are they renamed into place, so a
    reader never sees a partly written file. An existing special file (FIFO, device node,
    socket) or folder is never replaced (InputError). A failure (e.g. a full disk) raises
    OutputWriteError naming the output, and leaves nothing behind: no temporary file, and no
    folder that this call created."""
    items = list(items)
    staged: list[str] = []
    made: list[Path] = []
    current = None            # the output being written, named by a failure
    try:
        targets = []
        for current, data in items:
            p = output_target(current)
            _refuse_special(p, current, None)      # a folder, a FIFO, a device, a socket
            made += _make_folders(p.parent)
            staged.append(_stage(p, data))
            targets.append(p)
        check_interrupt()
        for (current, _), tmp, p in zip(items, staged, targets):
            os.replace(tmp, p)
        made = []
    except OSError as e:
        if isinstance(e, OutputWriteError) or current is None:
            raise
        raise OutputWriteError(e.errno, e.strerror or str(e), os.fspath(current)) from None
    finally:
        for tmp in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        for folder in reversed(made):      # only after a failure: the folders this call made
            with _suppress(OSError):
                folder.rmdir()
    return [Path(path) for path, _ in items]


def _stage(p: Path, data: str | bytes) -> str:
    """`data` written whole to a new temporary file beside `p`, with the permissions the umask
    gives a new file; its path."""
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 -> the usual permissions
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _make_folders(folder: Path) -> list[Path]:
    """Create `folder` and its missing ancestors; the ones created, outermost first."""
    missing = []
    for p in (folder, *folder.parents):
        if p.exists():
            break
        missing.append(p)
    made = []
    for p in reversed(missing):
        p.mkdir()
        made.append(p)
    return made


def json_text(data: Any, path: str | Path) -> str:
    """`data` as the JSON text of an output (indent 1); NaN or an infinity anywhere in `data`
    raises NonFiniteOutput naming the output `path` (they are not JSON)."""
    try:
        return json.dumps(data, indent=1, allow_nan=False)
    except ValueError as e:
        raise NonFiniteOutput(f"refusing to write a non-finite number to '{path}' ({e})") from None


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """JSON (:func:`json_text`) written atomically; nothing is written when it fails."""
    return write_atomic(path, json_text(data, path))


def write_csv_atomic(df, path: str | Path) -> Path:
    """A pandas DataFrame as CSV (no index) written atomically."""
    return write_atomic(path, df.to_csv(index=False))


def write_png_atomic(fig, path: str | Path, dpi: int = 110) -> Path:
    """A matplotlib figure as PNG written atomically (the figure is not closed)."""
    buf = _io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    return write_atomic(path, buf.getvalue())


FIGURE_FORMATS = ("png", "svg", "pdf")


def figure_format(path: str | Path, option: str) -> str:
    """The figure format named by `path`'s extension (one of FIGURE_FORMATS), or InputError
    naming `option`."""
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in FIGURE_FORMATS:
        raise InputError(f"option '{option}' value '{path}' has an unknown figure format "
                         f"{('.' + ext) if ext else '(no extension)'}: expected "
                         f"{', '.join('.' + f for f in FIGURE_FORMATS)}")
    return ext


def figure_bytes(fig, path: str | Path, dpi: int = 110) -> bytes:
    """A matplotlib figure rendered in the format of `path`'s extension (FIGURE_FORMATS); SVG
    and PDF without the creation date and with fixed SVG ids, so that the same figure gives
    the same bytes."""
    import matplotlib
    fmt = figure_format(path, "path")
    buf = _io.BytesIO()
    meta = {"png": None, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    with matplotlib.rc_context({"svg.hashsalt": "cefl-opt"}):
        fig.savefig(buf, dpi=dpi, format=fmt, metadata=meta)
    return buf.getvalue()


# ---- checks before any work ----------------------------------------------------------------
def check_writable(path: str | Path, option: str) -> None:
    """Raise InputError (naming `option`) unless a file can be written at `path`: `path` (or
    the file its symbolic links lead to) is a new path or an existing writable regular file,
    not a folder nor a special file (FIFO, device node, socket), and the nearest existing
    ancestor is a writable folder."""
    shown = Path(path)
    p = output_target(shown)
    if p.is_dir():
        raise InputError(f"option '{option}' value '{shown}' is a folder, not a file")
    _refuse_special(p, shown, option)
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"option '{option}' value '{p}' is not writable")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"option '{option}' value '{p}': '{parent}' is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"option '{option}' value '{p}': folder '{parent}' is not writable")


def check_new(path: str | Path, option: str, *, overwrite: bool) -> None:
    """InputError naming `path` and `option` when `path`, an output written beside the one that
    `option` names (not named by the user), already exists (as a file or a link) and
    `overwrite` is not set: such a file is never replaced silently."""
    if os.path.lexists(path) and not overwrite:
        raise InputError(f"'{path}' (written beside option '{option}') already exists; pass "
                         f"--overwrite to replace it, or choose another '{option}'")


def check_distinct(outputs: Iterable[tuple[str, str | Path | None]],
                   inputs: Iterable[str | Path | None]) -> None:
    """Raise InputError when an output (option, path) is one of the inputs or another output."""
    seen: dict[str, str] = {}
    ins = {_key(p) for p in inputs if p is not None}
    for option, path in outputs:
        if path is None:
            continue
        k = _key(path)
        if k in ins:
            raise InputError(f"option '{option}' value '{path}' is one of the input files; "
                             f"choose another output")
        if k in seen:
            raise InputError(f"option '{option}' value '{path}' is also the value of "
                             f"'{seen[k]}'")
        seen[k] = option


def _key(path: str | Path) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))
