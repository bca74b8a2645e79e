"""A small Python client of the memory server, with :class:`graphmem.Memory`'s methods (standard library only).

    from graphmem.serve import MemoryClient

    mem = MemoryClient("http://127.0.0.1:8765", memory="alice")   # the token from $GRAPHMEM_TOKEN
    mem.add("I adopted a greyhound called Pixel last May.", speaker="Alice", session=1)
    r = mem.retrieve("What is the name of Alice's dog?")
    print([x["text"] for x in r["results"]])
    mem.feedback(r, helpful=[r["results"][0]["id"]])

One client holds one keep-alive connection: use one per thread. A refused request raises
:class:`MemoryServerError` with the server's status and its one-line message.
"""

from __future__ import annotations

import http.client
import json
import os
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote, urlsplit

TOKEN_ENV = "GRAPHMEM_TOKEN"


class MemoryServerError(Exception):
    """A request the server refused (``status`` 4xx) or failed (5xx); the message is the server's line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


class MemoryClient:
    """One memory on a server (module docstring).

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8765``.
        token: the bearer token (default: ``$GRAPHMEM_TOKEN``; none when that is unset too).
        memory: the memory's name (its namespace on the server) (default: ``default``).
        timeout: seconds to wait for an answer (default: 60).
    """

    def __init__(self, base_url: str, token: str | None = None, memory: str = "default", timeout: float = 60.0) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url {base_url!r} must be http://host:port or https://host:port")
        self.base_url, self.memory_name, self.timeout = base_url.rstrip("/"), memory, timeout
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self._url = url
        self._conn: http.client.HTTPConnection | None = None

    def memory(self, name: str) -> MemoryClient:
        """A client of another memory on the same server."""
        return MemoryClient(self.base_url, self.token, name, self.timeout)

    # ------------------------------------------------------------------ the memory's methods
    def add(
        self,
        text: str,
        *,
        speaker: str | None = None,
        time: float | None = None,
        session: str | int | None = None,
        id: str | None = None,  # noqa: A002  (the record's id, as the API names it)
        meta: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> str:
        """Add one record; returns its id."""
        record = dict(text=text, speaker=speaker, time=time, session=session, id=id, meta=meta, key=key)
        return self._call("POST", "records", {k: v for k, v in record.items() if v is not None})["ids"][0]

    def add_many(self, records: Iterable[Mapping[str, Any]]) -> list[str]:
        """Add records (mappings with :meth:`add`'s keys) in one transaction; returns their ids."""
        return self._call("POST", "records", {"records": [dict(r) for r in records]})["ids"]

    def retrieve(
        self,
        query: str,
        *,
        budget: Mapping[str, int] | None = None,
        policy: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """``{"id", "query", "policy", "results": [{"id", "text", "score"}], "trace", "wall_time_s"}``."""
        body = {"query": query, "budget": dict(budget) if budget else None, "policy": policy, "limit": limit}
        return self._call("POST", "retrieve", {k: v for k, v in body.items() if v is not None})

    def feedback(
        self,
        retrieval: Mapping[str, Any] | str,
        *,
        reward: float | None = None,
        helpful: Sequence[str] | None = None,
        labels: Sequence[Sequence[Any]] | None = None,
    ) -> dict[str, Any]:
        """Rate a retrieval (its response or its id) with a reward in [0, 1], the ids that helped, or labelled
        ``(source id, target id, helpful|harmful|neutral, confidence)`` transitions."""
        rid = retrieval if isinstance(retrieval, str) else retrieval["id"]
        helpful = None if helpful is None else list(helpful)
        labels = None if labels is None else [list(x) for x in labels]
        body = {"retrieval_id": rid, "reward": reward, "helpful": helpful, "labels": labels}
        return self._call("POST", "feedback", {k: v for k, v in body.items() if v is not None})

    def forget(self, ids: str | Sequence[str]) -> int:
        """Forget records (one request each); returns how many were forgotten."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        return sum(self._call("DELETE", f"records/{quote(i, safe='')}")["forgotten"] for i in ids)

    def revise(self, id: str, text: str, key: str | None = None) -> dict[str, Any]:  # noqa: A002
        """Replace one record's text (and key); returns the record as stored."""
        body = {"text": text} if key is None else {"text": text, "key": key}
        return self._call("PUT", f"records/{quote(id, safe='')}", body)

    def get(self, id: str) -> dict[str, Any]:  # noqa: A002
        """One record: id, text, key, time and metadata."""
        return self._call("GET", f"records/{quote(id, safe='')}")

    def stats(self) -> dict[str, Any]:
        """The memory's sizes and settings."""
        return self._call("GET", "")

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")

    # ------------------------------------------------------------------ HTTP
    def _call(self, method: str, route: str, body: Any = None) -> Any:
        path = f"/v1/memories/{quote(self.memory_name, safe='')}" + (f"/{route}" if route else "")
        return self.request(method, path, body)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One request to ``path`` with a JSON ``body``; the JSON answer, or :class:`MemoryServerError`."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        while True:
            reused = self._conn is not None
            conn = self._connection()
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                data = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if not reused:  # a kept-alive connection the server closed while idle is opened anew, once
                    raise
            except BaseException:
                self.close()  # a connection left half-way is of no further use
                raise
        answer = json.loads(data) if data else None
        if response.status >= 400:
            message = answer.get("error") if isinstance(answer, dict) else data.decode(errors="replace")
            raise MemoryServerError(response.status, str(message))
        return answer

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            kind = http.client.HTTPSConnection if self._url.scheme == "https" else http.client.HTTPConnection
            self._conn = kind(self._url.hostname, self._url.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
