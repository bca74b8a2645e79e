"""Pydantic schemas of every structured LLM output, and a lenient parser for them.

LLM replies are untrusted: they may wrap JSON in code fences or prose, use wrong types, or mix
valid and invalid list items. :func:`parse_structured` finds the JSON object, validates each
item of every list field on its own (keeping the valid ones and counting the rest), then
validates the whole object. It never raises on bad model output.

Each call also sends a JSON Schema of the reply it expects (:func:`response_schema`, or one of
the per-call narrowings in :mod:`graphmem.llm.call_schemas`); providers that support it
constrain the reply to it, and the local model decodes under it. Every such schema accepts only
documents the pydantic model accepts, so parsing stays the safety net, not the filter.
"""

from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

T = TypeVar("T", bound=BaseModel)


class _Out(BaseModel):
    """Base of all output schemas: unknown keys are ignored, strings are stripped."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)


# ---------------------------------------------------------------------- event extraction (HAGE C.1)
class Relationship(_Out):
    subject: str = Field(min_length=1)
    relation: str = Field(min_length=1)
    object: str = Field(min_length=1)


class EventExtraction(_Out):
    """Structured memory unit of one turn: entities, topics, relations, facts, time, summary."""

    entities: list[str] = Field(default_factory=list)
    topics: list[str] = Field(default_factory=list)
    relationships: list[Relationship] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)
    temporal: list[str] = Field(default_factory=list)
    summary: str = ""


# ---------------------------------------------------------------------- causal judge
class CausalJudgement(_Out):
    """Confidence that the second turn is caused by, or responds causally to, the first."""

    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = ""


# ---------------------------------------------------------------------- LLM retriever (GraphMemory B.2)
class EntrySelection(_Out):
    """At most two index sections and six entry node ids (limits enforced by the retriever)."""

    sections: list[str] = Field(default_factory=list)
    entry_ids: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------- memory loop (GraphMemory B.1, B.3)
class Generation(_Out):
    """The Generator's answer and its ordered influence trace of loaded node ids (eq. 20)."""

    answer: str
    trace: list[str] = Field(default_factory=list)


class TransitionFeedback(_Out):
    source: str = Field(min_length=1)
    target: str = Field(min_length=1)
    label: Literal["helpful", "harmful", "neutral"]
    confidence: float = Field(ge=0.0, le=1.0)


class Reflection(_Out):
    """ACE-style critique plus one label and confidence per reported transition (eq. 21)."""

    critique: str = ""
    transitions: list[TransitionFeedback] = Field(default_factory=list)


class AddNode(_Out):
    op: Literal["add_node"]
    key: str = Field(min_length=1)
    text: str = Field(min_length=1)


class ReviseNode(_Out):
    op: Literal["revise_node"]
    node_id: str = Field(min_length=1)
    text: str | None = None
    key: str | None = None


class AddEdge(_Out):
    op: Literal["add_edge"]
    source: str = Field(min_length=1)
    target: str = Field(min_length=1)
    relation: str = "semantic"


class RemoveEdge(_Out):
    op: Literal["remove_edge"]
    source: str = Field(min_length=1)
    target: str = Field(min_length=1)


CurationOp = typing.Annotated[Union[AddNode, ReviseNode, AddEdge, RemoveEdge], Field(discriminator="op")]


class Curation(_Out):
    """Local graph edits; an ``add_node`` may be referred to by edges as ``new:<index>``."""

    operations: list[CurationOp] = Field(default_factory=list)


# ---------------------------------------------------------------------- QA judge (HAGE C.3)
class JudgeScore(_Out):
    """Semantic agreement of a response with the reference, in ``[0, 1]``."""

    score: float = Field(ge=0.0, le=1.0)
    reason: str = ""


# ---------------------------------------------------------------------- response schemas
MAX_ITEMS = 8
MAX_CHARS = 240


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` whose objects admit only their listed properties (``additionalProperties: false``)."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
    return out


def bounded(schema: Any, max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS) -> Any:
    """A copy of ``schema`` with ``maxItems`` on every array and ``maxLength`` on every free string.

    Only adds bounds that are absent; enum and const strings are left as they are.
    """
    if isinstance(schema, list):
        return [bounded(s, max_items, max_chars) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded(v, max_items, max_chars) for k, v in schema.items()}
    if out.get("type") == "array":
        out.setdefault("maxItems", max_items)
    if out.get("type") == "string" and "enum" not in out and "const" not in out:
        out.setdefault("maxLength", max_chars)
    return out


def response_schema(model: type[BaseModel], max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """The JSON Schema sent with a call expecting ``model``: pydantic's, closed and bounded."""
    return bounded(closed(model.model_json_schema()), max_items, max_chars)


# ---------------------------------------------------------------------- lenient parsing
@dataclass
class Parsed(Generic[T]):
    """Outcome of parsing one reply: the model (or ``None``), discarded items, and why it failed."""

    value: T | None
    discarded: int = 0
    error: str | None = None


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_OPENER = re.compile(r"[\[{]")


def extract_json(text: str) -> Any:
    """The first JSON object (else array) in ``text``, looking inside code fences first. A fence counts when the JSON
    value at its first ``{`` or ``[`` runs to its end: a string in the JSON may hold a fence mark, which ends the
    fence early, and a piece of the reply cut there (or an array inside it) is not the reply.

    Raises:
        ValueError: when no JSON value can be decoded.
    """
    decoder = json.JSONDecoder()
    for fence in _FENCE.finditer(text):
        chunk = fence.group(1).strip()
        first = _OPENER.search(chunk)
        try:
            value, end = decoder.raw_decode(chunk, first.start()) if first else (None, -1)
        except ValueError:
            continue
        if end == len(chunk):
            return value
    for match in _OPENER.finditer(text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, (dict, list)):
            return value
    raise ValueError("no JSON object found in the reply")


def _list_item_type(annotation: Any) -> Any | None:
    if typing.get_origin(annotation) is list:
        args = typing.get_args(annotation)
        return args[0] if args else Any
    return None


def _adapter(item_type: Any) -> TypeAdapter:
    return _ADAPTERS.setdefault(item_type, TypeAdapter(item_type)) if _hashable(item_type) else TypeAdapter(item_type)


def _hashable(x: Any) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


_ADAPTERS: dict[Any, TypeAdapter] = {}


def parse_structured(text: str | None, schema: type[T]) -> Parsed[T]:
    """Parse ``text`` into ``schema``, discarding invalid list items one by one.

    A top-level JSON array is accepted when the schema has exactly one list field. A list field
    holding a non-list counts as one discarded item and becomes empty.
    """
    if not text or not text.strip():
        return Parsed(None, 0, "empty reply")
    try:
        data = extract_json(text)
    except ValueError as err:
        return Parsed(None, 0, str(err))
    list_fields = {n: t for n, f in schema.model_fields.items() if (t := _list_item_type(f.annotation)) is not None}
    if isinstance(data, list) and len(list_fields) == 1:
        data = {next(iter(list_fields)): data}
    if not isinstance(data, dict):
        return Parsed(None, 0, f"expected a JSON object, got {type(data).__name__}")
    data = dict(data)
    discarded = 0
    for name, item_type in list_fields.items():
        if name not in data:
            continue
        raw = data[name]
        if not isinstance(raw, list):
            discarded += 1
            data[name] = []
            continue
        adapter, kept = _adapter(item_type), []
        for item in raw:
            try:
                kept.append(adapter.validate_python(item))
            except ValidationError:
                discarded += 1
        data[name] = kept
    try:
        return Parsed(schema.model_validate(data), discarded, None)
    except ValidationError as err:
        return Parsed(
            None,
            discarded,
            f"schema {schema.__name__}: {err.errors()[0].get('msg', 'invalid')}"
            f" at {'.'.join(map(str, err.errors()[0].get('loc', ())))}",
        )
