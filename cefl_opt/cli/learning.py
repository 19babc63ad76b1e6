"""``cefl-opt train`` and ``cefl-opt estimate`` (issue 5). Every option is checked, and the
outputs are checked to be writable and distinct from the inputs, before any data is loaded; bad
input raises :class:`cefl_opt.io.InputError` (exit status 2); ``train --engine flower`` returns
4 when a SuperNode fails mid-run (nothing is written).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from ..instance import Instance
from ..io import InputError, check_distinct, check_writable, write_csv_atomic, write_json_atomic
from ..learning.data import DATASETS
from ..learning.models import MODELS
from ..learning.trainer import DEFAULT_LR
from . import COUNT, POSITIVE, SEED, OptionError, add_inputs, number

EXIT_ENGINE = 4   # --engine flower: a SuperNode failed or timed out mid-run; nothing written
DEFAULT_TARGETS = {"fmnist": "0.6,0.7,0.8", "cifar10": "0.4,0.5,0.6",
                   "mnist5k": "0.6,0.7,0.8", "digits": "0.6,0.7,0.8"}


def register(subparsers) -> None:
    """Add the ``train`` and ``estimate`` sub-commands to an argparse sub-parser collection."""
    p = subparsers.add_parser(
        "train", help="train a model under an orchestration (CE-FL, FedNova or FedAvg)",
        description="Run federated training on the instance's dynamic non-i.i.d. data under the "
                    "solution's orchestration and record per round: test accuracy, loss, "
                    "aggregator, delay and energy (from cefl_opt.system.round_costs) and their "
                    "cumulative values. Rounds beyond the instance's T cycle its rounds (t mod T). "
                    "The step size is --lr, not the instance's eta (0.001, the paper's, is the "
                    "bound's constant and barely trains in few rounds).")
    add_inputs(p, "solution JSON (cefl-solution/1) for the same instance")
    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--data-dir", default=None,
                   help="data directory (Fashion-MNIST override; required for cifar10)")
    p.add_argument("--model", choices=MODELS, default="mlp")
    p.add_argument("--rounds", type=COUNT, default=20)
    p.add_argument("--targets", default=None,
                   help="comma-separated target accuracies (default: 0.6,0.7,0.8; cifar10 "
                        "0.4,0.5,0.6)")
    p.add_argument("--method", choices=("cefl", "fednova", "fedavg"), default="cefl")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--lr", type=POSITIVE, default=DEFAULT_LR,
                   help=f"local SGD step size (default {DEFAULT_LR})")
    p.add_argument("--mu", type=number(lo=0), default=None,
                   help="FedProx weight (default: the instance's mu)")
    p.add_argument("--vartheta", default=None,
                   help="aggregation scale of eq:11M; default: the instance's (vartheta_mode "
                        "'tau_eff': FedNova's tau_eff; 'constant': its vartheta), so the "
                        "trainer and P's bound use the same; 'tau_eff' or a number overrides")
    p.add_argument("--aggregator", type=number(lo=0, integer=True), default=0,
                   help="fixed aggregator DC of the FedNova/FedAvg baselines (default 0)")
    p.add_argument("--baseline-params", choices=("average", "own"), default="average",
                   help="FedNova/FedAvg: every UE at the round's average f, m, gamma of the "
                        "solution (the paper's, default) or each UE at its own")
    p.add_argument("--test-max", type=COUNT, default=None,
                   help="evaluate on the first N test samples only")
    p.add_argument("--threads", type=COUNT, default=None, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument("--engine", choices=("local", "flower"), default="local",
                   help="local: the in-process trainer (default); flower: the same rounds as a "
                        "Flower app in Flower's simulation engine (Ray), one SuperNode per DPU. "
                        "Exit 4 if a SuperNode fails (nothing written)")
    p.add_argument("--flower-cpus", type=COUNT, default=2,
                   help="--engine flower: CPUs Ray may use, one ClientApp per CPU (default 2)")
    p.add_argument("--out", required=True, help="per-round CSV (written atomically); the "
                   "targets table goes next to it as <stem>.targets.csv")
    p.add_argument("--allow-infeasible", action="store_true",
                   help="train under a solution that violates a constraint of P (refused by "
                        "default, exit 2, naming the worst violation)")
    p.add_argument("--allow-other-instance", action="store_true",
                   help="train under a solution that records another instance's fingerprint "
                        "(refused by default, exit 2)")
    p.set_defaults(func=cmd_train)

    e = subparsers.add_parser(
        "estimate", help="estimates of L, Theta_i, zeta1, zeta2 and sigma_i from data",
        description="The paper's Monte-Carlo estimators (Appendix 'ML Parameter Estimation') of "
                    "L, Theta_i, zeta1, zeta2 (scaled by --scale) and each DPU's data standard "
                    "deviation sigma_i (SPEC §3; measured exactly, not scaled), one-shot on "
                    "round 0's data or dynamic over the instance's rounds (running maximum). "
                    "Writes JSON; --apply writes the instance with the estimates (atomically; "
                    "it may name the input file to update it in place). Default weights xi are "
                    "recomputed for the new constants unless the instance's weights were set "
                    "by hand or --keep-weights is given.")
    add_inputs(e)
    e.add_argument("--dataset", required=True, choices=DATASETS)
    e.add_argument("--data-dir", default=None)
    e.add_argument("--model", choices=MODELS, default="mlp")
    e.add_argument("--sol", default=None,
                   help="solution JSON: estimate on the DPUs' data after its offloading "
                        "(default: UEs' data only; the DCs get the UEs' largest Theta)")
    e.add_argument("--dynamic", action="store_true",
                   help="Alg. dynamic_est_algo over the instance's rounds (running maximum)")
    e.add_argument("--J", type=COUNT, default=10, help="Monte-Carlo draws (default 10)")
    e.add_argument("--scale", type=POSITIVE, default=1.5, help="safety scale (default 1.5)")
    e.add_argument("--sample-size", type=number(lo=2, integer=True), default=64,
                   help="|D~_i| for Theta and L")
    e.add_argument("--grad-max", type=COUNT, default=None,
                   help="cap on samples per DPU for the zeta gradients (default: all)")
    e.add_argument("--L-method", choices=("pairs", "hessian"), default="pairs")
    e.add_argument("--seed", type=SEED, default=0)
    e.add_argument("--threads", type=COUNT, default=None)
    e.add_argument("--out", required=True, help="JSON of the estimates")
    e.add_argument("--apply", default=None, metavar="OUT_NET",
                   help="also write the instance with L, Theta, zeta1, zeta2, sigma replaced "
                        "(a new file, or the input file itself: replaced atomically)")
    e.add_argument("--keep-weights", action="store_true",
                   help="with --apply: keep the instance's xi1, xi2, xi3 as they are")
    e.set_defaults(func=cmd_estimate)


def parse_targets(text: str) -> list[float]:
    """Comma-separated target accuracies in (0, 1] (option --targets)."""
    try:
        vals = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise OptionError(f"option '--targets' must be comma-separated numbers, got "
                          f"{text!r}") from None
    if not vals or any(not (0 < v <= 1) or not math.isfinite(v) for v in vals):
        raise OptionError(f"option '--targets' must be accuracies in (0, 1], got {text!r}")
    return vals


def check_vartheta(text: str):
    """Option --vartheta: 'tau_eff' or a positive number."""
    from ..learning.strategies import _check_vartheta
    try:
        return _check_vartheta(text)
    except ValueError:
        raise OptionError(f"option '--vartheta' must be 'tau_eff' or a positive number, got "
                          f"{text!r}") from None


def write_train_outputs(res, out) -> tuple[Path, Path]:
    """The per-round CSV at ``out`` and the targets table next to it (``<stem>.targets.csv``)."""
    out = Path(out)
    tpath = _targets_path(out)
    write_csv_atomic(res.history, out)
    write_csv_atomic(res.targets, tpath)
    return out, tpath


def load_flower():
    """``cefl_opt.learning.flower``; an OptionError (exit 2) when the
    Flower engine (flwr, or its simulation extra Ray) is not installed."""
    import importlib
    try:
        return importlib.import_module("cefl_opt.learning.flower")
    except ImportError as e:
        top = (e.name or "").split(".")[0]
        if top not in ("flwr", "ray"):
            raise
        raise OptionError(f"option '--engine' value 'flower' needs the Flower engine, but Python package "
                            f"'{top}' is not installed (pip install 'flwr[simulation]>=1.42,"
                            f"<1.43'; or use --engine local)") from None


def _threads(n):
    if n is not None:
        import torch
        torch.set_num_threads(int(n))


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


def prepare_train(args):
    """Check ``train``'s options and load what they name: ``(instance, solution, kwargs of
    run_training)``. Shared by both engines and by the Flower deployment's ServerApp."""
    from ..solution import Solution

    targets = parse_targets(args.targets or DEFAULT_TARGETS[args.dataset])
    if args.vartheta is not None:
        check_vartheta(args.vartheta)
    tpath = _targets_path(args.out)
    check_distinct([("--out", args.out), ("--out (targets table)", tpath)], [args.net, args.sol])
    check_writable(args.out, "--out")
    check_writable(tpath, "--out (targets table)")
    _threads(args.threads)
    inst = Instance.load(args.net)
    sol = Solution.load(args.sol, inst)
    note = sol.check_instance(inst, allow_other=getattr(args, "allow_other_instance", False))
    if note:
        print(note, file=sys.stderr)
    check_feasible(inst, sol, allow=getattr(args, "allow_infeasible", False))
    if args.aggregator >= inst.S:
        raise OptionError(f"option '--aggregator' value {args.aggregator} is not a DC index "
                          f"0..{inst.S - 1}")
    kw = dict(method=args.method, rounds=args.rounds, model=args.model, lr=args.lr, mu=args.mu,
              seed=args.seed, targets=targets, vartheta=args.vartheta,
              aggregator=args.aggregator, average=args.baseline_params == "average",
              test_max=args.test_max, progress=not args.no_progress)
    return inst, sol, kw


def cmd_train(args) -> int:
    from ..learning.data import load_dataset
    from ..learning.trainer import run_training

    if args.engine == "flower":
        flower = load_flower()
        flower.require_ray()
    inst, sol, kw = prepare_train(args)
    if args.engine == "flower":
        try:
            res = flower.run_simulation(inst, sol, flower.DataSpec(args.dataset, args.data_dir,
                                                                   args.seed),
                                        cpus=args.flower_cpus, threads=args.threads or 1, **kw)
        except flower.EngineError as e:
            print(f"cefl-opt: error: Flower engine: {e}", file=sys.stderr)
            return EXIT_ENGINE
    else:
        res = run_training(inst, sol, load_dataset(args.dataset, args.data_dir, seed=args.seed),
                           **kw)
    out, tpath = write_train_outputs(res, args.out)
    h = res.history
    print(f"{args.method} on {args.dataset} ({args.model}, lr {args.lr}, engine {args.engine}): "
          f"{len(h)} rounds, final "
          f"accuracy {h['accuracy'].iloc[-1]:.4f}, energy {h['cum_energy_kJ'].iloc[-1]:.4g} kJ, "
          f"delay {h['cum_delay_s'].iloc[-1]:.4g} s")
    print(res.targets.to_string(index=False))
    print(f"wrote {out} and {tpath}")
    return 0


def cmd_estimate(args) -> int:
    import numpy as np

    from ..learning.data import load_dataset
    from ..learning.estimation import apply_estimates, dpu_datasets, estimate, estimate_dynamic
    from ..learning.models import make_model
    from ..solution import Solution

    inputs = [args.net] + ([args.sol] if args.sol else [])
    # --apply may name the instance itself (it is replaced atomically), not the solution
    check_distinct([("--out", args.out)], inputs)
    check_distinct([("--apply", args.apply)], inputs[1:] + [args.out])
    for option, path in (("--out", args.out), ("--apply", args.apply)):
        if path is not None:
            check_writable(path, option)
    _threads(args.threads)
    inst = Instance.load(args.net)
    sol = Solution.load(args.sol, inst) if args.sol else None
    X, y, _, _ = load_dataset(args.dataset, args.data_dir, seed=args.seed)
    n_classes = int(np.max(y)) + 1
    model = make_model(args.model, X.shape[1:], n_classes, seed=args.seed)
    kw = dict(J=args.J, scale=args.scale, sample_size=args.sample_size,
              grad_max=args.grad_max, L_method=args.L_method)
    if args.dynamic:
        rounds = [dpu_datasets(inst, y, round=t, seed=args.seed, solution=sol)
                  for t in range(inst.T)]
        est = estimate_dynamic(model, X, y, rounds, seed=args.seed, **kw)
    else:
        est = estimate(model, X, y, dpu_datasets(inst, y, round=0, seed=args.seed, solution=sol),
                       seed=args.seed, **kw)
    est.update({"dataset": args.dataset, "model": args.model, "instance": str(args.net)})
    applied = (apply_estimates(inst, est, renormalise=False if args.keep_weights else None)
               if args.apply else None)                             # fails before any write
    write_json_atomic(args.out, est)
    print(f"L {est['L']:.4g}  zeta1 {est['zeta1']:.4g}  zeta2 {est['zeta2']:.4g}  Theta max "
          f"{max(est['Theta']):.4g} (scaled by {args.scale}; {est['method']}, J = {args.J}); "
          f"sigma {min(est['sigma']):.4g}..{max(est['sigma']):.4g} (not scaled)")
    print(f"wrote {args.out}")
    if applied is not None:
        applied.save(args.apply)
        kept = all(getattr(applied, k) == getattr(inst, k) for k in ("xi1", "xi2", "xi3"))
        print(f"wrote {args.apply} (weights xi {'kept' if kept else 'renormalised'})")
    return 0
