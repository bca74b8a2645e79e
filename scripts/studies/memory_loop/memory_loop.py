"""GraphMemory's Retrieve-Generate-Reflect-Curate loop (§3, Appendix B.1-B.3) over a live memory.

The loop runs on a :class:`graphmem.Memory` (``docs/memory.md``): every read, counter update and edit goes
through its API and is one transaction of its store. For example ``t`` with question ``x_t``:

1. **Retrieve** ``c_t = phi(G_t, x_t)``: ``mem.retrieve(x_t, policy=..., budget=...)`` with any traversal
   policy (e.g. Beta BFS whose entries come from the LLM retriever);
2. **Generate** ``y_hat_t = f(c_t, x_t)`` from the retrieval's loaded records (ids and texts): an answer
   plus the ordered influence trace ``M_t`` of loaded ids (eq. 20);
3. **Reflect**, only after ``y_hat_t`` exists: feedback on the prediction is requested through a
   callback, so the gold answer cannot reach the prediction of the same example (eq. 22). The
   Reflector labels each adjacent transition helpful / harmful / neutral with ``c in [0, 1]``;
   unloaded ids, duplicate pairs, transitions not in the trace, bad labels and out-of-range
   confidences are discarded and counted; the valid ones update ``S``/``F`` in one
   ``mem.feedback(retrieval, labels=...)``, which never creates an edge (eq. 21) and is logged;
4. **Curate**: validated local edits, ``mem.add`` (a lesson), ``mem.revise``, ``mem.link`` (``S = F = 0``,
   eq. 17) and ``mem.unlink``. Edits may name only records loaded for this example or added by it, and the
   memory's integrity (store and graph, ``mem.integrity()``) is checked after every applied edit. GraphMemory's
   nodes are lessons (ACE bullets); a built graph's nodes are source records (turns, sentences), so only lesson
   records (id ``lesson-<n>``, metadata section ``lessons``, added by the Curator) are revised, and source
   records never are. A lesson is added as any record is: it also gets the memory's arrival-order edges
   (semantic neighbours and shared entities among the records already present,
   :mod:`graphmem.builders.incremental`), which may reach records this example did not load.

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
from typing import Callable

from graphmem.core import Budget
from graphmem.llm.call_schemas import curation_schema, generation_schema, reflection_schema
from graphmem.llm.client import LLMClient
from graphmem.llm.prompts import block, make_nonce, memory_block, render
from graphmem.llm.schemas import AddEdge, AddNode, Curation, Generation, Reflection, RemoveEdge, ReviseNode
from graphmem.memory import Memory, MemoryError, MemoryRetrieval
from graphmem.policies.base import TraversalPolicy

LESSONS = "lessons"
"""index section of the records the Curator adds; only these are ever revised"""


@dataclass
class ExampleRecord:
    """What happened on one example (ids are record ids; counts of discarded items by reason)."""

    qid: str
    prediction: str | None
    loaded: list[str]
    trace: list[str]
    applied_transitions: list[tuple[str, str, str, float]] = field(default_factory=list)
    applied_ops: list[str] = field(default_factory=list)
    discarded: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    retrieval: MemoryRetrieval | None = None
    failed: str | None = None
    """``"retrieval"`` or ``"generation"`` when that stage's LLM call failed and the example stopped"""
    graph_checks: int = 0
    """integrity checks of the memory passed after this example's edits (one per applied edit and update batch)"""


@dataclass
class _Edits:
    """The Curator's view of one example: records it may name, those it may revise, those it added."""

    local: set[str]
    revisable: set[str]
    created: list[str] = field(default_factory=list)

    def resolve(self, ref: str) -> str | None:
        """A record id from an operation's reference (``new:<i>``: the ``i``-th lesson added); None: not local."""
        if ref.startswith("new:") and ref[4:].isdigit() and int(ref[4:]) < len(self.created):
            return self.created[int(ref[4:])]
        return ref if ref in self.local else None


class MemoryLoop:
    """One adaptation step per example over a live :class:`graphmem.Memory`.

    Args:
        client: LLM client used for the generator, reflector and curator roles.
        policy: traversal policy for the Retrieve stage (``mem.retrieve``'s ``policy``).
        budget: retrieval budget (default: GraphMemory's).
        max_tokens: completion limit of each call, or one per role (``generator``, ``reflector``,
            ``curator``) (default: 256).
    """

    def __init__(
        self,
        client: LLMClient,
        policy: TraversalPolicy,
        budget: Budget | None = None,
        max_tokens: int | dict[str, int] = 256,
    ) -> None:
        self.client, self.policy = client, policy
        self.budget = budget or Budget()
        roles = ("generator", "reflector", "curator")
        self.max_tokens = dict(max_tokens) if isinstance(max_tokens, dict) else dict.fromkeys(roles, int(max_tokens))
        if missing := [r for r in roles if r not in self.max_tokens]:
            raise ValueError(f"MemoryLoop.max_tokens has no limit for {missing}")
        self._new_ids = itertools.count()

    # ------------------------------------------------------------------ Retrieve + Generate (no feedback here)
    def retrieve(self, mem: Memory, question: str) -> tuple[MemoryRetrieval, bool]:
        """Retrieve from the question alone; ``(retrieval, ok)`` where ``ok`` is false if an LLM call of it failed."""
        failures = self._failures()
        retrieval = mem.retrieve(question, policy=self.policy, budget=self.budget)
        return retrieval, self._failures() == failures

    def generate(self, question: str, retrieval: MemoryRetrieval) -> tuple[Generation | None, dict[str, int]]:
        """The Generator's answer and trace over the loaded records, and the trace's discards."""
        records = self._records(retrieval)
        nonce = self._nonce(records, question)
        messages = render(
            "generator",
            nonce,
            memory_block=memory_block(records, nonce),
            question_block=block("question", question, nonce),
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

    def predict(self, mem: Memory, question: str) -> tuple[Generation | None, MemoryRetrieval, dict[str, int]]:
        """Retrieve and generate. Sees only the question; returns the generation, retrieval and trace discards."""
        retrieval, _ = self.retrieve(mem, question)
        generation, discarded = self.generate(question, retrieval)
        return generation, retrieval, discarded

    # ------------------------------------------------------------------ the full step
    def step(self, mem: Memory, qid: str, question: str, feedback: Callable[[str], str]) -> ExampleRecord:
        """Run Retrieve-Generate-Reflect-Curate on one example and apply its feedback and edits to ``mem``.

        ``feedback(prediction)`` is called only after the prediction exists (it may compare with
        the gold answer); nothing it returns can influence this example's prediction. A failed
        retrieval or generation ends the example (``record.failed``) before any later role runs.
        """
        before = self._billed_tokens()
        retrieval, ok = self.retrieve(mem, question)
        record = ExampleRecord(qid, None, list(retrieval.loaded), [], retrieval=retrieval)
        if not ok:
            record.failed = "retrieval"
            return self._account(record, before)
        generation, record.discarded = self.generate(question, retrieval)
        if generation is None:
            record.failed = "generation"
            return self._account(record, before)
        prediction, trace = generation.answer, generation.trace
        record.prediction, record.trace = prediction, trace
        records = self._records(retrieval)
        note = feedback(prediction)
        nonce = self._nonce(records, question)  # the Generator's: the three prompts share their prefix
        common = dict(memory_block=memory_block(records, nonce), question_block=block("question", question, nonce))
        critique = self._reflect(mem, retrieval, record, nonce, common, note)
        self._curate(mem, record, nonce, common, critique)
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
    def _check(mem: Memory, record: ExampleRecord) -> None:
        """Check the memory's store and graph after an edit; a problem raises (it would be a bug here)."""
        problems = mem.integrity()
        if problems:
            raise RuntimeError(f"memory integrity after an edit of example {record.qid}: {'; '.join(problems)}")
        record.graph_checks += 1

    def _reflect(
        self,
        mem: Memory,
        retrieval: MemoryRetrieval,
        record: ExampleRecord,
        nonce: str,
        common: dict,
        note: str,
    ) -> str:
        pairs, seen = [], set()
        for pair in zip(record.trace, record.trace[1:]):  # eq. 20: adjacent items of the influence trace
            if pair[0] == pair[1] or pair in seen:
                self._count(record, "duplicate_pairs")
                continue
            seen.add(pair)
            pairs.append(pair)
        listing = "\n".join(f"- {a} -> {b}" for a, b in pairs) or "(none)"
        messages = render(
            "reflector",
            nonce,
            answer_block=block("answer", record.prediction, nonce),
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
            record.applied_transitions.append((t.source, t.target, t.label, t.confidence))
        if record.applied_transitions:
            mem.feedback(retrieval, labels=record.applied_transitions)  # eq. 21; never creates an edge
            self._check(mem, record)
        return parsed.value.critique

    def _curate(self, mem: Memory, record: ExampleRecord, nonce: str, common: dict, critique: str) -> None:
        messages = render("curator", nonce, critique_block=block("critique", critique or "(none)", nonce), **common)
        lessons = [n for n in record.loaded if mem.get(n)["meta"].get("section") == LESSONS]
        spec = curation_schema(record.loaded, mem.graph.relations, lessons)
        parsed = self.client.structured("curator", messages, Curation, spec, max_tokens=self.max_tokens["curator"])
        self._count(record, "invalid_ops", parsed.discarded)
        if parsed.value is None:
            return
        edits = _Edits(set(record.loaded), set(lessons))
        for op in parsed.value.operations:
            try:
                applied = self._apply(mem, op, edits)
            except MemoryError:  # a text the memory refuses (blank, too long): the op is invalid
                applied = None
            if applied is None:
                self._count(record, "invalid_ops")
                continue
            record.applied_ops.append(applied)
            self._check(mem, record)

    def _apply(self, mem: Memory, op, edits: _Edits) -> str | None:
        """Apply one curation op within the example's locality rules; its description, or None when invalid."""
        if isinstance(op, AddNode):
            nid = self._fresh_id(mem)
            mem.add(op.text, id=nid, meta={"section": LESSONS}, key=op.key)  # its arrival-order edges too
            edits.created.append(nid)
            edits.local.add(nid)
            edits.revisable.add(nid)
            return f"add_node {nid}"
        if isinstance(op, ReviseNode):
            nid = edits.resolve(op.node_id)
            if nid not in edits.revisable or not (op.text or op.key):
                return None
            old = mem.get(nid)
            mem.revise(nid, op.text or old["text"], key=old["key"] if op.key is None else op.key)
            return f"revise_node {nid}"
        if isinstance(op, AddEdge):
            s, d = edits.resolve(op.source), edits.resolve(op.target)
            if s and d and s != d and op.relation in mem.graph.relations and mem.link(s, d, op.relation):
                return f"add_edge {s}->{d} {op.relation}"  # S = F = 0 (eq. 17); False: it exists
            return None
        if isinstance(op, RemoveEdge) and op.source in edits.local and op.target in edits.local:
            return f"remove_edge {op.source}->{op.target}" if mem.unlink(op.source, op.target) else None
        return None

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _records(retrieval: MemoryRetrieval) -> list[tuple[str, str]]:
        """The loaded records, ``(id, text)`` in load order."""
        return [(nid, retrieval.texts_by_id[nid]) for nid in retrieval.loaded]

    @staticmethod
    def _nonce(records: list[tuple[str, str]], question: str) -> str:
        """One nonce per example, from the memory and the question; the prediction, feedback and
        critique placed in later prompts are escaped like every block, so they cannot close a tag."""
        return make_nonce([*(t for _, t in records), question])

    def _failures(self) -> int:
        return int(self.client.failure_summary()["failures"])

    def _fresh_id(self, mem: Memory) -> str:
        while True:
            nid = f"lesson-{next(self._new_ids)}"
            if nid not in mem:
                return nid

    @staticmethod
    def _count(record: ExampleRecord, reason: str, n: int = 1) -> None:
        if n:
            record.discarded[reason] = record.discarded.get(reason, 0) + n

    def _billed_tokens(self) -> int:
        total = self.client.usage_report()["total"]
        return int(total.get("prompt_tokens", 0) + total.get("completion_tokens", 0))
