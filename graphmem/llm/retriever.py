"""GraphMemory's LLM Retriever (Appendix B.2) as an entry selector.

The retriever reads the *compact index* only: node ids and short keys, grouped into sections
(by a metadata field such as session or source title), never full node texts. It asks for a
structured JSON selection of at most two sections and at most six entry ids (or fewer under a
smaller ``budget.max_entries``). Unknown ids, duplicates and ids past the limit are discarded and
counted. There is no full-memory fallback: if nothing valid is selected the entry list is empty
and the traversal loads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import count_tokens
from graphmem.llm.call_schemas import entry_selection_schema
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.llm.extractors import make_client
from graphmem.llm.prompts import block, index_block, make_nonce, render
from graphmem.llm.schemas import EntrySelection
from graphmem.policies.selectors import register_entry_selector

SECTION_FIELDS = ("section", "session", "title", "source")
MAX_SECTIONS = 2
MAX_ENTRIES = 6


def section_of(metadata: dict[str, Any], fields: Sequence[str] = SECTION_FIELDS) -> str:
    """Section name of a node: ``"<field> <value>"`` of the first metadata field present, else ``"other"``."""
    for name in fields:
        value = metadata.get(name)
        if value is not None and str(value).strip():
            return str(value) if name in ("section", "title") else f"{name} {value}"
    return "other"


def compact_index(graph: MemoryGraph, fields: Sequence[str] = SECTION_FIELDS) -> dict[str, list[tuple[str, str]]]:
    """``section -> [(node_id, key), ...]`` in node order; sections in order of first appearance."""
    sections: dict[str, list[tuple[str, str]]] = {}
    for nid, key, meta in zip(graph.node_ids, graph.keys, graph.metadata):
        sections.setdefault(section_of(meta, fields), []).append((nid, key))
    return sections


@dataclass
class SelectionStats:
    """Counts over all queries answered by one retriever."""

    queries: int = 0
    failed_calls: int = 0
    empty_selections: int = 0
    discarded_ids: int = 0
    discarded_sections: int = 0
    index_tokens: int = 0
    """tokens of the last rendered index prompt (the part of usage that grows with the graph, B.5)"""
    last_sections: list[list[str]] = field(default_factory=list)


@register_entry_selector("llm")
class LLMEntryRetriever:
    """Entry selection by an LLM reading the compact index (GraphMemory Algorithm 1, line 1).

    Args:
        client: the LLM client (default: built from ``config``).
        config: an :class:`LLMConfig`, a mapping or a YAML path (default: the local model).
        section_fields: metadata fields that name a node's index section, first present wins.
        max_sections: sections the reply may name (default: 2).
        max_tokens: completion limit per query (default: 128).
    """

    role = "retriever"

    def __init__(
        self,
        client: LLMClient | None = None,
        config: LLMConfig | dict | str | None = None,
        section_fields: Sequence[str] = SECTION_FIELDS,
        max_sections: int = MAX_SECTIONS,
        max_tokens: int = 128,
    ) -> None:
        self.client = make_client(client, config)
        self.section_fields = tuple(section_fields)
        self.max_sections = max_sections
        self.max_tokens = max_tokens
        self.stats = SelectionStats()

    def messages(self, graph: MemoryGraph, query_text: str, budget: Budget) -> list[dict[str, str]]:
        """The retriever prompt: delimited compact index and question."""
        sections = compact_index(graph, self.section_fields)
        flat = [f"{s}\x1f{n}\x1f{k}" for s, items in sections.items() for n, k in items]
        nonce = make_nonce([*flat, query_text])
        return render(
            self.role,
            nonce,
            index_block=index_block(sections, nonce),
            question_block=block("question", query_text, nonce),
            max_sections=self.max_sections,
            max_entries=min(MAX_ENTRIES, budget.max_entries),
        )

    def select(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[int]]:
        """At most ``min(6, budget.max_entries)`` distinct valid rows per query; ``[]`` when none is valid."""
        if graph.num_nodes == 0:
            self.stats.queries += len(queries)
            self.stats.empty_selections += len(queries)
            return [[] for _ in queries]
        batch = [self.messages(graph, q.text, budget) for q in queries]
        self.stats.index_tokens = count_tokens(batch[0][1]["content"]) if batch else 0
        sections = compact_index(graph, self.section_fields)
        limit = min(MAX_ENTRIES, budget.max_entries)
        spec = entry_selection_schema(list(sections), graph.node_ids, self.max_sections, limit)
        results = self.client.structured_many(
            self.role, batch, EntrySelection, [spec] * len(batch), max_tokens=self.max_tokens
        )
        out: list[list[int]] = []
        self.stats.last_sections = []
        for parsed in results:
            self.stats.queries += 1
            if parsed.value is None:
                self.stats.failed_calls += 1
                self.stats.empty_selections += 1
                self.stats.last_sections.append([])
                out.append([])
                continue
            chosen_sections = [s for s in dict.fromkeys(parsed.value.sections) if s in sections][: self.max_sections]
            self.stats.discarded_sections += len(parsed.value.sections) - len(chosen_sections)
            self.stats.last_sections.append(chosen_sections)
            rows = self._valid_rows(graph, parsed.value.entry_ids, limit)
            dropped = len(parsed.value.entry_ids) - len(rows)
            self.stats.discarded_ids += dropped
            self.client.count_discarded(self.role, dropped)
            self.stats.empty_selections += not rows
            out.append(rows)
        return out

    @staticmethod
    def _valid_rows(graph: MemoryGraph, ids: Sequence[str], limit: int) -> list[int]:
        rows: list[int] = []
        for raw in ids:
            nid = raw.strip().strip("[]").strip()
            if graph.has_node(nid):
                row = graph.index_of(nid)
                if row not in rows:
                    rows.append(row)
            if len(rows) == limit:
                break
        return rows
