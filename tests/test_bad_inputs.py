"""A matrix of bad inputs across every command and the Python API.

Each CLI case must give its documented exit status (cefl_opt.cli: 2 for bad input), exactly one
line `cefl-opt: error: ...` naming the field or option and the value, no traceback, and leave the
folder exactly as it was (no output, no temporary file, no report folder). Each API case must
raise a typed error (InputError) naming the field and the value.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cefl_opt import cli
from cefl_opt.generator import make_instance
from cefl_opt.instance import Instance, InstanceError
from cefl_opt.io import InputError
from cefl_opt.system import reference_solution

HUGE = "1" + "0" * 400          # an integer literal far beyond a float


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def good():
    inst = make_instance("tiny", seed=0)
    return (json.dumps(inst.to_dict(), indent=1),
            json.dumps(reference_solution(inst).to_dict(), indent=1))


def _instance_text(good, mutate) -> str:
    d = json.loads(good[0])
    mutate(d)
    return json.dumps(d)


def _format1(d):
    d["format"] = "cefl-instance/1"
    d["xi3_total"], d["xi3"] = d.pop("xi3"), d.pop("xi3_parts")
    del d["xi3_total"]


def _set(path, value):
    def mutate(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return mutate


DEEP = "[" * 100_000 + "]" * 100_000

# name -> (files to write besides good net.json/sol.json, argv, expected exit, needles)
# In argv and file texts, "{d}" is the test's folder. File values: a string (written as is) or
# a mutation of the good instance ("net:" prefix) / solution ("sol:" prefix).
CLI_CASES = {
    # ---- network generate / show
    "generate: size that cannot fit": ({}, ["network", "generate", "--preset", "paper", "--ues",
                                            "100000000", "--out", "{d}/n.json"], 2,
                                       ["100000000 UEs", "needs about", "TB", "memory"]),
    "generate: --ues 0": ({}, ["network", "generate", "--preset", "tiny", "--ues", "0", "--out",
                               "{d}/n.json"], 2, ["--ues", "'0'"]),
    "generate: --seed -1": ({}, ["network", "generate", "--preset", "tiny", "--seed", "-1",
                                 "--out", "{d}/n.json"], 2, ["--seed", "'-1'"]),
    "generate: --rounds nan": ({}, ["network", "generate", "--preset", "tiny", "--rounds", "nan",
                                    "--out", "{d}/n.json"], 2, ["--rounds", "'nan'"]),
    "generate: --out is a folder": ({"sub/x": "x"}, ["network", "generate", "--preset", "tiny",
                                                     "--out", "{d}/sub"], 2, ["--out", "folder"]),
    "show: deep nesting": ({"bad.json": DEEP}, ["network", "show", "{d}/bad.json"], 2,
                           ["bad.json", "nested too deeply"]),
    "show: huge integer": ({"bad.json": ("net", _set(["Dbar", 0, 0], "HUGE"))},
                           ["network", "show", "{d}/bad.json"], 2, ["'Dbar'", "inf", "[0, 0]"]),
    "show: missing xi1": ({"bad.json": ("net", lambda d: d.pop("xi1"))},
                          ["network", "show", "{d}/bad.json"], 2, ["'xi1'", "missing"]),
    "show: missing beta_D": ({"bad.json": ("net", lambda d: d.pop("beta_D"))},
                             ["network", "show", "{d}/bad.json"], 2, ["'beta_D'", "missing"]),
    "show: format 1 missing xi3_total": ({"bad.json": ("net", _format1)},
                                         ["network", "show", "{d}/bad.json"], 2,
                                         ["'xi3_total'", "missing"]),
    "show: boolean in a number array": ({"bad.json": ("net", _set(["R_nb", 0, 1, 0], True))},
                                        ["network", "show", "{d}/bad.json"], 2,
                                        ["'R_nb'", "True", "[0, 1, 0]"]),
    "show: negative P_nb": ({"bad.json": ("net", _set(["P_nb", 1, 0, 0], -0.2))},
                            ["network", "show", "{d}/bad.json"], 2, ["'P_nb'", "-0.2"]),
    # ---- solve
    "solve: --gap nan": ({}, ["solve", "{d}/net.json", "--method", "scip", "--gap", "nan", "--out",
                              "{d}/s.json"], 2, ["'gap'", "nan"]),
    "solve: --time-limit nan": ({}, ["solve", "{d}/net.json", "--method", "ipopt-enum",
                                     "--time-limit", "nan", "--out", "{d}/s.json"], 2,
                                ["'time_limit'", "nan"]),
    "solve: --starts 0": ({}, ["solve", "{d}/net.json", "--method", "ipopt-enum", "--starts", "0",
                               "--out", "{d}/s.json"], 2, ["'starts'", "0"]),
    "solve: --threads 0": ({}, ["solve", "{d}/net.json", "--method", "scip", "--threads", "0",
                                "--out", "{d}/s.json"], 2, ["'threads'", "0"]),
    "solve: --seed -1": ({}, ["solve", "{d}/net.json", "--method", "ipopt-enum", "--seed", "-1",
                              "--out", "{d}/s.json"], 2, ["'seed'", "-1"]),
    "solve: --out is the instance": ({}, ["solve", "{d}/net.json", "--method", "greedy-rate",
                                          "--out", "{d}/net.json"], 2,
                                     ["--out", "net.json", "input"]),
    "solve: --trace is --out": ({}, ["solve", "{d}/net.json", "--method", "decentralized", "--out",
                                     "{d}/s.json", "--trace", "{d}/s.json"], 2,
                                ["--trace", "s.json"]),
    "solve: --out under a file": ({"blocker": "x"}, ["solve", "{d}/net.json", "--method",
                                                     "greedy-rate", "--out", "{d}/blocker/s.json"],
                                  2, ["--out", "blocker", "not a folder"]),
    "solve: --aggregator out of range": ({}, ["solve", "{d}/net.json", "--method", "fixed",
                                              "--aggregator", "9", "--out", "{d}/s.json"], 2,
                                         ["'aggregator'", "9"]),
    "solve: --set unknown key": ({}, ["solve", "{d}/net.json", "--method", "decentralized",
                                      "--set", "zetta=0.5", "--out", "{d}/s.json"], 2,
                                 ["unknown option 'zetta'", "zeta", "lambda1"]),
    "solve: --set bad value": ({}, ["solve", "{d}/net.json", "--method", "decentralized",
                                    "--set", "inner=admm", "--out", "{d}/s.json"], 2,
                               ["'inner'", "'admm'"]),
    "solve: --options missing file": ({}, ["solve", "{d}/net.json", "--method", "scip",
                                           "--options", "{d}/none.toml", "--out", "{d}/s.json"],
                                      2, ["none.toml"]),
    "solve: deep nesting": ({"bad.json": DEEP}, ["solve", "{d}/bad.json", "--method",
                                                 "greedy-rate", "--out", "{d}/s.json"], 2,
                            ["nested too deeply"]),
    # ---- evaluate
    "evaluate: huge integer in a solution": ({"bad.json": ("sol", _set(["rounds", 0, "f", 1],
                                                                        "HUGE"))},
                                             ["evaluate", "{d}/net.json", "{d}/bad.json"], 2,
                                             ["rounds[0].f", "inf", "[1]"]),
    "evaluate: boolean in a solution": ({"bad.json": ("sol", _set(["rounds", 1, "m_ue", 0],
                                                                  False))},
                                        ["evaluate", "{d}/net.json", "{d}/bad.json"], 2,
                                        ["rounds[1].m_ue", "False"]),
    "evaluate: deep nesting": ({"bad.json": DEEP}, ["evaluate", "{d}/net.json", "{d}/bad.json"],
                               2, ["nested too deeply"]),
    "evaluate: --json is the solution": ({}, ["evaluate", "{d}/net.json", "{d}/sol.json", "--json",
                                              "{d}/sol.json"], 2, ["--json", "sol.json", "input"]),
    # ---- train / estimate
    "train: --train-rounds 0": ({}, ["train", "{d}/net.json", "{d}/sol.json", "--dataset",
                                     "digits", "--train-rounds", "0", "--out", "{d}/h.csv"], 2,
                                ["--train-rounds", "'0'"]),
    "train: --lr nan": ({}, ["train", "{d}/net.json", "{d}/sol.json", "--dataset", "digits",
                             "--lr", "nan", "--out", "{d}/h.csv"], 2, ["--lr", "'nan'"]),
    "train: --targets 1.5": ({}, ["train", "{d}/net.json", "{d}/sol.json", "--dataset", "digits",
                                  "--targets", "1.5", "--out", "{d}/h.csv"], 2,
                             ["--targets", "'1.5'"]),
    "train: --out is the solution": ({}, ["train", "{d}/net.json", "{d}/sol.json", "--dataset",
                                          "digits", "--out", "{d}/sol.json"], 2,
                                     ["--out", "sol.json", "input"]),
    "estimate: --draws 0": ({}, ["estimate", "{d}/net.json", "--dataset", "digits", "--draws",
                                 "0", "--out", "{d}/e.json"], 2, ["--draws", "'0'"]),
    "estimate: --scale inf": ({}, ["estimate", "{d}/net.json", "--dataset", "digits", "--scale",
                                   "inf", "--out", "{d}/e.json"], 2, ["--scale", "'inf'"]),
    "estimate: --apply is --out": ({}, ["estimate", "{d}/net.json", "--dataset", "digits",
                                        "--out", "{d}/e.json", "--apply", "{d}/e.json"],
                                   2, ["--apply", "e.json"]),
    # ---- run (checked before any solve; no report folder left)
    "run: --preset": ({}, ["run", "--out", "{d}/rep", "--preset", "huge"], 2,
                      ["--preset", "'huge'"]),
    "run: --rounds 0": ({}, ["run", "--out", "{d}/rep", "--rounds", "0"], 2, ["--rounds", "'0'"]),
    "run: --seed -1": ({}, ["run", "--out", "{d}/rep", "--seed", "-1"], 2, ["--seed", "'-1'"]),
    "run: --dataset": ({}, ["run", "--out", "{d}/new/rep", "--preset", "tiny", "--dataset",
                            "nope"], 2, ["--dataset", "'nope'"]),
    "run: --train-rounds 0": ({}, ["run", "--out", "{d}/rep", "--train-rounds", "0"], 2,
                              ["--train-rounds", "'0'"]),
    "run: --methods": ({}, ["run", "--out", "{d}/rep", "--methods", "ipopt-enum,magic"], 2,
                       ["--methods", "magic"]),
    "run: missing data directory": ({}, ["run", "--out", "{d}/rep", "--preset", "tiny",
                                         "--methods", "greedy-rate", "--dataset", "cifar10",
                                         "--data-dir", "{d}/nodata"], 2, ["nodata"]),
}


def _materialise(d: Path, files: dict, good) -> None:
    (d / "net.json").write_text(good[0])
    (d / "sol.json").write_text(good[1])
    for name, spec in files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, tuple):
            kind, mutate = spec
            data = json.loads(good[0] if kind == "net" else good[1])
            mutate(data)
            spec = json.dumps(data).replace('"HUGE"', HUGE)
        p.write_text(spec)


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_bad_input(case, tmp_path, good, capsys):
    files, argv, code, needles = CLI_CASES[case]
    _materialise(tmp_path, files, good)
    before = _tree(tmp_path)
    rc = cli.main([a.replace("{d}", str(tmp_path)) for a in argv])
    out, err = capsys.readouterr()
    assert rc == code, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cefl-opt: error:"), err
    assert "Traceback" not in err + out
    for needle in needles:
        assert needle in err, (needle, err)
    assert _tree(tmp_path) == before                     # nothing written, nothing left


# ---------------------------------------------------------------------- Python API
def _mutated(**arrays):
    inst = make_instance("tiny", seed=0)
    for k, (idx, v) in arrays.items():
        getattr(inst, k)[idx] = v
    return inst


def _api_cases():
    from cefl_opt.learning.estimation import dpu_datasets
    from cefl_opt.learning.trainer import run_training
    from cefl_opt.models import build_problem
    from cefl_opt.solvers.base import solve
    from cefl_opt.system import evaluate
    sol = reference_solution(make_instance("tiny", seed=0))
    return {
        "build_problem(None)": (lambda: build_problem(None), ["Instance", "NoneType"]),
        "solve(dict)": (lambda: solve({"xi1": 1.0}, "greedy-rate"), ["Instance", "dict"]),
        "solve: NaN rate": (lambda: solve(_mutated(R_nb=((0, 1, 0), np.nan)), "greedy-rate"),
                            ["'R_nb'", "nan", "[0, 1, 0]"]),
        "build_problem: negative P_nb": (lambda: build_problem(_mutated(P_nb=((1, 0, 0), -0.2))),
                                         ["'P_nb'", "-0.2"]),
        "solve: negative Rmax_s": (lambda: solve(_mutated(Rmax_s=(1, -5e9)), "ipopt-enum"),
                                   ["'Rmax_s'", "-5"]),
        "evaluate: NaN sigma": (lambda: evaluate(_mutated(sigma=(2, np.nan)), sol),
                                ["'sigma'", "nan"]),
        "run_training(None)": (lambda: run_training(None, sol, None), ["Instance", "NoneType"]),
        "dpu_datasets: list rate": (lambda: dpu_datasets(_list_rate(), np.zeros(10, int)),
                                    ["'R_bn'", "list"]),
        "make_instance: too large": (lambda: make_instance("paper", ues=10 ** 8),
                                     ["100000000 UEs", "memory"]),
        "make_instance: seed -1": (lambda: make_instance("tiny", seed=-1), ["'seed'", "-1"]),
        "from_dict: missing xi2": (lambda: Instance.from_dict(_without("xi2")),
                                   ["'xi2'", "missing"]),
        "from_dict: boolean scalar": (lambda: Instance.from_dict({**_without(), "eta": True}),
                                      ["'eta'", "True"]),
    }


def _list_rate():
    inst = make_instance("tiny", seed=0)
    inst.R_bn = inst.R_bn.tolist()
    return inst


def _without(*keys):
    d = make_instance("tiny", seed=0).to_dict()
    for k in keys:
        d.pop(k)
    return d


API_CASES = ["build_problem(None)", "solve(dict)", "solve: NaN rate", "build_problem: negative P_nb",
             "solve: negative Rmax_s", "evaluate: NaN sigma", "run_training(None)",
             "dpu_datasets: list rate", "make_instance: too large", "make_instance: seed -1",
             "from_dict: missing xi2", "from_dict: boolean scalar"]


@pytest.mark.parametrize("case", API_CASES)
def test_api_bad_input(case):
    call, needles = _api_cases()[case]
    with pytest.raises(InputError) as e:
        call()
    assert isinstance(e.value, InstanceError) or "option" not in str(e.value)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))
    assert "--" not in str(e.value)                       # library errors name no CLI flag


def test_matrix_is_large_enough():
    assert len(CLI_CASES) + len(API_CASES) >= 30
    commands = {argv[0] for _, argv, _, _ in CLI_CASES.values()}
    assert commands == {"network", "solve", "evaluate", "train", "estimate", "run"}


# ---------------------------------------------------------------------- failures after work
def test_solve_writes_trace_only_with_the_solution(tmp_path, capsys):
    """--trace goes into place with the solution, both or neither: an --out, or a --trace, that
    cannot be written (here: the write of one is refused) leaves neither behind."""
    net = tmp_path / "net.json"
    make_instance("tiny", seed=0).save(net)
    argv = ["solve", str(net), "--method", "centralized-pd", "--max-outer", "2",
            "--consensus-rounds", "2", "--out", str(tmp_path / "s.json"), "--trace",
            str(tmp_path / "t.csv")]
    assert cli.main(argv) == 0
    assert (tmp_path / "t.csv").read_text().startswith("outer,")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json", "s.json", "t.csv"]

    from cefl_opt import io as cefl_io
    real_stage = cefl_io._stage
    for refused in ("s2.json", "t2.csv"):
        def failing_stage(p, data):
            if p.name == refused:
                raise PermissionError(13, "Permission denied", str(p))
            return real_stage(p, data)
        cefl_io._stage = failing_stage
        try:
            rc = cli.main(argv[:-4] + ["--out", str(tmp_path / "s2.json"), "--trace",
                                       str(tmp_path / "t2.csv")])
        finally:
            cefl_io._stage = real_stage
        err = capsys.readouterr().err
        assert rc == 2 and refused in err and "Traceback" not in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json", "s.json", "t.csv"]


def _assert_interrupted_cleanly(script: str, folder: Path, code: int = 130,
                                line: str = "interrupted") -> None:
    """Run `script` (a CLI call that gets a SIGINT, or a SIGTERM with code 143 and line
    "terminated") with both signals' default dispositions: exit `code`, only `cefl-opt: line`
    on stderr, nothing written beside the instance net.json."""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, preexec_fn=lambda: (signal.signal(signal.SIGINT, signal.SIG_DFL),
                                                        signal.signal(signal.SIGTERM, signal.SIG_DFL)))
    assert p.returncode == code, (p.stdout, p.stderr)
    assert p.stderr == f"cefl-opt: {line}\n"
    assert sorted(x.name for x in folder.iterdir()) == ["net.json"]


def test_interrupted_solve_prints_one_clean_line(tmp_path):
    """Ctrl-C in the middle of an Ipopt solve: exit 130 and only `cefl-opt: interrupted`."""
    net = tmp_path / "net.json"
    make_instance("paper", seed=0, rounds=2).save(net)        # ipopt-enum takes minutes here
    script = ("import os, signal, sys, threading\n"
              "from cefl_opt import cli\n"
              "threading.Timer(4.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
              f"sys.exit(cli.main(['solve', {str(net)!r}, '--method', 'ipopt-enum', '--out', "
              f"{str(tmp_path / 's.json')!r}]))\n")
    _assert_interrupted_cleanly(script, tmp_path)


def _solve_making(cls_src: str, net: Path, out: Path, method: str) -> str:
    """A script: `cefl-opt solve` in process whose solve first makes (and drops) an instance of
    the class `Made`, defined by `cls_src`."""
    return ("import os, signal, sys\n"
            "from cefl_opt import cli\n"
            "import cefl_opt.solvers.base as base\n"
            "real = base.solve\n"
            + cls_src +
            "def solve(*a, **k):\n"
            "    Made()\n"
            "    return real(*a, **k)\n"
            "base.solve = solve\n"
            f"sys.exit(cli.main(['solve', {str(net)!r}, '--method', {method!r}, '--out', "
            f"{str(out)!r}]))\n")


@pytest.mark.parametrize("method", ["ipopt-enum", "decentralized"])
def test_interrupt_swallowed_in_a_finaliser_still_stops_the_command(tmp_path, method):
    """A Ctrl-C that lands inside a finaliser (`__del__`) cannot be raised there: Python reports
    it to sys.unraisablehook and the work goes on. The command must still exit 130 and write no
    solution (not exit 0 with a solution file)."""
    net = tmp_path / "net.json"
    make_instance("tiny", seed=1).save(net)
    bomb = ("class Made:\n"
            "    def __del__(self):\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "        for _ in range(100000): pass   # the handler runs here, inside __del__\n")
    _assert_interrupted_cleanly(_solve_making(bomb, net, tmp_path / "s.json", method), tmp_path)


@pytest.mark.parametrize("sig, code, line", [(signal.SIGINT, 130, "interrupted"),
                                           (signal.SIGTERM, 143, "terminated")])
def test_an_object_the_signal_left_half_built_is_finalised_silently(tmp_path, sig, code, line):
    """A signal that lands in a constructor (a PyNumero NLP whose `__init__` had not yet set
    what its `__del__` frees) leaves an object whose finaliser fails once the exception lets
    it go. That failure is not the user's: exit 130 (143) with the one line, no traceback."""
    net = tmp_path / "net.json"
    make_instance("tiny", seed=1).save(net)
    half = ("class Made:\n"
            "    def __init__(self):\n"
            f"        os.kill(os.getpid(), {int(sig)})\n"
            "        for _ in range(100000): pass   # the handler raises here\n"
            "        self._obj = 1\n"
            "    def __del__(self):\n"
            "        self._obj\n")
    _assert_interrupted_cleanly(_solve_making(half, net, tmp_path / "s.json", "decentralized"),
                                tmp_path, code, line)


def test_interrupt_note_is_cleared_after_the_command(tmp_path, monkeypatch, capsys):
    """A Ctrl-C noted during one in-process command stops its write (exit 130, no file) and
    does not outlive it: library writes afterwards are not refused."""
    from cefl_opt import io as cefl_io
    real_save = Instance.save

    def save(self, path):            # a Ctrl-C whose raise was swallowed just before the write
        cefl_io.note_interrupt()
        return real_save(self, path)

    monkeypatch.setattr(Instance, "save", save)
    out = tmp_path / "n.json"
    assert cli.main(["network", "generate", "--preset", "tiny", "--seed", "1", "--out",
                     str(out)]) == 130
    assert capsys.readouterr().err == "cefl-opt: interrupted\n"
    assert list(tmp_path.iterdir()) == []              # nothing committed, no temporary left
    assert not cefl_io.interrupt_noted()
    cefl_io.write_atomic(tmp_path / "x.txt", "x")
    assert [x.name for x in tmp_path.iterdir()] == ["x.txt"]


@pytest.mark.parametrize("terminated, code, line", [(False, 130, "interrupted"),
                                                    (True, 143, "terminated")])
def test_an_interrupt_wrapped_on_its_way_out_is_still_an_interrupt(tmp_path, monkeypatch,
                                                                   capsys, terminated, code, line):
    """A Ctrl-C (or SIGTERM) that lands in a ctypes call reaches the command as ctypes'
    ArgumentError ("argument 2: KeyboardInterrupt"): still exit 130 (143), one line, no file."""
    import ctypes
    from cefl_opt import io as cefl_io

    def save(self, path):
        cefl_io.note_interrupt(terminated)
        raise ctypes.ArgumentError("argument 2: KeyboardInterrupt: ")

    monkeypatch.setattr(Instance, "save", save)
    out = tmp_path / "n.json"
    assert cli.main(["network", "generate", "--preset", "tiny", "--seed", "1", "--out",
                     str(out)]) == code
    assert capsys.readouterr().err == f"cefl-opt: {line}\n"
    assert list(tmp_path.iterdir()) == []


def test_an_error_without_an_interrupt_is_an_internal_error(tmp_path, monkeypatch, capsys):
    import ctypes

    def save(self, path):
        raise ctypes.ArgumentError("argument 2: TypeError: ")

    monkeypatch.setattr(Instance, "save", save)
    assert cli.main(["network", "generate", "--preset", "tiny", "--seed", "1", "--out",
                     str(tmp_path / "n.json")]) == 70
    assert "internal error: ArgumentError" in capsys.readouterr().err


def test_format_1_files_still_load(tmp_path):
    inst = make_instance("tiny", seed=3)
    d = inst.to_dict()
    assert d["format"] == "cefl-instance/2" and isinstance(d["xi3"], float)
    assert len(d["xi3_parts"]) == 6
    d1 = dict(d, format="cefl-instance/1")
    d1["xi3_total"], d1["xi3"] = d1.pop("xi3"), d1.pop("xi3_parts")
    (tmp_path / "old.json").write_text(json.dumps(d1))
    old = Instance.load(tmp_path / "old.json")
    assert old.xi3 == inst.xi3 == old.xi3_total
    assert np.array_equal(old.xi3_parts, inst.xi3_parts)
    d1["xi3"][2] = -1.0                              # format 1 errors use format 1 names
    with pytest.raises(InstanceError, match=r"field 'xi3' has invalid value -1.0"):
        Instance.from_dict(d1)


def test_cli_module_entry_point_matches_console_script(tmp_path):
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-m", "cefl_opt.cli", "network", "generate", "--preset",
                        "tiny", "--ues", "-3", "--out", str(tmp_path / "n.json")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--ues" in p.stderr


def test_run_failing_after_its_solves_leaves_nothing(tmp_path, monkeypatch, capsys):
    """A failure late in `run` (here: training) leaves neither a new report folder nor any file
    in an existing one."""
    import cefl_opt.learning.trainer as trainer

    def broken(*a, **kw):
        raise InputError("field 'x' is bad, got 1")
    monkeypatch.setattr(trainer, "run_training", broken)
    argv = ["run", "--preset", "tiny", "--rounds", "1", "--methods", "greedy-rate",
            "--dataset", "digits", "--train-rounds", "1"]
    assert cli.main(argv + ["--out", str(tmp_path / "new" / "rep")]) == 2
    assert "field 'x' is bad" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "keep.txt").write_text("mine")
    assert cli.main(argv + ["--out", str(tmp_path / "old"), "--overwrite"]) == 2
    assert "field 'x' is bad" in capsys.readouterr().err        # failed late, not refused
    assert _tree(tmp_path) == {"old": b"<dir>", "old/keep.txt": b"mine"}


def test_library_option_errors_name_no_cli_flag():
    from cefl_opt.solvers.base import solve
    with pytest.raises(ValueError) as e:
        solve(make_instance("tiny", seed=0), "fixed", aggregator=7)
    assert "'aggregator'" in str(e.value) and "7" in str(e.value) and "--" not in str(e.value)


@pytest.mark.parametrize("exc,code,needle", [
    (ZeroDivisionError("float division by zero"), 70, "internal error: ZeroDivisionError"),
    ("solver", 4, "ipopt not found"),
])
def test_unexpected_failures_are_one_line_with_their_own_exit_code(tmp_path, monkeypatch, capsys,
                                                                   exc, code, needle):
    """A bug is exit 70 (not 1, which `evaluate` uses for 'infeasible'); a solver failure is
    exit 4; both one line, no traceback."""
    from cefl_opt.cli import network
    from cefl_opt.solvers.base import SolverError
    err_obj = SolverError("ipopt not found") if exc == "solver" else exc

    def boom(inst):
        raise err_obj
    monkeypatch.setattr(network, "show_text", boom)
    make_instance("tiny", seed=0).save(tmp_path / "n.json")
    rc = cli.main(["network", "show", str(tmp_path / "n.json")])
    err = capsys.readouterr().err
    assert rc == code and err.count("\n") == 1 and needle in err and "Traceback" not in err
