"""Build the memory graph of one LoCoMo conversation: one node per dialogue turn.

Node ``dia_id``: text ``"<speaker>: <text>"`` plus ``" [image: <caption>]"`` when the turn shares
an image; timestamp = session datetime (read as UTC) + the turn's 0-based position in seconds,
NaN when the session date is unknown. Edges (both directions, no self loops):

* temporal: consecutive turns of a session, plus each turn to its ``temporal_cap`` nearest turns
  within ``temporal_window_s`` seconds;
* semantic: each turn to its ``semantic_k`` most similar turns with cosine ``>= semantic_threshold``;
* entity: turns sharing an extracted entity (:func:`graphmem.builders.edges.entity_pairs`);
* causal: question -> answer and causal-connective cues between consecutive turns.
"""

from __future__ import annotations

import math
from datetime import timezone
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from graphmem.builders import edges as E
from graphmem.builders.entities import EntityExtractor
from graphmem.core.graph import MemoryGraph, default_key
from graphmem.datasets.types import Conversation, Turn

if TYPE_CHECKING:
    from graphmem.builders.config import GraphConfig


def turn_text(turn: Turn) -> str:
    """``"<speaker>: <text>"`` plus ``" [image: <caption>]"`` when the turn has an image caption."""
    text = f"{turn.speaker}: {turn.text}"
    return text + f" [image: {turn.image_caption}]" if turn.image_caption else text


def node_texts(conv: Conversation) -> list[str]:
    """Node texts in node order (what the encoder embeds)."""
    return [turn_text(t) for t in conv.turns]


def build_locomo_graph(
    conv: Conversation, embeddings: Tensor, cfg: GraphConfig, extractor: EntityExtractor
) -> MemoryGraph:
    """The graph of ``conv`` from precomputed ``[turns, D]`` unit embeddings (module docstring)."""
    turns, texts = conv.turns, node_texts(conv)
    timestamps, metadata = [], []
    for s in conv.sessions:
        base = s.date_time.replace(tzinfo=timezone.utc).timestamp() if s.date_time else math.nan
        for t in s.turns:
            timestamps.append(base + t.position)
            metadata.append(
                {
                    "speaker": t.speaker,
                    "session": s.index,
                    "dia_id": t.dia_id,
                    "position": t.position,
                    "date_time": s.raw_date_time,
                }
            )
    info = {
        "dataset": "locomo",
        "sample_id": conv.sample_id,
        "speakers": [conv.speaker_a, conv.speaker_b],
        "features": cfg.features,
    }
    graph = MemoryGraph.empty(embeddings.shape[1], info=info)
    graph.add_nodes(
        [t.dia_id for t in turns],
        texts,
        embeddings,
        keys=[f"{t.speaker}: {default_key(t.text, 10)}" for t in turns],
        timestamps=timestamps,
        metadata=metadata,
    )

    group, order = E.sequence_positions(graph)
    raw = [t.text + (f" {t.image_caption}" if t.image_caption else "") for t in turns]
    entities = extractor.extract(raw)
    causal = E.causal_pairs(
        [t.text for t in turns],
        [t.speaker for t in turns],
        group,
        order,
        cfg.causal_qa_confidence,
        cfg.causal_connective_confidence,
    )
    seq_a, seq_b = E.sequence_pairs(group, order)
    win_a, win_b = E.time_window_pairs(graph.timestamps, cfg.temporal_window_s, cfg.temporal_cap, (seq_a, seq_b))
    pairs = {
        "temporal": (torch.cat([seq_a, win_a]), torch.cat([seq_b, win_b])),
        "semantic": E.semantic_knn_pairs(graph.embeddings, cfg.semantic_k, cfg.semantic_threshold),
        "causal": causal[:2],
        "entity": E.entity_pairs(entities, cfg.entity_fanout, cfg.entity_max_share),
    }
    E.add_relation_edges(graph, pairs, cfg.features, group, order, entities, causal, cfg.temporal_tau)
    return graph
