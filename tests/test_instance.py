"""Instances and solutions: JSON round trips, seeding, validation, the communication graph."""
from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

from cefl_opt.generator import PRESETS, make_instance
from cefl_opt.instance import ARRAY_FIELDS, SCALAR_FIELDS, Instance, InstanceError
from cefl_opt.solution import ROUND_FIELDS, Solution
from cefl_opt.system import data_split, reference_solution


def _assert_same_instance(a: Instance, b: Instance) -> None:
    for k in ARRAY_FIELDS:
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert x.tobytes() == y.tobytes(), k                       # bitwise
    for k in SCALAR_FIELDS:
        assert np.float64(getattr(a, k)).tobytes() == np.float64(getattr(b, k)).tobytes(), k
    for k in ("name", "preset", "seed", "dc_names", "ue_subnet", "bs_subnet", "dc_subnet",
              "ue_labels", "graph_edges", "notes"):
        assert getattr(a, k) == getattr(b, k), k


# ---------------------------------------------------------------------- round trips
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_instance_json_round_trip_is_exact(tmp_path, preset):
    inst = make_instance(preset, seed=3)
    inst.save(tmp_path / "i.json")
    back = Instance.load(tmp_path / "i.json")
    _assert_same_instance(inst, back)
    # and a second trip writes identical bytes
    back.save(tmp_path / "j.json")
    assert (tmp_path / "i.json").read_bytes() == (tmp_path / "j.json").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.json", "j.json"]   # no temp files


def test_hand_instance_round_trip(tmp_path, tiny_hand):
    inst, sol = tiny_hand
    inst.save(tmp_path / "i.json")
    _assert_same_instance(inst, Instance.load(tmp_path / "i.json"))


def _assert_same_solution(a: Solution, b: Solution) -> None:
    assert len(a.rounds) == len(b.rounds)
    for r, q in zip(a.rounds, b.rounds):
        for k, (_, dtype) in ROUND_FIELDS.items():
            x, y = np.asarray(getattr(r, k)), np.asarray(getattr(q, k))
            assert x.shape == y.shape, k
            if dtype is float:
                assert x.astype(float).tobytes() == y.astype(float).tobytes(), k
            else:
                assert np.array_equal(x, y), k
        assert r.aggregator == q.aggregator
    for k in ("method", "status", "wall_s", "objective", "terms", "bound", "gap", "info"):
        assert getattr(a, k) == getattr(b, k), k


def test_solution_json_round_trip_is_exact(tmp_path, rand_sol):
    inst = make_instance("small", seed=1)
    sol = rand_sol(inst, np.random.default_rng(0))
    sol.objective, sol.terms, sol.info, sol.wall_s = 1.25, {"delay": 3.5}, {"iters": 7}, 0.125
    sol.save(tmp_path / "s.json")
    back = Solution.load(tmp_path / "s.json", inst)
    _assert_same_solution(sol, back)
    assert back.rounds[0].uplink_bs.dtype.kind == "i"
    _assert_same_solution(back, Solution.load(tmp_path / "s.json"))   # no instance: same values


# ---------------------------------------------------------------------- seeding
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_same_seed_same_instance(preset):
    _assert_same_instance(make_instance(preset, seed=11), make_instance(preset, seed=11))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_different_seeds_differ(preset):
    a, b = make_instance(preset, seed=1), make_instance(preset, seed=2)
    for k in ("Dbar", "R_nb", "R_bn", "Rmax_bs", "R_ss", "P_nb", "c", "alpha"):
        assert not np.array_equal(getattr(a, k), getattr(b, k)), k


def test_sizes_override_and_presets():
    inst = make_instance("paper", ues=7, bss=3, dcs=2, rounds=4, seed=0)
    assert (inst.N, inst.B, inst.S, inst.T) == (7, 3, 2, 4)
    p = make_instance("paper")
    assert (p.N, p.B, p.S, p.T) == (20, 10, 5, 5)
    assert p.dc_names == ["Indy-5G-Zone", "Discovery-Park", "Wisconsin", "Utah", "Clemson"]
    t = make_instance("tiny")
    assert (t.N, t.B, t.S) == (2, 1, 2)
    with pytest.raises(InstanceError, match="'ues'"):
        make_instance("small", ues=0)
    with pytest.raises(InstanceError, match="unknown preset"):
        make_instance("huge")


def test_generated_instances_feasible_and_weights_normalised():
    from cefl_opt.system import constraint_violations, evaluate
    for preset in PRESETS:
        inst = make_instance(preset, seed=5)
        assert inst.feasibility_problems() == []
        ref = reference_solution(inst)
        assert constraint_violations(inst, ref) == []
        ev = evaluate(inst, ref)
        assert ev.objective == pytest.approx(3.0, rel=1e-12)       # each part 1 (the weights)


# ---------------------------------------------------------------------- graph
@pytest.mark.parametrize("preset,sizes,seed", [
    ("tiny", {}, 0), ("small", {}, 1), ("paper", {}, 2), ("paper", {}, 9),
    ("paper", {"ues": 30, "bss": 10, "dcs": 5}, 4), ("small", {"dcs": 1}, 3),
    ("paper", {"ues": 60, "bss": 12, "dcs": 6}, 8),
])
def test_communication_graph(preset, sizes, seed):
    inst = make_instance(preset, seed=seed, **sizes)
    g = inst.graph()
    assert set(g.nodes) == set(inst.node_names())
    assert nx.is_connected(g)
    for n in range(inst.N):
        assert any(v.startswith("bs") for v in g.neighbors(f"ue{n}")), n
    for b in range(inst.B):
        assert any(v.startswith("dc") for v in g.neighbors(f"bs{b}")), b
    if inst.S > 1:
        for s in range(inst.S):
            assert any(v.startswith("dc") for v in g.neighbors(f"dc{s}")), s
    # only UE-BS, BS-DC and DC-DC edges, no duplicates, no self loops
    kinds = {tuple(sorted((u[:2], v[:2]))) for u, v in inst.graph_edges}
    assert kinds <= {("bs", "ue"), ("bs", "dc"), ("dc", "dc")}
    assert len({tuple(e) for e in inst.graph_edges}) == len(inst.graph_edges) == g.number_of_edges()
    # seeded
    assert make_instance(preset, seed=seed, **sizes).graph_edges == inst.graph_edges


def test_graph_differs_by_seed():
    assert make_instance("paper", seed=0).graph_edges != make_instance("paper", seed=1).graph_edges


# ---------------------------------------------------------------------- data conservation
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_data_conservation(preset, rand_sol):
    """sum_n D_n + sum_s D_s = sum_n Dbar_n for every feasible offloading (UE -> BS -> DC)."""
    for seed in range(12):
        inst = make_instance(preset, seed=seed)
        rng = np.random.default_rng(seed)
        for style in ("mixed", "sparse", "none", "full"):
            sol = rand_sol(inst, rng, style=style)
            for t, r in enumerate(sol.rounds):
                ds = data_split(inst, t, r)
                assert ds["D_n"].sum() + ds["D_s"].sum() == pytest.approx(
                    inst.Dbar[t].sum(), rel=1e-12)
                assert ds["D_b"].sum() == pytest.approx(ds["D_s"].sum(), rel=1e-12)
                assert np.all(ds["D_n"] >= -1e-9) and np.all(ds["D_s"] >= -1e-9)


# ---------------------------------------------------------------------- validation
def _dict(inst: Instance) -> dict:
    return json.loads(json.dumps(inst.to_dict()))


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.update(bogus=1), "'bogus'"),
    (lambda d: d["R_nb"][0][1].__setitem__(0, -5.0), "'R_nb'"),
    (lambda d: d.update(Rmax_s=[1e10]), "'Rmax_s'"),
    (lambda d: d.pop("Dbar"), "'Dbar'"),
    (lambda d: d.update(format="cefl-instance/0"), "'format'"),
    (lambda d: d["P_nb"][0][0].__setitem__(0, float("nan")), "'P_nb'"),
    (lambda d: d.update(beta_D=float("inf")), "'beta_D'"),
    (lambda d: d.update(rho_idle=1.5), "'rho_idle'"),
    (lambda d: d.update(f_min=[3e9, 1e5]), "'f_min'"),
    (lambda d: d.update(gamma_min=30.0), "'gamma_min'"),
    (lambda d: d.update(eta="fast"), "'eta'"),
    (lambda d: d.update(c=[[1.0, 2.0], [3.0]]), "'c'"),
    (lambda d: d.update(Rmax_bs=[[1e3, 1e9]]), "'Rmax_bs'"),
    (lambda d: d.update(dc_names=["a"]), "'dc_names'"),
    (lambda d: d.update(graph_edges=[["ue0", "bs7"]]), "'graph_edges'"),
    (lambda d: d.update(Delta=[[0.3] * 3] * 2), "'Delta'"),
])
def test_bad_instances_name_the_field(mutate, needle):
    d = _dict(make_instance("tiny", seed=0))
    mutate(d)
    with pytest.raises(InstanceError) as e:
        Instance.from_dict(d)
    assert needle in str(e.value)


def test_bad_value_is_reported():
    d = _dict(make_instance("tiny", seed=0))
    d["R_nb"][1][0][0] = -5.0
    with pytest.raises(InstanceError, match=r"'R_nb'.*-5\.0.*\[1, 0, 0\]"):
        Instance.from_dict(d)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["rounds"][0].__setitem__("uplink_bs", [0, 5, 0, 0]), "uplink_bs"),
    (lambda d: d["rounds"].pop(), "rounds"),
    (lambda d: d["rounds"][1].__setitem__("aggregator", 9), "aggregator"),
    (lambda d: d["rounds"][0].__setitem__("f", [1e9] * 3), "rounds[0].f"),
    (lambda d: d["rounds"][0].__setitem__("z", [float("nan"), 1.0]), "rounds[0].z"),
    (lambda d: d["rounds"][0].pop("R_bs"), "R_bs"),
    (lambda d: d["rounds"][0].__setitem__("speed", 1), "'speed'"),
    (lambda d: d.update(format="cefl-instance/1"), "'format'"),
    (lambda d: d["rounds"][0].__setitem__("downlink_bs", [0.5, 0, 0, 0]), "downlink_bs"),
])
def test_bad_solutions_name_the_field(mutate, needle):
    inst = make_instance("small", seed=0)
    d = json.loads(json.dumps(reference_solution(inst).to_dict()))
    mutate(d)
    with pytest.raises(InstanceError) as e:
        Solution.from_dict(d, inst)
    assert needle in str(e.value)


def test_instance_copy_and_validate():
    inst = make_instance("small", seed=0)
    c = inst.copy(L=2.0)
    assert c.L == 2.0 and inst.L == 1.0
    with pytest.raises(InstanceError, match="'L'"):
        inst.copy(L=-1.0)


def test_vartheta_mode_field(tmp_path, tiny_hand):
    """vartheta_mode (docs/modelling.md, 'The ML term'): 'constant' with vartheta 3 by default (in
    generated networks too), round-trips, and a bad value is one clear error naming the field and
    the value; files written before the field load with the default mode (and keep their own
    number)."""
    inst, _ = tiny_hand
    assert inst.vartheta_mode == "constant"
    gen = make_instance("tiny", seed=0)
    assert (gen.vartheta_mode, gen.vartheta) == ("constant", 3.0)
    c = inst.copy(vartheta_mode="tau_eff")
    c.save(tmp_path / "c.json")
    assert Instance.load(tmp_path / "c.json").vartheta_mode == "tau_eff"
    d = inst.to_dict()
    d.pop("vartheta_mode")
    with pytest.raises(InstanceError, match=r"field 'vartheta_mode' is missing"):
        Instance.from_dict(d)                      # format 2: every field is required
    old = {{"xi3": "xi3_total", "xi3_parts": "xi3"}.get(k, k): v for k, v in d.items()}
    old["format"] = "cefl-instance/1"              # format 1 predates the field: the default
    assert Instance.from_dict(old).vartheta_mode == Instance.__dataclass_fields__[
        "vartheta_mode"].default
    with pytest.raises(InstanceError, match=r"field 'vartheta_mode' is 'fednova', expected one of"):
        Instance.from_dict(dict(inst.to_dict(), vartheta_mode="fednova"))
