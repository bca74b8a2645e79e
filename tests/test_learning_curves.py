"""Learning curves of a phased trainer (graphmem.eval.plots): epochs counted across phases, a real PNG."""

from __future__ import annotations

from graphmem.eval.plots import phase_starts, plot_learning_curves

HISTORY = [
    {"phase": "imitation", "epoch": 0, "return": 0.4, "val_return": 0.5},
    {"phase": "imitation", "epoch": 1, "return": 0.5},
    {"phase": "reinforce", "epoch": 0, "return": 0.6, "val_return": 0.55},
]


def test_phase_starts():
    assert phase_starts(HISTORY) == [(0, "imitation"), (2, "reinforce")]
    assert phase_starts([{"epoch": 0}, {"epoch": 1}]) == []


def test_png_is_written(tmp_path):
    curves = {"router": {0: HISTORY, 1: HISTORY[:2]}}
    path = plot_learning_curves(curves, tmp_path / "curves" / "learning.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
