"""Figures shared by the main job and the benchmark suites (PNG, written atomically)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .io import write_png_atomic


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (matplotlib is imported here, on first use)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_sca_trace(rows, path: str | Path, title: str = "decentralized") -> Path:
    """The SCA trace of the decentralised solver (`solvers/decentralized.TRACE_FIELDS`, a list of
    dicts or the trace CSV's frame): model objective, scaled violation and step, and the
    aggregator of every round with the indicators' distance from a vertex, by outer iteration."""
    df = pd.DataFrame(rows)
    plt = pyplot()
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4))
    for ph, g in df.groupby("phase", sort=False):
        a1.plot(g.outer, g.obj_model, label=f"{ph} phase")
        a2.semilogy(g.outer, g.max_violation.clip(lower=1e-12), label=f"violation ({ph})")
        a2.semilogy(g.outer, g.step_inf.clip(lower=1e-12), ls="--", label=f"step ({ph})")
    a1.set_xlabel("outer iteration")
    a1.set_ylabel("J(w^l) (model)")
    a1.set_title(title)
    a1.legend(fontsize=8)
    a2.axhline(1e-6, color="k", lw=0.6)
    a2.set_xlabel("outer iteration")
    a2.set_ylabel("scaled violation / ||w_hat - w||_inf")
    a2.legend(fontsize=8)
    aggs = df.aggregators.astype(str).str.split("|", expand=True).astype(int)
    for t in aggs.columns:
        a3.step(df.outer, aggs[t] + 0.05 * t, where="post", label=f"round {t}")
    a3b = a3.twinx()
    a3b.semilogy(df.outer, df.I_binary_gap.clip(lower=1e-12), color="0.6", lw=0.8)
    a3b.set_ylabel("1 - max_s I_s (grey)")
    a3.set_xlabel("outer iteration")
    a3.set_ylabel("aggregator (argmax I_s)")
    a3.legend(fontsize=8)
    fig.tight_layout()
    write_png_atomic(fig, path)
    plt.close(fig)
    return Path(path)
