"""GraphMemory's Retrieve-Generate-Reflect-Curate loop (§3, Appendix B.1-B.3).

For example ``t`` with query ``x_t``:

1. **Retrieve** ``c_t = phi(G_t, x_t)`` with any traversal policy (e.g. Beta BFS whose entries come
   from the LLM retriever);
2. **Generate** ``y_hat_t = f(c_t, x_t)``: an answer plus the ordered influence trace ``M_t`` of
   loaded node ids (eq. 20);
3. **Reflect**, only after ``y_hat_t`` exists: feedback on the prediction is requested through a
   callback, so the gold answer cannot reach the prediction of the same example (eq. 22). The
   Reflector labels each adjacent transition helpful / harmful / neutral with ``c in [0, 1]``;
   unloaded ids, duplicate pairs, transitions not in the trace, bad labels and out-of-range
   confidences are discarded and counted; valid ones update ``S``/``F`` through
   :meth:`MemoryGraph.observe`, which never creates an edge (eq. 21);
4. **Curate**: validated local edits (add / revise node, add / remove edge); new edges start at
   ``S = F = 0`` (eq. 17). Edits may touch only nodes loaded for this example or added by it,
   and the whole graph is validated after every applied edit. GraphMemory's nodes are lessons
   (ACE bullets); a built graph's nodes are source records (turns, sentences), so only lesson
   nodes (section ``lessons``, added by the Curator) are revised, and source records never are.

Each structured call sends its schema narrowed to this example (:mod:`graphmem.llm.call_schemas`:
loaded ids, the trace's transitions, the graph's relations), so a provider or the local
constrained decoder can only produce replies that validation would keep; validation still runs
and counts what it drops.

Failures are loud: when an LLM call of the Retrieve stage fails (after its retries), or the
Generator's does, the example stops there (no answer is made up, nothing is reflected or
curated) and its record says which stage failed.

Per-example token accounting separates the retrieved memory, the compact index and the rest.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Sequence

from torch import Tensor

from graphmem.core import Budget, Query, Retrieval
from graphmem.core.graph import MemoryGraph
from graphmem.llm.call_schemas import curation_schema, generation_schema, reflection_schema
from graphmem.llm.client import LLMClient
from graphmem.llm.prompts import block, make_nonce, memory_block, render
from graphmem.llm.schemas import AddEdge, AddNode, Curation, Generation, Reflection, RemoveEdge, ReviseNode
from graphmem.policies.base import TraversalPolicy

Embed = Callable[[Sequence[str]], Tensor]
LESSONS = "lessons"
"""index section of the nodes the Curator adds; only these are ever revised"""


@dataclass
class ExampleRecord:
    """What happened on one example (ids are node ids; counts of discarded items by reason)."""

    qid: str
    prediction: str | None
    loaded: list[str]
    trace: list[str]
    applied_transitions: list[tuple[str, str, str, float]] = field(default_factory=list)
    applied_ops: list[str] = field(default_factory=list)
    discarded: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    retrieval: Retrieval | None = None
    failed: str | None = None
    """``"retrieval"`` or ``"generation"`` when that stage's LLM call failed and the example stopped"""
    graph_checks: int = 0
    """full graph validations passed after this example's edits (one per applied edit and update batch)"""


class MemoryLoop:
    """One adaptation step per example over a mutable :class:`MemoryGraph`.

    Args:
        client: LLM client used for the generator, reflector and curator roles.
        policy: traversal policy for the Retrieve stage.
        embed: maps texts to ``[n, D]`` embeddings for new or revised nodes.
        budget: retrieval budget (default: GraphMemory's).
        max_tokens: completion limit of each call, or one per role (``generator``, ``reflector``,
            ``curator``) (default: 256).
    """

    def __init__(
        self,
        client: LLMClient,
        policy: TraversalPolicy,
        embed: Embed,
        budget: Budget | None = None,
        max_tokens: int | dict[str, int] = 256,
    ) -> None:
        self.client, self.policy, self.embed = client, policy, embed
        self.budget = budget or Budget()
        roles = ("generator", "reflector", "curator")
        self.max_tokens = dict(max_tokens) if isinstance(max_tokens, dict) else dict.fromkeys(roles, int(max_tokens))
        if missing := [r for r in roles if r not in self.max_tokens]:
            raise ValueError(f"MemoryLoop.max_tokens has no limit for {missing}")
        self._new_ids = itertools.count()

    # ------------------------------------------------------------------ Retrieve + Generate (no feedback here)
    def retrieve(self, graph: MemoryGraph, query: Query) -> tuple[Retrieval, bool]:
        """Retrieve from the query alone; ``(retrieval, ok)`` where ``ok`` is false if an LLM call of it failed."""
        failures = self._failures()
        retrieval = self.policy.retrieve_batch(graph, [query], self.budget)[0]
        return retrieval, self._failures() == failures

    def generate(
        self, graph: MemoryGraph, query: Query, retrieval: Retrieval
    ) -> tuple[Generation | None, dict[str, int]]:
        """The Generator's answer and trace over the loaded records, and the trace's discards."""
        records = self._records(graph, retrieval)
        nonce = self._nonce(records, query)
        messages = render(
            "generator",
            nonce,
            memory_block=memory_block(records, nonce),
            question_block=block("question", query.text, nonce),
        )
        spec = generation_schema([nid for nid, _ in records])
        parsed = self.client.structured(
            "generator", messages, Generation, spec, max_tokens=self.max_tokens["generator"]
        )
        discarded: dict[str, int] = {}
        if parsed.value is not None:
            loaded = {nid for nid, _ in records}
            kept = [n for n in parsed.value.trace if n in loaded]
            discarded["trace_unloaded_ids"] = len(parsed.value.trace) - len(kept)
            parsed.value.trace = kept
        return parsed.value, discarded

    def predict(self, graph: MemoryGraph, query: Query) -> tuple[Generation | None, Retrieval, dict[str, int]]:
        """Retrieve and generate. Sees only the query; returns the generation, retrieval and trace discards."""
        retrieval, _ = self.retrieve(graph, query)
        generation, discarded = self.generate(graph, query, retrieval)
        return generation, retrieval, discarded

    # ------------------------------------------------------------------ the full step
    def step(self, graph: MemoryGraph, query: Query, feedback: Callable[[str], str]) -> ExampleRecord:
        """Run Retrieve-Generate-Reflect-Curate on one example and apply the edits to ``graph``.

        ``feedback(prediction)`` is called only after the prediction exists (it may compare with
        the gold answer); nothing it returns can influence this example's prediction. A failed
        retrieval or generation ends the example (``record.failed``) before any later role runs.
        """
        before = self._billed_tokens()
        retrieval, ok = self.retrieve(graph, query)
        record = ExampleRecord(query.qid, None, retrieval.loaded_ids(graph), [], retrieval=retrieval)
        if not ok:
            record.failed = "retrieval"
            return self._account(record, before)
        generation, record.discarded = self.generate(graph, query, retrieval)
        if generation is None:
            record.failed = "generation"
            return self._account(record, before)
        prediction, trace = generation.answer, generation.trace
        record.prediction, record.trace = prediction, trace
        records = self._records(graph, retrieval)
        note = feedback(prediction)
        nonce = self._nonce(records, query)  # the Generator's: the three prompts share their prefix
        common = dict(memory_block=memory_block(records, nonce), question_block=block("question", query.text, nonce))
        critique = self._reflect(graph, trace, record, nonce, common, prediction, note)
        self._curate(graph, record, nonce, common, critique)
        return self._account(record, before)

    def _account(self, record: ExampleRecord, before: int) -> ExampleRecord:
        """Token accounting of one example: retrieved memory, compact index, the rest."""
        retrieval = record.retrieval
        billed = self._billed_tokens() - before
        index = getattr(getattr(self.policy, "entry_selector", None), "stats", None)
        record.tokens = {
            "memory": retrieval.loaded_tokens,
            "index": getattr(index, "index_tokens", 0),
            "llm_billed": billed,
        }
        record.tokens["rest"] = max(0, billed - record.tokens["memory"] - record.tokens["index"])
        return record

    @staticmethod
    def _check(graph: MemoryGraph, record: ExampleRecord) -> None:
        """Validate the whole graph after an edit; a violation raises (it would be a bug here)."""
        graph.validate()
        record.graph_checks += 1

    def _reflect(
        self,
        graph: MemoryGraph,
        trace: list[str],
        record: ExampleRecord,
        nonce: str,
        common: dict,
        prediction: str,
        note: str,
    ) -> str:
        pairs, seen = [], set()
        for pair in zip(trace, trace[1:]):  # eq. 20: adjacent items of the influence trace
            if pair[0] == pair[1] or pair in seen:
                self._count(record, "duplicate_pairs")
                continue
            seen.add(pair)
            pairs.append(pair)
        listing = "\n".join(f"- {a} -> {b}" for a, b in pairs) or "(none)"
        messages = render(
            "reflector",
            nonce,
            answer_block=block("answer", prediction, nonce),
            feedback_block=block("feedback", note, nonce),
            transitions=listing,
            **common,
        )
        parsed = self.client.structured(
            "reflector", messages, Reflection, reflection_schema(pairs), max_tokens=self.max_tokens["reflector"]
        )
        self._count(record, "invalid_feedback_items", parsed.discarded)
        if parsed.value is None:
            return ""
        allowed, done = set(pairs), set()
        for t in parsed.value.transitions:
            pair = (t.source, t.target)
            if pair not in allowed or pair in done:  # hallucinated / unloaded ids, or a repeat
                self._count(record, "feedback_outside_trace" if pair not in allowed else "duplicate_pairs")
                continue
            done.add(pair)
            graph.observe(t.source, t.target, t.label, t.confidence)  # never creates an edge
            record.applied_transitions.append((t.source, t.target, t.label, t.confidence))
        if record.applied_transitions:
            self._check(graph, record)
        return parsed.value.critique

    def _curate(self, graph: MemoryGraph, record: ExampleRecord, nonce: str, common: dict, critique: str) -> None:
        messages = render("curator", nonce, critique_block=block("critique", critique or "(none)", nonce), **common)
        lessons = [n for n in record.loaded if graph.metadata[graph.index_of(n)].get("section") == LESSONS]
        spec = curation_schema(record.loaded, graph.relations, lessons)
        parsed = self.client.structured("curator", messages, Curation, spec, max_tokens=self.max_tokens["curator"])
        self._count(record, "invalid_ops", parsed.discarded)
        if parsed.value is None:
            return
        local, revisable = set(record.loaded), set(lessons)
        created: list[str] = []

        def resolve(ref: str) -> str | None:
            if ref.startswith("new:") and ref[4:].isdigit() and int(ref[4:]) < len(created):
                return created[int(ref[4:])]
            return ref if ref in local else None

        for op in parsed.value.operations:
            if isinstance(op, AddNode):
                nid = self._fresh_id(graph)
                graph.add_nodes(
                    [nid],
                    [op.text],
                    self.embed([op.text]).reshape(1, -1),
                    keys=[op.key],
                    metadata=[{"section": LESSONS}],
                )
                created.append(nid)
                local.add(nid)
                revisable.add(nid)
                record.applied_ops.append(f"add_node {nid}")
            elif isinstance(op, ReviseNode) and (nid := resolve(op.node_id)) in revisable and (op.text or op.key):
                emb = self.embed([op.text]).reshape(-1) if op.text else None
                graph.revise_node(nid, text=op.text, key=op.key, embedding=emb)
                record.applied_ops.append(f"revise_node {nid}")
            elif (
                isinstance(op, AddEdge)
                and (s := resolve(op.source))
                and (d := resolve(op.target))
                and s != d
                and op.relation in graph.relations
                and not self._has_edge(graph, s, d, op.relation)
            ):
                graph.add_edge(s, d, op.relation)  # S = F = 0 (eq. 17)
                record.applied_ops.append(f"add_edge {s}->{d} {op.relation}")
            elif (
                isinstance(op, RemoveEdge)
                and op.source in local
                and op.target in local
                and (edges := graph.edges_between(graph.index_of(op.source), graph.index_of(op.target))).numel()
            ):
                graph.remove_edges(edges)
                record.applied_ops.append(f"remove_edge {op.source}->{op.target}")
            else:
                self._count(record, "invalid_ops")
                continue
            self._check(graph, record)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _records(graph: MemoryGraph, retrieval: Retrieval) -> list[tuple[str, str]]:
        return [(graph.node_ids[v], graph.texts[v]) for v in retrieval.loaded]

    @staticmethod
    def _nonce(records: list[tuple[str, str]], query: Query) -> str:
        """One nonce per example, from the memory and the question; the prediction, feedback and
        critique placed in later prompts are escaped like every block, so they cannot close a tag."""
        return make_nonce([*(t for _, t in records), query.text])

    def _failures(self) -> int:
        return int(self.client.failure_summary()["failures"])

    @staticmethod
    def _has_edge(graph: MemoryGraph, src: str, dst: str, relation: str) -> bool:
        edges = graph.edges_between(graph.index_of(src), graph.index_of(dst))
        return bool((graph.edge_type[edges] == graph.relations.index(relation)).any())

    def _fresh_id(self, graph: MemoryGraph) -> str:
        while True:
            nid = f"lesson-{next(self._new_ids)}"
            if not graph.has_node(nid):
                return nid

    @staticmethod
    def _count(record: ExampleRecord, reason: str, n: int = 1) -> None:
        if n:
            record.discarded[reason] = record.discarded.get(reason, 0) + n

    def _billed_tokens(self) -> int:
        total = self.client.usage_report()["total"]
        return int(total.get("prompt_tokens", 0) + total.get("completion_tokens", 0))
