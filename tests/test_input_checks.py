"""Options checked against the ranges the native solvers accept before any work, messages that
name the right option, Ipopt's verdict on `ipopt_options` entries, and `estimate --sol`'s
checks: each case is one line on stderr naming the option or field, exit 2, nothing written."""
from __future__ import annotations

import json

import numpy as np
import pytest

from cefl_opt import cli
from cefl_opt.generator import make_instance
from cefl_opt.solvers.options import (SCIP_SEED_MAX, SCIP_THREADS_MAX, SCIP_TIME_MAX,
                                      FixedOptions, OptionError, ScipOptions)


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    d = tmp_path_factory.mktemp("net")
    make_instance("tiny", seed=0, rounds=2).save(d / "net.json")
    make_instance("tiny", seed=1, rounds=2).save(d / "other.json")
    return d


def _one_error(capsys, *needles):
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines()
             if not ln.startswith("cefl-opt: warning: ")]   # a deprecated flag's own note
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], err
    return lines[0]


# ---------------------------------------------------------------------- native ranges
def test_scip_ranges_are_scips_own():
    """SCIP's parameter table: limits/time [0, 1e20], randomseedshift [0, 2^31-1] (a C int),
    parallel/maxnthreads [0, 64]; the ends are walked by test_accept_reject for every option."""
    pyscipopt = pytest.importorskip("pyscipopt")
    m = pyscipopt.Model()
    m.hideOutput()
    for param, top in (("limits/time", SCIP_TIME_MAX), ("randomization/randomseedshift",
                                                         SCIP_SEED_MAX),
                       ("parallel/maxnthreads", SCIP_THREADS_MAX)):
        m.setParam(param, top)                       # SCIP takes the end ...
        assert m.getParam(param) == top
    o = ScipOptions(time_limit=SCIP_TIME_MAX, seed=SCIP_SEED_MAX, threads=SCIP_THREADS_MAX)
    assert (o.time_limit, o.seed, o.threads) == (SCIP_TIME_MAX, SCIP_SEED_MAX, SCIP_THREADS_MAX)


@pytest.mark.parametrize("flag,value,name", [
    ("--seed", "18446744073709551616", "seed"), ("--seed", str(2 ** 31), "seed"),
    ("--threads", "1000000000000", "threads"), ("--threads", "65", "threads"),
    ("--time-limit", "1e308", "time_limit"), ("--time-limit", "1.0000001e20", "time_limit"),
])
def test_scip_options_out_of_scips_range_are_exit_2_before_any_work(tmp_path, capsys, flag,
                                                                     value, name):
    # the instance does not exist: the option is refused before anything is read
    out = tmp_path / "s.json"
    rc = cli.main(["solve", str(tmp_path / "missing.json"), "--method", "scip", flag, value,
                   "--out", str(out)])
    line = _one_error(capsys, f"option '{name}'")
    assert rc == 2 and not out.exists()
    assert "paramset" not in line and "too large" not in line


def test_decomposed_bound_time_limit_has_scips_range(tmp_path, capsys):
    rc = cli.main(["solve", str(tmp_path / "missing.json"), "--method", "decomposed-bound",
                   "--time-limit", "1e308", "--out", str(tmp_path / "s.json")])
    assert rc == 2
    _one_error(capsys, "option 'time_limit' must be in (0, 1e+20]")


@pytest.mark.parametrize("value,ok", [(2 ** 32 - 1, True), (2 ** 32, False), (2 ** 64, False),
                                      (0, True), (-1, False)])
def test_plot_layout_seed_is_checked_at_parse_time(net, value, ok):
    argv = ["plot", str(net / "net.json"), "s.json", "--layout-seed", str(value), "--out",
            "f.png"]
    parser = cli.build_parser(["plot"])
    if ok:
        assert parser.parse_args(argv).layout_seed == value
    else:
        with pytest.raises(cli.OptionError, match="--layout-seed.*4294967295"):
            parser.parse_args(argv)


def test_plot_layout_seed_out_of_range_exit_2_before_loading(tmp_path, capsys):
    rc = cli.main(["plot", str(tmp_path / "missing.json"), "s.json", "--layout-seed", str(2 ** 64),
                   "--out", str(tmp_path / "f.png")])
    assert rc == 2 and not list(tmp_path.iterdir())
    _one_error(capsys, "--layout-seed", str(2 ** 64))


# ---------------------------------------------------------------------- messages
@pytest.mark.parametrize("key", ["ipopt_options", "weights", "ipopt-options"])
def test_set_of_a_file_only_option_says_so(net, tmp_path, capsys, key):
    rc = cli.main(["solve", str(net / "net.json"), "--method", "fixed", "--set", f"{key}=x",
                   "--out", str(tmp_path / "s.json")])
    line = _one_error(capsys, "can be set only in an options file", "--options")
    assert rc == 2 and "unknown option" not in line


def test_set_of_an_unknown_key_is_still_unknown(net, tmp_path, capsys):
    rc = cli.main(["solve", str(net / "net.json"), "--method", "fixed", "--set", "ipopt=x",
                   "--out", str(tmp_path / "s.json")])
    assert rc == 2
    _one_error(capsys, "unknown option 'ipopt' (--set)")


def test_a_deprecated_flag_of_another_method_names_that_flag(net, tmp_path, capsys):
    rc = cli.main(["solve", str(net / "net.json"), "--method", "fixed", "--lambda1", "0.5",
                   "--out", str(tmp_path / "s.json")])
    line = _one_error(capsys, "'lambda1' (--lambda1)")
    assert rc == 2 and "--set" not in line


def test_estimate_apply_and_out_the_same_file(net, tmp_path, capsys):
    x = tmp_path / "x.json"
    rc = cli.main(["estimate", str(net / "net.json"), "--dataset", "digits", "--apply", str(x),
                   "--out", str(x)])
    line = _one_error(capsys, "'--apply'", "also the value of '--out'")
    assert rc == 2 and "input" not in line and not x.exists()


# ---------------------------------------------------------------------- ipopt_options
@pytest.mark.parametrize("text,needle", [
    ('max_iter = "x"', "entry 'max_iter' = 'x' is refused by Ipopt: Tried to set Option: "
                       "max_iter. It is a valid option, but it is of type Integer"),
    ("bogus_option = 1", "entry 'bogus_option' = 1 is refused by Ipopt: Tried to set Option: "
                         "bogus_option. It is not a valid option"),
    ("max_iter = -1", "entry 'max_iter' = -1 is refused by Ipopt"),
    ('mu_strategy = "sideways"', "entry 'mu_strategy' = 'sideways' is refused by Ipopt"),
    ("print_level = true", "entry 'print_level' = True: Ipopt takes a number or a string"),
])
def test_a_bad_ipopt_options_entry_is_exit_2_naming_it(net, tmp_path, capfd, text, needle):
    f, out = tmp_path / "o.toml", tmp_path / "s.json"
    f.write_text(f"[ipopt_options]\n{text}\n")
    rc = cli.main(["solve", str(net / "net.json"), "--method", "fixed", "--options", str(f),
                   "--out", str(out)])
    cap = capfd.readouterr()
    lines = cap.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and needle in lines[0], cap.err
    assert cap.out == "" and not out.exists()            # Ipopt's own printout is captured


def test_good_ipopt_options_are_kept_and_an_integer_for_a_real_option_becomes_a_float():
    from cefl_opt.solvers.native_check import ipopt_values
    o = FixedOptions(ipopt_options={"max_iter": 7, "tol": 1, "mu_strategy": "monotone"})
    assert o.ipopt_options == {"max_iter": 7, "tol": 1, "mu_strategy": "monotone"}
    got = ipopt_values(o.ipopt_options)
    assert got == {"max_iter": 7, "tol": 1.0, "mu_strategy": "monotone"}
    assert type(got["tol"]) is float and type(got["max_iter"]) is int
    with pytest.raises(OptionError, match="entry 'max_iter' = 2.5"):
        FixedOptions(ipopt_options={"max_iter": 2.5})


def test_an_accepted_ipopt_entry_reaches_ipopt_in_the_type_it_takes(net):
    from cefl_opt.instance import Instance
    from cefl_opt.solvers.centralized import FixedNLP
    nlp = FixedNLP(Instance.load(net / "net.json"), ipopt_options={"tol": 1, "max_iter": 5})
    assert nlp.options["max_iter"] == 5 and nlp.options["tol"] == 1.0
    assert type(nlp.options["tol"]) is float


# ---------------------------------------------------------------------- estimate --sol
@pytest.fixture(scope="module")
def sols(net):
    from cefl_opt.instance import Instance
    from cefl_opt.system import reference_solution
    inst = Instance.load(net / "net.json")
    good = reference_solution(inst)
    good.save(net / "good.json")
    d = json.loads((net / "good.json").read_text())
    row = d["rounds"][1]["rho_nb"][0]
    row[:] = [0.0] * len(row)
    row[0] = 1.5
    (net / "over.json").write_text(json.dumps(d))
    d["rounds"][1]["rho_nb"][0][0] = 1.0 + 1e-9                  # round-off: accepted
    (net / "edge.json").write_text(json.dumps(d))
    return net


@pytest.mark.parametrize("instance,sol,needle", [
    ("other.json", "good.json", "computed for another instance"),
    ("net.json", "over.json", "round 1: field 'rho_nb': UE 0 offloads 150 % of its data"),
])
def test_estimate_refuses_a_solution_it_cannot_use(sols, tmp_path, capsys, instance, sol,
                                                   needle):
    out = tmp_path / "e.json"
    rc = cli.main(["estimate", str(sols / instance), "--sol", str(sols / sol), "--dataset",
                   "digits", "--out", str(out)])
    _one_error(capsys, needle, sol)
    assert rc == 2 and not out.exists()


@pytest.mark.parametrize("instance,sol,allow", [("net.json", "good.json", False),
                                                ("net.json", "edge.json", False),
                                                ("other.json", "good.json", True)])
def test_estimate_takes_a_solution_of_its_instance(sols, capsys, instance, sol, allow):
    import argparse

    from cefl_opt.cli.learning import _estimate_solution
    from cefl_opt.instance import Instance
    inst = Instance.load(sols / instance)
    args = argparse.Namespace(sol=str(sols / sol), allow_other_instance=allow)
    assert len(_estimate_solution(inst, args).rounds) == inst.T
    assert ("another instance" in capsys.readouterr().err) == allow


def test_offload_refuses_more_than_all_of_a_ues_data():
    from cefl_opt.instance import InstanceError
    from cefl_opt.learning.offload import offload_counts
    n_nb, _, D = offload_counts([10, 10], np.array([[1.0], [0.5]]), np.array([[1.0]]))
    assert D.tolist() == [0, 5, 15]
    with pytest.raises(InstanceError, match="UE 1 offloads 150 %"):
        offload_counts([10, 10], np.array([[1.0], [1.5]]), np.array([[1.0]]))
    with pytest.raises(InstanceError, match="negative share"):
        offload_counts([10, 10], np.array([[1.0], [-0.5]]), np.array([[1.0]]))


# ---------------------------------------------------------------------- the Python API
@pytest.fixture(scope="module")
def api():
    from cefl_opt.system import reference_solution
    inst = make_instance("tiny", seed=0, rounds=2)
    return inst, reference_solution(inst)


def _broken(sol, t, **changes):
    import copy
    out = copy.deepcopy(sol)
    for k, v in changes.items():
        setattr(out.rounds[t], k, v(getattr(out.rounds[t], k)) if callable(v) else v)
    return out


@pytest.mark.parametrize("sol", [None, "sol.json", {"rounds": []}])
def test_evaluate_refuses_what_is_not_a_solution_naming_sol(api, sol):
    from cefl_opt import system
    with pytest.raises(TypeError, match="argument 'sol' must be a cefl_opt.solution.Solution"):
        system.evaluate(api[0], sol)
    with pytest.raises(TypeError, match="argument 'sol'"):
        system.constraint_violations(api[0], sol)


@pytest.mark.parametrize("t,changes,needle", [
    (0, {"uplink_bs": lambda a: np.full_like(a, 5)}, "field 'rounds[0].uplink_bs' has a BS index"),
    (1, {"downlink_bs": lambda a: np.full_like(a, -1)}, "field 'rounds[1].downlink_bs' has a BS"),
    (0, {"aggregator": 9}, "field 'rounds[0].aggregator' value 9 is not a DC index"),
    (1, {"aggregator": -1}, "field 'rounds[1].aggregator' value -1 is not a DC index"),
    (0, {"aggregator": 0.5}, "field 'rounds[0].aggregator' must be an integer"),
    (1, {"f": lambda a: a[:1]}, "field 'rounds[1].f' has shape [1], expected"),
    (0, {"rho_nb": lambda a: np.zeros((a.shape[0] + 1, a.shape[1]))},
     "field 'rounds[0].rho_nb' has shape"),
    (0, {"z": lambda a: a * np.nan}, "field 'rounds[0].z' has a non-finite value"),
])
def test_evaluate_refuses_a_solution_that_does_not_fit_naming_the_field(api, t, changes,
                                                                          needle):
    from cefl_opt import system
    inst, ref = api
    bad = _broken(ref, t, **changes)
    with pytest.raises(ValueError) as e:
        system.evaluate(inst, bad)
    assert needle in str(e.value)
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        bad.check_shapes(inst)


def test_evaluate_refuses_a_solution_of_another_size(api):
    from cefl_opt import system
    inst, _ = api
    other = make_instance("tiny", seed=0, rounds=2, ues=inst.N + 1)
    with pytest.raises(ValueError, match=r"field 'rounds\[0\]\.rho_nb' has shape"):
        system.evaluate(inst, system.reference_solution(other))
    fewer = make_instance("tiny", seed=0, rounds=1)
    with pytest.raises(ValueError, match="field 'rounds' has 1 rounds, the instance has 2"):
        system.evaluate(inst, system.reference_solution(fewer))


def test_evaluate_takes_every_index_at_its_ends(api):
    """Both ends of each index range are accepted: BS 0 and B-1, DC 0 and S-1."""
    from cefl_opt import system
    inst, ref = api
    for s in (0, inst.S - 1):
        ok = _broken(ref, 0, aggregator=s)
        assert np.isfinite(system.evaluate(inst, ok).objective)
    for b in (0, inst.B - 1):
        ok = _broken(ref, 1, downlink_bs=lambda a: np.full_like(a, b))
        assert ok.check_shapes(inst) is ok


@pytest.mark.parametrize("weights,needle", [
    ({"xi9": 1.0}, "argument 'weights' has unknown key 'xi9'"),
    ({"xi1": -1.0}, "argument 'weights' entry 'xi1' must be a finite number >= 0"),
    ({"xi2": float("nan")}, "entry 'xi2'"), ({"xi3": True}, "entry 'xi3'"),
    ([("xi1", 1.0)], "argument 'weights' must be a mapping"),
])
def test_evaluate_refuses_bad_weights_naming_the_key(api, weights, needle):
    from cefl_opt import system
    with pytest.raises(ValueError) as e:
        system.evaluate(*api, weights=weights)
    assert needle in str(e.value)


def test_evaluate_weights_override_by_hand(api):
    """J = xi1 a + xi2 b + xi3 c with the overrides in place of the instance's weights."""
    from cefl_opt import system
    inst, ref = api
    ev = system.evaluate(inst, ref)
    for w in ({"xi1": 0.0}, {"xi2": 2.5, "xi3": 0.0}, {"xi1": 0.0, "xi2": 0.0, "xi3": 0.0}):
        want = (w.get("xi1", inst.xi1) * ev.terms["ml_bound"]
                + w.get("xi2", inst.xi2) * ev.terms["delay"]
                + w.get("xi3", inst.xi3) * ev.terms["energy"])
        assert system.evaluate(inst, ref, weights=w).objective == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------------- weights: one meaning
DOUBLE = {"xi1": 2.0, "xi2": 0.5, "xi3": 0.0}
DEC_METHODS = ("decentralized", "decentralized-polish", "centralized-pd")


def test_every_method_takes_weights_or_refuses_them_by_name():
    from cefl_opt.solvers.base import options_classes
    for method, cls in options_classes().items():
        if method in DEC_METHODS:
            with pytest.raises(OptionError, match="option 'weights' is not taken"):
                cls(weights=DOUBLE)
            assert cls(weights={}).weights == {} and cls().weights is None
        else:
            assert cls(weights=DOUBLE).weights == DOUBLE


@pytest.mark.parametrize("method", DEC_METHODS)
def test_decentralised_methods_refuse_weights_exit_2(net, tmp_path, capsys, method):
    f, out = tmp_path / "w.toml", tmp_path / "s.json"
    f.write_text("[weights]\nxi1 = 2.0\n")
    rc = cli.main(["solve", str(net / "net.json"), "--method", method, "--options", str(f),
                   "--out", str(out)])
    _one_error(capsys, f"method '{method}'", "option 'weights' is not taken")
    assert rc == 2 and not out.exists()


def _printed_objective(text: str) -> float:
    import re
    return float(re.search(r"objective=(\S+)", text).group(1))


@pytest.mark.parametrize("weights", [{"xi1": 0.0, "xi2": 0.0, "xi3": 0.0}, DOUBLE])
def test_fixed_prints_and_writes_one_objective_under_the_weights_and_records_them(
        net, tmp_path, capsys, weights):
    from cefl_opt import system
    from cefl_opt.instance import Instance
    from cefl_opt.solution import Solution
    f, out = tmp_path / "w.toml", tmp_path / "s.json"
    f.write_text("[weights]\n" + "".join(f"{k} = {v}\n" for k, v in weights.items()))
    rc = cli.main(["solve", str(net / "net.json"), "--method", "fixed", "--options", str(f),
                   "--out", str(out)])
    printed = _printed_objective(capsys.readouterr().out)
    inst = Instance.load(net / "net.json")
    sol = Solution.load(out, inst)
    assert rc == 0 and sol.weights == weights
    by_hand = sum(weights[k] * sol.terms[t] for k, t in (("xi1", "ml_bound"), ("xi2", "delay"),
                                                         ("xi3", "energy")))
    assert sol.objective == pytest.approx(by_hand, rel=1e-12, abs=1e-300)
    assert printed == pytest.approx(sol.objective, rel=1e-7, abs=1e-300)    # 8 digits printed
    assert system.evaluate(inst, sol, weights=weights).objective == sol.objective
    if weights == DOUBLE:     # the instance's weights give another number
        assert system.evaluate(inst, sol).objective != pytest.approx(sol.objective)


def test_evaluate_cli_scores_with_the_recorded_weights_and_says_so(net, tmp_path, capsys):
    from cefl_opt.instance import Instance
    from cefl_opt.system import objective_weights, reference_solution
    inst = Instance.load(net / "net.json")
    ref = reference_solution(inst)
    for name, w in (("own.json", DOUBLE), ("inst.json", objective_weights(inst)),
                     ("none.json", None)):
        ref.weights = w
        ref.save(tmp_path / name)
    for name, note in (("own.json", True), ("inst.json", False), ("none.json", False)):
        rc = cli.main(["evaluate", str(net / "net.json"), str(tmp_path / name), "--json",
                       str(tmp_path / f"ev-{name}")])
        cap = capsys.readouterr()
        assert rc == 0 and ("scored with the weights the solution records" in cap.err) == note
        got = json.loads((tmp_path / f"ev-{name}").read_text())
        want = DOUBLE if note else objective_weights(inst)
        assert got["weights"] == want
        by_hand = sum(want[k] * got["terms"][t] for k, t in
                      (("xi1", "ml_bound"), ("xi2", "delay"), ("xi3", "energy")))
        assert got["objective"] == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize("weights,needle", [({"xi7": 1.0}, "unknown key 'xi7'"),
                                            ({"xi1": -2.0}, "entry 'xi1'"),
                                            ([1, 2], "must be a mapping")])
def test_a_solution_file_with_bad_weights_is_exit_2(net, tmp_path, capsys, weights, needle):
    from cefl_opt.instance import Instance
    from cefl_opt.system import reference_solution
    ref = reference_solution(Instance.load(net / "net.json"))
    d = ref.to_dict()
    d["weights"] = weights
    (tmp_path / "s.json").write_text(json.dumps(d))
    rc = cli.main(["evaluate", str(net / "net.json"), str(tmp_path / "s.json")])
    assert rc == 2
    _one_error(capsys, "field 'weights'", needle)


def test_decomposed_bound_compares_bound_and_incumbent_under_the_same_weights(net,
                                                                              monkeypatch):
    """The incumbent that caps the delays and the gap is decentralized's point scored under
    the bound's weights (not the instance's)."""
    from cefl_opt import system
    from cefl_opt.instance import Instance
    from cefl_opt.solvers import bound as bound_mod
    from cefl_opt.solvers.base import solve
    inst = Instance.load(net / "net.json")
    seen = {}

    def fake(inst_, left, inc, *, weights=None, **kw):
        seen.update(inc=inc, weights=weights)
        return bound_mod.DecomposedBound(bound=0.5 * inc, ml=0.0, rounds=[[0.0]], status=[[""]],
                                         cutoff=inc, wall_s=0.0, closed=False, cells=[0.5 * inc],
                                         cell_edges=[1.0, 2.0])
    monkeypatch.setattr(bound_mod, "decomposed_bound", fake)
    # the fake bound takes no time: the limit only leaves decentralized (its share) room to end
    res = solve(inst, "decomposed-bound", weights=DOUBLE, time_limit=600.0)
    under_w = system.evaluate(inst, res.solution, weights=DOUBLE).objective
    assert seen["weights"] == DOUBLE and seen["inc"] == pytest.approx(under_w, rel=1e-12)
    assert res.objective == pytest.approx(under_w, rel=1e-12)
    assert res.solution.weights == DOUBLE
    assert res.gap == pytest.approx(0.5)
    assert system.evaluate(inst, res.solution).objective != pytest.approx(under_w)


# ---------------------------------------------------------------------- scip_options
@pytest.mark.parametrize("text,needle", [
    ('"limits/time" = 1e308', "entry 'limits/time' = 1e+308 is refused by SCIP: Invalid value "
                              "<1e+308> for real parameter <limits/time>. Must be in range "
                              "[0,1e+20]"),
    ('"limits/bogus" = 1', "entry 'limits/bogus' = 1 is refused by SCIP: not a SCIP parameter"),
    ('"limits/nodes" = 1.5', "entry 'limits/nodes' = 1.5 is refused: SCIP would store it as 1"),
    ('"limits/time" = "x"', "entry 'limits/time' = 'x' is refused by SCIP"),
    ('"randomization/randomseedshift" = -1', "entry 'randomization/randomseedshift' = -1"),
])
def test_a_bad_scip_options_entry_is_exit_2_naming_it(net, tmp_path, capfd, text, needle):
    pytest.importorskip("pyscipopt")
    f, out = tmp_path / "o.toml", tmp_path / "s.json"
    f.write_text(f"[scip_options]\n{text}\n")
    rc = cli.main(["solve", str(net / "net.json"), "--method", "scip", "--options", str(f),
                   "--out", str(out)])
    cap = capfd.readouterr()
    lines = cap.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and needle in lines[0], cap.err
    assert cap.out == "" and not out.exists()


def test_good_scip_options_are_kept_and_leave_the_check_model_as_it_was():
    pyscipopt = pytest.importorskip("pyscipopt")
    from cefl_opt.solvers.native_check import _scip_model
    o = ScipOptions(scip_options={"limits/time": SCIP_TIME_MAX, "limits/nodes": 7,
                                  "misc/catchctrlc": False, "lp/initalgorithm": "p"})
    assert o.scip_options["limits/nodes"] == 7
    fresh = pyscipopt.Model()
    for k in o.scip_options:
        assert _scip_model().getParam(k) == fresh.getParam(k)


# ---------------------------------------------------------------------- command-line ranges
@pytest.mark.parametrize("argv,flag,top", [
    (["estimate", "n.json", "--dataset", "digits", "--out", "e.json"], "--threads", 1024),
    (["train", "n.json", "s.json", "--dataset", "digits", "--out", "t.csv"], "--threads", 1024),
    (["estimate", "n.json", "--dataset", "digits", "--out", "e.json"], "--seed", 2 ** 32 - 1),
    (["train", "n.json", "s.json", "--dataset", "digits", "--out", "t.csv"], "--seed",
     2 ** 32 - 1),
    (["network", "generate", "--preset", "tiny", "--out", "n.json"], "--seed", 2 ** 32 - 1),
])
def test_thread_counts_and_seeds_of_the_command_line_end_where_documented(argv, flag, top):
    parser = cli.build_parser([argv[0]])
    dest = flag[2:]
    assert getattr(parser.parse_args(argv + [flag, str(top)]), dest) == top      # the end
    for bad in (top + 1, 10 ** 12, 2 ** 64):
        with pytest.raises(cli.OptionError, match=f"{flag}.*<= {top}, got '{bad}'"):
            parser.parse_args(argv + [flag, str(bad)])


def test_ipopt_enum_starts_are_bounded_so_the_time_limit_holds(tmp_path, capsys):
    """The random sequences are drawn before the search: 10**9 starts never reached the
    time limit's check; they are refused by name, before any work."""
    from cefl_opt.solvers.options import MAX_STARTS, IpoptEnumOptions
    assert IpoptEnumOptions(starts=MAX_STARTS).starts == MAX_STARTS
    rc = cli.main(["solve", str(tmp_path / "missing.json"), "--method", "ipopt-enum",
                   "--starts", str(10 ** 9), "--time-limit", "5", "--out",
                   str(tmp_path / "s.json")])
    assert rc == 2
    _one_error(capsys, f"option 'starts' must be in [1, {MAX_STARTS}], got 1000000000")


def test_plot_titles_give_the_objective_under_the_recorded_weights(api):
    import matplotlib
    matplotlib.use("Agg")
    from cefl_opt import system
    from cefl_opt.orchestration_plot import plot_orchestration
    inst, ref = api
    own = _broken(ref, 0)
    own.weights = DOUBLE
    fig, drawn = plot_orchestration(inst, [ref, own], labels=["a", "b"])
    titles = {d["label"]: d["ax"].get_title() for d in drawn}
    for label, sol in (("a", ref), ("b", own)):
        want = system.evaluate(inst, sol, weights=sol.weights).objective
        assert f"objective {want:.5g}" in titles[label]
    assert system.evaluate(inst, own).objective != pytest.approx(
        system.evaluate(inst, own, weights=DOUBLE).objective)
    import matplotlib.pyplot as plt
    plt.close(fig)


@pytest.mark.parametrize("value,what", [(lambda a: a.tolist(), "got list"),
                                        (lambda a: a.astype(object), "got object array")])
def test_evaluate_refuses_a_field_that_is_not_a_numeric_array(api, value, what):
    from cefl_opt import system
    bad = _broken(api[1], 1, f=value)
    with pytest.raises(TypeError, match=r"field 'rounds\[1\]\.f' must be a numeric numpy "
                                        rf"array, {what}"):
        system.evaluate(api[0], bad)
