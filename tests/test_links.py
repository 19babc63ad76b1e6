"""Absent UE-BS links (`Instance.links`, `network generate --reach k`; docs/scale-mpi.md,
'Large instances').

Truth used here: the full-link instance drawn from the same seed (the present links keep its
numbers), and the same instance with every link present whose absent links' variables are
forced to 0 (an independent model of "absent link"): brute force and Ipopt agree on both.
"""
from __future__ import annotations

import json
import math

import networkx as nx
import numpy as np
import pyomo.environ as pyo
import pytest

from cefl_opt.cli import main
from cefl_opt.generator import make_instance
from cefl_opt.instance import Instance, InstanceError
from cefl_opt.models import build_problem, extract_solution, load_solution
from cefl_opt.system import evaluate, reference_solution

from test_model_agreement import check_agreement


def _reach(preset="paper", reach=2, seed=3, **size):
    return make_instance(preset, reach=reach, seed=seed, **size)


# ---------------------------------------------------------------------- generator
def test_reach_keeps_k_nearest_links_and_the_full_draws():
    full = make_instance("paper", ues=30, bss=7, dcs=4, seed=3)
    inst = _reach(ues=30, bss=7, dcs=4)
    mean_up = full.R_nb.mean(axis=0)
    on = inst.link_mask
    assert on.sum(axis=1).tolist() == [2] * 30
    for n in range(30):  # the 2 BSs of highest mean uplink rate
        assert set(inst.links[n]) == set(np.argsort(-mean_up[n])[:2].tolist())
    # present links keep the full instance's numbers; absent links carry 0
    for name, m in (("R_nb", on), ("P_nb", on), ("R_bn", on.T)):
        a, b = getattr(inst, name), getattr(full, name)
        np.testing.assert_array_equal(a[:, m], b[:, m])
        assert np.all(a[:, ~m] == 0), name
    for name in ("Dbar", "Rmax_bs", "Rmax_s", "R_ss", "R_sb", "c", "alpha"):
        np.testing.assert_array_equal(getattr(inst, name), getattr(full, name))


@pytest.mark.parametrize("seed", [0, 4])
def test_reach_graph_is_connected_over_present_links(seed):
    inst = _reach(ues=40, bss=9, dcs=4, reach=2, seed=seed)
    g = inst.graph()
    assert nx.is_connected(g)
    on = inst.link_mask
    for u, v in inst.graph_edges:
        if u.startswith("bs") and v.startswith("ue"):
            assert on[int(v[2:]), int(u[2:])], (u, v)
    for n in range(inst.N):  # every UE can talk to one of its BSs
        assert any(x.startswith("bs") for x in g.neighbors(f"ue{n}"))


def test_reach_at_least_B_is_the_preset():
    a = make_instance("small", seed=2)
    b = make_instance("small", seed=2, reach=a.B)
    assert b.links is None and json.dumps(a.to_dict()) == json.dumps(b.to_dict())
    assert "links" not in a.to_dict()  # full-link files read as before the field existed


@pytest.mark.parametrize("reach", [0, -1, 1.5])
def test_bad_reach(reach):
    with pytest.raises(InstanceError, match="reach"):
        make_instance("small", reach=reach)


def test_cli_generate_reach(tmp_path, capsys):
    out = tmp_path / "net.json"
    assert main(["network", "generate", "--preset", "paper", "--ues", "50", "--bss", "10",
                 "--dcs", "5", "--rounds", "2", "--reach", "3", "--out", str(out)]) == 0
    inst = Instance.load(out)
    assert [len(x) for x in inst.links] == [3] * 50
    assert main(["network", "show", str(out)]) == 0
    assert "UE-BS links: 150 of 500" in capsys.readouterr().out
    assert main(["network", "generate", "--preset", "paper", "--reach", "0",
                 "--out", str(tmp_path / "x.json")]) == 2
    assert "--reach" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


# ---------------------------------------------------------------------- instance format
def test_links_round_trip(tmp_path):
    inst = _reach("small", reach=1)
    inst.save(tmp_path / "i.json")
    back = Instance.load(tmp_path / "i.json")
    assert back.links == inst.links
    np.testing.assert_array_equal(back.link_mask, inst.link_mask)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["links"].__setitem__(0, []), "UE 0 has no link"),
    (lambda d: d["links"].__setitem__(1, [0, 9]), "invalid BS index 9"),
    (lambda d: d["links"].__setitem__(1, [0, 0]), "repeats a BS"),
    (lambda d: d.__setitem__("links", [[0]]), "field 'links' must be a list of 4"),
    (lambda d: d.__setitem__("links", "all"), "field 'links'"),
])
def test_bad_links_name_the_field(mutate, needle):
    d = _reach("small", reach=1).to_dict()
    mutate(d)
    with pytest.raises(InstanceError, match=needle):
        Instance.from_dict(d)


def test_rate_on_absent_link_is_refused():
    inst = _reach("small", reach=1)
    n = 0
    b = next(b for b in range(inst.B) if b not in inst.links[n])
    for name, idx in (("R_nb", (1, n, b)), ("P_nb", (0, n, b)), ("R_bn", (2, b, n))):
        d = inst.to_dict()
        arr = np.array(d[name])
        arr[idx] = 5e7
        d[name] = arr.tolist()
        with pytest.raises(InstanceError, match=rf"'{name}'.*absent link \(UE {n} - BS {b}"):
            Instance.from_dict(d)
    d = inst.to_dict()  # a zero rate on a present link is still refused
    arr = np.array(d["R_nb"])
    arr[0, n, inst.links[n][0]] = 0.0
    d["R_nb"] = arr.tolist()
    with pytest.raises(InstanceError, match="field 'R_nb' has invalid value 0.0"):
        Instance.from_dict(d)
    d = inst.to_dict()  # a graph edge over an absent link
    d["graph_edges"] = d["graph_edges"] + [[f"bs{b}", f"ue{n}"]]
    with pytest.raises(InstanceError, match="over an absent UE-BS link"):
        Instance.from_dict(d)


# ---------------------------------------------------------------------- evaluator
def _full_twin(inst: Instance, rate: float = 3e6) -> Instance:
    """The same instance with every link present: absent links get `rate` (and power 0.2 W)."""
    on = inst.link_mask
    R_nb, P_nb, R_bn = inst.R_nb.copy(), inst.P_nb.copy(), inst.R_bn.copy()
    R_nb[:, ~on], P_nb[:, ~on], R_bn[:, ~on.T] = rate, 0.2, rate
    return inst.copy(links=None, R_nb=R_nb, P_nb=P_nb, R_bn=R_bn)


def test_evaluate_ignores_unused_absent_links(rand_sol):
    """A solution over present links only: the same objective whatever the absent rates."""
    inst = _reach("paper", ues=12, bss=5, dcs=3, reach=2)
    twin = _full_twin(inst)
    for k in range(3):
        sol = rand_sol(inst, np.random.default_rng(k), style=["mixed", "full", "sparse"][k])
        ev, ev2 = evaluate(inst, sol), evaluate(twin, sol)
        assert ev.feasible and ev2.feasible
        assert ev.objective == pytest.approx(ev2.objective, rel=1e-13)


def test_evaluate_rejects_an_absent_link(rand_sol):
    inst = _reach("small", reach=1)
    n = 2
    b = next(b for b in range(inst.B) if b not in inst.links[n])
    for field in ("uplink_bs", "downlink_bs", "rho_nb"):
        sol = rand_sol(inst, np.random.default_rng(1))
        assert evaluate(inst, sol).feasible
        r = sol.rounds[1]
        if field == "rho_nb":
            r.rho_nb[n] *= 0.5
            r.rho_nb[n, b] = 0.1
        else:
            getattr(r, field)[n] = b
        ev = evaluate(inst, sol)
        assert not ev.feasible
        assert any(name.startswith("t1:") and "absent" in name and f"[{n}" in name
                   for name, _ in ev.violations), ev.violations
        assert math.isinf(ev.objective)  # an absent link has no rate: infinite delay


def test_cli_evaluate_rejects_an_absent_link(tmp_path, rand_sol):
    inst = _reach("small", reach=1)
    sol = rand_sol(inst, np.random.default_rng(0))
    inst.save(tmp_path / "net.json")
    sol.save(tmp_path / "ok.json")
    assert main(["evaluate", str(tmp_path / "net.json"), str(tmp_path / "ok.json")]) == 0
    b = next(b for b in range(inst.B) if b not in inst.links[0])
    sol.rounds[0].uplink_bs[0] = b
    sol.save(tmp_path / "bad.json")
    assert main(["evaluate", str(tmp_path / "net.json"), str(tmp_path / "bad.json"),
                 "--json", str(tmp_path / "ev.json")]) == 1
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert any("uplink_bs on an absent link" in v["constraint"] for v in ev["violations"])


# ---------------------------------------------------------------------- model
def _count(m, ctype):
    return sum(1 for _ in m.component_data_objects(ctype, active=True))


@pytest.mark.parametrize("copies", [True, False])
def test_model_shrinks_by_the_absent_links(copies):
    """Each absent link and round removes rho_nb, I_nb, I_bn of its UE and, with copies, the
    BS's copies of rho_nb and I_bn and every DC's copy of rho_nb: 5 + S variables (3 compact)."""
    inst = _reach("paper", ues=12, bss=5, dcs=3, reach=2)
    twin = _full_twin(inst)
    absent = int((~inst.link_mask).sum())
    a = build_problem(inst, copies=copies)
    b = build_problem(twin, copies=copies)
    per = (5 + inst.S) if copies else 3
    assert _count(b, pyo.Var) - _count(a, pyo.Var) == inst.T * absent * per
    # rows: dB_epi and eNB_epi at the BS, consensus of the copies (BS rho_nb, every DC's
    # rho_nb, BS I_bn)
    rows = (2 + (1 + inst.S + 1)) if copies else 2
    assert _count(b, pyo.Constraint) - _count(a, pyo.Constraint) == inst.T * absent * rows


@pytest.mark.parametrize("copies", [True, False])
@pytest.mark.parametrize("bound", ["corollary", "general"])
def test_model_agrees_with_evaluator_on_absent_links(copies, bound, rand_sol):
    inst = _reach("paper", ues=12, bss=5, dcs=3, reach=2, seed=5)
    m = build_problem(inst, bound=bound, copies=copies)
    for k, style in enumerate(("mixed", "full", "sparse")):
        sol = rand_sol(inst, np.random.default_rng([k, 9]), style=style)
        check_agreement(m, inst, sol, bound)
        back = extract_solution(m)
        for r, q in zip(sol.rounds, back.rounds):
            np.testing.assert_allclose(q.rho_nb, r.rho_nb, rtol=1e-12)
            np.testing.assert_array_equal(q.uplink_bs, r.uplink_bs)
            np.testing.assert_array_equal(q.downlink_bs, r.downlink_bs)


# ---------------------------------------------------------------------- solvers
def _forced_twin_nlp(inst):
    """FixedNLP on the full-link twin with every absent link's rho forced to 0."""
    from cefl_opt.solvers.centralized import FixedNLP
    twin = _full_twin(inst)
    nlp = FixedNLP(twin)
    on = inst.link_mask
    for n in range(inst.N):
        for (t, b), v in nlp.model.ue[n].rho.items():
            if not on[n, b]:
                v.fix(0.0)
    return nlp


def test_brute_force_equals_full_links_with_absent_forced_to_zero():
    """Exhaustive Ipopt over every binary choice on links only equals the same enumeration on
    the full-link twin restricted to present links with the absent rho fixed at 0."""
    import itertools

    from cefl_opt.solvers.centralized import exhaustive
    inst = make_instance("tiny", ues=1, bss=3, rounds=1, reach=2, seed=1)
    best, sol, count = exhaustive(inst)
    assert count == inst.S * 2 ** 2
    assert evaluate(inst, sol).feasible
    nlp = _forced_twin_nlp(inst)
    ref = reference_solution(inst).rounds[0]
    best2 = math.inf
    links = inst.ue_links()
    for s in range(inst.S):
        for up in itertools.product(*links):
            for down in itertools.product(*links):
                r = ref.copy()
                r.aggregator, r.uplink_bs, r.downlink_bs = s, np.array(up), np.array(down)
                sol2, _st, obj = nlp.solve([r])
                if sol2 is not None:
                    best2 = min(best2, obj)
    assert best == pytest.approx(best2, rel=1e-6)


@pytest.mark.parametrize("method", ["greedy-rate", "no-offload",
                                    pytest.param("ipopt-enum", marks=pytest.mark.slow)])
def test_centralised_methods_honour_absent_links(method):
    """Every solution stays on present links, and its objective equals Ipopt's on the
    full-link twin with the absent links forced to 0 for the same binary decisions."""
    from cefl_opt.solvers import base
    inst = _reach("paper", ues=6, bss=3, dcs=2, reach=2, rounds=2, seed=6)
    res = base.solve(inst, method)
    sol = res.solution
    ev = evaluate(inst, sol)
    assert ev.feasible, ev.violations
    if method == "no-offload":
        return
    nlp = _forced_twin_nlp(inst)
    sol2, _st, obj2 = nlp.solve(sol.rounds, warm=sol)
    assert sol2 is not None
    assert res.objective == pytest.approx(obj2, rel=1e-5)


def test_load_solution_on_absent_links_round_trips(rand_sol):
    inst = _reach("small", reach=1)
    m = build_problem(inst, binaries="fixed", fixed=reference_solution(inst), copies=False)
    sol = rand_sol(inst, np.random.default_rng(2))
    load_solution(m, sol)
    assert pyo.value(m.obj) == pytest.approx(evaluate(inst, sol).objective, rel=1e-9)


@pytest.mark.parametrize("method", ["decentralized", "centralized-pd"])
def test_decentralised_methods_honour_absent_links(method):
    """The per-node solver builds on the link-indexed model: its binary solution associates
    and offloads over present links only (evaluate checks both) and is feasible."""
    from cefl_opt.solvers import base
    inst = make_instance("small", reach=1, seed=6)
    res = base.solve(inst, method, max_outer=30)
    ev = evaluate(inst, res.solution)
    assert ev.feasible, ev.violations
    on = inst.link_mask
    for r in res.solution.rounds:
        assert on[np.arange(inst.N), r.uplink_bs].all() and on[np.arange(inst.N), r.downlink_bs].all()
        assert np.all(r.rho_nb[~on] == 0)
