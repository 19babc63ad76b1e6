"""Typed options per method (solvers/options.py), the plugin registry (solvers/plugins.py) and the
`cefl-opt solve` flags generated from the options' fields."""
from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import typing

import numpy as np
import pytest

from cefl_opt import cli
from cefl_opt.generator import make_instance
from cefl_opt.solvers import base
from cefl_opt.solvers.options import (PD_CONSTANT_FIELDS, DecentralizedOptions, FixedOptions,
                                      IpoptEnumOptions, MethodOptions, OptionError, ScipOptions,
                                      UnknownOptionError, _split_optional, add_option_flags,
                                      build_options, cli_fields, option, options_from_args)

CLASSES = base.options_classes()


@pytest.fixture(scope="module")
def tiny():
    return make_instance("tiny", seed=0, rounds=2)


# ---------------------------------------------------------------------- validation per field
def _typed_fields():
    """(class, field, base type, optional) of every field of every registered options class."""
    seen = set()
    for cls in CLASSES.values():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if (cls, f.name) in seen:
                continue
            seen.add((cls, f.name))
            b, opt = _split_optional(hints[f.name])
            yield cls, f, typing.get_origin(b) or b, opt


def _bad_values():
    """Wrong values derived from each field's declaration: non-finite floats, non-integers
    and booleans for ints, strings for numbers, unknown choices, None where not optional."""
    for cls, f, typ, opt in _typed_fields():
        bad = []
        if typ is float:
            bad += [float("nan"), float("inf"), -float("inf"), "1.0", True]
        elif typ is int:
            bad += [1.5, True, "3", float("nan")]
        elif typ is bool:
            bad += [1, "yes"]
        elif typ is str:
            bad += [3] + (["bogus"] if f.metadata.get("choices") else [])
        elif typ is dict:
            bad += [[1, 2], "x"]
        if not opt:
            bad.append(None)
        for v in bad:
            yield pytest.param(cls, f.name, v, id=f"{cls.__name__}.{f.name}={v!r}")


@pytest.mark.parametrize("cls,name,value", list(_bad_values()))
def test_every_field_rejects_values_of_the_wrong_type(cls, name, value):
    with pytest.raises(OptionError) as e:
        cls(**{name: value})
    assert f"'{name}'" in str(e.value)
    if value is not None and not isinstance(value, str):
        assert repr(value) in str(e.value) or str(value) in str(e.value)


RANGE_CASES = [  # option values out of their documented range (docs/options.md)
    (ScipOptions, "time_limit", 0.0), (ScipOptions, "time_limit", -5.0),
    (ScipOptions, "gap", -1e-3),
    (ScipOptions, "threads", 0), (ScipOptions, "seed", -1),
    (IpoptEnumOptions, "starts", 0), (IpoptEnumOptions, "sweeps", 0),
    (IpoptEnumOptions, "seed", -1), (IpoptEnumOptions, "time_limit", 0.0),
    (FixedOptions, "aggregator", -1),
    (DecentralizedOptions, "max_outer", 0), (DecentralizedOptions, "consensus_rounds", -1),
    (DecentralizedOptions, "seed", -2), (DecentralizedOptions, "zeta", 0.0),
    (DecentralizedOptions, "zeta", 1.5), (DecentralizedOptions, "rel", 0.0),
    (DecentralizedOptions, "rho_growth", 0.5), (DecentralizedOptions, "inner", "admm"),
    (DecentralizedOptions, "inner_iters", 0),
    (DecentralizedOptions, "force_after", -1), (DecentralizedOptions, "L_C", -1.0),
    (FixedOptions, "weights", {"xi4": 1.0}), (FixedOptions, "weights", {"xi1": float("nan")}),
    (FixedOptions, "weights", {"xi2": -1.0}),
]


@pytest.mark.parametrize("cls,name,value", RANGE_CASES,
                         ids=[f"{c.__name__}.{n}={v!r}" for c, n, v in RANGE_CASES])
def test_out_of_range_values_are_rejected_with_the_option_and_value(cls, name, value):
    with pytest.raises(OptionError) as e:
        cls(**{name: value})
    msg = str(e.value)
    assert f"option '{name}'" in msg and "--" not in msg      # the option, not a CLI flag
    assert repr(value) in msg


def test_valid_values_are_kept_and_coerced():
    o = ScipOptions(time_limit=5, gap=0, threads=np.int64(4), seed=3)
    assert o.time_limit == 5.0 and isinstance(o.time_limit, float)
    assert o.threads == 4 and type(o.threads) is int and o.gap == 0.0
    assert ScipOptions(time_limit=None).time_limit is None            # no limit
    assert FixedOptions(aggregator=2, weights={"xi1": 0.5}).weights == {"xi1": 0.5}


def test_unknown_keys_are_rejected_by_name():
    with pytest.raises(UnknownOptionError, match="'time_limt'"):
        build_options(ScipOptions, {"time_limt": 5})
    with pytest.raises(UnknownOptionError, match="'progress'"):
        build_options(IpoptEnumOptions, {"progress": True})      # the unused parameter is gone


def test_solve_rejects_unknown_keys_before_any_work(tiny, monkeypatch):
    monkeypatch.setattr(type(tiny), "feasibility_problems",
                        lambda self: pytest.fail("solve went past the option check"))
    with pytest.raises(UnknownOptionError) as e:
        base.solve(tiny, "greedy-rate", agregator=1)
    assert "method 'greedy-rate'" in str(e.value) and "'agregator'" in str(e.value)
    with pytest.raises(OptionError, match="'gap'.*nan"):
        base.solve(tiny, "scip", gap=float("nan"))
    with pytest.raises(OptionError, match="FixedOptions.*ScipOptions"):
        base.solve(tiny, "scip", options=FixedOptions())
    with pytest.raises(ValueError, match="unknown method"):
        base.solve(tiny, "magic")


def test_solve_takes_an_options_object_and_keyword_overrides(tiny):
    res = base.solve(tiny, "fixed", FixedOptions(aggregator=1))
    assert all(r.aggregator == 1 for r in res.solution.rounds)
    res = base.solve(tiny, "fixed", FixedOptions(aggregator=1), aggregator=0)
    assert all(r.aggregator == 0 for r in res.solution.rounds)
    with pytest.raises(OptionError, match="option 'aggregator' is 2, not a DC index 0..1"):
        base.solve(tiny, "fixed", aggregator=tiny.S)


def test_decentralized_options_absorb_every_pd_constant():
    from cefl_opt.solvers.primal_dual import PAPER, TUNED, PDConstants, resolve_constants
    assert set(PD_CONSTANT_FIELDS) == set(PDConstants.__dataclass_fields__)
    assert set(PD_CONSTANT_FIELDS) <= set(DecentralizedOptions.names())
    assert resolve_constants(DecentralizedOptions().constant_overrides()) == TUNED
    k = resolve_constants(DecentralizedOptions(constants="paper", inner_iters=5,
                                               L_C=0.7).constant_overrides())
    assert k == dataclasses.replace(PAPER, inner_iters=5, L_C=0.7)


# ---------------------------------------------------------------------- flags from fields
def _parser():
    p = argparse.ArgumentParser(exit_on_error=False)
    add_option_flags(p, CLASSES)
    return p


def _other_value(f: dataclasses.Field, typ, meta_choices):
    """A command-line text and the value it must give, different from the field's default."""
    default = f.default
    flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
    if typ is bool:
        return [flag.replace("--", "--no-" if default else "--", 1)], (not default)
    if meta_choices:
        v = [c for c in meta_choices if c != default][0]
        return [flag, v], v
    if typ is int:
        v = (default or 0) + 2
        return [flag, str(v)], v
    if typ is float:  # the first of a few values that the field accepts
        check = f.metadata.get("check") or (lambda v: None)
        v = next(v for v in (0.37, 0.41, 1.7) if v != default and not check(v))
        return [flag, repr(v)], v
    if typ is str:
        return [flag, "x.csv"], "x.csv"
    raise AssertionError(typ)


def test_every_command_line_field_becomes_a_flag_that_sets_that_field():
    p = _parser()
    n = 0
    for meth, cls in CLASSES.items():
        hints = typing.get_type_hints(cls)
        for f in cli_fields(cls):
            typ, _opt = _split_optional(hints[f.name])
            argv, want = _other_value(f, typing.get_origin(typ) or typ, f.metadata.get("choices"))
            opts = options_from_args(meth, cls, p.parse_args(argv), CLASSES.values())
            assert getattr(opts, f.name) == want, (meth, argv)
            # every other field keeps its default
            assert opts.replace(**{f.name: getattr(cls(), f.name)}) == cls(), (meth, argv)
            n += 1
    assert n >= 40
    assert not any(f.name in ("weights", "ipopt_options", "scip_options")
                   for c in CLASSES.values() for f in cli_fields(c))


def test_a_flag_of_another_method_is_an_error_not_ignored():
    p = _parser()
    with pytest.raises(UnknownOptionError, match=r"'aggregator' \(--aggregator\) does not apply"):
        options_from_args("greedy-rate", CLASSES["greedy-rate"],
                          p.parse_args(["--aggregator", "1"]), CLASSES.values())
    opts = options_from_args("scip", ScipOptions, p.parse_args(["--time-limit", "none"]),
                             CLASSES.values())
    assert opts.time_limit is None


@pytest.mark.parametrize("argv,needle", [
    (["--method", "scip", "--gap", "nan"], "option 'gap' must be a finite number, got nan"),
    (["--method", "scip", "--time-limit", "nan"], "'time_limit'"),
    (["--method", "ipopt-enum", "--time-limit", "inf"], "'time_limit'"),
    (["--method", "ipopt-enum", "--starts", "0"], "option 'starts' must be >= 1, got 0"),
    (["--method", "scip", "--threads", "0"], "option 'threads' must be >= 1, got 0"),
    (["--method", "ipopt-enum", "--seed", "-1"], "option 'seed' must be >= 0, got -1"),
    (["--method", "decentralized", "--max-outer", "0"], "'max_outer'"),
    (["--method", "decentralized", "--zeta", "2"], "'zeta'"),
    (["--method", "greedy-rate", "--aggregator", "1"], "does not apply to method 'greedy-rate'"),
    (["--method", "decentralized", "--time-limit", "5"], "does not apply"),
    (["--method", "fixed", "--aggregator", "9"], "option 'aggregator' is 9"),
])
def test_solve_cli_bad_options_exit_2_with_one_message(tmp_path, capsys, argv, needle):
    net, out = tmp_path / "net.json", tmp_path / "sol.json"
    make_instance("tiny", seed=0).save(net)
    rc = cli.main(["solve", str(net), "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


# ---------------------------------------------------------------------- registry
def test_base_imports_no_method_module_and_listing_loads_none():
    code = ("import sys; import cefl_opt.solvers.base as b; "
            "mods = lambda: sorted(m for m in sys.modules if m.startswith('cefl_opt.solvers.'));"
            "print(mods()); ms = b.methods(); b.options_classes(); print(mods());"
            "print('pyomo' in sys.modules, len(ms) == len(b._REGISTRY) >= 8)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after, last = p.stdout.strip().splitlines()
    assert before == "['cefl_opt.solvers.base']"
    assert after == ("['cefl_opt.solvers.base', 'cefl_opt.solvers.options', "
                     "'cefl_opt.solvers.plugins']")
    assert last == "False True"


def test_a_new_method_is_one_module_and_one_registration_line(tiny):
    @dataclasses.dataclass(frozen=True)
    class EchoOptions(MethodOptions):
        aggregator: int = option(0, "aggregator of every round", check=lambda v: None if v >= 0
                                 else "must be >= 0")

    def echo(inst, opts: EchoOptions):
        from cefl_opt import system
        sol = system.reference_solution(inst, opts.aggregator)
        return base.Results(method="echo", termination_condition=base.TerminationCondition.unknown,
                            solution_status=base.SolutionStatus.feasible, solution=sol)

    base.register("echo-test", echo, EchoOptions, "reference orchestration")
    try:
        assert "echo-test" in base.methods()
        res = base.solve(tiny, "echo-test", aggregator=1)
        assert res.solution.method == "echo-test" and res.solution.rounds[0].aggregator == 1
        with pytest.raises(UnknownOptionError):
            base.solve(tiny, "echo-test", seed=1)
        with pytest.raises(ValueError, match="already registered"):
            base.register("echo-test", lambda i, o: None, EchoOptions, "other")
    finally:
        base._REGISTRY.pop("echo-test")


def test_every_plugin_resolves_to_a_function_and_an_options_class():
    from cefl_opt.solvers import plugins
    assert {p[0] for p in plugins.PLUGINS} == set(base.methods())
    for name in base.methods():
        spec = base.method_spec(name)
        assert callable(spec.function())
        assert issubclass(spec.options_class(), MethodOptions)
        spec.options_class()()                     # the defaults are valid


# ---------------------------------------------------------------------- ipopt-enum candidates
def test_ipopt_enum_tries_every_constant_schedule(monkeypatch):
    """Every [s] * T is a start candidate (solved as `fixed` solves it, without a warm start),
    not merely reached by the sweeps: the greedy rules are pinned to [0] * T so that they
    cannot stand in for a missing candidate."""
    from cefl_opt.solvers import centralized
    inst = make_instance("small", seed=1, rounds=2)
    tried = []
    real = centralized.solve_with_repair

    def spy(nlp, decisions, warm=None, *, repair=True):
        if warm is None:   # a start candidate (the final repair passes the incumbent)
            tried.append(tuple(int(d.aggregator) for d in decisions))
        return real(nlp, decisions, warm, repair=repair)

    monkeypatch.setattr(centralized, "solve_with_repair", spy)
    for rule in ("greedy_data_aggregators", "greedy_rate_aggregators"):
        monkeypatch.setattr(centralized, rule, lambda inst: [0] * inst.T)
    res = base.solve(inst, "ipopt-enum")
    assert res.solution is not None
    assert sorted(set(tried)) == [(s,) * inst.T for s in range(inst.S)]
