"""The one codec between model variables and a Solution (models/codec.py) and the forcing rows'
own sub-block."""
from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest

from cefl_opt.generator import make_instance
from cefl_opt.models import (GBIT, GHZ, build_problem, extract_solution, load_solution,
                             node_blocks, node_constraints)
from cefl_opt.models.codec import OWNER_FIELDS, VariableIndex
from cefl_opt.models.problem import is_forcing

FIELDS = tuple(OWNER_FIELDS)


def _assert_same(a, b):
    for r, q in zip(a.rounds, b.rounds, strict=True):
        for k in FIELDS:
            np.testing.assert_allclose(getattr(q, k), getattr(r, k), rtol=1e-12, err_msg=k)
        assert q.aggregator == r.aggregator
        np.testing.assert_array_equal(q.uplink_bs, r.uplink_bs)
        np.testing.assert_array_equal(q.downlink_bs, r.downlink_bs)


@pytest.mark.parametrize("preset,reach", [("tiny", None), ("small", None), ("small", 1)])
@pytest.mark.parametrize("copies", [True, False])
@pytest.mark.parametrize("binaries", ["relaxed", "binary"])
def test_solution_model_solution_round_trip(preset, reach, copies, binaries, rand_sol):
    # reach=1: each UE keeps one BS link, the others are absent (no variable; Instance.links)
    inst = make_instance(preset, seed=2, rounds=2, **({"reach": reach} if reach else {}))
    assert reach is None or not inst.link_mask.all()
    m = build_problem(inst, binaries=binaries, copies=copies, bound="general")
    sol = rand_sol(inst, np.random.default_rng(11))
    load_solution(m, sol)
    back = extract_solution(m)
    _assert_same(sol, back)
    # internal units: f in GHz, R_bs in Gbit/s, z as the fraction z / C (the one table)
    r = sol.rounds[1]
    assert pyo.value(m.ue[0].f[1]) == pytest.approx(r.f[0] / GHZ, rel=1e-12)
    assert pyo.value(m.bs[0].R[1, 0]) == pytest.approx(r.R_bs[0, 0] / GBIT, rel=1e-12)
    assert pyo.value(m.dc[1].z[1]) == pytest.approx(r.z[1] / inst.C[1], rel=1e-12)
    # every copy holds its owner's value: the consensus rows G(w) = 0 hold
    for con in m.consensus.component_data_objects(pyo.Constraint, active=True):
        assert abs(pyo.value(con.body)) <= 1e-12, con.name


@pytest.mark.parametrize("copies", [True, False])
@pytest.mark.parametrize("reach", [None, 1])
def test_variable_index_decodes_a_flat_vector_like_extract(copies, reach, rand_sol):
    inst = make_instance("small", seed=1, rounds=2, **({"reach": reach} if reach else {}))
    m = build_problem(inst, copies=copies)
    sol = rand_sol(inst, np.random.default_rng(5))
    load_solution(m, sol)
    variables = list(m.component_data_objects(pyo.Var, descend_into=True))
    rng = np.random.default_rng(0)
    order = rng.permutation(len(variables))        # any vector order, e.g. PyNumero's
    vec = [variables[i] for i in order]
    x = np.array([v.value for v in vec], float)
    idx = VariableIndex.build(m, vec)
    _assert_same(sol, idx.decode(inst, x, method="x"))
    assert idx.fields["rho_nb"][0].shape == (inst.N, inst.B)
    assert idx.indicators["Is"][1].shape == (inst.S,)
    # a mapping id(var) -> position works the same
    idx2 = VariableIndex.build(m, {id(v): i for i, v in enumerate(vec)})
    for k in FIELDS:
        for a, b in zip(idx.fields[k], idx2.fields[k]):
            np.testing.assert_array_equal(a, b)


def test_the_sca_reads_its_point_through_the_codec(rand_sol):
    """The decentralised solver's vector of shared variables, indexed by the codec's
    `VariableIndex`, gives back the orchestration it was built from (units included)."""
    from cefl_opt.solvers.sca import build_structure
    inst = make_instance("small", seed=0, rounds=2)
    sol = rand_sol(inst, np.random.default_rng(2))
    st = build_structure(inst, init=sol, relax_init=False)
    _assert_same(sol, st.to_solution(st.u0, method="sca"))


@pytest.mark.parametrize("copies", [True, False])
def test_forcing_rows_live_in_their_own_sub_block(copies):
    inst = make_instance("small", seed=0, rounds=2)
    m = build_problem(inst, copies=copies)
    n_force = 0
    for name, blk in node_blocks(m).items():
        rows = node_constraints(blk, "forcing")
        want = {"ue": 2 * inst.T, "dc": inst.T if name == "dc0" else 0, "bs": 0}[name[:2]]
        assert len(rows) == want, name
        coupling = {id(c) for c in node_constraints(blk, "coupling")}
        for c in rows:   # sum I (1 - I) <= 0: quadratic, in the node's coupling rows C(w) <= 0
            assert is_forcing(c) and id(c) in coupling
            assert c.body.polynomial_degree() == 2 and pyo.value(c.upper) == 0.0
        n_force += len(rows)
    every = list(m.component_data_objects(pyo.Constraint, active=True))
    assert sum(is_forcing(c) for c in every) == n_force == (2 * inst.N + 1) * inst.T
    mb = build_problem(inst, binaries="binary", copies=copies)
    assert not any(is_forcing(c) for c in mb.component_data_objects(pyo.Constraint))


def test_the_sca_finds_the_forcing_rows_by_their_block():
    from cefl_opt.solvers.sca import build_structure
    inst = make_instance("tiny", seed=0, rounds=2)
    st = build_structure(inst)
    assert len(st.force_rows) == (2 * inst.N + 1) * inst.T
    assert all(".forcing." in st.row_names[i] for i in st.force_rows)
