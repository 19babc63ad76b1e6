"""Run under `mpiexec -n 2 python tests/mpi/wait_check.py SITE`: rank 0 waits in one of the MPI
backend's collectives (SITE: "allgather", the structure's start-up exchange; "snapshot", the
message counts summed after every outer iteration; "exchange", a neighbour exchange; "gather",
the solution's gather) while rank 1 has not arrived (it sleeps). Each rank prints "rank R
ready" before that, and "rank R interrupted" when a KeyboardInterrupt reaches it, then ends
the launch with exit 130 as the command line does (`abort_launch_on_failure`), after a grace
of `GRACE` seconds: the abort kills every rank, so without it a rank that wakes first could
kill the other before it prints (likelier on a loaded machine). A rank deaf inside a blocking
collective never prints its line, grace or not: the launcher kills it when the other rank
ends."""
from __future__ import annotations

import sys
import time

from cefl_opt.generator import make_instance
from cefl_opt.solvers.decentralized import make_comm
from cefl_opt.solvers.mpi_backend import abort_launch_on_failure

GRACE = 3.0
SITES = {"allgather": lambda c: c.allgather(c.rank),
         "snapshot": lambda c: c.snapshot(),
         "exchange": lambda c: c.exchange({}),
         "gather": lambda c: c.gather_to_root({})}


def say(line: str) -> None:
    """`line` on stdout in one write, so that the two ranks' lines stay whole."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(site: str) -> None:
    comm = make_comm(make_instance("tiny", seed=1), "mpi", "decentralized")
    say(f"rank {comm.rank} ready")
    try:
        if comm.rank == 0:
            SITES[site](comm)
        else:
            time.sleep(600)
    except KeyboardInterrupt:
        say(f"rank {comm.rank} interrupted")
        time.sleep(GRACE)
        abort_launch_on_failure(130)
    say(f"rank {comm.rank} was not interrupted")


if __name__ == "__main__":
    main(sys.argv[1])
