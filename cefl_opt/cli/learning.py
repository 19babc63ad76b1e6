"""``cefl-opt train`` and ``cefl-opt estimate``. Every option is checked, and the
outputs are checked to be writable and distinct from the inputs, before any data is loaded; bad
input raises :class:`cefl_opt.io.InputError` (exit status 2); ``train --engine flower`` returns
4 when a SuperNode fails mid-run (nothing is written).
"""
from __future__ import annotations

import sys

from ..instance import Instance
from ..io import check_distinct, check_writable, json_text, write_all_atomic
from ..learning.data import DATASETS
from ..learning.models import MODELS
from ..learning.options import (TrainOptions, add_train_flags, prepare_train,
                                write_train_outputs)
from ..learning.options import parse_targets as _parse_targets
from . import (COUNT, POSITIVE, SEED, THREADS, THREADS_MAX, OptionError, add_inputs, deprecated,
               number, show_progress)

EXIT_ENGINE = 4   # --engine flower: a SuperNode failed or timed out mid-run; nothing written


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
    add_train_flags(p)     # one per field of learning.options.TrainOptions
    deprecated(p, "--rounds", command="train", use="--train-rounds", dest="train_rounds",
               type=COUNT, metavar="N")
    p.add_argument("--engine", choices=("local", "flower"), default="local",
                   help="local: the in-process trainer (default); flower: the same rounds as a "
                        "Flower app in Flower's simulation engine (Ray), one SuperNode per DPU. "
                        "Exit 4 if a SuperNode fails (nothing written)")
    p.add_argument("--flower-cpus", type=COUNT, default=2, metavar="N",
                   help="--engine flower: CPUs Ray may use, one ClientApp per CPU (default 2)")
    p.set_defaults(func=cmd_train)

    e = subparsers.add_parser(
        "estimate", help="estimates of L, Theta_i, zeta1, zeta2 and sigma_i from data",
        description="The paper's Monte-Carlo estimators (Appendix 'ML Parameter Estimation') of "
                    "L, Theta_i, zeta1, zeta2 (scaled by --scale) and each DPU's data standard "
                    "deviation sigma_i (docs/training.md; measured exactly, not scaled), one-shot "
                    "on "
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
    e.add_argument("--allow-other-instance", action="store_true",
                   help="--sol: use a solution that records another instance's fingerprint")
    e.add_argument("--dynamic", action="store_true",
                   help="Alg. dynamic_est_algo over the instance's rounds (running maximum)")
    e.add_argument("--draws", type=COUNT, default=10, dest="J",
                   help="Monte-Carlo draws J of the estimators (default 10)")
    deprecated(e, "--J", command="estimate", use="--draws", dest="J", type=COUNT, metavar="N")
    e.add_argument("--scale", type=POSITIVE, default=1.5, help="safety scale (default 1.5)")
    e.add_argument("--sample-size", type=number(lo=2, integer=True), default=64,
                   help="|D~_i| for Theta and L")
    e.add_argument("--grad-max", type=COUNT, default=None,
                   help="cap on samples per DPU for the zeta gradients (default: all)")
    e.add_argument("--lipschitz-method", choices=("pairs", "hessian"), default="pairs",
                   dest="L_method", help="estimator of the smoothness constant L: gradient "
                   "differences of sample pairs, or the Hessian's largest eigenvalue")
    deprecated(e, "--L-method", command="estimate", use="--lipschitz-method", dest="L_method",
               choices=("pairs", "hessian"))
    e.add_argument("--seed", type=SEED, default=0)
    e.add_argument("--threads", type=THREADS, default=None,
                   help=f"torch CPU threads (at most {THREADS_MAX})")
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
        return _parse_targets(text)
    except ValueError as e:
        raise OptionError(f"option '--targets' {e}") from None


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


def cmd_train(args) -> int:
    from ..learning.data import load_dataset
    from ..learning.trainer import run_training

    if args.engine == "flower":
        flower = load_flower()
        flower.require_ray()
    opts = TrainOptions.from_namespace(args)
    inst, sol, kw = prepare_train(opts, progress=show_progress(args, True))
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
          f"{len(h)} training rounds, final "
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
    check_distinct([("--apply", args.apply)], inputs[1:])
    check_distinct([("--out", args.out), ("--apply", args.apply)], [])   # one file, two outputs
    for option, path in (("--out", args.out), ("--apply", args.apply)):
        if path is not None:
            check_writable(path, option)
    _threads(args.threads)
    inst = Instance.load(args.net)
    sol = _estimate_solution(inst, args) if args.sol else None
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
    items = [(args.out, json_text(est, args.out))]
    if applied is not None:
        items.append((args.apply, json_text(applied.to_dict(), args.apply)))
    write_all_atomic(items)                                         # both or neither
    print(f"L {est['L']:.4g}  zeta1 {est['zeta1']:.4g}  zeta2 {est['zeta2']:.4g}  Theta max "
          f"{max(est['Theta']):.4g} (scaled by {args.scale}; {est['method']}, {args.J} draws); "
          f"sigma {min(est['sigma']):.4g}..{max(est['sigma']):.4g} (not scaled)")
    print(f"wrote {args.out}")
    if applied is not None:
        kept = all(getattr(applied, k) == getattr(inst, k) for k in ("xi1", "xi2", "xi3"))
        print(f"wrote {args.apply} (weights xi {'kept' if kept else 'renormalised'})")
    return 0


def _estimate_solution(inst, args):
    """`--sol` for `inst`: its sizes and recorded instance fingerprint checked as `train`
    checks them (`--allow-other-instance` relaxes the fingerprint to a note), and every
    round's shares able to move real data (`learning.offload.check_shares`)."""
    from ..learning.offload import check_shares
    from ..orchestration import check_solution_matches
    from ..solution import Solution

    sol = Solution.load(args.sol, inst)
    note = check_solution_matches(inst, sol, args.sol, allow_other=args.allow_other_instance)
    if note:
        print(note, file=sys.stderr)
    for t, r in enumerate(sol.rounds):
        check_shares(r.rho_nb, r.rho_bs, where=f"solution '{args.sol}' round {t}: ")
    return sol
