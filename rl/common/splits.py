"""Splits by conversation (graph name): K folds, each with train / validation / test graphs.

The graph names are shuffled once by ``seed`` and cut into ``k`` near-equal test parts; fold
``i`` tests on part ``i`` (every graph is tested exactly once over the folds), validates on the
next ``max(1, round(val_fraction · n))`` graphs after it in the shuffled cycle, and trains on
the rest. Validation picks the checkpoint; the test part is evaluated once, after training.
Graphs of several sources (LoCoMo's and REALTALK's conversations) are split source by source and
joined fold by fold (:func:`source_folds`), so each source's graphs are spread over every fold.

:class:`FoldSplit` is the schema of the ``split`` config group (``configs/split/default.yaml``,
registered when this module is imported), the one fold-split block of every config that splits:
at ``split`` (``train_gnn``, ``train_writer``, ``relation_family``) or at ``cv`` (``train``,
``head_to_head``: ``- split@cv: default``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from graphmem.config.schemas import add_schema


@dataclass
class FoldSplit:
    """Which split of :func:`conversation_folds` a run uses.

    ``k`` folds of the graph names shuffled by ``seed``, validating on ``max(1, round(val_fraction · n))``
    of them; a single-fold run uses fold ``fold``, a cross-validation (``scripts/train.py``) the folds
    ``folds`` (``null``: all ``k``). Their ranges (``3 <= k``, ``0 <= fold, folds < k``) are checked by
    :mod:`graphmem.config.bounds` when the command line is composed, ``val_fraction`` by :func:`check_fraction`.
    """

    k: int = 5
    seed: int = 0
    val_fraction: float = 0.2
    fold: int = 0
    folds: Any = None  # a list of fold numbers or null; untyped so that graphmem.config.bounds names a bad value


add_schema("split", FoldSplit)


PARTS = ("train", "val", "test")


@dataclass(frozen=True)
class Split:
    fold: int
    train: tuple[str, ...]
    val: tuple[str, ...]
    test: tuple[str, ...]


def check_fraction(name: str, value: float) -> float:
    """``value`` when it is a number in ``[0, 1)``; else a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a fraction in [0, 1), got {value!r}")
    return value


def conversation_folds(names: Sequence[str], k: int = 5, seed: int = 0, val_fraction: float = 0.2) -> list[Split]:
    """``k`` splits of ``names`` (see module docstring); needs at least ``k`` names and 3 per fold."""
    check_fraction("val_fraction", val_fraction)
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
        test = order[bounds[i] : bounds[i + 1]]
        rest = order[bounds[i + 1] :] + order[: bounds[i]]
        n_v = min(n_val, len(rest) - 1)
        if not test or n_v < 1:
            raise ValueError(f"fold {i}: {n} graphs are too few for {k} folds with validation")
        splits.append(Split(i, tuple(sorted(rest[n_v:])), tuple(sorted(rest[:n_v])), tuple(sorted(test))))
    return splits


def source_folds(
    sources: Mapping[str, Sequence[str]], k: int = 5, seed: int = 0, val_fraction: float = 0.2
) -> list[Split]:
    """``k`` splits of graphs from several sources (``source -> graph names``: LoCoMo's and REALTALK's
    conversations), each source's graphs spread over every fold: each source is split alone by
    :func:`conversation_folds` (the split it would have on its own, so a run over one source and a run over
    several test the same graphs of it), and fold ``i`` joins the sources' parts ``i``. One source gives
    :func:`conversation_folds` itself; a source too small for ``k`` folds is refused, naming it."""
    per_source = []
    for name, names in sources.items():
        try:
            per_source.append(conversation_folds(names, k, seed, val_fraction))
        except ValueError as err:
            raise ValueError(f"source {name!r}: {err}") from None
    return [
        Split(i, *(tuple(sorted(n for folds in per_source for n in getattr(folds[i], part))) for part in PARTS))
        for i in range(k)
    ]


def check_share(name: str, value: Any) -> float:
    """``value`` when it is a number in ``(0, 1]``; else a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a share in (0, 1], got {value!r}")
    return float(value)


def subsample(qids: Sequence[str], fraction: float, seed: int = 0) -> list[int]:
    """The positions in ``qids`` of a ``fraction`` of them (``max(1, round(fraction · n))``), in input order: the
    ids sorted, shuffled by ``Random(seed)`` and cut, so for one seed a smaller fraction's questions are among a
    larger one's (a learning curve adds questions, never swaps them). ``fraction = 1`` keeps every position."""
    check_share("fraction", fraction)
    if fraction == 1:
        return list(range(len(qids)))
    order = sorted(set(qids))
    random.Random(seed).shuffle(order)
    kept = set(order[: max(1, round(fraction * len(order)))])
    return [i for i, q in enumerate(qids) if q in kept]


@dataclass(frozen=True)
class QuestionSplit:
    """Question ids split within each conversation: every graph contributes to every part."""

    train: tuple[str, ...]
    val: tuple[str, ...]
    test: tuple[str, ...]


def within_conversation_split(
    qids: Sequence[str], graphs: Sequence[str], test_fraction: float = 0.2, val_fraction: float = 0.2, seed: int = 0
) -> QuestionSplit:
    """Split the questions of each graph into train / validation / test parts.

    ``qids[i]`` is asked over ``graphs[i]``. Per graph, its question ids are sorted, shuffled by
    ``Random(seed · 1000003 + rank of the graph name in sorted order)``, and cut into
    ``n_test = round(test_fraction · n)``, ``n_val = round(val_fraction · n)`` and the rest for
    training (at least one training question when ``n ≥ 1``). Parts keep the input order of ``qids``.
    """
    if len(qids) != len(graphs):
        raise ValueError(f"{len(qids)} question ids for {len(graphs)} graph names")
    check_fraction("test_fraction", test_fraction), check_fraction("val_fraction", val_fraction)
    if not test_fraction + val_fraction < 1:
        raise ValueError(f"fractions test={test_fraction}, val={val_fraction} must be >= 0 and sum below 1")
    by_graph: dict[str, list[str]] = {}
    for q, g in zip(qids, graphs):
        by_graph.setdefault(g, []).append(q)
    part: dict[str, str] = {}
    for gi, g in enumerate(sorted(by_graph)):
        order = sorted(by_graph[g])
        random.Random(seed * 1_000_003 + gi).shuffle(order)
        n = len(order)
        n_test = min(round(test_fraction * n), max(0, n - 1))
        n_val = min(round(val_fraction * n), max(0, n - 1 - n_test))
        for q in order[:n_test]:
            part[q] = "test"
        for q in order[n_test : n_test + n_val]:
            part[q] = "val"
        for q in order[n_test + n_val :]:
            part[q] = "train"
    return QuestionSplit(*(tuple(q for q in qids if part[q] == p) for p in ("train", "val", "test")))
