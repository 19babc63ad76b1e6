"""Dynamic non-i.i.d. partition of a training set over the UEs (docs/training.md, "Dynamic data").

At round t, UE n holds ``round(Dbar[t, n])`` training samples drawn uniformly from the samples
whose label is in ``ue_labels[t][n]`` (5 of the 10 classes in the generated presets). When the
instance has no ``ue_labels``, 5 of the classes are drawn per UE per round from the seed.

Sampling is without replacement within one UE and round whenever the label pool is large
enough, with replacement otherwise (small data sets such as ``digits``); different UEs draw
independently from the same training set, as devices acquiring data from one population.

Rounds beyond the instance's horizon T cycle the instance's rounds: round r uses the sizes and
labels of instance round ``r mod T`` but a fresh draw of samples (seeded by r itself), so the
data keep changing round to round (the paper's dynamic setting). Every draw is keyed by
``(seed, r, n)`` alone: the partition of a round does not depend on which rounds were drawn
before it.
"""
from __future__ import annotations

import numpy as np

from ..instance import Instance, InstanceError

STREAM_PARTITION = 11
STREAM_LABELS = 12


def round_labels(instance: Instance, r: int, n_classes: int, seed: int,
                 per_ue: int = 5) -> list[list[int]]:
    """The label set of each UE at round r (instance round r mod T)."""
    t = r % instance.T
    if instance.ue_labels:
        out = []
        for n, labs in enumerate(instance.ue_labels[t]):
            labs = [int(v) for v in labs]
            bad = [v for v in labs if not 0 <= v < n_classes]
            if bad:
                raise InstanceError(f"field 'ue_labels' at round {t} UE {n} has label {bad[0]}, "
                                    f"the data set has classes 0..{n_classes - 1}")
            if not labs:
                raise InstanceError(f"field 'ue_labels' at round {t} UE {n} is empty")
            out.append(sorted(set(labs)))
        return out
    k = min(per_ue, n_classes)
    out = []
    for n in range(instance.N):
        rng = np.random.default_rng([seed, STREAM_LABELS, t, n])
        out.append(sorted(int(v) for v in rng.choice(n_classes, size=k, replace=False)))
    return out


class DynamicPartition:
    """Per-round, per-UE index arrays into the training set (see module doc)."""

    def __init__(self, instance: Instance, y_train: np.ndarray, seed: int = 0,
                 n_classes: int | None = None):
        self.instance = instance
        self.y = np.asarray(y_train)
        self.seed = int(seed)
        self.n_classes = int(n_classes if n_classes is not None else self.y.max() + 1)
        self._by_label = {c: np.flatnonzero(self.y == c) for c in range(self.n_classes)}

    def sizes(self, r: int) -> np.ndarray:
        """Integer sample count per UE at round r: Dbar[r mod T, n] rounded (halves up), >= 0."""
        d = self.instance.Dbar[r % self.instance.T]
        return np.maximum(np.floor(d + 0.5), 0).astype(np.int64)

    def labels(self, r: int) -> list[list[int]]:
        return round_labels(self.instance, r, self.n_classes, self.seed)

    def round(self, r: int) -> list[np.ndarray]:
        """Index arrays (int64, into the training set) of the N UEs at round r."""
        sizes = self.sizes(r)
        labels = self.labels(r)
        out = []
        for n in range(self.instance.N):
            pool = np.concatenate([self._by_label[c] for c in labels[n]])
            if pool.size == 0:
                raise InstanceError(f"UE {n} at round {r}: the training set has no sample with "
                                    f"labels {labels[n]}")
            rng = np.random.default_rng([self.seed, STREAM_PARTITION, r, n])
            k = int(sizes[n])
            idx = rng.choice(pool, size=k, replace=k > pool.size)
            out.append(np.asarray(idx, dtype=np.int64))
        return out
