"""FedProx local steps and the aggregation of eq:11M against hand computations."""
import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from cefl_opt.learning.strategies import (FitIns, a_l1, average_aggregate, batch_size,
                                          normalized_aggregate, round_gamma)
from cefl_opt.learning.trainer import local_fedprox

# One thread: with small batches two OpenMP threads mostly synchronise, and when the other
# core is busy (parallel jobs) they were 10-50x slower here (MNIST-5k test: 0.4 s vs 7-23 s).
torch.set_num_threads(1)


def lsq(out, y):
    """f(x; (a, b)) = 0.5 (a.x - b)^2, F_i = mean: gradient A^T (A x - b) / D."""
    return 0.5 * ((out.squeeze(-1) - y) ** 2).mean()


def linear_model(x0):
    m = nn.Linear(x0.size, 1, bias=False).double()
    with torch.no_grad():
        m.weight.copy_(torch.as_tensor(x0).reshape(1, -1))
    return m


def hand_fedprox(A, b, x_t, gamma, eta, mu):
    """Full-batch FedProx on least squares in numpy: x <- x - eta (A^T(Ax-b)/D + mu (x - x_t))."""
    x = x_t.copy()
    for _ in range(gamma):
        g = A.T @ (A @ x - b) / A.shape[0]
        x = x - eta * (g + mu * (x - x_t))
    return x


def make_dpu(seed, D, d=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(D, d)), rng.normal(size=D)


def test_a_l1_matches_explicit_sum():
    for gamma, eta, mu in [(1, 0.1, 0.5), (7, 0.05, 0.01), (4, 0.2, 0.0)]:
        q = 1 - eta * mu
        explicit = sum(q ** (gamma - 1 - l) for l in range(gamma))
        assert a_l1(gamma, eta, mu) == pytest.approx(explicit, rel=1e-12)
    assert round_gamma(0.2) == 1 and round_gamma(4.6) == 5 and round_gamma(10.5) == 11
    assert batch_size(0.001, 50) == 1 and batch_size(0.5, 51) == 26 and batch_size(1.0, 7) == 7


def test_aggregation_equals_hand_computation_two_dpus():
    """Two DPUs, linear model, quadratic loss, full batches: d_i and x_{t+1} by hand."""
    eta, mu = 0.1, 0.3
    x_t = np.array([0.5, -1.0, 2.0])
    dpus = [make_dpu(1, 6) + (2,), make_dpu(2, 10) + (3,)]   # (A, b, gamma)
    results = []
    for i, (A, b, gamma) in enumerate(dpus):
        model = linear_model(x_t)
        ins = FitIns(i, np.arange(A.shape[0]), gamma, A.shape[0])
        res = local_fedprox(model, torch.as_tensor(x_t), torch.as_tensor(A), torch.as_tensor(b),
                            ins, lr=eta, mu=mu, rng=np.random.default_rng(0), loss_fn=lsq)
        x_hand = hand_fedprox(A, b, x_t, gamma, eta, mu)
        np.testing.assert_allclose(res.params.numpy(), x_hand, rtol=1e-12, atol=1e-12)
        a = np.array([(1 - eta * mu) ** (gamma - 1 - l) for l in range(gamma)])
        d_hand = (x_t - x_hand) / (eta * a.sum())                 # eq:normalGrad
        np.testing.assert_allclose(res.d.numpy(), d_hand, rtol=1e-12, atol=1e-12)
        assert res.a_l1 == pytest.approx(a.sum())
        results.append((res, a.sum(), d_hand, A.shape[0]))
    D = sum(r[3] for r in results)
    p = [r[3] / D for r in results]
    tau_eff = sum(pi * r[1] for pi, r in zip(p, results))
    for vartheta, theta_val in [("tau_eff", tau_eff), (0.01, 0.01), (2.5, 2.5)]:
        x_next = normalized_aggregate(torch.as_tensor(x_t), [r[0] for r in results], vartheta)
        hand = x_t - theta_val * eta * sum(pi * r[2] for pi, r in zip(p, results))  # eq:11M
        np.testing.assert_allclose(x_next.numpy(), hand, rtol=1e-12, atol=1e-12)


def test_gradient_is_known_for_a_linear_loss():
    """f(x; xi) = c.x has constant gradient c: x_final = x_t - eta ||a||_1 c exactly, and
    d_i = c for any gamma (the normalisation removes the dependence on gamma)."""
    c = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    x_t = torch.tensor([0.3, 0.1, -0.2], dtype=torch.float64)
    X = torch.zeros((4, 3), dtype=torch.float64)
    y = torch.zeros(4, dtype=torch.float64)
    model = linear_model(x_t.numpy())
    for gamma in (1, 5, 9):
        res = local_fedprox(model, x_t, X, y, FitIns(0, np.arange(4), gamma, 2), lr=0.2, mu=0.7,
                            rng=np.random.default_rng(0),
                            loss_fn=lambda out, yy: (model.weight.squeeze(0) * c).sum())
        np.testing.assert_allclose(res.d.numpy(), c.numpy(), rtol=1e-12)
        np.testing.assert_allclose(res.params.numpy(),
                                   (x_t - 0.2 * a_l1(gamma, 0.2, 0.7) * c).numpy(), rtol=1e-12)


def test_proximal_term_acts():
    """With a large mu the FedProx iterate is pulled back to x_t: it must equal the hand
    recursion with mu, and differ clearly from the recursion without the proximal term."""
    eta, mu, gamma = 0.2, 2.0, 8
    A, b = make_dpu(3, 12)
    x_t = np.array([3.0, -3.0, 1.0])
    res = local_fedprox(linear_model(x_t), torch.as_tensor(x_t), torch.as_tensor(A),
                        torch.as_tensor(b), FitIns(0, np.arange(12), gamma, 12), lr=eta, mu=mu,
                        rng=np.random.default_rng(0), loss_fn=lsq)
    with_prox = hand_fedprox(A, b, x_t, gamma, eta, mu)
    without = hand_fedprox(A, b, x_t, gamma, eta, 0.0)
    np.testing.assert_allclose(res.params.numpy(), with_prox, rtol=1e-12, atol=1e-12)
    assert np.linalg.norm(with_prox - without) > 0.1
    # the pull towards x_t: the prox iterate moved less than the plain one
    assert np.linalg.norm(with_prox - x_t) < 0.8 * np.linalg.norm(without - x_t)


def _digits_dpus():
    from sklearn.datasets import load_digits
    d = load_digits()
    X = torch.as_tensor((d.data / 16.0).reshape(-1, 1, 8, 8), dtype=torch.float32)
    y = torch.as_tensor(d.target, dtype=torch.int64)
    return X, y, [np.arange(0, 300), np.arange(300, 800)]


def _local_results(gammas, mu, lr=0.1):
    from cefl_opt.learning.models import make_model
    X, y, parts = _digits_dpus()
    model = make_model("mlp", (1, 8, 8), 10, seed=0)
    x_t = parameters_to_vector(model.parameters()).detach().clone()
    res = [local_fedprox(model, x_t, X, y, FitIns(i, ix, g, 32), lr=lr, mu=mu,
                         rng=np.random.default_rng(i)) for i, (ix, g) in
           enumerate(zip(parts, gammas))]
    return x_t, res


def test_fednova_reduces_to_fedavg_with_equal_gamma_and_mu_zero():
    x_t, res = _local_results([4, 4], mu=0.0)
    nova = normalized_aggregate(x_t, res, "tau_eff")
    avg = average_aggregate(x_t, res)
    torch.testing.assert_close(nova, avg, rtol=1e-5, atol=1e-6)
    # ... and not in general (unequal gamma)
    x_t, res = _local_results([1, 6], mu=0.0)
    assert float((normalized_aggregate(x_t, res, "tau_eff") - average_aggregate(x_t, res)).norm()) > 1e-3


def test_empty_result_list_keeps_model():
    x = torch.arange(5.0)
    assert torch.equal(normalized_aggregate(x, [], "tau_eff"), x)
    assert torch.equal(average_aggregate(x, []), x)
