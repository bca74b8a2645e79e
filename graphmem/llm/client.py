"""The one LLM client of graphmem: every model call in the project goes through :class:`LLMClient`.

It wraps ``litellm.completion`` with what long research runs need:

* retries with exponential backoff on timeouts, rate limits, API/connection errors, empty
  replies and (for structured calls) unparsable replies, then a *counted* failure: the call
  returns ``None`` and the run continues;
* a concurrency limit for batched calls (thread pool + semaphore);
* an on-disk response cache (:mod:`graphmem.llm.cache`), so a rerun after a kill repeats no
  finished call;
* token, cost and latency accounting per role (``usage_report``) and a failure summary;
* structured outputs: the JSON Schema of the expected reply goes to the provider as litellm's
  ``response_format`` (``{"type": "json_schema", ...}``) where it is supported, the local model
  decodes under it, and every reply is still validated with pydantic (:mod:`graphmem.llm.schemas`).

The API key is read at call time from the environment variable named in the config; it is
passed to litellm only, and never part of a cache key. Every reply (its text and model name) and
every recorded error message is redacted (:func:`graphmem.tracking.secrets.redact`: the key's value
and those of credential-named environment variables become ``***``) before it is validated,
cached, returned or logged, so an endpoint that echoes the key cannot get it into the cache, the
outputs or the logs; an entry cached before is redacted again when it is read.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from pydantic import BaseModel

from graphmem.llm.cache import ResponseCache, cache_key
from graphmem.llm.local import register_local_provider
from graphmem.llm.schemas import Parsed, parse_structured, response_schema
from graphmem.tracking.secrets import redact

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches prices at import otherwise

log = logging.getLogger("graphmem.llm")
RESPONSE_FORMATS = ("auto", "json_schema", "json_object", "none")
T = TypeVar("T", bound=BaseModel)
Messages = list[dict[str, str]]


@dataclass
class LLMConfig:
    """Settings of one LLM endpoint (mirrored by ``configs/llm/*.yaml``).

    Args:
        model: litellm model name, e.g. ``gpt-4o-mini`` or ``local/smollm2-135m`` (default: local).
        api_key_env: name of the environment variable holding the API key; ``None`` for none.
        api_base: custom endpoint URL, or ``None`` for the provider default.
        temperature: sampling temperature (default: 0.0).
        max_tokens: completion token limit per call (default: 512).
        timeout_s: per-request timeout in seconds (default: 60).
        max_retries: extra attempts after the first one fails (default: 3).
        backoff_s: first backoff delay; attempt ``k`` waits ``backoff_s * 2**k`` (default: 1.0).
        max_concurrency: simultaneous requests across all threads (default: 4).
        cache_dir: response cache directory, or ``None`` to disable caching.
        mock_response: fixed reply passed to litellm's ``mock_response`` (tests; no network).
        response_format: how structured calls ask for JSON: ``auto`` (a JSON Schema for the local
            model and for providers litellm lists as supporting ``response_format``, nothing
            otherwise), ``json_schema``, ``json_object`` or ``none`` (default: ``auto``).
    """

    model: str = "local/smollm2-135m"
    api_key_env: str | None = None
    api_base: str | None = None
    temperature: float = 0.0
    max_tokens: int = 512
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_concurrency: int = 4
    cache_dir: str | None = None
    mock_response: str | None = None
    response_format: str = "auto"

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("LLMConfig.model must be a non-empty litellm model name")
        if self.response_format not in RESPONSE_FORMATS:
            raise ValueError(
                f"LLMConfig.response_format must be one of {RESPONSE_FORMATS}, got {self.response_format!r}"
            )
        if self.max_retries < 0 or self.max_concurrency < 1 or self.max_tokens < 1 or self.backoff_s < 0:
            raise ValueError("LLMConfig: max_retries and backoff_s must be >= 0, max_concurrency and max_tokens >= 1")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> LLMConfig:
        """Build from a mapping (e.g. a Hydra node); unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"LLMConfig: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**dict(values))

    @classmethod
    def from_yaml(cls, path: str | Path) -> LLMConfig:
        import yaml

        return cls.from_dict(yaml.safe_load(Path(path).read_text()) or {})


class LLMCallError(RuntimeError):
    """A call that failed after all retries (raised only with ``strict=True``)."""

    def __init__(self, role: str, kind: str, message: str) -> None:
        super().__init__(f"{role}: {kind}: {message}")
        self.role, self.kind = role, kind


@dataclass
class Completion:
    """One reply with its usage. ``cost_usd`` is ``None`` when litellm has no price for the model."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_s: float
    cached: bool = False


@dataclass
class RoleUsage:
    """Counters of one role (e.g. ``retriever``, ``generator``).

    ``calls`` counts :meth:`LLMClient.complete` invocations (cache hits included), ``requests``
    the requests actually sent to litellm (retries included); tokens, cost and latency sum over
    requests.
    """

    calls: int = 0
    requests: int = 0
    cache_hits: int = 0
    failures: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_unknown_calls: int = 0
    latency_s: float = 0.0
    discarded_items: int = 0
    invalid_replies: int = 0
    """replies received but rejected by the call's validation (no parsable object for structured calls)"""
    failure_kinds: Counter = field(default_factory=Counter)


class _Retryable(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _classify(err: Exception) -> tuple[str, bool]:
    """``(kind, retryable)`` for an exception raised by litellm."""
    import litellm

    table = (
        (litellm.Timeout, "timeout", True),
        (litellm.RateLimitError, "rate_limit", True),
        (litellm.ServiceUnavailableError, "api_error", True),
        (litellm.InternalServerError, "api_error", True),
        (litellm.APIConnectionError, "api_error", True),
        (litellm.APIError, "api_error", True),
        (litellm.AuthenticationError, "auth", False),
        (litellm.BadRequestError, "bad_request", False),
    )
    for cls, kind, retry in table:
        if isinstance(err, cls):
            return kind, retry
    return "other", False


class LLMClient:
    """Retrying, caching, rate-limited, accounted access to one litellm model.

    Args:
        config: endpoint settings (default: :class:`LLMConfig` defaults, the local model).
    """

    def __init__(self, config: LLMConfig | None = None) -> None:
        self.config = config or LLMConfig()
        self.cache = ResponseCache(self.config.cache_dir) if self.config.cache_dir else None
        self._usage: dict[str, RoleUsage] = defaultdict(RoleUsage)
        self._failures: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.config.max_concurrency)
        self._sleep: Callable[[float], None] = time.sleep
        self._format_support: bool | None = None
        if self.config.model.startswith("local/"):
            register_local_provider()

    @property
    def model(self) -> str:
        return self.config.model

    @property
    def is_local_substitute(self) -> bool:
        """True when replies come from the offline model or a mock, not a hosted LLM."""
        return self.config.model.startswith("local/") or self.config.mock_response is not None

    # ------------------------------------------------------------------ single and batched calls
    def complete(
        self,
        role: str,
        messages: Messages,
        *,
        max_tokens: int | None = None,
        validate: Callable[[str], str | None] | None = None,
        strict: bool = False,
        schema: type[BaseModel] | None = None,
        json_schema: dict[str, Any] | None = None,
    ) -> Completion | None:
        """Send ``messages``; return the reply, or ``None`` after a counted failure.

        Args:
            role: accounting bucket (e.g. ``extractor``).
            messages: OpenAI-style chat messages.
            max_tokens: overrides the config limit for this call.
            validate: returns an error string for an unusable reply (retried like an empty one);
                only replies that pass are cached.
            strict: raise :class:`LLMCallError` instead of returning ``None``.
            schema: the pydantic model the reply should match; sent as ``response_format``
                (:meth:`response_format`), the reply itself is not parsed here.
            json_schema: the JSON Schema to send instead of ``schema``'s own (a per-call narrowing).
        """
        params = {"temperature": self.config.temperature, "max_tokens": max_tokens or self.config.max_tokens}
        if schema is not None and (fmt := self.response_format(schema, json_schema)) is not None:
            params["response_format"] = fmt
        if self.config.mock_response is not None:
            params["mock_response"] = self.config.mock_response
        key = cache_key(self.config.model, messages, params)
        with self._lock:
            self._usage[role].calls += 1
        if (
            self.cache is not None
            and (hit := self.cache.get(key)) is not None
            and (validate is None or validate(hit["content"]) is None)
        ):
            with self._lock:
                self._usage[role].cache_hits += 1
            return Completion(
                self._redact(hit["content"]),
                self._redact(str(hit.get("model", self.config.model))),
                int(hit.get("prompt_tokens", 0)),
                int(hit.get("completion_tokens", 0)),
                hit.get("cost_usd"),
                0.0,
                cached=True,
            )
        kind, message = "other", "no attempt made"
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                self._sleep(self.config.backoff_s * 2 ** (attempt - 1))
                with self._lock:
                    self._usage[role].retries += 1
            try:
                result = self._call_once(role, messages, params, validate)
            except _Retryable as err:
                kind, message = err.kind, str(err)
                continue
            except Exception as err:  # noqa: BLE001 - litellm raises many types; classify, never crash the run
                kind, retry = _classify(err)
                message = f"{type(err).__name__}: {err}"
                if retry:
                    continue
                break
            if self.cache is not None:
                self.cache.put(
                    key,
                    {
                        "content": result.text,
                        "model": result.model,
                        "prompt_tokens": result.prompt_tokens,
                        "completion_tokens": result.completion_tokens,
                        "cost_usd": result.cost_usd,
                    },
                )
            return result
        return self._fail(role, kind, message, strict)

    def complete_many(self, role: str, batch: Sequence[Messages], **kwargs) -> list[Completion | None]:
        """:meth:`complete` for each conversation, at most ``max_concurrency`` at a time, in order."""
        if len(batch) <= 1 or self.config.max_concurrency == 1:
            return [self.complete(role, m, **kwargs) for m in batch]
        self._supports_response_format()  # looked up once here, not raced by the threads
        with ThreadPoolExecutor(max_workers=min(self.config.max_concurrency, len(batch))) as pool:
            return list(pool.map(lambda m: self.complete(role, m, **kwargs), batch))

    # ------------------------------------------------------------------ structured outputs
    def response_format(self, schema: type[BaseModel], json_schema: dict[str, Any] | None = None) -> dict | None:
        """litellm ``response_format`` of a call expecting ``schema`` (see ``LLMConfig.response_format``).

        ``{"type": "json_schema", "json_schema": {"name", "schema", "strict": false}}`` with
        ``json_schema`` or :func:`~graphmem.llm.schemas.response_schema` of ``schema``; non-strict,
        because OpenAI's strict mode refuses optional fields, and the reply is validated anyway.
        """
        mode = self.config.response_format
        if mode == "auto":
            mode = "json_schema" if self._supports_response_format() else "none"
        if mode == "none":
            return None
        if mode == "json_object":
            return {"type": "json_object"}
        body = json_schema if json_schema is not None else response_schema(schema)
        return {"type": "json_schema", "json_schema": {"name": schema.__name__, "schema": body, "strict": False}}

    def _supports_response_format(self) -> bool:
        if self.config.model.startswith("local/"):
            return True
        if self._format_support is None:
            try:
                import litellm

                self._format_support = bool(
                    litellm.supports_response_schema(model=self.config.model)
                    or "response_format" in (litellm.get_supported_openai_params(model=self.config.model) or [])
                )
            except Exception:  # noqa: BLE001 - an unknown model: send no response_format
                self._format_support = False
        return self._format_support

    def structured(
        self, role: str, messages: Messages, schema: type[T], json_schema: dict[str, Any] | None = None, **kwargs
    ) -> Parsed[T]:
        """Call and parse the reply into ``schema``; invalid list items are discarded and counted.

        ``response_format`` carries ``json_schema`` (a per-call narrowing of ``schema``, from
        :mod:`graphmem.llm.call_schemas`) or ``schema``'s own. A reply with no parsable object is
        retried; after the last attempt the result has ``value=None`` and the failure is counted.
        Never raises on bad model output.
        """

        def check(text: str) -> str | None:
            return parse_structured(text, schema).error

        completion = self.complete(role, messages, validate=check, schema=schema, json_schema=json_schema, **kwargs)
        if completion is None:
            return Parsed(None, 0, "call failed")
        parsed = parse_structured(completion.text, schema)
        if parsed.discarded:
            with self._lock:
                self._usage[role].discarded_items += parsed.discarded
        return parsed

    def structured_many(
        self,
        role: str,
        batch: Sequence[Messages],
        schema: type[T],
        json_schemas: Sequence[dict[str, Any] | None] | None = None,
        **kwargs,
    ) -> list[Parsed[T]]:
        """:meth:`structured` for each conversation (with its own ``json_schemas[i]``) under the
        concurrency limit, in order."""
        specs = list(json_schemas) if json_schemas is not None else [None] * len(batch)
        if len(specs) != len(batch):
            raise ValueError(f"structured_many: {len(specs)} json_schemas for {len(batch)} conversations")
        if len(batch) <= 1 or self.config.max_concurrency == 1:
            return [self.structured(role, m, schema, j, **kwargs) for m, j in zip(batch, specs)]
        self._supports_response_format()
        with ThreadPoolExecutor(max_workers=min(self.config.max_concurrency, len(batch))) as pool:
            return list(pool.map(lambda mj: self.structured(role, mj[0], schema, mj[1], **kwargs), zip(batch, specs)))

    def count_discarded(self, role: str, n: int) -> None:
        """Record ``n`` items a component dropped after parsing (e.g. unknown node ids)."""
        if n:
            with self._lock:
                self._usage[role].discarded_items += n

    # ------------------------------------------------------------------ reports
    def usage_report(self) -> dict[str, Any]:
        """Per-role and total counters; ``model`` and ``local_substitute`` say where replies came from."""
        with self._lock:
            roles = {
                r: {
                    **{k: v for k, v in asdict(u).items() if k != "failure_kinds"},
                    "failure_kinds": dict(u.failure_kinds),
                }
                for r, u in sorted(self._usage.items())
            }
        total: dict[str, Any] = {}
        for stats in roles.values():
            for k, v in stats.items():
                if k != "failure_kinds":
                    total[k] = total.get(k, 0) + v
        return {
            "model": self.config.model,
            "local_substitute": self.is_local_substitute,
            "roles": roles,
            "total": total,
        }

    def all_calls_failed(self) -> str | None:
        """``"all N calls to <model> failed"`` when calls were made and every one failed, else ``None``."""
        with self._lock:
            calls = sum(u.calls for u in self._usage.values())
            failed = sum(u.failures for u in self._usage.values())
        return f"all {calls} calls to {self.config.model} failed" if calls and failed >= calls else None

    def failure_summary(self) -> dict[str, Any]:
        """Failures by role and kind, with the last few (redacted) messages."""
        with self._lock:
            by_kind = Counter(f"{f['role']}/{f['kind']}" for f in self._failures)
            return {
                "failures": len(self._failures),
                "by_role_kind": dict(by_kind),
                "recent": list(self._failures[-10:]),
            }

    # ------------------------------------------------------------------ internals
    def _call_once(
        self, role: str, messages: Messages, params: dict[str, Any], validate: Callable[[str], str | None] | None
    ) -> Completion:
        import litellm

        extra: dict[str, Any] = {"timeout": self.config.timeout_s, "num_retries": 0}
        if self.config.api_base:
            extra["api_base"] = self.config.api_base
        if self.config.api_key_env and os.environ.get(self.config.api_key_env):
            extra["api_key"] = os.environ[self.config.api_key_env]
        start = time.perf_counter()
        with self._slots:
            response = litellm.completion(model=self.config.model, messages=messages, **params, **extra)
        latency = time.perf_counter() - start
        text = self._redact((response.choices[0].message.content or "") if response.choices else "")
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = 0.0 if self.config.mock_response is not None else self._cost(response)  # a mock costs nothing
        with self._lock:  # tokens of rejected replies were paid for too, so count every response
            u = self._usage[role]
            u.requests += 1
            u.prompt_tokens += prompt_tokens
            u.completion_tokens += completion_tokens
            u.latency_s += latency
            if cost is None:
                u.cost_unknown_calls += 1
            else:
                u.cost_usd += cost
        if not text.strip():
            raise _Retryable("empty", "the model returned no content")
        if validate is not None and (problem := validate(text)) is not None:
            with self._lock:
                self._usage[role].invalid_replies += 1
            raise _Retryable("malformed", problem)
        model = self._redact(str(getattr(response, "model", None) or self.config.model))
        return Completion(text, model, prompt_tokens, completion_tokens, cost, latency)

    @staticmethod
    def _cost(response: Any) -> float | None:
        hidden = getattr(response, "_hidden_params", None) or {}
        if isinstance(hidden.get("response_cost"), (int, float)):
            return float(hidden["response_cost"])
        try:
            import litellm

            return float(litellm.completion_cost(completion_response=response))
        except Exception:  # noqa: BLE001 - unknown price: report as unknown, not as zero
            return None

    def _fail(self, role: str, kind: str, message: str, strict: bool) -> None:
        message = self._redact(message)[:500]
        with self._lock:
            u = self._usage[role]
            u.failures += 1
            u.failure_kinds[kind] += 1
            self._failures.append({"role": role, "kind": kind, "message": message})
        log.warning("LLM call for role %r failed (%s): %s", role, kind, message)
        if strict:
            raise LLMCallError(role, kind, message)
        return None

    def _redact(self, text: str) -> str:
        """``text`` without the configured key's value or any other credential (module docstring)."""
        return redact(text, [os.environ.get(self.config.api_key_env) if self.config.api_key_env else None])
