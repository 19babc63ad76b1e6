"""``cefl-opt run``: the main job (instance -> solvers -> training -> report; `cefl_opt.pipeline`).

Every argument is checked, and the data set loaded, before any solve. The report is written into
a temporary folder beside ``--out`` and moved into place only when the run succeeds, so a failed
or interrupted run leaves no report folder (and no file in an existing one) behind.

``--out`` is a new folder or an empty one; an existing folder with files in it is refused
(exit 2) unless ``--overwrite``, which replaces it whole (its old files go, none is mixed with
the new run's). It may not hold the current folder, ``--cache-dir`` or ``--data-dir``, and its
parent must be writable; both are checked before any work, with the methods (each named once).
A symbolic link is followed: the folder it points to is the report folder. The report folder
gets the permissions the umask gives a new folder.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from ..io import InputError, OutputWriteError, check_interrupt
from . import COUNT, SEED, OptionError, show_progress


def register(sub: argparse._SubParsersAction) -> None:
    from ..pipeline import DEFAULT_METHODS, __doc__ as doc
    p = sub.add_parser("run", help="the main job: instance -> solvers -> training -> report",
                       description=doc)
    p.add_argument("--out", default="results/run",
                   help="report folder: new or empty (see --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing non-empty --out folder whole")
    p.add_argument("--preset", default="paper")
    p.add_argument("--rounds", type=COUNT, default=3, help="rounds T of the instance")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--methods", default=None,
                   help="comma-separated solve methods (see `cefl-opt solve --help`); default: "
                        + ",".join(DEFAULT_METHODS))
    p.add_argument("--dataset", default="fmnist")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--train-rounds", type=COUNT, default=30, help="training rounds per method")
    p.add_argument("--targets", default="0.6,0.7,0.8")
    p.add_argument("--model", default="mlp")
    p.add_argument("--skip-training", action="store_true")
    p.add_argument("--cache-dir", default="results/cache",
                   help="where measured ML constants are cached (default results/cache)")
    p.add_argument("--placeholder-constants", action="store_true",
                   help="keep the preset's placeholder ML constants (L = Theta = sigma = 1) "
                        "instead of measuring them on the data set")
    p.set_defaults(func=run_main)


def check_args(args: argparse.Namespace) -> list[str]:
    """Check every argument of `run` (no work done); return the solve methods to run."""
    from ..generator import PRESETS, check_size
    from ..pipeline import DEFAULT_METHODS
    from ..solvers.base import methods as known_methods
    from .learning import parse_targets
    if args.preset not in PRESETS:
        raise OptionError(f"option '--preset' value {args.preset!r} is not one of "
                          f"{sorted(PRESETS)}")
    check_size(**{**PRESETS[args.preset], "rounds": args.rounds})
    avail = known_methods()
    meths = (list(DEFAULT_METHODS) if args.methods is None
             else [m.strip() for m in args.methods.split(",") if m.strip()])
    missing = [m for m in meths if m not in avail]
    if missing or not meths:
        raise OptionError(f"option '--methods' value {args.methods!r} names unknown method(s) "
                          f"{missing}: choose from {sorted(avail)}")
    twice = sorted({m for m in meths if meths.count(m) > 1})
    if twice:
        raise OptionError(f"option '--methods' value {args.methods!r} names {twice[0]!r} more "
                          f"than once")
    if not (args.skip_training and args.placeholder_constants):  # the data set is used
        from ..learning.data import DATASETS
        from ..learning.models import MODELS
        for option, value, choices in (("--dataset", args.dataset, DATASETS),
                                       ("--model", args.model, MODELS)):
            if value not in choices:
                raise OptionError(f"option '{option}' value {value!r} is not one of "
                                  f"{list(choices)}")
        args.target_list = parse_targets(args.targets)
    _check_out(args)
    return meths


def _check_out(args: argparse.Namespace) -> None:
    """The report folder --out: a new or empty folder (or --overwrite), whose parent can be
    written, that holds neither the current folder nor the --cache-dir or --data-dir (the
    report replaces it whole)."""
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise OptionError(f"option '--out' value '{out}' exists and is not a folder")
    real = Path(os.path.realpath(out))
    for what, inner in (("the current folder", "."), ("option '--cache-dir'", args.cache_dir),
                        ("option '--data-dir'", args.data_dir)):
        if inner is not None and _within(Path(os.path.realpath(inner)), real):
            raise OptionError(f"option '--out' value '{out}' holds {what} ('{inner}'), which "
                              f"the report folder would replace; choose another folder")
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        raise OptionError(f"option '--out' value '{out}' is a folder with files in it; choose "
                          f"a new or empty folder, or pass --overwrite to replace it whole")
    _check_creatable(real.parent)


def _within(path: Path, folder: Path) -> bool:
    """`path` is `folder` or inside it (both resolved)."""
    return path == folder or folder in path.parents


def run_main(args: argparse.Namespace) -> int:
    from ..pipeline import run_pipeline
    meths = check_args(args)
    data = None
    if not (args.skip_training and args.placeholder_constants):
        from ..learning.data import load_dataset
        data = load_dataset(args.dataset, args.data_dir, seed=args.seed)
    out = Path(os.path.realpath(args.out)) if Path(args.out).is_symlink() else Path(args.out)
    created = _first_missing(out.parent)          # a folder this run creates above --out
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(stage, 0o777 & ~umask)    # mkdtemp's 0700 -> what the umask gives a new folder
    ok = False
    try:
        run_pipeline(stage, preset=args.preset, rounds=args.rounds, seed=args.seed,
                     methods=meths, data=data, dataset=args.dataset,
                     train=not args.skip_training, train_rounds=args.train_rounds,
                     targets=getattr(args, "target_list", None), model=args.model,
                     measure=not args.placeholder_constants, cache_dir=args.cache_dir,
                     progress=show_progress(args, True))
        _move_into_place(stage, out)
        ok = True
    except OutputWriteError as e:     # a report file (a full disk): named as --out's, not stage's
        name = Path(e.filename or "")
        if stage in name.parents:
            name = Path(args.out) / name.relative_to(stage)
        raise OutputWriteError(e.errno, e.strerror, os.fspath(name)) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if not ok and created is not None:
            shutil.rmtree(created, ignore_errors=True)
    print(f"report: {Path(args.out) / 'report.md'}")
    return 0


def _first_missing(folder: Path) -> Path | None:
    """The topmost ancestor of `folder` (itself included) that does not exist, or None."""
    missing = None
    for p in (folder, *folder.parents):
        if p.exists():
            break
        missing = p
    return missing


def _check_creatable(folder: Path) -> None:
    """InputError unless the report can be moved into `folder` (created when missing): its
    nearest existing ancestor is a writable folder."""
    p = folder
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise InputError(f"option '--out': folder '{folder}' cannot be created: '{p}' is not "
                         f"a folder")
    if not os.access(p, os.W_OK | os.X_OK):
        if p == folder:
            raise InputError(f"option '--out': folder '{folder}' is not writable")
        raise InputError(f"option '--out': folder '{folder}' cannot be created: '{p}' is not "
                         f"writable")


def _move_into_place(stage: Path, out: Path) -> None:
    """`stage` becomes `out`: a rename when `out` does not exist or is empty; otherwise (the
    --overwrite case) the old folder is renamed aside, `stage` renamed into place, and the old
    one removed. Nothing moves once Ctrl-C was noted."""
    check_interrupt()
    if out.is_dir() and any(out.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
        os.replace(out, old / out.name)
        try:
            os.replace(stage, out)
        except BaseException:
            os.replace(old / out.name, out)   # put the old report back
            shutil.rmtree(old, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)
        return
    if out.is_dir():
        out.rmdir()
    os.replace(stage, out)
