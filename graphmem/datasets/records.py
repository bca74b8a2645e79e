"""Reading a file of JSON records: a JSON list, or JSONL with one record a line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from graphmem.datasets.paths import read_text


def json_records(path: Path, error: type[Exception]) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` for each record of ``path``: ``where`` is ``"record <i>"`` (0-based list
    index) or ``"line <n>"`` (1-based; blank lines skipped). Invalid JSON raises ``error`` naming the
    file; bytes that are not UTF-8 raise :class:`graphmem.datasets.paths.DataEncodingError`."""
    text = read_text(path)
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as err:
            raise error(f"{path}: not valid JSON ({err})") from None
        for i, item in enumerate(items):
            yield f"record {i}", item
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield f"line {n}", json.loads(line)
        except json.JSONDecodeError as err:
            raise error(f"{path}: line {n}: not valid JSON ({err})") from None
