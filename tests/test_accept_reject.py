"""Both branches of accept/reject decisions and the boundaries of validated options that the
suite used to let through: decentralized-polish keeping the better of its rounded and polished
points, --consensus-rounds at the relay depth, the SCA step factor growing back after a rejected
step, and the format-1 compatibility name xi3_total."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from cefl_opt import cli
from cefl_opt.generator import make_instance
from cefl_opt.instance import Instance, InstanceError
from cefl_opt.solvers import centralized, decentralized, fixed_nlp
from cefl_opt.solvers.decentralized import solve_decentralized
from cefl_opt.solvers.sca import build_structure, next_step_factor
from cefl_opt.system import evaluate, reference_solution

warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture(scope="module")
def tiny():
    return make_instance("tiny", seed=0)


# ---------------------------------------------------------------------- polish: keep the better
@pytest.fixture(scope="module")
def two_points(tiny):
    """Two feasible points of tiny, the better (lower objective) first: the reference point and
    Ipopt's optimum with its binaries fixed."""
    ref = reference_solution(tiny)
    good, _status, _obj = centralized.FixedNLP(tiny).solve(ref.rounds)
    eg, er = evaluate(tiny, good), evaluate(tiny, ref)
    assert eg.feasible and er.feasible and eg.objective < er.objective
    return good, ref


def _fake_nlp(returned):
    class Fake:
        def __init__(self, *a, **kw):
            pass

        def solve(self, decisions, warm=None):
            return returned, "optimal", None
    return Fake


@pytest.mark.parametrize("polished_is", ["better", "worse", "infeasible", "none"])
def test_polish_keeps_the_better_feasible_point(tiny, two_points, monkeypatch, polished_is):
    good, ref = two_points
    if polished_is == "better":
        rounded, polished, want = ref, good, good
    elif polished_is == "worse":
        rounded, polished, want = good, ref, good
    elif polished_is == "infeasible":            # lower objective, but breaks a constraint
        polished = good.__class__(rounds=[r.copy() for r in good.rounds])
        polished.rounds[0].f[:] = tiny.f_max * 2
        rounded, want = ref, ref
    else:                                        # the polish found nothing
        rounded, polished, want = ref, None, ref
    monkeypatch.setattr(fixed_nlp, "FixedNLP", _fake_nlp(polished))
    final, status, _ = decentralized._polish(tiny, rounded, bound="corollary",
                                             ipopt_options=None)
    assert final is want, polished_is


# ---------------------------------------------------------------------- consensus rounds
def test_consensus_rounds_boundary_at_the_relay_depth(tiny):
    """J = depth and above are accepted (same computation as J = 0); J = depth - 1 refused."""
    st = build_structure(tiny)
    _s, info = solve_decentralized(tiny, structure=st, max_outer=2)
    depth = info["relay_depth"]
    assert depth >= 2 and info["consensus_rounds"] == depth
    for J in (depth, depth + 1):
        _s, info_j = solve_decentralized(tiny, structure=st, max_outer=2, consensus_rounds=J)
        assert info_j["consensus_rounds"] == J
        assert info_j["outer_iterations"] == info["outer_iterations"]
    for J in (depth - 1, 1):
        with pytest.raises(ValueError, match=f"consensus_rounds = {J} is below the relay depth "
                                             f"{depth}"):
            solve_decentralized(tiny, structure=st, max_outer=2, consensus_rounds=J)


def test_consensus_rounds_boundary_through_the_cli(tiny, tmp_path, capsys):
    tiny.save(tmp_path / "net.json")
    _s, info = solve_decentralized(tiny, max_outer=1)
    depth = info["relay_depth"]
    base = ["solve", str(tmp_path / "net.json"), "--method", "decentralized", "--max-outer", "2",
            "--out", str(tmp_path / "s.json")]
    assert cli.main(base + ["--consensus-rounds", str(depth)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    (tmp_path / "s.json").unlink()
    assert cli.main(base + ["--consensus-rounds", str(depth - 1)]) == 2
    assert "below the relay depth" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json"]


@pytest.mark.parametrize("max_outer,ok", [(0, False), (1, True)])
def test_max_outer_boundary(tiny, max_outer, ok):
    if ok:
        _s, info = solve_decentralized(tiny, max_outer=max_outer)
        assert info["outer_iterations_relaxed"] <= 1
    else:
        with pytest.raises(ValueError, match="max_outer"):
            solve_decentralized(tiny, max_outer=max_outer)


# ---------------------------------------------------------------------- SCA step factor
def test_step_factor_rule():
    assert next_step_factor(1.0, 1.0, rejected=True) == 0.5
    assert next_step_factor(0.25, 1.0, rejected=False) == 0.5          # grows back ...
    assert next_step_factor(0.5, 1.0, rejected=False) == 1.0
    assert next_step_factor(1.0, 1.0, rejected=False) == 1.0           # ... up to zeta
    assert next_step_factor(0.01, 0.01, rejected=False) == 0.01


def test_step_factor_grows_back_after_a_rejected_step_in_a_run():
    """tiny seed 2 rejects one step early on: the next step is taken at half the factor and
    the factor doubles back to zeta on the accepted steps that follow (the trace's
    step_factor column is the factor each iteration used)."""
    inst = make_instance("tiny", seed=2)
    _s, info = solve_decentralized(inst)
    rows = [r for r in info["trace"] if r["phase"] == "relaxed"]
    zeta = info["constants"]["zeta"]
    rejected = [i for i, r in enumerate(rows) if r["rejected"]]
    assert rejected and rejected[0] + 2 < len(rows)
    assert rows[0]["step_factor"] == zeta
    for a, b in zip(rows, rows[1:]):
        assert b["step_factor"] == next_step_factor(a["step_factor"], zeta, bool(a["rejected"]))
    i = rejected[0]
    assert rows[i + 1]["step_factor"] == rows[i]["step_factor"] / 2
    assert any(r["step_factor"] == zeta for r in rows[i + 1:])           # back to full steps


# ---------------------------------------------------------------------- format 1 names
def test_copy_with_xi3_total_sets_the_energy_weight_only(tiny):
    c = tiny.copy(xi3_total=0.25)
    assert c.xi3 == 0.25 and c.xi3_total == 0.25
    np.testing.assert_array_equal(c.xi3_parts, tiny.xi3_parts)
    assert c.xi1 == tiny.xi1 and c.xi2 == tiny.xi2
    c2 = tiny.copy(xi3=0.5)
    assert c2.xi3 == 0.5 and np.array_equal(c2.xi3_parts, tiny.xi3_parts)
    c3 = tiny.copy(xi3_parts=[1, 2, 3, 4, 5, 6])
    assert c3.xi3 == tiny.xi3 and c3.xi3_parts.tolist() == [1, 2, 3, 4, 5, 6]
    with pytest.raises(InstanceError, match="'xi3'"):
        tiny.copy(xi3_total=-1.0)


def test_xi3_total_property_reads_and_writes_xi3(tiny):
    c = tiny.copy()
    c.xi3_total = 0.75
    assert c.xi3 == 0.75 and np.array_equal(c.xi3_parts, tiny.xi3_parts)


def test_format_1_file_maps_both_names_and_its_errors_use_the_old_names(tiny, tmp_path):
    d = tiny.to_dict()
    d["format"] = "cefl-instance/1"
    d["xi3_total"], d["xi3"] = 0.125, [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    del d["xi3_parts"]
    (tmp_path / "f1.json").write_text(json.dumps(d))
    inst = Instance.load(tmp_path / "f1.json")
    assert inst.xi3 == 0.125 and inst.xi3_parts.tolist() == [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    saved = inst.to_dict()                                 # written back in format 2
    assert saved["format"] == "cefl-instance/2" and saved["xi3"] == 0.125
    d["xi3_total"] = -1.0
    with pytest.raises(InstanceError, match="field 'xi3_total'"):
        Instance.from_dict(d)
    d["xi3_total"], d["xi3"] = 0.125, [-1.0] * 6
    with pytest.raises(InstanceError, match="field 'xi3' has invalid value"):
        Instance.from_dict(d)


# ---------------------------------------------------------------------- every option's ends
def _option_ends():
    """(class, field, value, accepted) at both ends of every ranged option of every method:
    a closed end is accepted, an open end and the next value beyond either end refused."""
    import dataclasses
    import typing

    from cefl_opt.solvers import base as solver_base
    from cefl_opt.solvers.options import split_optional
    seen = set()
    for cls in solver_base.options_classes().values():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            bounds = getattr(f.metadata.get("check"), "bounds", None)
            if bounds is None or (cls, f.name) in seen:
                continue
            seen.add((cls, f.name))
            typ, _ = split_optional(hints[f.name])
            lo, hi, lo_open, hi_open = bounds
            step = (lambda x, d: x + d) if typ is int else (
                lambda x, d: float(np.nextafter(x, np.inf if d > 0 else -np.inf)))
            cases = [(lo, not lo_open), (step(lo, -1), False), (step(lo, +1), True)]
            if hi is not None:
                cases += [(hi, not hi_open), (step(hi, +1), False), (step(hi, -1), True)]
            for v, ok in cases:
                v = typ(v)
                yield pytest.param(cls, f.name, v, ok, id=f"{cls.__name__}.{f.name}={v!r}")


@pytest.mark.parametrize("cls,name,value,ok", list(_option_ends()))
def test_every_option_range_end(cls, name, value, ok):
    from cefl_opt.solvers.options import OptionError
    if ok:
        assert getattr(cls(**{name: value}), name) == value
    else:
        with pytest.raises(OptionError, match=f"'{name}'"):
            cls(**{name: value})


def test_train_aggregator_boundary(tmp_path, capsys):
    """train --aggregator: the last DC index is accepted, one more refused."""
    from cefl_opt.learning.toy import toy_instance, toy_solution
    inst = toy_instance(N=3, B=2, S=2, T=2, D=80, seed=0)
    inst.save(tmp_path / "net.json")
    toy_solution(inst, gamma=2, m=0.3).save(tmp_path / "sol.json")
    argv = ["train", str(tmp_path / "net.json"), str(tmp_path / "sol.json"), "--dataset",
            "digits", "--train-rounds", "1", "--method", "fedavg", "--test-max", "20",
            "--no-progress", "--out", str(tmp_path / "h.csv")]
    assert cli.main(argv + ["--aggregator", str(inst.S)]) == 2
    assert f"'--aggregator' value {inst.S}" in capsys.readouterr().err
    assert not (tmp_path / "h.csv").exists()
    assert cli.main(argv + ["--aggregator", str(inst.S - 1)]) == 0, capsys.readouterr().err
