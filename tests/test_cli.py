"""The `cefl-opt` command line: network generate/show, evaluate, error handling, plug-ins."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cefl_opt import cli
from cefl_opt.generator import make_instance
from cefl_opt.instance import Instance
from cefl_opt.solution import Solution
from cefl_opt.system import evaluate, reference_solution

EXE = Path(sys.executable).with_name("cefl-opt")


def run(argv, capsys):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def files_in(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


@pytest.fixture
def small(tmp_path):
    inst = make_instance("small", seed=2)
    inst.save(tmp_path / "net.json")
    reference_solution(inst).save(tmp_path / "ref.json")
    return tmp_path, inst


# ---------------------------------------------------------------------- network generate
def test_generate_writes_the_seeded_instance(tmp_path, capsys):
    out = tmp_path / "sub" / "net.json"
    rc, stdout, err = run(["network", "generate", "--preset", "paper", "--ues", 8, "--bss", 4,
                           "--dcs", 3, "--rounds", 2, "--seed", 5, "--out", out], capsys)
    assert rc == 0, err
    assert len(stdout.strip().splitlines()) == 1 and "8 UEs" in stdout and str(out) in stdout
    got = Instance.load(out)
    want = make_instance("paper", ues=8, bss=4, dcs=3, rounds=2, seed=5)
    for k in ("Dbar", "R_nb", "R_ss", "Rmax_bs", "c"):
        assert getattr(got, k).tobytes() == getattr(want, k).tobytes()
    assert got.graph_edges == want.graph_edges
    assert files_in(out.parent) == ["net.json"]                  # no temporary file left


@pytest.mark.parametrize("argv,needle", [
    (["--ues", "0"], "--ues"), (["--seed", "-1"], "--seed"), (["--dcs", "-3"], "--dcs"),
])
def test_generate_bad_options(tmp_path, capsys, argv, needle):
    out = tmp_path / "net.json"
    rc, stdout, err = run(["network", "generate", "--preset", "small", *argv, "--out", out], capsys)
    assert rc == 2
    assert err.startswith("cefl-opt: error:") and needle in err and len(err.splitlines()) == 1
    assert "Traceback" not in err
    assert files_in(tmp_path) == []


def test_generate_argparse_errors(tmp_path, capsys):
    rc, _, err = run(["network", "generate", "--preset", "huge", "--out", tmp_path / "x.json"], capsys)
    assert rc == 2 and "invalid choice" in err
    rc, _, err = run(["network", "generate", "--preset", "tiny"], capsys)   # --out missing
    assert rc == 2 and "--out" in err
    assert files_in(tmp_path) == []


# ---------------------------------------------------------------------- network show
def test_show(tmp_path, capsys):
    make_instance("paper", seed=0).save(tmp_path / "p.json")
    rc, out, err = run(["network", "show", tmp_path / "p.json"], capsys)
    assert rc == 0 and err == ""
    for needle in ("20 UEs, 10 BSs, 5 DCs, 5 rounds", "Indy-5G-Zone", "Clemson", "Utah",
                   "data points per sub-network and round", "UE->BS uplink R_nb", "Rmax_s",
                   "xi1", "graph:", "connected", "total"):
        assert needle in out, needle
    assert "warning" not in out
    # per-sub-network data: round 0's row sums to the instance's data
    inst = Instance.load(tmp_path / "p.json")
    assert str(int(round(inst.Dbar[0].sum()))) in out


def test_show_lists_feasibility_problems(tmp_path, capsys):
    inst = make_instance("small", seed=0).copy(Rmax_s=[1.5e6, 5e9])   # 2 BSs x R_floor 1e6 > 1.5e6
    inst.save(tmp_path / "n.json")
    rc, out, _ = run(["network", "show", tmp_path / "n.json"], capsys)
    assert rc == 0
    assert "warning: field 'Rmax_s'" in out and "DC 0" in out and "DC 1" not in out


# ---------------------------------------------------------------------- evaluate
def test_evaluate_feasible_reference(small, capsys):
    path, inst = small
    rc, out, err = run(["evaluate", path / "net.json", path / "ref.json", "--json",
                        path / "ev.json"], capsys)
    assert rc == 0, err
    ev = evaluate(inst, reference_solution(inst))
    assert f"objective {ev.objective:.10g}" in out
    for needle in ("ML bound (a)", "delay (b)", "energy (c)-(e)", "init", "drift", "noise",
                   "local", "hetero", "dA", "dR", "E_P_ue", "aggregator", "feasible"):
        assert needle in out, needle
    data = json.loads((path / "ev.json").read_text())
    assert data["feasible"] is True and data["violations"] == []
    assert data["objective"] == pytest.approx(ev.objective, rel=1e-12)
    assert data["terms"]["delay"] == pytest.approx(ev.terms["delay"], rel=1e-12)
    assert len(data["rounds"]) == inst.T and data["rounds"][0]["aggregator"] == 0
    assert sorted(data["ml_parts"]) == ["drift", "hetero", "init", "local", "noise", "total"]


def test_evaluate_reports_the_step_condition(small, capsys):
    """Theorem 1's step row 4 d L^2 g_max (g_max - 1)(2 zeta1^2 + 1) <= gbar T (docs/formulation.md): the
    reference holds it; one common gamma 1.5x the cap violates it, and evaluate says so (exit 1,
    named in the JSON). Both sides recomputed here from the instance's numbers: with one gamma g
    and all data kept, gbar = d T g."""
    from cefl_opt.system import common_gamma_step_cap
    path, inst = small
    d, T = inst.N + inst.S, inst.T

    def sides(g):
        return (4 * d * inst.L ** 2 * g * (g - 1) * (2 * inst.zeta1 ** 2 + 1), d * T * g * T)

    g_ref = reference_solution(inst).rounds[0].gamma_ue[0]
    rc, out, err = run(["evaluate", path / "net.json", path / "ref.json"], capsys)
    assert rc == 0, err
    lhs, rhs = sides(g_ref)
    assert f"gbar T: {lhs:.6g} <= {rhs:.6g}: holds" in out
    g = 1.5 * common_gamma_step_cap(inst)
    assert g <= inst.gamma_max
    sol = reference_solution(inst)
    for r in sol.rounds:
        r.gamma_ue[:], r.gamma_dc[:] = g, g
    sol.save(path / "big.json")
    rc, out, err = run(["evaluate", path / "net.json", path / "big.json", "--json",
                        path / "ev.json"], capsys)
    lhs, rhs = sides(g)
    assert rc == 1 and lhs > rhs
    assert f"gbar T: {lhs:.6g} <= {rhs:.6g}: VIOLATED" in out
    data = json.loads((path / "ev.json").read_text())
    assert [v["constraint"] for v in data["violations"]] == ["step size (Theorem 1, corollary eta)[]"]
    assert data["ml_info"]["step_lhs"] == pytest.approx(lhs, rel=1e-12)
    assert data["ml_info"]["step_rhs"] == pytest.approx(rhs, rel=1e-12)


def test_evaluate_general_bound(small, capsys):
    path, inst = small
    rc, out, _ = run(["evaluate", path / "net.json", path / "ref.json", "--bound", "general"], capsys)
    assert rc == 0
    ev = evaluate(inst, reference_solution(inst), bound="general")
    assert f"objective {ev.objective:.10g}" in out and "bound general" in out


def test_evaluate_infeasible(small, capsys):
    path, inst = small
    sol = reference_solution(inst)
    sol.rounds[1].f[2] = 1.5 * inst.f_max[2]          # above f_max
    sol.rounds[0].z[1] = 2 * inst.C[1]                # above C
    sol.save(path / "bad.json")
    rc, out, err = run(["evaluate", path / "net.json", path / "bad.json", "--json",
                        path / "ev.json"], capsys)
    assert rc == 1 and err == ""
    assert "INFEASIBLE" in out and "t1:f<=f_max[2]" in out and "t0:z<=C[1]" in out
    data = json.loads((path / "ev.json").read_text())
    assert data["feasible"] is False
    assert {v["constraint"] for v in data["violations"]} == {"t1:f<=f_max[2]", "t0:z<=C[1]"}


def test_evaluate_lists_at_most_ten_violations(small, capsys):
    path, inst = small
    sol = reference_solution(inst)
    for r in sol.rounds:
        r.f = 2 * inst.f_max
        r.m_ue = np.full(inst.N, 1.5)
        r.gamma_dc = np.full(inst.S, 0.5)
        r.z = np.zeros(inst.S)                        # objective undefined there, still exit 1
    sol.save(path / "bad.json")
    rc, out, err = run(["evaluate", path / "net.json", path / "bad.json"], capsys)
    assert rc == 1 and "Traceback" not in err
    listed = [ln for ln in out.splitlines() if ln.startswith("  t")]
    assert len(listed) == 10
    assert "INFEASIBLE: 12 constraint(s)" in out


def test_evaluate_undefined_objective_is_infeasible(small, capsys):
    path, inst = small
    sol = reference_solution(inst)
    sol.rounds[0].m_ue[0] = 0.0                       # 1/m_min: objective undefined
    sol.save(path / "bad.json")
    rc, out, err = run(["evaluate", path / "net.json", path / "bad.json", "--json",
                        path / "ev.json"], capsys)
    assert rc == 1 and "objective undefined" in out and "m_ue>=m_floor" in out
    assert json.loads((path / "ev.json").read_text())["objective"] is None


# ---------------------------------------------------------------------- bad input: exit 2
def _tiny_dicts():
    inst = make_instance("tiny", seed=0)
    return (json.loads(json.dumps(inst.to_dict())),
            json.loads(json.dumps(reference_solution(inst).to_dict())))


def _write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


BAD_INSTANCES = {
    "unknown key": (lambda d: d.update(colour="red"), ["'colour'"]),
    "negative rate": (lambda d: d["R_nb"][0][1].__setitem__(0, -5.0), ["'R_nb'", "-5.0", "[0, 1, 0]"]),
    "mismatched shape": (lambda d: d.update(R_bn=[[[1e7, 1e7, 1e7]]] * 2), ["'R_bn'", "[2, 1, 3]"]),
    "missing field": (lambda d: d.pop("P_sb"), ["'P_sb'", "missing"]),
    "wrong format tag": (lambda d: d.update(format="cefl-instance/9"), ["'format'", "cefl-instance/9"]),
    "NaN": (lambda d: d["Dbar"][1].__setitem__(0, float("nan")), ["'Dbar'", "nan", "[1, 0]"]),
}


BAD_SOLUTIONS = {
    "BS index out of range": (lambda s: s["rounds"][0].__setitem__("uplink_bs", [0, 3]),
                              ["rounds[0].uplink_bs", "0..0", "3"]),
    "wrong number of rounds": (lambda s: s["rounds"].pop(), ["'rounds'", "1 rounds", "2"]),
    "NaN": (lambda s: s["rounds"][1]["f"].__setitem__(0, float("nan")), ["rounds[1].f", "non-finite"]),
    "unknown key": (lambda s: s["rounds"][0].__setitem__("speed", 3), ["'speed'"]),
    "aggregator out of range": (lambda s: s["rounds"][1].__setitem__("aggregator", 2),
                                ["rounds[1].aggregator", "2"]),
    "mismatched shape": (lambda s: s["rounds"][0].__setitem__("rho_nb", [[0.0, 0.0]] * 2),
                         ["rounds[0].rho_nb", "[2, 2]", "[2, 1]"]),
    "wrong format tag": (lambda s: s.update(format="cefl-instance/1"), ["'format'"]),
}


@pytest.mark.parametrize("kind,case", [("instance", c) for c in sorted(BAD_INSTANCES)]
                         + [("solution", c) for c in sorted(BAD_SOLUTIONS)])
def test_bad_file_exit_2(tmp_path, capsys, kind, case):
    mutate, needles = (BAD_INSTANCES if kind == "instance" else BAD_SOLUTIONS)[case]
    d, s = _tiny_dicts()
    mutate(d if kind == "instance" else s)
    net = _write(tmp_path / "net.json", d)
    sol = _write(tmp_path / "sol.json", s)
    commands = [["evaluate", net, sol, "--json", tmp_path / "ev.json"]]
    if kind == "instance":
        commands.append(["network", "show", net])
    for argv in commands:
        rc, out, err = run(argv, capsys)
        assert rc == 2, (case, out, err)
        assert err.startswith("cefl-opt: error:") and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err
        for needle in needles:
            assert needle in err, (needle, err)
    assert files_in(tmp_path) == ["net.json", "sol.json"]        # no ev.json, no temp file


def test_not_json_and_missing_files(tmp_path, capsys):
    _, s = _tiny_dicts()
    net = _write(tmp_path / "net.json", "{ this is not json")
    sol = _write(tmp_path / "sol.json", s)
    rc, _, err = run(["evaluate", net, sol, "--json", tmp_path / "ev.json"], capsys)
    assert rc == 2 and "not valid JSON" in err and "net.json" in err and "line 1" in err
    rc, _, err = run(["network", "show", tmp_path / "nope.json"], capsys)
    assert rc == 2 and "nope.json" in err and "does not exist" in err
    d, _ = _tiny_dicts()
    _write(net, d)
    _write(sol, "[1, 2]")
    rc, _, err = run(["evaluate", net, sol], capsys)
    assert rc == 2 and "solution file must hold a JSON object" in err
    assert files_in(tmp_path) == ["net.json", "sol.json"]


def test_unwritable_output_is_one_line(tmp_path, capsys):
    d, s = _tiny_dicts()
    net, sol = _write(tmp_path / "net.json", d), _write(tmp_path / "sol.json", s)
    (tmp_path / "blocker").write_text("a file, not a folder")
    rc, _, err = run(["evaluate", net, sol, "--json", tmp_path / "blocker" / "ev.json"], capsys)
    assert rc == 2 and err.startswith("cefl-opt: error:") and "Traceback" not in err


def test_usage_errors(capsys):
    assert run([], capsys)[0] == 2
    assert run(["frobnicate"], capsys)[0] == 2
    rc, out, _ = run(["--help"], capsys)
    assert rc == 0
    for cmd in ("network", "evaluate", "train", "estimate"):       # learning registers train/estimate
        assert cmd in out, cmd
    rc, out, _ = run(["evaluate", "--help"], capsys)
    assert rc == 0 and "--bound" in out


# ---------------------------------------------------------------------- the console script
@pytest.mark.skipif(not EXE.exists(), reason="console script not installed in this environment")
def test_console_script_bad_file_and_infeasible(tmp_path):
    d, s = _tiny_dicts()
    d["R_nb"][0][0][0] = -1.0
    net = _write(tmp_path / "net.json", d)
    sol = _write(tmp_path / "sol.json", s)
    p = subprocess.run([str(EXE), "evaluate", str(net), str(sol), "--json", str(tmp_path / "o.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.startswith("cefl-opt: error:") and "'R_nb'" in p.stderr and "-1.0" in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert files_in(tmp_path) == ["net.json", "sol.json"]
    # generate + evaluate of an infeasible point through the installed script
    out = tmp_path / "gen.json"
    p = subprocess.run([str(EXE), "network", "generate", "--preset", "tiny", "--seed", "1",
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and out.exists(), p.stderr
    inst = Instance.load(out)
    bad = reference_solution(inst)
    bad.rounds[0].f[0] = 2 * inst.f_max[0]
    bad.save(tmp_path / "bad.json")
    p = subprocess.run([str(EXE), "evaluate", str(out), str(tmp_path / "bad.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "t0:f<=f_max[0]" in p.stdout


def test_solution_written_by_cli_round_trips(small, capsys):
    """`solve` writes the file; loading it gives back the solver's decisions, and its recorded
    objective is what `evaluate` computes from it."""
    from cefl_opt.solvers.base import solve
    path, inst = small
    rc, out, err = run(["solve", path / "net.json", "--method", "greedy-rate", "--out",
                        path / "cli.json"], capsys)
    assert rc == 0, err
    sol = Solution.load(path / "cli.json", inst)
    want = solve(inst, "greedy-rate").solution
    assert sol.method == "greedy-rate" and len(sol.rounds) == inst.T
    for got_r, want_r in zip(sol.rounds, want.rounds):
        assert got_r.aggregator == want_r.aggregator
        for k in ("rho_nb", "rho_bs", "f", "z", "gamma_ue", "m_dc", "uplink_bs", "R_bs"):
            assert np.array_equal(getattr(got_r, k), getattr(want_r, k)), k
    assert sol.objective == pytest.approx(evaluate(inst, sol).objective, rel=1e-12)
    assert Solution.from_dict(json.loads(json.dumps(sol.to_dict())), inst).to_dict() == sol.to_dict()
