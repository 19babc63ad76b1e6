"""`cefl-opt train` / `cefl-opt estimate` through `cefl_opt.cli.learning.register`."""
import argparse
import json

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
    parser = argparse.ArgumentParser(prog="cefl-opt")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def parse_error(argv):
    """The one-line usage error of the real parser for argv (argparse checks the ranges)."""
    with pytest.raises(InputError) as e:
        build_parser().parse_args(argv)
    return str(e.value)


def test_train_writes_csv_and_targets(files, capsys):
    pytest.importorskip("cefl_opt.system")                        # real cost accounting
    out = files / "res" / "hist.csv"
    args = parse(["train", str(files / "net.json"), str(files / "sol.json"), "--dataset",
                  "digits", "--rounds", "3", "--method", "fednova", "--targets", "0.3,0.99",
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
    for extra in (["--rounds", "0"], ["--lr", "-1"], ["--lr", "nan"], ["--threads", "0"],
                  ["--seed", "-1"]):
        msg = parse_error(base + extra)
        assert extra[0] in msg and repr(extra[1]) in msg, msg
    for extra in (["--targets", "0.5,abc"], ["--targets", "1.5"], ["--aggregator", "7"],
                  ["--vartheta", "-2"]):
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
    assert main(base + ["--rounds", "0"]) == 2                      # standalone entry point


def test_estimate_writes_json_and_applied_instance(files):
    out, new = files / "est.json", files / "net2.json"
    args = parse(["estimate", str(files / "net.json"), "--dataset", "digits", "--J", "2",
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
    args = parse(["estimate", str(net), "--dataset", "digits", "--J", "1", "--sample-size", "4",
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


def test_parse_targets():
    assert parse_targets("0.6, 0.7,0.8") == [0.6, 0.7, 0.8]
    for bad in ("", "0", "x", "0.5,1.2"):
        with pytest.raises(InputError):
            parse_targets(bad)
