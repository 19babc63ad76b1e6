"""Orchestration pictures: the cost breakdown (`cefl_opt.orchestration`) against hand values and
the evaluator's totals, the figures' flows and panels (`cefl_opt.orchestration_plot`) and the
`cefl-opt plot` command."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import hand_instance, hand_solution, random_solution

from cefl_opt import cli
from cefl_opt.generator import make_instance
from cefl_opt.orchestration import PARTS, cost_table, round_summary
from cefl_opt.orchestration_plot import (MAX_WIDTH, layout, plot_costs, plot_orchestration,
                                         solution_labels)
from cefl_opt.system import evaluate, reference_solution


def run(argv, capsys):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def node(costs: pd.DataFrame, t: int, name: str) -> pd.Series:
    return costs[(costs["round"] == t) & (costs["node"] == name)].iloc[0]


# ---------------------------------------------------------------------- cost breakdown
def test_cost_parts_by_hand():
    """Round 0 of the hand instance (conftest): aggregator DC 1, both UEs up/down via BS 0."""
    c = cost_table(hand_instance(), hand_solution())
    ue0, bs0, dc0, dc1 = (node(c, 0, n) for n in ("ue0", "bs0", "dc0", "dc1"))
    # UE 0 keeps 500 points: dP = c g m D / f = 100*2*0.5*500/5e8; EP = c g m D f^2 alpha/2
    assert ue0["delay_computation_s"] == pytest.approx(1e-4, rel=1e-12)
    assert ue0["energy_computation_J"] == pytest.approx(125.0, rel=1e-12)
    # gradient: beta_M/R_nb + beta_M/R_bs[0, 1] = 1e6/1e6 + 1e6/2.5e8
    assert ue0["delay_aggregation_s"] == pytest.approx(1.004, rel=1e-12)
    # data upload: beta_D Dbar rho / R_nb * P_nb = 1e3*1000*0.5/1e6 * 0.2
    assert ue0["energy_upload_J"] == pytest.approx(0.1, rel=1e-12)
    assert ue0["delay_upload_s"] == 0.0 and ue0["delay_broadcast_s"] == 0.0
    # a DC waits for the slowest upload max(0.5, 1e3*2000*0.25/2e6) and its slowest relay
    # (D_b = 1000): 1e3*1000*0.6/5e8 into DC 0, 1e3*1000*0.4/2.5e8 into DC 1
    assert dc0["delay_upload_s"] == dc1["delay_upload_s"] == pytest.approx(0.5, rel=1e-12)
    assert dc0["delay_relay_s"] == pytest.approx(1.2e-3, rel=1e-12)
    assert dc1["delay_relay_s"] == pytest.approx(1.6e-3, rel=1e-12)
    # BS 0 relays both routes: 1.2e-3 s * 2 W + 1.6e-3 s * 4 W
    assert bs0["energy_relay_J"] == pytest.approx(8.8e-3, rel=1e-12)
    # DC 0 sends its gradient to the aggregator 1e6/1e7, gets the model back 1e6/2e7
    assert dc0["delay_aggregation_s"] == pytest.approx(0.1, rel=1e-12)
    assert dc0["delay_broadcast_s"] == pytest.approx(0.05, rel=1e-12)
    assert dc1["delay_aggregation_s"] == 0.0 and bool(dc1["aggregator"])
    # BS 0: model from DC 1, 1e6/2e8, then to its slowest UE max(1e6/4e6, 1e6/5e6)
    assert bs0["delay_broadcast_s"] == pytest.approx(0.255, rel=1e-12)


CASES = [("hand", None, "mixed"), ("small", 2, "mixed"), ("small", 3, "none"),
         ("small", 4, "full"), ("paper-reach", 5, "sparse")]


def case(name, seed, style):
    if name == "hand":
        return hand_instance(), hand_solution()
    inst = (make_instance("small", seed=seed) if name == "small"
            else make_instance("paper", rounds=2, seed=seed, reach=3))
    return inst, random_solution(inst, np.random.default_rng(seed), style=style)


@pytest.mark.parametrize("name,seed,style", CASES)
def test_cost_parts_sum_to_the_evaluator_totals(name, seed, style):
    inst, sol = case(name, seed, style)
    ev, c = evaluate(inst, sol), cost_table(inst, sol)
    assert len(c) == inst.T * (inst.N + inst.B + inst.S)
    for t, rt in enumerate(ev.rounds):
        ct = c[c["round"] == t]
        by = lambda kind, col: ct.loc[ct["kind"] == kind, col].sum()  # noqa: E731
        for got, want in ((by("ue", "energy_upload_J"), rt["E_D_ue"]),
                          (by("bs", "energy_relay_J"), rt["E_D_bs"]),
                          (by("ue", "energy_computation_J"), rt["E_P_ue"]),
                          (by("dc", "energy_computation_J"), rt["E_P_dc"]),
                          (ct["energy_aggregation_J"].sum(), rt["E_A"]),
                          (ct["energy_broadcast_J"].sum(), rt["E_R"]),
                          (ct["energy_J"].sum(), rt["energy_raw"]),
                          (ct["energy_weighted_J"].sum(), rt["energy"])):
            assert got == pytest.approx(want, rel=1e-12, abs=1e-300)
        # every energy part is the node's; the parts add up to the node's total
        parts = ct[[f"energy_{p}_J" for p in PARTS]].sum(axis=1)
        assert np.allclose(parts, ct["energy_J"], rtol=1e-12, atol=0)
        # delay: the slowest path before the broadcast is dA, the slowest broadcast dR
        assert ct["delay_path_s"].max() == pytest.approx(rt["dA"], rel=1e-12)
        assert ct["delay_broadcast_s"].max() == pytest.approx(rt["dR"], rel=1e-12)
        path = ct[[f"delay_{p}_s" for p in PARTS[:-1]]].sum(axis=1)
        assert np.allclose(path, ct["delay_path_s"], rtol=1e-12, atol=0)
        assert (ct["aggregator"] == (ct["node"] == f"dc{sol.rounds[t].aggregator}")).all()
    s = round_summary(inst, sol)
    assert np.allclose(s["delay s"], [r["delay"] for r in ev.rounds], rtol=1e-12)
    assert np.allclose(s["energy J"], [r["energy"] for r in ev.rounds], rtol=1e-12)


# ---------------------------------------------------------------------- figures
def drawn_widths(ax, gid: str) -> float:
    cols = [c for c in ax.collections if c.get_gid() == gid]
    return float(sum(np.sum(c.get_linewidths()) for c in cols))


@pytest.mark.parametrize("name,seed,style,thin", [("small", 2, "mixed", 40),
                                                   ("small", 4, "sparse", 2),
                                                   ("paper-reach", 5, "mixed", 40),
                                                   ("paper-reach", 5, "full", 10)])
def test_drawn_flows_sum_to_the_solution_data(name, seed, style, thin):
    """Per panel, the UE -> BS flows drawn (line widths / scale) are the data the UEs offload,
    the BS -> DC flows the data the DCs train on (evaluator's D_s), and kept + offloaded is
    every UE's data; also when the UEs are drawn in groups (thin)."""
    import matplotlib.pyplot as plt
    inst, sol = case(name, seed, style)
    other = random_solution(inst, np.random.default_rng(seed + 1), style="sparse")
    fig, drawn = plot_orchestration(inst, [sol, other], thin=thin)
    assert len(drawn) == 2 * inst.T
    widest = max(max([*d["ue_bs"].values(), *d["bs_dc"].values()]) for d in drawn)
    scale = drawn[0]["scale"]
    assert scale * widest == pytest.approx(MAX_WIDTH, rel=1e-12)   # one scale for the figure
    for d, s in zip(drawn, [sol] * inst.T + [other] * inst.T):
        t, r = d["round"], s.rounds[d["round"]]
        rt = evaluate(inst, s).rounds[t]
        offloaded = float((inst.Dbar[t][:, None] * r.rho_nb).sum())
        total = float(inst.Dbar[t].sum())
        assert sum(d["ue_bs"].values()) == pytest.approx(offloaded, rel=1e-9, abs=1e-9)
        assert sum(d["bs_dc"].values()) == pytest.approx(rt["D_s"].sum(), rel=1e-9, abs=1e-9)
        assert sum(d["kept"].values()) + offloaded == pytest.approx(total, rel=1e-9)
        ax = d["ax"]
        assert drawn_widths(ax, "flow-ue-bs") / scale == pytest.approx(offloaded, rel=1e-9,
                                                                        abs=1e-9)
        assert drawn_widths(ax, "flow-bs-dc") / scale == pytest.approx(rt["D_s"].sum(),
                                                                        rel=1e-9, abs=1e-9)
        ue_nodes = {u for u, _ in d["ue_bs"]} | set(d["kept"])
        assert len(ue_nodes) == (len(set(layout(inst).ue_sub)) if inst.N > thin else inst.N)
    plt.close(fig)


def test_associations_drawn_are_the_solution_s():
    """One dashed line per UE to its uplink BS; a dotted one to its downlink BS where that is
    another BS."""
    import matplotlib.pyplot as plt
    inst = make_instance("paper", rounds=2, seed=4)
    sol = random_solution(inst, np.random.default_rng(4))
    sol.rounds[1].downlink_bs = sol.rounds[1].uplink_bs.copy()
    lay = layout(inst)
    fig, drawn = plot_orchestration(inst, [sol])
    for d in drawn:
        r = sol.rounds[d["round"]]
        segs = {gid: [tuple(map(tuple, np.round(seg, 12))) for c in d["ax"].collections
                      if c.get_gid() == gid for seg in c.get_segments()]
                for gid in ("uplink", "downlink")}
        want_up = {(tuple(np.round(lay.pos[f"ue{n}"], 12)), tuple(np.round(lay.pos[f"bs{b}"], 12)))
                   for n, b in enumerate(r.uplink_bs)}
        assert set(segs["uplink"]) == want_up and len(segs["uplink"]) == inst.N
        differ = int((r.downlink_bs != r.uplink_bs).sum())
        assert len(segs["downlink"]) == differ and (differ > 0) == (d["round"] == 0)
    plt.close(fig)


def test_panels_one_per_round_and_solution():
    import matplotlib.pyplot as plt
    inst = make_instance("small", rounds=3, seed=1)
    sols = [reference_solution(inst), random_solution(inst, np.random.default_rng(1))]
    for k in (1, 2):
        fig, drawn = plot_orchestration(inst, sols[:k])
        titled = [a for a in fig.axes if "round" in a.get_title()]
        assert len(titled) == len(drawn) == k * inst.T
        assert {(d["method"], d["round"]) for d in drawn} == {
            (s.method, t) for s in sols[:k] for t in range(inst.T)}
        assert all("objective" in a.get_title() for a in titled)
        plt.close(fig)
        fig, table = plot_costs(inst, sols[:k])
        assert len(fig.axes) == 2 * k * inst.T
        assert len(table) == k * inst.T * (inst.N + inst.B + inst.S)
        plt.close(fig)


def test_layout_is_stable_and_by_sub_network():
    inst = make_instance("paper", rounds=2, seed=3)
    a, b = layout(inst, seed=0), layout(inst, seed=0)
    assert a.pos.keys() == b.pos.keys() and all(np.array_equal(a.pos[k], b.pos[k]) for k in a.pos)
    for n in range(inst.N):     # each node inside its sub-network's disc
        s = inst.ue_subnet[n]
        assert np.linalg.norm(a.pos[f"ue{n}"] - a.centres[s]) <= a.radius
    for b_ in range(inst.B):
        assert np.linalg.norm(a.pos[f"bs{b_}"] - a.centres[inst.bs_subnet[b_]]) <= a.radius
    assert all(np.allclose(a.pos[f"dc{s}"], a.centres[s]) for s in range(inst.S))
    other = layout(inst, seed=1)
    assert any(not np.allclose(a.pos[k], other.pos[k]) for k in a.pos)


def test_repeated_methods_get_numbered_labels():
    inst = make_instance("tiny", seed=0)
    s = [reference_solution(inst), reference_solution(inst), reference_solution(inst)]
    s[2].method = "other"
    assert solution_labels(s) == ["reference #1", "reference #2", "other"]


# ---------------------------------------------------------------------- the command
@pytest.fixture
def files(tmp_path):
    """An instance, two of its solutions and the solution of another instance."""
    inst = make_instance("small", rounds=2, seed=2)
    inst.save(tmp_path / "net.json")
    reference_solution(inst).save(tmp_path / "a.json")
    random_solution(inst, np.random.default_rng(0)).save(tmp_path / "b.json")
    reference_solution(make_instance("small", rounds=3, seed=2)).save(tmp_path / "T3.json")
    twin = make_instance("small", rounds=2, seed=7)     # same sizes, another fingerprint
    reference_solution(twin).save(tmp_path / "seed7.json")
    return tmp_path, inst


def listing(path):
    return sorted(p.name for p in path.iterdir())


def test_plot_writes_both_figures_and_the_table(files, capsys):
    d, inst = files
    rc, out, err = run(["plot", d / "net.json", d / "a.json", d / "b.json", "--out",
                        d / "fig.png", "--csv", d / "costs.csv"], capsys)
    assert rc == 0, err
    assert (d / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (d / "fig_costs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {d / 'fig.png'}" in out and f"wrote {d / 'fig_costs.png'}" in out
    table = pd.read_csv(d / "costs.csv")
    assert list(table["solution"].unique()) == ["reference", "random"]
    want = cost_table(inst, reference_solution(inst))
    got = table[table["solution"] == "reference"].reset_index(drop=True)
    for col in [c for c in want if c.startswith(("delay_", "energy_"))]:
        assert np.allclose(got[col], want[col], rtol=1e-12, atol=0), col
    assert "aggregator" in out and "slowest path" in out
    assert not [p for p in listing(d) if p.endswith(".tmp")]


@pytest.mark.parametrize("preset", ["tiny", "paper"])
def test_plot_the_other_presets(tmp_path, capsys, preset):
    inst = make_instance(preset, seed=1)
    inst.save(tmp_path / "net.json")
    reference_solution(inst).save(tmp_path / "ref.json")
    random_solution(inst, np.random.default_rng(1)).save(tmp_path / "rand.json")
    rc, out, err = run(["plot", tmp_path / "net.json", tmp_path / "ref.json",
                        tmp_path / "rand.json", "--out", tmp_path / "o.png", "--csv",
                        tmp_path / "c.csv"], capsys)
    assert rc == 0, err
    assert len(pd.read_csv(tmp_path / "c.csv")) == 2 * inst.T * (inst.N + inst.B + inst.S)
    assert (tmp_path / "o.png").stat().st_size > 0 and (tmp_path / "o_costs.png").stat().st_size


def test_plot_formats_and_the_same_picture_every_time(files, capsys):
    d, _ = files
    magic = {"svg": b"<?xml", "pdf": b"%PDF", "png": b"\x89PNG"}
    for ext in ("svg", "pdf", "png"):
        first = None
        for k in range(2):
            out = d / f"f{k}.{ext.upper() if ext == 'pdf' else ext}"
            rc, _, err = run(["plot", d / "net.json", d / "a.json", "--out", out], capsys)
            assert rc == 0, err
            data = out.read_bytes()
            assert data.startswith(magic[ext])
            first = data if first is None else first
        assert data == first, ext     # same instance, solutions and seed: the same bytes


@pytest.mark.parametrize("argv,needle", [
    (["T3.json", "--out", "o.png"], "has T = 3, the instance 'small-N4-B2-S2-T2-seed2' has T = 2"),
    (["seed7.json", "--out", "o.png"], "solution 'seed7.json': the solution was computed for "
                                       "another instance"),
    (["a.json", "missing.json", "--out", "o.png"], "solution file 'missing.json' does not exist"),
    (["net.json", "--out", "o.png"], "field 'format' is 'cefl-instance/2'"),
    (["a.json", "--out", "o.jpg"], "option '--out' value 'o.jpg' has an unknown figure format "
                                   ".jpg"),
    (["a.json", "--out", "o"], "has an unknown figure format (no extension)"),
    (["a.json", "--out", "o.png", "--costs", "c.gif"], "option '--costs' value 'c.gif'"),
    (["a.json", "--out", "a.png", "--costs", "a.png"], "is also the value of '--out'"),
    (["a.json", "--out", "o.png", "--csv", "a.json"], "is one of the input files"),
    (["a.json", "--out", "o.png", "--thin", "0"], "must be an integer >= 1"),
])
def test_plot_refuses_bad_input_and_writes_nothing(files, capsys, monkeypatch, argv, needle):
    d, _ = files
    monkeypatch.chdir(d)
    before = listing(d)
    rc, out, err = run(["plot", "net.json", *argv], capsys)
    assert rc == 2
    assert err.startswith("cefl-opt: error: ") and err.count("\n") == 1 and needle in err, err
    assert listing(d) == before


def test_plot_draws_another_instances_solution_only_when_asked(files, capsys, monkeypatch):
    d, _ = files
    monkeypatch.chdir(d)
    rc, out, err = run(["plot", "net.json", "seed7.json", "--out", "o.png",
                        "--allow-other-instance"], capsys)
    assert rc == 0, err
    assert "seed7.json: note: the solution was computed for another instance" in err
    assert (d / "o.png").exists()


def test_plot_refuses_a_missing_instance(files, capsys):
    d, _ = files
    rc, _, err = run(["plot", d / "nope.json", d / "a.json", "--out", d / "o.png"], capsys)
    assert rc == 2 and "instance file" in err and "does not exist" in err
    assert not (d / "o.png").exists()


def test_plot_accepts_a_solution_that_names_no_instance(files, capsys):
    """Files written before solutions recorded their instance's fingerprint: the sizes must
    match, and do; a note says that the identity could not be checked."""
    d, _ = files
    rc, _, err = run(["plot", d / "net.json", d / "b.json", "--out", d / "o.png"], capsys)
    assert rc == 0 and "b.json: note: the solution records no instance fingerprint" in err


def test_plot_warns_about_an_infeasible_solution_and_refuses_an_undefined_one(files, capsys):
    d, inst = files
    bad = reference_solution(inst)
    bad.rounds[0].f = inst.f_max * 2                    # above f_max: infeasible, defined
    bad.save(d / "infeasible.json")
    rc, _, err = run(["plot", d / "net.json", d / "infeasible.json", "--out", d / "i.png"],
                     capsys)
    assert rc == 0 and "warning: solution" in err and "is infeasible" in err
    bad.rounds[0].m_ue[:] = 0.0                         # m = 0: the ML bound is undefined
    bad.save(d / "undefined.json")
    rc, _, err = run(["plot", d / "net.json", d / "undefined.json", "--out", d / "u.png"],
                     capsys)
    assert rc == 2 and "objective is undefined" in err and not (d / "u.png").exists()


def test_plot_refuses_a_solution_of_infinite_cost(tmp_path, capsys):
    inst = make_instance("small", rounds=1, seed=0, reach=1)
    inst.save(tmp_path / "net.json")
    sol = reference_solution(inst)
    n, b = map(int, np.argwhere(~inst.link_mask)[0])
    sol.rounds[0].rho_nb[n, b] = 0.1                    # data over an absent link: infinite delay
    sol.save(tmp_path / "absent.json")
    rc, _, err = run(["plot", tmp_path / "net.json", tmp_path / "absent.json", "--out",
                      tmp_path / "o.png"], capsys)
    assert rc == 2 and "has an infinite delay or energy" in err
    assert listing(tmp_path) == ["absent.json", "net.json"]


def test_plot_does_not_import_torch(files):
    d, _ = files
    code = ("import sys; from cefl_opt import cli; "
            f"rc = cli.main(['plot', r'{d / 'net.json'}', r'{d / 'a.json'}', '--out', "
            f"r'{d / 't.png'}']); print(rc, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.split()[-2:] == ["0", "False"], proc.stdout + proc.stderr


def test_a_200_ue_instance_is_drawn_in_groups(tmp_path, capsys):
    """200 UEs, 40 BSs, 10 DCs: one UE group per sub-network, every BS -> DC flow and the
    aggregator; the flows still sum to the data."""
    import matplotlib.pyplot as plt
    inst = make_instance("paper", ues=200, bss=40, dcs=10, rounds=2, seed=0, reach=5)
    sol = random_solution(inst, np.random.default_rng(0), style="sparse")
    fig, drawn = plot_orchestration(inst, [sol])
    for d in drawn:
        r = sol.rounds[d["round"]]
        assert set(d["kept"]) == {f"ues{s}" for s in range(10)}
        assert sum(d["bs_dc"].values()) == pytest.approx(
            (inst.Dbar[d["round"]] @ r.rho_nb).sum(), rel=1e-9)
        assert len(d["bs_dc"]) == int((r.rho_bs > 0).sum())
    plt.close(fig)
    fig, table = plot_costs(inst, [sol])
    assert len(table) == inst.T * (10 + inst.B + inst.S)      # UEs summarised per sub-network
    plt.close(fig)


def test_the_thinning_defaults_agree():
    from cefl_opt.cli.plot import DEFAULT_THIN
    from cefl_opt.orchestration_plot import UE_THIN
    assert DEFAULT_THIN == UE_THIN


def test_several_outputs_are_written_all_or_none(tmp_path):
    from cefl_opt.io import write_all_atomic
    (tmp_path / "file").write_text("a file, not a folder")
    with pytest.raises(OSError):
        write_all_atomic([(tmp_path / "a.png", b"x"), (tmp_path / "file" / "b.csv", "y")])
    assert listing(tmp_path) == ["file"]                 # a.png was staged, then removed
    write_all_atomic([(tmp_path / "a.png", b"x"), (tmp_path / "b.csv", "y")])
    assert (tmp_path / "a.png").read_bytes() == b"x" and (tmp_path / "b.csv").read_text() == "y"
    assert listing(tmp_path) == ["a.png", "b.csv", "file"]
