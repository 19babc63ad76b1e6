"""User-facing entry of the paper's distributed orchestration solver (§V): `solve_decentralized`.

    Alg. 1 (successive convex wrapper, `sca.run_sca`)
      -> Alg. 2 (primal-dual on each surrogate, `primal_dual.PrimalDual`)
         -> Alg. 3 (consensus on the duals over the communication graph, J rounds)
    -> rounding of the indicators (argmax of the copies' average) + association repair (each
       UE's uplink/downlink BS moved while the objective of P falls, `repair_associations`)
    -> Ipopt polish of the continuous variables with the binaries fixed (cyipopt)

`method="decentralized"`: every node keeps its own copy of (Lambda, Omega), mixed with
`consensus.mixing_matrix(inst.graph(), nodes, z)` for J rounds after the local dual step.
`method="centralized-pd"`: the same iteration with exact global dual updates (the paper's
"centralized solver" of Fig. centvsDec).

Initial point w^0 (`init`):
* "relaxed" (default): the reference orchestration (`system.reference_solution`: no offloading,
  mid-range f, m, gamma) with every indicator at the centre of its simplex (I_s = 1/S,
  I_nb = I_bn = 1/B). The forcing constraints sum I(1 - I) <= 0 are then violated and the SCA
  drives the indicators to a vertex; the vertex is chosen by the objective's gradient.
* "reference": the reference orchestration itself (feasible for P, aggregator 0, best-rate
  associations). The paper starts from a feasible point; with the forcing constraints
  linearised at a binary point the surrogate's feasible set for I is that point only, so the
  aggregator and the associations never move (measured: `info['aggregator_moved']`,
  `info['I_max_change']`, the largest change of an aggregator indicator from w^0).

Trace (one CSV row per outer iteration l, written when `trace_path` is given):
    outer, wall_s (since the call started, model build included), obj_model (J(w^l), the Pyomo
    model objective at w^l through PyomoNLP; it reads the copies of the nodes that own the
    objective's terms), obj_rounded (objective of P by
    `system.evaluate` at the owners' copies of w^l with the indicators rounded and the continuous
    variables clipped to their sets: a feasible orchestration, no polish), surrogate (J~(w_hat;
    w^l)), max_violation (max of C_k(w^l)^+ / |grad C_k(w^0)| over the non-forcing rows and of
    the normalised |G(w^l)|),
    dual_disagreement (max over nodes and duals of |Gamma_d - mean_d Gamma_d|), inner_iters,
    inner_residual, step_inf, aggregators (argmax per round, '|'-joined), I_binary_gap
    (max over rounds of 1 - max_s I_s, 0 when the aggregator indicators are binary),
    forcing_violation (max over the forcing rows of sum I (1 - I)), rejected / L_raised (the
    step-rejection and L_k adaptation of `sca.run_sca`).

Binary forcing schedule (a documented deviation, `PDConstants.force_after`, tuned default 10):
the forcing rows are left out of the first `force_after` surrogates (capped at max_outer // 3),
so the indicators first move with the continuous variables in the plain relaxation I in [0, 1];
then sum I (1 - I) <= 0 drives them to a vertex. With force_after = 0 (the paper) the vertex is
chosen by the objective's gradient at the reference continuous values; measured on tiny seeds
0-5 and small seeds 0-7 (14 instances, centralized-pd, 60 outer iterations, polished): worst gap
to the enumerated Ipopt optimum 2.05 % with force_after = 0, 0.60 % with 10 or 20.
"""
from __future__ import annotations

import csv
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from cefl_opt import system
from cefl_opt.instance import Instance
from cefl_opt.models import clip_to_bounds
from cefl_opt.solution import Solution

from .consensus import mixing_matrix, spectral_rate
from .primal_dual import PDConstants, PrimalDual, resolve_constants
from .repair import repair_associations
from .sca import BlockStructure, build_structure, run_sca

METHODS = ("decentralized", "centralized-pd")
INITS = ("relaxed", "reference")
TRACE_FIELDS = ("outer", "wall_s", "obj_model", "obj_rounded", "surrogate", "max_violation",
                "forcing_violation", "dual_disagreement", "inner_iters", "inner_residual",
                "step_inf", "rejected", "L_raised", "aggregators", "I_binary_gap")


def _consensus_weight(graph, nodes, z: float | None) -> tuple[np.ndarray, float, str]:
    """W for edge weight z; z outside (0, 1/max degree) falls back to 1/(max degree + 1)."""
    deg = max((d for _, d in graph.degree()), default=0)
    note = ""
    if z is not None and not (0.0 < z < (1.0 / deg if deg else math.inf)):
        note = (f"z = {z} >= 1/max_degree = {1.0 / deg:.4g}: using 1/(max_degree + 1)")
        z = None
    W, _ = mixing_matrix(graph, nodes, z)
    return W, (1.0 / (deg + 1.0) if z is None else float(z)), note


def _violation(st: BlockStructure, lin) -> float:
    """max of C_k(w)^+ over the non-forcing coupling rows, each divided by its gradient norm at
    w^0 (fixed units across iterations), and of |G(w)| (consensus rows, normalised)."""
    c = lin.c_raw / st.coup_norm
    if len(st.force_rows):
        c = np.delete(c, st.force_rows)
    return max(float(np.max(c, initial=0.0)), float(np.max(np.abs(lin.G), initial=0.0)))


def _forcing(st: BlockStructure, lin) -> float:
    """max of sum I (1 - I) over the forcing rows (0 iff the indicators are binary)."""
    return float(np.max(lin.c_raw[st.force_rows], initial=0.0)) if len(st.force_rows) else 0.0


def _polish(inst: Instance, sol: Solution, *, bound: str, ipopt_options: dict | None
            ) -> tuple[Solution | None, str]:
    """Ipopt on P with the binaries of `sol` fixed, started from `sol`'s continuous values."""
    from . import centralized
    nlp = centralized.FixedNLP(inst, bound=bound, ipopt_options=ipopt_options)
    out, status, _obj = nlp.solve(sol.rounds, warm=sol)
    return out, str(getattr(status, "value", status))


def solve_decentralized(inst: Instance, *, method: str = "decentralized",
                        consensus_rounds: int = 30, max_outer: int = 60,
                        bound: str = "corollary",
                        constants: str | dict | PDConstants | None = None,
                        seed: int = 0, init: str = "relaxed", trace_path: str | Path | None = None,
                        progress: bool = True, polish: bool = True, repair: bool = True,
                        ipopt_options: dict | None = None,
                        structure: BlockStructure | None = None) -> tuple[Solution, dict[str, Any]]:
    """Paper §V on `inst`; returns (a binary orchestration feasible for P, info).

    method: "decentralized" (Alg. 1-3) or "centralized-pd" (Alg. 1-2, exact dual updates).
    consensus_rounds: J of Alg. 3 (ignored by centralized-pd). max_outer: K of Alg. 1.
    constants: "tuned" (default), "paper" (SPEC §5 table) or a dict overriding fields of
    `primal_dual.PDConstants` (optionally with "preset"). seed: recorded in the result only;
    the method makes no random choice (the communication graph is part of the instance).
    init: "relaxed" or "reference" (see the module docstring). polish: run Ipopt with the
    binaries fixed at the end (else the rounded, clipped point is returned). repair: improve
    each UE's rounded uplink/downlink BS by the objective of P (`repair_associations`) before the
    polish. structure: a prebuilt `sca.build_structure` result for the same instance/bound/init
    (benchmarks reuse it across runs).
    """
    if method not in METHODS:
        raise ValueError(f"method {method!r}: expected one of {METHODS}")
    if init not in INITS:
        raise ValueError(f"init {init!r}: expected one of {INITS}")
    if max_outer < 1:
        raise ValueError(f"max_outer must be >= 1, got {max_outer}")
    if consensus_rounds < 0:
        raise ValueError(f"consensus_rounds must be >= 0, got {consensus_rounds}")
    k = resolve_constants(constants)
    t_start = time.perf_counter()
    st = structure if structure is not None else build_structure(
        inst, bound=bound, relax_init=(init == "relaxed"))
    t_built = time.perf_counter()
    lin0 = st.linearise(st.u0)
    info: dict[str, Any] = {"method": method, "init": init, "bound": bound,
                            "constants": k.as_dict(), "n_variables": st.n,
                            "n_coupling": len(st.coup_rows), "n_consensus": len(st.cons_rows),
                            "n_nodes": st.n_nodes, "projection_groups": dict(st.group_counts)}
    if method == "decentralized":
        graph = inst.graph()
        W, zz, note = _consensus_weight(graph, st.node_names, k.z)
        pd = PrimalDual(st, k, lin0, mode="decentralized", W=W, J=consensus_rounds)
        info.update(consensus_rounds=int(consensus_rounds), z=zz, spectral_rate=spectral_rate(W))
        if note:
            info["z_note"] = note
    else:
        pd = PrimalDual(st, k, lin0, mode="centralized")
    info.update(pd.step_summary(), seed=seed)

    # the forcing constraints act in at least the last 2/3 of the outer iterations
    force_after = min(int(k.force_after), max_outer // 3)
    info["force_after"] = force_after
    dec0 = st.decisions(st.u0)
    agg_hist: list[list[int]] = []
    gap_hist: list[float] = []
    rows: list[dict[str, Any]] = []
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=max_outer, desc=f"{method} (J={consensus_rounds})" if method ==
                   "decentralized" else method, leave=False)
    t_loop = time.perf_counter()

    def callback(rec) -> bool:
        dec = st.decisions(rec.u)
        aggs = [int(a) for a in dec["Is"].argmax(axis=1)]
        agg_hist.append(aggs)
        gap_hist.append(float(np.max(1.0 - dec["Is"].max(axis=1))))
        sol_r = clip_to_bounds(st.to_solution(rec.u, method=method), inst, bound)
        ev = system.evaluate(inst, sol_r, bound=bound)
        row = {"outer": rec.it, "wall_s": time.perf_counter() - t_start,
               "obj_model": rec.lin.f, "obj_rounded": ev.objective, "surrogate": rec.surrogate,
               "max_violation": _violation(st, rec.lin),
               "forcing_violation": _forcing(st, rec.lin),
               "dual_disagreement": pd.disagreement(),
               "inner_iters": rec.inner["inner_iters"], "inner_residual": rec.inner["residual"],
               "step_inf": rec.step_inf, "rejected": int(rec.rejected),
               "L_raised": rec.L_raised, "aggregators": "|".join(map(str, aggs)),
               "I_binary_gap": float(np.max(1.0 - dec["Is"].max(axis=1)))}
        rows.append(row)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(obj=f"{rec.lin.f:.4g}", viol=f"{row['max_violation']:.1e}")
        return False

    try:
        u, recs, reason, L_raw = run_sca(st, pd.solve, zeta=k.zeta, lambda1=k.lambda1,
                                         L_C=k.L_C, max_outer=max_outer, tol=k.outer_tol,
                                         lin0=lin0, callback=callback,
                                         force_after=force_after)
    finally:
        if bar is not None:
            bar.close()
    t_sca = time.perf_counter()

    # ---- final iterate: round, repair, measure how far the indicators moved
    dec_end = st.decisions(u)
    aggs_end = [int(a) for a in dec_end["Is"].argmax(axis=1)]
    agg_hist.append(aggs_end)
    gap_hist.append(float(np.max(1.0 - dec_end["Is"].max(axis=1))))
    # "decided": every round's aggregator indicator within 0.01 of a vertex; the argmax before
    # that (e.g. of the uniform relaxed start) is not a decision
    decided = next((i for i, g in enumerate(gap_hist) if g <= 0.01), None)
    changes = sum(1 for a, b in zip(agg_hist, agg_hist[1:]) if a != b)
    changes_after = (sum(1 for a, b in zip(agg_hist[decided:], agg_hist[decided + 1:]) if a != b)
                     if decided is not None else None)
    lin_end = st.linearise(u)
    info.update(
        outer_iterations=len(recs), stop_reason=reason,
        rejected_steps=int(sum(r.rejected for r in recs)),
        L_max_normalised=float(np.max(L_raw / lin_end.row_scale, initial=0.0)),
        inner_iterations=int(sum(r.inner["inner_iters"] for r in recs)),
        aggregators_initial=[int(a) for a in dec0["Is"].argmax(axis=1)],
        aggregators_final=aggs_end,
        aggregator_decided_at=decided,
        aggregator_changes=changes,
        aggregator_changes_after_decided=changes_after,
        # moved = changed after first being decided (init='reference': from the start; from
        # the relaxed start the argmax of the centre is no decision)
        aggregator_moved=bool(changes_after) if changes_after is not None else None,
        I_max_change=float(np.max(np.abs(dec_end["Is"] - dec0["Is"]))),
        Inb_max_change=float(np.max(np.abs(dec_end["Inb"] - dec0["Inb"]))),
        Ibn_max_change=float(np.max(np.abs(dec_end["Ibn"] - dec0["Ibn"]))),
        I_binary_gap_final=float(np.max(1.0 - dec_end["Is"].max(axis=1))),
        final_max_violation=_violation(st, lin_end),
        final_forcing_violation=_forcing(st, lin_end),
        final_dual_disagreement=pd.disagreement(),
    )
    rounded = clip_to_bounds(st.to_solution(u, method=method, status="rounded"), inst, bound)
    info["objective_rounded_raw"] = system.evaluate(inst, rounded, bound=bound).objective
    if repair:
        t_r = time.perf_counter()
        rounded, info["association_moves"] = repair_associations(inst, rounded, bound=bound)
        info["repair_s"] = time.perf_counter() - t_r
    ev_r = system.evaluate(inst, rounded, bound=bound)
    info["objective_rounded"] = ev_r.objective
    final, status = rounded, "rounded"
    if polish:
        t_p = time.perf_counter()
        pol, pstat = _polish(inst, rounded, bound=bound, ipopt_options=ipopt_options)
        info["polish_s"] = time.perf_counter() - t_p
        info["polish_status"] = pstat
        if pol is not None:
            ev_p = system.evaluate(inst, pol, bound=bound)
            if ev_p.feasible and ev_p.objective <= ev_r.objective + 1e-12:
                final, status = pol, "polished"
    ev = system.evaluate(inst, final, bound=bound)
    final.method, final.status = method, status
    final.objective, final.terms = ev.objective, ev.terms
    t_end = time.perf_counter()
    info.update(objective=ev.objective, feasible=ev.feasible, status=status,
                wall_s=t_end - t_start, build_s=t_built - t_start, sca_s=t_sca - t_loop,
                sca_s_per_outer=(t_sca - t_loop) / max(len(recs), 1))
    final.wall_s = info["wall_s"]
    final.info.update({k_: v for k_, v in info.items() if k_ != "constants"})
    if trace_path is not None:
        write_trace(trace_path, rows)
    info["trace"] = rows
    return final, info


def write_trace(path: str | Path, rows: list[dict[str, Any]]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=TRACE_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.10g}" if isinstance(v, float) else v) for k, v in r.items()})


# ---------------------------------------------------------------------- solver registry
def run_method(inst: Instance, opts, name: str):
    """`solve(inst, name, ...)` for name in METHODS: `opts` (a
    `solvers.options.DecentralizedOptions`) mapped onto `solve_decentralized`; registered in
    `solvers/plugins.py`."""
    from .base import Results, SolutionStatus, TerminationCondition
    sol, info = solve_decentralized(
        inst, method=name, consensus_rounds=opts.consensus_rounds, max_outer=opts.max_outer,
        bound=opts.bound, constants=resolve_constants(opts.constant_overrides()), seed=opts.seed,
        init=opts.init, trace_path=opts.trace_path, progress=opts.progress, polish=opts.polish,
        repair=opts.repair, ipopt_options=opts.ipopt_options)
    info = {k_: v for k_, v in info.items() if k_ != "trace"}
    tc = (TerminationCondition.locallyOptimal if info["stop_reason"] == "converged"
          else TerminationCondition.iterationLimit)
    return Results(method=name, termination_condition=tc,
                   solution_status=SolutionStatus.feasible if info["feasible"]
                   else SolutionStatus.infeasible,
                   solution=sol, objective=sol.objective, wall_s=info["wall_s"],
                   iterations=info["outer_iterations"], info=info)


def run_decentralized(inst: Instance, opts):
    return run_method(inst, opts, "decentralized")


def run_centralized_pd(inst: Instance, opts):
    return run_method(inst, opts, "centralized-pd")
