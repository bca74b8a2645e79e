"""Evidence-feedback learning without an LLM: an oracle Reflector for GraphMemory's Beta counters.

GraphMemory (§3, Appendix B.1) learns edge weights from Reflector labels on the transitions a
retrieval used. This module replaces the LLM Reflector by an oracle that reads the gold evidence
of *training* questions only, so that posterior-mean BFS learns from the same training questions a
learned router trains on. Per training example ``t``:

1. **Retrieve** with the current counters, from the query alone (id, text, embedding):
   ``R_t = beta_bfs(G_t, x_t)``. Gold is not in scope here.
2. **Label** each traversed transition ``(u -> v)`` of ``R_t`` (the edge whose push loaded ``v``;
   the traversed edges form a forest rooted at the entries). With ``D(v)`` = ``v`` and every node
   loaded below ``v`` in that forest (this retrieval only) and ``Y`` the gold node set:

       helpful  if v ∈ Y                       (confidence c_helpful)
       harmful  if D(v) ∩ Y = ∅                (confidence c_harmful)
       neutral  otherwise (v ∉ Y, a gold node is loaded below v)

3. **Update** with eq. 21 through :meth:`MemoryGraph.observe`:
   ``S_e += c`` (helpful), ``F_e += c`` (harmful), nothing for neutral or ``c = 0``; every
   parallel edge ``u -> v`` is updated, and no edge is ever created.

Questions with no gold node in their graph carry no signal and are skipped. Only the graphs the
training questions are asked over change; callers that must keep the originals pass copies.

**The LLM Reflector as a feedback source** (:class:`LLMReflector`, GraphMemory B.1): step 2 is
done by an LLM instead. It reads the loaded records, the question and, as feedback, the
reference answer (read after the retrieval, like the oracle's gold), and labels the same
traversed transitions helpful / harmful / neutral with a confidence; its reply is constrained to
exactly those transitions (:func:`~graphmem.llm.call_schemas.reflection_schema`) and validated.
Step 3 is unchanged, so the two sources can be compared on the same questions and graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from torch import Tensor

from graphmem.core import Budget, Query, Retrieval
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.llm.call_schemas import reflection_schema
from graphmem.llm.prompts import block, make_nonce, memory_block, render
from graphmem.llm.schemas import Reflection
from graphmem.policies.base import TraversalPolicy


@dataclass(frozen=True)
class OracleConfig:
    """Confidences the oracle Reflector attaches to its labels (each in ``[0, 1]``).

    Args:
        helpful_confidence: ``c`` of a helpful transition (default: 1.0).
        harmful_confidence: ``c`` of a harmful transition (default: 1.0).
    """

    helpful_confidence: float = 1.0
    harmful_confidence: float = 1.0

    def __post_init__(self) -> None:
        for name in ("helpful_confidence", "harmful_confidence"):
            c = getattr(self, name)
            if not 0.0 <= c <= 1.0:
                raise ValueError(f"OracleConfig.{name} must lie in [0, 1], got {c!r}")


@dataclass(frozen=True)
class TransitionLabel:
    """One labelled transition ``source -> target`` (node ids) with its confidence."""

    source: str
    target: str
    label: str
    confidence: float


@dataclass
class EvidenceStats:
    """Running totals of an evidence-learning run."""

    examples: int = 0
    """training questions used (with at least one gold node in their graph)"""
    skipped: int = 0
    """training questions without any gold node in their graph"""
    labels: dict[str, int] = field(default_factory=lambda: {"helpful": 0, "harmful": 0, "neutral": 0})
    """labelled transitions by label"""
    edges_updated: int = 0
    """counter updates applied (parallel edges counted separately)"""
    graphs_touched: set[str] = field(default_factory=set)
    """names of graphs whose counters may have changed"""
    failed_calls: int = 0
    """questions whose LLM Reflector call failed (no labels, counters unchanged)"""

    def to_json(self) -> dict:
        return {
            "examples": self.examples,
            "skipped": self.skipped,
            "failed_calls": self.failed_calls,
            "labels": dict(self.labels),
            "edges_updated": self.edges_updated,
            "graphs_touched": sorted(self.graphs_touched),
        }


def loaded_below(graph: MemoryGraph, retrieval: Retrieval) -> dict[int, set[int]]:
    """``D(v)`` for every node ``v`` loaded through a traversed edge: ``v`` and its loaded descendants.

    The parent of a loaded node is the source of the traversed edge that loaded it, so the
    traversed edges form a forest over the loaded nodes.
    """
    src, dst = graph.edge_index[0], graph.edge_index[1]
    parent = {int(dst[e]): int(src[e]) for e in retrieval.edges_traversed}
    below: dict[int, set[int]] = {v: {v} for v in parent}
    for v in parent:
        u, seen = parent.get(v), {v}
        while u is not None and u in below and u not in seen:  # walk up, adding v to each ancestor
            below[u].add(v)
            seen.add(u)
            u = parent.get(u)
    return below


def oracle_labels(
    graph: MemoryGraph, retrieval: Retrieval, gold: set[str], config: OracleConfig = OracleConfig()
) -> list[TransitionLabel]:
    """Labels of the traversed transitions of ``retrieval`` (module docstring, step 2), in load order.

    Each pair ``(u, v)`` is labelled at most once per retrieval (GraphMemory B.1).
    """
    ids, src, dst = graph.node_ids, graph.edge_index[0], graph.edge_index[1]
    gold_rows = {graph.index_of(g) for g in gold if graph.has_node(g)}
    below = loaded_below(graph, retrieval)
    out: list[TransitionLabel] = []
    seen: set[tuple[int, int]] = set()
    for e in retrieval.edges_traversed:
        u, v = int(src[e]), int(dst[e])
        if (u, v) in seen:
            continue
        seen.add((u, v))
        if v in gold_rows:
            out.append(TransitionLabel(ids[u], ids[v], "helpful", config.helpful_confidence))
        elif not below[v] & gold_rows:
            out.append(TransitionLabel(ids[u], ids[v], "harmful", config.harmful_confidence))
        else:
            out.append(TransitionLabel(ids[u], ids[v], "neutral", 0.0))
    return out


def traversed_pairs(graph: MemoryGraph, retrieval: Retrieval) -> list[tuple[str, str]]:
    """``(u, v)`` node ids of the traversed edges of ``retrieval``, in load order, each pair once."""
    ids, src, dst = graph.node_ids, graph.edge_index[0], graph.edge_index[1]
    return list(dict.fromkeys((ids[int(src[e])], ids[int(dst[e])]) for e in retrieval.edges_traversed))


class LLMReflector:
    """GraphMemory's Reflector labelling the traversed transitions of a retrieval (module docstring).

    Args:
        client: the LLM client (an :class:`~graphmem.llm.client.LLMClient`).
        max_tokens: completion limit per question (default: 160).
    """

    role = "reflector"

    def __init__(self, client, max_tokens: int = 160) -> None:
        self.client, self.max_tokens = client, int(max_tokens)

    def messages(self, graph: MemoryGraph, question: str, retrieval: Retrieval, reference: str) -> list[dict]:
        records = [(graph.node_ids[v], graph.texts[v]) for v in retrieval.loaded]
        nonce = make_nonce([*(t for _, t in records), question])
        listing = "\n".join(f"- {a} -> {b}" for a, b in traversed_pairs(graph, retrieval)) or "(none)"
        return render(
            self.role,
            nonce,
            memory_block=memory_block(records, nonce),
            question_block=block("question", question, nonce),
            answer_block=block("answer", "(no answer was generated; judge the retrieved records)", nonce),
            feedback_block=block("feedback", f"Reference answer: {reference}", nonce),
            transitions=listing,
        )

    def labels(
        self, graph: MemoryGraph, question: str, retrieval: Retrieval, reference: str
    ) -> list[TransitionLabel] | None:
        """Valid labels of the traversed transitions, or ``None`` when the call failed."""
        pairs = traversed_pairs(graph, retrieval)
        if not pairs:
            return []
        messages = self.messages(graph, question, retrieval, reference)
        parsed = self.client.structured(
            self.role, messages, Reflection, reflection_schema(pairs), max_tokens=self.max_tokens
        )
        if parsed.value is None:
            return None
        allowed, out = set(pairs), {}
        for t in parsed.value.transitions:  # validation stays the safety net: listed pairs, first label wins
            if (t.source, t.target) in allowed and (t.source, t.target) not in out:
                out[(t.source, t.target)] = TransitionLabel(t.source, t.target, t.label, t.confidence)
        self.client.count_discarded(self.role, len(parsed.value.transitions) - len(out))
        return list(out.values())


def apply_labels(graph: MemoryGraph, labels: Sequence[TransitionLabel]) -> int:
    """Eq. 21 for each label through :meth:`MemoryGraph.observe`; returns the number of edges updated."""
    return sum(graph.observe(t.source, t.target, t.label, t.confidence) for t in labels)


def learn_evidence(
    graphs: Mapping[str, MemoryGraph],
    questions: Sequence[Question],
    embeddings: Tensor,
    policy: TraversalPolicy,
    budget: Budget,
    config: OracleConfig = OracleConfig(),
    stats: EvidenceStats | None = None,
    reflector: LLMReflector | None = None,
    served: list[tuple[Question, Retrieval]] | None = None,
) -> EvidenceStats:
    """One sequential pass of Retrieve -> Reflect -> eq. 21 over ``questions`` (in order).

    Args:
        graphs: graph name -> graph; the graphs of ``questions`` are updated in place.
        questions: training questions (gold read only after each retrieval has returned).
        embeddings: ``[len(questions), D]`` query embeddings aligned with ``questions``.
        policy: the traversal policy whose transitions are labelled (Beta BFS).
        budget: retrieval budget.
        config: label confidences of the oracle (default: 1 for helpful and harmful).
        stats: totals to continue (default: new).
        reflector: label with this LLM Reflector (feedback: the reference answer) instead of the
            oracle (default: the oracle).
        served: when given, ``(question, retrieval)`` of every example is appended to it, in order
            (the retrievals served while learning, for online recall).

    Each retrieval sees the counters left by the previous examples, as in GraphMemory's loop.
    """
    if embeddings.shape[0] != len(questions):
        raise ValueError(f"learn_evidence: {embeddings.shape[0]} embeddings for {len(questions)} questions")
    stats = stats or EvidenceStats()
    for i, question in enumerate(questions):
        graph = graphs[question.graph]
        query = Query(question.qid, question.text, embeddings[i])
        retrieval = policy.retrieve(graph, query, budget)
        if served is not None:
            served.append((question, retrieval))
        # ---- gold is read here, after the retrieval of this example has returned
        gold = {g for g in question.evidence if graph.has_node(g)}
        if not gold or (reflector is not None and not question.answer):
            stats.skipped += 1
            continue
        if reflector is None:
            labels = oracle_labels(graph, retrieval, gold, config)
        elif (labels := reflector.labels(graph, question.text, retrieval, str(question.answer))) is None:
            stats.failed_calls += 1
            continue
        for t in labels:
            stats.labels[t.label] += 1
        stats.edges_updated += apply_labels(graph, labels)
        stats.examples += 1
        stats.graphs_touched.add(question.graph)
    return stats
