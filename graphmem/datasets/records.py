"""Reading a file of JSON records: a JSON list, or JSONL with one record a line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

from graphmem.datasets.paths import read_text
from graphmem.datasets.types import LoadReport, Question

TOO_DEEP = "JSON nested deeper than Python's recursion limit (no record of a dataset nests so deep): refused"


def read_json(path: Path, error: type[Exception], top: tuple[type, str] | None = None) -> Any:
    """The JSON value of ``path``; invalid JSON, or JSON nested past the recursion limit, raises ``error`` naming
    the file, bytes that are not UTF-8 :class:`graphmem.datasets.paths.DataEncodingError`. ``top``: the type the
    value must have and how the error names it (``(list, "a list of records")``)."""
    value = _json(read_text(path), f"{path}", error)
    if top is not None and not isinstance(value, top[0]):
        raise error(f"{path}: top level must be {top[1]}, got {type(value).__name__}")
    return value


def json_records(path: Path, error: type[Exception]) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` for each record of ``path``: ``where`` is ``"record <i>"`` (0-based list
    index) or ``"line <n>"`` (1-based; blank lines skipped). Invalid JSON, or JSON nested past the recursion
    limit, raises ``error`` naming the file (and line); bytes that are not UTF-8 raise
    :class:`graphmem.datasets.paths.DataEncodingError`."""
    text = read_text(path)
    if text.lstrip().startswith("["):
        for i, item in enumerate(_json(text, f"{path}", error)):
            yield f"record {i}", item
        return
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield f"line {n}", _json(line, f"{path}: line {n}", error)


def _json(text: str, where: str, error: type[Exception]) -> Any:
    """``text`` parsed as JSON; ``error`` naming ``where`` when it is not JSON or nests too deep."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{where}: not valid JSON ({err})") from None
    except RecursionError:
        raise error(f"{where}: {TOO_DEEP}") from None


def keyed_records(
    path: Path, error: type[Exception], key: str, integer_ids: bool = False
) -> Iterator[tuple[str, dict, str]]:
    """``(where, record, id)`` for each record of ``path`` (:func:`json_records`): every record must
    be an object whose field ``key`` is a non-empty string (or, with ``integer_ids``, an integer,
    read as its string) that no earlier record has; ``where`` names the file, the record and the id.
    A record that breaks this raises ``error``."""
    seen: set[str] = set()
    kind = "a non-empty string or an integer" if integer_ids else "a non-empty string"
    for where, raw in json_records(path, error):
        where = f"{path}: {where}"
        if not isinstance(raw, dict):
            raise error(f"{where}: must be an object, got {type(raw).__name__}")
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, (str, int) if integer_ids else str) or value == "":
            raise error(f"{where}: field {key!r} missing or not {kind}")
        qid = str(value)
        where = f"{where} ({key} {qid!r})"
        if qid in seen:
            raise error(f"{where}: field {key!r} repeats an earlier record")
        seen.add(qid)
        yield where, raw, qid


def one_question_records(
    path: str | Path,
    error: type[Exception],
    key: str,
    read: Callable[[dict, str, str, LoadReport], tuple[Any, Question]],
    integer_ids: bool = False,
) -> tuple[list, list[Question], LoadReport]:
    """The records and questions of a file with one question a record (HotpotQA, MuSiQue, 2Wiki) and its report:
    ``read(raw, id, where, report)`` makes each record of :func:`keyed_records` and its question."""
    path = Path(path)
    report = LoadReport(source=str(path))
    records, questions = [], []
    for where, raw, qid in keyed_records(path, error, key, integer_ids):
        record, question = read(raw, qid, where, report)
        records.append(record)
        questions.append(question)
    report.records, report.questions = len(records), len(questions)
    return records, questions, report
