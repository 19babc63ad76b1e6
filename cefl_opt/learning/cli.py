"""``cefl-opt train`` and ``cefl-opt estimate`` (issue 5). The main CLI calls
:func:`register` with its sub-parser collection; each sub-command sets ``func`` to a handler
``handler(args) -> int``. Bad input raises ``cefl_opt.instance.InstanceError`` (the main CLI
turns it into exit status 2). Standalone: ``python -m cefl_opt.learning.cli train ...``.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

from ..instance import Instance, InstanceError, write_json_atomic
from .data import DATASETS
from .models import MODELS
from .trainer import DEFAULT_LR

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
    p.add_argument("net", help="instance JSON (cefl-instance/1)")
    p.add_argument("sol", help="solution JSON (cefl-solution/1) for the same instance")
    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--data-dir", default=None,
                   help="data directory (Fashion-MNIST override; required for cifar10)")
    p.add_argument("--model", choices=MODELS, default="mlp")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--targets", default=None,
                   help="comma-separated target accuracies (default: 0.6,0.7,0.8; cifar10 "
                        "0.4,0.5,0.6)")
    p.add_argument("--method", choices=("cefl", "fednova", "fedavg"), default="cefl")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=DEFAULT_LR,
                   help=f"local SGD step size (default {DEFAULT_LR})")
    p.add_argument("--mu", type=float, default=None,
                   help="FedProx weight (default: the instance's mu)")
    p.add_argument("--vartheta", default=None,
                   help="aggregation scale of eq:11M; default: the instance's (vartheta_mode "
                        "'tau_eff': FedNova's tau_eff; 'constant': its vartheta), so the "
                        "trainer and P's bound use the same; 'tau_eff' or a number overrides")
    p.add_argument("--aggregator", type=int, default=0,
                   help="fixed aggregator DC of the FedNova/FedAvg baselines (default 0)")
    p.add_argument("--baseline-params", choices=("average", "own"), default="average",
                   help="FedNova/FedAvg: every UE at the round's average f, m, gamma of the "
                        "solution (the paper's, default) or each UE at its own")
    p.add_argument("--test-max", type=int, default=None,
                   help="evaluate on the first N test samples only")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument("--out", required=True, help="per-round CSV (written atomically); the "
                   "targets table goes next to it as <stem>.targets.csv")
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
    e.add_argument("net", help="instance JSON")
    e.add_argument("--dataset", required=True, choices=DATASETS)
    e.add_argument("--data-dir", default=None)
    e.add_argument("--model", choices=MODELS, default="mlp")
    e.add_argument("--sol", default=None,
                   help="solution JSON: estimate on the DPUs' data after its offloading "
                        "(default: UEs' data only; the DCs get the UEs' largest Theta)")
    e.add_argument("--dynamic", action="store_true",
                   help="Alg. dynamic_est_algo over the instance's rounds (running maximum)")
    e.add_argument("--J", type=int, default=10, help="Monte-Carlo draws (default 10)")
    e.add_argument("--scale", type=float, default=1.5, help="safety scale (default 1.5)")
    e.add_argument("--sample-size", type=int, default=64, help="|D~_i| for Theta and L")
    e.add_argument("--grad-max", type=int, default=None,
                   help="cap on samples per DPU for the zeta gradients (default: all)")
    e.add_argument("--L-method", choices=("pairs", "hessian"), default="pairs")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--threads", type=int, default=None)
    e.add_argument("--out", required=True, help="JSON of the estimates")
    e.add_argument("--apply", default=None, metavar="OUT_NET",
                   help="also write the instance with L, Theta, zeta1, zeta2, sigma replaced "
                        "(a new file, or the input file itself: replaced atomically)")
    e.add_argument("--keep-weights", action="store_true",
                   help="with --apply: keep the instance's xi1, xi2, xi3 as they are")
    e.set_defaults(func=cmd_estimate)


def parse_targets(text: str) -> list[float]:
    try:
        vals = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise InstanceError(f"--targets must be comma-separated numbers, got {text!r}") from None
    if not vals or any(not (0 < v <= 1) or not math.isfinite(v) for v in vals):
        raise InstanceError(f"--targets must be accuracies in (0, 1], got {text!r}")
    return vals


def write_csv_atomic(df, path: str | Path) -> None:
    """Write a DataFrame as CSV through a temporary file in the same folder and a rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            df.to_csv(fh, index=False)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _threads(n):
    if n is not None:
        if n < 1:
            raise InstanceError(f"--threads must be >= 1, got {n}")
        import torch
        torch.set_num_threads(int(n))


def cmd_train(args) -> int:
    from ..solution import Solution
    from .data import load_dataset
    from .trainer import run_training

    if args.rounds is None or args.rounds < 1:
        raise InstanceError(f"--rounds must be >= 1, got {args.rounds}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise InstanceError(f"--lr must be a positive number, got {args.lr}")
    if args.test_max is not None and args.test_max < 1:
        raise InstanceError(f"--test-max must be >= 1, got {args.test_max}")
    targets = parse_targets(args.targets or DEFAULT_TARGETS[args.dataset])
    from .strategies import _check_vartheta
    if args.vartheta is not None:
        _check_vartheta(args.vartheta)
    _threads(args.threads)
    inst = Instance.load(args.net)
    sol = Solution.load(args.sol, inst)
    if not 0 <= args.aggregator < inst.S:
        raise InstanceError(f"--aggregator {args.aggregator} is not a DC index 0..{inst.S - 1}")
    data = load_dataset(args.dataset, args.data_dir, seed=args.seed)
    res = run_training(inst, sol, data, method=args.method, rounds=args.rounds, model=args.model,
                       lr=args.lr, mu=args.mu, seed=args.seed, targets=targets,
                       vartheta=args.vartheta, aggregator=args.aggregator,
                       average=args.baseline_params == "average", test_max=args.test_max,
                       progress=not args.no_progress)
    out = Path(args.out)
    write_csv_atomic(res.history, out)
    tpath = out.with_name(out.stem + ".targets.csv")
    write_csv_atomic(res.targets, tpath)
    h = res.history
    print(f"{args.method} on {args.dataset} ({args.model}, lr {args.lr}): {len(h)} rounds, final "
          f"accuracy {h['accuracy'].iloc[-1]:.4f}, energy {h['cum_energy_kJ'].iloc[-1]:.4g} kJ, "
          f"delay {h['cum_delay_s'].iloc[-1]:.4g} s")
    print(res.targets.to_string(index=False))
    print(f"wrote {out} and {tpath}")
    return 0


def cmd_estimate(args) -> int:
    import numpy as np

    from ..solution import Solution
    from .data import load_dataset
    from .estimation import apply_estimates, dpu_datasets, estimate, estimate_dynamic
    from .models import make_model

    if args.J < 1:
        raise InstanceError(f"--J must be >= 1, got {args.J}")
    if not (math.isfinite(args.scale) and args.scale > 0):
        raise InstanceError(f"--scale must be > 0, got {args.scale}")
    if args.sample_size < 2:
        raise InstanceError(f"--sample-size must be >= 2, got {args.sample_size}")
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
    write_json_atomic(args.out, est)
    print(f"L {est['L']:.4g}  zeta1 {est['zeta1']:.4g}  zeta2 {est['zeta2']:.4g}  Theta max "
          f"{max(est['Theta']):.4g} (scaled by {args.scale}; {est['method']}, J = {args.J}); "
          f"sigma {min(est['sigma']):.4g}..{max(est['sigma']):.4g} (not scaled)")
    print(f"wrote {args.out}")
    if args.apply:
        new = apply_estimates(inst, est, renormalise=False if args.keep_weights else None)
        new.save(args.apply)
        kept = all(getattr(new, k) == getattr(inst, k) for k in ("xi1", "xi2", "xi3_total"))
        print(f"wrote {args.apply} (weights xi {'kept' if kept else 'renormalised'})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cefl-opt")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InstanceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
