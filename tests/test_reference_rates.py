"""The reference orchestration's rates (`system.full_rates`, `system.reference_solution`)
against both capacities: R_bs <= Rmax_bs (eqn: BS_capacity) and sum_b R_bs <= Rmax_s
(eqn: Server_capacity); the reference is then a feasible point of P (`system.evaluate`)."""
import numpy as np
import pytest

from cefl_opt import system
from cefl_opt.generator import make_instance

REL = 1e-12


@pytest.mark.parametrize("preset, seed", [("tiny", 0), ("small", 3), ("paper", 1)])
def test_full_rates_are_within_both_capacities_and_the_reference_is_feasible(preset, seed):
    inst = make_instance(preset, seed=seed)
    R = system.full_rates(inst)
    assert np.all(R <= inst.Rmax_bs * (1 + REL))
    assert np.all(R.sum(axis=0) <= inst.Rmax_s * (1 + REL))
    assert np.all(R >= inst.R_floor)
    ev = system.evaluate(inst, system.reference_solution(inst))
    assert ev.feasible, ev.violations


def test_full_rates_scale_down_to_the_dc_capacity_only_where_it_binds():
    """DC 0's ingress capacity below the sum of its BSs' capacities: its column is scaled to
    exactly Rmax_s[0]; DC 1's is not binding: its column is Rmax_bs itself."""
    base = make_instance("small", seed=3)
    Rmax_s = np.array([0.5 * base.Rmax_bs[:, 0].sum(), 2.0 * base.Rmax_bs[:, 1].sum()])
    inst = make_instance("small", seed=3, Rmax_s=Rmax_s)
    R = system.full_rates(inst)
    assert R[:, 0].sum() == pytest.approx(Rmax_s[0], rel=1e-12)
    np.testing.assert_allclose(R[:, 0], 0.5 * inst.Rmax_bs[:, 0], rtol=1e-12)
    np.testing.assert_array_equal(R[:, 1], inst.Rmax_bs[:, 1])
