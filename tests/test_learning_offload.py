"""Dynamic partition, offloading as data movement (conservation) and reproducibility."""
import numpy as np
import pandas as pd
import pytest
import torch

from cefl_opt.instance import InstanceError
from cefl_opt.learning.offload import largest_remainder, offload, offload_counts
from cefl_opt.learning.partition import DynamicPartition
from cefl_opt.learning.toy import toy_instance, toy_round_costs, toy_solution

# One thread: with small batches two OpenMP threads mostly synchronise, and when the other
# core is busy (parallel jobs) they were 10-50x slower here (MNIST-5k test: 0.4 s vs 7-23 s).
torch.set_num_threads(1)


def test_largest_remainder_conserves_and_is_close():
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(0, 5000))
        w = rng.uniform(0, 1, int(rng.integers(1, 8)))
        w[rng.uniform(size=w.size) < 0.3] = 0.0
        if w.sum() == 0:
            w[0] = 1.0
        c = largest_remainder(k, w)
        assert c.sum() == k and np.all(c >= 0)
        assert np.all(np.abs(c - k * w / w.sum()) < 1.0)
        assert np.all(c[w == 0] == 0)
    assert largest_remainder(0, [0.0, 0.0]).tolist() == [0, 0]
    assert largest_remainder(3, [1, 1, 1]).tolist() == [1, 1, 1]
    assert largest_remainder(2, [1, 1, 1]).tolist() == [1, 1, 0]      # ties: lower index first
    with pytest.raises(InstanceError):
        largest_remainder(5, [0.0, 0.0])
    with pytest.raises(InstanceError):
        largest_remainder(5, [-0.1, 1.0])


def _random_solution(inst, seed):
    """Random offloading: rho_nb rows with sum <= 1 (some exactly 1), random rho_bs."""
    sol = toy_solution(inst, seed=seed)
    rng = np.random.default_rng(seed)
    for k, r in enumerate(sol.rounds):
        rho = rng.uniform(0, 1, (inst.N, inst.B)) * (rng.uniform(size=(inst.N, inst.B)) < 0.6)
        rho /= np.maximum(rho.sum(axis=1, keepdims=True), 1.0) * rng.uniform(1.0, 2.0, (inst.N, 1))
        rho[0] = 0.0
        rho[-1] = 0.0
        rho[-1, -1] = 1.0                                     # a UE that offloads everything
        r.rho_nb = rho
        bs = rng.uniform(0, 1, (inst.B, inst.S)) * (rng.uniform(size=(inst.B, inst.S)) < 0.7)
        bs[:, 0] += 1e-3
        r.rho_bs = bs / bs.sum(axis=1, keepdims=True)
    return sol


def test_offloading_conserves_every_sample_every_round():
    inst = toy_instance(N=7, B=3, S=3, T=4, D=150, seed=3)
    sol = _random_solution(inst, seed=5)
    y = np.random.default_rng(0).integers(0, 10, 3000)
    part = DynamicPartition(inst, y, seed=1)
    for r in range(6):                                        # beyond T: cycles t mod T
        dec = sol.rounds[r % inst.T]
        ue = part.round(r)
        sizes = np.array([ix.size for ix in ue])
        assert sizes.tolist() == np.rint(inst.Dbar[r % inst.T]).astype(int).tolist()
        dpu = offload(ue, dec.rho_nb, dec.rho_bs, np.random.default_rng([9, r]))
        assert len(dpu) == inst.N + inst.S
        before = np.sort(np.concatenate(ue))
        after = np.sort(np.concatenate(dpu))
        np.testing.assert_array_equal(before, after)          # nothing lost, nothing duplicated
        assert sum(ix.size for ix in dpu) == int(sizes.sum())
        n_nb, n_bs, D = offload_counts(sizes, dec.rho_nb, dec.rho_bs)
        assert [ix.size for ix in dpu] == D.tolist()
        assert n_nb.sum() == n_bs.sum()                        # what BSs receive, they forward
        np.testing.assert_array_equal(n_nb.sum(axis=0), n_bs.sum(axis=1))
        # rounded counts are within one sample per hop of the continuous split
        D_n = (1 - dec.rho_nb.sum(axis=1)) * sizes
        assert np.all(np.abs(D[:inst.N] - D_n) < 1.0 + 1e-9)
        D_s = dec.rho_bs.T @ (dec.rho_nb.T @ sizes)
        assert np.all(np.abs(D[inst.N:] - D_s) <= inst.N + inst.B)
        assert D[inst.N - 1] == 0                             # the UE that offloads everything
        # each UE keeps a subset of its own samples
        for n in range(inst.N):
            assert np.isin(dpu[n], ue[n]).all()


def test_offload_without_rng_is_deterministic_and_in_order():
    ue = [np.arange(10), np.arange(10, 14)]
    dpu = offload(ue, np.array([[0.5], [0.0]]), np.array([[0.5, 0.5]]))
    assert [d.tolist() for d in dpu] == [[5, 6, 7, 8, 9], [10, 11, 12, 13], [0, 1, 2], [3, 4]]


def test_partition_labels_and_sizes_follow_the_instance():
    inst = toy_instance(N=5, B=2, S=2, T=3, D=80, seed=2)
    y = np.repeat(np.arange(10), 100)
    part = DynamicPartition(inst, y, seed=4)
    for r in range(inst.T):
        for n, ix in enumerate(part.round(r)):
            assert ix.size == int(np.rint(inst.Dbar[r, n]))
            assert set(np.unique(y[ix])) <= set(inst.ue_labels[r][n])
            assert np.unique(ix).size == ix.size               # without replacement when possible
    # keyed by (seed, round, UE): the same round twice gives the same draw
    a, b = part.round(1), DynamicPartition(inst, y, seed=4).round(1)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    c = DynamicPartition(inst, y, seed=5).round(1)
    assert not all(np.array_equal(u, v) for u, v in zip(a, c))


def test_partition_without_ue_labels_draws_five_of_ten():
    inst = toy_instance(N=6, B=2, S=2, T=2, D=50, seed=2, labels=False)
    assert inst.ue_labels == []
    y = np.repeat(np.arange(10), 60)
    part = DynamicPartition(inst, y, seed=7)
    labs = part.labels(0)
    assert all(len(l) == 5 and set(l) <= set(range(10)) for l in labs)
    assert labs == DynamicPartition(inst, y, seed=7).labels(0)
    assert labs != DynamicPartition(inst, y, seed=8).labels(0)
    for n, ix in enumerate(part.round(0)):
        assert set(np.unique(y[ix])) <= set(labs[n])


def test_partition_rejects_labels_outside_the_data():
    inst = toy_instance(N=2, B=1, S=1, T=1, D=10, seed=0)
    with pytest.raises(InstanceError, match="ue_labels"):
        DynamicPartition(inst, np.zeros(50, dtype=int) + np.arange(50) % 3).round(0)


def test_partition_rounds_fractional_sizes_half_up():
    """A fractional Dbar gives each UE round-half-up samples: 0.5 is one sample, never truncated
    to none; rounds past T cycle through the instance's rounds."""
    inst = toy_instance(N=3, B=1, S=1, T=2, D=30, seed=0).copy(
        Dbar=[[20.5, 3.49, 0.5], [7.5, 1.51, 12.0]])
    y = np.arange(1000) % 10
    part = DynamicPartition(inst, y, seed=0)
    want = {0: [21, 3, 1], 1: [8, 2, 12]}                      # half up, never truncated
    for r in (0, 1, 2, 3):                                     # rounds 2, 3 cycle 0, 1
        assert part.sizes(r).tolist() == want[r % 2], r
        assert [len(ix) for ix in part.round(r)] == want[r % 2], r


def _digits():
    from cefl_opt.learning.data import load_dataset
    return load_dataset("digits", seed=0)


def test_same_seed_gives_bitwise_equal_curves():
    from cefl_opt.learning.trainer import run_training
    data = _digits()
    inst = toy_instance(N=4, B=2, S=2, T=2, D=120, seed=1)
    sol = toy_solution(inst, gamma=3, m=0.2)
    runs = [run_training(inst, sol, data, method="cefl", rounds=3, lr=0.1, seed=s,
                         cost_fn=toy_round_costs).history for s in (11, 11, 12)]
    pd.testing.assert_frame_equal(runs[0], runs[1], check_exact=True)
    assert not runs[0]["accuracy"].equals(runs[2]["accuracy"]) or \
        not runs[0]["test_loss"].equals(runs[2]["test_loss"])
