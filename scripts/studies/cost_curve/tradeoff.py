"""The recall–tokens trade-off of retrieval policies: curves over a node sweep, points, paired token ratios.

Per question ``i`` (the ``overall`` group, :func:`graphmem.eval.metrics.in_overall`, with a defined
evidence recall) a policy loads ``t_i`` tokens and reaches recall ``r_i``. Over ``n`` questions:

* a **point**: ``t̄ = (1/n) Σ t_i`` and ``r̄ = (1/n) Σ r_i``, each with the 95 % percentile bootstrap
  interval of the mean (:func:`graphmem.eval.stats.bootstrap_ci`, questions resampled with replacement);
* a **curve**: one point per ``max_nodes`` level of a node sweep, in level order;
* the **paired token ratio** of a policy ``A`` against a reference ``R`` on the same questions:
  ``ρ = Σ t^A_i / Σ t^R_i`` (the ratio of mean tokens), its 95 % interval the 2.5th and 97.5th
  percentiles of ``ρ*`` over ``n_boot`` paired resamples (one draw of question indices applied to both
  policies); the **relative saving** is ``1 − ρ`` with the interval ``[1 − ρ_hi, 1 − ρ_lo]``;
* the **tokens to reach** a recall ``r*`` on a curve: linear interpolation between the first two
  consecutive points (in level order) whose recalls bracket ``r*``,
  ``t = t_j + (r* − r_j) · (t_{j+1} − t_j) / (r_{j+1} − r_j)``; undefined (``None``, with the reason)
  when ``r*`` lies below the first point or above every point.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from graphmem.core.errors import InputError
from graphmem.eval.metrics import in_overall
from graphmem.eval.stats import bootstrap_ci


def question_values(rows: Sequence[Mapping[str, Any]], where: str) -> dict[str, tuple[float, float]]:
    """``qid -> (loaded_tokens, evidence_recall)`` of the ``overall`` rows with a defined recall; a question
    twice in ``rows`` is an error naming ``where``."""
    out: dict[str, tuple[float, float]] = {}
    for row in rows:
        if not in_overall(row.get("category", "")) or row["metrics"].get("evidence_recall") is None:
            continue
        if row["qid"] in out:
            raise InputError(f"{where}: question {row['qid']!r} appears twice")
        out[row["qid"]] = (float(row["metrics"]["loaded_tokens"]), float(row["metrics"]["evidence_recall"]))
    return out


def mean_interval(values: Sequence[float], n_boot: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """``{mean, ci95}``: the mean and its percentile bootstrap interval (module docstring)."""
    return {"mean": float(np.mean(values)), "ci95": list(bootstrap_ci(values, n_boot=n_boot, seed=seed))}


def point(values: Mapping[str, tuple[float, float]], n_boot: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Mean tokens and mean recall of ``qid -> (tokens, recall)``, each with its interval, and ``n``."""
    if not values:
        raise InputError("no question with a defined evidence recall to place a point")
    tokens, recall = zip(*values.values())
    return {
        "n": len(values),
        "tokens": mean_interval(tokens, n_boot, seed),
        "recall": mean_interval(recall, n_boot, seed),
    }


def curve(
    levels: Mapping[int, Sequence[Mapping[str, Any]]], where: str, n_boot: int = 10_000, seed: int = 0
) -> list[dict[str, Any]]:
    """One :func:`point` per ``max_nodes`` level of a node sweep (``level -> rows``), in level order."""
    return [
        {"max_nodes": int(n), **point(question_values(levels[n], f"{where} max_nodes={n}"), n_boot, seed)}
        for n in sorted(levels)
    ]


def paired_token_ratio(
    values: Mapping[str, float],
    reference: Mapping[str, float],
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """``ρ = Σ t^A / Σ t^R`` over the questions both define, its paired bootstrap interval, the saving ``1 − ρ``
    with its interval, and ``n`` (module docstring)."""
    qids = [q for q in values if q in reference]
    if len(qids) < 2:
        raise InputError(f"a paired token ratio needs two shared questions, got {len(qids)}")
    a = np.array([values[q] for q in qids], dtype=np.float64)
    r = np.array([reference[q] for q in qids], dtype=np.float64)
    if r.sum() <= 0:
        raise InputError("the reference loaded no tokens: the token ratio is undefined")
    rng = np.random.default_rng(seed)
    ratios = np.empty(n_boot)
    for start in range(0, n_boot, 1000):
        idx = rng.integers(0, len(qids), size=(min(1000, n_boot - start), len(qids)))
        ratios[start : start + len(idx)] = a[idx].sum(axis=1) / np.maximum(r[idx].sum(axis=1), 1e-12)
    tail = (1 - level) / 2 * 100
    lo, hi = (float(x) for x in np.percentile(ratios, [tail, 100 - tail]))
    ratio = float(a.sum() / r.sum())
    return {
        "n": len(qids),
        "mean": float(a.mean()),
        "reference_mean": float(r.mean()),
        "ratio": ratio,
        "ratio_ci95": [lo, hi],
        "saving": 1 - ratio,
        "saving_ci95": [1 - hi, 1 - lo],
        "n_boot": n_boot,
    }


def tokens_to_reach(points: Sequence[Mapping[str, Any]], recall: float) -> dict[str, Any]:
    """Mean tokens at which a :func:`curve` reaches ``recall`` (linear interpolation, module docstring):
    ``{tokens, between: [max_nodes_j, max_nodes_j+1] | None, status}`` with ``status`` one of
    ``interpolated``, ``below_sweep`` (under the first point) or ``above_sweep`` (over every point)."""
    xs = [p["tokens"]["mean"] for p in points]
    ys = [p["recall"]["mean"] for p in points]
    if not points:
        raise InputError("an empty curve reaches no recall")
    if recall < ys[0]:
        return {"tokens": None, "between": None, "status": "below_sweep"}
    for j in range(len(points) - 1):
        lo, hi = sorted((ys[j], ys[j + 1]))
        if lo <= recall <= hi:
            frac = 0.0 if ys[j + 1] == ys[j] else (recall - ys[j]) / (ys[j + 1] - ys[j])
            return {
                "tokens": xs[j] + frac * (xs[j + 1] - xs[j]),
                "between": [points[j]["max_nodes"], points[j + 1]["max_nodes"]],
                "status": "interpolated",
            }
    if recall == ys[-1]:
        return {"tokens": xs[-1], "between": [points[-1]["max_nodes"]] * 2, "status": "interpolated"}
    return {"tokens": None, "between": None, "status": "above_sweep"}
