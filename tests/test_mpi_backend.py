"""MPI backend of the decentralised message passing (`solvers/mpi_backend.py`;
docs/scale-mpi.md, 'MPI backend').

The MPI runs are subprocesses of `mpiexec` (from the venv, next to the interpreter) with a
timeout, so a hang fails the test instead of blocking the suite. Truth: `LocalComm` (all nodes in
one process) computes the same inboxes, broadcasts, reductions and per-node message counts.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cefl_opt.generator import make_instance
from cefl_opt.solvers.dec_comm import graph_adjacency
from cefl_opt.solvers.mpi_backend import (MpiUnavailable, mpi_world, node_memory,
                                          node_weights, node_work, partition_nodes)

HERE = Path(__file__).parent
MPIEXEC = Path(sys.executable).parent / "mpiexec"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not in the venv")
# under pytest-xdist every mpiexec launch runs on one worker, one at a time (`--dist
# loadgroup`): the launches' checks of hydra's files in /tmp see only their own; the tests
# that launch nothing run anywhere
one_launch_at_a_time = pytest.mark.xdist_group("mpi")


def _adj(inst):
    return graph_adjacency(inst.graph(), inst.node_names())


def _cut(adj, parts):
    return sum(int(parts[a] != parts[b]) for a in range(len(adj)) for b in adj[a]) // 2


@pytest.mark.parametrize("nparts", [2, 3, 4])
def test_partition_keeps_neighbours_together_and_balances_work(nparts):
    inst = make_instance("paper", ues=200, bss=40, dcs=10, rounds=2, reach=5, seed=2)
    adj = _adj(inst)
    w = node_work(inst)
    parts = partition_nodes(adj, nparts, w)
    load = np.bincount(parts, weights=w, minlength=nparts)
    assert (np.bincount(parts, minlength=nparts) > 0).all()
    # balanced up to one node's work (METIS moves whole nodes)
    assert load.max() <= load.sum() / nparts * 1.03 + w.max()
    # neighbours together: far fewer cut edges than a random balanced assignment
    rnd = np.random.default_rng(0).permutation(np.arange(len(adj)) % nparts)
    assert _cut(adj, parts) < 0.4 * _cut(adj, rnd)
    assert np.array_equal(parts, partition_nodes(adj, nparts, w))  # deterministic


@pytest.mark.parametrize("size, seed", [((400, 20, 20), 4), ((200, 40, 10), 2)])
def test_partition_of_two_loads_has_the_smallest_worst_share(size, seed):
    """With (V, 2) weights (work, memory) the partition's largest share of either load on one
    rank is no larger than that of METIS balancing the work alone or the memory alone; where
    the work alone leaves the memory unbalanced (UEs are light in work, heavy in memory), it
    is strictly smaller."""
    ues, bss, dcs = size
    inst = make_instance("paper", ues=ues, bss=bss, dcs=dcs, rounds=2, reach=5, seed=seed)
    adj = _adj(inst)
    W = node_weights(inst)
    assert np.array_equal(W[:, 0], node_work(inst)) and np.array_equal(W[:, 1], node_memory(inst))

    def worst(parts):
        return max(np.bincount(parts, weights=W[:, j] / W[:, j].sum()).max() for j in (0, 1))
    got = worst(partition_nodes(adj, 2, W))
    alone = [worst(partition_nodes(adj, 2, W[:, j])) for j in (0, 1)]
    assert got <= min(alone) + 1e-12
    if alone[0] > 0.6:
        assert got < alone[0] - 0.1


def test_partition_refuses_more_ranks_than_nodes_and_fills_every_part():
    inst = make_instance("tiny", seed=0)
    adj = _adj(inst)
    with pytest.raises(ValueError, match="6 MPI ranks for 5 network nodes"):
        partition_nodes(adj, 6)
    parts = partition_nodes(adj, 5)
    assert sorted(parts.tolist()) == [0, 1, 2, 3, 4]


def test_node_work_counts_the_block_variables():
    """node_work equals the number of variables of each node block of the Pyomo model."""
    from cefl_opt.models import build_problem, node_blocks, node_variables
    inst = make_instance("paper", ues=6, bss=3, dcs=2, rounds=2, reach=2, seed=1)
    m = build_problem(inst)
    got = [len(node_variables(b)) for b in node_blocks(m).values()]
    assert node_work(inst).tolist() == got


def test_backend_mpi_outside_mpiexec_is_refused(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("PMI", "PMIX", "OMPI_", "HYDRA", "MPI_LOCAL")):
            monkeypatch.delenv(k)
    with pytest.raises(MpiUnavailable, match="mpiexec -n R"):
        mpi_world()


def _launch_env() -> dict[str, str]:
    """This environment without a launcher's variables, for a fresh `mpiexec` launch."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI", "PMIX", "HYDRA", "OMPI_", "MPI_LOCAL"))}


def _mpirun(n, *args, timeout=240):
    return subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable,
                           str(HERE / "mpi" / "comm_check.py"), *args],
                          capture_output=True, text=True, timeout=timeout, env=_launch_env())


def _comm_cases():
    """Each network on 2 and 3 ranks; in the default suite each network once, both rank counts
    among them (every launch costs a start-up per rank), the other three `slow`."""
    cases = [["tiny"], ["paper"],
             ["paper", "--ues", "60", "--bss", "12", "--dcs", "4", "--reach", "3"]]
    for i, case in enumerate(cases):
        for ranks in (2, 3):
            yield pytest.param(ranks, case, id=f"{ranks}-{'-'.join(case)}",
                               marks=() if ranks == (3 if i % 2 == 0 else 2) else pytest.mark.slow)


@needs_mpiexec
@one_launch_at_a_time
@pytest.mark.parametrize("ranks, case", list(_comm_cases()))
def test_mpi_comm_equals_local_comm(ranks, case):
    p = _mpirun(ranks, *case)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"ranks {ranks}," in p.stdout and "OK" in p.stdout


@needs_mpiexec
@one_launch_at_a_time
def test_mpi_comm_equals_local_comm_with_relaying_ranks():
    """4 ranks on a sparse network: the rank graph's diameter is 2, so values cross a rank that
    relays them (sent on from what it received) and a reduce takes two rounds; every
    collective still equals LocalComm's bit for bit."""
    p = _mpirun(4, "paper", "--ues", "60", "--bss", "20", "--dcs", "4", "--reach", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ranks 4," in p.stdout and "rank hops 2" in p.stdout and "OK" in p.stdout


@needs_mpiexec
@one_launch_at_a_time
@pytest.mark.slow   # six start-ups; in the default suite: test_mpi_solve.py's
# test_mpi_solve_more_ranks_than_nodes_exits_2 (the same refusal through the command line)
def test_more_ranks_than_nodes_exits_2_without_hanging():
    p = _mpirun(6, "tiny", timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "6 MPI ranks for 5 network nodes" in p.stderr


def test_bench_scale_generation_only(tmp_path):
    """benchmarks/bench_scale.py end to end with generation only (the solves are measured by
    the benchmark itself): one row per size, block-form variables as `node_work` counts them."""
    p = subprocess.run([sys.executable, "-m", "benchmarks.bench_scale", "--sizes",
                        "8/3/2,30/8/3", "--reach", "2", "--measures", "none", "--out-dir",
                        str(tmp_path)], cwd=HERE.parent, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    import pandas as pd
    df = pd.read_csv(tmp_path / "scale.csv")
    assert df.measure.tolist() == ["gen", "gen"] and (df.rc == 0).all()
    big = make_instance("paper", ues=30, bss=8, dcs=3, rounds=2, reach=2, seed=0)
    assert df.vars_block.tolist()[1] == int(node_work(big).sum())
    assert df.links.tolist() == [8 * 3, 30 * 2]   # 8/3/2 is below the paper size: every link
    assert (tmp_path / "scale.png").stat().st_size > 0


@pytest.mark.slow
def test_bench_scale_passes_constants_to_the_decentralised_runs(tmp_path):
    """`--set KEY=VALUE` reaches every `decentralized` run (the search off: no aggregator
    trial, no refinement round, one candidate) and is recorded; a constant the solver refuses
    is recorded as that run's rc 2, the benchmark itself ends 0. The `base` measure runs the
    same launch on the 4 / 2 / 2 instance first."""
    import pandas as pd
    off = ["--set", "agg_passes=0", "--set", "candidates=1", "--set", "refine_rounds=0"]
    for sets, sub in ((off, "off"), (["--set", "agg_screen=0"], "bad")):
        p = subprocess.run([sys.executable, "-m", "benchmarks.bench_scale", "--sizes", "8/3/2",
                            "--measures", "dec,base" if sub == "off" else "dec", "--ranks", "1",
                            *sets, "--out-dir", str(tmp_path / sub)], cwd=HERE.parent,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    off_df = pd.read_csv(tmp_path / "off" / "scale.csv").set_index("measure")
    assert off_df.loc["base", "size"] == "4/2/2" and off_df.loc["base", "rc"] == 0
    assert off_df.loc["base", "peak_rss_MB"] > 0
    assert off_df.loc["dec", "rc"] == 0
    assert off_df.loc["dec", "constants"] == "agg_passes=0 candidates=1 refine_rounds=0"
    info = json.loads(next((tmp_path / "off").rglob("*-dec-1.json")).read_text())["info"]
    assert info["aggregator_trials"] == 0 and info["refine_rounds"] == 0
    assert len(info["candidate_objectives"]) == 1
    bad = pd.read_csv(tmp_path / "bad" / "scale.csv").set_index("measure")
    assert bad.loc["dec", "rc"] == 2 and "agg_screen" in bad.loc["dec", "error"]


def test_bench_scale_ratio_of_medians():
    """The 1.5x comparison: medians of the alternating repeats, per size and rank count."""
    import pandas as pd
    from benchmarks.bench_scale import ratios
    ms = 1e-3
    d, c = "decentralized_per_iter", "centralized_pd_per_iter"      # the measures' names
    rows = [("a", d, 1, 2 * ms), ("a", c, 1, 2 * ms), ("a", d, 1, 3 * ms),
            ("a", c, 1, 2 * ms), ("a", d, 1, 10 * ms), ("a", c, 1, 4 * ms),
            ("a", d, 2, 5 * ms), ("b", d, 1, 1 * ms), ("b", c, 1, None),
            ("c", d, 1, 9 * ms)]                          # c: no centralised run, no ratio
    df = pd.DataFrame(rows, columns=["size", "measure", "ranks", "s_per_inner"]).assign(rc=0)
    r = ratios(df).set_index(["size", "ranks"])
    assert sorted(r.index) == [("a", 1), ("a", 2)]
    assert r.loc[("a", 1), "repeats"] == 3
    assert r.loc[("a", 1), "ratio"] == pytest.approx(3 / 2)
    assert r.loc[("a", 1), "ratio_min"] == pytest.approx(2 / 4)
    assert r.loc[("a", 1), "ratio_max"] == pytest.approx(10 / 2)
    assert r.loc[("a", 2), "ratio"] == pytest.approx(5 / 2)
    assert r.loc[("a", 1), "decentralized_ms_per_inner"] == pytest.approx(3.0)   # median, ms
    assert r.loc[("a", 1), "centralized_pd_ms_per_inner"] == pytest.approx(2.0)


def test_bench_scale_memory_table_and_even_split():
    """`memory_table`: per size and rank count, the largest rank's peak over one process's
    (medians of the repeats), and the even split's peak base_R + (one - base_1) / R from the
    `base` runs, by hand; a size without a one-process run, a failed run and (without `base`
    runs) the even split are left out."""
    import pandas as pd
    from benchmarks.bench_scale import memory_table
    rows = [("4/2/2", "base", 1, 100.0, 0), ("4/2/2", "base", 2, 130.0, 0),
            ("a", "dec", 1, 300.0, 0), ("a", "dec", 1, 340.0, 0), ("a", "dec", 2, 250.0, 0),
            ("a", "dec", 2, 9999.0, 1), ("a", "dec", 4, 190.0, 0),
            ("b", "dec", 2, 80.0, 0), ("a", "gen", 1, 50.0, 0)]
    df = pd.DataFrame(rows, columns=["size", "measure", "ranks", "peak_rss_MB", "rc"])
    t = memory_table(df).set_index(["size", "ranks"])
    assert sorted(t.index) == [("a", 2), ("a", 4)]
    assert t.loc[("a", 2), "one_MB"] == 320.0 and t.loc[("a", 2), "largest_rank_MB"] == 250.0
    assert t.loc[("a", 2), "ratio"] == pytest.approx(250 / 320)
    assert t.loc[("a", 2), "even_split_MB"] == pytest.approx(130 + (320 - 100) / 2)
    assert t.loc[("a", 2), "even_split_ratio"] == pytest.approx(240 / 320)
    assert np.isnan(t.loc[("a", 4), "even_split_MB"])      # no 4-rank base run
    assert "even_split_MB" not in memory_table(df[df.measure != "base"])


def test_bench_scale_refuses_an_unknown_measure(capsys):
    """A measure name that the sweep does not know (such as an old one) is an error naming it,
    exit 2, not a sweep that silently skips it."""
    from benchmarks import bench_scale
    with pytest.raises(SystemExit) as e:
        bench_scale.main(["--measures", "floor,dec5", "--sizes", "8/3/2"])
    assert e.value.code == 2
    assert "unknown dec5" in capsys.readouterr().err
    assert set(bench_scale.MEASURES) == {"floor", "dec", "decentralized_per_iter",
                                         "centralized_pd_per_iter", "ipopt", "base"}


@needs_mpiexec
@one_launch_at_a_time
@pytest.mark.slow
def test_exchanges_between_two_ranks_are_counted_and_batched():
    """tests/mpi/exchange_check.py: a broadcast / reduce / max is one exchange between two
    ranks with the bytes counted from the plan; an inner solve of `it` iterations costs
    1 + 2 it + (its KKT tests) exchanges (the old per-level rounds: about 12 per iteration)."""
    p = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable,
                        str(HERE / "mpi" / "exchange_check.py")],
                       capture_output=True, text=True, timeout=400, env=_launch_env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK" in p.stdout and "MISMATCH" not in p.stdout


@needs_mpiexec
@one_launch_at_a_time
@pytest.mark.parametrize("site", ["allgather", pytest.param("snapshot", marks=pytest.mark.slow),
                                  pytest.param("exchange", marks=pytest.mark.slow),
                                  pytest.param("gather", marks=pytest.mark.slow)])
def test_a_rank_waiting_for_another_hears_ctrl_c(site):
    """tests/mpi/wait_check.py: rank 0 waits in a collective for rank 1, which sleeps; Ctrl-C
    (SIGINT to the launch's process group) reaches both: each prints its line and the launch
    exits 130. A rank deaf inside a blocking MPI call would print nothing and be killed."""
    import signal
    import time
    p = subprocess.Popen([str(MPIEXEC), "-n", "2", sys.executable,
                          str(HERE / "mpi" / "wait_check.py"), site],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=_launch_env())
    try:
        ready = {p.stdout.readline().strip() for _ in range(2)}
        assert ready == {"rank 0 ready", "rank 1 ready"}, ready
        time.sleep(1.0)                  # rank 0 inside the collective, rank 1 asleep
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, out + err
    assert sorted(ln for ln in out.splitlines() if ln.startswith("rank")) == [
        "rank 0 interrupted", "rank 1 interrupted"], out + err


def test_bench_scale_per_rank_columns():
    """`bench_scale._per_rank`: one column set per rank from `info['exchanges']`, the per
    inner iteration values divided by hand; nothing for a one-process run."""
    from benchmarks.bench_scale import _per_rank
    ex = {"count": [40, 40], "bytes": [800, 1600], "seconds": [1.0, 2.0],
          "share_of_wall": [0.1, 0.2], "peak_rss_mb": [100.0, 90.0], "wall_s": [10.0, 10.0]}
    row = _per_rank(ex, 20)
    assert row["rank0_exchanges_per_inner"] == 2.0 and row["rank1_exchange_bytes"] == 1600
    assert row["rank1_s_per_inner"] == 0.5 and row["rank0_peak_rss_MB"] == 100.0
    assert len(row) == 2 * 8
    assert _per_rank(None, 20) == {} and "rank0_s_per_inner" not in _per_rank(ex, 0)


def test_structure_with_local_nodes_equals_the_full_one():
    """`build_structure(local=..., allgather=...)`: the NLPs, terms and copies of its own
    nodes only, the rest from the other process (here: that process's real `allgather`
    payload, captured); the shared structure (shared variables, bounds, scales, row norms,
    Jacobian pattern, members, projection groups, w^0) equals the full build's bit for bit;
    the process keeps no Pyomo model (`tests/test_model_rows.py` checks the rank-local
    model); a remote node refuses to be evaluated; a node no process built, or no allgather,
    is an error."""
    from cefl_opt.solvers.node_structure import RemoteNode, build_structure

    class Sent(Exception):
        pass

    def capture(payload):
        sent.append(payload)
        raise Sent

    for bound, seed in (("corollary", 7102), ("general", 7103)):
        inst = make_instance("paper", ues=6, bss=3, dcs=2, rounds=2, seed=seed)
        full = build_structure(inst, bound=bound)
        V = full.n_nodes
        mine, theirs = list(range(0, V, 2)), list(range(1, V, 2))
        sent: list = []
        with pytest.raises(Sent):
            build_structure(inst, bound=bound, local=theirs, allgather=capture)
        part = build_structure(inst, bound=bound, local=mine,
                               allgather=lambda m: [m, sent[0]])
        for k in ("x0", "scale", "row_norm", "jac_rows", "jac_cols", "jac_indptr", "row_host",
                  "lo", "hi", "primary", "force_rows", "in_group", "epi_level", "epi_dir"):
            assert np.array_equal(getattr(part, k), getattr(full, k)), (bound, k)
        assert part.row_names == full.row_names and part.n_copies == full.n_copies
        assert part.group_counts == full.group_counts
        for a, b in zip(part.groups, full.groups):
            assert all(np.array_equal(getattr(a, f), getattr(b, f))
                       for f in ("idx", "lo", "hi", "total")) and a.eq == b.eq
        assert all(np.array_equal(a, b) for a, b in zip(part.members, full.members))
        assert all(np.array_equal(part.idx[k], full.idx[k]) if isinstance(full.idx[k], np.ndarray)
                   else all(np.array_equal(x, y) for x, y in zip(part.idx[k], full.idx[k]))
                   for k in full.idx)
        assert all(isinstance(part.providers[d], RemoteNode) == (d % 2 == 1) for d in range(V))
        assert part.model is None and full.model is not None   # read through the NLPs
        for d in mine:   # its own nodes' NLPs (rows built one node at a time) are the full's
            x = full.x0[full.providers[d].comp]
            assert all(np.array_equal(a, b) for a, b in zip(part.providers[d].evaluate(x),
                                                             full.providers[d].evaluate(x)))
    with pytest.raises(RuntimeError, match="held by another process"):
        part.providers[1].evaluate(full.x0[part.providers[1].comp])
    with pytest.raises(ValueError, match=r"no process built node\(s\) \[1"):
        build_structure(inst, local=mine, allgather=lambda m: [m])
    with pytest.raises(ValueError, match="needs allgather"):
        build_structure(inst, local=mine)
