"""Learning curves of walk-router training: return and validation recall per epoch, one line per run.

A history is the trainer's list of epoch rows (:class:`rl.walk_trainer.WalkTrainer`): ``phase``,
``epoch``, ``return`` (the sampled walks' recall in imitation epochs, the mean episode return in
policy-gradient epochs) and ``val_recall``. Epochs are numbered across phases; a dotted line
marks where a phase starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from graphmem.io import atomic_write


def curve_points(history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """``(epoch index across phases, value)`` of the rows that hold ``key``."""
    xs, ys = [], []
    for i, row in enumerate(history):
        if row.get(key) is not None:
            xs.append(i)
            ys.append(float(row[key]))
    return xs, ys


def phase_starts(history: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """``(epoch index, phase)`` where each phase begins."""
    out = []
    for i, row in enumerate(history):
        if i == 0 or row.get("phase") != history[i - 1].get("phase"):
            out.append((i, str(row.get("phase"))))
    return out


def plot_learning_curves(histories: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path) -> Path:
    """Write a PNG with two panels (training return, validation recall), one line per named history."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, history in histories.items():
        for ax, key in zip(axes, ("return", "val_recall")):
            xs, ys = curve_points(history, key)
            if xs:
                ax.plot(xs, ys, marker=".", label=name)
    first = next(iter(histories.values()), [])
    for ax, title in zip(axes, ("training return (per epoch)", "validation evidence recall")):
        for i, phase in phase_starts(first):
            ax.axvline(i - 0.5, color="grey", linestyle=":", linewidth=1)
            ax.text(i - 0.4, 1.0, phase, transform=ax.get_xaxis_transform(), fontsize=8, va="top", color="grey")
        ax.set_title(title)
        ax.set_xlabel("epoch (all phases)")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)
    return path
