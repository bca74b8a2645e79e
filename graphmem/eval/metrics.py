"""Retrieval metrics: per question, then aggregated overall and per category.

This is the only module where a policy's output meets the gold fields of a :class:`Question`.
Per question, with ``L`` the loaded node ids in load order and ``G`` the *resolvable* gold
evidence (gold ids that name a node of the graph; dangling ids are reported by the loader and
never count):

* evidence recall        ``|L ∩ G| / |G|``            (undefined, and excluded, when ``G`` is empty)
* all-evidence hit       ``1[G ⊆ L]``                  (undefined when ``G`` is empty)
* precision              ``|L ∩ G| / |L|``  (0 when nothing is loaded; undefined when ``G`` is empty)
* first-gold rank        ``min{r : L_r ∈ G}``, 1-based position in load order, ``None`` if no gold loaded
* reciprocal rank        ``1 / first-gold rank`` (0 when no gold is loaded)
* loaded tokens, hop depth, latency — copied from the retrieval trace.

HotpotQA adds, with ``T`` the gold supporting-paragraph titles present in the graph:

* supporting-sentence recall   ``|L ∩ S| / |S|`` over the gold ``title::idx`` sentence ids ``S``
* supporting-paragraph recall  ``|{t ∈ T : some loaded node has title t}| / |T|`` — a paragraph
  counts when any of its sentences or its title node is loaded.

Aggregates (:func:`aggregate`) are arithmetic means over the questions where a metric is defined,
the mean first-gold rank over questions with a gold hit, and latency percentiles
(:func:`percentile`). :func:`summarize` groups questions: for LoCoMo, ``overall`` covers
categories 1-4 and category 5 (adversarial) is reported apart, with ``all`` covering 1-5.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from graphmem.datasets.types import LOCOMO_CATEGORIES, Question
from graphmem.graph import MemoryGraph

ADVERSARIAL_CATEGORY = 5
OVERALL = "overall"
ALL = "all"


@dataclass(frozen=True)
class QuestionMetrics:
    """Metrics of one retrieval against one question's gold evidence (formulas: module docstring)."""

    n_loaded: int
    n_gold: int
    n_gold_loaded: int
    evidence_recall: float | None
    all_evidence_hit: float | None
    precision: float | None
    first_gold_rank: int | None
    reciprocal_rank: float | None
    loaded_tokens: int
    hops: int
    latency_s: float
    support_sentence_recall: float | None = None
    support_paragraph_recall: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def node_title(graph: MemoryGraph, node_id: str) -> str:
    """Source paragraph title of a node: ``metadata['title']``, else the part of the id before ``::``."""
    title = graph.metadata[graph.index_of(node_id)].get("title")
    return str(title) if title is not None else node_id.split("::", 1)[0]


def resolvable_evidence(question: Question, graph: MemoryGraph) -> list[str]:
    """Gold evidence ids that name a node of ``graph``, deduplicated, in their given order."""
    return [e for e in dict.fromkeys(question.evidence) if graph.has_node(e)]


def question_metrics(
    question: Question,
    graph: MemoryGraph,
    loaded_ids: Sequence[str],
    loaded_tokens: int,
    hops: int,
    latency_s: float,
) -> QuestionMetrics:
    """Score one retrieval (``loaded_ids`` in load order) against ``question``'s gold fields."""
    loaded = list(dict.fromkeys(loaded_ids))
    loaded_set = set(loaded)
    gold = resolvable_evidence(question, graph)
    gold_set = set(gold)
    hits = [i for i, node in enumerate(loaded) if node in gold_set]
    n_hit = len(hits)
    if gold:
        recall: float | None = n_hit / len(gold)
        all_hit: float | None = float(n_hit == len(gold))
        precision: float | None = n_hit / len(loaded) if loaded else 0.0
        reciprocal: float | None = 1.0 / (hits[0] + 1) if hits else 0.0
    else:
        recall = all_hit = precision = reciprocal = None
    sentence_recall = paragraph_recall = None
    if question.support_titles:
        sentences = [g for g in gold if not _is_title_node(g)]
        if sentences:
            sentence_recall = sum(s in loaded_set for s in sentences) / len(sentences)
        titles_in_graph = {node_title(graph, n) for n in graph.node_ids}
        support = [t for t in dict.fromkeys(question.support_titles) if t in titles_in_graph]
        if support:
            loaded_titles = {node_title(graph, n) for n in loaded}
            paragraph_recall = sum(t in loaded_titles for t in support) / len(support)
    return QuestionMetrics(
        n_loaded=len(loaded),
        n_gold=len(gold),
        n_gold_loaded=n_hit,
        evidence_recall=recall,
        all_evidence_hit=all_hit,
        precision=precision,
        first_gold_rank=hits[0] + 1 if hits else None,
        reciprocal_rank=reciprocal,
        loaded_tokens=int(loaded_tokens),
        hops=int(hops),
        latency_s=float(latency_s),
        support_sentence_recall=sentence_recall,
        support_paragraph_recall=paragraph_recall,
    )


def _is_title_node(node_id: str) -> bool:
    head, sep, tail = node_id.partition("::")
    return bool(sep) and head == tail


# ---------------------------------------------------------------------------- aggregation
def mean(values: Iterable[float | None]) -> float | None:
    """Arithmetic mean of the defined (non-``None``) values; ``None`` when there are none."""
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear-interpolated ``p``-th percentile: with ``x`` sorted and ``h = (n-1)·p/100``,
    ``x[⌊h⌋] + (h-⌊h⌋)·(x[⌊h⌋+1] - x[⌊h⌋])``. ``None`` for no values."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile p must be in [0, 100], got {p}")
    xs = sorted(float(v) for v in values)
    if not xs:
        return None
    h = (len(xs) - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def aggregate(metrics: Sequence[QuestionMetrics]) -> dict[str, Any]:
    """Summary of a group of questions.

    Returns ``n`` (questions), ``n_scored`` (with resolvable gold), ``n_no_gold`` (excluded from
    the gold metrics), means of recall / all-hit / precision / reciprocal rank over scored
    questions, ``gold_hit_rate`` (share of scored questions with any gold loaded), mean
    ``first_gold_rank`` over questions with a gold hit, means of loaded nodes / tokens / hops,
    latency mean / p50 / p95 in milliseconds, and for HotpotQA the
    supporting-sentence and supporting-paragraph recall means.
    """
    scored = [m for m in metrics if m.evidence_recall is not None]
    latencies_ms = [m.latency_s * 1000.0 for m in metrics]
    return {
        "n": len(metrics),
        "n_scored": len(scored),
        "n_no_gold": len(metrics) - len(scored),
        "evidence_recall": mean(m.evidence_recall for m in scored),
        "all_evidence_hit": mean(m.all_evidence_hit for m in scored),
        "precision": mean(m.precision for m in scored),
        "gold_hit_rate": mean(float(m.n_gold_loaded > 0) for m in scored),
        "first_gold_rank": mean(m.first_gold_rank for m in scored),
        "mrr": mean(m.reciprocal_rank for m in scored),
        "loaded_nodes": mean(m.n_loaded for m in metrics),
        "loaded_tokens": mean(m.loaded_tokens for m in metrics),
        "hops": mean(m.hops for m in metrics),
        "latency_ms_mean": mean(latencies_ms),
        "latency_ms_p50": percentile(latencies_ms, 50),
        "latency_ms_p95": percentile(latencies_ms, 95),
        "support_sentence_recall": mean(m.support_sentence_recall for m in metrics),
        "support_paragraph_recall": mean(m.support_paragraph_recall for m in metrics),
    }


def category_name(category: int | str) -> str:
    """Explicit LoCoMo name for categories 1-5 (never the bare number); other values as given."""
    if isinstance(category, int) and not isinstance(category, bool):
        if category not in LOCOMO_CATEGORIES:
            raise ValueError(f"unknown LoCoMo category {category!r}; known: {sorted(LOCOMO_CATEGORIES)}")
        return LOCOMO_CATEGORIES[category]
    return str(category)


def summarize(categories: Sequence[int | str], metrics: Sequence[QuestionMetrics]) -> dict[str, dict[str, Any]]:
    """Aggregate overall and per category, in a stable order.

    ``overall`` excludes LoCoMo category 5 (adversarial), which has its own group; ``all`` (only
    when some category-5 question is present) covers every question. Category groups follow
    LoCoMo's numeric order, then other category names sorted.
    """
    if len(categories) != len(metrics):
        raise ValueError(f"{len(categories)} categories for {len(metrics)} metric rows")
    adversarial = [c == ADVERSARIAL_CATEGORY and isinstance(c, int) for c in categories]
    groups: dict[str, dict[str, Any]] = {
        OVERALL: aggregate([m for m, adv in zip(metrics, adversarial) if not adv]),
    }
    keys = sorted(set(categories), key=lambda c: (not isinstance(c, int), c if isinstance(c, int) else 0, str(c)))
    for c in keys:
        groups[category_name(c)] = aggregate([m for m, k in zip(metrics, categories) if k == c])
    if any(adversarial):
        groups[ALL] = aggregate(list(metrics))
    return groups
