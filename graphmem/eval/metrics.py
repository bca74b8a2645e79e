"""Retrieval metrics: per question, then aggregated overall and per category.

This is the only module where a policy's output meets the gold fields of a :class:`Question`.
Per question, with ``L`` the policy's returned ranked list (``Retrieval.ranked``: the loaded nodes,
most relevant first; a policy that reports no ranking returns them in load order) and ``G`` the
*resolvable* gold evidence (gold ids that name a node of the graph; dangling ids are reported by
the loader and never count):

* evidence recall        ``|L ∩ G| / |G|``            (undefined, and excluded, when ``G`` is empty)
* all-evidence hit       ``1[G ⊆ L]``                  (undefined when ``G`` is empty)
* precision              ``|L ∩ G| / |L|``  (0 when nothing is loaded; undefined when ``G`` is empty)
* first-gold rank        ``min{r : L_r ∈ G}``, 1-based position in the ranked list, ``None`` if no gold loaded
* reciprocal rank        ``1 / first-gold rank`` (0 when no gold is loaded)
* loaded tokens, hop depth, latency — copied from the retrieval trace.

Recall, all-evidence hit and precision read ``L`` as a set: the same for any order of the loaded
nodes. The ranks, the passage ranking and what is built on it read its order.

HotpotQA adds, with ``T`` the gold supporting-paragraph titles present in the graph:

* supporting-sentence recall   ``|L ∩ S| / |S|`` over the gold ``title::idx`` sentence ids ``S``
* supporting-paragraph recall  ``|{t ∈ T : some loaded node has title t}| / |T|`` — a paragraph
  counts when any of its nodes (passage, title or sentence) is loaded;
* all-supporting hit           ``1[every t ∈ T has a loaded node]``.

HotpotQA and MuSiQue add the passage ranking ``P``: the distinct titles of the nodes of ``L`` in
list order (a policy that returns sentences ranks a passage by its best-ranked sentence), and

* passage recall@k (HippoRAG 2, GFM-RAG)  ``|P[:k] ∩ T| / |T|``, for k = 2 and 5;
* on a conversation (no supporting titles: LoCoMo, REALTALK) a turn is the passage, so R@k is
  ``|L[:k] ∩ G| / |G|``, the share of the gold turns among the list's first k;
* chain following (MuSiQue)  ``max{j : c_1..c_j ∈ P, pos(c_1) <= ... <= pos(c_j)} / m`` over the
  gold chain ``c_1..c_m`` (the supporting passage of each decomposition step, in step order;
  ``pos`` is the position in ``P``): the share of the chain's steps reached in chain order.

One definition, R@k: R@k (passage recall at k) is computed on the policy's returned ranked list:
the distinct passages of its nodes in list order, cut at k; the budget still decides what is
loaded. A second protocol is named apart, the *budget sweep*: recall with the budget set to ``n``
nodes (or tokens), the policy rerun at each budget (LoCoMo's 5 / 10 / 25 / 50 turns,
``node_sweep`` of ``scripts/train.py``, ``sweep_tokens`` of ``scripts/evaluate.py``); it reports
"recall at n nodes" and is never called R@k.

Aggregates (:func:`aggregate`) are arithmetic means over the questions where a metric is defined,
the mean first-gold rank over questions with a gold hit, and latency percentiles
(:func:`percentile`). :func:`summarize` groups questions: for LoCoMo, ``overall`` covers
categories 1-4 and category 5 (adversarial) is reported apart, with ``all`` covering 1-5.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import LOCOMO_CATEGORIES, Question

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
    support_paragraph_hit: float | None = None
    passage_recall_2: float | None = None
    passage_recall_5: float | None = None
    chain_following: float | None = None

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
    ranked_ids: Sequence[str],
    loaded_tokens: int,
    hops: int,
    latency_s: float,
) -> QuestionMetrics:
    """Score one retrieval against ``question``'s gold fields: ``ranked_ids`` is the policy's
    returned ranked list (``Retrieval.ranked_ids``), read in list order by every rank metric."""
    ranked = list(dict.fromkeys(ranked_ids))
    loaded_set = set(ranked)
    gold = resolvable_evidence(question, graph)
    gold_set = set(gold)
    hits = [i for i, node in enumerate(ranked) if node in gold_set]
    n_hit = len(hits)
    if gold:
        recall: float | None = n_hit / len(gold)
        all_hit: float | None = float(n_hit == len(gold))
        precision: float | None = n_hit / len(ranked) if ranked else 0.0
        reciprocal: float | None = 1.0 / (hits[0] + 1) if hits else 0.0
    else:
        recall = all_hit = precision = reciprocal = None
    sentence_recall = paragraph_recall = paragraph_hit = recall_2 = recall_5 = chain = None
    if question.support_titles:
        sentences = [g for g in gold if not _is_title_node(g) and "::" in g]
        if sentences:
            sentence_recall = sum(s in loaded_set for s in sentences) / len(sentences)
        titles_in_graph = graph_titles(graph)
        support = [t for t in dict.fromkeys(question.support_titles) if t in titles_in_graph]
        ranking = passage_ranking(graph, ranked)
        if support:
            paragraph_recall = recall_at(ranking, support, len(ranking))
            paragraph_hit = float(paragraph_recall == 1.0)
            recall_2, recall_5 = recall_at(ranking, support, 2), recall_at(ranking, support, 5)
        steps = [node_title(graph, c) for c in question.support_chain if graph.has_node(c)]
        if steps:
            chain = chain_following(ranking, steps)
    elif gold:  # a conversation: each turn is its own passage
        recall_2, recall_5 = recall_at(ranked, gold, 2), recall_at(ranked, gold, 5)
    return QuestionMetrics(
        n_loaded=len(ranked),
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
        support_paragraph_hit=paragraph_hit,
        passage_recall_2=recall_2,
        passage_recall_5=recall_5,
        chain_following=chain,
    )


def graph_titles(graph: MemoryGraph) -> set[str]:
    """The passage titles of ``graph``'s nodes (kept in ``graph.derived``)."""
    titles = graph.derived.get("eval.titles")
    if titles is None:
        titles = graph.derived.put("eval.titles", {node_title(graph, n) for n in graph.node_ids})
    return titles


def passage_ranking(graph: MemoryGraph, ranked: Sequence[str]) -> list[str]:
    """Distinct passage titles of the nodes of ``ranked``, in list order (each at its first node)."""
    return list(dict.fromkeys(node_title(graph, n) for n in ranked))


def recall_at(ranking: Sequence[str], gold: Sequence[str], k: int) -> float:
    """``|ranking[:k] ∩ gold| / |gold|`` (gold deduplicated; needs a non-empty ``gold``)."""
    gold_set = set(gold)
    return len(set(ranking[:k]) & gold_set) / len(gold_set)


# ---------------------------------------------------------------------------- batched, as tensors (training)
def mask_recall(loaded: Tensor, gold: Tensor) -> Tensor:
    """``[B]`` evidence recall ``|L ∩ G| / |G|`` of ``[B, N]`` masks of loaded and gold rows (0 without gold)."""
    return (loaded & gold).sum(1).float() / gold.sum(1).clamp(min=1).float()


def evidence_shares(loaded: Tensor, gold: Tensor) -> Tensor:
    """``[T, B]`` ``1(v_t ∈ G_b) / |G_b|`` for ``[T, B]`` loaded rows in load order (``-1`` none) and ``[B, G]``
    gold rows (``-1`` padded): summed over ``t``, each walk's evidence recall."""
    n_gold = (gold >= 0).sum(1).clamp(min=1).float()
    hit = ((loaded[..., None] == gold[None]) & (gold[None] >= 0)).any(-1) & (loaded >= 0)
    return hit.float() / n_gold[None]


def mean_recall_at(query: Tensor, gold: Tensor, position: Tensor, n_gold: Tensor, cuts: Sequence[int]) -> float:
    """Mean over questions and over ``k`` in ``cuts`` of recall@k, from the ranked items of every question:
    ``query`` (its question), ``gold`` (whether it is gold) and ``position`` (its rank in its question's list),
    with ``n_gold`` the gold count of each question."""
    total = torch.zeros(n_gold.numel())
    for k in cuts:
        total += torch.zeros_like(total).index_add(0, query, (gold & (position < k)).float())
    return float((total / len(cuts) / n_gold).mean())


def chain_following(ranking: Sequence[str], chain: Sequence[str]) -> float:
    """Share of the chain's steps reached in chain order (module docstring); a passage that
    supports two consecutive steps is in order with itself."""
    pos = {t: i for i, t in reversed(list(enumerate(ranking)))}
    reached, last = 0, -1
    for step in chain:
        if step not in pos or pos[step] < last:
            break
        reached, last = reached + 1, pos[step]
    return reached / len(chain)


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
    latency mean / p50 / p95 in milliseconds, and for HotpotQA / MuSiQue the supporting-sentence and
    supporting-paragraph recall, all-supporting hit, passage recall@2 / @5 and chain-following means.
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
        "support_paragraph_hit": mean(m.support_paragraph_hit for m in metrics),
        "passage_recall_2": mean(m.passage_recall_2 for m in metrics),
        "passage_recall_5": mean(m.passage_recall_5 for m in metrics),
        "chain_following": mean(m.chain_following for m in metrics),
    }


def category_name(category: int | str) -> str:
    """Explicit LoCoMo name for categories 1-5 (never the bare number); other values as given."""
    if isinstance(category, int) and not isinstance(category, bool):
        if category not in LOCOMO_CATEGORIES:
            raise ValueError(f"unknown LoCoMo category {category!r}; known: {sorted(LOCOMO_CATEGORIES)}")
        return LOCOMO_CATEGORIES[category]
    return str(category)


def in_overall(category: int | str) -> bool:
    """Whether a question counts in the ``overall`` group (every question but LoCoMo's adversarial category 5)."""
    return not (isinstance(category, int) and not isinstance(category, bool) and category == ADVERSARIAL_CATEGORY)


def summarize(categories: Sequence[int | str], metrics: Sequence[QuestionMetrics]) -> dict[str, dict[str, Any]]:
    """Aggregate overall and per category, in a stable order.

    ``overall`` excludes LoCoMo category 5 (adversarial), which has its own group; ``all`` (only
    when some category-5 question is present) covers every question. Category groups follow
    LoCoMo's numeric order, then other category names sorted.
    """
    if len(categories) != len(metrics):
        raise ValueError(f"{len(categories)} categories for {len(metrics)} metric rows")
    adversarial = [not in_overall(c) for c in categories]
    groups: dict[str, dict[str, Any]] = {
        OVERALL: aggregate([m for m, adv in zip(metrics, adversarial) if not adv]),
    }
    keys = sorted(set(categories), key=lambda c: (not isinstance(c, int), c if isinstance(c, int) else 0, str(c)))
    for c in keys:
        groups[category_name(c)] = aggregate([m for m, k in zip(metrics, categories) if k == c])
    if any(adversarial):
        groups[ALL] = aggregate(list(metrics))
    return groups
