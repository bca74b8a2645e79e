"""The JSON bodies of the memory server (:mod:`graphmem.serve.app`): what each route takes and returns.

The requests are strict (no coercion: ``"time": "5"`` is refused, not read as 5) and closed (an unknown field is
refused); they check shapes and types only. What a memory can take (a non-empty text, a new id, a known record,
a reward in [0, 1]) is checked by :class:`graphmem.Memory` itself, so that an embedded and a served memory refuse
the same input with the same line.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RecordIn(Request):
    """One turn or passage, as :meth:`graphmem.Memory.add` takes it."""

    text: str = Field(description="the record's text (non-empty, at most the memory's max_text_chars)")
    speaker: str | None = Field(None, description="who said it; stored as the text's 'speaker: ' prefix")
    time: float | None = Field(None, description="when, in seconds (for the temporal-window edges)")
    session: str | int | None = Field(None, description="the conversation session it belongs to")
    id: str | None = Field(None, description="the record's id (default: a new UUID)")
    meta: dict[str, Any] | None = Field(None, description="free JSON metadata kept with the record")
    key: str | None = Field(None, description="the text the record is found by (default: its text)")


class AddRequest(Request):
    """One record (its fields at the top level) or a batch (``records``), added in one transaction."""

    text: str | None = None
    speaker: str | None = None
    time: float | None = None
    session: str | int | None = None
    id: str | None = None
    meta: dict[str, Any] | None = None
    key: str | None = None
    records: list[RecordIn] | None = Field(None, min_length=1, description="a batch of records instead of one")

    @model_validator(mode="after")
    def one_record_or_a_batch(self) -> AddRequest:
        given = self.model_fields_set - {"records"}
        if self.records is not None and given:
            raise ValueError(f"give one record's fields or 'records', not both (also given: {sorted(given)})")
        if self.records is None and "text" not in given:
            raise ValueError("give a record's 'text', or 'records': a list of records")
        return self

    def batch(self) -> list[dict[str, Any]]:
        """The records to add, as :meth:`graphmem.Memory.add_many` takes them."""
        if self.records is not None:
            return [r.model_dump() for r in self.records]
        return [self.model_dump(exclude={"records"})]


class AddResponse(BaseModel):
    ids: list[str] = Field(description="the added records' ids, in the order given")


class BudgetIn(Request):
    """Limits of one retrieval; a field left out keeps the server's (``budget`` of ``configs/serve.yaml``)."""

    max_entries: int | None = Field(None, ge=1, le=100_000)
    top_k_neighbors: int | None = Field(None, ge=0, le=100_000)
    max_hops: int | None = Field(None, ge=0, le=10_000)
    max_nodes: int | None = Field(None, ge=1, le=1_000_000)
    max_tokens: int | None = Field(None, ge=0, le=10**9)


class RetrieveRequest(Request):
    query: str = Field(description="what the agent is about to answer")
    budget: BudgetIn | None = None
    policy: str | None = Field(None, description="a registered policy name (default: the server's policy)")
    limit: int | None = Field(None, ge=1, description="return only the first `limit` ranked records")


class RankedRecord(BaseModel):
    id: str
    text: str
    score: float | None = Field(description="the policy's score of the record when it was loaded (null: none)")


class Trace(BaseModel):
    entries: list[str] = Field(description="the records the walk started from")
    loaded: list[str] = Field(description="the records in the order they were loaded")
    traversed: list[tuple[str, str, str]] = Field(description="(source id, target id, relation) of each edge taken")
    edges_considered: int = Field(description="how many candidate edges the policy scored")
    loaded_tokens: int
    max_depth: int


class RetrieveResponse(BaseModel):
    id: str = Field(description="the retrieval's id, for feedback")
    query: str
    policy: str
    results: list[RankedRecord] = Field(description="the loaded records, most relevant first")
    trace: Trace
    wall_time_s: float


class FeedbackRequest(Request):
    """Exactly one of ``reward`` (in [0, 1]), ``helpful`` (the record ids that helped) and ``labels`` (a
    reflector's own ``[source id, target id, helpful|harmful|neutral, confidence]`` transitions)."""

    retrieval_id: str
    reward: float | None = None
    helpful: list[str] | None = None
    labels: list[list[Any]] | None = None


class FeedbackResponse(BaseModel):
    retrieval_id: str
    seq: int = Field(description="the entry's number in the memory's feedback log")
    edges_updated: int
    transitions_gone: int = Field(description="traversed transitions whose records were forgotten since")


class RecordOut(BaseModel):
    id: str
    text: str
    key: str
    time: float | None
    meta: dict[str, Any]


class ReviseRequest(Request):
    text: str = Field(description="the record's new text")
    key: str | None = Field(None, description="its new key (default: the new text)")


class ForgetResponse(BaseModel):
    forgotten: int


class ErrorResponse(BaseModel):
    error: str = Field(description="what was wrong, on one line")
