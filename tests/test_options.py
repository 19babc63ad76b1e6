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
from cefl_opt.solvers.options import (PD_CONSTANT_DOCS, PD_CONSTANT_FIELDS, DecentralizedOptions,
                                      FixedOptions, IpoptEnumOptions, MethodOptions, OptionError,
                                      ScipOptions, UnknownOptionError, split_optional,
                                      add_option_flags, add_setting_flags, build_options,
                                      cli_fields, file_fields, option, options_from_args,
                                      settable_fields)

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
            b, opt = split_optional(hints[f.name])
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
    with pytest.raises(UnknownOptionError, match="'sweep'"):
        build_options(IpoptEnumOptions, {"sweep": 2})


def test_the_display_switch_is_taken_by_every_method_but_is_no_algorithm_option():
    for cls in CLASSES.values():
        assert build_options(cls, {"progress": True}).progress is True
        assert cls().progress is False
        assert "progress" not in {f.name for f in settable_fields(cls)}
        assert "progress" not in {f.name for f in cli_fields(cls)}
        assert "progress" not in {f.name for f in file_fields(cls)}


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


def test_the_override_docs_cover_exactly_the_pd_constants_with_their_types():
    from cefl_opt.solvers.primal_dual import PDConstants
    names = [f.name for f in dataclasses.fields(PDConstants)]
    assert list(PD_CONSTANT_DOCS) and set(PD_CONSTANT_DOCS) == set(names)
    assert PD_CONSTANT_FIELDS == tuple(names)
    hints, mine = typing.get_type_hints(PDConstants), typing.get_type_hints(DecentralizedOptions)
    fields = {f.name: f for f in dataclasses.fields(DecentralizedOptions)}
    for name in names:   # one override per constant: its type or None, the table's doc
        assert mine[name] == (hints[name] | None), name
        assert fields[name].default is None
        assert fields[name].metadata["doc"] == PD_CONSTANT_DOCS[name][0]


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
    add_setting_flags(p)
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
            typ, _opt = split_optional(hints[f.name])
            argv, want = _other_value(f, typing.get_origin(typ) or typ, f.metadata.get("choices"))
            opts = options_from_args(meth, cls, p.parse_args(argv), CLASSES.values())
            assert getattr(opts, f.name) == want, (meth, argv)
            # every other field keeps its default
            assert opts.replace(**{f.name: getattr(cls(), f.name)}) == cls(), (meth, argv)
            n += 1
    assert n >= 15
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
    (["--method", "ipopt-enum", "--starts", "0"], "option 'starts' must be in [1, 10000], got 0"),
    (["--method", "scip", "--threads", "0"], "option 'threads' must be in [1, 64], got 0"),
    (["--method", "ipopt-enum", "--seed", "-1"], "option 'seed' must be >= 0, got -1"),
    (["--method", "decentralized", "--max-outer", "0"], "'max_outer'"),
    (["--method", "decentralized", "--set", "zeta=2"], "option 'zeta' must be in (0, 1], got 2"),
    (["--method", "decentralized", "--set", "zeta=abc"], "option 'zeta' must be a number, got 'abc'"),
    (["--method", "decentralized", "--set", "zeta"], "'--set' value 'zeta' is not KEY=VALUE"),
    (["--method", "decentralized", "--set", "curvature=maybe"], "option 'curvature' must be true or false, got 'maybe'"),
    (["--method", "ipopt-enum", "--set", "zeta=0.5"], "unknown option 'zeta' (--set); IpoptEnumOptions takes: bound, time_limit, assoc_repair, sweeps, starts, seed, seed_decentralized, screen"),
    (["--method", "decentralized", "--set", "progress=true"], "unknown option 'progress'"),
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
    """Listing the methods and the Ipopt/SCIP options loads no solver and no Pyomo; the
    decentralised options read PDConstants (solvers/primal_dual.py) on first use, and still
    load no method's runner."""
    code = ("import sys; import cefl_opt.solvers.base as b; "
            "mods = lambda: sorted(m for m in sys.modules if m.startswith('cefl_opt.solvers.'));"
            "print(mods()); ms = b.methods(); b.method_spec('scip').options_class(); "
            "b.method_spec('ipopt-enum').options_class(); print(mods());"
            "print('pyomo' in sys.modules, len(ms) == len(b._REGISTRY) >= 8); "
            "b.options_classes(); "
            "print(sorted(set(mods()) & {'cefl_opt.solvers.centralized', "
            "'cefl_opt.solvers.decentralized', 'cefl_opt.solvers.scip'}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after, last, runners = p.stdout.strip().splitlines()
    assert before == after == ("['cefl_opt.solvers.base', 'cefl_opt.solvers.errors', "
                               "'cefl_opt.solvers.isolation', 'cefl_opt.solvers.options', "
                               "'cefl_opt.solvers.plugins']")
    assert last == "False True"
    assert runners == "[]"


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
    real = centralized._Search.solve

    def spy(self, decisions, warm=None):
        if warm is None:   # a start candidate (the polish and the sweeps pass a warm start)
            tried.append(tuple(int(d.aggregator) for d in decisions))
        return real(self, decisions, warm)

    monkeypatch.setattr(centralized._Search, "solve", spy)
    for rule in ("greedy_data_aggregators", "greedy_rate_aggregators"):
        monkeypatch.setattr(centralized, rule, lambda inst: [0] * inst.T)
    res = base.solve(inst, "ipopt-enum", starts=1, seed_decentralized=False,  # no random seeds
                     workers=1)                          # the spy sees every solve
    assert res.solution is not None
    assert sorted(set(tried)) == [(s,) * inst.T for s in range(inst.S)]


# ---------------------------------------------------------------------- --set, --options, display
def _set_text(f: dataclasses.Field, typ, default):
    """A --set text for field `f` and the value it must give, other than the default."""
    choices = f.metadata.get("choices")
    if typ is bool:
        return ("false", False) if default else ("true", True)
    if choices:
        v = [c for c in choices if c != default][0]
        return v, v
    if typ is int:
        return str((default or 0) + 2), (default or 0) + 2
    if typ is float:
        check = f.metadata.get("check") or (lambda v: None)
        v = next(v for v in (0.37, 0.41, 1.7) if v != default and not check(v))
        return repr(v), v
    return "x.csv", "x.csv"


def test_every_algorithm_option_can_be_set_by_name_with_set():
    p = _parser()
    n = 0
    for meth, cls in CLASSES.items():
        hints = typing.get_type_hints(cls)
        for f in settable_fields(cls):
            typ, _opt = split_optional(hints[f.name])
            text, want = _set_text(f, typing.get_origin(typ) or typ, getattr(cls(), f.name))
            for key in (f.name, f.name.replace("_", "-").lower()):   # either spelling
                args = p.parse_args(["--set", f"{key}={text}"])
                opts = options_from_args(meth, cls, args, CLASSES.values())
                assert getattr(opts, f.name) == want, (meth, key, text)
                assert opts.replace(**{f.name: getattr(cls(), f.name)}) == cls()
            n += 1
    assert n >= 60       # the PDConstants overrides included, three times


def test_set_none_clears_an_optional_option_and_a_flag_overrides_set_and_file(tmp_path):
    p = _parser()
    opts = options_from_args("scip", ScipOptions, p.parse_args(["--set", "time_limit=none"]),
                             CLASSES.values())
    assert opts.time_limit is None
    f = tmp_path / "o.toml"
    f.write_text("gap = 0.5\nthreads = 3\n")
    args = p.parse_args(["--options", str(f), "--set", "gap=0.25", "--threads", "2"])
    opts = options_from_args("scip", ScipOptions, args, CLASSES.values())
    assert (opts.gap, opts.threads) == (0.25, 2)
    args = p.parse_args(["--options", str(f)])
    assert options_from_args("scip", ScipOptions, args, CLASSES.values()).threads == 3


def test_an_options_file_sets_constants_and_mappings_and_checks_them(tmp_path):
    p = _parser()
    f = tmp_path / "o.toml"
    f.write_text('L_C = 0.7\nzeta = 0.5\ncurvature = false\ninner = "fista"\n'
                 '[ipopt_options]\nmax_iter = 50\n')
    opts = options_from_args("decentralized", DecentralizedOptions,
                             p.parse_args(["--options", str(f)]), CLASSES.values())
    assert (opts.L_C, opts.zeta, opts.curvature, opts.inner) == (0.7, 0.5, False, "fista")
    assert opts.ipopt_options == {"max_iter": 50}
    f.write_text("zeta = 2.0\n")
    with pytest.raises(OptionError, match="option 'zeta' must be in"):
        options_from_args("decentralized", DecentralizedOptions,
                          p.parse_args(["--options", str(f)]), CLASSES.values())
    f.write_text("zetta = 0.5\n")
    with pytest.raises(UnknownOptionError, match="unknown option 'zetta'.*takes: .*zeta"):
        options_from_args("decentralized", DecentralizedOptions,
                          p.parse_args(["--options", str(f)]), CLASSES.values())


@pytest.mark.parametrize("text,needle", [
    ("zeta = \n", "is not valid TOML"),
    ("zetta = 0.5\n", "unknown option 'zetta'"),
    ("progress = true\n", "unknown option 'progress'"),
    ("max_outer = 0\n", "option 'max_outer' must be >= 1, got 0"),
    ('max_outer = "5"\n', "option 'max_outer' must be an integer, got '5'"),
])
def test_solve_cli_bad_options_file_is_exit_2(tmp_path, capsys, text, needle):
    net, out, f = tmp_path / "net.json", tmp_path / "sol.json", tmp_path / "o.toml"
    make_instance("tiny", seed=0).save(net)
    f.write_text(text)
    rc = cli.main(["solve", str(net), "--method", "centralized-pd", "--options", str(f),
                   "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_solve_cli_options_file_missing_is_exit_2(tmp_path, capsys):
    net = tmp_path / "net.json"
    make_instance("tiny", seed=0).save(net)
    rc = cli.main(["solve", str(net), "--method", "fixed", "--options",
                   str(tmp_path / "none.toml"), "--out", str(tmp_path / "s.json")])
    assert rc == 2 and "none.toml" in capsys.readouterr().err


def test_list_options_prints_each_option_with_type_default_and_meaning(capsys):
    for meth, cls in CLASSES.items():
        assert cli.main(["solve", "--method", meth, "--list-options"]) == 0
        out = capsys.readouterr().out
        hints = typing.get_type_hints(cls)
        for f in file_fields(cls):
            line = next(ln for ln in out.splitlines() if ln.startswith(f"  {f.name} ("))
            assert getattr(split_optional(hints[f.name])[0], "__name__") in line
            assert "default" in line
            assert f.metadata["doc"][:30] in out
        assert "  progress (" not in out


def test_solve_without_net_or_out_is_exit_2_unless_listing(tmp_path, capsys):
    assert cli.main(["solve", "--method", "fixed"]) == 2
    assert "required to solve: net, --out" in capsys.readouterr().err
    net = tmp_path / "net.json"
    make_instance("tiny", seed=0).save(net)
    assert cli.main(["solve", str(net), "--method", "fixed"]) == 2
    assert "required to solve: --out" in capsys.readouterr().err


def test_solve_help_is_at_most_60_lines():
    env = {**__import__("os").environ, "COLUMNS": "80"}
    p = subprocess.run([sys.executable, "-m", "cefl_opt.cli", "solve", "--help"], env=env,
                       capture_output=True, text=True, check=True)
    lines = p.stdout.splitlines()
    assert 20 < len(lines) <= 60, len(lines)
    assert "--set KEY=VALUE" in p.stdout and "--no-progress" in p.stdout
    assert "--l-c" not in p.stdout and "--lambda1" not in p.stdout     # behind --set now


@pytest.mark.parametrize("method", sorted(CLASSES))
@pytest.mark.parametrize("switch,want", [("--progress", True), ("--no-progress", False)])
def test_every_method_takes_the_display_switches(method, switch, want):
    parser = cli.build_parser(["solve"])
    args = parser.parse_args(["solve", "net.json", "--method", method, "--out", "s.json",
                              switch, "--quiet"])
    assert base.options_from_namespace(args).progress is want
    args = parser.parse_args(["solve", "net.json", "--method", method, "--out", "s.json"])
    assert base.options_from_namespace(args).progress is False


@pytest.mark.parametrize("switch", ["--progress", "--no-progress"])
def test_ipopt_enum_progress_shows_a_bar_of_its_ipopt_solves_only_when_asked(tmp_path, capfd,
                                                                            switch):
    net, out = tmp_path / "net.json", tmp_path / "sol.json"
    make_instance("tiny", seed=0, rounds=2).save(net)
    rc = cli.main(["solve", str(net), "--method", "ipopt-enum", "--out", str(out), switch])
    cap = capfd.readouterr()
    assert rc == 0, cap.err
    assert ("Ipopt solves" in cap.err) is (switch == "--progress"), cap.err
    assert "wrote" in cap.out


def test_quiet_prints_nothing_on_stdout_and_writes_the_same_solution(tmp_path, capfd):
    net = tmp_path / "net.json"
    make_instance("tiny", seed=0, rounds=2).save(net)
    assert cli.main(["solve", str(net), "--method", "fixed", "--out", str(tmp_path / "a.json"),
                     "--quiet"]) == 0
    cap = capfd.readouterr()
    assert cap.out == "" and cap.err == ""
    assert cli.main(["solve", str(net), "--method", "fixed", "--out",
                     str(tmp_path / "b.json")]) == 0
    assert "wrote" in capfd.readouterr().out
    import json
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b and a["rounds"]


@pytest.mark.parametrize("argv,warned,key,want", [
    (["--l-c", "0.7"], "--l-c of solve is deprecated; use --set L_C=VALUE", "L_C", 0.7),
    (["--L-max", "5"], "--L-max of solve is deprecated; use --set L_max=VALUE", "L_max", 5.0),
    (["--zeta", "0.5"], "--zeta of solve is deprecated; use --set zeta=VALUE", "zeta", 0.5),
    (["--no-curvature"], "--no-curvature of solve is deprecated; use --set curvature=false",
     "curvature", False),
    (["--restore"], "--restore of solve is deprecated; use --set restore=true", "restore", True),
])
def test_old_constant_flags_still_work_with_a_deprecation_warning(capsys, argv, warned, key,
                                                                   want):
    parser = cli.build_parser(["solve"])
    args = parser.parse_args(["solve", "n.json", "--method", "decentralized", "--out", "s.json",
                              *argv])
    assert capsys.readouterr().err.strip() == f"cefl-opt: warning: {warned}"
    assert getattr(base.options_from_namespace(args), key) == want


def test_old_constant_flags_are_checked_as_set_is(tmp_path, capsys):
    net = tmp_path / "net.json"
    make_instance("tiny", seed=0).save(net)
    rc = cli.main(["solve", str(net), "--method", "decentralized", "--zeta", "2", "--out",
                   str(tmp_path / "s.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[0].startswith("cefl-opt: warning: --zeta")
    assert err[1] == ("cefl-opt: error: method 'decentralized': option 'zeta' must be in "
                      "(0, 1], got 2.0")
