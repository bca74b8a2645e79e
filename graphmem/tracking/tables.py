"""Per-question result tables, the rows W&B tables and the JSONL fallback receive."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

QUESTION_COLUMNS = (
    "qid",
    "graph",
    "category",
    "policy",
    "evidence_recall",
    "all_evidence_hit",
    "precision",
    "loaded_tokens",
    "hops",
    "loaded",
)


def question_table(policy: str, rows: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of one policy's per-question results.

    ``rows`` are the evaluation harness's per-question dicts (``qid``, ``graph``,
    ``category_name``, ``loaded``, ``metrics``); ``loaded`` is written as space-separated node ids
    in load order, ``hops`` is the walk's depth.
    """
    out = []
    for r in rows:
        m = r["metrics"]
        out.append(
            [
                r["qid"],
                r["graph"],
                r.get("category_name", r.get("category")),
                policy,
                m.get("evidence_recall"),
                m.get("all_evidence_hit"),
                m.get("precision"),
                m.get("loaded_tokens"),
                m.get("hops"),
                " ".join(r["loaded"]),
            ]
        )
    return list(QUESTION_COLUMNS), out
