"""The one place where cefl-opt reads JSON input and writes output files.

* :class:`InputError`: bad input from a user (a file, an option, an argument of the Python API).
  Its message names the field or option and the value. The command line turns it into exit
  status 2 and one line on stderr; ``InstanceError``, the solution format's errors and option
  errors derive from it.
* :func:`read_json`: JSON with the failures of hostile files turned into ``InputError``
  (nesting too deep, integer literals too large for a float, not UTF-8, not JSON).
* :func:`write_atomic` and its wrappers for JSON, CSV and PNG: every output is written to a
  temporary file in the target folder and renamed over the target, so a reader never sees a
  partly written file and a failure leaves nothing behind. JSON output never carries NaN or
  Infinity (:class:`NonFiniteOutput`, a bug when it happens).
* :func:`check_writable` and :func:`check_distinct`: the checks the commands run on an output
  path before any work.

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
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable

# An integer literal with more digits than this is read as a float (inf when out of range), so
# that a huge literal becomes a non-finite value that the format checks name, not an
# OverflowError (or Python's 4300-digit limit) deep inside numpy.
MAX_INT_DIGITS = 18


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


def read_json(path: str | Path, *, what: str) -> Any:
    """Parse the JSON file `path` (a `what`: 'instance', 'solution', ...) or raise InputError."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} file '{p}' is a folder, not a file")
    if not p.exists():
        raise InputError(f"{what} file '{p}' does not exist")
    if not p.is_file():
        raise InputError(f"{what} file '{p}' is not a regular file")
    try:
        return json.loads(p.read_bytes().decode("utf-8"), parse_int=_parse_int,
                          object_pairs_hook=_no_duplicates)
    except _DuplicateKey as e:
        raise InputError(f"{what} file '{p}' gives the key {e.key!r} twice in one object")
    except json.JSONDecodeError as e:
        raise InputError(f"{what} file '{p}' is not valid JSON: {e.msg} at line {e.lineno} "
                         f"column {e.colno}") from None
    except UnicodeDecodeError:
        raise InputError(f"{what} file '{p}' is not UTF-8 text") from None
    except RecursionError:
        raise InputError(f"{what} file '{p}' is nested too deeply to be {_article(what)} "
                         f"{what}") from None


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
    """InputError when `p` exists and is not a regular file (nor, when `option` is None, a
    folder: write_atomic's own caller checks that)."""
    if not p.exists() or p.is_file():
        return
    what = ("a folder, not a file" if p.is_dir() else "a FIFO" if p.is_fifo() else
            "a device node" if p.is_char_device() or p.is_block_device() else
            "a socket" if p.is_socket() else "not a regular file")
    head = f"option '{option}' value '{shown}'" if option else f"output '{shown}'"
    target = f" links to '{p}', which" if Path(shown) != p else ""
    raise InputError(f"{head}{target} is {what}; an output must be a regular file or a new path")


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write text or bytes to a temporary file in the same folder and rename it over `path`
    (over the file it links to, when `path` is a symbolic link). An existing special file
    (FIFO, device node, socket) is never replaced (InputError); a failed write (e.g. a full
    disk) raises OSError naming `path` and leaves nothing behind."""
    p = output_target(path)
    _refuse_special(p, path, None)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 -> the usual permissions
        with (os.fdopen(fd, "wb") if isinstance(data, bytes)
              else os.fdopen(fd, "w", encoding="utf-8", newline="")) as fh:
            fh.write(data)
        check_interrupt()
        os.replace(tmp, p)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if e.filename is None:   # a failed write (a full disk) names no file: name the output
            raise OutputWriteError(e.errno, e.strerror or str(e), os.fspath(path)) from None
        raise
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return Path(path)


def write_all_atomic(items: Iterable[tuple[str | Path, str | bytes]]) -> list[Path]:
    """Several outputs, all or none: each is first written whole to a temporary file beside its
    target; only when every one is written are they renamed into place (a failure before that
    leaves nothing behind)."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in items:
            p = Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
            staged.append((tmp, p))
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        check_interrupt()
        for tmp, p in staged:
            os.replace(tmp, p)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return [p for _, p in staged]


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """JSON (indent 1) written atomically; NaN or an infinity anywhere in `data` raises
    NonFiniteOutput (they are not JSON) and nothing is written."""
    try:
        text = json.dumps(data, indent=1, allow_nan=False)
    except ValueError as e:
        raise NonFiniteOutput(f"refusing to write a non-finite number to '{path}' ({e})") from None
    return write_atomic(path, text)


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
