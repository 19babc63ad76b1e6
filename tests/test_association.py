"""Association rules in one place (cefl_opt/association.py), checked against brute force."""
from __future__ import annotations

import numpy as np
import pytest

from cefl_opt import association as A
from cefl_opt import system
from cefl_opt.generator import make_instance


@pytest.fixture(scope="module", params=[("small", 0), ("paper", 1)])
def inst(request):
    preset, seed = request.param
    return make_instance(preset, seed=seed, rounds=2)


def test_fastest_path_uplink_minimises_the_gradient_path_delay(inst):
    for t in range(inst.T):
        for agg in range(inst.S):
            up, down = A.association_rule(inst, t, agg)
            for n in range(inst.N):   # brute force over the BSs: beta_M/R_nb + beta_M/Rmax_bs
                cost = [inst.beta_M / inst.R_nb[t, n, b] + inst.beta_M / inst.Rmax_bs[b, agg]
                        for b in range(inst.B)]
                assert cost[up[n]] == min(cost)
                rates = [inst.R_bn[t, b, n] for b in range(inst.B)]
                assert rates[down[n]] == max(rates)


def test_reference_orchestration_uses_the_best_rate_rule(inst):
    ref = system.reference_solution(inst)
    for t, r in enumerate(ref.rounds):
        for n in range(inst.N):
            assert inst.R_nb[t, n, r.uplink_bs[n]] == inst.R_nb[t, n].max()
            assert inst.R_bn[t, r.downlink_bs[n], n] == inst.R_bn[t, :, n].max()
        np.testing.assert_array_equal(r.uplink_bs, A.best_rate_uplink(inst, t))
        np.testing.assert_array_equal(r.downlink_bs, A.best_rate_downlink(inst, t))


def test_round_associations_takes_the_largest_entry_and_breaks_ties_by_rate(inst):
    rng = np.random.default_rng(0)
    t = 1
    Inb = rng.dirichlet(np.ones(inst.B), size=inst.N)
    Ibn = rng.dirichlet(np.ones(inst.B), size=inst.N)
    up, down = A.round_associations(inst, t, Inb, Ibn)
    np.testing.assert_array_equal(up, Inb.argmax(axis=1))
    np.testing.assert_array_equal(down, Ibn.argmax(axis=1))
    # exact ties (the centre of the simplex): the better rate wins
    flat = np.full((inst.N, inst.B), 1.0 / inst.B)
    up, down = A.round_associations(inst, t, flat, flat)
    np.testing.assert_array_equal(up, A.best_rate_uplink(inst, t))
    np.testing.assert_array_equal(down, A.best_rate_downlink(inst, t))


def test_every_caller_uses_the_one_module():
    """No other module defines an association rule of its own."""
    import importlib.util
    import inspect

    from cefl_opt.solvers import centralized, decentralized
    assert centralized.association_rule is A.association_rule
    assert importlib.util.find_spec("cefl_opt.solvers.repair") is None   # no second home
    assert "from cefl_opt.association import repair_associations" in inspect.getsource(
        decentralized)
    assert not hasattr(system, "best_uplink") and not hasattr(centralized, "_association_search")
    for mod in (centralized, system):
        assert "argmin(1.0 / inst.R_nb" not in inspect.getsource(mod)
