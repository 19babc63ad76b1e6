"""`cefl-opt train` / `cefl-opt estimate` through `cefl_opt.cli.learning.register`."""
import argparse
import json
import re
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from cefl_opt.cli import build_parser, main
from cefl_opt.cli.learning import parse_targets, register
from cefl_opt.instance import Instance
from cefl_opt.io import InputError
from cefl_opt.learning.data import DataUnavailable
from cefl_opt.learning.toy import toy_instance, toy_solution

torch.set_num_threads(1)


@pytest.fixture()
def files(tmp_path):
    inst = toy_instance(N=3, B=2, S=2, T=2, D=80, seed=0)
    inst.save(tmp_path / "net.json")
    toy_solution(inst, gamma=2, m=0.3).save(tmp_path / "sol.json")
    return tmp_path


def parse(argv):
    return build_parser(["train", "estimate"]).parse_args(argv)


def parse_error(argv):
    """The one-line usage error of the real parser for argv (argparse checks the ranges)."""
    with pytest.raises(InputError) as e:
        build_parser().parse_args(argv)
    return str(e.value)


def test_train_writes_csv_and_targets(files, capsys):
    pytest.importorskip("cefl_opt.system")                        # real cost accounting
    out = files / "res" / "hist.csv"
    args = parse(["train", str(files / "net.json"), str(files / "sol.json"), "--dataset",
                  "digits", "--train-rounds", "3", "--method", "fednova", "--targets", "0.3,0.99",
                  "--lr", "0.1", "--no-progress", "--out", str(out)])
    assert args.func(args) == 0
    h = pd.read_csv(out)
    assert len(h) == 3 and (h["method"] == "fednova").all()
    for col in ("accuracy", "test_loss", "delay_s", "energy_J", "cum_delay_s", "cum_energy_kJ",
                "aggregator"):
        assert col in h.columns
    assert (h["aggregator"] == 0).all() and np.isfinite(h["cum_energy_kJ"]).all()
    t = pd.read_csv(files / "res" / "hist.targets.csv")
    assert t["target"].tolist() == [0.3, 0.99]
    assert sorted(p.name for p in (files / "res").iterdir()) == ["hist.csv", "hist.targets.csv"]
    assert "wrote" in capsys.readouterr().out


def test_train_bad_input_raises_instance_error(files, tmp_path):
    base = ["train", str(files / "net.json"), str(files / "sol.json"), "--dataset", "digits",
            "--no-progress", "--out", str(tmp_path / "x.csv")]
    for extra in (["--train-rounds", "0"], ["--lr", "-1"], ["--lr", "nan"], ["--threads", "0"],
                  ["--seed", "-1"], ["--targets", "0.5,abc"], ["--targets", "1.5"],
                  ["--vartheta", "-2"], ["--test-max", "0"], ["--mu", "-1"]):
        msg = parse_error(base + extra)
        assert extra[0] in msg and repr(extra[1]) in msg, msg
    for extra in (["--aggregator", "7"],):
        args = parse(base + extra)
        with pytest.raises(InputError, match=extra[0]):
            args.func(args)
    args = parse(["train", str(files / "missing.json"), str(files / "sol.json"), "--dataset",
                  "digits", "--out", str(tmp_path / "x.csv")])
    with pytest.raises(InputError, match="missing.json"):
        args.func(args)
    args = parse(base[:4] + ["cifar10", "--data-dir", str(tmp_path / "nope"), "--out",
                             str(tmp_path / "x.csv")])
    with pytest.raises(DataUnavailable, match="nope"):
        args.func(args)
    assert not (tmp_path / "x.csv").exists()
    assert main(base + ["--train-rounds", "0"]) == 2                # standalone entry point


def test_estimate_writes_json_and_applied_instance(files):
    out, new = files / "est.json", files / "net2.json"
    args = parse(["estimate", str(files / "net.json"), "--dataset", "digits", "--draws", "2",
                  "--sample-size", "6", "--grad-max", "40", "--sol", str(files / "sol.json"),
                  "--out", str(out), "--apply", str(new)])
    assert args.func(args) == 0
    est = json.loads(out.read_text())
    assert est["J"] == 2 and est["scale"] == 1.5 and len(est["Theta"]) == 5
    inst2 = Instance.load(new)
    assert inst2.L == pytest.approx(est["L"]) and inst2.zeta2 == pytest.approx(est["zeta2"])
    assert len(est["sigma"]) == 5 and inst2.sigma.tolist() == pytest.approx(est["sigma"])
    # --apply naming the input file updates it in place
    net = files / "net.json"
    args = parse(["estimate", str(net), "--dataset", "digits", "--draws", "1", "--sample-size", "4",
                  "--grad-max", "20", "--out", str(out), "--apply", str(net)])
    assert args.func(args) == 0
    assert Instance.load(net).sigma.tolist() == pytest.approx(json.loads(out.read_text())["sigma"])
    assert not list(files.glob("*.tmp"))
    dyn = files / "dyn.json"
    args = parse(["estimate", str(files / "net2.json"), "--dataset", "digits", "--J", "1",
                  "--sample-size", "4", "--grad-max", "20", "--dynamic", "--out", str(dyn)])
    assert args.func(args) == 0
    assert len(json.loads(dyn.read_text())["per_round"]) == 2
    msg = parse_error(["estimate", str(files / "net.json"), "--dataset", "digits", "--J", "0",
                       "--out", str(out)])
    assert "--J" in msg and "'0'" in msg


@pytest.mark.parametrize("cmd,old,value,new,dest,want", [
    ("train", "--rounds", "4", "--train-rounds", "train_rounds", 4),
    ("estimate", "--J", "3", "--draws", "J", 3),
    ("estimate", "--L-method", "hessian", "--lipschitz-method", "L_method", "hessian"),
])
def test_old_flags_still_work_with_a_deprecation_warning(files, capsys, cmd, old, value, new,
                                                         dest, want):
    pos = [str(files / "net.json")] + ([str(files / "sol.json")] if cmd == "train" else [])
    base = [cmd, *pos, "--dataset", "digits", "--out", str(files / "o")]
    args = parse(base + [old, value])
    assert getattr(args, dest) == want
    assert capsys.readouterr().err.strip() == (f"cefl-opt: warning: {old} of {cmd} is "
                                               f"deprecated; use {new}")
    args = parse(base + [new, value])
    assert getattr(args, dest) == want and capsys.readouterr().err == ""
    assert old not in build_parser([cmd])._subparsers._group_actions[0].choices[cmd].format_help()


def _leaf_commands():
    from cefl_opt.cli import _leaf_parsers
    return [p.prog.removeprefix("cefl-opt ") for p in _leaf_parsers(build_parser())]


def test_every_command_takes_the_display_switches():
    cmds = _leaf_commands()
    assert set(cmds) >= {"network generate", "network show", "solve", "evaluate", "train",
                         "estimate", "run", "plot"}
    for cmd in cmds:
        parser = build_parser([cmd.split()[0]])
        sub = parser
        for word in cmd.split():
            sub = next(a for a in sub._actions
                       if isinstance(a, argparse._SubParsersAction)).choices[word]
        flags = {o for a in sub._actions for o in a.option_strings}
        assert {"--progress", "--no-progress", "--quiet"} <= flags, cmd


def test_show_progress_resolves_the_command_default(monkeypatch):
    """On a terminal (off one: tests/test_faults_io.py)."""
    import io

    from cefl_opt.cli import show_progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(sys, "stderr", Tty())
    ns = argparse.Namespace
    assert show_progress(ns(progress=None, quiet=False), True) is True
    assert show_progress(ns(progress=None, quiet=True), True) is False
    assert show_progress(ns(progress=True, quiet=True), False) is True
    assert show_progress(ns(progress=False, quiet=False), True) is False
    assert show_progress(ns(progress=None, quiet=False), False) is False


def test_train_progress_bar_follows_the_switch(files, capsys):
    base = ["train", str(files / "net.json"), str(files / "sol.json"), "--dataset", "digits",
            "--train-rounds", "1", "--test-max", "20", "--out", str(files / "h.csv"),
            "--overwrite"]                       # each run replaces the last one's targets table
    assert main(base + ["--progress"]) == 0
    assert "round" in capsys.readouterr().err
    assert main(base + ["--no-progress"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and "wrote" in cap.out
    assert main(base + ["--quiet"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and cap.out == ""


def test_library_modules_do_not_import_the_cli():
    """No module under cefl_opt/learning, solvers or models imports cefl_opt.cli (read from
    their source: `import`, `from ... import` and relative imports that reach cli)."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    checked = 0
    for folder, pkg in (("cefl_opt/learning", "cefl_opt.learning"), ("solvers", "cefl_opt.solvers"),
                        ("models", "cefl_opt.models")):
        for path in sorted((root / folder).glob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    parts = pkg.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1]) if node.level else ""
                    mod = ".".join(p for p in (base, node.module or "") if p)
                    names = [mod] + [f"{mod}.{a.name}" for a in node.names]
                assert not any(n == "cefl_opt.cli" or n.startswith("cefl_opt.cli.")
                               for n in names), f"{path.name} imports the CLI: {names}"
            checked += 1
    assert checked >= 20


def test_parse_targets():
    assert parse_targets("0.6, 0.7,0.8") == [0.6, 0.7, 0.8]
    for bad in ("", "0", "x", "0.5,1.2"):
        with pytest.raises(InputError):
            parse_targets(bad)


def test_train_options_check_values_in_python_too():
    from cefl_opt.learning.options import TrainOptions
    base = dict(net="n.json", sol="s.json", out="h.csv", dataset="digits")
    o = TrainOptions(**base, train_rounds=4, lr=0.1, mu=0.0, baseline_params="own",
                     targets="0.5,0.9", aggregator=1)
    kw = o.trainer_kwargs(progress=False)
    assert kw == dict(method="cefl", rounds=4, model="mlp", lr=0.1, mu=0.0, seed=0,
                      targets=[0.5, 0.9], vartheta=None, aggregator=1, average=False,
                      test_max=None, progress=False)
    assert TrainOptions(**base).trainer_kwargs(progress=True)["targets"] == [0.6, 0.7, 0.8]
    assert TrainOptions(**{**base, "dataset": "cifar10"}).trainer_kwargs(
        progress=True)["targets"] == [0.4, 0.5, 0.6]
    for bad, needle in (({"train_rounds": 0}, "'--train-rounds' must be an integer >= 1"),
                        ({"lr": 0.0}, "'--lr' must be a finite number > 0"),
                        ({"mu": -0.5}, "'--mu' must be a finite number >= 0"),
                        ({"method": "fedsgd"}, "'--method' value 'fedsgd' is not one of"),
                        ({"targets": "0,1"}, "'--targets' must be accuracies in (0, 1]"),
                        ({"vartheta": "big"}, "'--vartheta' must be 'tau_eff' or a positive")):
        with pytest.raises(InputError, match=re.escape(needle)):
            TrainOptions(**{**base, **bad})
    assert TrainOptions(**{**base, "train_rounds": 1, "mu": 0}).mu == 0.0   # the boundaries
