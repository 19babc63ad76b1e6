"""Pictures of orchestrations (``cefl-opt plot``, the main job's report).

* :func:`plot_orchestration`: one panel per round, one row per solution, on one layout of the
  network by sub-network: UE-BS data and BS-DC routes as edges whose widths are proportional to
  the data points they carry (one scale for the whole figure), the UE-BS associations, the
  round's aggregator, and each UE coloured by the share of its data it keeps. Above
  ``UE_THIN`` UEs the UEs of each sub-network are drawn as one group node (their summed flows,
  the share their data keeps).
* :func:`plot_costs`: each node's delay and energy per round as stacked bars by part
  (:data:`cefl_opt.orchestration.PARTS`), with the round's dA and dA + dR marked.

Every number is read from :mod:`cefl_opt.orchestration` (the numpy evaluator).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .instance import Instance
from .orchestration import PARTS, cost_table, round_flows, subnets
from .plots import pyplot
from .solution import Solution
from .system import evaluate

UE_THIN = 40          # more UEs than this: one group node per sub-network
MAX_WIDTH = 10.0      # line width (points) of the largest flow of a figure
PART_COLOURS = {"computation": "tab:green", "upload": "tab:blue", "relay": "tab:orange",
                "aggregation": "tab:purple", "broadcast": "0.6"}
KEPT_CMAP = "viridis"
LEGEND_ENTRIES = 9    # of the orchestration figure (`_legend`)


# ---- layout ---------------------------------------------------------------------------------
@dataclass
class Layout:
    """Node positions: 'ue<n>' (or 'ues<s>', the group of sub-network s), 'bs<b>', 'dc<s>'."""

    pos: dict[str, np.ndarray]
    centres: np.ndarray            # [S, 2] sub-network centres
    radius: float                  # radius of a sub-network's disc
    ue_sub: np.ndarray
    bs_sub: np.ndarray
    grouped: bool
    groups: dict[int, np.ndarray] = field(default_factory=dict)   # s -> UEs of group 'ues<s>'

    def ue_node(self, n: int) -> str:
        return f"ues{self.ue_sub[n]}" if self.grouped else f"ue{n}"


def _centres(S: int) -> tuple[np.ndarray, float]:
    """Sub-network centres on a circle (networkx's circular layout) and the disc radius."""
    import networkx as nx
    if S == 1:
        return np.zeros((1, 2)), 1.0
    c = nx.circular_layout(nx.path_graph(S))
    centres = -np.array([c[s] for s in range(S)])   # sub-network 0 on the left
    gap = min(np.linalg.norm(centres[i] - centres[j]) for i in range(S) for j in range(i))
    return centres, min(0.4 * gap, 0.8)


def layout(inst: Instance, seed: int = 0, thin: int = UE_THIN) -> Layout:
    """A stable layout: each sub-network on its own disc (DC at the centre, its BSs and UEs
    placed by networkx's spring layout with `seed`); the same instance and seed give the
    same positions."""
    import networkx as nx
    ue_sub, bs_sub = subnets(inst)
    centres, radius = _centres(inst.S)
    grouped = inst.N > thin
    mean_up = np.where(inst.link_mask, inst.R_nb.mean(axis=0), -np.inf)
    pos, groups = {}, {}
    for s in range(inst.S):
        dc, bss, ues = f"dc{s}", np.flatnonzero(bs_sub == s), np.flatnonzero(ue_sub == s)
        g, fixed = nx.Graph(), {dc: np.array([0.5, 0.5])}
        g.add_node(dc)
        g.add_edges_from((dc, f"bs{b}") for b in bss)
        if grouped and ues.size:    # the group on the far side of the DC, the BSs between
            groups[s] = ues
            away = centres[s] / d if (d := np.linalg.norm(centres[s])) > 0 else np.array([0, -1])
            fixed[f"ues{s}"] = fixed[dc] + 0.5 * away
            g.add_edges_from((f"ues{s}", f"bs{b}") for b in bss) if bss.size else \
                g.add_edge(f"ues{s}", dc)
        elif not grouped:
            for n in ues:
                near = f"bs{bss[np.argmax(mean_up[n, bss])]}" if bss.size else dc
                g.add_edge(f"ue{n}", near)
        p = nx.spring_layout(g, seed=seed, pos=fixed, fixed=list(fixed))
        xy = {k: np.asarray(v, float) - np.asarray(p[dc], float) for k, v in p.items()}
        r = max((np.linalg.norm(v) for v in xy.values()), default=0.0)
        for k, v in xy.items():
            pos[k] = centres[s] + (0.85 * radius / r * v if r > 0 else v)
    return Layout(pos, centres, radius, ue_sub, bs_sub, grouped, groups)


# ---- flows as drawn -------------------------------------------------------------------------
def panel_flows(inst: Instance, lay: Layout, t: int, sol: Solution) -> dict:
    """The edges of one panel: {(ue node, 'bs<b>'): data} and {('bs<b>', 'dc<s>'): data} with
    data > 0, the data kept per UE node and its share of the node's data."""
    fl = round_flows(inst, t, sol.rounds[t])
    ue_bs: dict[tuple[str, str], float] = {}
    kept: dict[str, float] = {}
    held: dict[str, float] = {}
    for n, b in zip(*np.nonzero(fl["ue_bs"] > 0)):
        key = (lay.ue_node(n), f"bs{b}")
        ue_bs[key] = ue_bs.get(key, 0.0) + float(fl["ue_bs"][n, b])
    for n in range(inst.N):
        u = lay.ue_node(n)
        kept[u] = kept.get(u, 0.0) + float(fl["kept"][n])
        held[u] = held.get(u, 0.0) + float(inst.Dbar[t, n])
    bs_dc = {(f"bs{b}", f"dc{s}"): float(fl["bs_dc"][b, s])
             for b, s in zip(*np.nonzero(fl["bs_dc"] > 0))}
    share = {u: kept[u] / held[u] if held[u] > 0 else 1.0 for u in kept}
    return {"ue_bs": ue_bs, "bs_dc": bs_dc, "kept": kept, "share": share, "D": fl["D"],
            "at_dc": fl["at_dc"]}


# ---- the orchestration figure ---------------------------------------------------------------
def _edges(ax, lay: Layout, flows: dict[tuple[str, str], float], scale: float, colour: str,
           gid: str) -> None:
    """`flows` as one LineCollection (gid `gid`) with line widths scale * data."""
    from matplotlib.collections import LineCollection
    if not flows:
        return
    segs = [(lay.pos[u], lay.pos[v]) for u, v in flows]
    lc = LineCollection(segs, linewidths=[scale * d for d in flows.values()], colors=colour,
                        alpha=0.6, capstyle="round", zorder=2)
    lc.set_gid(gid)
    ax.add_collection(lc)


def _background(ax, inst: Instance, lay: Layout) -> None:
    from matplotlib.patches import Circle
    names = inst.dc_names or [f"dc{s}" for s in range(inst.S)]
    for s, c in enumerate(lay.centres):
        ax.add_patch(Circle(c, lay.radius, color=f"C{s % 10}", alpha=0.08, lw=0, zorder=0))
        ax.text(c[0], c[1] + 1.04 * lay.radius, f"{s}: {names[s]}", ha="center", va="bottom",
                fontsize=7, color="0.3")


def _associations(ax, inst: Instance, lay: Layout, sol: Solution, t: int) -> None:
    """The associations: a thin dashed line from each UE (group) to its uplink BS (I_nb), a
    dotted green one to its downlink BS (I_bn) where that is another BS."""
    from matplotlib.collections import LineCollection
    r = sol.rounds[t]
    up = {(lay.ue_node(n), f"bs{b}") for n, b in enumerate(r.uplink_bs)}
    down = {(lay.ue_node(n), f"bs{b}") for n, b in enumerate(r.downlink_bs)
            if b != r.uplink_bs[n]}
    for pairs, colour, style, gid in ((up, "0.2", (0, (2, 2)), "uplink"),
                                      (down, "tab:green", (0, (1, 1.5)), "downlink")):
        lc = LineCollection([(lay.pos[u], lay.pos[v]) for u, v in sorted(pairs)], colors=colour,
                            linewidths=0.7, linestyles=style, zorder=1)
        lc.set_gid(gid)
        ax.add_collection(lc)


def _nodes(ax, inst: Instance, lay: Layout, fl: dict, agg: int) -> None:
    ues = sorted(fl["share"], key=lambda u: int(u.lstrip("ues")))
    xy = np.array([lay.pos[u] for u in ues])
    size = ([min(250.0, 30.0 * len(lay.groups[int(u[3:])]) ** 0.5) for u in ues]
            if lay.grouped else 40)
    ax.scatter(xy[:, 0], xy[:, 1], c=[fl["share"][u] for u in ues], cmap=KEPT_CMAP, vmin=0,
               vmax=1, s=size, marker="h" if lay.grouped else "o", edgecolors="k",
               linewidths=0.5, zorder=4)
    if lay.grouped:
        for u, (x, y) in zip(ues, xy):
            ax.annotate(f"{len(lay.groups[int(u[3:])])} UEs", (x, y), xytext=(8, 0),
                        textcoords="offset points", va="center", fontsize=6)
    bs = np.array([lay.pos[f"bs{b}"] for b in range(inst.B)])
    ax.scatter(bs[:, 0], bs[:, 1], marker="^", s=55, color="0.35", edgecolors="k",
               linewidths=0.5, zorder=4)
    dc = np.array([lay.pos[f"dc{s}"] for s in range(inst.S)])
    ax.scatter(dc[:, 0], dc[:, 1], marker="s", s=110, color="white", edgecolors="k",
               linewidths=1.0, zorder=4)
    ax.scatter(*dc[agg], marker="*", s=420, color="crimson", edgecolors="k", linewidths=0.6,
               zorder=5)


def _draw_panel(ax, inst: Instance, lay: Layout, sol: Solution, t: int, scale: float,
                title: str) -> dict:
    fl = panel_flows(inst, lay, t, sol)
    agg = int(sol.rounds[t].aggregator)
    _background(ax, inst, lay)
    _associations(ax, inst, lay, sol, t)
    _edges(ax, lay, fl["ue_bs"], scale, "tab:blue", "flow-ue-bs")
    _edges(ax, lay, fl["bs_dc"], scale, "tab:orange", "flow-bs-dc")
    _nodes(ax, inst, lay, fl, agg)
    kept = sum(fl["kept"].values()) / fl["D"]
    ax.set_title(f"{title}\nUEs keep {100 * kept:.0f} % of the data, DCs train on "
                 f"{100 * (1 - kept):.0f} %", fontsize=9)
    ax.set_aspect("equal")
    ax.autoscale_view()
    ax.margins(0.08)
    ax.axis("off")
    return {**fl, "round": t, "method": sol.method, "scale": scale, "ax": ax}


def _legend(fig, lay: Layout, widest: float) -> None:
    from matplotlib.lines import Line2D
    mk = dict(ls="", markeredgecolor="k", markeredgewidth=0.5)
    ue = (Line2D([], [], marker="h", ms=10, color="0.8", label="UEs of a sub-network (group)",
                 **mk) if lay.grouped else
          Line2D([], [], marker="o", ms=7, color="0.8", label="UE (colour: share kept)", **mk))
    handles = [ue, Line2D([], [], marker="^", ms=8, color="0.35", label="BS", **mk),
               Line2D([], [], marker="s", ms=9, color="white", label="DC", **mk),
               Line2D([], [], marker="*", ms=15, color="crimson", label="aggregator of the round",
                      **mk),
               Line2D([], [], color="0.2", lw=0.7, ls=(0, (2, 2)), label="uplink BS"),
               Line2D([], [], color="tab:green", lw=0.7, ls=(0, (1, 1.5)),
                      label="downlink BS (if another)"),
               Line2D([], [], color="tab:blue", lw=4, alpha=0.6, label="UE -> BS data"),
               Line2D([], [], color="tab:orange", lw=4, alpha=0.6, label="BS -> DC data"),
               Line2D([], [], color="0.4", lw=MAX_WIDTH, alpha=0.6,
                      label=f"width of {widest:,.0f} data points" if widest > 0
                      else "no data moves")]
    fig.legend(handles=handles, loc="lower center", ncol=_legend_columns(fig, len(handles)),
               fontsize=8, frameon=False)


def _legend_columns(fig_or_width, n: int, entry: float = 1.9) -> int:
    """Legend columns that fit the figure's width (inches; about `entry` per entry)."""
    w = fig_or_width if isinstance(fig_or_width, float) else fig_or_width.get_figwidth()
    return max(1, min(n, int((w - 0.2) / entry)))


def plot_orchestration(inst: Instance, sols: list[Solution], *, labels: list[str] | None = None,
                       seed: int = 0, thin: int = UE_THIN):
    """The figure (one row per solution, one panel per round) and what each panel drew: a list
    of dicts with its flows ('ue_bs', 'bs_dc', 'kept'), 'round', 'method', 'label', 'ax' and
    'scale', the line width (points) per data point of every flow in the figure. A panel's
    title gives the objective under the weights its solution records (`Solution.weights`;
    the instance's where it records none), the objective its file holds."""
    plt = pyplot()
    labels = solution_labels(sols) if labels is None else labels
    lay = layout(inst, seed, thin)
    per = [[panel_flows(inst, lay, t, s) for t in range(inst.T)] for s in sols]
    widest = max([max([*f["ue_bs"].values(), *f["bs_dc"].values()], default=0.0)
                  for row in per for f in row] + [0.0])
    scale = MAX_WIDTH / widest if widest > 0 else 0.0
    rows, cols = len(sols), inst.T
    lo, hi = lay.centres.min(axis=0) - lay.radius, lay.centres.max(axis=0) + lay.radius
    aspect = (hi[1] - lo[1]) / (hi[0] - lo[0])
    ax_w = 3.9 * max(1.0, (inst.S / 5) ** 0.5)     # more sub-networks: larger panels
    width = 1.0 + cols * ax_w + (cols - 1) * 0.2
    legend_rows = -(-LEGEND_ENTRIES // _legend_columns(width, LEGEND_ENTRIES))
    fig, axes = _grid(plt, rows, cols, ax_w=ax_w, ax_h=ax_w * aspect, left=0.1, right=0.9,
                      top=0.75, bottom=0.3 + 0.25 * legend_rows, wgap=0.2, hgap=0.85)
    drawn, names = [], inst.dc_names or [f"dc{s}" for s in range(inst.S)]
    for i, sol in enumerate(sols):
        ev = evaluate(inst, sol, weights=sol.weights)     # the objective the solution records
        flag = "" if ev.feasible else " (INFEASIBLE)"
        for t in range(cols):
            agg = sol.rounds[t].aggregator
            title = (f"{labels[i]}{flag}: objective {ev.objective:.5g}\nround {t}: aggregator "
                     f"dc{agg} ({names[agg]})")
            drawn.append({**_draw_panel(axes[i, t], inst, lay, sol, t, scale, title),
                          "label": labels[i]})
    sm = plt.cm.ScalarMappable(cmap=KEPT_CMAP, norm=plt.Normalize(0, 1))
    W = fig.get_figwidth()
    cax = fig.add_axes((1 - 0.7 / W, 0.25, 0.1 / W, 0.5))
    fig.colorbar(sm, cax=cax).set_label("share of its data a UE keeps", fontsize=8)
    cax.tick_params(labelsize=7)
    _legend(fig, lay, widest)
    return fig, drawn


# ---- the cost figure ------------------------------------------------------------------------
def _thinned(costs: pd.DataFrame, lay: Layout) -> pd.DataFrame:
    """`costs` with the UEs of each sub-network as one row 'UEs s (k)' when the layout groups
    them: the delay parts of its slowest UE (largest path), the sum of the energies."""
    if not lay.grouped:
        return costs
    ue = costs[costs["kind"] == "ue"].copy()
    ue["group"] = lay.ue_sub[ue["node"].str[2:].astype(int).to_numpy()]
    rows = []
    for (meth, t, s), g in ue.groupby(["method", "round", "group"], sort=True):
        slow = g.loc[g["delay_path_s"].idxmax()].copy()
        for col in [c for c in g if c.startswith("energy_")]:
            slow[col] = g[col].sum()
        slow["node"] = f"UEs {s} ({len(g)})"
        rows.append(slow.drop("group"))
    return pd.concat([pd.DataFrame(rows), costs[costs["kind"] != "ue"]], ignore_index=True)


def _bars(ax, bottom: np.ndarray, height: np.ndarray, colour: str) -> None:
    """Bars of width 0.8 at x = 0, 1, ... as one PolyCollection (many times faster to draw
    than one patch per bar)."""
    from matplotlib.collections import PolyCollection
    x = np.flatnonzero(height > 0)
    lo, hi = bottom[x], bottom[x] + height[x]
    verts = np.stack([np.stack([x - 0.4, lo], 1), np.stack([x - 0.4, hi], 1),
                      np.stack([x + 0.4, hi], 1), np.stack([x + 0.4, lo], 1)], axis=1)
    ax.add_collection(PolyCollection(verts, facecolors=colour, edgecolors="none"))
    ax.update_datalim([(-0.4, 0.0), (len(bottom) - 0.6, float(hi.max(initial=0.0)))])


def _delay_panel(ax, c: pd.DataFrame) -> None:
    """The round as a timeline: each node's path parts from 0, its broadcast from dA."""
    dA = float(c["delay_path_s"].max())
    bottom = np.zeros(len(c))
    for p in PARTS[:-1]:
        v = c[f"delay_{p}_s"].to_numpy()
        _bars(ax, bottom.copy(), v, PART_COLOURS[p])
        bottom += v
    br = c["delay_broadcast_s"].to_numpy()
    _bars(ax, np.full(len(c), dA), br, PART_COLOURS["broadcast"])
    ax.axhline(dA, color="k", ls="--", lw=0.8)
    ax.axhline(dA + br.max(), color="crimson", lw=0.8)
    ax.set_ylabel("delay (s)", fontsize=8)
    return np.maximum(bottom, np.where(br > 0, dA + br, 0.0))


def _energy_panel(ax, c: pd.DataFrame) -> None:
    bottom = np.zeros(len(c))
    for p in PARTS:
        v = c[f"energy_{p}_J"].to_numpy()
        _bars(ax, bottom.copy(), v, PART_COLOURS[p])
        bottom += v
    ax.set_ylabel("energy (J)", fontsize=8)
    return bottom


def _aggregator_mark(ax, c: pd.DataFrame, top: np.ndarray) -> None:
    x = np.flatnonzero(c["aggregator"].to_numpy())
    ax.scatter(x, top[x], marker="*", s=70, color="crimson", edgecolors="k", linewidths=0.4,
               zorder=5, clip_on=False)


def plot_costs(inst: Instance, sols: list[Solution], *, labels: list[str] | None = None,
               thin: int = UE_THIN):
    """Stacked bars of each node's delay and energy by part, one column per round, two rows
    (delay, energy) per solution; returns (figure, the cost table drawn: `cost_table` with a
    'solution' column, the UEs of a sub-network in one row above `thin` UEs)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    plt = pyplot()
    labels = solution_labels(sols) if labels is None else labels
    lay = layout(inst, thin=thin) if inst.N > thin else Layout({}, np.zeros((1, 2)), 1.0,
                                                               *subnets(inst), False)
    tables = [_thinned(cost_table(inst, s), lay).assign(solution=lab)
              for s, lab in zip(sols, labels)]
    nodes = tables[0].loc[tables[0]["round"] == 0, "node"].tolist()
    ax_w = max(2.6, 0.1 * len(nodes))
    width = 0.85 + inst.T * ax_w + (inst.T - 1) * 0.25
    ncol = _legend_columns(width, 8, entry=1.5)
    note = textwrap.fill("delay: a node's path from 0, its broadcast from dA; energy: "
                         "unweighted J (the cost table has the xi3-weighted sum)",
                         max(30, int(width * 14)))
    fig, axes = _grid(plt, 2 * len(sols), inst.T, ax_w=ax_w, ax_h=1.9, left=0.7, right=0.15,
                      top=0.35, bottom=0.8 + 0.17 * (note.count("\n") + 1) + 0.22 * -(-8 // ncol),
                      wgap=0.25, hgap=0.45)
    tops = {"delay": 0.0, "energy": 0.0}
    for i, (tab, lab) in enumerate(zip(tables, labels)):
        for t in range(inst.T):
            c = tab[tab["round"] == t].reset_index(drop=True)
            ad, ae = axes[2 * i, t], axes[2 * i + 1, t]
            top_d, top_e = _delay_panel(ad, c), _energy_panel(ae, c)
            _aggregator_mark(ad, c, top_d)
            _aggregator_mark(ae, c, top_e)
            tops["delay"], tops["energy"] = (max(tops["delay"], top_d.max()),
                                             max(tops["energy"], top_e.max()))
            dA = c["delay_path_s"].max()
            ad.set_title(f"{lab}, round {t}: delay {dA + c['delay_broadcast_s'].max():.4g} s "
                         f"(dA {dA:.4g} s)", fontsize=8)
            ae.set_title(f"{lab}, round {t}: energy {c['energy_J'].sum():.4g} J", fontsize=8)
    for k, a in enumerate(axes.flat):
        a.set_ylim(0, 1.06 * tops["delay" if (k // inst.T) % 2 == 0 else "energy"] or 1.0)
        a.tick_params(axis="y", labelsize=7)
        a.set_xlim(-0.7, len(nodes) - 0.3)
        a.set_xticks([])     # node names under the bottom row only (ticks are slow to draw)
        if k % inst.T:
            a.set_ylabel("")
            a.tick_params(labelleft=False)
    for a in axes[-1]:
        a.set_xticks(np.arange(len(nodes)), nodes, rotation=90, fontsize=6)
    handles = [Patch(color=PART_COLOURS[p], label=p) for p in PARTS]
    handles += [Line2D([], [], color="k", ls="--", lw=0.8, label="dA (largest path)"),
                Line2D([], [], color="crimson", lw=0.8, label="dA + dR (round delay)"),
                Line2D([], [], ls="", marker="*", ms=9, color="crimson", label="aggregator")]
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False,
               title=note, title_fontsize=8)
    return fig, pd.concat(tables, ignore_index=True)


def solution_labels(sols: list[Solution]) -> list[str]:
    """The solutions' method names, numbered where a method repeats."""
    names = [s.method for s in sols]
    return [f"{m} #{names[:i].count(m) + 1}" if names.count(m) > 1 else m
            for i, m in enumerate(names)]


def _grid(plt, rows: int, cols: int, *, ax_w: float, ax_h: float, left: float, right: float,
          top: float, bottom: float, wgap: float, hgap: float, **kw):
    """A figure of rows x cols axes of ax_w x ax_h inches with the given margins and gaps
    (inches): a fixed layout, no tight_layout pass."""
    W = left + right + cols * ax_w + (cols - 1) * wgap
    H = top + bottom + rows * ax_h + (rows - 1) * hgap
    fig, axes = plt.subplots(rows, cols, squeeze=False, figsize=(W, H), **kw)
    fig.subplots_adjust(left=left / W, right=1 - right / W, bottom=bottom / H, top=1 - top / H,
                        wspace=wgap / ax_w, hspace=hgap / ax_h)
    return fig, axes
