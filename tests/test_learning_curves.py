"""Learning-curve PNG (rl/learning_curves.py): points across phases and a real PNG file."""

from __future__ import annotations

from rl.learning_curves import curve_points, phase_starts, plot_learning_curves

HISTORY = [
    {"phase": "imitation", "epoch": 0, "return": 0.4, "val_recall": 0.5},
    {"phase": "imitation", "epoch": 1, "return": 0.5},
    {"phase": "reinforce", "epoch": 0, "return": 0.6, "val_recall": 0.55},
]


def test_points_and_phases():
    assert curve_points(HISTORY, "val_recall") == ([0, 2], [0.5, 0.55])
    assert curve_points(HISTORY, "return") == ([0, 1, 2], [0.4, 0.5, 0.6])
    assert phase_starts(HISTORY) == [(0, "imitation"), (2, "reinforce")]


def test_png_is_written(tmp_path):
    path = plot_learning_curves({"fold0": HISTORY, "fold1": HISTORY[:2]}, tmp_path / "curves" / "learning.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
