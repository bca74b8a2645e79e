"""Answering a question from a policy's retrieved context (HAGE Appendix C.2), one answer per question.

Inputs are what a policy may see — the query (id, text, embedding) — plus the node ids the policy
loaded; no gold field is in scope here. The prompt carries three things only:

* the loaded records, in load order, each delimited by :mod:`graphmem.llm.prompts` and prefixed
  with the node's context metadata (e.g. its date), so a record cannot inject instructions;
* the question, also delimited;
* a guidance sentence chosen by the *predicted* relation intent of the query.

The intent comes from :class:`models.intent.RelationIntent` on the query embedding:
``π(q) = softmax_r(cos(q, p_r)/τ)`` with prototypes ``p_r`` = embedded relation descriptions
(``kind="prototype"``), or the intent module of a trained router checkpoint (``kind="checkpoint"``),
or no intent (``kind="uniform"``). The guidance is that of ``argmax_r π_r(q)`` when
``max_r π_r(q) ≥ min_weight``, else the general guidance.

Exactly one completion is requested per question (greedy / temperature of the config); there is
no best-of-N. A reply is cleaned to its first non-empty line; it is an abstention when it
contains an abstention phrase (:func:`graphmem.qa.scoring.is_abstention`). A call that fails
after the client's retries yields ``text=None`` (scored 0) and is counted.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch

from graphmem.core import Query
from graphmem.core.graph import RELATIONS, MemoryGraph
from graphmem.index.embed import MiniLMEncoder
from graphmem.llm.client import LLMClient, Messages
from graphmem.llm.prompts import block, make_nonce, memory_block, render
from graphmem.policies.router import read_router_checkpoint
from graphmem.qa.scoring import ABSTENTION_PHRASES, is_abstention
from models.intent import RelationIntent

ROLE = "qa_answer"
GENERAL = "general"

# Text embedded as the prototype of each relation (kind="prototype").
INTENT_DESCRIPTIONS: dict[str, str] = {
    "temporal": "When did it happen? A question about a date, a time, how long ago, or the order of events.",
    "semantic": "What is it? A question about a fact, a description, a preference or an opinion.",
    "causal": "Why did it happen? A question about a reason, a cause, a motivation or a consequence.",
    "entity": "Who or which? A question about a specific person, place, object or a list of them.",
}

# The instruction placed in the answer prompt for each predicted intent.
INTENT_GUIDANCE: dict[str, str] = {
    "temporal": (
        "The question is about time. Use the dates shown with the records; resolve relative expressions "
        "such as 'last week' or 'yesterday' against the record's date and answer with a specific date, "
        "period or order of events."
    ),
    "semantic": "The question asks for a fact. Answer with the specific fact the records state, in a few words.",
    "causal": (
        "The question asks for a reason or a consequence. Answer with the cause or effect the records give, "
        "in one short phrase."
    ),
    "entity": (
        "The question asks about specific people, places or things. Name them exactly as the records do; "
        "list several items separated by commas when the records give several."
    ),
    GENERAL: "Answer in a few words, as specifically as the records allow.",
}

_PREFIX = re.compile(r"^\s*(final answer|answer|a)\s*[:\-]\s*", re.IGNORECASE)


# ------------------------------------------------------------------------------------- intent
class IntentPredictor:
    """Maps queries to ``(label, weights)``: the guidance key and the ``R`` intent weights.

    Args:
        intent: a :class:`models.intent.RelationIntent` (not of kind ``external``), or ``None``
            for no intent (every query gets the general guidance).
        min_weight: smallest top weight that selects a relation's guidance (default: 0.4).
    """

    def __init__(self, intent=None, min_weight: float = 0.4):
        if intent is not None and getattr(intent, "kind", None) == "external":
            raise ValueError("IntentPredictor needs a self-contained intent module, not kind 'external'")
        self.intent = intent.cpu().eval() if intent is not None else None
        self.min_weight = float(min_weight)

    def __call__(self, queries: Sequence[Query]) -> list[tuple[str, tuple[float, ...]]]:
        if self.intent is None or not queries:
            return [(GENERAL, ()) for _ in queries]
        q = torch.stack([x.embedding.float() for x in queries])
        with torch.no_grad():
            weights = self.intent(q)
        out = []
        for row in weights:
            top = int(row.argmax())
            label = RELATIONS[top] if top < len(RELATIONS) and float(row[top]) >= self.min_weight else GENERAL
            out.append((label, tuple(round(float(w), 4) for w in row)))
        return out


def make_intent_predictor(
    kind: str = "prototype",
    *,
    encoder=None,
    checkpoint: str | None = None,
    temperature: float = 0.1,
    min_weight: float = 0.4,
) -> IntentPredictor:
    """Build the intent source named by ``kind`` (``prototype``, ``checkpoint`` or ``uniform``).

    ``prototype`` embeds :data:`INTENT_DESCRIPTIONS` with ``encoder`` (default: the MiniLM encoder,
    which must be the encoder of the graph set's query embeddings).
    """
    if kind == "uniform":
        return IntentPredictor(None, min_weight)
    if kind == "prototype":
        if encoder is None:
            encoder = MiniLMEncoder()
        protos = torch.as_tensor(encoder.encode([INTENT_DESCRIPTIONS[r] for r in RELATIONS]), dtype=torch.float32)
        module = RelationIntent(protos.shape[1], "prototype", len(RELATIONS), temperature, prototypes=protos)
        return IntentPredictor(module, min_weight)
    if kind == "checkpoint":
        if not checkpoint:
            raise ValueError("intent kind 'checkpoint' needs qa.answer.intent_checkpoint (a router checkpoint)")

        state = read_router_checkpoint(checkpoint)
        module = RelationIntent(**state["intent_config"])
        module.load_state_dict(state["intent"])
        return IntentPredictor(module, min_weight)
    raise ValueError(f"unknown intent kind {kind!r}; use prototype, checkpoint or uniform")


# ------------------------------------------------------------------------------------ context
def context_records(
    graph: MemoryGraph, loaded_ids: Sequence[str], context_fields: Sequence[str] = ("date_time", "title")
) -> list[tuple[str, str]]:
    """``(node id, text)`` of the loaded nodes in load order; present ``context_fields`` of a node's
    metadata are prefixed as ``[value]`` (the date of a turn, the title of a passage)."""
    records = []
    for nid in loaded_ids:
        i = graph.index_of(nid)
        meta = graph.metadata[i] or {}
        tags = "".join(f"[{meta[f]}] " for f in context_fields if meta.get(f) not in (None, ""))
        records.append((nid, tags + graph.texts[i]))
    return records


@dataclass(frozen=True)
class AnswerRequest:
    """Everything the answer prompt is built from (no gold field exists on this type)."""

    qid: str
    question: str
    records: tuple[tuple[str, str], ...]
    intent: str = GENERAL
    intent_weights: tuple[float, ...] = ()


def answer_messages(request: AnswerRequest) -> Messages:
    """The system + user messages of one request (template ``qa_answer``)."""
    nonce = make_nonce([request.question, *(t for r in request.records for t in r)])
    return render(
        ROLE,
        nonce,
        guidance=INTENT_GUIDANCE[request.intent],
        memory_block=memory_block(list(request.records), nonce),
        question_block=block("question", request.question, nonce),
    )


def clean_answer(text: str, max_chars: int = 400) -> str:
    """First non-empty line of a reply, without an ``Answer:`` prefix or wrapping quotes."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = _PREFIX.sub("", line).strip().strip("\"'`").strip()
    return line[:max_chars]


@dataclass(kw_only=True)
class CallUsage:
    """Tokens, cost and latency of the one call behind an answer or a verdict (zeros when it failed)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    latency_s: float = 0.0
    cached: bool = False

    @staticmethod
    def of(completion) -> dict[str, Any]:
        if completion is None:
            return {}
        return {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "cost_usd": completion.cost_usd,
            "latency_s": completion.latency_s,
            "cached": completion.cached,
        }


@dataclass
class Answer(CallUsage):
    """One answer with its accounting; ``text`` is ``None`` when the call failed."""

    qid: str
    text: str | None
    raw: str | None
    abstained: bool
    intent: str
    intent_weights: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "intent_weights": list(self.intent_weights)}


class Answerer:
    """Answers requests through ``client`` — one call per question.

    Args:
        client: the answer model's :class:`LLMClient`.
        max_tokens: completion limit per answer (default: 48).
        abstention_phrases: phrases that mark an abstention (default: scoring's).
    """

    def __init__(self, client: LLMClient, max_tokens: int = 48, abstention_phrases: Sequence[str] = ABSTENTION_PHRASES):
        self.client, self.max_tokens, self.abstention_phrases = client, int(max_tokens), tuple(abstention_phrases)

    def answer_many(
        self, requests: Sequence[AnswerRequest], on_done: Callable[[int], None] | None = None
    ) -> list[Answer]:
        def check(text: str) -> str | None:
            return None if clean_answer(text) else "no answer line in the reply"

        answers = []
        for k in range(0, len(requests), max(1, self.client.config.max_concurrency)):
            chunk = requests[k : k + max(1, self.client.config.max_concurrency)]
            replies = self.client.complete_many(
                ROLE, [answer_messages(r) for r in chunk], max_tokens=self.max_tokens, validate=check
            )
            for r, c in zip(chunk, replies):
                text = clean_answer(c.text) if c is not None else None
                answers.append(
                    Answer(
                        qid=r.qid,
                        text=text,
                        raw=c.text if c is not None else None,
                        abstained=text is not None and is_abstention(text, self.abstention_phrases),
                        intent=r.intent,
                        intent_weights=r.intent_weights,
                        **CallUsage.of(c),
                    )
                )
            if on_done is not None:
                on_done(len(chunk))
        return answers


def build_requests(
    queries: Sequence[Query],
    graph_of: Sequence[str],
    loaded: Sequence[Sequence[str]],
    graphs: dict[str, MemoryGraph],
    intents: IntentPredictor,
    context_fields: Sequence[str] = ("date_time", "title"),
) -> list[AnswerRequest]:
    """One request per query from its graph and loaded ids; the intent is predicted from the query."""
    predicted = intents(list(queries))
    return [
        AnswerRequest(q.qid, q.text, tuple(context_records(graphs[g], ids, context_fields)), label, weights)
        for q, g, ids, (label, weights) in zip(queries, graph_of, loaded, predicted)
    ]
