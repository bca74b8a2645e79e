"""Splits by conversation (graph name): K folds, each with train / validation / test graphs.

The graph names are shuffled once by ``seed`` and cut into ``k`` near-equal test parts; fold
``i`` tests on part ``i`` (every graph is tested exactly once over the folds), validates on the
next ``max(1, round(val_fraction · n))`` graphs after it in the shuffled cycle, and trains on
the rest. Validation picks the checkpoint; the test part is evaluated once, after training.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Split:
    fold: int
    train: tuple[str, ...]
    val: tuple[str, ...]
    test: tuple[str, ...]


def conversation_folds(names: Sequence[str], k: int = 5, seed: int = 0, val_fraction: float = 0.2) -> list[Split]:
    """``k`` splits of ``names`` (see module docstring); needs at least ``k`` names and 3 per fold."""
    names = sorted(set(names))
    n = len(names)
    n_val = max(1, round(val_fraction * n))
    if k < 1 or n < max(k, 3):
        raise ValueError(f"cannot make {k} folds from {n} graphs")
    order = names[:]
    random.Random(seed).shuffle(order)
    bounds = [round(i * n / k) for i in range(k + 1)]
    splits = []
    for i in range(k):
        test = order[bounds[i]:bounds[i + 1]]
        rest = order[bounds[i + 1]:] + order[:bounds[i]]
        n_v = min(n_val, len(rest) - 1)
        if not test or n_v < 1:
            raise ValueError(f"fold {i}: {n} graphs are too few for {k} folds with validation")
        splits.append(Split(i, tuple(sorted(rest[n_v:])), tuple(sorted(rest[:n_v])), tuple(sorted(test))))
    return splits
