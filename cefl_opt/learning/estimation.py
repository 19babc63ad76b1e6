"""Monte-Carlo estimation of the ML constants of the bound (paper Appendix "ML Parameter
Estimation": Algs. local_theta_est, local_smoothness_est, local_zeta_est, dynamic_est_algo).

With J random model parameter vectors (default J = 10):

- ``Theta_i`` (Assumption 2, eq:def:datavar): per draw, the mean over ordered pairs of distinct
  samples xi != xi' of a small sampled set ``D~_i`` of ``||grad f(x; xi) - grad f(x; xi')|| /
  ||xi - xi'||`` (xi = the sample's feature vector); ``Theta_i`` = max over the J draws.
- ``L`` (Assumption 1, eqn:L_est): per DPU and draw, ``||grad F_i(x1) - grad F_i(x2)|| /
  ||x1 - x2||`` for a random pair (x1, x2) on ``D~_i``; max over draws, then over DPUs.
  ``L_method="hessian"`` (not in the paper) instead takes the largest Hessian eigenvalue
  magnitude at each random point by power iteration on Hessian-vector products; on a least
  squares loss it returns the exact L, where random pairs only give a lower bound.
- ``zeta1, zeta2`` (Assumption 3, eq:zetas): per draw, ``y_j = sum_i p_i ||grad F_i(x_j)||^2``
  and ``u_j = ||sum_i p_i grad F_i(x_j)||^2`` on each DPU's data (eq:localLossAfter_R17), then
  least squares ``y ~ zeta1 u + zeta2`` (eqn:LinRegr_zeta). The instance requires zeta1 >= 1,
  zeta2 >= 0; the fit is clipped to that domain (by Jensen, ``y_j >= u_j`` always).

- ``sigma_i`` (docs/formulation.md; the paper's "sampled variance of data at DPU i"):
  ``sigma_i^2 = sum_j ||xi_j - mean xi||^2 / (D_i - 1)`` over all D_i samples the DPU holds, on
  the features the trainer uses (flattened, standardised). Not a Monte-Carlo estimate, so it is
  not multiplied by ``scale``; DPUs without data (or with one sample) get the largest sigma of
  the others.

Every Monte-Carlo estimate is finally multiplied by ``scale`` (1.5, the paper's "Simulation Value"); the
unscaled values are returned under ``raw``. DPUs that hold no data get the largest Theta of the
others (their data would come from those DPUs) and weight 0 in L and zeta.

Dynamic estimation (Alg. dynamic_est_algo): run the above on each round's datasets and keep the
element-wise running maximum over rounds.

A "random model parameter vector" is a fresh default initialisation of the model (its
``reset_parameters``), seeded by ``(seed, j)``: random but at the scale networks are trained at.
"""
from __future__ import annotations

import copy
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..instance import Instance, InstanceError, validated

J_DEFAULT = 10
SCALE_DEFAULT = 1.5


# ---- parameter vectors ---------------------------------------------------------------------
def random_params(model: nn.Module, seed: int) -> torch.Tensor:
    """A fresh default initialisation of ``model``'s parameters (flat), seeded; ``model`` itself
    is untouched."""
    m = copy.deepcopy(model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        for mod in m.modules():
            if hasattr(mod, "reset_parameters"):
                mod.reset_parameters()
    return parameters_to_vector(m.parameters()).detach().clone()


def _param_dict(model: nn.Module, vec: torch.Tensor) -> dict[str, torch.Tensor]:
    out, k = {}, 0
    for name, p in model.named_parameters():
        n = p.numel()
        out[name] = vec[k:k + n].view_as(p)
        k += n
    return out


def full_grad(model: nn.Module, vec: torch.Tensor, X: torch.Tensor, y: torch.Tensor,
              loss_fn: Callable, chunk: int = 2048) -> torch.Tensor:
    """Gradient of ``F(x) = mean_xi f(x; xi)`` over (X, y) at parameters ``vec`` (flat)."""
    params = list(model.parameters())
    with torch.no_grad():
        vector_to_parameters(vec.detach().clone(), params)
    n = X.shape[0]
    g = torch.zeros_like(vec)
    for k in range(0, n, chunk):
        xb, yb = X[k:k + chunk], y[k:k + chunk]
        loss = loss_fn(model(xb), yb) * (xb.shape[0] / n)
        gs = torch.autograd.grad(loss, params)
        g += torch.cat([t.reshape(-1) for t in gs])
    return g


def per_sample_grads(model: nn.Module, vec: torch.Tensor, X: torch.Tensor, y: torch.Tensor,
                     loss_fn: Callable) -> torch.Tensor:
    """``[n, P]``: gradient of ``f(x; xi)`` for each sample (torch.func.vmap; loop fallback)."""
    try:
        from torch.func import functional_call, grad, vmap

        pd = {k: v.detach() for k, v in _param_dict(model, vec).items()}

        def one(p, xb, yb):
            return loss_fn(functional_call(model, p, (xb.unsqueeze(0),)), yb.unsqueeze(0))

        gd = vmap(grad(one), in_dims=(None, 0, 0))(pd, X, y)
        return torch.cat([gd[k].reshape(X.shape[0], -1) for k, _ in model.named_parameters()], 1)
    except Exception:  # noqa: BLE001 - models/losses vmap cannot trace: per-sample loop
        return torch.stack([full_grad(model, vec, X[k:k + 1], y[k:k + 1], loss_fn)
                            for k in range(X.shape[0])])


def hessian_top_eig(model: nn.Module, vec: torch.Tensor, X: torch.Tensor, y: torch.Tensor,
                    loss_fn: Callable, iters: int = 100, seed: int = 0, tol: float = 1e-7) -> float:
    """Largest |eigenvalue| of the Hessian of F at ``vec``, by power iteration on HVPs."""
    params = list(model.parameters())
    with torch.no_grad():
        vector_to_parameters(vec.detach().clone(), params)
    loss = loss_fn(model(X), y)
    gs = torch.autograd.grad(loss, params, create_graph=True)
    g = torch.cat([t.reshape(-1) for t in gs])
    gen = torch.Generator().manual_seed(int(seed))
    v = torch.randn(vec.shape, generator=gen, dtype=vec.dtype)
    v /= v.norm()
    lam = 0.0
    for _ in range(iters):
        hv = torch.autograd.grad(g, params, grad_outputs=v, retain_graph=True)
        hv = torch.cat([t.reshape(-1) for t in hv]).detach()
        nrm = float(hv.norm())
        if nrm == 0.0:
            return 0.0
        v_new = hv / nrm
        if abs(nrm - lam) <= tol * max(1.0, nrm):
            lam = nrm
            break
        lam, v = nrm, v_new
    return float(lam)


# ---- the estimators ------------------------------------------------------------------------
def sample_sigma(X: torch.Tensor) -> float:
    """sqrt(sum_j ||xi_j - mean xi||^2 / (n - 1)) of the rows of X (flattened); 0 for n < 2."""
    n = int(X.shape[0])
    if n < 2:
        return 0.0
    Xf = X.reshape(n, -1).double()
    return float(torch.sqrt(((Xf - Xf.mean(dim=0)) ** 2).sum() / (n - 1)))


def sigma_per_dpu(X, dpu_indices: list) -> np.ndarray:
    """sigma_i of every DPU (``sample_sigma`` of its samples); DPUs holding fewer than two
    samples get the largest value of the others."""
    data = _Data(X, np.zeros(len(X)))
    sig = np.zeros(len(dpu_indices))
    ok = np.array([len(ix) >= 2 for ix in dpu_indices])
    for i, ix in enumerate(dpu_indices):
        if ok[i]:
            sig[i] = sample_sigma(data.X[torch.from_numpy(np.asarray(ix, dtype=np.int64))])
    if ok.any():
        sig[~ok] = sig[ok].max()
    return sig



def _pairwise(A: torch.Tensor) -> torch.Tensor:
    """Euclidean distances between the rows of A (double), through the Gram matrix: one BLAS
    product instead of cdist, which was the estimator's hot spot on a 160k-parameter MLP."""
    A = A.reshape(A.shape[0], -1).double()
    sq = (A * A).sum(dim=1)
    d2 = (sq[:, None] + sq[None, :] - 2.0 * (A @ A.T)).clamp_min_(0.0)
    d2.fill_diagonal_(0.0)
    return d2.sqrt()


def theta_draw(G: torch.Tensor, Xi: torch.Tensor) -> float:
    """Mean over ordered pairs with xi != xi' of ||g - g'|| / ||xi - xi'|| (one draw of
    Alg. local_theta_est)."""
    dg = _pairwise(G)
    dx = torch.cdist(Xi.double(), Xi.double())  # exact zeros for equal samples (masked below)
    mask = dx > 0
    if not bool(mask.any()):
        return 0.0
    return float((dg[mask] / dx[mask]).mean())


class _Data:
    def __init__(self, X, y):
        self.X = torch.as_tensor(np.asarray(X, dtype=np.float32)) if not torch.is_tensor(X) else X
        self.y = torch.as_tensor(np.asarray(y)) if not torch.is_tensor(y) else y

    def take(self, idx):
        t = torch.from_numpy(np.asarray(idx, dtype=np.int64))
        return self.X[t], self.y[t]


def estimate(model: nn.Module, X, y, dpu_indices: list, *, J: int = J_DEFAULT,
             scale: float = SCALE_DEFAULT, sample_size: int = 64, grad_max: int | None = None,
             seed: int = 0, loss_fn: Callable | None = None, L_method: str = "pairs") -> dict:
    """One-shot estimates of Theta_i (one per entry of ``dpu_indices``), L, zeta1, zeta2.

    ``dpu_indices[i]``: the training-set indices DPU i holds (its D_i^(0)). ``sample_size`` is
    |D~_i| for Theta and L; ``grad_max`` caps the samples per DPU used for the zeta gradients
    (None: all, as in the paper).
    """
    if int(J) < 1:
        raise InstanceError(f"J must be >= 1, got {J}")
    if not scale > 0:
        raise InstanceError(f"scale must be > 0, got {scale}")
    if L_method not in ("pairs", "hessian"):
        raise InstanceError(f"L_method must be 'pairs' or 'hessian', got {L_method!r}")
    loss_fn = loss_fn or nn.functional.cross_entropy
    data = _Data(X, y)
    sizes = np.array([len(ix) for ix in dpu_indices], dtype=np.int64)
    active = [i for i in range(len(dpu_indices)) if sizes[i] > 0]
    if not active:
        raise InstanceError("parameter estimation needs at least one DPU holding data")
    rng = np.random.default_rng([seed, 31])
    samples, full = {}, {}
    for i in active:
        ix = np.asarray(dpu_indices[i], dtype=np.int64)
        k = min(int(sample_size), ix.size)
        samples[i] = data.take(rng.choice(ix, size=k, replace=False))
        g = ix if grad_max is None or ix.size <= grad_max else rng.choice(ix, size=grad_max,
                                                                           replace=False)
        full[i] = data.take(g)
    draws = [random_params(model, seed * 1000 + j) for j in range(int(J))]
    draws2 = [random_params(model, seed * 1000 + 500 + j) for j in range(int(J))]
    work = copy.deepcopy(model)

    # Theta_i (Alg. local_theta_est)
    theta_raw = np.zeros(len(dpu_indices))
    for i in active:
        Xs, ys = samples[i]
        Xi = Xs.reshape(Xs.shape[0], -1)
        vals = [theta_draw(per_sample_grads(work, x, Xs, ys, loss_fn), Xi) for x in draws]
        theta_raw[i] = max(vals)
    if len(active) < len(dpu_indices):
        theta_raw[sizes == 0] = theta_raw[active].max()

    # L (Alg. local_smoothness_est)
    L_i = np.zeros(len(dpu_indices))
    for i in active:
        Xs, ys = samples[i]
        vals = []
        for j in range(int(J)):
            if L_method == "pairs":
                x1, x2 = draws[j], draws2[j]
                dg = full_grad(work, x1, Xs, ys, loss_fn) - full_grad(work, x2, Xs, ys, loss_fn)
                vals.append(float(dg.norm() / (x1 - x2).norm()))
            else:
                vals.append(hessian_top_eig(work, draws[j], Xs, ys, loss_fn, seed=seed + j))
        L_i[i] = max(vals)
    L_raw = float(L_i.max())

    # zeta1, zeta2 (Alg. local_zeta_est)
    p = sizes[active] / sizes[active].sum()
    yv, uv = [], []
    for x in draws:
        gs = [full_grad(work, x, *full[i], loss_fn).double() for i in active]
        yv.append(float(sum(pi * float(g @ g) for pi, g in zip(p, gs))))
        gbar = sum(pi * g for pi, g in zip(p, gs))
        uv.append(float(gbar @ gbar))
    z1_fit, z2_fit = _fit_zeta(np.array(uv), np.array(yv))
    z1, z2 = max(1.0, z1_fit), max(0.0, z2_fit)
    sigma = sigma_per_dpu(data.X, dpu_indices)
    return {
        "method": "one-shot", "J": int(J), "scale": float(scale), "L_method": L_method,
        "Theta": (scale * theta_raw).tolist(), "L": scale * max(L_raw, 1e-12),
        "zeta1": scale * z1, "zeta2": scale * z2, "sigma": sigma.tolist(),
        "raw": {"Theta": theta_raw.tolist(), "L": L_raw, "L_per_dpu": L_i.tolist(),
                "sigma": sigma.tolist(),
                "zeta1": z1, "zeta2": z2, "zeta1_fit": z1_fit, "zeta2_fit": z2_fit,
                "zeta_y": yv, "zeta_u": uv},
        "sizes": sizes.tolist(),
    }


def _fit_zeta(u: np.ndarray, yv: np.ndarray) -> tuple[float, float]:
    """Least squares ``y ~ zeta1 u + zeta2`` (eqn:LinRegr_zeta)."""
    if u.size == 1 or np.ptp(u) <= 1e-12 * max(1.0, float(np.abs(u).max())):
        # one draw or all u equal: the slope is not identifiable; zeta1 = 1 (Jensen) and
        # zeta2 the largest excess
        return 1.0, float(np.max(yv - u))
    A = np.stack([u, np.ones_like(u)], axis=1)
    sol, *_ = np.linalg.lstsq(A, yv, rcond=None)
    return float(sol[0]), float(sol[1])


def estimate_dynamic(model: nn.Module, X, y, rounds_dpu_indices: list, **kw) -> dict:
    """Alg. dynamic_est_algo: estimate on each round's datasets, keep the running maximum.

    Returns the final (running-max) estimates plus ``per_round``: the running-max estimates
    after each round, and ``per_round_raw``: each round's own one-shot estimates (scaled)."""
    seed = int(kw.pop("seed", 0))
    run = None
    per_round, per_raw = [], []
    for t, dpu_indices in enumerate(rounds_dpu_indices):
        e = estimate(model, X, y, dpu_indices, seed=seed + 7919 * t, **kw)
        per_raw.append({k: e[k] for k in ("Theta", "L", "zeta1", "zeta2", "sigma")})
        if run is None:
            run = {k: copy.deepcopy(e[k]) for k in ("Theta", "L", "zeta1", "zeta2", "sigma")}
        else:
            run["Theta"] = np.maximum(run["Theta"], e["Theta"]).tolist()
            run["sigma"] = np.maximum(run["sigma"], e["sigma"]).tolist()
            for k in ("L", "zeta1", "zeta2"):
                run[k] = max(run[k], e[k])
        per_round.append({"round": t, **copy.deepcopy(run)})
    if run is None:
        raise InstanceError("dynamic estimation needs at least one round")
    return {"method": "dynamic", "J": kw.get("J", J_DEFAULT), "scale": kw.get("scale", SCALE_DEFAULT),
            **run, "per_round": per_round, "per_round_raw": per_raw}


# ---- instance glue -------------------------------------------------------------------------
def dpu_datasets(instance: Instance, y_train, *, round: int = 0, seed: int = 0,
                 solution=None) -> list[np.ndarray]:
    """The index arrays of the I = N + S DPUs at ``round``: the UEs' dynamic partition, moved by
    the solution's offloading when ``solution`` is given (DCs hold nothing otherwise)."""
    from .offload import offload
    from .partition import DynamicPartition

    instance = validated(instance)
    ue = DynamicPartition(instance, np.asarray(y_train), seed=seed).round(round)
    if solution is None:
        return ue + [np.zeros(0, dtype=np.int64) for _ in range(instance.S)]
    dec = solution.rounds[round % instance.T]
    return offload(ue, dec.rho_nb, dec.rho_bs, np.random.default_rng([seed, 21, round]))


def _per_dpu(instance: Instance, est: dict, key: str) -> np.ndarray:
    """An estimate's per-DPU array with N + S entries, or N (UEs only: the DCs get the UEs'
    maximum)."""
    v = np.asarray(est[key], dtype=float)
    if v.size == instance.N:
        v = np.concatenate([v, np.full(instance.S, v.max())])
    if v.size != instance.I:
        raise InstanceError(f"estimate has {v.size} {key} values, the instance has "
                            f"{instance.I} DPUs ({instance.N} UEs + {instance.S} DCs)")
    return v


def apply_estimates(instance: Instance, est: dict, *, renormalise: bool | None = None) -> Instance:
    """``instance.copy(L=..., Theta=..., zeta1=..., zeta2=..., sigma=...)`` from an ``estimate``
    dict (sigma only when the estimate has it).

    renormalise: recompute the default weights xi1, xi2, xi3 (docs/formulation.md: each part 1
    at the reference orchestration) for the new constants. None (default): only when the instance's
    weights are its defaults (so user-set weights are kept); the ML bound's scale moves by
    orders of magnitude with sigma, so stale default weights would let it swamp the rest."""
    from ..system import normalising_weights
    changes = {"L": float(est["L"]), "Theta": _per_dpu(instance, est, "Theta"),
               "zeta1": float(max(1.0, est["zeta1"])), "zeta2": float(max(0.0, est["zeta2"]))}
    if "sigma" in est:
        changes["sigma"] = _per_dpu(instance, est, "sigma")
    if renormalise is None:
        w0 = normalising_weights(instance)
        renormalise = all(np.isclose(getattr(instance, k), v, rtol=1e-9, atol=0.0)
                          for k, v in w0.items())
    out = instance.copy(**changes)
    if renormalise:
        out = out.copy(**normalising_weights(out))
    return out


def estimate_key(instance: Instance, **options) -> str:
    """A cache key: the instance's name and seed and a hash of its data sizes, labels and the
    estimation options."""
    import hashlib
    import json
    h = hashlib.sha256(json.dumps({"Dbar": instance.Dbar.tolist(), "labels": instance.ue_labels,
                                   "seed": instance.seed, **options}, sort_keys=True,
                                  default=str).encode()).hexdigest()[:12]
    return f"{instance.name}-{h}"


def measured_constants(instance: Instance, data, *, dataset: str, model: str = "mlp",
                       seed: int = 0, cache_dir=None, dynamic: bool = True, J: int = J_DEFAULT,
                       scale: float = SCALE_DEFAULT, sample_size: int = 64,
                       grad_max: int | None = 500, log=print) -> dict:
    """Estimates of L, Theta, zeta1, zeta2, sigma on the instance's own partition of ``data``
    (UEs' data; dynamic over its rounds by default), computed once and cached as JSON in
    ``cache_dir`` under ``estimate_key`` (None: no cache). ``grad_max`` caps the samples per
    DPU of the zeta gradients (speed; None = all, as the paper)."""
    from pathlib import Path

    from ..instance import read_json, write_json_atomic
    from .models import make_model

    opts = dict(dataset=dataset, model=model, seed=seed, dynamic=dynamic, J=J, scale=scale,
                sample_size=sample_size, grad_max=grad_max)
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"estimates-{estimate_key(instance, **opts)}.json"
        if path.is_file():
            log(f"measured constants from the cache {path}")
            return read_json(path, what="estimate cache")
    X, y = data[0], data[1]
    net = make_model(model, tuple(np.asarray(X).shape[1:]), int(np.max(y)) + 1, seed=seed)
    kw = dict(J=J, scale=scale, sample_size=sample_size, grad_max=grad_max)
    if dynamic:
        rounds = [dpu_datasets(instance, y, round=t, seed=seed) for t in range(instance.T)]
        est = estimate_dynamic(net, X, y, rounds, seed=seed, **kw)
    else:
        est = estimate(net, X, y, dpu_datasets(instance, y, round=0, seed=seed), seed=seed, **kw)
    est.update({"options": opts, "instance": instance.name})
    if path is not None:
        write_json_atomic(path, est)
        log(f"measured constants cached in {path}")
    return est
