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


def test_repair_takes_no_move_from_an_infeasible_point(inst):
    """Only feasible, strictly better moves are taken: from an infeasible point (every UE above
    f_max) no association change is feasible, so none is made, although some lower J. From the
    same point made feasible again, the repair moves and J falls."""
    sol = system.reference_solution(inst)
    for r in sol.rounds:                       # the reference's rule is not J's best: the
        r.uplink_bs = np.zeros(inst.N, int)    # repair has moves to make from here
        r.downlink_bs = np.zeros(inst.N, int)
    assert system.evaluate(inst, sol).feasible
    moved, k = A.repair_associations(inst, sol)
    assert k > 0
    assert system.evaluate(inst, moved).objective < system.evaluate(inst, sol).objective
    bad = sol
    for r in bad.rounds:
        r.f = inst.f_max * 1.5
    assert not system.evaluate(inst, bad).feasible
    same, k_bad = A.repair_associations(inst, bad)
    assert k_bad == 0
    for r0, r1 in zip(bad.rounds, same.rounds):
        assert (r0.uplink_bs == r1.uplink_bs).all() and (r0.downlink_bs == r1.downlink_bs).all()


def test_ipopt_with_repair_returns_the_best_of_its_three_points(monkeypatch):
    """`solve_with_repair` returns the best feasible of: Ipopt's point, the repaired point and
    Ipopt from the repaired point, whatever the repair returns (here a worse point)."""
    from cefl_opt.solvers import centralized as C
    inst = make_instance("tiny", seed=0, rounds=1)
    good = system.reference_solution(inst)
    worse = system.reference_solution(inst)
    worse.rounds[0].f = np.maximum(inst.f_min, 0.5 * worse.rounds[0].f)   # slower: J rises
    j_good = system.evaluate(inst, good).objective
    j_worse = system.evaluate(inst, worse).objective
    assert j_worse > j_good

    class FakeNLP:
        def __init__(self, second):
            self.inst, self.bound, self.weights = inst, "corollary", None
            self.association_moves, self.results = 0, [(good, "ok", j_good), second]

        def solve(self, decisions, warm=None):
            return self.results.pop(0)

    monkeypatch.setattr(C, "repair_associations", lambda *a, **k: (worse, 1))
    for second in [(None, "failed", None), (worse, "ok", j_worse)]:
        sol, _st, obj = C.solve_with_repair(FakeNLP(second), good.rounds)
        assert sol is good and obj == j_good
    better = (worse, "ok", 0.5 * j_good)      # Ipopt from the repaired point wins: it is kept
    sol, _st, obj = C.solve_with_repair(FakeNLP(better), good.rounds)
    assert obj == 0.5 * j_good
