"""Monte-Carlo estimators of Theta_i, L, zeta1, zeta2 against closed forms."""
import numpy as np
import pytest
import torch
from torch import nn

from cefl_opt.instance import InstanceError
from cefl_opt.learning.estimation import (apply_estimates, dpu_datasets, estimate,
                                          estimate_dynamic, hessian_top_eig)
from cefl_opt.learning.toy import toy_instance, toy_solution

# One thread: with small batches two OpenMP threads mostly synchronise (see test_learning_training).
torch.set_num_threads(1)


class Center(nn.Module):
    """f(x; xi) = c/2 ||x - xi||^2 (least squares towards the sample): grad f = c (x - xi), so
    Theta = c, Hessian = c I (L = c), and with DPU means mu_i:
    sum_i p_i ||grad F_i||^2 = ||sum_i p_i grad F_i||^2 + c^2 sum_i p_i ||mu_i - mu||^2, i.e.
    zeta1 = 1, zeta2 = c^2 sum_i p_i ||mu_i - mu||^2 exactly."""

    def __init__(self, d):
        super().__init__()
        self.x = nn.Parameter(torch.zeros(d))

    def forward(self, X):
        return self.x - X.reshape(X.shape[0], -1)

    def reset_parameters(self):
        nn.init.normal_(self.x, std=3.0)


def center_loss(c):
    return lambda out, y: 0.5 * c * (out ** 2).sum(dim=-1).mean()


def lsq(out, y):
    return 0.5 * ((out.squeeze(-1) - y) ** 2).mean()


def test_closed_form_theta_L_zeta_are_recovered():
    c, d = 3.0, 5
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, d)).astype(np.float32)
    X[100:200] += 2.0
    X[200:] -= 1.0
    parts = [np.arange(0, 100), np.arange(100, 200), np.arange(200, 260), np.zeros(0, int)]
    y = np.zeros(300, dtype=np.int64)
    e = estimate(Center(d), X, y, parts, loss_fn=center_loss(c), sample_size=16, J=10)
    raw = e["raw"]
    np.testing.assert_allclose(raw["Theta"], c, rtol=1e-5)        # incl. the empty DPU (max)
    assert raw["L"] == pytest.approx(c, rel=1e-5)
    sizes = np.array([100, 100, 60])
    p = sizes / sizes.sum()
    mus = np.array([X[ix].mean(0) for ix in parts[:3]], dtype=np.float64)
    zeta2 = c ** 2 * float(p @ ((mus - p @ mus) ** 2).sum(axis=1))
    assert raw["zeta1_fit"] == pytest.approx(1.0, abs=1e-4)
    assert raw["zeta2"] == pytest.approx(zeta2, rel=1e-4)
    # scaled by 1.5 (the paper's "Simulation Value")
    assert e["L"] == pytest.approx(1.5 * raw["L"]) and e["zeta2"] == pytest.approx(1.5 * raw["zeta2"])
    np.testing.assert_allclose(e["Theta"], 1.5 * np.array(raw["Theta"]))
    assert e["J"] == 10 and e["scale"] == 1.5


def test_least_squares_L_is_the_largest_hessian_eigenvalue():
    """F(x) = 1/(2D) ||A x - b||^2 has Hessian A^T A / D: L = its largest eigenvalue. The
    paper's random-pair estimator is a lower bound within the spectrum; the Hessian power
    iteration (L_method='hessian') recovers L."""
    rng = np.random.default_rng(1)
    A = (rng.normal(size=(200, 4)) * np.array([3.0, 1.0, 0.5, 0.1])).astype(np.float32)
    b = rng.normal(size=200).astype(np.float32)
    eig = np.linalg.eigvalsh(A.T.astype(np.float64) @ A / 200)
    model = nn.Linear(4, 1, bias=False)
    parts = [np.arange(200)]
    pairs = estimate(model, A, b, parts, loss_fn=lsq, sample_size=200, L_method="pairs")
    hess = estimate(model, A, b, parts, loss_fn=lsq, sample_size=200, L_method="hessian")
    assert eig[0] - 1e-6 <= pairs["raw"]["L"] <= eig[-1] * (1 + 1e-5)
    assert hess["raw"]["L"] == pytest.approx(eig[-1], rel=1e-4)
    # isotropic Hessian (orthogonal design scaled by s): every random pair sees exactly L = s^2
    Q, _ = np.linalg.qr(rng.normal(size=(64, 4)))
    s = 2.0
    Aiso = (s * np.sqrt(64) * Q).astype(np.float32)
    e = estimate(nn.Linear(4, 1, bias=False), Aiso, rng.normal(size=64).astype(np.float32),
                 [np.arange(64)], loss_fn=lsq, sample_size=64)
    assert e["raw"]["L"] == pytest.approx(s ** 2, rel=1e-4)


def test_hessian_top_eig_direct():
    torch.manual_seed(0)
    A = torch.randn(50, 3) * torch.tensor([2.0, 1.0, 0.3])
    b = torch.randn(50)
    model = nn.Linear(3, 1, bias=False)
    lam = hessian_top_eig(model, torch.zeros(3), A, b, lsq)
    assert lam == pytest.approx(float(torch.linalg.eigvalsh(A.T @ A / 50)[-1]), rel=1e-4)


def test_dynamic_estimation_keeps_running_max():
    c = 2.0
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 3)).astype(np.float32)
    y = np.zeros(400, dtype=np.int64)
    rounds = [[np.arange(0, 50), np.arange(50, 100)],
              [np.arange(100, 150), np.arange(150, 400)]]
    X[150:400] += 4.0                                          # round 1 far more dissimilar
    e = estimate_dynamic(Center(3), X, y, rounds, loss_fn=center_loss(c), sample_size=8, J=3)
    pr = e["per_round"]
    assert len(pr) == 2 and e["method"] == "dynamic"
    for k in ("L", "zeta1", "zeta2"):
        assert pr[1][k] >= pr[0][k] and e[k] == pr[1][k]
        assert pr[1][k] == max(e["per_round_raw"][0][k], e["per_round_raw"][1][k])
    assert e["per_round_raw"][1]["zeta2"] > 10 * e["per_round_raw"][0]["zeta2"]
    assert np.all(np.array(pr[1]["Theta"]) >= np.array(pr[0]["Theta"]))


def test_estimates_fill_the_instance_on_real_data():
    from cefl_opt.learning.data import load_dataset
    from cefl_opt.learning.models import make_model
    X, y, _, _ = load_dataset("digits", seed=0)
    inst = toy_instance(N=3, B=2, S=2, T=2, D=60, seed=0)
    parts = dpu_datasets(inst, y, round=0, solution=toy_solution(inst))
    assert len(parts) == inst.I and sum(p.size for p in parts) == int(inst.Dbar[0].sum())
    e = estimate(make_model("mlp", X.shape[1:], 10, seed=0), X, y, parts, J=2, sample_size=8)
    assert e["L"] > 0 and e["zeta1"] >= 1.5 and e["zeta2"] >= 0 and min(e["Theta"]) > 0
    new = apply_estimates(inst, e)
    assert new.L == pytest.approx(e["L"]) and new.Theta.tolist() == pytest.approx(e["Theta"])
    assert new.zeta1 == pytest.approx(e["zeta1"]) and new.Dbar.tolist() == inst.Dbar.tolist()
    ue_only = dict(e, Theta=e["Theta"][:inst.N])                 # N values: DCs get the max
    assert apply_estimates(inst, ue_only).Theta[inst.N:].tolist() == [max(e["Theta"][:inst.N])] * 2
    with pytest.raises(InstanceError):
        apply_estimates(inst, dict(e, Theta=[1.0]))
    with pytest.raises(InstanceError):
        estimate(make_model("mlp", X.shape[1:]), X, y, [np.zeros(0, int)])


def test_sigma_is_the_sample_standard_deviation_by_hand():
    """sigma_i^2 = sum_j ||xi_j - mean xi||^2 / (D_i - 1) (docs/modelling.md, 'The ML
    term'). DPU 0 holds the points
    (0,0), (2,0), (0,2), (2,2): mean (1,1), each squared distance 2, sum 8, / 3 -> sigma^2 = 8/3.
    DPU 1 holds (1,1), (3,3): mean (2,2), distances 2 + 2 = 4, / 1 -> sigma = 2. DPU 2 holds one
    point and DPU 3 none: they get the largest of the others, 2."""
    from cefl_opt.learning.estimation import sample_sigma, sigma_per_dpu
    X = np.array([[0, 0], [2, 0], [0, 2], [2, 2], [1, 1], [3, 3], [5, 5]], dtype=np.float32)
    sig = sigma_per_dpu(X.reshape(7, 1, 2), [np.arange(4), np.array([4, 5]), np.array([6]),
                                             np.zeros(0, int)])
    assert sig == pytest.approx([np.sqrt(8 / 3), 2.0, 2.0, 2.0], rel=1e-12)
    assert sample_sigma(torch.tensor(X[:1])) == 0.0


def test_sigma_in_estimates_dynamic_max_and_applied():
    """estimate() reports sigma unscaled; the dynamic estimate keeps its running maximum per DPU;
    apply_estimates writes it and renormalises default weights (not user-set ones)."""
    from cefl_opt.learning.estimation import sigma_per_dpu
    from cefl_opt.system import normalising_weights
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 3)).astype(np.float32)
    X[100:] *= 3.0
    y = np.zeros(200, dtype=np.int64)
    rounds = [[np.arange(0, 50), np.arange(50, 100)], [np.arange(100, 150), np.arange(50, 100)]]
    e = estimate_dynamic(Center(3), X, y, rounds, loss_fn=center_loss(1.0), sample_size=8, J=2,
                         scale=1.5)
    s0, s1 = sigma_per_dpu(X, rounds[0]), sigma_per_dpu(X, rounds[1])
    assert e["per_round_raw"][0]["sigma"] == pytest.approx(s0.tolist())
    assert e["sigma"] == pytest.approx(np.maximum(s0, s1).tolist())
    assert e["sigma"][0] == pytest.approx(s1[0]) and s1[0] > 2 * s0[0]
    inst = toy_instance(N=1, B=1, S=1, T=2, D=50, seed=0)
    inst = inst.copy(**normalising_weights(inst))
    new = apply_estimates(inst, dict(e, Theta=[1.0, 1.0]))
    assert new.sigma.tolist() == pytest.approx(e["sigma"])
    assert new.xi1 == pytest.approx(normalising_weights(new)["xi1"]) and new.xi1 != inst.xi1
    hand = inst.copy(xi1=0.123)                                    # set by hand: kept
    assert apply_estimates(hand, dict(e, Theta=[1.0, 1.0])).xi1 == 0.123
