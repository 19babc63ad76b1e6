"""Mutation check: plant realistic bugs one at a time and see whether the default suite catches
them.

Each mutant replaces one exact piece of source text (it must occur exactly once) in a file of
the solvers, the model, the evaluator, the instance format or the learning code, runs the test
files (or single tests, as pytest node ids) that cover that code (pytest's default markers, so slow tests never count, `-x`: the first
failure catches it), and restores the file. A mutant is *caught* when pytest fails, *survived*
when it passes. The files are restored even on Ctrl-C.

Run it in a checkout whose working tree may be modified (a separate worktree):

    python tools/mutation_check.py --out mutation.csv          # every mutant
    python tools/mutation_check.py --only M03,M07              # some of them

A subset of the suite per mutant is a lower bound of what the whole default suite catches. The
check means something only where the unmutated suite passes on the same commit (`make test`).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    id: str
    path: str
    old: str
    new: str
    what: str
    tests: tuple[str, ...]
    alts: tuple[tuple[str, str], ...] = ()     # other (old, new) spellings of the same bug


EVAL = ("tests/test_system.py", "tests/test_system_round_and_bs_indices.py",
        "tests/test_model_agreement.py", "tests/test_reference_rates.py")
MODEL = ("tests/test_model_spec.py", "tests/test_model_agreement.py")
CENTRAL = ("tests/test_centralized.py", "tests/test_accept_reject.py",
           "tests/test_association.py")
DEC = ("tests/test_decentralized.py", "tests/test_sca_steps.py", "tests/test_accept_reject.py",
       "tests/test_assoc_moves.py")
INST = ("tests/test_instance.py", "tests/test_field_ranges.py", "tests/test_links.py")
LEARN = ("tests/test_learning_aggregation.py", "tests/test_learning_offload.py",
         "tests/test_learning_training.py")
# the bound: its component tests, then the cheap tests of test_bound.py (its enumerations and
# timed bounds are left out: the run stays affordable)
BOUND = ("tests/test_bound_components.py",
         "tests/test_bound.py::test_delay_floors_hold_at_feasible_points_with_their_aggregator",
         "tests/test_bound.py::test_delay_floor_by_hand_on_one_bs",
         "tests/test_bound.py::test_ml_floor_lies_below_the_ml_parts_of_feasible_points",
         "tests/test_bound.py::test_round_instance_is_that_round")
SCIP = ("tests/test_status_mapping.py",)
_AS = "tests/test_assoc_moves.py::test_"
ASSOC = tuple(_AS + n for n in (
    "bs_groups_are_every_bs_serving_two_or_more_ues_with_their_common_links",
    "a_sweep_tries_every_group_move_once", "group_moves_take_the_best_of_several_targets",
    "group_moves_lower_P_and_end_where_no_group_move_does", "trial_predictions_match_the_evaluator",
    "a_pass_lowers_P_by_at_least_its_predicted_gain",
    "the_screen_flags_exactly_the_ues_whose_leaving_lowers_dA_or_dR",
    "exact_moves_lower_P_and_end_where_no_flagged_trial_does",
    "vetoes_keep_the_kind_of_the_best_trial", "exact_moves_take_the_best_of_several_targets",
    "the_screen_keeps_the_trials_of_least_predicted_objective"))
_AG = "tests/test_aggregator_moves.py::test_"
AGG = tuple(_AG + n for n in (
    "better_accepts_only_a_fall_of_J_among_feasible_points",
    "better_puts_feasible_before_infeasible", "best_of_is_the_minimum_and_keeps_the_first_on_ties",
    "search_ends_at_a_coordinate_minimum_and_every_move_lowers_J",
    "search_keeps_the_incumbent_when_no_move_lowers_J", "search_passes_bound_the_work",
    "rank_estimates_puts_feasible_first_by_J_then_infeasible_by_violation",
    "screen_with_exact_estimates_finds_what_the_full_search_finds",
    "screen_finishes_only_the_best_estimates",
    "screen_estimates_only_when_a_visit_has_more_trials"))

MUTANTS: tuple[Mutant, ...] = (
    # ---- evaluator (cefl_opt/system.py)
    Mutant("M01", "cefl_opt/system.py", "D_n = (1.0 - r.rho_nb.sum(axis=1)) * Dbar",
           "D_n = (1.0 - r.rho_nb.sum(axis=1).clip(0, 0.5)) * Dbar",
           "data kept at the UE saturates at half", EVAL),
    Mutant("M02", "cefl_opt/system.py", "r.f ** 2 * inst.alpha / 2.0", "r.f ** 2 * inst.alpha",
           "UE computation energy without the 1/2", EVAL),
    Mutant("M03", "cefl_opt/system.py", "dD_s = dD_bs.max(axis=0) + dD_nb.max()",
           "dD_s = dD_bs.max(axis=0)", "DC collection delay forgets the UE->BS hop", EVAL),
    Mutant("M04", "cefl_opt/system.py", "dA = max(ue_path.max(), dc_path.max())",
           "dA = ue_path.max()", "aggregation delay ignores the DC paths", EVAL),
    Mutant("M05", "cefl_opt/system.py", "np.fill_diagonal(dM_ss, 0.0)",
           "np.fill_diagonal(dM_ss, dM_ss.mean())", "DC-to-itself transfer costs time", EVAL),
    Mutant("M06", "cefl_opt/system.py", "dR = max((dR_b + dB_b).max(), dR_s.max())",
           "dR = max(dR_b.max(), dR_s.max())", "reception delay forgets the BS->UE hop", EVAL),
    Mutant("M07", "cefl_opt/system.py", "(1.0 - q ** (2 * g)) / (1.0 - q ** 2)",
           "(1.0 - q ** (2 * g)) / (1.0 - q)", "||a||_2^2 with the wrong denominator",
           EVAL + ("tests/test_learning_aggregation.py",)),
    Mutant("M08", "cefl_opt/system.py", "        return lhs <= rhs * (1.0 - 1e-12)",
           "        return lhs <= rhs * 1.5", "step-size condition enforced 50 % too loosely",
           EVAL + ("tests/test_gamma_scaling.py",)),
    # ---- model (models/problem.py)
    Mutant("M09", "models/problem.py",
           "rule=lambda c_, t: sum(blk.R[t, b] for b in m.B) <= inst.Rmax_s[s] / GBIT)",
           "rule=lambda c_, t: sum(blk.R[t, b] for b in m.B) <= 2 * inst.Rmax_s[s] / GBIT)",
           "DC ingress knapsack twice too wide", MODEL),
    Mutant("M10", "models/problem.py",
           "(inst.rho_idle * blk.z[t] ** 2 + 1 - inst.rho_idle))",
           "(inst.rho_idle * blk.z[t] + 1 - inst.rho_idle))",
           "DC energy linear instead of quadratic in its speed", MODEL),
    Mutant("M11", "models/problem.py",
           "m.T, rule=lambda c_, t: blk.eBS[t] + blk.eNB[t] + blk.dP[t] + blk.dA_s[t] - blk.dA[t] "
           "<= 0)",
           "m.T, rule=lambda c_, t: blk.eBS[t] + blk.dP[t] + blk.dA_s[t] - blk.dA[t] <= 0)",
           "DC delay row forgets the UE->BS hop", MODEL),
    # ---- centralised solvers and association rules
    Mutant("M12", "solvers/centralized.py", "        if sol is not None and obj < self.best[0]:",
           "        if sol is not None and obj > self.best[0]:",
           "ipopt-enum keeps the worst point", CENTRAL),
    Mutant("M13", "solvers/centralized.py",
           "                if new is None or obj2 > obj * (1 + opts.screen):",
           "                if new is None or obj2 < obj * (1 + opts.screen):",
           "ipopt-enum's sweep polishes only the hopeless moves", CENTRAL,
           alts=(("    if new is None or obj2 > obj * (1 + opts.screen):",
                  "    if new is None or obj2 < obj * (1 + opts.screen):"),)),
    Mutant("M14", "solvers/centralized.py",
           "    return (rep, st, rep_obj) if rep_obj < obj else (sol, st, obj)",
           "    return (rep, st, rep_obj)", "association repair kept even when worse", CENTRAL),
    Mutant("M15", "cefl_opt/association.py",
           "if ev.feasible and ev.objective < best * (1 - 1e-12):",
           "if ev.objective < best * (1 - 1e-12):", "association move accepted when infeasible",
           ("tests/test_association.py",) + CENTRAL),
    # ---- decentralised solver
    Mutant("M16", "solvers/sca.py",
           "    return zeta_eff / 2.0 if rejected else min(zeta, 2.0 * zeta_eff)",
           "    return zeta_eff / 2.0 if rejected else min(zeta, zeta_eff)",
           "step factor never grows back", DEC),
    Mutant("M17", "solvers/sca.py",
           "        rejected = bool(raised) and viol_next > max(k.viol_tol, viol_now)",
           "        rejected = False", "no step is ever rejected", DEC),
    Mutant("M18", "solvers/sca.py",
           "            L[bad] = np.minimum(np.maximum(2.0 * L[bad], 1.5 * need), k.L_max)",
           "            L[bad] = np.minimum(2.0 * L[bad], k.L_max)",
           "curvature estimate ignores the measured need", DEC),
    Mutant("M19", "solvers/assoc_moves.py", "            if t < best:", "            if t > best:",
           "association move picks the worst partner", DEC),
    # ---- instance format
    Mutant("M20", "cefl_opt/instance.py",
           "out = (arr != 0) & ((np.abs(arr) < spec.lo) | (np.abs(arr) > spec.hi))",
           "out = (arr != 0) & (np.abs(arr) < spec.lo)", "upper ends of the ranges unchecked",
           INST),
    Mutant("M21", "cefl_opt/instance.py", "        if np.any(self.f_min > self.f_max):",
           "        if np.any(self.f_min > 2 * self.f_max):", "f_min above f_max accepted", INST),
    # ---- learning
    Mutant("M22", "cefl_opt/learning/strategies.py", "    p = [r.num_samples / D for r in results]",
           "    p = [1.0 / len(results) for r in results]", "aggregation ignores data sizes",
           LEARN),
    Mutant("M23", "cefl_opt/learning/trainer.py",
           "buf.add_(g + mu * (buf - x_t), alpha=-lr)", "buf.add_(g, alpha=-lr)",
           "FedProx without its proximal term", LEARN),
    Mutant("M24", "cefl_opt/learning/offload.py", "        k[order[:left]] += 1",
           "        k[order[:left - 1]] += 1", "largest remainder loses a sample", LEARN),
    # ---- the proven bound (solvers/bound.py)
    Mutant("M25", "solvers/bound.py", "blk.gamma[k].fix(r.gamma_min)",
           "blk.gamma[k].fix(r.gamma_max)", "round floor with gamma at gamma_max", BOUND),
    Mutant("M26", "solvers/bound.py", "np.maximum(gmin ** 2 / g2, g1 / (d * T) ** 2)",
           "np.maximum(gmin ** 2 / g2, g2 / (d * T) ** 2)",
           "ML floor's heterogeneity term at the wrong end of its cell", BOUND),
    Mutant("M27", "solvers/bound.py", "blk.m[k].fix(mu)", "blk.m[k].fix(1.0)",
           "round floor with every mini-batch ratio at 1", BOUND),
    Mutant("M28", "solvers/bound.py", "c0 = 4.0 * np.sqrt(g1) / (vt",
           "c0 = 4.0 * np.sqrt(g2) / (vt", "drift factor's floor at the cell's upper end", BOUND),
    Mutant("M29", "solvers/bound.py", "/ np.sqrt(g2) / m_hi\n", "/ np.sqrt(g1) / m_hi\n",
           "ML floor's noise term at the cell's lower end", BOUND),
    Mutant("M30", "solvers/bound.py", "(cut if lo is None else max(lo, cut))",
           "(cut if lo is None else lo)", "round floor not raised to its aggregator cut", BOUND,
           alts=(("else max(lo, floors[t][k])", "else lo"),
                 ("if lo is None else max(lo, lv.floors[t][k])", "if lo is None else lo"))),
    Mutant("M31", "solvers/bound.py", "(np.array(floors)[None] + rise).min(axis=2)",
           "(np.array(floors)[None] + rise).max(axis=2)", "bound takes the worst aggregator",
           BOUND),
    Mutant("M32", "solvers/bound.py", "        b = min(b, incumbent)",
           "        b = max(b, incumbent)", "bound above the incumbent it is capped by", BOUND,
           alts=(("else min(float(total[j]), top)", "else max(float(total[j]), top)"),)),
    Mutant("M33", "solvers/bound.py",
           'closed = all(s in ("convergenceCriteriaSatisfied",',
           'closed = any(s in ("convergenceCriteriaSatisfied",',
           "bound closed when one round subproblem is", BOUND,
           alts=(("closed=all(s in CLOSED", "closed=any(s in CLOSED"),)),
    Mutant("M34", "solvers/bound.py", "        return math.inf, tc", "        return None, tc",
           "a round SCIP proves empty reads as unbounded", BOUND),
    Mutant("M35", "solvers/bound.py", "LA[t, k] = max(up, float(ss[:, k].max()))",
           "LA[t, k] = max(up, float(ss[k, :].max()))", "aggregation floor on the wrong DC links",
           BOUND),
    Mutant("M36", "solvers/bound.py", "ts = float(inst.Theta.max()) * float(inst.sigma.max())",
           "ts = float(inst.Theta.min()) * float(inst.sigma.max())",
           "ML floor with the least Theta (valid, looser)", BOUND),
    # ---- scip (solvers/scip.py)
    Mutant("M37", "solvers/scip.py", "lower = finite(res.objective_bound)",
           "lower = finite(res.incumbent_objective)", "scip reports its incumbent as its bound",
           SCIP),
    Mutant("M38", "solvers/scip.py", "PyoTC.maxTimeLimit: TerminationCondition.maxTimeLimit,",
           "PyoTC.maxTimeLimit: TerminationCondition.convergenceCriteriaSatisfied,",
           "scip's time limit read as converged", SCIP),
    Mutant("M39", "solvers/scip.py",
           "PyoTC.locallyInfeasible: TerminationCondition.provenInfeasible,\n", "",
           "scip's locally infeasible read as unknown", SCIP),
    Mutant("M40", "solvers/scip.py",
           "SolutionStatus.optimal if status == TerminationCondition.convergenceCriteriaSatisfied",
           "SolutionStatus.optimal if status != TerminationCondition.unknown",
           "scip's incumbent called optimal when the run stopped early", SCIP),
    Mutant("M41", "solvers/scip.py", "lower = None if lower is None else min(lower, cut)",
           "lower = None if lower is None else lower", "scip's bound not capped by the cutoff",
           SCIP, alts=(("else min(lower, top)", "else lower"),)),
    Mutant("M42", "solvers/scip.py", "(ev.objective - lower) / max(abs(ev.objective), 1e-12)",
           "(ev.objective - lower) / max(abs(lower), 1e-12)", "scip's gap relative to the bound",
           SCIP),
    Mutant("M43", "solvers/scip.py", "bound=cut, info=info, message=f\"SCIP proved",
           "bound=None, info=info, message=f\"SCIP proved",
           "the cutoff proven by scip is not reported as the bound", SCIP,
           alts=(("bound=top, info=info, message=f\"SCIP proved",
                  "bound=None, info=info, message=f\"SCIP proved"),)),
    # ---- association and group moves (solvers/assoc_moves.py)
    Mutant("M44", "solvers/assoc_moves.py", "            if len(ues) < 2:",
           "            if len(ues) < 3:", "group moves skip BSs serving two UEs", ASSOC),
    Mutant("M45", "solvers/assoc_moves.py",
           "(best_v is None or vt.f < best_v.f):", "(best_v is None or vt.f > best_v.f):",
           "an exact or group move takes the worst evaluated target", ASSOC),
    Mutant("M46", "solvers/assoc_moves.py",
           "    if best_v is None or best_v.f >= base.f - 1e-12 * max(1.0, abs(base.f)):",
           "    if best_v is None:",
           "an exact or group move accepted even when it raises J", ASSOC),
    Mutant("M47", "solvers/assoc_moves.py", "if k not in bounded and c[k] + d > max(c[k], 0.0)",
           "if False and c[k] + d > max(c[k], 0.0)", "trial that violates a row not refused",
           ASSOC),
    Mutant("M48", "solvers/assoc_moves.py",
           "    return views.var_sum(np.maximum(fall, 0.0)) > 1e-12",
           "    return views.var_sum(np.maximum(fall, 0.0)) >= 0.0",
           "every UE flagged as lowering a shared max", ASSOC),
    Mutant("M49", "solvers/assoc_moves.py", "keep_raise = max(lst, key=lambda x: x[3])[2]",
           "keep_raise = min(lst, key=lambda x: x[3])[2]", "veto keeps the worst trial's kind",
           ASSOC),
    # ---- aggregator moves (solvers/aggregator_moves.py)
    Mutant("M50", "solvers/aggregator_moves.py", "    if fa != fb:\n        return fa",
           "    if fa != fb:\n        return fb", "an infeasible candidate beats a feasible one",
           AGG),
    Mutant("M51", "solvers/aggregator_moves.py",
           "    return c.J - GAIN_PER_TOL * viol_tol * max(1.0, abs(c.J))", "    return c.J",
           "a fall below the network's resolution counts as better", AGG),
    Mutant("M52", "solvers/aggregator_moves.py",
           "if best_t is not None and better(best_t, inc, viol_tol):",
           "if best_t is not None:", "aggregator move accepted even when worse", AGG),
    Mutant("M53", "solvers/aggregator_moves.py",
           "return (0, e.J) if e.viol <= viol_tol else (1, e.viol)",
           "return (0, -e.J) if e.viol <= viol_tol else (1, e.viol)",
           "the screen finishes the worst estimates", AGG),
    # ---- evaluator (cefl_opt/system.py), continued
    Mutant("M54", "cefl_opt/system.py", "    dA_s = dM_ss[:, agg]", "    dA_s = dM_ss[agg, :]",
           "DC-to-aggregator delay on the reverse links", EVAL),
    Mutant("M55", "cefl_opt/system.py", "inst.zeta2 * d * g_max ** 2 / (gbar * T)",
           "inst.zeta2 * d * g_max / (gbar * T)", "heterogeneity term linear in g_max", EVAL),
    Mutant("M56", "cefl_opt/system.py", "scale = np.minimum(1.0, inst.Rmax_s / R.sum(axis=0))",
           "scale = np.maximum(1.0, inst.Rmax_s / R.sum(axis=0))",
           "reference rates above the DC's capacity", EVAL),
    Mutant("M59", "solvers/assoc_moves.py",
           "key=lambda i: pred[i])[:keep]", "key=lambda i: -pred[i])[:keep]",
           "the screen of exact and group trials keeps the worst estimates", ASSOC),
    Mutant("M60", "solvers/aggregator_moves.py",
           "if best_t is None or better(cand, best_t, viol_tol):",
           "if best_t is None or better(best_t, cand, viol_tol):",
           "a visit keeps its worst finished trial", AGG),
    # ---- the other methods' status mappings
    Mutant("M57", "solvers/fixed_nlp.py",
           "PyoTC.maxTimeLimit: TerminationCondition.maxTimeLimit,",
           "PyoTC.maxTimeLimit: TerminationCondition.locallyOptimal,",
           "an Ipopt solve stopped by its time limit read as converged", SCIP),
    Mutant("M58", "solvers/decentralized.py", '"stalled": TerminationCondition.stalled}',
           '"stalled": TerminationCondition.locallyOptimal}',
           "a stalled decentralized run read as converged", SCIP),
)


def run_mutant(mu: Mutant, python: str, timeout: float) -> dict:
    """Plant `mu`, run its tests, restore the file; a row for the report."""
    path = ROOT / mu.path
    text = path.read_text()
    missing = [t for t in mu.tests if not (ROOT / t.split("::")[0]).exists()]
    spelling = next(((o, n) for o, n in ((mu.old, mu.new), *mu.alts) if text.count(o) == 1),
                    None)
    if spelling is None or missing:
        why = f"test files missing: {missing}" if missing else "text not found once"
        return {"id": mu.id, "what": mu.what, "result": f"not applied ({why})",
                "seconds": 0.0, "tests": " ".join(mu.tests)}
    t0 = time.perf_counter()
    try:
        path.write_text(text.replace(*spelling))
        p = subprocess.run([python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                            *mu.tests], cwd=ROOT, capture_output=True, text=True,
                           timeout=timeout)
        result = "survived" if p.returncode == 0 else "caught"
        first = next((ln for ln in p.stdout.splitlines() if ln.startswith("FAILED")), "")
    except subprocess.TimeoutExpired:
        result, first = "caught (timeout)", ""
    finally:
        path.write_text(text)
    return {"id": mu.id, "what": mu.what, "result": result,
            "seconds": round(time.perf_counter() - t0, 1), "first_failure": first,
            "tests": " ".join(mu.tests)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="comma-separated mutant ids")
    ap.add_argument("--out", default="mutation.csv")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per mutant")
    args = ap.parse_args(argv)
    import pandas as pd
    from tqdm import tqdm
    chosen = [m for m in MUTANTS if args.only is None or m.id in args.only.split(",")]
    rows = []
    for mu in tqdm(chosen, desc="mutants"):
        rows.append(run_mutant(mu, sys.executable, args.timeout))
        tqdm.write(f"{mu.id} {rows[-1]['result']:10s} {mu.what}")
    df = pd.DataFrame(rows)
    df.to_csv(args.out, index=False)
    applied = df[~df["result"].str.startswith("not applied")]
    caught = applied["result"].str.startswith("caught").sum()
    print(f"caught {caught} of {len(applied)} ({100 * caught / max(len(applied), 1):.0f} %); "
          f"not applied: {len(df) - len(applied)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
