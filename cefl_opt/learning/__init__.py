"""Torch trainer of CE-FL (docs/training.md): data sets, dynamic non-i.i.d. partition,
offloading as data movement, FedProx local training with the normalised aggregation of eq:11M,
FedNova/FedAvg baselines, cost accounting and Monte-Carlo estimation of the ML constants.

Imports are lazy so ``import cefl_opt.learning`` does not load torch.
"""
from __future__ import annotations

_EXPORTS = {
    "DataUnavailable": "data", "load_dataset": "data", "DATASETS": "data",
    "DynamicPartition": "partition",
    "offload": "offload", "offload_counts": "offload", "largest_remainder": "offload",
    "make_model": "models", "forward_flops": "models", "train_flops_per_sample": "models",
    "Strategy": "strategies", "CEFL": "strategies", "FedNova": "strategies",
    "FedAvg": "strategies", "make_strategy": "strategies", "FitIns": "strategies",
    "FitRes": "strategies", "RoundPlan": "strategies",
    "Trainer": "trainer", "run_training": "trainer", "targets_table": "trainer",
    "local_fedprox": "trainer", "TrainResult": "trainer", "DEFAULT_LR": "trainer",
    "estimate": "estimation", "estimate_dynamic": "estimation",
    "apply_estimates": "estimation", "dpu_datasets": "estimation",
    "TrainOptions": "options", "prepare_train": "options", "add_train_flags": "options",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib
        mod = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
