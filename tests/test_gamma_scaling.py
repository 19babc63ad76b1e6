"""How the corollary ML bound (eq:convSpecial; docs/formulation.md, 'The ML term (a)') moves with
one common gamma under both vartheta modes: the scaling that benchmarks/bench_gamma_tradeoff.py
relies on to explain P's choice of gamma, checked against hand-computed values of the formula.

The hand instance (conftest): d = 4 DPUs, T = 2, L = 1, max Theta = 4, max sigma = 2, F0 - F* =
2.3, zeta2 = 1.5, sum_i Delta = 1.2 and 2.0 per round; here every DPU holds 750 of the 3000
points, m = 0.5 everywhere, tau = 1 s per round. With one gamma g: gbar = d T g = 8 g and the
step rule eta = sqrt(d/(gbar T)) = 1/(2 sqrt g), so with c0 = 4 sqrt(gbar)/(vartheta sqrt(dT)) =
4 sqrt(g)/vartheta:
    init   = c0 * 2.3
    drift  = c0 * (1 * 1.2 + 1 * 2.0) = 3.2 c0
    noise  = 16 L vartheta Theta sigma^2 / m * sqrt(d/(gbar T)) = 16*vartheta*4*4/0.5 / (2 sqrt g)
           = 256 vartheta / sqrt(g)
    local  = 12 L^2 d Theta sigma^2 g / (gbar m T) = 12*4*4*4 g / (8 g * 0.5 * 2) = 96
    hetero = 12 L^2 zeta2 d g^2 / (gbar T) = 12*1.5*4 g^2 / (16 g) = 4.5 g
constant (the instance's vartheta = 0.5): init 18.4 sqrt(g), drift 25.6 sqrt(g), noise
128/sqrt(g); tau_eff with mu = 0 (vartheta = ||a||_1 = g): init 9.2/sqrt(g), drift
12.8/sqrt(g), noise 256 sqrt(g).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pytest import approx

from benchmarks.bench_gamma_tradeoff import ml_slope, sigma_flip, with_common_gamma
from cefl_opt.system import ml_bound

T, D = 2, 4
MS = np.full((T, D), 0.5)
TAUS = np.ones(T)
DI = np.full((T, D), 750.0)


def hand(mode: str, mu: float = 0.0):
    from conftest import hand_instance
    return hand_instance().copy(vartheta_mode=mode, mu=mu)


def parts(inst, g: float) -> dict[str, float]:
    return ml_bound(inst, np.full((T, D), g), MS, TAUS, DI)


# hand values of the corollary bound at a common gamma g (module docstring)
HAND = {
    "constant": lambda g: {"init": 18.4 * math.sqrt(g), "drift": 25.6 * math.sqrt(g),
                           "noise": 128 / math.sqrt(g), "local": 96.0, "hetero": 4.5 * g},
    "tau_eff": lambda g: {"init": 9.2 / math.sqrt(g), "drift": 12.8 / math.sqrt(g),
                          "noise": 256 * math.sqrt(g), "local": 96.0, "hetero": 4.5 * g},
}


@pytest.mark.parametrize("mode", ["constant", "tau_eff"])
@pytest.mark.parametrize("g", [1.0, 2.0, 4.0, 9.0])
def test_common_gamma_terms_by_hand(mode, g):
    got, want = parts(hand(mode), g), HAND[mode](g)
    for k, v in want.items():
        assert got[k] == approx(v, rel=1e-12), k
    assert got["total"] == approx(sum(want.values()), rel=1e-12)


def test_init_and_noise_swap_their_scaling_between_the_modes():
    """From g = 1 to g = 4: under constant init doubles and noise halves; under tau_eff
    (mu = 0) init halves and noise doubles; local stays, hetero is x4 in both."""
    for mode, init_r, noise_r in (("constant", 2.0, 0.5), ("tau_eff", 0.5, 2.0)):
        a, b = parts(hand(mode), 1.0), parts(hand(mode), 4.0)
        assert b["init"] / a["init"] == approx(init_r)
        assert b["drift"] / a["drift"] == approx(init_r)
        assert b["noise"] / a["noise"] == approx(noise_r)
        assert b["local"] == approx(a["local"])
        assert b["hetero"] / a["hetero"] == approx(4.0)


def test_tau_eff_with_mu_uses_the_weights_norm():
    """mu = 1, eta = 0.1 (q = 0.9): vartheta = ||a||_1 = 1, 1.9, 2.71 at g = 1, 2, 3, so
    init(g)/init(1) = sqrt(g)/||a||_1 and noise(g)/noise(1) = ||a||_1/sqrt(g)."""
    inst = hand("tau_eff", mu=1.0)
    a = parts(inst, 1.0)
    for g, a1 in ((2.0, 1.9), (3.0, 2.71)):
        b = parts(inst, g)
        assert b["init"] / a["init"] == approx(math.sqrt(g) / a1, rel=1e-12)
        assert b["noise"] / a["noise"] == approx(a1 / math.sqrt(g), rel=1e-12)


@pytest.mark.parametrize("mode,slope", [
    # d/dg at g = 1, delays held: (noise - init - drift)/2 + hetero under tau_eff,
    # (init + drift - noise)/2 + hetero under constant (local does not move)
    ("tau_eff", (256 - 9.2 - 12.8) / 2 + 4.5),      # +121.5: the bound rises, P keeps g = 1
    ("constant", (18.4 + 25.6 - 128) / 2 + 4.5),    # -37.5: the bound falls towards the cap
])
def test_ml_slope_at_one_by_hand(mode, slope):
    ds = ml_slope(hand(mode), np.ones((T, D)), MS, TAUS, DI)
    assert ds["total"] == approx(slope, rel=1e-5)
    h = HAND[mode](1.0)
    sgn = -1 if mode == "tau_eff" else 1
    assert ds["init"] == approx(sgn * h["init"] / 2, rel=1e-5)
    assert ds["noise"] == approx(-sgn * h["noise"] / 2, rel=1e-5)
    assert ds["hetero"] == approx(4.5, rel=1e-5)
    assert abs(ds["local"]) < 1e-4


@pytest.mark.parametrize("mode,want", [
    # tau_eff: noise slope 128 (sigma_max = 2), the rest -4.6 - 6.4 + 4.5 = -6.5:
    # 2 sqrt(6.5/128); constant: noise slope -64, the rest 9.2 + 12.8 + 4.5 = 26.5
    ("tau_eff", 2 * math.sqrt(6.5 / 128)), ("constant", 2 * math.sqrt(26.5 / 64)),
])
def test_sigma_flip_zeroes_the_slope(mode, want):
    """At the sigma_max sigma_flip returns, the slope at g = 1 is zero (recomputed with every
    sigma_i scaled, so the noise and local terms both move)."""
    inst = hand(mode)
    ds = ml_slope(inst, np.ones((T, D)), MS, TAUS, DI)
    s = sigma_flip(ds, float(inst.sigma.max()))
    assert s == approx(want, rel=1e-5)
    flipped = inst.copy(sigma=inst.sigma * s / inst.sigma.max())
    assert abs(ml_slope(flipped, np.ones((T, D)), MS, TAUS, DI)["total"]) < 1e-3
    assert math.isnan(sigma_flip({"total": 5.0, "noise": 1.0}, 2.0))   # rises for every sigma


def test_with_common_gamma_changes_gamma_only(tiny_hand):
    inst, sol = tiny_hand
    new = with_common_gamma(sol, 1.7)
    for r0, r1 in zip(sol.rounds, new.rounds):
        assert np.all(r1.gamma_ue == 1.7) and np.all(r1.gamma_dc == 1.7)
        assert np.array_equal(r0.rho_nb, r1.rho_nb) and np.array_equal(r0.m_ue, r1.m_ue)
        assert r0.gamma_ue[0] != 1.7                       # the original is untouched


def run_suite(*argv):
    """The suite in its own process (it seeds, silences warnings and sets torch's threads)."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "benchmarks.bench_gamma_tradeoff", *argv],
                          cwd=root, capture_output=True, text=True, timeout=600)


def test_suite_runs_and_its_slopes_follow_the_rule(tmp_path):
    """The suite end to end on a small paper-style network with placeholder constants (no
    data, no cache): files written, the point at the common-gamma cap feasible and the one past
    it not, and the slope at g = 1 has the sign of +-(noise - init - drift)/2 + hetero computed
    from the terms it reports (mu eta = 1e-5, so vartheta = ||a||_1 ~ g)."""
    import pandas as pd
    proc = run_suite("--placeholder-constants", "--ues", "4", "--bss", "2", "--dcs", "2",
                     "--T", "2", "--quick", "--out-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    df = pd.read_csv(tmp_path / "bench_gamma_tradeoff.csv")
    sl = pd.read_csv(tmp_path / "bench_gamma_tradeoff_slopes.csv").set_index("vartheta_mode")
    assert (tmp_path / "bench_gamma_tradeoff.png").stat().st_size > 0
    cap = float(sl["cap"].iloc[0])
    for mode, d in df.groupby("vartheta_mode"):
        assert d.loc[d["gamma"] <= cap, "feasible"].all()
        assert not d.loc[d["gamma"] > cap * (1 + 1e-9), "feasible"].any()
        r = sl.loc[mode]
        sgn = 1 if mode == "tau_eff" else -1
        rule = sgn * (r["noise_at_1"] - r["init_at_1"] - r["drift_at_1"]) / 2 + r["hetero_at_1"]
        assert r["d_total"] == approx(rule, rel=1e-3)


def test_suite_bad_solution_file_is_one_error(tmp_path):
    proc = run_suite("--placeholder-constants", "--ues", "4", "--bss", "2", "--dcs", "2", "--T",
                     "2", "--solution", str(tmp_path / "nope.json"), "--out-dir", str(tmp_path))
    assert proc.returncode == 2
    err = proc.stderr
    assert "--solution" in err and "nope.json" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
