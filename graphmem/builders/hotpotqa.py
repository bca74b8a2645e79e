"""Build the memory graph of one HotpotQA record: sentence nodes and paragraph-title nodes.

Nodes: ``"<title>::<i>"`` for sentence ``i`` (text ``"<title>: <sentence>"``) and
``"<title>::title"`` (text = the title, metadata ``kind="title"``). No timestamps. Edges (both
directions, no self loops):

* temporal: consecutive sentences of a paragraph and title -> first sentence;
* entity: a sentence mentioning another paragraph's title (case-insensitive, whole words; a
  trailing parenthetical such as ``" (film)"`` is optional) links to that title node and to the
  paragraph's first ``entity_fanout`` sentences (the bridge of multi-hop questions), plus shared
  extracted entities as in :func:`graphmem.builders.edges.entity_pairs`;
* causal: causal-connective cues between consecutive sentences;
* semantic: each node to its ``semantic_k`` most similar nodes with cosine ``>= semantic_threshold``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from torch import Tensor

from graphmem.builders import edges as E
from graphmem.builders.config import require_batch_rules
from graphmem.builders.entities import EntityExtractor
from graphmem.builders.passages import strip_parenthetical
from graphmem.core.graph import MemoryGraph, default_key
from graphmem.datasets.hotpotqa import sentence_id, title_id
from graphmem.datasets.types import HotpotRecord

if TYPE_CHECKING:
    from graphmem.builders.config import GraphConfig


def _nodes(record: HotpotRecord) -> list[tuple[str, str, dict]]:
    out = []
    for p, par in enumerate(record.paragraphs):
        out.append((title_id(par.title), par.title, {"kind": "title", "title": par.title, "paragraph": p}))
        for i, sent in enumerate(par.sentences):
            out.append(
                (
                    sentence_id(par.title, i),
                    f"{par.title}: {sent.strip()}",
                    {"kind": "sentence", "title": par.title, "paragraph": p, "sent_idx": i},
                )
            )
    return out


def node_texts(record: HotpotRecord) -> list[str]:
    """Node texts in node order (what the encoder embeds)."""
    return [text for _, text, _ in _nodes(record)]


def title_pattern(title: str) -> re.Pattern:
    """Whole-word, case-insensitive match of ``title`` with an optional trailing parenthetical."""
    return re.compile(rf"(?<!\w){re.escape(strip_parenthetical(title))}(?!\w)", re.IGNORECASE)


def build_hotpot_graph(
    record: HotpotRecord, embeddings: Tensor, cfg: GraphConfig, extractor: EntityExtractor
) -> MemoryGraph:
    """The graph of ``record`` from precomputed unit embeddings in :func:`node_texts` order."""
    require_batch_rules(cfg, "HotpotQA paragraph graphs")
    nodes = _nodes(record)
    info = {"dataset": "hotpotqa", "qid": record.qid, "features": cfg.features}
    graph = MemoryGraph.empty(embeddings.shape[1], info=info)
    keys = [
        m["title"]
        if m["kind"] == "title"
        else f"{m['title']}: {default_key(record.paragraphs[m['paragraph']].sentences[m['sent_idx']], 10)}"
        for _, _, m in nodes
    ]
    graph.add_nodes(
        [n for n, _, _ in nodes], [t for _, t, _ in nodes], embeddings, keys=keys, metadata=[m for _, _, m in nodes]
    )

    # title node has order -1 so title -> first sentence is a consecutive pair of the paragraph group
    group, order = E.sequence_positions(graph)
    sentences = [
        record.paragraphs[m["paragraph"]].sentences[m["sent_idx"]] if m["kind"] == "sentence" else ""
        for _, _, m in nodes
    ]
    entities = extractor.extract(sentences)
    bridge_a: list[int] = []
    bridge_b: list[int] = []
    rows_of: dict[int, list[int]] = {}
    for row, (_, _, m) in enumerate(nodes):
        rows_of.setdefault(m["paragraph"], []).append(row)
    for p, par in enumerate(record.paragraphs):
        pattern, target_rows = title_pattern(par.title), rows_of[p]
        entities[target_rows[0]].add(par.title.lower())
        for row, (_, _, m) in enumerate(nodes):
            if m["kind"] == "sentence" and m["paragraph"] != p and pattern.search(sentences[row]):
                entities[row].add(par.title.lower())
                for t in target_rows[: 1 + cfg.entity_fanout]:
                    bridge_a.append(row)
                    bridge_b.append(t)
    E.add_document_edges(graph, sentences, group, order, entities, (bridge_a, bridge_b), cfg)
    return graph
