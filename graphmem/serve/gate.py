"""What every request passes before a route sees it: the bearer token, the memory name, the body's size.

:class:`Gate` is an ASGI middleware around the whole app, so that no route can forget a check and a request it
refuses is answered before its body is read or its memory opened:

1. ``Authorization: Bearer <token>`` must carry the server's token (compared in constant time), on every route;
   else ``401``. A server started with ``auth=none`` (only on 127.0.0.1) has no token and skips this.
2. The memory name, the path segment after ``/v1/memories/`` as the client sent it (percent-decoded, so that
   ``..%2Fother`` is seen as ``../other``), must be a safe file name (:func:`graphmem.store.paths.check_name`);
   else ``400``.
3. The body may hold at most ``max_body_bytes`` bytes (by ``Content-Length`` when sent, else as it arrives);
   else ``413``.

Every refusal, here and in the routes (:func:`error_response`), is ``{"error": "<one line>"}``.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable
from urllib.parse import unquote

from starlette.responses import JSONResponse

from graphmem.store.paths import PathNameError, check_name

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

PREFIX = ("", "v1", "memories")


def one_line(text: str) -> str:
    """``text`` with its lines joined by spaces (an error message is one line)."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": one_line(message) or f"HTTP {status}"}, status_code=status, headers=headers)


class Gate:
    """ASGI middleware: token, memory name and body size of every HTTP request (module docstring).

    Args:
        app: the application behind the gate.
        token: the bearer token every request must carry; ``None``: no authentication (``auth=none``).
        max_body_bytes: the largest request body taken.
    """

    def __init__(self, app: Callable, token: str | None, max_body_bytes: int) -> None:
        self.app, self.token, self.max_body_bytes = app, token, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self._authorization(scope) or self._name(scope) or self._declared_size(scope)
        if refused is not None:
            await refused(scope, receive, send)
            return
        body = await self._body(receive)
        if body is None:
            await self._too_large()(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _authorization(self, scope: Scope) -> JSONResponse | None:
        if self.token is None:
            return None
        given = _header(scope, b"authorization")
        challenge = {"WWW-Authenticate": "Bearer"}
        if given is None:
            return error_response(401, "missing bearer token: send 'Authorization: Bearer <token>'", challenge)
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.token.encode()):
            return error_response(401, "invalid bearer token", challenge)
        return None

    @staticmethod
    def _name(scope: Scope) -> JSONResponse | None:
        raw = scope.get("raw_path") or scope["path"].encode()
        parts = raw.decode("latin-1").split("/")
        if tuple(parts[:3]) != PREFIX or len(parts) < 4:
            return None
        try:
            check_name("name", unquote(parts[3]))
        except PathNameError as err:
            return error_response(400, f"memory {err}")
        return None

    def _declared_size(self, scope: Scope) -> JSONResponse | None:
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            return self._too_large()
        return None

    def _too_large(self) -> JSONResponse:
        return error_response(413, f"request body over max_body_bytes ({self.max_body_bytes:,} bytes)")

    async def _body(self, receive: Receive) -> bytes | None:
        """The whole body, or ``None`` as soon as it passes ``max_body_bytes``."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)  # the client left: the app sees an empty body and its disconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body read already, then waits on the client as before."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
