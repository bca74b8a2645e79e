"""Pictures a researcher looks at: learning curves, recall vs budget with confidence bands, and what a policy retrieved.

* :func:`plot_learning_curves` — training return and validation recall per epoch, one colour per
  variant, a thin line per fold and the mean over folds in bold.
* :func:`plot_recall_vs_budget` — mean per-question recall against the token budget, one line per
  policy, with a 95 % confidence band of the mean (mean ± 1.96·s/√n, s with ddof = 1).
* :func:`plot_retrieval` — one question, two (or more) policies side by side: entries, the nodes
  loaded (numbered in load order), the edges walked as arrows coloured by relation, and the gold
  evidence, found or missed, laid out hop by hop (:func:`retrieval_columns`).
* :func:`plot_recall_tokens` — mean recall against mean loaded tokens: node-sweep curves with 95 % bands
  and the token-cost variants' points (``scripts/studies/cost_curve/run.py``).
* :func:`plot_recall_vs_position` — the streaming protocol's recall against the question's place in its stream
  (the share of the conversation's records in the memory when it was asked), one line per policy, 95% bands.
* :func:`plot_build_scaling` — graph-set build time against the length of one turn or passage, log-log,
  with the linear reference and the size limit (``scripts/benchmarks/build_scaling.py``).

Every function writes a PNG and returns its path; matplotlib is imported on first use (Agg).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

from graphmem.eval.metrics import ADVERSARIAL_CATEGORY
from graphmem.store.io import atomic_write

RELATION_COLOURS = {"temporal": "#1f77b4", "semantic": "#2ca02c", "causal": "#d62728", "entity": "#ff7f0e"}
_EXTRA_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
GOLD, LOADED, MISSED, VISITED = "#f2b705", "#a6cee3", "#ffffff", "#e0e0e0"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path, dpi: int = 120) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
    _pyplot().close(fig)
    return path


def mean_ci(values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Mean and half-width ``z · s / √n`` (s with ddof = 1; 0 for n < 2) of ``values``."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, z * math.sqrt(var / n)


# ---------------------------------------------------------------------------- learning curves
def phase_starts(rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """``(epoch index, phase)`` where each phase of a trainer's rows begins (rows without ``phase``: none)."""
    return [
        (e, str(r["phase"]))
        for e, r in enumerate(rows)
        if "phase" in r and (e == 0 or r["phase"] != rows[e - 1].get("phase"))
    ]


def plot_learning_curves(
    curves: Mapping[str, Mapping[Any, Sequence[Mapping[str, Any]]]],
    path: str | Path,
    keys: Sequence[tuple[str, str]] = (
        ("return", "training return"),
        ("val_return", "validation return (greedy walk)"),
    ),
    title: str | None = None,
) -> Path:
    """One panel per metric in ``keys`` against the epoch, counted across the trainer's phases (the
    walk trainer's imitation epochs, then its policy-gradient ones); a dotted line marks where a
    phase (a row's ``phase``) starts.

    Args:
        curves: variant -> fold -> the trainer's per-epoch rows, in order (the ``keys``, and ``phase``).
        path: PNG to write.
        keys: (row key, axis label) per panel (default: return and validation recall).
        title: figure title.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(keys), figsize=(6.2 * len(keys), 4.4), constrained_layout=True, squeeze=False)
    colours = plt.get_cmap("tab10")
    for i, (variant, folds) in enumerate(curves.items()):
        colour = colours(i % 10)
        for ax, (key, label) in zip(axes[0], keys):
            by_epoch: dict[int, list[float]] = {}
            for fold, rows in folds.items():
                pts = [(e, r[key]) for e, r in enumerate(rows) if _finite(r.get(key))]
                if pts:
                    ax.plot(*zip(*pts), color=colour, lw=0.9, alpha=0.35 if len(folds) > 1 else 1.0)
                for e, v in pts:
                    by_epoch.setdefault(e, []).append(v)
            if len(folds) > 1:
                full = sorted(e for e, vs in by_epoch.items() if len(vs) == len(folds))
                ax.plot(full, [sum(by_epoch[e]) / len(folds) for e in full], color=colour, lw=2.2)
            ax.plot([], [], color=colour, lw=2.2, label=f"{variant} ({len(folds)} fold{'s' * (len(folds) > 1)})")
    from matplotlib.ticker import MaxNLocator

    first = next((rows for folds in curves.values() for rows in folds.values()), [])
    starts = phase_starts(first)
    for ax, (_, label) in zip(axes[0], keys):
        for e, phase in starts if len(starts) > 1 else []:
            ax.axvline(e - 0.5, color="grey", linestyle=":", lw=1)
            ax.text(e - 0.4, 0.98, phase, transform=ax.get_xaxis_transform(), fontsize=8, va="top", color="grey")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch (all phases)" if len(starts) > 1 else "epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8, title="thin: one fold; bold: mean over folds", title_fontsize=7)
    fig.suptitle(title or "learning curves")
    return _save(fig, path)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ---------------------------------------------------------------------------- recall vs budget
def sweep_values(
    sweeps: Mapping[str, Sequence[Any]], metric: str = "evidence_recall", adversarial: bool = False
) -> dict[str, dict[int, list[float]]]:
    """policy -> max_tokens -> per-question values of ``metric``, from :func:`graphmem.eval.harness.budget_sweep`
    results (questions without a value, e.g. no resolvable gold, are left out; LoCoMo category 5
    only when ``adversarial``, matching the ``overall`` group)."""
    out: dict[str, dict[int, list[float]]] = {}
    for policy, results in sweeps.items():
        out[policy] = {}
        for res in results:
            vals = [
                float(r["metrics"][metric])
                for r in res.rows
                if r["metrics"].get(metric) is not None and (adversarial or r["category"] != ADVERSARIAL_CATEGORY)
            ]
            out[policy][res.budget.max_tokens] = vals
    return out


def plot_recall_vs_budget(
    panels: Mapping[str, Mapping[str, Mapping[int, Sequence[float]]]],
    path: str | Path,
    title: str | None = None,
    xlabel: str = "token budget (max_tokens; max_nodes scaled with it)",
) -> Path:
    """One panel per metric: the mean per-question value against the budget, one line per
    policy, with a 95 % band of the mean (:func:`mean_ci`).

    Args:
        panels: metric label -> policy -> budget level -> per-question values (:func:`sweep_values`).
        path: PNG to write.
        title: figure title.
        xlabel: what the levels are (default: token budgets).
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.6), constrained_layout=True, squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, (label, values) in zip(axes[0], panels.items()):
        for i, (policy, levels) in enumerate(values.items()):
            xs = sorted(x for x in levels if levels[x])
            stats = [mean_ci(levels[x]) for x in xs]
            n = len(levels[xs[-1]]) if xs else 0
            ax.plot(xs, [m for m, _ in stats], marker="o", color=colours(i % 10), label=f"{policy} (n={n})")
            lo, hi = [m - h for m, h in stats], [m + h for m, h in stats]
            ax.fill_between(xs, lo, hi, color=colours(i % 10), alpha=0.18, lw=0)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{label} (mean, 95% CI)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or f"recall vs {xlabel}")
    return _save(fig, path)


# ---------------------------------------------------------------------------- retrieval picture
def retrieval_columns(trace: Mapping[str, Any], gold: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The columns of :func:`plot_retrieval`, left to right, each ``(title, node ids)``.

    ``entries`` (depth 0), then ``hop d`` for nodes first reached by a walked edge from a node at
    depth ``d - 1`` (edges taken in walk order), then ``loaded, not walked to`` (loaded nodes no
    walked edge reached, e.g. dense top-k), then ``gold, not loaded``. Within a column nodes keep
    their first appearance order (entries: selection order; hops: walk order).
    """
    depth: dict[str, int] = {}
    for v in trace.get("entries", []):
        depth.setdefault(v, 0)
    for src, dst, _rel in trace.get("edges_traversed", []):
        if src in depth and dst not in depth:
            depth[dst] = depth[src] + 1
    loaded = list(trace.get("loaded", []))
    columns = [
        ("entries" if d == 0 else f"hop {d}", [v for v, dv in depth.items() if dv == d])
        for d in range(max(depth.values(), default=-1) + 1)
    ]
    rest = [v for v in loaded if v not in depth]
    if rest:
        columns.append(("loaded, not walked to", rest))
    missed = [g for g in dict.fromkeys(gold) if g not in depth and g not in loaded]
    if missed:
        columns.append(("gold, not loaded", missed))
    return columns


def _discovery_edges(trace: Mapping[str, Any]) -> set[int]:
    """Positions in ``edges_traversed`` of the edge that first reached each node (the walk's tree)."""
    reached = set(trace.get("entries", []))
    first = set()
    for k, (src, dst, _rel) in enumerate(trace.get("edges_traversed", [])):
        if src in reached and dst not in reached:
            reached.add(dst)
            first.add(k)
    return first


def _label(graph, node: str, width: int) -> str:
    text = graph.texts[graph.index_of(node)] if graph is not None and graph.has_node(node) else ""
    body = textwrap.shorten(" ".join(text.split()), width=2 * width, placeholder="…")
    return "\n".join([node, *textwrap.wrap(body, width=width)[:2]])


def _relation_colour(rel: str, seen: dict[str, str]) -> str:
    if rel not in seen:
        seen[rel] = RELATION_COLOURS.get(rel, _EXTRA_COLOURS[len(seen) % len(_EXTRA_COLOURS)])
    return seen[rel]


def plot_retrieval(
    graph,
    question: str,
    gold: Sequence[str],
    traces: Mapping[str, Mapping[str, Any]],
    path: str | Path,
    title: str | None = None,
    label_width: int = 30,
    per_row: int = 2,
) -> Path:
    """Side-by-side pictures of what each policy retrieved for one question (``per_row`` to a row).

    Args:
        graph: the question's :class:`~graphmem.core.graph.MemoryGraph` (node texts for labels).
        question: the question text.
        gold: gold evidence node ids (drawn gold; a gold node never loaded is drawn hollow).
        traces: policy -> its retrieval trace (``entries``, ``loaded`` in load order,
            ``edges_traversed`` as ``[src, dst, relation]``), e.g. the ``trace`` of a row of
            ``questions_<policy>.jsonl``.
        path: PNG to write.
        title: figure title (default: the question).
        label_width: characters per label line (default: 30).
        per_row: panels per row of the figure (default: 2).
    """
    plt = _pyplot()
    layouts = {p: retrieval_columns(t, gold) for p, t in traces.items()}
    n_cols = max((len(c) for c in layouts.values()), default=1)
    n_rows = max((len(ids) for cols in layouts.values() for _, ids in cols), default=1)
    col_w, row_h = 3.2, 0.62
    across = max(1, min(per_row, len(traces)))
    down = math.ceil(len(traces) / across)
    fig, axes = plt.subplots(
        down, across, figsize=(col_w * n_cols * across + 0.6, (row_h * n_rows + 1.3) * down + 1.1), squeeze=False
    )
    for ax in axes.flat[len(traces) :]:
        ax.axis("off")
    gold_set, relation_colours = set(gold), {}
    for ax, (policy, trace) in zip(axes.flat, traces.items()):
        pos = {}
        for c, (heading, ids) in enumerate(layouts[policy]):
            ax.text(c, 0.9, heading, ha="left", va="bottom", fontsize=9, fontweight="bold", color="#444")
            for r, v in enumerate(ids):
                pos[v] = (c, -r)
        _draw_walked_edges(ax, trace, pos, relation_colours)
        _draw_retrieved_nodes(ax, graph, policy, trace, pos, gold_set, label_width)
        ax.set_xlim(-0.5, n_cols - 0.05)
        ax.set_ylim(-(n_rows - 1) - 0.6, 1.3)
        ax.axis("off")
    handles = _retrieval_legend(relation_colours)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=8, frameon=False)
    fig.suptitle(title or textwrap.fill(f"Q: {question}", 140), fontsize=11)
    fig.subplots_adjust(left=0.01, right=0.99, top=1 - 0.9 / fig.get_figheight(), bottom=0.75 / fig.get_figheight())
    return _save(fig, path, dpi=110)


def _draw_walked_edges(ax, trace: Mapping[str, Any], pos: dict, relation_colours: dict[str, str]) -> None:
    """The walk's edges between drawn nodes: the edge that first reached a node bold, the others faint;
    across columns from the end of the source's label (0.74 columns wide), within one as an arc on the left."""
    from matplotlib.patches import FancyArrowPatch

    label_span = 0.74  # x extent (columns) of a node's label
    first = _discovery_edges(trace)
    for k, (src, dst, rel) in enumerate(trace.get("edges_traversed", [])):
        if src in pos and dst in pos:
            (x0, y0), (x1, y1) = pos[src], pos[dst]
            tree = k in first  # the edge that first reached dst: bold; the walk's other edges: faint
            if x0 != x1:  # leave from the end of the source's label, arrive at the target node
                start, end, bend = (x0 + label_span, y0), (x1, y1), 0.12 if y1 <= y0 else -0.12
            else:  # within a column: an arc on the left
                start, end, bend = (x0, y0), (x1, y1), 0.55 if y1 < y0 else -0.55
            ax.add_patch(
                FancyArrowPatch(
                    start,
                    end,
                    connectionstyle=f"arc3,rad={bend}",
                    arrowstyle="-|>,head_length=6,head_width=3.5" if tree else "-|>,head_length=4,head_width=2.5",
                    color=_relation_colour(rel, relation_colours),
                    lw=1.8 if tree else 0.7,
                    alpha=0.9 if tree else 0.3,
                    shrinkA=2 if x0 != x1 else 9,
                    shrinkB=9,
                    zorder=2 if tree else 1,
                )
            )


def _draw_retrieved_nodes(ax, graph, policy: str, trace: Mapping[str, Any], pos: dict, gold_set: set, width: int):
    """Each drawn node (entries square, gold outlined, loaded ones numbered in load order) with its label of
    ``width`` characters a line, and the panel's title: gold loaded, recall, nodes and tokens."""
    loaded = list(trace.get("loaded", []))
    order = {v: i + 1 for i, v in enumerate(loaded)}
    entries = set(trace.get("entries", []))
    for v, (x, y) in pos.items():
        is_gold, is_loaded = v in gold_set, v in order
        face = GOLD if is_gold and is_loaded else LOADED if is_loaded else MISSED if is_gold else VISITED
        edge = "#b8860b" if is_gold else "#333"
        ax.scatter(
            [x],
            [y],
            s=330,
            marker="s" if v in entries else "o",
            c=face,
            edgecolors=edge,
            linewidths=2.4 if is_gold else 1.0,
            zorder=3,
        )
        if is_loaded:
            ax.text(x, y, str(order[v]), ha="center", va="center", fontsize=7.5, fontweight="bold", zorder=4)
        ax.text(x + 0.1, y, _label(graph, v, width), ha="left", va="center", fontsize=7, zorder=4, linespacing=1.1)
    found = len(gold_set & set(loaded))
    ax.set_title(
        f"{policy}: {found}/{len(gold_set)} gold loaded (recall {found / max(len(gold_set), 1):.2f}) · "
        f"{len(loaded)} nodes · "
        f"{trace.get('loaded_tokens', '?')} tokens",
        fontsize=10,
    )


def _retrieval_legend(relation_colours: dict[str, str]) -> list:
    """Legend handles: one per relation drawn, the faint edges, then the node kinds."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=2, label=f"{r} edge") for r, c in relation_colours.items()]
    handles.append(Line2D([], [], color="#777", lw=0.7, alpha=0.5, label="other edges walked (faint)"))
    handles += [
        Line2D([], [], marker="s", ls="", mfc=LOADED, mec="#333", ms=9, label="entry node"),
        Line2D([], [], marker="o", ls="", mfc=LOADED, mec="#333", ms=9, label="loaded (number = load order)"),
        Line2D([], [], marker="o", ls="", mfc=GOLD, mec="#b8860b", mew=2, ms=9, label="gold evidence, loaded"),
        Line2D([], [], marker="o", ls="", mfc=MISSED, mec="#b8860b", mew=2, ms=9, label="gold evidence, missed"),
        Line2D([], [], marker="o", ls="", mfc=VISITED, mec="#333", ms=9, label="walked to, not loaded"),
    ]
    return handles


# ---------------------------------------------------------------------------- recall vs tokens
def plot_recall_tokens(payload: Mapping[str, Any], path: str | Path, title: str | None = None) -> Path:
    """Mean evidence recall (y) against mean loaded tokens (x) from the cost study's payload: each
    node-sweep curve (``curves``: policy -> points, one per ``max_nodes``) with its 95 % recall band, the
    fixed-budget walk's point at the run's budget, and the cost variants' points (``cost_variants``) joined
    in order of λ, with 95 % error bars on both axes, each labelled with its λ."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.6, 5.2), constrained_layout=True)
    colours = plt.get_cmap("tab10")
    fixed = payload["fixed"]["variant"]
    for i, (policy, points) in enumerate(payload["curves"].items()):
        xs = [p["tokens"]["mean"] for p in points]
        ys = [p["recall"]["mean"] for p in points]
        n = points[-1]["n"] if points else 0
        lw = 2.2 if policy == fixed else 1.2
        label = f"{policy}, node sweep (n={n})" + (" — fixed-budget walk" if policy == fixed else "")
        ax.plot(xs, ys, marker="o", ms=3.5, lw=lw, color=colours(i % 10), label=label)
        lo, hi = [p["recall"]["ci95"][0] for p in points], [p["recall"]["ci95"][1] for p in points]
        ax.fill_between(xs, lo, hi, color=colours(i % 10), alpha=0.15, lw=0)

    def bars(p):
        x, y = p["tokens"], p["recall"]
        xerr = [[x["mean"] - x["ci95"][0]], [x["ci95"][1] - x["mean"]]]
        yerr = [[y["mean"] - y["ci95"][0]], [y["ci95"][1] - y["mean"]]]
        return x["mean"], y["mean"], xerr, yerr

    x, y, xerr, yerr = bars(payload["points"][fixed])
    ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="*", ms=11, color="black", label=f"{fixed} at the run's budget")
    cost = payload["cost_variants"]
    if cost:
        pts = [bars(v["point"]) for v in cost]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color="#d62728", lw=1.6, ls="--")
        for v, (x, y, xerr, yerr) in zip(cost, pts):
            ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="D", ms=5, color="#d62728", capsize=2)
            ax.annotate(f"λ={v['token_cost']:g}", (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8)
        ax.plot([], [], "D--", color="#d62728", label="token cost λ, learned stop (run's budget)")
    ax.set_xlabel("mean loaded tokens per question (95% CI)")
    ax.set_ylabel("mean evidence recall (95% CI)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower right")
    fig.suptitle(title or "recall against loaded tokens", fontsize=10)
    return _save(fig, path)


def plot_build_scaling(payload: Mapping[str, Any], path: str | Path) -> Path:
    """Build seconds (y, log) against the characters of the one long text (x, log) of each series in
    ``payload["series"]`` (name -> rows with ``chars`` and ``build_s``), the line ``t = c * chars`` through
    each series' largest point (slope 1: linear), ``payload["max_text_chars"]`` as a vertical line and
    ``payload["target"]`` (``chars``, ``seconds``) as a marker; points above the limit (``above_max``) hollow."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.8), constrained_layout=True)
    colours = plt.get_cmap("tab10")
    for i, (name, rows) in enumerate(payload["series"].items()):
        xs, ys = [r["chars"] for r in rows], [r["build_s"] for r in rows]
        ax.plot(xs, ys, color=colours(i), lw=1.6, label=name)
        for r in rows:
            face = "white" if r.get("above_max") else colours(i)
            ax.plot([r["chars"]], [r["build_s"]], "o", ms=6, mfc=face, mec=colours(i))
        ax.plot(xs, [ys[-1] * x / xs[-1] for x in xs], color=colours(i), lw=0.8, ls=":")
    ax.plot([], [], "k:", lw=0.8, label="linear in the text (through the largest point)")
    ax.axvline(payload["max_text_chars"], color="grey", lw=1, ls="--", label="graph.max_text_chars (default)")
    target = payload.get("target")
    if target:
        ax.plot([target["chars"]], [target["seconds"]], "*", ms=12, color="black", label="target: 1 MB in under 10 s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("characters of the one long turn / passage")
    ax.set_ylabel("seconds to build the graph set (wall)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(payload.get("title", "build time against text length"), fontsize=10)
    return _save(fig, path)


def plot_recall_vs_position(
    curves: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, title: str | None = None
) -> Path:
    """PNG of mean evidence recall per interval of the stream (``graphmem.streaming.position_curve``: ``lo``,
    ``hi``, ``recall``, ``half_width``), one line per policy at the intervals' midpoints with its 95% band."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    for name, curve in curves.items():
        pts = [c for c in curve if c["recall"] is not None]
        xs = [(c["lo"] + c["hi"]) / 2 for c in pts]
        ys = [c["recall"] for c in pts]
        (line,) = ax.plot(xs, ys, marker="o", label=name)
        lo = [y - c["half_width"] for y, c in zip(ys, pts)]
        hi = [y + c["half_width"] for y, c in zip(ys, pts)]
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.12)
    ax.set_xlabel("place in the stream (share of the conversation's records in the memory when asked)")
    ax.set_ylabel("evidence recall")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "recall by place in the stream")
    return _save(fig, path)
