"""Centralised references on P: Ipopt (through cyipopt / PyNumero) with the binary decisions
fixed, aggregator enumeration (`ipopt-enum`) and the paper's §VI baselines.

Every baseline fixes its discrete choice (aggregator per round, UE-BS associations, or no
offloading) and optimises the continuous variables with Ipopt on the same Pyomo model, so that
comparisons isolate the decision being compared. Associations start from
`cefl_opt.association.association_rule` and are then repaired by the objective of P
(`association.repair_associations`, the same step the decentralised
solver takes after rounding) and re-polished (`solve_with_repair`; `assoc_repair=False` turns
it off).
"""
from __future__ import annotations

import itertools
import math
import sys
import time
import types
from typing import Any, Sequence

import numpy as np

from cefl_opt import system
from cefl_opt.association import association_rule, repair_associations
from cefl_opt.instance import Instance
from cefl_opt.io import check_interrupt
from cefl_opt.solution import InstanceMismatch, RoundDecision, Solution

from . import decentralized, isolation
from .base import Results, SolutionStatus, TerminationCondition
from .fixed_nlp import IPOPT_DEFAULTS, IPOPT_QUIET, FixedNLP, require_cyipopt  # noqa: F401
from .options import (DECENTRALIZED_SEEDS, FixedOptions, GreedyOptions, IpoptEnumOptions,
                      IpoptOptions, NoOffloadOptions, OptionError)


# ---------------------------------------------------------------------- discrete choices
def decisions_for(inst: Instance, aggregators: Sequence[int],
                  base: Solution | None = None) -> list[RoundDecision]:
    """Round decisions with the given aggregator per round, associations by `association_rule`,
    continuous values from `base` (the reference orchestration by default)."""
    base = base or system.reference_solution(inst)
    out = []
    for t, s in enumerate(aggregators):
        r = base.rounds[t].copy()
        r.aggregator = int(s)
        r.uplink_bs, r.downlink_bs = association_rule(inst, t, int(s))
        out.append(r)
    return out


def greedy_data_aggregators(inst: Instance) -> list[int]:
    """Per round, the DC whose sub-network holds the most data (paper §VI, datapoint-greedy)."""
    sub = np.asarray(inst.ue_subnet, int)
    held = np.array([[inst.Dbar[t][sub == inst.dc_subnet[s]].sum() for s in range(inst.S)]
                     for t in range(inst.T)])
    return [int(a) for a in held.argmax(axis=1)]


def greedy_rate_aggregators(inst: Instance) -> list[int]:
    """Per round, the DC with the highest mean end-to-end rate max_b 1/(1/R_nb + 1/Rmax_bs)."""
    return [int(a) for a in inst.ue_bs_e2e_rate().mean(axis=1).argmax(axis=1)]


def solve_with_repair(nlp: FixedNLP, decisions: Sequence[RoundDecision],
                      warm: Solution | None = None, *, repair: bool = True
                      ) -> tuple[Solution | None, TerminationCondition, float | None]:
    """Ipopt for `decisions`, then (repair=True) the association repair of `cefl_opt.association` at
    the optimum and, if it moved anything, a second Ipopt solve with the repaired associations.
    The best feasible of the three points is returned."""
    check_interrupt()   # a Ctrl-C swallowed inside the last solve stops the enumeration here
    sol, st, obj = nlp.solve(decisions, warm=warm)
    if sol is None or not repair:
        return sol, st, obj
    rep, moves = repair_associations(nlp.inst, sol, bound=nlp.bound, weights=nlp.weights)
    nlp.association_moves += moves
    if not moves:
        return sol, st, obj
    rep_obj = system.evaluate(nlp.inst, rep, bound=nlp.bound, weights=nlp.weights).objective
    sol2, st2, obj2 = nlp.solve(rep.rounds, warm=rep)
    if sol2 is not None and obj2 <= min(obj, rep_obj):
        return sol2, st2, obj2
    return (rep, st, rep_obj) if rep_obj < obj else (sol, st, obj)


def _finish(method: str, inst: Instance, sol: Solution | None, status: TerminationCondition,
            nlp: FixedNLP, opts: IpoptOptions, info: dict[str, Any] | None = None) -> Results:
    if nlp.bar is not None:
        nlp.bar.close()
    info = dict(info or {})
    info.update(ipopt_solves=nlp.n_solves, ipopt_retries=nlp.retries,
                association_moves=nlp.association_moves)
    if sol is None:
        return Results(method=method, termination_condition=status,
                       solution_status=SolutionStatus.noSolution, iterations=nlp.iterations,
                       info=info)
    ev = system.evaluate(inst, sol, bound=opts.bound, weights=opts.weights)
    sol.objective, sol.terms = ev.objective, ev.terms
    sol.info.update(info)
    return Results(method=method, termination_condition=status,
                   solution_status=SolutionStatus.feasible, solution=sol, objective=ev.objective,
                   iterations=nlp.iterations, info=info)


# ---------------------------------------------------------------------- ipopt-enum
class _Search:
    """ipopt-enum's state in one process: the wall-clock deadline (a `time.monotonic` instant,
    one clock for every process of the machine; None: no limit) and the best feasible point
    evaluated (best kept: the answer is never worse than any seed). With `record`, `kept` lists
    every point that improved the best, in order, for the caller to replay (`_Runner.absorb`)."""

    def __init__(self, nlp: FixedNLP | None, deadline: float | None, *, record: bool = False):
        self.nlp = nlp
        self.deadline = deadline
        self.best: tuple[float, Solution | None, TerminationCondition] = (
            math.inf, None, TerminationCondition.error)
        self.timed_out = False
        self.kept: list | None = [] if record else None

    def expired(self) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.timed_out = True
        return self.timed_out

    def solve(self, decisions: Sequence[RoundDecision], warm: Solution | None = None
              ) -> tuple[Solution | None, TerminationCondition, float | None]:
        """One Ipopt solve (`FixedNLP.solve`), its point kept. With a deadline the solve gets
        Ipopt's max_cpu_time = the wall seconds left (this Ipopt has no wall-time cap; CPU time
        runs no faster than wall time, so on a loaded machine a solve may end a little late)."""
        check_interrupt()
        if self.deadline is not None:
            left = max(self.deadline - time.monotonic(), 1e-3)
            self.nlp.options["max_cpu_time"] = left
        sol, st, obj = self.nlp.solve(decisions, warm=warm)
        self.keep(sol, obj, st)
        return sol, st, obj

    def keep(self, sol: Solution | None, obj: float | None, st: TerminationCondition) -> None:
        if sol is not None and obj < self.best[0]:
            self.best = (obj, sol, st)
            if self.kept is not None:
                self.kept.append(self.best)


def _polish(search: _Search, sol: Solution, obj: float, st: TerminationCondition,
            repair: bool, rounds: Sequence[int] | None = None, max_rounds: int = 4
            ) -> tuple[Solution, float, TerminationCondition]:
    """Association repair on P (`association.repair_associations`, of `rounds`: all by
    default) and an Ipopt re-solve with the repaired associations, repeated while the objective
    falls; the best point is returned."""
    nlp = search.nlp
    for _round in range(max_rounds if repair else 0):
        if search.expired():
            break
        rep, moves = repair_associations(nlp.inst, sol, bound=nlp.bound, weights=nlp.weights,
                                         rounds=rounds)
        nlp.association_moves += moves
        if not moves:
            break
        rep_obj = system.evaluate(nlp.inst, rep, bound=nlp.bound, weights=nlp.weights).objective
        search.keep(rep, rep_obj, st)
        new = (rep, rep_obj, st)
        if not search.expired():
            sol2, st2, obj2 = search.solve(rep.rounds, warm=rep)
            if sol2 is not None and obj2 < rep_obj:
                new = (sol2, obj2, st2)
        if new[1] >= obj * (1 - 1e-9):
            break
        sol, obj, st = new
    return sol, obj, st


# ---- the units of work: each depends on its arguments only, so any process may run it
def _seed_task(search: _Search, opts: IpoptEnumOptions, label: str, aggs: list[int] | None,
               method: str | None) -> tuple[dict | None, tuple | None]:
    """One seed: the decisions of `aggs` (`decisions_for`), or the binaries of `method`'s run
    (decentralized or decentralized-polish, its own point kept and used as the warm start),
    solved by Ipopt and polished. Returns (trial, (objective, label, point, status) or None);
    trial None when the method found no point, or out of time before a seed of its own; a
    method's run stopped for time is a trial marked `stopped`."""
    inst, warm = search.nlp.inst, None
    trial: dict[str, Any] = {"seed": label, "objective": None}
    if method is not None:
        warm, stopped = (_read_seed(inst, method, opts.seed_points[method]), False) \
            if method in opts.seed_points else \
            _decentralized_seed(inst, method, opts.bound, search.deadline)
        if warm is None:   # a stopped seed is recorded: the search did not finish
            return ({**trial, "stopped": True} if stopped else None), None
        ev = system.evaluate(inst, warm, bound=opts.bound, weights=opts.weights)
        trial["own_objective"] = ev.objective if ev.feasible else None
        if ev.feasible:
            search.keep(Solution(rounds=[r.copy() for r in warm.rounds]), ev.objective,
                        TerminationCondition.locallyOptimal)
    dec = [r.copy() for r in warm.rounds] if warm is not None else decisions_for(inst, aggs)
    if search.expired():
        return (trial if warm is not None else None), None
    sol, st, obj = search.solve(dec, warm=warm)
    point = None
    if sol is not None:
        sol, obj, st = _polish(search, sol, obj, st, opts.assoc_repair)
        point = (obj, label, sol, st)
    trial["objective"] = obj
    return trial, point


def _move_task(search: _Search, opts: IpoptEnumOptions, sol: Solution, obj: float, t: int,
               s: int) -> tuple[Solution | None, float | None, TerminationCondition | None]:
    """Round t's aggregator moved to s, the other decisions kept, solved by Ipopt from `sol`;
    repaired and re-polished (`_polish`, round t) when it comes within `screen` of `obj`.
    (None, None, None) when screened out or out of time."""
    inst = search.nlp.inst
    if search.expired():
        return None, None, None
    dec = [r.copy() for r in sol.rounds]
    dec[t].aggregator = s
    if not opts.assoc_repair:
        dec[t].uplink_bs, dec[t].downlink_bs = association_rule(inst, t, s)
    new, st2, obj2 = search.solve(dec, warm=sol)
    if new is None or obj2 > obj * (1 + opts.screen):
        return None, None, None
    return _polish(search, new, obj2, st2, opts.assoc_repair, rounds=(t,))


def _polish_task(search: _Search, opts: IpoptEnumOptions, sol: Solution, obj: float,
                 st: TerminationCondition, repair: bool):
    return _polish(search, sol, obj, st, repair)


DEC_SEED_SHARE = 0.3     # of ipopt-enum's time left, the most a decentralised seed may take


def _decentralized_seed(inst: Instance, method: str, bound: str,
                        deadline: float | None) -> tuple[Solution | None, bool]:
    """(`method`'s point or None, whether it was stopped) for decentralized or
    decentralized-polish, which have no time limit of their own: with a `deadline` (a
    `time.monotonic` instant) the method runs in a forked child stopped after `DEC_SEED_SHARE`
    of the time left, so that the Ipopt seeds keep the rest; a stopped run gives no point."""
    if deadline is None:
        return decentralized.solve_decentralized(inst, method=method, bound=bound)[0], False
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_send_decentralized, args=(send, inst, method, bound))
    child.start()
    send.close()
    try:
        left = max(deadline - time.monotonic(), 0.0)
        return (recv.recv(), False) if recv.poll(DEC_SEED_SHARE * left) else (None, True)
    except EOFError:                                  # the child died without an answer
        return None, False
    finally:
        child.kill()
        child.join()
        recv.close()


def _read_seed(inst: Instance, method: str, path: str) -> Solution:
    """`method`'s point on `inst`, read from the solution file `path` (option `seed_points`);
    a file of another instance or another method is an error naming the file."""
    sol = Solution.load(path, instance=inst)
    if sol.instance_sha256 != inst.fingerprint():
        raise InstanceMismatch(f"seed_points[{method!r}]: {path} was not computed for this "
                               f"instance (its 'instance_sha256' is {sol.instance_sha256!r})")
    if sol.method != method:
        raise ValueError(f"seed_points[{method!r}]: {path} holds a point of method "
                         f"{sol.method!r}, not {method!r}")
    return sol


def _send_decentralized(conn, inst: Instance, method: str, bound: str) -> None:
    """The child of `_decentralized_seed`: the point on `conn`; it dies with its parent."""
    isolation.die_with_parent()
    conn.send(decentralized.solve_decentralized(inst, method=method, bound=bound)[0])


_TASKS = {"seed": _seed_task, "move": _move_task, "polish": _polish_task}
_COUNTS = ("n_solves", "retries", "association_moves", "iterations")
_WORKER: dict[str, Any] = {}     # a pool process's own FixedNLP and options


def _task(nlp: FixedNLP, opts: IpoptEnumOptions, deadline: float | None, kind: str,
          args: tuple) -> tuple[Any, list, dict[str, int], bool]:
    """Run one unit of work on `nlp`: (its value, the points that improved its own best, in
    order, its counts of solves, retries, association moves and iterations, out of time)."""
    before = [getattr(nlp, k) for k in _COUNTS]
    search = _Search(nlp, deadline, record=True)
    value = _TASKS[kind](search, opts, *args)
    counts = {k: getattr(nlp, k) - b for k, b in zip(_COUNTS, before)}
    return value, search.kept, counts, search.timed_out


def _worker_init(inst: Instance, opts: IpoptEnumOptions) -> None:
    import dataclasses
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent acts on Ctrl-C
    isolation.die_with_parent()
    isolation.leave_child()                          # the isolated parent's pipe is not ours
    _WORKER["opts"] = opts
    _WORKER["nlp"] = _nlp(inst, dataclasses.replace(opts, progress=False), per_solve_limit=False)


def _pool_task(deadline: float | None, kind: str, args: tuple):
    return _task(_WORKER["nlp"], _WORKER["opts"], deadline, kind, args)


class _Runner:
    """Runs ipopt-enum's units of work (`_TASKS`) one at a time in this process (`workers` 1)
    or on a pool of `workers` processes (`concurrent.futures`, each process with its own
    FixedNLP). Results come back in the order the tasks were given and the caller takes them in
    that order, stopping where the serial search would stop (an accepted move, the deadline);
    a unit depends only on its arguments, so every number of workers gives the same answer,
    bit for bit. Results past the stop are dropped unused (their solves are not counted)."""

    def __init__(self, inst: Instance, opts: IpoptEnumOptions, workers: int):
        self.inst, self.opts, self.workers = inst, opts, workers
        t0 = time.monotonic()
        self.search = _Search(None, None if opts.time_limit is None else t0 + opts.time_limit)
        self.t0 = t0
        self.counts = dict.fromkeys(_COUNTS, 0)
        self.bar = None
        if opts.progress:   # display only: a bar of the Ipopt solves on stderr
            from tqdm import tqdm
            self.bar = tqdm(desc="ipopt-enum", unit=" Ipopt solves", file=sys.stderr)
        self.pool = None
        if workers == 1:
            import dataclasses
            self.nlp = _nlp(inst, dataclasses.replace(opts, progress=False),
                            per_solve_limit=False)
        else:
            require_cyipopt()
            import concurrent.futures
            import multiprocessing
            self.pool = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("fork"),
                initializer=_worker_init, initargs=(inst, opts))

    def results(self, tasks: Sequence[tuple[str, tuple]]):
        """The outcomes of `tasks`, in order (a generator: closing it cancels the rest)."""
        if self.pool is None:
            for kind, args in tasks:
                yield _task(self.nlp, self.opts, self.search.deadline, kind, args)
            return
        futures = [self.pool.submit(_pool_task, self.search.deadline, kind, args)
                   for kind, args in tasks]
        try:
            for f in futures:
                while not f.done():
                    check_interrupt()
                    _futures_wait(f)
                yield f.result()
        finally:
            for f in futures:
                f.cancel()

    def absorb(self, outcome) -> Any:
        """Take one outcome: its kept points replayed in order, its counts added; its value."""
        value, kept, counts, timed_out = outcome
        for obj, sol, st in kept:
            self.search.keep(sol, obj, st)
        for k, v in counts.items():
            self.counts[k] += v
        if self.bar is not None:
            self.bar.update(counts["n_solves"])
        self.search.timed_out = self.search.timed_out or timed_out
        return value

    def close(self, failed: bool) -> None:
        if self.pool is not None:
            if failed:     # an interrupt or error: the workers' solves are not waited for
                for p in list(getattr(self.pool, "_processes", {}).values()):
                    p.kill()
            self.pool.shutdown(wait=not failed, cancel_futures=True)


def _futures_wait(f) -> None:
    import concurrent.futures
    concurrent.futures.wait([f], timeout=0.5)


def _seed_list(inst: Instance, opts: IpoptEnumOptions) -> list[tuple[str, tuple]]:
    """ipopt-enum's seeds as tasks: with `seed_decentralized`, the binaries of `decentralized`
    and `decentralized-polish` (§V's rounding, then their association moves or central repair,
    warm-started from their points); every constant aggregator schedule [s] * T (the `fixed`
    baselines), both greedy rules and `starts - 1` random schedules."""
    rng = np.random.default_rng(opts.seed)
    cands = [(f"fixed-{s}", [s] * inst.T) for s in range(inst.S)]
    cands += [("greedy-data", greedy_data_aggregators(inst)),
              ("greedy-rate", greedy_rate_aggregators(inst))]
    cands += [(f"random-{k}", [int(x) for x in rng.integers(inst.S, size=inst.T)])
              for k in range(1, opts.starts)]
    tasks = [("seed", (label, aggs, None)) for label, aggs in cands]
    if opts.seed_decentralized:
        tasks = [("seed", (m, None, m)) for m in DECENTRALIZED_SEEDS] + tasks
    return tasks


def _solve_seeds(runner: _Runner, opts: IpoptEnumOptions
                 ) -> tuple[list[tuple[float, str, Solution, TerminationCondition]], list[dict]]:
    """Each seed of `_seed_list` (its own point kept first, even out of time) solved by Ipopt
    with its binaries fixed and polished; returns the polished points, best first, and the
    trials. Stops at the first seed that ends out of time."""
    polished, trials = [], []
    outcomes = runner.results(_seed_list(runner.inst, opts))
    for out in outcomes:
        trial, point = runner.absorb(out)
        trials += [trial] if trial is not None else []
        polished += [point] if point is not None else []
        if runner.search.expired():
            break
    outcomes.close()
    return sorted(polished, key=lambda x: x[0]), trials


def _sweeps(runner: _Runner, opts: IpoptEnumOptions, sol: Solution, obj: float,
            st: TerminationCondition) -> tuple[Solution, float, TerminationCondition]:
    """Coordinate sweeps over each round's aggregator from `sol`, first improvement in the
    order (round, DC): each move (`_move_task`) keeps the other decisions. The moves after the
    current point are tried together (`runner`) and taken in order up to the first accepted
    one; the sweep resumes after it from the new point."""
    inst, search, moved = runner.inst, runner.search, False
    order = [(t, s) for t in range(inst.T) for s in range(inst.S)]
    for _sw in range(opts.sweeps):
        improved, pos = False, 0
        while pos < len(order) and not search.expired():
            batch = [(i, t, s) for i, (t, s) in enumerate(order[pos:], pos)
                     if s != sol.rounds[t].aggregator]
            pos = len(order)
            outcomes = runner.results([("move", (sol, obj, t, s)) for _i, t, s in batch])
            for (i, _t, _s), out in zip(batch, outcomes):
                new, obj2, st2 = runner.absorb(out)
                if new is not None and obj2 < obj * (1 - 1e-9):
                    sol, obj, st, improved, pos = new, obj2, st2, True, i + 1
                    break
                if search.expired():
                    break
            outcomes.close()
        moved = moved or improved
        if not improved or search.expired():
            break
    # the moves repaired their own round only: one repair of every round after them
    if not (opts.assoc_repair and moved):
        return sol, obj, st
    outcomes = runner.results([("polish", (sol, obj, st, True))])
    value = runner.absorb(next(outcomes))
    outcomes.close()
    return value


def _workers(opts: IpoptEnumOptions) -> int:
    return opts.workers if opts.workers is not None else isolation.cores()


def ipopt_enum(inst: Instance, opts: IpoptEnumOptions) -> Results:
    """`ipopt-enum`, the centralised reference: every seed of `_seed_list` is solved by Ipopt
    with its binaries fixed and polished (association repair on P, re-solve); from the best
    `starts` distinct seeds, coordinate sweeps over each round's aggregator (`_sweeps`), each
    accepted move polished. The independent solves run on `workers` processes (`_Runner`: the
    same answer for any number). `time_limit` bounds the whole search (wall seconds): when it
    runs out the best point so far is returned with termination maxTimeLimit. Best kept."""
    runner = _Runner(inst, opts, _workers(opts))
    failed = True
    try:
        polished, trials = _solve_seeds(runner, opts)
        starts, seen = [], set()
        for obj, _label, sol, st in polished:   # the best `starts` distinct schedules
            key = tuple(r.aggregator for r in sol.rounds)
            if key not in seen and len(starts) < opts.starts:
                seen.add(key)
                starts.append((obj, sol, st))
        for obj, sol, st in starts:
            if runner.search.expired():
                break
            _sweeps(runner, opts, sol, obj, st)
        failed = False
    finally:
        runner.close(failed)
    search = runner.search
    obj, best, st = search.best
    out_of_time = search.timed_out or any(t.get("stopped") for t in trials)
    if out_of_time:
        st = TerminationCondition.maxTimeLimit
    info = {"seeds": trials, "time_limit_reached": out_of_time,
            "search_s": time.monotonic() - runner.t0, "workers": runner.workers,
            "aggregators": best and [r.aggregator for r in best.rounds]}
    tally = types.SimpleNamespace(bar=runner.bar, **runner.counts)
    return _finish("ipopt-enum", inst, best, st, tally, opts, info)


# ---------------------------------------------------------------------- methods
def _nlp(inst: Instance, opts: IpoptOptions, *, no_offload: bool = False,
         label: str = "ipopt", per_solve_limit: bool = True) -> FixedNLP:
    nlp = FixedNLP(inst, bound=opts.bound, weights=opts.weights, no_offload=no_offload,
                   ipopt_options=opts.ipopt_options,
                   time_limit=opts.time_limit if per_solve_limit else None)
    if opts.progress:   # display only: a bar of the Ipopt solves on stderr
        from tqdm import tqdm
        nlp.bar = tqdm(desc=label, unit=" Ipopt solves", file=sys.stderr)
    return nlp


def _fixed_choice(method: str, inst: Instance, aggs: Sequence[int], opts: IpoptOptions, *,
                  no_offload: bool = False) -> Results:
    nlp = _nlp(inst, opts, no_offload=no_offload, label=method)
    sol, st, _obj = solve_with_repair(nlp, decisions_for(inst, aggs), repair=opts.assoc_repair)
    return _finish(method, inst, sol, st, nlp, opts, {"aggregators": list(map(int, aggs))})


def fixed_aggregator(inst: Instance, opts: FixedOptions) -> Results:
    if opts.aggregator >= inst.S:
        raise OptionError(f"method 'fixed': option 'aggregator' is {opts.aggregator}, not a DC "
                          f"index 0..{inst.S - 1}")
    return _fixed_choice("fixed", inst, [opts.aggregator] * inst.T, opts)


def greedy_data(inst: Instance, opts: GreedyOptions) -> Results:
    return _fixed_choice("greedy-data", inst, greedy_data_aggregators(inst), opts)


def greedy_rate(inst: Instance, opts: GreedyOptions) -> Results:
    return _fixed_choice("greedy-rate", inst, greedy_rate_aggregators(inst), opts)


def no_offload(inst: Instance, opts: NoOffloadOptions) -> Results:
    return _fixed_choice("no-offload", inst, greedy_rate_aggregators(inst), opts, no_offload=True)


# ---------------------------------------------------------------------- exhaustive reference
def all_binary_choices(inst: Instance):
    """Every (aggregator, uplink, downlink) choice of every round: the brute-force reference on
    tiny instances. Yields lists of round decisions (continuous parts from the reference)."""
    ref = system.reference_solution(inst)
    links = inst.ue_links()  # present UE-BS links only
    per_round = []
    for t in range(inst.T):
        opts = []
        for s in range(inst.S):
            for up in itertools.product(*links):
                for down in itertools.product(*links):
                    r = ref.rounds[t].copy()
                    r.aggregator, r.uplink_bs, r.downlink_bs = s, np.array(up), np.array(down)
                    opts.append(r)
        per_round.append(opts)
    for combo in itertools.product(*per_round):
        yield list(combo)


def exhaustive(inst: Instance, *, bound: str = "corollary", weights=None,
               max_choices: int = 5000) -> tuple[float, Solution | None, int]:
    """Best Ipopt objective over all binary choices (brute force; tiny instances only)."""
    count = (inst.S * math.prod(len(bs) for bs in inst.ue_links()) ** 2) ** inst.T
    if count > max_choices:
        raise ValueError(f"exhaustive enumeration would need {count} Ipopt solves (> {max_choices})")
    nlp = FixedNLP(inst, bound=bound, weights=weights)
    best, best_sol = math.inf, None
    for dec in all_binary_choices(inst):
        sol, _st, obj = nlp.solve(dec)
        if sol is not None and obj < best:
            best, best_sol = obj, sol
    return best, best_sol, count
