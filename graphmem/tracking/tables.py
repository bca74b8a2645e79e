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
    "first_gold_rank",
    "loaded_tokens",
    "hops",
    "latency_s",
    "loaded",
    "gold_evidence",
)


def question_table(policy: str, rows: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of one policy's per-question results.

    ``rows`` are the evaluation harness's per-question dicts (``qid``, ``graph``,
    ``category_name``, ``loaded``, ``gold_evidence``, ``metrics``); node ids are written
    space-separated (``loaded`` in load order), ``hops`` is the walk's depth. Gold columns are
    reporting only: the table is written after every retrieval has returned.
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
                m.get("first_gold_rank"),
                m.get("loaded_tokens"),
                m.get("hops"),
                m.get("latency_s"),
                " ".join(r["loaded"]),
                " ".join(r.get("gold_evidence", ())),
            ]
        )
    return list(QUESTION_COLUMNS), out
