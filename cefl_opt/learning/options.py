"""The options of a training run under an orchestration: one typed :class:`TrainOptions`, from
which both ``cefl-opt train``'s flags (:func:`add_train_flags`) and the Flower app's run config
(:meth:`TrainOptions.from_run_config`, ``flower_app/pyproject.toml``) are derived and checked,
and :func:`prepare_train`, which checks the files they name and loads them (shared by both
engines and by the Flower deployment's ServerApp). This module imports no CLI module.

A flag is the field name with dashes (``train_rounds`` -> ``--train-rounds``); a run config key
is the flag without its leading dashes (``train-rounds``), ``""`` meaning the field's default.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..io import (SEED_MAX, THREADS_MAX, InputError, check_distinct, check_new,
                  check_writable)
from .data import DATASETS
from .models import MODELS
from .trainer import DEFAULT_LR

DEFAULT_TARGETS = {"fmnist": "0.6,0.7,0.8", "cifar10": "0.4,0.5,0.6",
                   "mnist5k": "0.6,0.7,0.8", "digits": "0.6,0.7,0.8"}
#: old names kept for one release: run config key / flag -> field
DEPRECATED = {"rounds": "train_rounds"}


def _number(*, lo: float, lo_open: bool = False, integer: bool = False,
            hi: int | None = None) -> Callable[[str], Any]:
    """A parser of text to a finite number (an integer if `integer`) >= lo (> lo if
    `lo_open`) and <= hi; ValueError with the reason and the text otherwise."""
    want = ("an integer" if integer else "a finite number") + f" {'>' if lo_open else '>='} {lo:g}"
    want += "" if hi is None else f" and <= {hi}"

    def parse(text: Any) -> float | int:
        try:
            v = int(str(text)) if integer else float(str(text))
        except ValueError:
            raise ValueError(f"must be {want}, got {str(text)!r}") from None
        if not math.isfinite(v) or (v <= lo if lo_open else v < lo) or (hi is not None
                                                                         and v > hi):
            raise ValueError(f"must be {want}, got {str(text)!r}")
        return v
    return parse


def parse_targets(text: str) -> list[float]:
    """Comma-separated target accuracies in (0, 1]."""
    try:
        vals = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"must be comma-separated numbers, got {text!r}") from None
    if not vals or any(not (0 < v <= 1) or not math.isfinite(v) for v in vals):
        raise ValueError(f"must be accuracies in (0, 1], got {text!r}")
    return vals


def _targets(text: str) -> str:
    parse_targets(text)
    return str(text)


def _vartheta(text: str) -> str:
    from .strategies import check_vartheta
    try:
        check_vartheta(text)
    except ValueError:
        raise ValueError(f"must be 'tau_eff' or a positive number, got {text!r}") from None
    return str(text)


def opt(default: Any, help: str, *, parse: Callable[[str], Any] | None = str,
        choices: tuple[str, ...] | None = None, positional: bool = False,
        required: bool = False, metavar: str | None = None) -> Any:
    """One training option: default, help, the parser of its text (flags and run config),
    choices, and whether the command line takes it as a positional or required argument."""
    return field(default=default, metadata={"help": help, "parse": parse, "choices": choices,
                                            "positional": positional, "required": required,
                                            "metavar": metavar})


COUNT, SEED = _number(lo=1, integer=True), _number(lo=0, integer=True, hi=SEED_MAX)
THREADS = _number(lo=1, integer=True, hi=THREADS_MAX)


@dataclass(frozen=True)
class TrainOptions:
    """``cefl-opt train``: training under a solution's orchestration (``learning.trainer``).
    Building one checks every value (``InputError`` naming the option and the value)."""

    net: str = opt("", "instance JSON (cefl-instance/2)", positional=True)
    sol: str = opt("", "solution JSON (cefl-solution/1) for the same instance", positional=True)
    out: str = opt("", "per-round CSV (written atomically); the targets table goes next to it "
                   "as <stem>.targets.csv", required=True, metavar="CSV")
    dataset: str = opt("", "data set", choices=DATASETS, required=True)
    data_dir: str | None = opt(None, "data directory (Fashion-MNIST override; required for "
                               "cifar10)", metavar="DIR")
    model: str = opt("mlp", "model", choices=MODELS)
    train_rounds: int = opt(20, "training rounds (rounds beyond the instance's T cycle its "
                            "rounds)", parse=COUNT, metavar="N")
    targets: str | None = opt(None, "comma-separated target accuracies (default: 0.6,0.7,0.8; "
                              "cifar10 0.4,0.5,0.6)", parse=_targets, metavar="LIST")
    method: str = opt("cefl", "training method", choices=("cefl", "fednova", "fedavg"))
    seed: int = opt(0, "seed of the data partition, the model and the mini-batches", parse=SEED,
                    metavar="N")
    lr: float = opt(DEFAULT_LR, f"local SGD step size (default {DEFAULT_LR})",
                    parse=_number(lo=0, lo_open=True), metavar="X")
    mu: float | None = opt(None, "FedProx weight (default: the instance's mu)",
                           parse=_number(lo=0), metavar="X")
    vartheta: str | None = opt(None, "aggregation scale of eq:11M; default: the instance's "
                               "(vartheta_mode 'tau_eff': FedNova's tau_eff; 'constant': its "
                               "vartheta), so the trainer and P's bound use the same; 'tau_eff' "
                               "or a number overrides", parse=_vartheta,
                               metavar="V")
    aggregator: int = opt(0, "fixed aggregator DC of the FedNova/FedAvg baselines", parse=SEED,
                          metavar="S")
    baseline_params: str = opt("average", "FedNova/FedAvg: every UE at the round's average f, "
                               "m, gamma of the solution (the paper's) or each UE at its own",
                               choices=("average", "own"))
    test_max: int | None = opt(None, "evaluate on the first N test samples only",
                               parse=COUNT, metavar="N")
    threads: int | None = opt(None, f"torch CPU threads (at most {THREADS_MAX})", parse=THREADS,
                              metavar="N")
    allow_infeasible: bool = opt(False, "train under a solution that violates a constraint of "
                                 "P (refused by default, exit 2, naming the worst violation)",
                                 parse=None)
    allow_other_instance: bool = opt(False, "train under a solution that records another "
                                     "instance's fingerprint (refused by default, exit 2)",
                                     parse=None)
    overwrite: bool = opt(False, "replace an existing targets table <stem>.targets.csv (it is "
                          "never replaced silently: exit 2)", parse=None)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            choices, parse = f.metadata["choices"], f.metadata["parse"]
            if choices and v not in choices and not (v == "" and f.metadata["required"]):
                raise InputError(f"option '{flag_of(f)}' value {v!r} is not one of "
                                 f"{', '.join(choices)}")
            if v is not None and parse not in (None, str) and not isinstance(v, bool):
                try:
                    object.__setattr__(self, f.name, parse(v))
                except ValueError as e:
                    raise InputError(f"option '{flag_of(f)}' {e}") from None

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> "TrainOptions":
        """From the flags of :func:`add_train_flags`."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})

    @classmethod
    def from_run_config(cls, cfg: dict[str, Any], *, skip: tuple[str, ...] = ()
                        ) -> "TrainOptions":
        """From a Flower run config: keys are the flags without dashes (``train-rounds``),
        ``""`` or None means the default; the keys in `skip` (the deployment's own) are
        ignored. An unknown key or a bad value is an ``InputError`` naming it."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kw: dict[str, Any] = {}
        for key, v in cfg.items():
            if key in skip or v == "" or v is None:
                continue
            name = key.replace("-", "_")
            if name in DEPRECATED:
                print(f"cefl-opt: warning: run config key '{key}' is deprecated; use "
                      f"'{DEPRECATED[name].replace('_', '-')}'", file=sys.stderr)
                name = DEPRECATED[name]
            if name not in fields:
                raise InputError(f"the Flower run config key {key!r} is not an option of "
                                 f"`cefl-opt train`; valid keys: "
                                 f"{', '.join(f.replace('_', '-') for f in fields)}")
            kw[name] = v if isinstance(v, bool) else str(v)
        for name in ("net", "sol", "out", "dataset"):
            if not kw.get(name):
                raise InputError(f"the Flower run config needs {name!r}")
        return cls(**kw)

    def trainer_kwargs(self, *, progress: bool) -> dict[str, Any]:
        """The keyword arguments of ``trainer.run_training`` these options give."""
        return dict(method=self.method, rounds=self.train_rounds, model=self.model,
                    lr=self.lr, mu=self.mu, seed=self.seed,
                    targets=parse_targets(self.targets or DEFAULT_TARGETS[self.dataset]),
                    vartheta=self.vartheta, aggregator=self.aggregator,
                    average=self.baseline_params == "average", test_max=self.test_max,
                    progress=progress)


def flag_of(f: dataclasses.Field) -> str:
    return f.name if f.metadata["positional"] else "--" + f.name.replace("_", "-")


def _argtype(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def conv(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    conv.__name__ = "value"
    return conv


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """One argument per field of :class:`TrainOptions`."""
    for f in dataclasses.fields(TrainOptions):
        meta = f.metadata
        if meta["positional"]:
            p.add_argument(f.name, help=meta["help"])
            continue
        kw: dict[str, Any] = {"dest": f.name, "help": meta["help"].replace("%", "%%")}
        if meta["parse"] is None:
            kw.update(action="store_true")
        else:
            kw.update(default=None if meta["required"] else f.default,
                      required=meta["required"])
            if meta["choices"]:
                kw["choices"] = meta["choices"]
            elif meta["parse"] is not str:
                kw["type"] = _argtype(meta["parse"])
            if meta["metavar"]:
                kw["metavar"] = meta["metavar"]
        p.add_argument(flag_of(f), **kw)


def write_train_outputs(res, out) -> tuple[Path, Path]:
    """The per-round CSV at ``out`` and the targets table next to it (``<stem>.targets.csv``),
    both or neither."""
    from ..io import write_all_atomic
    out = Path(out)
    tpath = _targets_path(out)
    write_all_atomic([(out, res.history.to_csv(index=False)),
                      (tpath, res.targets.to_csv(index=False))])
    return out, tpath


def _targets_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.stem + ".targets.csv")


def check_feasible(inst, sol, *, allow: bool) -> None:
    """InputError naming the worst violated constraint of P (the check `evaluate` runs, within
    cefl_opt.system.FEAS_TOL) unless `allow` (option --allow-infeasible), then a warning."""
    from ..system import FEAS_TOL, constraint_violations
    viol = constraint_violations(inst, sol)
    if not viol:
        return
    name, excess = max(viol, key=lambda x: x[1])
    text = (f"the solution is infeasible: {len(viol)} constraint(s) violated beyond the "
            f"relative tolerance {FEAS_TOL:g}, worst {name} (relative excess {excess:.6g})")
    if not allow:
        raise InputError(f"{text}; pass --allow-infeasible to train under it anyway")
    print(f"cefl-opt: warning: {text}; training anyway (--allow-infeasible)", file=sys.stderr)


def prepare_train(opts: TrainOptions, *, progress: bool = False):
    """Check the files `opts` names (outputs writable and distinct from the inputs, the
    solution for this instance and feasible, the aggregator a DC) and load them:
    ``(instance, solution, kwargs of run_training)``."""
    from ..instance import Instance
    from ..solution import Solution

    tpath = _targets_path(opts.out)
    check_distinct([("--out", opts.out), ("--out (targets table)", tpath)], [opts.net, opts.sol])
    check_writable(opts.out, "--out")
    check_writable(tpath, "--out (targets table)")
    check_new(tpath, "--out", overwrite=opts.overwrite)
    if opts.threads is not None:
        import torch
        torch.set_num_threads(int(opts.threads))
    inst = Instance.load(opts.net)
    sol = Solution.load(opts.sol, inst)
    note = sol.check_instance(inst, allow_other=opts.allow_other_instance)
    if note:
        print(note, file=sys.stderr)
    check_feasible(inst, sol, allow=opts.allow_infeasible)
    if opts.aggregator >= inst.S:
        raise InputError(f"option '--aggregator' value {opts.aggregator} is not a DC index "
                         f"0..{inst.S - 1}")
    return inst, sol, opts.trainer_kwargs(progress=progress)
