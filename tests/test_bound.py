"""The proven lower bound (solvers/bound.py) and scip's cutoff: the cuts hold at feasible
points, the bound lies below the enumerated optimum (tiny) and below every feasible objective
found (small), both branches of the cutoff, and bad inputs."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cefl_opt import system
from cefl_opt.instance import Instance
from cefl_opt.solution import Solution
from cefl_opt.generator import make_instance
from cefl_opt.solvers.base import SolutionStatus, TerminationCondition, solve
from cefl_opt.solvers.bound import (cap_objective, decomposed_bound, delay_floors, ml_floor,
                                    round_instance, verified_reference)
from cefl_opt.solvers.options import OptionError, ScipOptions


@pytest.fixture(scope="module")
def small2():
    return make_instance("small", seed=7101, rounds=2)


@pytest.fixture(scope="module")
def feasible_points(small2):
    """Feasible solutions of small2: the fixed aggregator k in every round, for each k."""
    return [solve(small2, "fixed", aggregator=k).solution for k in range(small2.S)]


def test_delay_floors_hold_at_feasible_points_with_their_aggregator(small2, feasible_points):
    LA, LR = delay_floors(small2)
    assert (LA > 0).all() and (LR > 0).all()
    for sol in feasible_points:
        ev = system.evaluate(small2, sol)
        assert ev.feasible
        for t, r in enumerate(ev.rounds):
            k = r["aggregator"]
            assert r["dA"] >= LA[t, k] * (1 - 1e-7)
            assert r["dR"] >= LR[t, k] * (1 - 1e-7)


def test_delay_floor_by_hand_on_one_bs():
    # one BS: every UE uploads through BS 0, so LA = max(max_n beta_M/R_nb + beta_M/Rmax_bs,
    # the other DC's beta_M/R_ss) and LR = max(max_n beta_M/R_sb + beta_M/R_bn, beta_M/R_ss)
    inst = make_instance("tiny", seed=3)
    LA, LR = delay_floors(inst)
    bM = inst.beta_M
    for t in range(inst.T):
        for k in range(inst.S):
            o = 1 - k
            up = max(bM / inst.R_nb[t, n, 0] for n in range(inst.N)) + bM / inst.Rmax_bs[0, k]
            down = max(bM / inst.R_bn[t, 0, n] for n in range(inst.N)) + bM / inst.R_sb[t, k, 0]
            assert LA[t, k] == pytest.approx(max(up, bM / inst.R_ss[t, o, k]), rel=1e-12)
            assert LR[t, k] == pytest.approx(max(down, bM / inst.R_ss[t, k, o]), rel=1e-12)


def test_ml_floor_lies_below_the_ml_parts_of_feasible_points(small2, feasible_points):
    F, c0 = ml_floor(small2)
    assert (np.diff(c0) > 0).all()
    for sol in feasible_points + [system.reference_solution(small2)]:
        ev = system.evaluate(small2, sol)
        p = ev.ml_parts
        rest = small2.xi1 * (p["init"] + p["noise"] + p["local"] + p["hetero"])
        assert F.min() <= rest * (1 + 1e-9)
        tau_delta = sum((r["dA"] + r["dR"]) * small2.Delta[t].sum()
                        for t, r in enumerate(ev.rounds))
        assert c0[0] * tau_delta <= small2.xi1 * p["drift"] * (1 + 1e-9)


def test_round_instance_is_that_round():
    inst = make_instance("small", seed=7102, rounds=3)
    r = round_instance(inst, 1)
    assert r.T == 1
    np.testing.assert_array_equal(r.Dbar[0], inst.Dbar[1])
    np.testing.assert_array_equal(r.R_ss[0], inst.R_ss[1])
    np.testing.assert_array_equal(r.Rmax_bs, inst.Rmax_bs)


@pytest.mark.xdist_group("enumerated-tiny")
# the cut run takes its 40 s: slow (the default suite's checks of the bound against the
# enumerated optimum: test_the_bound_with_levels_is_below_the_enumerated_optimum, and the main
# job's test_the_report_gives_the_gap_to_a_proven_bound)
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_decomposed_bound_is_below_the_enumerated_optimum(seed, enumerated):
    inst, (best, _sol, _count) = enumerated("tiny", seed=seed)
    free = decomposed_bound(inst, 2)   # runs to its limit; only the cut's bound is judged
    cut = decomposed_bound(inst, 40, incumbent=best)
    assert free.bound <= best * (1 + 1e-6) and cut.bound <= best * (1 + 1e-6)
    assert cut.bound >= 0.8 * best            # and, given the optimum's value, not a trivial one
    assert cut.cutoff == best and cut.cutoff_source == "incumbent"
    assert free.cutoff_source == "reference" and free.cutoff >= best * (1 - 1e-9)


@pytest.mark.xdist_group("enumerated-tiny")
def test_an_incumbent_below_the_optimum_is_the_bound(enumerated):
    # min P >= min(U, bound under J <= U): with U below the optimum nothing lies under the
    # cut, and the bound is U itself
    inst, (best, _sol, _count) = enumerated("tiny", seed=0)
    r = decomposed_bound(inst, 10, incumbent=0.5 * best)
    assert r.bound == 0.5 * best


@pytest.mark.slow
def test_decomposed_bound_is_below_every_feasible_objective_on_small(small2):
    objs = [solve(small2, m).objective for m in ("decentralized", "ipopt-enum")]
    r = decomposed_bound(small2, 60, incumbent=min(objs))
    assert all(r.bound <= o * (1 + 1e-6) for o in objs)
    assert r.bound > 0


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), None, True])
def test_a_time_limit_that_is_not_positive_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="option 'time_limit' must be a positive number"):
        decomposed_bound(make_instance("tiny", seed=0), bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_an_incumbent_that_is_not_positive_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="option 'incumbent' must be a positive finite"):
        decomposed_bound(make_instance("tiny", seed=0), 5, incumbent=bad)


def test_the_decomposed_bound_needs_a_constant_vartheta():
    inst = make_instance("tiny", seed=0, vartheta_mode="tau_eff")
    with pytest.raises(ValueError, match="vartheta_mode 'constant'"):
        decomposed_bound(inst, 5)


@pytest.mark.parametrize("bad", [0.0, -2.0])
def test_scip_cutoff_and_the_methods_options_must_be_positive(bad):
    from cefl_opt.solvers.options import BoundOptions
    with pytest.raises(OptionError, match="incumbent"):
        ScipOptions(incumbent=bad)
    for field in ("time_limit", "incumbent"):
        with pytest.raises(OptionError, match=field):
            BoundOptions(**{field: bad})
    assert ScipOptions(incumbent=1e-9).incumbent == 1e-9 and ScipOptions().incumbent is None


def _cli(argv, capsys) -> tuple[int, str]:
    """`cefl-opt argv` in this process: its exit code and stderr."""
    from cefl_opt import cli
    rc = cli.main(argv)
    return rc, capsys.readouterr().err


def test_scip_cutoff_flag_rejects_zero_with_a_clear_error(tmp_path, capsys):
    net = tmp_path / "net.json"
    make_instance("tiny", seed=0).save(net)
    rc, err = _cli(["solve", str(net), "--method", "scip", "--set", "incumbent=0", "--out",
                    str(tmp_path / "s.json")], capsys)
    assert rc == 2
    assert "cefl-opt: error:" in err and "incumbent" in err
    assert "Traceback" not in err and not (tmp_path / "s.json").exists()


def _closable(enumerated):
    """One BS, one round, narrow f and gamma: small enough for SCIP to close; the instance and
    its enumerated optimum."""
    inst, (best, _sol, _count) = enumerated("tiny", seed=0, bss=1, rounds=1,
                                            f_min=np.full(2, 0.5e9), gamma_max=5.0)
    return inst, best


@pytest.mark.xdist_group("enumerated-tiny-closable")
def test_scip_with_a_cutoff_below_the_optimum_proves_the_cutoff(enumerated):
    inst, best = _closable(enumerated)
    res = solve(inst, "scip", time_limit=60, incumbent=0.5 * best)
    assert res.solution_status == SolutionStatus.noSolution and res.solution is None
    assert res.termination_condition == TerminationCondition.convergenceCriteriaSatisfied
    assert res.bound == 0.5 * best and "cutoff" in res.message


@pytest.mark.xdist_group("enumerated-tiny-closable")
def test_scip_with_a_cutoff_above_the_optimum_bounds_and_finds_it(enumerated):
    inst, best = _closable(enumerated)
    res = solve(inst, "scip", time_limit=120, gap=0.02, incumbent=1.05 * best)
    assert res.bound <= best * (1 + 1e-6)
    assert res.objective == pytest.approx(best, rel=1e-4)
    assert res.info["cutoff"] == 1.05 * best


@pytest.mark.xdist_group("enumerated-tiny")
@pytest.mark.slow
def test_the_method_reports_decentralizeds_answer_and_a_bound_below_it(enumerated, monkeypatch):
    from cefl_opt.solvers import bound
    monkeypatch.setattr(bound, "INCUMBENT_SHARE", 0.9)   # decentralized's time, under load
    inst, (best, _sol, _count) = enumerated("tiny", seed=1)
    res = solve(inst, "decomposed-bound", time_limit=40)
    assert res.solution_status == SolutionStatus.feasible
    ev = system.evaluate(inst, res.solution)
    assert ev.feasible and res.objective == pytest.approx(ev.objective, rel=1e-9)
    assert res.bound <= best * (1 + 1e-6) <= res.objective * (1 + 1e-6)
    assert res.gap == pytest.approx((res.objective - res.bound) / res.objective)
    assert res.info["incumbent_method"] == "decentralized"
    assert res.report["cutoff_source"] == "incumbent"


def test_the_method_with_an_incumbent_reports_a_bound_only():
    inst = make_instance("tiny", seed=1)
    res = solve(inst, "decomposed-bound", time_limit=3, incumbent=5.0)   # valid at any limit
    assert res.solution is None and res.solution_status == SolutionStatus.noSolution
    assert res.bound is not None and res.bound <= 5.0 and res.info["incumbent"] == 5.0


@pytest.mark.parametrize("args, text", [
    (["--time-limit", "none"], "option 'time_limit' must be a positive number of seconds"),
    (["--bound", "general"], "needs bound 'corollary'"),
])
def test_the_method_rejects_bad_options_with_a_clear_error(tmp_path, capsys, args, text):
    net = tmp_path / "net.json"
    make_instance("tiny", seed=0).save(net)
    rc, err = _cli(["solve", str(net), "--method", "decomposed-bound", *args, "--out",
                    str(tmp_path / "s.json")], capsys)
    assert rc == 2, err
    assert err.startswith("cefl-opt: error:") and text in err
    assert "Traceback" not in err and not (tmp_path / "s.json").exists()


# ---------------------------------------------------------------------- the capacity edge
# 1 UE, 2 BSs, 1 DC, T = 1, where R_floor lifts the reference's full rates above Rmax_s
# (tests/data: the instance, and two points of it, by scip and by ipopt-enum)
DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def edge():
    inst = Instance.load(DATA / "edge_capacity_1ue_2bs.json")
    objs = []
    for name in ("scip", "ipopt-enum"):
        ev = system.evaluate(inst, Solution.load(DATA / f"edge_capacity_1ue_2bs.{name}.json"))
        assert ev.feasible
        objs.append(ev.objective)
    return inst, objs


def test_the_full_rates_reference_breaks_server_capacity_on_the_edge_and_is_refused(edge):
    inst, objs = edge
    ev = system.evaluate(inst, system.reference_solution(inst))
    assert [v[0] for v in ev.violations] == ["t0:sum_b R_bs<=Rmax_s (eqn: Server_capacity)[0]"]
    assert ev.objective < min(objs)             # below feasible points: no cutoff may use it
    # by hand: R_floor 1e6 each, then Rmax_s - 2 R_floor = 5e5 of headroom [99e6, 0] to BS 0
    np.testing.assert_allclose(system.capacity_rates(inst), [[1.5e6], [1e6]], rtol=1e-12)
    sol, obj = verified_reference(inst)
    assert system.evaluate(inst, sol).feasible and obj >= max(objs)
    assert cap_objective(inst) == (obj, "reference")
    assert cap_objective(inst, 0.5 * obj) == (0.5 * obj, "incumbent")


def test_a_reference_that_evaluate_rejects_is_no_cutoff(edge, monkeypatch):
    inst, objs = edge
    monkeypatch.setattr(system, "capacity_rates", system.full_rates)
    assert verified_reference(inst) is None and cap_objective(inst) == (None, None)
    r = decomposed_bound(inst, 10)
    assert r.cutoff is None and r.cutoff_source is None
    assert 0 < r.bound <= min(objs) * (1 + 1e-6)


def test_scip_finds_the_edge_instance_feasible_and_bounds_it_below_its_points(edge):
    inst, objs = edge
    res = solve(inst, "scip", time_limit=20)
    assert res.termination_condition != TerminationCondition.provenInfeasible
    assert res.bound is not None and res.bound <= min(objs) * (1 + 1e-6)
    assert res.info["cutoff_source"] == "reference"
    assert system.evaluate(inst, res.solution).feasible


def test_decomposed_bound_on_the_edge_instance_lies_below_its_points(edge):
    inst, objs = edge
    free = decomposed_bound(inst, 10)
    given = decomposed_bound(inst, 10, incumbent=max(objs))
    for r in (free, given):
        assert 0 < r.bound <= min(objs) * (1 + 1e-6)
        assert np.isfinite(r.rounds).all()
    assert given.cutoff == max(objs) and given.cutoff_source == "incumbent"


# ---------------------------------------------------------------------- output cannot block
def test_scip_printing_megabytes_through_pyomos_capture_ends():
    # SCIP's node log, every node, with its LP solver's output, into the pipe that Pyomo's
    # capture_output drains with a thread; with the GIL held it would block for ever
    code = textwrap.dedent("""
        import numpy as np, pyomo.environ as pyo
        from cefl_opt.solvers.scip import QuietScip
        A = np.random.default_rng(0).integers(0, 100, size=(3, 24))
        m = pyo.ConcreteModel()
        m.x = pyo.Var(range(24), domain=pyo.Binary)
        m.s = pyo.Var(range(3), bounds=(-1e3, 1e3))
        m.a = pyo.Var(range(3), bounds=(0, 1e3))
        m.c = pyo.Constraint(range(3), rule=lambda m, i: sum(int(A[i, j]) * m.x[j]
                             for j in range(24)) + m.s[i] == int(A[i].sum() // 2))
        m.p = pyo.Constraint(range(3), rule=lambda m, i: m.a[i] >= m.s[i])
        m.n = pyo.Constraint(range(3), rule=lambda m, i: m.a[i] >= -m.s[i])
        m.o = pyo.Objective(expr=sum(m.a.values()))
        res = QuietScip().solve(m, tee=False, load_solutions=False,
                                raise_exception_on_nonoptimal_result=False,
                                solver_options={"display/verblevel": 5, "display/freq": 1,
                                                "display/headerfreq": 1, "display/lpinfo": True,
                                                "limits/nodes": 500})
        print(len(res.solver_log))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout.split()[-1]) > 1_000_000


def test_scip_shows_no_display_unless_asked():
    from cefl_opt.solvers.scip import scip_params
    assert scip_params(5.0, 1e-6, 0)["display/verblevel"] == 0


# ---------------------------------------------------------------------- what the method writes
def _bound_cli(tmp_path, net, *args):
    out = tmp_path / "bound.json"
    p = subprocess.run([sys.executable, "-m", "cefl_opt.cli", "solve", str(net), "--method",
                        "decomposed-bound", *args, "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    return p, out


def test_the_method_with_an_incumbent_writes_its_bound_and_exits_0(tmp_path, edge):
    inst, objs = edge
    p, out = _bound_cli(tmp_path, DATA / "edge_capacity_1ue_2bs.json", "--time-limit", "10",
                        "--set", f"incumbent={max(objs)!r}")
    assert p.returncode == 0, p.stderr
    rep = json.loads(out.read_text())
    assert rep["format"] == "cefl-bound/1" and rep["incumbent"] == max(objs)
    assert rep["bound"] <= min(objs) * (1 + 1e-6)
    assert rep["gap"] == pytest.approx((max(objs) - rep["bound"]) / max(objs))
    assert rep["cutoff"] == max(objs) and rep["cutoff_source"] == "incumbent"
    (row,) = rep["rounds"]
    assert len(row["floors"]) == inst.S == len(row["scip_status"])
    assert min(rep["cells"]["bounds"]) == pytest.approx(rep["bound"], rel=1e-12)
    assert f"bound {rep['bound']:.8g}" in p.stdout


def test_the_method_ends_within_its_time_limit(tmp_path):
    # one budget for decentralized's incumbent and every subproblem; the method's own wall
    # time (the report's), with 10 % and 1 s for loading a model into SCIP under load
    net = tmp_path / "net.json"
    make_instance("tiny", seed=0).save(net)
    p, out = _bound_cli(tmp_path, net, "--time-limit", "5")
    assert p.returncode == 0, p.stderr
    rep = json.loads(out.read_text())
    assert rep["wall_s"] <= 5 * 1.1 + 1.0
    assert rep["bound"] > 0 and rep["time_limit"] == 5


@pytest.mark.slow
def test_the_method_ends_with_its_defaults_on_a_tiny_instance_that_made_scip_print(tmp_path):
    net = tmp_path / "net.json"
    make_instance("tiny", seed=21).save(net)
    p, out = _bound_cli(tmp_path, net)
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["wall_s"] <= 600 * 1.1


# ------------------------------------------- "infeasible" only without a cutoff we added
def _every_round_without_a_point(monkeypatch, cap):
    """SCIP answers "no point" on every round subproblem; the cutoff is `cap` (None: none)."""
    from cefl_opt.solvers import bound
    monkeypatch.setattr(bound, "_scip_lower", lambda m, t, seed=0: (np.inf, "provenInfeasible"))
    monkeypatch.setattr(bound, "cap_objective", lambda inst, inc=None, weights=None:
                        (cap, None if cap is None else "incumbent"))
    monkeypatch.setattr(bound, "_incumbent", lambda inst, w, s: (None, None))


def test_no_round_point_without_a_cutoff_is_proven_infeasible(monkeypatch):
    _every_round_without_a_point(monkeypatch, None)
    inst = make_instance("tiny", ues=2, bss=2, dcs=2, rounds=2, seed=5)
    res = solve(inst, "decomposed-bound", time_limit=5)
    assert res.termination_condition == TerminationCondition.provenInfeasible
    assert res.solution is None and res.bound is None
    assert res.report["bound"] is None and res.report["cutoff"] is None
    assert all(r["scip_status"] == ["provenInfeasible"] * 2 for r in res.report["rounds"])


def test_no_round_point_under_a_cutoff_proves_only_the_cutoff(monkeypatch):
    # under a cap U, "no point" means min P >= U, never "P is infeasible"
    _every_round_without_a_point(monkeypatch, 2.5)
    inst = make_instance("tiny", ues=2, bss=2, dcs=2, rounds=2, seed=5)
    res = solve(inst, "decomposed-bound", time_limit=5)
    assert res.termination_condition != TerminationCondition.provenInfeasible
    assert res.bound == 2.5 and res.report["cutoff"] == 2.5


def test_cli_exits_3_and_writes_nothing_when_the_bound_proves_infeasibility(tmp_path):
    net = tmp_path / "net.json"
    make_instance("tiny", ues=2, bss=2, dcs=2, rounds=2, seed=5).save(net)
    out = tmp_path / "bound.json"
    code = textwrap.dedent(f"""
        import sys, numpy as np
        from cefl_opt.solvers import bound
        bound._scip_lower = lambda m, t, seed=0: (np.inf, "provenInfeasible")
        bound.cap_objective = lambda inst, inc=None, weights=None: (None, None)
        bound._incumbent = lambda inst, w, s: (None, None)
        from cefl_opt.cli import main
        sys.exit(main(["solve", {str(net)!r}, "--method", "decomposed-bound",
                       "--time-limit", "5", "--out", {str(out)!r}]))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, p.stderr
    assert "infeasible" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == [net]
