"""Federated strategies, shaped like Flower's ``Strategy``: ``configure_round`` decides who
trains on which data with which ``gamma`` and mini-batch size (and which orchestration the round
costs), ``aggregate_round`` turns the DPUs' results into the next global model. A new method is
one small subclass.

CE-FL (paper §II-D, docs/training.md): the round's ``rho_nb``/``rho_bs`` move samples UE -> BS ->
DC; every DPU i with ``D_i > 0`` runs ``gamma_i`` FedProx steps and reports its normalised
accumulated gradient ``d_i = (x_t - x_i) / (eta ||a_i||_1)`` (``eq:normalGrad``) with
``a_{i,l} = (1 - eta mu)^(gamma_i - 1 - l)``; the aggregator applies
``x_{t+1} = x_t - vartheta eta sum_i (D_i / D) d_i`` (``eq:11M``).
docs/training.md: one vartheta for P's bound and the trainer: by default (``vartheta=None``) the
instance's ``vartheta_mode`` decides, FedNova's ``tau_eff = sum_i p_i ||a_i||_1`` or the
instance's number; ``vartheta='tau_eff'`` or a number overrides.

Baselines (paper §VI-B): FedNova and FedAvg without offloading (UEs only). Each UE uses, per
round, the averages of the CE-FL solution's ``gamma`` and ``m`` over the DPUs that train in the
CE-FL round (those with data after offloading), and the average UE frequency ``f``; the
aggregator is a fixed DC (default 0). FedNova aggregates with the normalised rule above, FedAvg
by plain data-weighted averaging of the local models after the same local steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..instance import Instance, InstanceError
from ..solution import RoundDecision, Solution
from .offload import offload, offload_counts


@dataclass
class FitIns:
    """What one DPU is asked to do this round."""
    dpu: int                 # 0..N-1: UE n; N..N+S-1: DC s = dpu - N
    indices: np.ndarray      # training-set indices it holds this round
    gamma: int               # local FedProx steps (>= 1)
    batch_size: int          # max(1, round(m * D_i))


@dataclass
class FitRes:
    """What one DPU reports back."""
    dpu: int
    num_samples: int         # D_i
    gamma: int
    eta: float               # the local step size used
    a_l1: float              # ||a_i||_1
    params: torch.Tensor     # final local model x_i^(t, gamma_i), flat
    d: torch.Tensor          # normalised accumulated gradient d_i (eq:normalGrad), flat
    train_loss: float        # mean mini-batch loss over the local steps


@dataclass
class RoundPlan:
    fit: list[FitIns]                   # only DPUs with D_i > 0 (others do not train, weight 0)
    decision: RoundDecision | None      # orchestration actually used (for delay/energy)
    aggregator: int
    info: dict = field(default_factory=dict)


def round_half_up(v: float) -> int:
    return int(np.floor(float(v) + 0.5))


def round_gamma(g: float) -> int:
    """Local steps actually run: the relaxed gamma rounded (halves up), at least 1."""
    return max(1, round_half_up(g))


def batch_size(m: float, D: int) -> int:
    """Mini-batch size ``max(1, round(m * D))`` (halves up), at most D."""
    return int(min(D, max(1, round_half_up(float(m) * D))))


def a_l1(gamma: int, eta: float, mu: float) -> float:
    """``||a||_1 = sum_{l<gamma} (1 - eta mu)^l``."""
    q = 1.0 - eta * mu
    if gamma < 1:
        raise InstanceError(f"gamma must be >= 1, got {gamma}")
    return float(gamma) if q == 1.0 else float((1.0 - q ** gamma) / (1.0 - q))


def normalized_aggregate(x_t: torch.Tensor, results: list[FitRes], vartheta) -> torch.Tensor:
    """``x_t - vartheta * eta * sum_i p_i d_i`` (eq:11M); ``vartheta='tau_eff'`` uses
    ``sum_i p_i ||a_i||_1``. ``p_i = D_i / D`` over the DPUs that trained."""
    if not results:
        return x_t.clone()
    D = float(sum(r.num_samples for r in results))
    p = [r.num_samples / D for r in results]
    eta = results[0].eta
    if vartheta in (None, "tau_eff", "fednova"):
        theta = sum(pi * r.a_l1 for pi, r in zip(p, results))
    else:
        theta = float(vartheta)
    g = torch.zeros_like(x_t)
    for pi, r in zip(p, results):
        g.add_(r.d, alpha=pi)
    return x_t - (theta * eta) * g


def average_aggregate(x_t: torch.Tensor, results: list[FitRes]) -> torch.Tensor:
    """FedAvg: ``sum_i p_i x_i``."""
    if not results:
        return x_t.clone()
    D = float(sum(r.num_samples for r in results))
    out = torch.zeros_like(x_t)
    for r in results:
        out.add_(r.params, alpha=r.num_samples / D)
    return out


class Strategy:
    """Base class. Subclasses implement ``configure_round`` and ``aggregate_round``.

    Round ``t`` may exceed the instance's horizon; strategies use instance round ``t mod T``.
    """

    name = "base"

    def __init__(self, instance: Instance, solution: Solution | None = None):
        self.instance = instance
        self.solution = solution
        if solution is not None and len(solution.rounds) != instance.T:
            raise InstanceError(f"solution has {len(solution.rounds)} rounds, the instance has "
                                f"{instance.T}")

    def decision(self, t: int) -> RoundDecision:
        if self.solution is None:
            raise InstanceError(f"strategy {self.name!r} needs a solution (orchestration)")
        return self.solution.rounds[t % self.instance.T]

    def configure_round(self, t: int, ue_indices: list[np.ndarray],
                        rng: np.random.Generator) -> RoundPlan:
        raise NotImplementedError

    def aggregate_round(self, t: int, x_t: torch.Tensor, results: list[FitRes]) -> torch.Tensor:
        raise NotImplementedError


def instance_vartheta(instance: Instance):
    """The vartheta P's bound uses (docs/training.md: one vartheta for bound and trainer): 'tau_eff'
    or the instance's number, per its vartheta_mode."""
    return "tau_eff" if instance.vartheta_mode == "tau_eff" else float(instance.vartheta)


def check_vartheta(v):
    """The weight rule vartheta as the strategies use it: "tau_eff" (also spelt "fednova") or a
    finite number > 0; `InstanceError` naming the value otherwise."""
    if v in ("tau_eff", "fednova"):
        return "tau_eff"
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise InstanceError(f"vartheta must be 'tau_eff' or a positive number, got {v!r}") from None
    if not np.isfinite(v) or v <= 0:
        raise InstanceError(f"vartheta must be 'tau_eff' or a positive number, got {v!r}")
    return v


class CEFL(Strategy):
    """The paper's method: offloading per the solution, UEs and DCs train, eq:11M."""

    name = "cefl"

    def __init__(self, instance: Instance, solution: Solution, vartheta=None):
        super().__init__(instance, solution)
        if solution is None:
            raise InstanceError("CE-FL training needs a solution (orchestration)")
        self.vartheta = check_vartheta(instance_vartheta(instance) if vartheta is None
                                        else vartheta)

    def configure_round(self, t, ue_indices, rng):
        dec = self.decision(t)
        dpu_idx = offload(ue_indices, dec.rho_nb, dec.rho_bs, rng)
        gammas = np.concatenate([dec.gamma_ue, dec.gamma_dc])
        ms = np.concatenate([dec.m_ue, dec.m_dc])
        fit = [FitIns(i, ix, round_gamma(gammas[i]), batch_size(ms[i], ix.size))
               for i, ix in enumerate(dpu_idx) if ix.size > 0]
        return RoundPlan(fit, dec, int(dec.aggregator),
                         {"D": [int(ix.size) for ix in dpu_idx]})

    def aggregate_round(self, t, x_t, results):
        return normalized_aggregate(x_t, results, self.vartheta)


class FedNova(Strategy):
    """No offloading, UEs only, averaged f/m/gamma of the CE-FL solution, fixed aggregator."""

    name = "fednova"

    def __init__(self, instance: Instance, solution: Solution, aggregator: int = 0,
                 vartheta=None, average: bool = True):
        super().__init__(instance, solution)
        # average=True: the paper's baseline (every UE at the round's averaged f, m, gamma).
        # With equal gamma at every UE, FedNova's update equals FedAvg's for any mu (all
        # ||a_i||_1 = tau_eff). average=False keeps each UE's own f, m, gamma of the CE-FL
        # solution, which makes the two baselines differ.
        self.average = bool(average)
        if solution is None:
            raise InstanceError(f"{self.name} needs the CE-FL solution (for its averaged f, m, "
                                f"gamma and for the cost of the rounds)")
        if not 0 <= int(aggregator) < instance.S:
            raise InstanceError(f"aggregator {aggregator} is not a DC index 0..{instance.S - 1}")
        self.aggregator = int(aggregator)
        # FedNova is defined by tau_eff; the instance's vartheta_mode concerns CE-FL (its bound)
        self.vartheta = check_vartheta("tau_eff" if vartheta is None else vartheta)

    def averaged_decision(self, t: int, sizes) -> RoundDecision:
        """The baseline's orchestration of round t: rho_nb = 0, every UE at the CE-FL round's
        average f, m, gamma (averaged over the DPUs that train in the CE-FL round)."""
        dec = self.decision(t)
        _, _, D = offload_counts(sizes, dec.rho_nb, dec.rho_bs)
        gammas = np.concatenate([dec.gamma_ue, dec.gamma_dc])
        ms = np.concatenate([dec.m_ue, dec.m_dc])
        active = D > 0 if np.any(D > 0) else np.ones(D.size, dtype=bool)
        out = dec.copy()
        N = self.instance.N
        out.rho_nb = np.zeros_like(dec.rho_nb)
        if self.average:
            out.f = np.full(N, float(np.mean(dec.f)))
            out.gamma_ue = np.full(N, float(np.mean(gammas[active])))
            out.m_ue = np.full(N, float(np.mean(ms[active])))
        out.aggregator = self.aggregator
        return out

    def configure_round(self, t, ue_indices, rng):
        sizes = np.array([ix.size for ix in ue_indices], dtype=np.int64)
        dec = self.averaged_decision(t, sizes)
        fit = [FitIns(n, np.asarray(ix, dtype=np.int64), round_gamma(dec.gamma_ue[n]),
                      batch_size(dec.m_ue[n], ix.size))
               for n, ix in enumerate(ue_indices) if ix.size > 0]
        return RoundPlan(fit, dec, self.aggregator,
                         {"D": [int(v) for v in sizes] + [0] * self.instance.S})

    def aggregate_round(self, t, x_t, results):
        return normalized_aggregate(x_t, results, self.vartheta)


class FedAvg(FedNova):
    """FedNova's configuration, plain weighted model averaging."""

    name = "fedavg"

    def aggregate_round(self, t, x_t, results):
        return average_aggregate(x_t, results)


STRATEGIES = {"cefl": CEFL, "fednova": FedNova, "fedavg": FedAvg}


def make_strategy(method: str, instance: Instance, solution: Solution, *, vartheta=None,
                  aggregator: int = 0, average: bool = True) -> Strategy:
    if method == "cefl":
        return CEFL(instance, solution, vartheta=vartheta)
    if method in ("fednova", "fedavg"):
        return STRATEGIES[method](instance, solution, aggregator=aggregator, vartheta=vartheta,
                                  average=average)
    raise InstanceError(f"unknown method {method!r} (known: {', '.join(STRATEGIES)})")
