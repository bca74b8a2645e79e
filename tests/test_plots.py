"""graphmem.eval.plots: the retrieval picture's layout by hand, the confidence band, and readable PNGs."""

import math

import pytest
import torch

from graphmem.core.graph import MemoryGraph
from graphmem.eval.plots import (
    mean_ci,
    plot_learning_curves,
    plot_recall_vs_budget,
    plot_retrieval,
    retrieval_columns,
)

TRACE = {
    "entries": ["a", "b"],
    "loaded": ["a", "b", "c", "d", "x"],
    "edges_traversed": [["a", "c", "semantic"], ["c", "d", "temporal"], ["b", "c", "entity"], ["d", "e", "causal"]],
    "loaded_tokens": 40,
}


def test_retrieval_columns_by_hand():
    assert retrieval_columns(TRACE, gold=["d", "g", "d"]) == [
        ("entries", ["a", "b"]),
        ("hop 1", ["c"]),
        ("hop 2", ["d"]),
        ("hop 3", ["e"]),  # walked to, never loaded
        ("loaded, not walked to", ["x"]),
        ("gold, not loaded", ["g"]),
    ]
    assert retrieval_columns({"entries": [], "loaded": ["p", "q"]}, gold=["q"]) == [
        ("loaded, not walked to", ["p", "q"])
    ]


def test_mean_ci_by_hand():
    mean, half = mean_ci([0.0, 1.0, 1.0, 0.0])
    assert mean == 0.5 and half == pytest.approx(1.96 * math.sqrt((4 * 0.25 / 3) / 4))
    assert mean_ci([0.3]) == (0.3, 0.0) and math.isnan(mean_ci([])[0])


def _png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # drawn, not blank
    return data


def test_plots_write_pngs(tmp_path):
    ids = ["a", "b", "c", "d", "e", "x", "g"]
    graph = MemoryGraph.empty(4)
    graph.add_nodes(
        ids,
        [f"text of node {i}, long enough to wrap over two label lines" for i in ids],
        torch.eye(4)[[0, 1, 2, 3, 0, 1, 2]],
    )
    plot_retrieval(
        graph, "Which nodes?", ["d", "g"], {"one": TRACE, "two": {**TRACE, "loaded": ["a", "g"]}}, tmp_path / "r.png"
    )
    _png(tmp_path / "r.png")
    rows = [{"epoch": e, "return": -1 + 0.1 * e, "val_return": 0.3 + 0.01 * e} for e in range(5)]
    plot_learning_curves({"router": {0: rows, 1: rows[:3]}, "fixed": {0: rows}}, tmp_path / "c.png")
    _png(tmp_path / "c.png")
    values = {"p": {250: [0.0, 1.0], 500: [1.0, 1.0, 0.5]}, "q": {250: [], 500: [0.5]}}
    plot_recall_vs_budget({"evidence recall": values, "all-evidence hit": values}, tmp_path / "b.png")
    _png(tmp_path / "b.png")
