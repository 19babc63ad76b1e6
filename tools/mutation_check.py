"""Mutation check: plant realistic bugs one at a time and see whether the default suite catches
them.

Each mutant replaces one exact piece of source text (it must occur exactly once) in a file of
the solvers, the model, the evaluator, the instance format or the learning code, runs the test
files that cover that code (pytest's default markers, so slow tests never count, `-x`: the first
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


EVAL = ("tests/test_system.py", "tests/test_system_round_and_bs_indices.py",
        "tests/test_model_agreement.py")
MODEL = ("tests/test_model_spec.py", "tests/test_model_agreement.py")
CENTRAL = ("tests/test_centralized.py", "tests/test_accept_reject.py",
           "tests/test_association.py")
DEC = ("tests/test_decentralized.py", "tests/test_sca_steps.py", "tests/test_accept_reject.py",
       "tests/test_assoc_moves.py")
INST = ("tests/test_instance.py", "tests/test_field_ranges.py", "tests/test_links.py")
LEARN = ("tests/test_learning_aggregation.py", "tests/test_learning_offload.py",
         "tests/test_learning_training.py")

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
           "ipopt-enum's sweep polishes only the hopeless moves", CENTRAL),
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
)


def run_mutant(mu: Mutant, python: str, timeout: float) -> dict:
    """Plant `mu`, run its tests, restore the file; a row for the report."""
    path = ROOT / mu.path
    text = path.read_text()
    missing = [t for t in mu.tests if not (ROOT / t).exists()]
    if text.count(mu.old) != 1 or missing:
        why = f"test files missing: {missing}" if missing else "text not found once"
        return {"id": mu.id, "what": mu.what, "result": f"not applied ({why})",
                "seconds": 0.0, "tests": " ".join(mu.tests)}
    t0 = time.perf_counter()
    try:
        path.write_text(text.replace(mu.old, mu.new))
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
