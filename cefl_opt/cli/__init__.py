"""The ``cefl-opt`` command line (console script ``cefl-opt``: :mod:`cefl_opt._entry`, which
notes signals while this package loads, then calls :func:`main`).

One module per command, each with ``register(subparsers)`` adding its parser whose ``func`` is a
handler ``func(args) -> int``: ``network`` (generate, show), ``solve``, ``evaluate``, ``train``
and ``estimate`` (``learning``), ``run``, ``plot``. A handler checks every argument before any
work.

One error policy, for every command (docs/cli.md lists it):

======  =========================================================================================
status  meaning
======  =========================================================================================
0       success
1       ``evaluate``: the solution is infeasible
2       bad input: a usage error, an option out of range, a malformed or unreadable file, an
        unwritable output (any :class:`cefl_opt.io.InputError` or ``OSError``)
3       ``solve``: the instance is infeasible (no solution written)
4       ``solve``: no solution (time limit, solver failure; nothing written)
70      an internal error (a bug): one line naming the exception
130     interrupted (Ctrl-C, SIGINT)
141     standard output is a pipe whose reader has gone (``cefl-opt evaluate ... | head -1``):
        the command ends quietly, as a tool killed by SIGPIPE does (the shell's 128 + 13)
143     terminated (SIGTERM); nothing is written and nothing is left behind, as for Ctrl-C
======  =========================================================================================

Standard output and error never fail a command: a closed one (``>&-``) is replaced by
``/dev/null`` (the command's files are still written) and characters the stream's encoding
cannot show are written as backslash escapes (``PYTHONIOENCODING=ascii``).

Every failure is one line ``cefl-opt: error: <message>`` on stderr, never a traceback (set
``CEFL_OPT_DEBUG=1`` to get it), and leaves no output file behind: outputs are written
atomically (:mod:`cefl_opt.io`), the last step of a command. The libraries' own diagnostics
(Pyomo's log, numpy's RuntimeWarnings) are kept off the standard streams (``CEFL_OPT_DEBUG=1``
shows them).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import math
import os
import signal
import sys
import warnings
from typing import Callable, Sequence

from .. import io as cefl_io
from ..io import SEED_MAX, THREADS_MAX, InputError, range_end as _num

PROG = "cefl-opt"
EXIT_OK, EXIT_INFEASIBLE_SOLUTION, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INFEASIBLE_INSTANCE, EXIT_NO_SOLUTION, EXIT_INTERNAL, EXIT_INTERRUPTED = 3, 4, 70, 130
EXIT_BROKEN_PIPE, EXIT_TERMINATED = 141, 143

# command word -> module of this package that registers it; a known command loads only its own
# module (`network`, `evaluate` and `plot` never import torch), help and usage errors load all.
COMMANDS = {"network": "network", "solve": "solve", "evaluate": "evaluate", "train": "learning",
            "estimate": "learning", "run": "run", "plot": "plot"}


class OptionError(InputError):
    """A command-line option with a bad value; the message names the option and the value."""


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors raised as OptionError (one line, exit 2) instead of exit."""

    def error(self, message: str):
        raise OptionError(f"{message} (see '{self.prog} --help')")


# ---------------------------------------------------------------------- option types
def number(*, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           integer: bool = False) -> Callable[[str], float | int]:
    """An argparse type: a finite number (an integer if `integer`) with lo <= x (lo < x when
    `lo_open`) and x <= hi; a bad value is a usage error naming the option and the value."""
    want = "an integer" if integer else "a finite number"
    rng = [f"{'>' if lo_open else '>='} {_num(lo)}" if lo is not None else "",
           f"<= {_num(hi)}" if hi is not None else ""]
    text = f"must be {want}" + (" " + " and ".join(r for r in rng if r) if any(rng) else "")

    def parse(s: str):
        try:
            v = int(s) if integer else float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text}, got {s!r}") from None
        if not math.isfinite(v) or (lo is not None and (v <= lo if lo_open else v < lo)) \
                or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{text}, got {s!r}")
        return v
    parse.__name__ = "number"
    return parse


POSITIVE = number(lo=0, lo_open=True)
COUNT = number(lo=1, integer=True)           # a count of at least one
SEED = number(lo=0, hi=SEED_MAX, integer=True)              # cefl_opt.io: numpy's range
THREADS = number(lo=1, hi=THREADS_MAX, integer=True)        # train and estimate (torch)


class Deprecated(argparse.Action):
    """An old flag kept for one release: it warns on stderr (``cefl-opt: warning: --rounds of
    train is deprecated; use --train-rounds``), then stores its value as the new flag does
    (``store(namespace, value)`` when given, else under ``dest``). Hidden from ``--help``;
    the CLI reference lists it with its replacement (``use``)."""

    def __init__(self, option_strings, dest, *, command: str, use: str, store=None, **kw):
        kw.setdefault("help", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kw)
        self.command, self.use, self.store = command, use, store

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{PROG}: warning: {option_string} of {self.command} is deprecated; use "
              f"{self.use}", file=sys.stderr)
        if self.store is not None:
            self.store(namespace, values)
        else:
            setattr(namespace, self.dest, values)


def deprecated(p: argparse.ArgumentParser, old: str, *, command: str, use: str, dest: str,
               **kw) -> None:
    """Add the old flag `old` of `command`, replaced by `use` (see :class:`Deprecated`)."""
    p.add_argument(old, dest=dest, action=Deprecated, command=command, use=use,
                   default=argparse.SUPPRESS, **kw)


def add_display_flags(p: argparse.ArgumentParser) -> None:
    """The display switches every command takes: ``--progress/--no-progress`` and
    ``--quiet``. They change what is shown, never what is computed or written."""
    g = p.add_argument_group("display")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars on stderr (train, run: on a TTY)")
    g.add_argument("--quiet", action="store_true",
                   help="nothing on stdout (errors still go to stderr)")


def show_progress(args: argparse.Namespace, default: bool) -> bool:
    """The display switch of a command whose own default is `default`: on only when stderr is
    a terminal (a log gets the commands' one line per phase, not a bar's frames); ``--quiet``
    turns the default off; an explicit ``--progress/--no-progress`` wins."""
    p = getattr(args, "progress", None)
    if p is None:
        return default and not getattr(args, "quiet", False) and _stderr_is_terminal()
    return bool(p)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):   # a replaced or closed stream
        return False


def _leaf_parsers(parser: argparse.ArgumentParser):
    """The parsers of `parser`'s commands that run something (sub-commands of sub-commands
    included)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                has_sub = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
                yield from (_leaf_parsers(sub) if has_sub else [sub])


def add_inputs(p: argparse.ArgumentParser, solution: str | None = None) -> None:
    """The positional input files: the instance `net` and, when `solution` (its help) is
    given, the solution `sol`."""
    from ..instance import FORMAT_TAG
    p.add_argument("net", help=f"instance JSON ({FORMAT_TAG}; format 1 files load too)")
    if solution is not None:
        p.add_argument("sol", help=solution)


# ---------------------------------------------------------------------- parser
def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser with the sub-commands of `commands` (all by default)."""
    parser = _Parser(
        prog=PROG, description="Optimisation-modelling toolkit for CE-FL (cooperative edge-assisted "
                               "dynamic federated learning with a floating aggregation point). "
                               "Exit status: 0 ok, 1 evaluate: infeasible, 2 bad input, 3 solve: "
                               "infeasible instance, 4 solve: no solution, 70 internal error, "
                               "130 interrupted, 141 broken pipe, 143 terminated.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = list(COMMANDS) if commands is None else list(commands)
    for modname in dict.fromkeys(COMMANDS[c] for c in wanted):
        importlib.import_module(f"{__name__}.{modname}").register(sub)
    for leaf in _leaf_parsers(parser):
        add_display_flags(leaf)
    return parser


def _command_word(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


# ---------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None, early_signals: Sequence[int] = ()) -> int:
    """Run one command; its exit status. `early_signals`: SIGINT/SIGTERM noted by the console
    script (`cefl_opt._entry`) before this ran; the first ends the command at once."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _robust_streams()
    word = _command_word(argv)
    debug = bool(os.environ.get("CEFL_OPT_DEBUG"))
    previous = signal.getsignal(signal.SIGINT)
    previous_term = signal.getsignal(signal.SIGTERM)
    cefl_io.clear_interrupt()
    try:
        if not debug and _ours_to_replace(previous, signal.default_int_handler):
            signal.signal(signal.SIGINT, _interrupt)
        if _ours_to_replace(previous_term, signal.SIG_DFL):
            signal.signal(signal.SIGTERM, _interrupt)
        if early_signals:
            _interrupt(early_signals[0], None)
        parser = build_parser([word] if word in COMMANDS else None)
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        with _quiet_stdout(getattr(args, "quiet", False)), _quiet_libraries(debug):
            code = int(args.func(args) or 0)
        cefl_io.check_interrupt()   # a Ctrl-C whose KeyboardInterrupt was swallowed on the way
        sys.stdout.flush()          # a pipe closed by its reader fails here, not at exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as e:
        return _stopped(isinstance(e, cefl_io.Terminated))
    except Exception as e:  # noqa: BLE001 - the policy: one line, never a traceback
        if cefl_io.interrupt_noted():   # raised by what the signal cut short (ctypes wraps the
            return _stopped(cefl_io.terminate_noted())      # interrupt as ArgumentError)
        if debug:
            raise
        if isinstance(e, (InputError, ValueError, OSError)):
            return fail(_message(e), EXIT_BAD_INPUT)
        from ..solvers.base import SolverError
        if isinstance(e, SolverError):
            return fail(_message(e), EXIT_NO_SOLUTION)
        return fail(f"internal error: {type(e).__name__}: {_message(e)} (set CEFL_OPT_DEBUG=1 "
                     f"for the traceback)", EXIT_INTERNAL)
    finally:
        if cefl_io.interrupt_noted():   # what the interrupt left half-built (a PyNumero NLP
            gc.collect()                # cut short in its constructor) is finalised while its
            sys.unraisablehook = sys.__unraisablehook__   # errors are still silenced
        cefl_io.clear_interrupt()   # the note is this call's: the library is usable after it
        if signal.getsignal(signal.SIGINT) is _interrupt:
            signal.signal(signal.SIGINT, previous)
        if signal.getsignal(signal.SIGTERM) is _interrupt:
            signal.signal(signal.SIGTERM, previous_term)


@contextlib.contextmanager
def _quiet_stdout(quiet: bool):
    """``--quiet``: what the command prints on stdout goes to /dev/null."""
    if not quiet:
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        yield


@contextlib.contextmanager
def _quiet_libraries(debug: bool):
    """The libraries' own diagnostics stay off the standard streams, where the command's lines
    are the message: Pyomo's log (e.g. W1002, a solver's value a rounding error outside a variable's
    bounds) and numpy's RuntimeWarnings (overflow, invalid value: the commands check every
    result they write or report for finiteness). ``CEFL_OPT_DEBUG=1`` shows them."""
    if debug:
        yield
        return
    pyomo = logging.getLogger("pyomo")
    level = pyomo.level
    pyomo.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            yield
    finally:
        pyomo.setLevel(level)


def _ours_to_replace(handler, default) -> bool:
    """The default disposition, or the console script's early note (`cefl_opt._entry`)."""
    return handler is default or getattr(handler, "cefl_early", False)


def _stopped(terminated: bool) -> int:
    """The one line and exit status of a command that SIGINT (or SIGTERM) ended."""
    logging.disable(logging.NOTSET)
    if terminated:
        _say(f"{PROG}: terminated")
        return EXIT_TERMINATED
    _say(f"{PROG}: interrupted")
    return EXIT_INTERRUPTED


def _interrupt(signum, frame):
    """Ctrl-C or SIGTERM: silence what an interrupted solver would log or print on its way out
    (Pyomo's logged traceback, exceptions raised inside solver callbacks), then interrupt
    (`Terminated` for SIGTERM); the clean-up is that of every interrupt."""
    logging.disable(logging.CRITICAL)
    sys.unraisablehook = lambda *_: None
    terminated = signum == signal.SIGTERM
    cefl_io.note_interrupt(terminated)
    raise cefl_io.Terminated if terminated else KeyboardInterrupt


def _robust_streams() -> None:
    """A closed standard stream (fd 0, 1 or 2) becomes /dev/null, so that neither a print nor a
    solver's own output fails nor lands in a file opened later on that descriptor; stdout and
    stderr write what their encoding cannot show as backslash escapes."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            new = os.open(os.devnull, os.O_RDWR)   # the lowest free descriptor: `fd`
            if new != fd:
                os.dup2(new, fd)
                os.close(new)
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, mode, closefd=False))
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream already closed or not reconfigurable
                pass


def _silence_stdout() -> None:
    """After a broken pipe: later writes and the flush at exit go to /dev/null."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):   # a stdout without a descriptor (tests)
        pass


def _say(line: str) -> None:
    """`line` on stderr in one write, so that the lines of the ranks under `mpiexec`, which
    share one stderr, stay whole (`print` writes the newline on its own)."""
    sys.stderr.write(line + "\n")


def fail(message: str, code: int) -> int:
    """Say `message` as the command's one error line on stderr; returns the exit `code`."""
    _say(f"{PROG}: error: {message}")
    return code


def _message(e: BaseException) -> str:
    if isinstance(e, cefl_io.OutputWriteError):
        return f"cannot write '{e.filename}': {e.strerror or e}"
    if isinstance(e, OSError) and e.filename is not None:
        return f"cannot access '{e.filename}': {e.strerror or e}"
    return " ".join(str(e).split()) or type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
