"""The CE-FL round loop (docs/training.md): partition -> strategy.configure_round -> FedProx
local steps -> strategy.aggregate_round -> test accuracy/loss and the round's delay/energy.

Step size. The instance's ``eta`` (0.001, the paper's table) is the step size the *bound* of
Problem P uses; with it a real network barely moves in a few rounds. The trainer's step size is
its own option ``lr`` (CLI ``--lr``), default 0.05, which trains the MLP on (standardised)
MNIST-5k / Fashion-MNIST to well above chance within 2-5 rounds. ``eta`` in eq:normalGrad and
eq:11M is this ``lr``. The FedProx weight ``mu`` defaults to the instance's ``mu``.

Rounds beyond the instance's horizon T cycle the instance's rounds: round r uses instance round
``r mod T`` for data sizes, labels, the orchestration and its cost (with a fresh draw of samples;
see ``partition.py``).

Reproducibility: every random choice is keyed by ``(seed, stream, round, dpu)``; model weights
by the seed. Two runs with the same inputs and thread count give bitwise-equal histories.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..instance import Instance, InstanceError, validated
from ..solution import Solution
from .models import make_model
from .partition import DynamicPartition
from .strategies import FitIns, FitRes, Strategy, a_l1, make_strategy

DEFAULT_LR = 0.05
STREAM_OFFLOAD = 21
STREAM_BATCH = 22

CostFn = Callable[[Instance, int, object], dict]


def default_cost_fn() -> CostFn:
    """``cefl_opt.system.round_costs`` (docs/formulation.md); a clear error if that module is
    missing."""
    try:
        from ..system import round_costs
    except ImportError as e:
        raise InstanceError(f"cost accounting needs cefl_opt.system.round_costs, which cannot be "
                            f"imported ({e}); pass cost_fn=... explicitly") from None
    return round_costs


def batch_rng(seed: int, r: int, dpu: int) -> np.random.Generator:
    """The mini-batch draws of DPU ``dpu`` in round ``r``: keyed by (seed, stream, r, dpu) so the
    draws do not depend on where (which process or SuperNode) the local steps run."""
    return np.random.default_rng([int(seed), STREAM_BATCH, int(r), int(dpu)])


def local_fedprox(model: nn.Module, x_t: torch.Tensor, X: torch.Tensor, y: torch.Tensor,
                  ins: FitIns, *, lr: float, mu: float, rng: np.random.Generator,
                  loss_fn: Callable = nn.functional.cross_entropy) -> FitRes:
    """Run ``ins.gamma`` FedProx steps ``x <- x - lr (grad_minibatch + mu (x - x_t))``
    (eq:locMod) from ``x_t`` on samples ``X[ins.indices]``; mini-batches of ``ins.batch_size``
    drawn without replacement per step. Returns the final model and ``d_i`` (eq:normalGrad)."""
    params = [p for p in model.parameters()]
    x_t = x_t.detach()
    # One flat buffer: vector_to_parameters makes the parameters views of it, so one in-place
    # update of `buf` per step moves every parameter (few large ops instead of many small ones).
    # It is a copy: the steps must not overwrite x_t.
    buf = x_t.clone()
    with torch.no_grad():
        vector_to_parameters(buf, params)
    idx = np.asarray(ins.indices, dtype=np.int64)
    D = idx.size
    losses = []
    for _ in range(ins.gamma):
        sel = idx if ins.batch_size >= D else idx[rng.choice(D, size=ins.batch_size, replace=False)]
        sel_t = torch.from_numpy(sel)
        loss = loss_fn(model(X[sel_t]), y[sel_t])
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            g = torch.cat([t.reshape(-1) for t in grads])
            buf.add_(g + mu * (buf - x_t), alpha=-lr)       # eq:locMod with eq:StochGrad
        losses.append(float(loss.detach()))
    x_i = buf.clone()
    nrm = a_l1(ins.gamma, lr, mu)
    d = (x_t - x_i) / (lr * nrm)
    return FitRes(dpu=ins.dpu, num_samples=int(D), gamma=ins.gamma, eta=lr, a_l1=nrm,
                  params=x_i, d=d, train_loss=float(np.mean(losses)))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, X: torch.Tensor, y: torch.Tensor,
             loss_fn: Callable = nn.functional.cross_entropy, batch: int = 4096):
    """(accuracy, mean loss) of parameters ``x`` on (X, y)."""
    vector_to_parameters(x.detach().clone(), list(model.parameters()))
    correct, total_loss = 0, 0.0
    for k in range(0, X.shape[0], batch):
        out = model(X[k:k + batch])
        yb = y[k:k + batch]
        try:
            total_loss += float(loss_fn(out, yb, reduction="sum"))
        except TypeError:  # a loss without a reduction argument: assume it is a mean
            total_loss += float(loss_fn(out, yb)) * yb.shape[0]
        if out.ndim == 2 and out.shape[1] > 1:
            correct += int((out.argmax(dim=1) == yb).sum())
    n = max(1, X.shape[0])
    return correct / n, total_loss / n


class Trainer:
    """Runs a strategy on an instance's dynamic data.

    ``data`` is ``(X_train, y_train, X_test, y_test)`` (numpy or torch; X as [n, C, H, W]).
    ``cost_fn(instance, t, decision) -> {"delay": s, "energy": J, ...}`` defaults to
    ``cefl_opt.system.round_costs``. ``test_max`` evaluates on the first ``test_max`` test
    samples only (speed); None = the whole test set.
    """

    def __init__(self, instance: Instance, strategy: Strategy, data, *, model: str | nn.Module = "mlp",
                 lr: float = DEFAULT_LR, mu: float | None = None, seed: int = 0,
                 cost_fn: CostFn | None = None, loss_fn: Callable | None = None,
                 test_max: int | None = None, n_classes: int | None = None):
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise InstanceError(f"learning rate must be a positive number, got {lr!r}")
        self.instance = instance
        self.strategy = strategy
        self.lr = float(lr)
        self.mu = float(instance.mu if mu is None else mu)
        if self.mu < 0 or self.lr * self.mu >= 1:
            raise InstanceError(f"need mu >= 0 and lr*mu < 1, got mu={self.mu}, lr={self.lr}")
        self.seed = int(seed)
        Xtr, ytr, Xte, yte = data
        self.X = torch.as_tensor(np.asarray(Xtr, dtype=np.float32))
        self.y = torch.as_tensor(np.asarray(ytr, dtype=np.int64))
        self.Xte = torch.as_tensor(np.asarray(Xte, dtype=np.float32))
        self.yte = torch.as_tensor(np.asarray(yte, dtype=np.int64))
        if test_max is not None:
            self.Xte, self.yte = self.Xte[:test_max], self.yte[:test_max]
        self.n_classes = int(n_classes if n_classes is not None else int(self.y.max()) + 1)
        self.model_kind = model if isinstance(model, str) else None   # None: a given module
        if isinstance(model, nn.Module):
            self.model = model
        else:
            self.model = make_model(model, tuple(self.X.shape[1:]), max(self.n_classes, 2),
                                    seed=self.seed)
        self.loss_fn = loss_fn or nn.functional.cross_entropy
        self.cost_fn = cost_fn
        self.partition = DynamicPartition(instance, self.y.numpy(), seed=self.seed,
                                          n_classes=self.n_classes)
        self.x = parameters_to_vector(self.model.parameters()).detach().clone()
        self.round = 0
        self.rows: list[dict] = []
        # per round: "train_s" (partition, offloading, local steps, aggregation), "eval_s" (test
        # set), "samples_processed" (sum of gamma_i * batch_i), "fit_s" (the local steps alone,
        # summed over the DPUs); kept out of the history so that it stays bitwise reproducible
        self.timings: list[dict] = []
        self._cum_delay = 0.0
        self._cum_energy = 0.0

    def step(self) -> dict:
        """Run one global round and return its history row."""
        r, plan, t0 = self.plan_round()
        t_fit = time.perf_counter()
        results = [local_fedprox(self.model, self.x, self.X, self.y, ins, lr=self.lr, mu=self.mu,
                                 rng=batch_rng(self.seed, r, ins.dpu), loss_fn=self.loss_fn)
                   for ins in plan.fit]
        t_fit = time.perf_counter() - t_fit
        row = self.finish_round(r, plan, results, t0)
        self.timings[-1]["fit_s"] = t_fit
        return row

    def plan_round(self):
        """Round ``r``'s data and orchestration: ``(r, plan, t0)``. The local steps of
        ``plan.fit`` run here (:meth:`step`) or on Flower SuperNodes (``learning.flower``);
        either way :meth:`finish_round` closes the round."""
        r = self.round
        t0 = time.perf_counter()
        ue_idx = self.partition.round(r)
        plan = self.strategy.configure_round(r, ue_idx, np.random.default_rng(
            [self.seed, STREAM_OFFLOAD, r]))
        return r, plan, t0

    def finish_round(self, r: int, plan, results: list, t0: float) -> dict:
        """Aggregate ``results`` (in ``plan.fit`` order), evaluate, cost the round, record
        and return its history row."""
        inst_t = r % self.instance.T
        self.x = self.strategy.aggregate_round(r, self.x, results).detach()
        t1 = time.perf_counter()
        acc, test_loss = evaluate(self.model, self.x, self.Xte, self.yte, self.loss_fn)
        self.timings.append({"round": r, "train_s": t1 - t0, "eval_s": time.perf_counter() - t1,
                             "samples_processed": int(sum(i.gamma * i.batch_size
                                                          for i in plan.fit))})
        costs = {}
        if plan.decision is not None:
            if self.cost_fn is None:
                self.cost_fn = default_cost_fn()
            costs = self.cost_fn(self.instance, inst_t, plan.decision)
        delay = float(costs.get("delay", float("nan")))
        # all energy of the round: system.round_costs' unweighted sum when it reports one
        # ("energy" there is the xi3-weighted sum; equal for the default xi3 = 1)
        energy = float(costs.get("energy_raw", costs.get("energy", float("nan"))))
        self._cum_delay += delay
        self._cum_energy += energy
        D = sum(res.num_samples for res in results)
        train_loss = (sum(res.num_samples * res.train_loss for res in results) / D) if D else float("nan")
        row = {"round": r, "instance_round": inst_t, "method": self.strategy.name,
               "aggregator": int(plan.aggregator), "accuracy": acc, "test_loss": test_loss,
               "train_loss": train_loss, "delay_s": delay, "energy_J": energy,
               "dA_s": float(costs.get("dA", float("nan"))),
               "dR_s": float(costs.get("dR", float("nan"))),
               "cum_delay_s": self._cum_delay, "cum_energy_kJ": self._cum_energy / 1e3,
               "dpus_trained": len(results), "samples": int(D),
               "steps": int(sum(res.gamma for res in results))}
        self.rows.append(row)
        self.round += 1
        return row

    def run(self, rounds: int, progress: bool = False) -> pd.DataFrame:
        if int(rounds) < 1:
            raise InstanceError(f"rounds must be >= 1, got {rounds}")
        it = range(int(rounds))
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=int(rounds), desc=self.strategy.name, unit="round")
        for _ in it:
            row = self.step()
            if bar is not None:
                bar.set_postfix(acc=f"{row['accuracy']:.3f}", agg=row["aggregator"])
                bar.update(1)
        if bar is not None:
            bar.close()
        return self.history()

    def history(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def targets_table(history: pd.DataFrame, targets) -> pd.DataFrame:
    """Cumulative energy (kJ) and delay (s) when each target accuracy is first reached
    (costs of rounds 0..r inclusive, r the first round whose test accuracy >= target);
    NaN / reached=False when never reached."""
    rows = []
    for a in targets:
        hit = history.index[history["accuracy"] >= float(a)]
        if len(hit):
            h = history.loc[hit[0]]
            rows.append({"target": float(a), "reached": True, "round": int(h["round"]),
                         "accuracy": float(h["accuracy"]), "cum_energy_kJ": float(h["cum_energy_kJ"]),
                         "cum_delay_s": float(h["cum_delay_s"])})
        else:
            rows.append({"target": float(a), "reached": False, "round": None,
                         "accuracy": float("nan"), "cum_energy_kJ": float("nan"),
                         "cum_delay_s": float("nan")})
    return pd.DataFrame(rows, columns=["target", "reached", "round", "accuracy", "cum_energy_kJ",
                                       "cum_delay_s"]).astype({"round": "Int64"})


@dataclass
class TrainResult:
    history: pd.DataFrame
    targets: pd.DataFrame
    params: torch.Tensor
    trainer: Trainer


def build_trainer(instance: Instance, solution: Solution, data, *, method: str = "cefl",
                  model: str = "mlp", lr: float = DEFAULT_LR, mu: float | None = None,
                  seed: int = 0, vartheta=None, aggregator: int = 0, average: bool = True,
                  cost_fn: CostFn | None = None, test_max: int | None = None) -> Trainer:
    """The strategy and trainer of one run (shared by the local and the Flower engine)."""
    strat = make_strategy(method, instance, solution, vartheta=vartheta, aggregator=aggregator,
                          average=average)
    return Trainer(instance, strat, data, model=model, lr=lr, mu=mu, seed=seed, cost_fn=cost_fn,
                   test_max=test_max)


def run_training(instance: Instance, solution: Solution, data, *, method: str = "cefl",
                 rounds: int = 10, model: str = "mlp", lr: float = DEFAULT_LR,
                 mu: float | None = None, seed: int = 0, targets=(0.6, 0.7, 0.8),
                 vartheta=None, aggregator: int = 0, average: bool = True,
                 cost_fn: CostFn | None = None, test_max: int | None = None,
                 progress: bool = False) -> TrainResult:
    """One call: build the strategy and trainer, run ``rounds`` rounds, tabulate targets.
    ``average`` only matters for the baselines (see ``strategies.FedNova``)."""
    instance = validated(instance)
    tr = build_trainer(instance, solution, data, method=method, model=model, lr=lr, mu=mu,
                       seed=seed, vartheta=vartheta, aggregator=aggregator, average=average,
                       cost_fn=cost_fn, test_max=test_max)
    hist = tr.run(rounds, progress=progress)
    return TrainResult(hist, targets_table(hist, targets), tr.x.clone(), tr)
