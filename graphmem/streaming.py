"""The streaming protocol: each conversation fed turn by turn into a live memory, each question asked when its
evidence has arrived, scored, and only then its feedback applied (prequential test-time learning).

For every graph of a set (a conversation; its records in node order,
:func:`graphmem.builders.incremental.graph_records`, with the set's node embeddings), a fresh
:class:`graphmem.Memory` grows record by record by the incremental rules, so that after the last record it is
the set's graph built with ``graph.incremental=true``. The questions of the
graph are asked at

* ``ask_at=evidence``: right after the last record of the question's resolvable evidence has been added (the memory
  holds what had been said by then); a question without resolvable evidence is asked at the end, and its recall is
  undefined and left out, as in the batch protocol;
* ``ask_at=end``: after the last record, as the batch protocol asks them;

questions asked at the same point keep the set's order. For each question and each stream policy, in this order:

1. **retrieve** on the memory as it is, from the query alone (:meth:`graphmem.Memory.retrieve`);
2. **score**: the question's row is made (:func:`graphmem.eval.harness.question_row`: the only place gold fields
   meet the retrieval) and handed to ``on_row``;
3. **feedback** (``feedback != none``, policies that learn): the question's :class:`Feedback` reaches the policy's
   :class:`Learner`, which may change the memory (Beta counters) or itself (weights) before the next question.

Feedback kinds (:func:`make_feedback`), each with a reward ``r ∈ [0, 1]`` of the served retrieval and a function
scoring any loaded list on the memory as it is (what a learner's own rollouts are paid):

* ``answer``: the loaded records whose offered text holds a word of the reference answer are helpful, and
  ``r`` is the answer's token recall in the loaded text (:func:`graphmem.feedback.answer_feedback`); no evidence
  label is read;
* ``evidence``: the oracle Reflector: the question's resolvable gold evidence is helpful, ``r`` its recall;
* ``judge``: an LLM judges whether the loaded records suffice to give the reference answer (:class:`SufficiencyJudge`),
  ``r`` its score; no helpful ids.

Each policy that learns runs on its own memory; the frozen policies share one. Rows carry the question's place in
its stream: ``ask_order`` (0-based among the stream's questions), ``ask_records`` (records in the memory when asked),
``stream_records`` and ``second_half`` (``ask_order >= n / 2`` for a stream of ``n`` questions).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from graphmem.builders.incremental import graph_records
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.eval.harness import EvalResult, question_row
from graphmem.eval.metrics import QuestionMetrics, aggregate, in_overall, resolvable_evidence, summarize
from graphmem.feedback import answer_feedback, node_offer
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.memory import Memory, MemoryRetrieval
from graphmem.policies.base import TraversalPolicy
from graphmem.qa.judge import SUFFICIENCY_ROLE, parse_score, sufficiency_messages, usable_score

PROTOCOLS = ("batch", "streaming")
ASK_AT = ("evidence", "end")
FEEDBACK = ("none", "answer", "evidence", "judge")
SECOND_HALF = "second_half"


@dataclass
class StreamConfig:
    """The streaming protocol's settings (mirrored by ``configs/streaming/default.yaml``)."""

    ask_at: str = "evidence"
    """evidence: ask each question when its last evidence record has arrived; end: after the last record"""
    feedback: str = "none"
    """what reaches the learners after each question is scored: none, answer, evidence (oracle) or judge"""
    judge: dict[str, Any] = field(default_factory=dict)
    """feedback=judge: graphmem.llm.client.LLMConfig fields of the judge (default: the local model)"""
    memory_dir: str | None = None
    """where the memories' databases go (null: a temporary folder, removed afterwards)"""
    online: dict[str, Any] = field(default_factory=dict)
    """the learned walk's test-time learning: rl.walk.online.OnlineConfig fields (read by the script that wires it)"""
    variants: dict[str, Any] = field(default_factory=dict)
    """more online walks, name -> OnlineConfig fields over ``online`` (e.g. one online part alone), each paired with
    the frozen router"""

    def __post_init__(self) -> None:
        if self.ask_at not in ASK_AT:
            raise ValueError(f"streaming.ask_at must be one of {ASK_AT}, got {self.ask_at!r}")
        if self.feedback not in FEEDBACK:
            raise ValueError(f"streaming.feedback must be one of {FEEDBACK}, got {self.feedback!r}")


@dataclass(frozen=True)
class Feedback:
    """One question's feedback (module docstring), given after its row was written.

    Attributes:
        kind: answer, evidence or judge.
        reward: ``r ∈ [0, 1]`` of the served retrieval.
        helpful: the records that helped (answer, evidence), or ``None`` (judge).
        score: the reward of any list of loaded ids on the memory as it is now.
    """

    kind: str
    reward: float
    helpful: tuple[str, ...] | None
    score: Callable[[Sequence[str]], float]


class Learner(Protocol):
    """What learns from the stream: GraphMemory's counters (:class:`BetaCounters`), the walk's weights
    (``rl.walk.online.OnlineWalk``), wired by the script that runs the protocol."""

    def start(self, memory: Memory) -> None:
        """A new stream begins on ``memory`` (what was learned on another stream is dropped)."""

    def policy(self, memory: Memory) -> TraversalPolicy:
        """The policy as it is now, for a retrieval on ``memory``."""

    def learn(self, memory: Memory, query: Query, retrieval: MemoryRetrieval, feedback: Feedback) -> dict[str, float]:
        """Apply ``feedback`` on the served ``retrieval``; returns what it did (counts, seconds)."""

    def finish(self, memory: Memory) -> dict[str, float]:
        """What was learned on the stream that ends on ``memory`` (sizes, distances from the start)."""


@dataclass
class StreamPolicy:
    """A policy in the stream: ``policy`` frozen (``learner`` is ``None``), or the ``learner``'s policy as it is
    at each question (``policy`` then names what it starts from)."""

    name: str
    policy: TraversalPolicy
    learner: Learner | None = None

    def current(self, memory: Memory) -> TraversalPolicy:
        return self.learner.policy(memory) if self.learner is not None else self.policy


class BetaCounters:
    """GraphMemory's test-time learning (eq. 20-21) through :meth:`graphmem.Memory.feedback`: with helpful ids
    ``Y``, ``S_uv += 1`` for a traversed ``u -> v`` with ``v ∈ Y``, ``F_uv += 1`` when nothing of ``Y`` lies at or
    below ``v``; with a reward ``r`` alone (judge), ``S_uv += r`` and ``F_uv += 1 - r`` (:mod:`graphmem.feedback`)."""

    def __init__(self, policy: TraversalPolicy) -> None:
        self._policy = policy

    def start(self, memory: Memory) -> None:
        """Nothing to reset: the counters live in the memory, which starts at ``S = F = 0``."""

    def policy(self, memory: Memory) -> TraversalPolicy:
        return self._policy

    def learn(self, memory: Memory, query: Query, retrieval: MemoryRetrieval, feedback: Feedback) -> dict[str, float]:
        if feedback.helpful is not None:
            entry = memory.feedback(retrieval, helpful=list(feedback.helpful))
        else:
            entry = memory.feedback(retrieval, reward=feedback.reward)
        return {"edges_updated": float(entry["edges_updated"])}

    def finish(self, memory: Memory) -> dict[str, float]:
        return counter_state(memory)


def counter_state(memory: Memory) -> dict[str, float]:
    """The memory's edges with evidence (``S + F > 0``), and their counters' sums."""
    g = memory.graph
    seen = (g.S + g.F) > 0
    return {"edges_with_evidence": float(seen.sum()), "S": float(g.S.sum()), "F": float(g.F.sum())}


# ---------------------------------------------------------------------------- the schedule
def ask_schedule(records: Sequence[str], questions: Sequence[Question], ask_at: str) -> list[tuple[int, Question]]:
    """``(records added before asking, question)`` in ask order (module docstring); ``records`` are the stream's
    ids in arrival order."""
    position = {rid: i for i, rid in enumerate(records)}
    out = []
    for k, q in enumerate(questions):
        at = [position[e] for e in q.evidence if e in position]
        out.append((max(at) + 1 if ask_at == "evidence" and at else len(records), k, q))
    return [(n, q) for n, _, q in sorted(out, key=lambda x: (x[0], x[1]))]


# ---------------------------------------------------------------------------- feedback
class SufficiencyJudge:
    """An LLM's ``[0, 1]`` verdict on whether records suffice to give a reference answer (the walk trainer's
    ``judge`` reward prompt, :func:`graphmem.qa.judge.sufficiency_messages`); a verdict asked once per question
    and list, a failed call scores 0 and is counted.

    Args:
        config: :class:`graphmem.llm.client.LLMConfig` fields (its cache, ``mock_response``, the local model).
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.client = LLMClient(LLMConfig.from_dict(dict(config)))
        self.model = self.client.model
        self.calls = self.failures = 0
        self._seen: dict[tuple, float] = {}

    def __call__(self, question: str, reference: str, records: Sequence[str]) -> float:
        key = (question, reference, tuple(records))
        if key not in self._seen:
            reply = self.client.complete(
                SUFFICIENCY_ROLE, sufficiency_messages(question, reference, records), validate=usable_score
            )
            score = None if reply is None else parse_score(reply.text)
            self.calls += 1
            self.failures += score is None
            self._seen[key] = 0.0 if score is None else score
        return self._seen[key]


def make_feedback(
    kind: str, question: Question, graph: MemoryGraph, loaded: Sequence[str], judge: SufficiencyJudge | None = None
) -> Feedback | None:
    """The :class:`Feedback` of ``kind`` for a retrieval that loaded ``loaded`` (module docstring); ``None`` when
    the question gives none (an answer without a word, no resolvable evidence)."""
    if kind == "answer":
        got = answer_feedback(graph, loaded, question.answer)
        if got.recall is None:  # the answer holds no word to look for
            return None
        recall = lambda ids: answer_feedback(graph, ids, question.answer).recall  # noqa: E731
        return Feedback(kind, float(got.recall), got.helpful, recall)
    if kind == "evidence":
        gold = resolvable_evidence(question, graph)
        if not gold:
            return None
        recall = lambda ids: len(set(ids) & set(gold)) / len(gold)  # noqa: E731
        return Feedback(kind, recall(loaded), tuple(gold), recall)
    if kind == "judge":
        if judge is None:
            raise ValueError("feedback=judge needs a SufficiencyJudge")
        offers = lambda ids: [node_offer(graph, graph.index_of(i)) for i in ids]  # noqa: E731
        score = lambda ids: judge(question.text, question.answer or "", offers(ids))  # noqa: E731
        return Feedback(kind, score(loaded), None, score)
    raise ValueError(f"feedback kind must be one of {FEEDBACK[1:]}, got {kind!r}")


# ---------------------------------------------------------------------------- the protocol
@dataclass
class StreamResult:
    """What :func:`run_streaming` measured: one :class:`EvalResult` per stream policy (rows in ask order, stream
    by stream), the learners' cost (``learning``: feedback steps, seconds, steps per second, per policy) and the
    memories' growth (``memory``: records, edges and database bytes of each policy's memory at each stream's end,
    with the seconds spent adding records and what its learner learned there, :meth:`Learner.finish`)."""

    results: list[EvalResult]
    learning: dict[str, dict[str, float]]
    memory: list[dict[str, Any]]
    judge: dict[str, Any] | None = None


@dataclass
class _Stream:
    """The state of one run over a set (:func:`run_streaming`)."""

    policies: Sequence[StreamPolicy]
    budget: Budget
    config: StreamConfig
    judge: SufficiencyJudge | None
    on_row: Callable[[str, dict[str, Any]], None] | None
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    metrics: dict[str, list[QuestionMetrics]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    learning: dict[str, dict[str, float]] = field(default_factory=dict)
    memory: list[dict[str, Any]] = field(default_factory=list)

    def ask(self, p: StreamPolicy, mem: Memory, q: Question, query: Query, place: dict[str, Any]) -> None:
        """Retrieve, score (the row goes to ``on_row``), then the feedback: in this order (module docstring)."""
        t0 = time.perf_counter()
        r = mem.retrieve(q.text, embedding=query.embedding, budget=self.budget, policy=p.current(mem))
        latency = time.perf_counter() - t0
        self.seconds[p.name] = self.seconds.get(p.name, 0.0) + latency
        row, m = question_row(q, mem.graph, list(r.ranked), list(r.loaded), _trace(r), latency)
        row.update(place)
        self.rows.setdefault(p.name, []).append(row)
        self.metrics.setdefault(p.name, []).append(m)
        if self.on_row is not None:
            self.on_row(p.name, row)
        if p.learner is None or self.config.feedback == "none":
            return
        fb = make_feedback(self.config.feedback, q, mem.graph, r.loaded, self.judge)
        cost = self.learning.setdefault(p.name, {"steps": 0.0, "seconds": 0.0, "skipped": 0.0, "reward": 0.0})
        if fb is None:
            cost["skipped"] += 1
            return
        t1 = time.perf_counter()
        stats = p.learner.learn(mem, query, r, fb)
        cost["seconds"] += time.perf_counter() - t1
        cost["steps"] += 1
        cost["reward"] += fb.reward
        for key, value in stats.items():
            cost[key] = cost.get(key, 0.0) + float(value)

    def stream(self, name: str, graph: MemoryGraph, questions: Sequence[Question], queries, opened) -> None:
        """One conversation: the records in order into every memory, each question at its place."""
        records = graph_records(graph)
        schedule = ask_schedule([r.id for r in records], questions, self.config.ask_at)
        memories = opened(name)  # policy name -> its memory (the frozen ones share one)
        distinct = list({id(m): m for m in memories.values()}.values())
        for p in self.policies:
            if p.learner is not None:
                p.learner.start(memories[p.name])
        added, add_seconds = 0, 0.0
        for k, (n, q) in enumerate([*schedule, (len(records), None)]):
            if n > added:
                t0 = time.perf_counter()
                for mem in distinct:
                    mem.add_many(records[added:n], embeddings=graph.embeddings[added:n])
                add_seconds += time.perf_counter() - t0
                added = n
            if q is None:
                break
            place = {
                "ask_order": k,
                "ask_records": added,
                "stream_records": len(records),
                "second_half": 2 * k >= len(schedule),
            }
            for p in self.policies:
                self.ask(p, memories[p.name], q, queries[q.qid], place)
        learners = {p.name: p.learner for p in self.policies if p.learner is not None}
        for policy, mem in memories.items():
            s = mem.stats()
            growth = {k: s[k] for k in ("records", "edges", "feedback", "bytes")}
            learned = learners[policy].finish(mem) if policy in learners else {}
            self.memory.append({"graph": name, "policy": policy, **growth, "add_seconds": add_seconds, **learned})
        for mem in distinct:
            mem.close()


def run_streaming(
    graphset,
    policies: Sequence[StreamPolicy],
    budget: Budget,
    config: StreamConfig,
    *,
    encoder,
    graph_config: Mapping[str, Any],
    on_row: Callable[[str, dict[str, Any]], None] | None = None,
    progress: bool = False,
) -> StreamResult:
    """The streaming protocol (module docstring) over every graph of ``graphset`` that has questions, in the set's
    order of questions, for ``policies`` under ``budget``.

    Args:
        graphset: a :class:`graphmem.store.graphset.GraphSet` (graphs, questions, query embeddings).
        encoder: the memories' encoder (the set's; records and queries come with their embeddings).
        graph_config: the set's graph settings (``configs/graph``), the memories' rules.
        on_row: called with ``(policy, row)`` as each row is made, before its feedback is applied.
    """
    from tqdm.auto import tqdm

    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        raise ValueError(f"stream policies named twice: {names}")
    judge = SufficiencyJudge(config.judge) if config.feedback == "judge" else None
    run = _Stream(policies, budget, config, judge, on_row)
    queries = {q.qid: q for q in graphset.queries()}
    by_graph: dict[str, list[Question]] = {}
    for q in graphset.questions:
        by_graph.setdefault(q.graph, []).append(q)
    folder = Path(config.memory_dir) if config.memory_dir else Path(tempfile.mkdtemp(prefix="graphmem-stream-"))
    try:
        for name in tqdm(by_graph, desc="streams", unit="graph", disable=not progress, leave=False):
            opened = _opener(folder, policies, encoder, graph_config)
            run.stream(name, graphset.graphs[name], by_graph[name], queries, opened)
    finally:
        if not config.memory_dir:
            shutil.rmtree(folder, ignore_errors=True)
    results = [_result(run, p.name, graphset.dataset, budget, config) for p in policies]
    for cost in run.learning.values():
        cost["steps_per_s"] = cost["steps"] / cost["seconds"] if cost["seconds"] > 0 else None
    report = None if judge is None else {"model": judge.model, "calls": judge.calls, "failures": judge.failures}
    return StreamResult(results, run.learning, run.memory, report)


def _opener(folder: Path, policies: Sequence[StreamPolicy], encoder, graph_config: Mapping[str, Any]):
    """``opened(graph name) -> {policy: memory}``: a fresh memory per learning policy, one shared by the others."""
    settings = {k: v for k, v in graph_config.items() if k not in ("cache_dir", "encoder", "incremental")}

    def open_one(slot: str, name: str, policy: TraversalPolicy) -> Memory:
        path = folder / slot / name
        if path.exists():
            shutil.rmtree(path)
        return Memory.open(path, encoder=encoder, policy=policy, graph=settings, synchronous="normal")

    def opened(name: str) -> dict[str, Memory]:
        out: dict[str, Memory] = {}
        shared = None
        for p in policies:
            if p.learner is not None:
                out[p.name] = open_one(p.name, name, p.policy)
            else:
                if shared is None:  # (an empty memory is falsy)
                    shared = open_one("frozen", name, p.policy)
                out[p.name] = shared
        return out

    return opened


def _trace(r: MemoryRetrieval) -> dict[str, Any]:
    """A memory retrieval as the harness's rows hold a trace."""
    return {
        "ranked": list(r.ranked),
        "loaded": list(r.loaded),
        "entries": list(r.entries),
        "edges_traversed": [list(e) for e in r.traversed],
        "loaded_tokens": r.loaded_tokens,
        "max_depth": r.max_depth,
        "wall_time_s": r.wall_time_s,
    }


def _result(run: _Stream, name: str, dataset: str, budget: Budget, config: StreamConfig) -> EvalResult:
    """One policy's :class:`EvalResult`: the usual groups plus ``second_half`` (the overall group's questions
    asked in the second half of their stream)."""
    rows, metrics = run.rows.get(name, []), run.metrics.get(name, [])
    summary = summarize([r["category"] for r in rows], metrics)
    late = [m for r, m in zip(rows, metrics) if r["second_half"] and in_overall(r["category"])]
    if late:
        summary[SECOND_HALF] = aggregate(late)
    info = {
        "protocol": "streaming",
        "ask_at": config.ask_at,
        "feedback": config.feedback,
        "questions": len(rows),
        "graphs": len({r["graph"] for r in rows}),
        "latency": "served alone",
        "learning": run.learning.get(name),
    }
    return EvalResult(name, dataset, budget, rows, summary, run.seconds.get(name, 0.0), info)


def second_half_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of questions asked in the second half of their stream."""
    return [r for r in rows if r.get("second_half")]


def position_curve(rows: Sequence[Mapping[str, Any]], bins: int = 5) -> list[dict[str, Any]]:
    """Evidence recall against the question's place in its stream: ``ask_records / stream_records`` cut into
    ``bins`` equal intervals; per interval the number of questions with a recall, its mean and the 95% half-width
    ``1.96 s / sqrt(n)`` (s with ddof = 1), over the overall group's questions."""
    groups: list[list[float]] = [[] for _ in range(bins)]
    for r in rows:
        recall = r["metrics"].get("evidence_recall")
        if recall is None or not in_overall(r["category"]):
            continue
        share = r["ask_records"] / max(r["stream_records"], 1)
        groups[min(int(share * bins), bins - 1)].append(recall)
    out = []
    for i, xs in enumerate(groups):
        n = len(xs)
        mean = sum(xs) / n if n else None
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
        half = 1.96 * sd / math.sqrt(n) if n else None
        out.append({"lo": i / bins, "hi": (i + 1) / bins, "n": n, "recall": mean, "half_width": half})
    return out


def streaming_payload(run: StreamResult, config: StreamConfig, pairs: Mapping[str, str], online: Any) -> dict:
    """``results.json``'s ``streaming`` part: the settings (the online walk's resolved), which frozen copy each
    learner is paired with, the learners' cost, the memories' growth, the judge's calls and recall by place in the
    stream of every policy (:func:`position_curve`)."""
    settings = {k: v for k, v in asdict(config).items() if k != "online"}
    return {
        "config": {**settings, "online": asdict(online) if online is not None else None},
        "pairs": dict(pairs),
        "learning": run.learning,
        "memory": run.memory,
        "judge": run.judge,
        "position": {r.policy: position_curve(r.rows) for r in run.results},
    }


def streaming_markdown(run: StreamResult, pairs: Mapping[str, str]) -> str:
    """The streaming part of ``results.md``: what each learner did and cost, and how the memories grew."""
    lines = ["", "## Streaming", ""]
    if pairs:
        lines += ["online policy -> frozen copy: " + ", ".join(f"{a} -> {b}" for a, b in pairs.items()), ""]
    if run.learning:
        lines += [
            "| learner | feedback steps | skipped | seconds | steps/s | mean reward | policy-gradient steps |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, c in run.learning.items():
            rate = "–" if c.get("steps_per_s") is None else f"{c['steps_per_s']:.1f}"
            reward = c["reward"] / c["steps"] if c["steps"] else float("nan")
            lines.append(
                f"| {name} | {c['steps']:.0f} | {c['skipped']:.0f} | {c['seconds']:.1f} | {rate} | {reward:.3f} | "
                f"{c.get('pg_steps', 0):.0f} |"
            )
        lines.append("")
    totals: dict[str, list[float]] = {}
    for m in run.memory:
        t = totals.setdefault(m["policy"], [0, 0, 0, 0])
        for i, key in enumerate(("records", "edges", "feedback", "bytes")):
            t[i] += m[key]
    lines += ["| policy's memory | records | edges | feedback entries | database MB |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {p} | {r:.0f} | {e:.0f} | {f:.0f} | {b / 1e6:.1f} |" for p, (r, e, f, b) in totals.items()]
    return "\n".join(lines) + "\n"
