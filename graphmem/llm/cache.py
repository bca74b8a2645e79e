"""On-disk cache of LLM responses: one JSON file per request, written atomically.

A run that is killed and restarted must not pay again for calls that already finished, so every
successful response is stored under ``sha256(model, messages, params)``. The key covers only what
determines the answer (model name, messages, sampling parameters); it never includes an API key or
API base, and the stored entry holds the reply and its usage only, not the request.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from graphmem.store.io import atomic_write

CACHE_FORMAT = 1


def cache_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    """SHA-256 hex digest of the canonical JSON of ``(model, messages, params)``."""
    payload = json.dumps(
        {"format": CACHE_FORMAT, "model": model, "messages": messages, "params": params},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class ResponseCache:
    """A directory of ``<key[:2]>/<key>.json`` entries.

    Args:
        root: cache directory, created on first write.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry, or ``None`` when absent or unreadable (a torn file is treated as a miss)."""
        p = self.path(key)
        try:
            entry = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if (
            not isinstance(entry, dict)
            or entry.get("format") != CACHE_FORMAT
            or not isinstance(entry.get("content"), str)
        ):
            return None
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> Path:
        """Write ``entry`` (JSON-serialisable) atomically under ``key``."""
        record = {"format": CACHE_FORMAT, **entry}
        text = json.dumps(record, ensure_ascii=False, sort_keys=True)
        return atomic_write(self.path(key), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.exists() else 0
