"""Native solvers in a child process, so that a crash inside one cannot take the caller down.

SCIP, Ipopt (cyipopt) and the AMPL Solver Library (PyNumero) are C and C++ libraries: an
assertion, a heap check or a segmentation fault inside one of them kills the whole Python
process with a signal, and no ``except`` clause sees it. :func:`call_isolated` runs a method in a
forked child instead and reads its outcome through a pipe:

* the child's return value, or the exception it raised (re-raised here, with its type where it
  can be pickled);
* progress that the method reports on the way (:func:`report_progress`: SCIP's incumbent and
  proven bound, say), kept by the parent so that a crash can still say how far the solve got;
* when the child dies without an outcome (killed by a signal, or exited), a
  :class:`NativeCrash` naming the solver, the signal, the seconds run and the last progress.

The parent owns interruption: on Ctrl-C (KeyboardInterrupt), SIGTERM (the command line's
``Terminated``) or any other exception while it waits, it kills the child and re-raises, so an
interrupted solve never returns a result. The child ignores SIGINT (the parent acts for the
whole process group) and is killed with the parent if the parent dies (Linux
``PR_SET_PDEATHSIG``). The child's temporary files (Pyomo's .nl files for the AMPL Solver
Library, say) go to a folder of its own, which the parent removes however the child ended.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import selectors
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from .errors import SolverError

_HEADER = struct.Struct("!Q")
_PROGRESS_FD: int | None = None        # the pipe of the child we are in, if any


class NativeCrash(SolverError):
    """A native solver ended its process without an outcome (a signal such as SIGABRT or
    SIGSEGV, or an exit without a result). `progress` holds the last reported progress."""

    def __init__(self, message: str, *, signal_name: str | None, seconds: float,
                 progress: dict[str, Any]):
        super().__init__(message)
        self.signal_name, self.seconds, self.progress = signal_name, seconds, progress


def in_child() -> bool:
    """True inside a child of :func:`call_isolated`."""
    return _PROGRESS_FD is not None


def leave_child() -> None:
    """This process is not an isolated child, though it was forked from one (a pool worker of
    an isolated method): it reports no progress, since its parent's pipe is not its own."""
    global _PROGRESS_FD
    _PROGRESS_FD = None


def report_progress(**values: Any) -> None:
    """Send progress (plain numbers and strings) to the parent of an isolated call; a no-op
    outside one. A crash message quotes the last values sent."""
    if _PROGRESS_FD is not None:
        _send(_PROGRESS_FD, ("progress", values))


def call_isolated(fn: Callable[..., Any], *args: Any, label: str) -> Any:
    """``fn(*args)`` in a forked child; its return value, or its exception re-raised here.

    `label` names the solver in the crash message ("SCIP"), which also quotes the last reported
    progress. Raises :class:`NativeCrash` if the child dies without an outcome."""
    return run_together([lambda: Isolated(fn, *args, label=label)], at_once=1)[0].result()


class Isolated:
    """``fn(*args)`` started in a forked child (see :func:`call_isolated`); :func:`run_together`
    reads its messages, :meth:`result` gives its outcome. `seconds` is the child's wall time,
    from the fork to the end of its messages."""

    def __init__(self, fn: Callable[..., Any], *args: Any, label: str):
        sys.stdout.flush()
        sys.stderr.flush()
        self.label, self.progress, self.outcome = label, {}, None
        self.scratch = tempfile.mkdtemp(prefix="cefl-opt-solver.")
        read_fd, write_fd = os.pipe()
        self.t0, self.seconds, self.status = time.monotonic(), None, None
        try:
            self.pid = os.fork()
        except BaseException:
            os.close(read_fd)
            os.close(write_fd)
            _remove(self.scratch)
            raise
        if self.pid == 0:                          # the child: never returns
            os.close(read_fd)
            _child(fn, args, write_fd, scratch=self.scratch)
        os.close(write_fd)
        self.fd, self._buf = read_fd, bytearray()

    @property
    def done(self) -> bool:
        return self.seconds is not None

    def fileno(self) -> int:
        return self.fd

    def read(self) -> None:
        """Read what the child sent (blocks until it sends something or closes its end); at
        the end of its messages, reap it and remove its scratch folder."""
        data = os.read(self.fd, 1 << 20)
        self._buf += data
        while len(self._buf) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self._buf)
            if len(self._buf) < _HEADER.size + n:
                break
            kind, value = pickle.loads(bytes(self._buf[_HEADER.size:_HEADER.size + n]))
            del self._buf[:_HEADER.size + n]
            if kind == "progress":
                self.progress.update(value)
            else:
                self.outcome = (kind, value)
        if not data:                               # the child closed the pipe
            self.close()

    def close(self) -> None:
        """Reap the child (it has closed its end, or been killed); remove its scratch folder."""
        if self.done:
            return
        self.seconds = time.monotonic() - self.t0
        os.close(self.fd)
        try:
            self.status = os.waitpid(self.pid, 0)[1]
        finally:
            _remove(self.scratch)

    def kill(self) -> None:
        """SIGKILL the child (a native solver may not answer SIGTERM in time), then `close`;
        nothing once it has ended."""
        if not self.done:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.close()

    def result(self) -> Any:
        """The child's return value, or its exception re-raised; :class:`NativeCrash` if it
        ended without an outcome."""
        if self.outcome is None:
            raise _crash(self.label, self.status, self.seconds, self.progress)
        kind, value = self.outcome
        if kind == "error":
            raise value
        return value


def run_together(starts: list[Callable[[], Isolated | None]],
                 at_once: int) -> list[Isolated | None]:
    """Call each of `starts` (each starts an :class:`Isolated`, or returns None: nothing to
    run) in order, with at most `at_once` children running at a time, and read every child's
    messages (one `selectors` loop) until each has ended; return the calls in the same order.
    On an interrupt (Ctrl-C, SIGTERM), a start that fails or any other exception, every child
    still running is killed and the exception re-raised."""
    queue, calls = list(starts), []
    try:
        with selectors.DefaultSelector() as sel:
            while queue or sel.get_map():
                while queue and len(sel.get_map()) < at_once:
                    with _signals_held():  # a started child is in `calls` before a signal acts
                        calls.append(queue.pop(0)())
                    if calls[-1] is not None:
                        sel.register(calls[-1], selectors.EVENT_READ)
                if not sel.get_map():
                    continue
                for key, _ in sel.select():
                    key.fileobj.read()
                    if key.fileobj.done:
                        sel.unregister(key.fileobj)
    finally:
        for c in calls:
            if c is not None:
                c.kill()
    return calls


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM that arrive inside act at its end: their handlers are called then
    (Python's default for SIGINT raises KeyboardInterrupt; SIG_DFL ends the process as the
    signal would have; SIG_IGN drops it). Outside the main thread, where handlers cannot be
    set, nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.signal(s, lambda n, _f: got.append(n)) for s in held}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for n in got[:1]:
            h = old[n]
            if callable(h):
                h(n, None)
            elif h != signal.SIG_IGN:
                signal.raise_signal(n)


def _remove(scratch: str) -> None:
    """Remove a child's scratch folder, again while something still writes into it (the
    child's own children, which die with it a moment after it): up to 2 s."""
    for _ in range(100):
        shutil.rmtree(scratch, ignore_errors=True)
        if not os.path.exists(scratch):
            return
        time.sleep(0.02)


def _child(fn: Callable[..., Any], args: tuple, write_fd: int, scratch: str) -> None:
    """Run `fn` with its temporary files in `scratch` and send its outcome; leave through
    os._exit (no atexit handlers, no flush of the parent's buffers twice)."""
    global _PROGRESS_FD
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent()
        tempfile.tempdir = os.environ["TMPDIR"] = scratch
        _PROGRESS_FD = write_fd
        try:
            outcome = ("result", fn(*args))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
            outcome = ("error", _picklable(e))
        _send(write_fd, outcome)
    except BaseException:  # noqa: BLE001 - the parent reports a missing outcome
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def cores() -> int:
    """The CPU cores this process may run on: the default number of worker processes."""
    return max(1, len(os.sched_getaffinity(0)))


def die_with_parent() -> None:
    """Have this (child) process killed when its parent dies (Linux `PR_SET_PDEATHSIG`), and
    leave at once if the parent is already gone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)              # PR_SET_PDEATHSIG
    except (OSError, AttributeError):              # not Linux: the parent still kills us
        pass
    if os.getppid() == 1:                          # the parent died before prctl
        os._exit(1)


def _picklable(e: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001 - any exception that does not survive pickling
        return SolverError(f"{type(e).__name__}: {e}")


def _send(fd: int, message: tuple) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _crash(label: str, status: int, seconds: float, progress: dict[str, Any]) -> NativeCrash:
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        how = f"aborted ({sig})"
    else:
        sig = None
        how = f"exited with status {os.WEXITSTATUS(status)} and no result"
    text = f"no solution: {label} {how} after {seconds:.0f} s"
    if progress:
        text += "; last reported: " + ", ".join(
            f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}" for k, v in progress.items())
    return NativeCrash(text, signal_name=sig, seconds=seconds, progress=progress)
