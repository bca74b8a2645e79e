"""The memory server: :class:`graphmem.Memory` behind an HTTP API, for agents in other processes or languages.

The routes follow the REST memory APIs agents already call (Mem0, Zep): a memory is a namespace named in the
path, and its records are added, retrieved, rated, read and deleted under it::

    GET    /v1/health                            the server is up; how many memories it holds open
    POST   /v1/memories/{name}/records           add one record or a batch (one transaction) -> ids
    POST   /v1/memories/{name}/retrieve          ranked records (id, text, score), the trace, a retrieval id
    POST   /v1/memories/{name}/feedback          a reward or the helpful ids for a retrieval id
    GET    /v1/memories/{name}                   the memory's sizes and settings
    GET    /v1/memories/{name}/records/{id}      one record
    PUT    /v1/memories/{name}/records/{id}      revise one record's text
    DELETE /v1/memories/{name}/records/{id}      forget one record (gone from every byte of the store)

The server adds a token, namespaces, limits and JSON errors, not another model of the memory: each route is one
call of the memory's own method, and bad input is refused with the memory's own line. Every request passes the
:class:`~graphmem.serve.gate.Gate` first (token, name, body size). Every error is ``{"error": "<one line>"}``:
``400`` bad input, ``401`` no or a wrong token, ``404`` an unknown memory, record, retrieval or route, ``409`` an
id taken already or a memory another process writes, ``413`` a body over ``max_body_bytes`` or a batch over
``max_records``, ``500`` a bug (its traceback in the server's log only). ``docs/serving_memory.md`` shows each
route with curl.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from graphmem.core import Budget
from graphmem.core.errors import InputError
from graphmem.index.embed import make_encoder
from graphmem.memory import DuplicateIdError, Memory, MemoryError, MemoryRetrieval, UnknownIdError, check_policy
from graphmem.policies import POLICIES
from graphmem.serve.gate import Gate, error_response
from graphmem.serve.memories import OpenMemories, TooManyMemoriesError, UnknownMemoryError
from graphmem.serve.schemas import (
    AddRequest,
    AddResponse,
    ErrorResponse,
    FeedbackRequest,
    FeedbackResponse,
    ForgetResponse,
    RankedRecord,
    RecordOut,
    RetrieveRequest,
    RetrieveResponse,
    ReviseRequest,
    Trace,
)
from graphmem.store.memory_store import MemoryStoreError

log = logging.getLogger(__name__)

TOKEN_ENV = "GRAPHMEM_TOKEN"
LOCALHOST = "127.0.0.1"


class ServeConfigError(InputError, ValueError):
    """A server that may not start as configured (no token where one is required)."""


class TooManyRecordsError(InputError):
    """An add request with more records than ``max_records``."""


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask of the server.

    Args:
        max_body_bytes: the largest request body (default: 4 MiB).
        max_records: the most records one add request may hold (default: 1000).
        max_memories: the most memories held open at once (default: 100).
    """

    max_body_bytes: int = 4 * 2**20
    max_records: int = 1000
    max_memories: int = 100


STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (UnknownIdError, 404),
    (UnknownMemoryError, 404),
    (DuplicateIdError, 409),
    (MemoryStoreError, 409),
    (TooManyMemoriesError, 409),
    (TooManyRecordsError, 413),
)
"""The status of each refused input that is not a plain ``400``."""


def serve_token(auth: str, host: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The bearer token the server requires: ``$GRAPHMEM_TOKEN`` with ``auth=token``; ``None`` with ``auth=none``,
    allowed only on 127.0.0.1. Anything else is :class:`ServeConfigError`: the server does not start."""
    if auth == "none":
        if host != LOCALHOST:
            raise ServeConfigError(f"auth=none is allowed only with host={LOCALHOST}, not host={host}")
        return None
    if auth != "token":
        raise ServeConfigError(f"auth={auth!r} must be 'token' (the bearer token in ${TOKEN_ENV}) or 'none'")
    token = environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ServeConfigError(
            f"auth=token needs the bearer token in ${TOKEN_ENV} (export {TOKEN_ENV}=<a long random string>); "
            f"without one the server starts only with auth=none host={LOCALHOST}"
        )
    return token


def make_app(
    memory_root: str | Path,
    *,
    token: str | None,
    graph: Mapping[str, Any] | None = None,
    policy: str | Mapping[str, Any] | None = None,
    checkpoint: str | Path | None = None,
    budget: Budget | None = None,
    limits: ServeLimits = ServeLimits(),
) -> FastAPI:
    """The server's app over the memories under ``memory_root`` (module docstring).

    Args:
        memory_root: the folder holding one folder per memory (created when missing).
        token: the bearer token every request must carry (:func:`serve_token`); ``None``: none.
        graph: graph settings as in ``configs/graph/default.yaml``, ``encoder`` included: new memories are created
            with them, and an existing memory created with others is refused (default: the defaults).
        policy: the memories' policy: a registered name or a policy config (default: ``router`` with
            ``checkpoint``, else ``hybrid``).
        checkpoint: a trained walk for the policy.
        budget: the default retrieval budget (a request may change any of its limits).
        limits: the request limits.
    """
    settings = {k: v for k, v in dict(graph or {}).items() if k not in ("encoder", "cache_dir", "incremental")}
    encoder = make_encoder(str((graph or {}).get("encoder", "minilm")))  # one encoder for every memory
    encoder.config_name = str((graph or {}).get("encoder", "minilm"))
    check_policy(policy, checkpoint, encoder)  # a checkpoint of another encoder: refused before any memory opens
    Path(memory_root).mkdir(parents=True, exist_ok=True)

    def opener(folder: Path) -> Memory:
        return Memory.open(folder, encoder=encoder, policy=policy, checkpoint=checkpoint, graph=settings, budget=budget)

    memories = OpenMemories(memory_root, opener, limits.max_memories)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        memories.close()

    app = FastAPI(
        title="graphmem memory server",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/v1/openapi.json",
        responses={400: {"model": ErrorResponse}, 401: {"model": ErrorResponse}},
    )
    app.state.memories = memories
    _errors(app)
    _routes(app, memories, limits)
    app.add_middleware(Gate, token=token, max_body_bytes=limits.max_body_bytes)
    return app


def _routes(app: FastAPI, memories: OpenMemories, limits: ServeLimits) -> None:
    """The routes: each one call of the named memory's method."""

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        """The server is up; how many memories it holds open."""
        return {"status": "ok", "memories_open": len(memories)}

    @app.post("/v1/memories/{name}/records", status_code=201)
    def add_records(name: str, body: AddRequest) -> AddResponse:
        """Add one record (its fields at the top level) or a batch (``records``) in one transaction; creates the
        memory on its first record. Returns the ids in the order given."""
        records = body.batch()
        if len(records) > limits.max_records:
            raise TooManyRecordsError(f"{len(records):,} records in one request, over max_records {limits.max_records}")
        return AddResponse(ids=memories.get(name, create=True).add_many(records))

    @app.post("/v1/memories/{name}/retrieve")
    def retrieve(name: str, body: RetrieveRequest) -> RetrieveResponse:
        """The records the memory's policy loads for ``query`` under the budget, most relevant first, with the
        trace and the retrieval's id (for feedback; the memory keeps its last 1024 retrievals)."""
        memory = memories.get(name)
        budget = None
        if body.budget is not None:
            budget = dataclasses.replace(memory.budget, **body.budget.model_dump(exclude_none=True))
        policy = _registered_policy(body.policy)
        return _retrieval(memory.retrieve(body.query, budget=budget, policy=policy), body.limit)

    @app.post("/v1/memories/{name}/feedback")
    def feedback(name: str, body: FeedbackRequest) -> FeedbackResponse:
        """Rate a retrieval (a reward in [0, 1], the ids that helped, or labelled transitions): GraphMemory's Beta
        update of the transitions it traversed, logged for training."""
        memory, labels = memories.get(name), body.labels
        entry = memory.feedback(body.retrieval_id, reward=body.reward, helpful=body.helpful, labels=labels)
        return FeedbackResponse(
            retrieval_id=body.retrieval_id,
            seq=entry["seq"],
            edges_updated=entry["edges_updated"],
            transitions_gone=entry["transitions_gone"],
        )

    @app.get("/v1/memories/{name}")
    def stats(name: str) -> dict[str, Any]:
        """The memory's sizes (records, edges by relation, feedback entries, bytes) and settings."""
        return memories.get(name).stats()

    @app.get("/v1/memories/{name}/records/{record_id:path}")
    def get_record(name: str, record_id: str) -> RecordOut:
        """One record: its id, text, key, time and metadata."""
        return RecordOut(**memories.get(name).get(record_id))

    @app.put("/v1/memories/{name}/records/{record_id:path}")
    def revise_record(name: str, record_id: str, body: ReviseRequest) -> RecordOut:
        """Replace one record's text (its place, edges and counters kept); the old text leaves the store."""
        memory = memories.get(name)
        memory.revise(record_id, body.text, key=body.key)
        return RecordOut(**memory.get(record_id))

    @app.delete("/v1/memories/{name}/records/{record_id:path}")
    def forget_record(name: str, record_id: str) -> ForgetResponse:
        """Forget one record: its text, embedding, edges and index entries, and its mentions in the feedback log."""
        return ForgetResponse(forgotten=memories.get(name).forget([record_id]))


def _registered_policy(name: str | None) -> str | None:
    """A policy a request names: a registered name only (a dotted class path would import a module)."""
    if name is not None and name not in POLICIES and name not in POLICIES.lazy:
        raise MemoryError(f"field 'policy': {name!r} is not a registered policy; registered: {sorted(POLICIES)}")
    return name


def _retrieval(r: MemoryRetrieval, limit: int | None) -> RetrieveResponse:
    score = dict(zip(r.loaded, r.scores)) if r.scores is not None else {}
    ranked = r.ranked[:limit] if limit is not None else r.ranked
    return RetrieveResponse(
        id=r.id,
        query=r.query,
        policy=r.policy,
        results=[RankedRecord(id=i, text=r.texts_by_id[i], score=score.get(i)) for i in ranked],
        trace=Trace(**{key: getattr(r, key) for key in Trace.model_fields}),
        wall_time_s=r.wall_time_s,
    )


def _errors(app: FastAPI) -> None:
    """Every error as ``{"error": "<one line>"}`` with its status (module docstring); never a traceback."""

    def refused(request: Request, err: Exception):
        status = next((s for cls, s in STATUS if isinstance(err, cls)), 400)
        return error_response(status, str(err) or type(err).__name__)

    def invalid(request: Request, err: RequestValidationError):
        return error_response(400, validation_line(err.errors()))

    def http_error(request: Request, err: HTTPException):
        return error_response(err.status_code, f"{err.detail}: {request.method} {request.url.path}")

    def bug(request: Request, err: Exception):
        log.exception("%s %s failed", request.method, request.url.path, exc_info=err)
        return error_response(500, f"internal error ({type(err).__name__}); the server's log has the details")

    app.add_exception_handler(InputError, refused)
    app.add_exception_handler(ValueError, refused)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, bug)


def validation_line(errors: list[dict[str, Any]]) -> str:
    """pydantic's validation errors of a request as one line: the first error's field and message."""
    if not errors:
        return "invalid request"
    first = errors[0]
    where = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return f"request body is not valid JSON ({first.get('ctx', {}).get('error', first.get('msg'))})"
    if first.get("type") == "missing" and not where:
        return "request body is missing: send a JSON object"
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return (f"field '{'.'.join(where)}': " if where else "request body: ") + message + more
