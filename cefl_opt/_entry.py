"""The ``cefl-opt`` console script. It notes SIGINT and SIGTERM from its first statement, while
the command line's modules load, so that a signal that early ends the command as one later
does (exit 130 or 143, one line, nothing written) and not with an import traceback."""
import signal
import sys

_EARLY: list[int] = []


def _note(signum, frame):
    _EARLY.append(signum)


_note.cefl_early = True      # the CLI replaces this handler with its own
if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _note)
if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _note)


def main() -> int:
    """Run the command; under `mpiexec`, a failing rank ends every rank of the launch with its
    exit status (`solvers.mpi_backend.abort_launch_on_failure`)."""
    from cefl_opt.cli import main as cli_main
    code = cli_main(early_signals=_EARLY)
    if code != 0 and "mpi4py.MPI" in sys.modules:
        from cefl_opt.solvers.mpi_backend import abort_launch_on_failure
        abort_launch_on_failure(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
