"""Every numeric field of an instance has a range (`cefl_opt.instance.FIELDS`, the one table)
that keeps the model finite: values outside are refused at load time naming the field, values
at the ends are accepted, and the model's terms stay finite at every corner of the ranges. Also
the validation messages that used to name the wrong field, and the exit 3 / 4 lines of solve."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cefl_opt import cli
from cefl_opt.generator import make_instance
from cefl_opt.instance import ARRAY_FIELDS, FIELDS, SCALAR_FIELDS, Instance, InstanceError
from cefl_opt.system import constraint_violations, evaluate, reference_solution


@pytest.fixture(scope="module")
def base():
    return make_instance("tiny", seed=0)


def _filled(base: Instance, name: str, value: float):
    arr = getattr(base, name)
    return np.full(np.shape(arr), value) if np.ndim(arr) else value


# cross-field rules the single-field ends would break: what else moves with a field at an end
def _partners(name: str, value: float) -> dict:
    return {("f_min", "hi"): {"f_max": FIELDS["f_max"].hi},
            ("f_max", "lo"): {"f_min": FIELDS["f_min"].lo},
            ("gamma_min", "hi"): {"gamma_max": FIELDS["gamma_max"].hi},
            ("gamma_max", "lo"): {"gamma_min": FIELDS["gamma_min"].lo},
            ("eta", "hi"): {"mu": 0.0}, ("mu", "hi"): {"eta": FIELDS["eta"].lo},
            ("R_floor", "hi"): {"Rmax_bs": FIELDS["Rmax_bs"].hi},
            ("Rmax_bs", "lo"): {"R_floor": FIELDS["R_floor"].lo},
            }.get((name, "hi" if value == FIELDS[name].hi else "lo"), {})


def test_table_is_the_source_of_the_field_lists():
    assert set(ARRAY_FIELDS) | set(SCALAR_FIELDS) == set(FIELDS)
    assert not set(ARRAY_FIELDS) & set(SCALAR_FIELDS)
    for name, f in FIELDS.items():
        assert 0 < f.lo < f.hi < 1e300 and math.isfinite(f.hi), name
        assert (name in ARRAY_FIELDS) == bool(f.shape)


@pytest.mark.parametrize("name", list(FIELDS))
def test_ends_of_every_range_are_accepted_and_beyond_refused(base, name):
    f = FIELDS[name]
    for end in (f.lo, f.hi):
        inst = base.copy(**{name: _filled(base, name, end)}, **{
            k: _filled(base, k, v) for k, v in _partners(name, end).items()})
        assert np.all(np.asarray(getattr(inst, name)) == end)
    for beyond in (f.hi * (1 + 1e-9), f.lo * (1 - 1e-9), 1e308):
        with pytest.raises(InstanceError, match=f"field '{name}'") as e:
            base.copy(**{name: _filled(base, name, beyond)})
        msg = str(e.value)
        if "out of range" in msg:            # the range's own message
            assert f"{f.lo:g}" in msg and f"{f.hi:g}" in msg, msg
        else:                                # ends that are the kind's: [0, 1], >= 1
            assert "invalid value" in msg and f.kind in ("unit", "unit_pos", "ge1"), msg


@pytest.mark.parametrize("name", [k for k, f in FIELDS.items() if f.kind in ("nonneg", "unit")])
def test_zero_stays_allowed_where_the_kind_allows_it(base, name):
    assert np.all(np.asarray(getattr(base.copy(**{name: _filled(base, name, 0.0)}), name)) == 0)


def test_model_is_finite_at_every_corner_of_the_ranges(base):
    """Random corners (each field at its low or high end, cross-field rules restored): the
    reference point's objective, both bound forms and the constraint check never overflow,
    divide by zero or produce NaN (numpy set to raise on any of them)."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        ch = {k: _filled(base, k, f.hi if rng.random() < 0.5 else f.lo)
              for k, f in FIELDS.items()}
        ch["f_min"] = np.minimum(ch["f_min"], ch["f_max"])
        ch["gamma_min"] = min(ch["gamma_min"], ch["gamma_max"])
        ch["mu"] = 0.0 if ch["eta"] * ch["mu"] >= 1 else ch["mu"]
        ch["R_floor"] = min(ch["R_floor"], float(ch["Rmax_bs"].min()))
        inst = base.copy(**ch)
        with np.errstate(all="raise"):
            sol = reference_solution(inst)
            for bound in ("corollary", "general"):
                ev = evaluate(inst, sol, bound=bound)
                assert all(math.isfinite(v) for v in [ev.objective, *ev.terms.values()])
            constraint_violations(inst, sol)


# ---------------------------------------------------------------------- through the CLI
def _write(tmp_path, base, mutate):
    d = base.to_dict()
    mutate(d)
    (tmp_path / "net.json").write_text(json.dumps(d))
    return tmp_path / "net.json"


def _deep_set(value):
    return lambda x: [_deep_set(value)(y) for y in x] if isinstance(x, list) else value


@pytest.mark.parametrize("name", list(FIELDS))
def test_huge_value_is_refused_at_load_by_every_command(base, tmp_path, capsys, name):
    """1e308 anywhere (it used to overflow, be written as Infinity or end as 'no solution'):
    exit 2 naming the field, for show, solve and evaluate alike; nothing written."""
    net = _write(tmp_path, base, lambda d: d.update({name: _deep_set(1e308)(d[name])}))
    reference_solution(base).save(tmp_path / "sol.json")
    for argv in (["network", "show", net],
                 ["solve", net, "--method", "greedy-rate", "--out", tmp_path / "s.json"],
                 ["evaluate", net, tmp_path / "sol.json"]):
        rc = cli.main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert err.startswith(f"cefl-opt: error: field '{name}'") and "1e+308" in err
        assert "out of range" in err or FIELDS[name].kind in ("unit", "unit_pos")
        assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json", "sol.json"]


def test_cut_rounds_name_the_field_that_was_cut(base, tmp_path, capsys):
    """Dbar (where T is read) cut to 1 round: the message names Dbar, not R_nb's shape."""
    net = _write(tmp_path, base, lambda d: d.update(Dbar=d["Dbar"][:1]))
    assert cli.main(["network", "show", str(net)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cefl-opt: error: field 'Dbar' has 1 round(s)"), err
    assert "have 2" in err
    net = _write(tmp_path, base, lambda d: d.update(R_sb=d["R_sb"][:1]))
    assert cli.main(["network", "show", str(net)]) == 2
    assert "field 'R_sb' has 1 round(s)" in capsys.readouterr().err


def test_eta_mu_product_names_both(base):
    with pytest.raises(InstanceError, match=r"'eta' \(value 100\) and 'mu' \(value 0.5\)"):
        base.copy(eta=100.0, mu=0.5)
    with pytest.raises(InstanceError, match="field 'eta' value 1e\\+308 is out of range"):
        base.copy(eta=1e308)
    base.copy(eta=100.0, mu=0.0099)                     # eta*mu = 0.99 < 1: accepted


def test_missing_graph_edges_is_named_for_the_decentralized_methods(base, tmp_path, capsys):
    net = _write(tmp_path, base, lambda d: d.pop("graph_edges"))
    for method in ("decentralized", "decentralized-polish"):
        rc = cli.main(["solve", str(net), "--method", method, "--out", str(tmp_path / "s.json")])
        err = capsys.readouterr().err
        assert rc == 2 and "field 'graph_edges' is missing or empty" in err, err
        assert "cannot be reached" not in err
    assert [p.name for p in tmp_path.iterdir()] == ["net.json"]


def test_infeasible_instance_is_one_prefixed_line_exit_3(base, tmp_path, capsys):
    net = _write(tmp_path, base, lambda d: d.update(Rmax_s=[5.0e5] * len(d["Rmax_s"])))
    rc = cli.main(["solve", str(net), "--method", "greedy-rate", "--out", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert rc == 3, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("cefl-opt: error: the instance is infeasible") and "s.json" in err
    assert "'Rmax_s'" in lines[0]
    assert all(ln.startswith("  infeasible: ") for ln in lines[1:])
    assert [p.name for p in tmp_path.iterdir()] == ["net.json"]


def test_no_solution_is_one_prefixed_line_exit_4(base, tmp_path, capsys, monkeypatch):
    from cefl_opt.solvers import base as solver_base
    from cefl_opt.solvers.base import Results, SolutionStatus, TerminationCondition
    net = tmp_path / "net.json"
    base.save(net)
    monkeypatch.setattr(solver_base, "solve", lambda inst, method, opts, **kw: Results(
        method=method, termination_condition=TerminationCondition.maxTimeLimit,
        solution_status=SolutionStatus.noSolution))
    rc = cli.main(["solve", str(net), "--method", "greedy-rate", "--out", str(tmp_path / "s.json")])
    out, err = capsys.readouterr()
    assert rc == 4, err
    assert err.startswith("cefl-opt: error: method 'greedy-rate' found no solution")
    assert len(err.strip().splitlines()) == 1 and "s.json" in err
    assert [p.name for p in tmp_path.iterdir()] == ["net.json"]


def test_non_finite_objective_is_not_written(base, tmp_path, capsys, monkeypatch):
    """A solver point whose objective is not finite (a solver bug): exit 4, nothing written."""
    import cefl_opt.system as system
    from cefl_opt.solvers import base as solver_base
    net = tmp_path / "net.json"
    base.save(net)
    real = system.evaluate

    def inf_eval(*a, **kw):
        ev = real(*a, **kw)
        ev.objective = float("inf")
        return ev
    monkeypatch.setattr(system, "evaluate", inf_eval)
    assert solver_base is not None
    rc = cli.main(["solve", str(net), "--method", "greedy-rate", "--out", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert rc == 4 and "objective is not finite" in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["net.json"]
