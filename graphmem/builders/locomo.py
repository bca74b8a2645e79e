"""Build the memory graph of one conversation (LoCoMo, REALTALK): one node per dialogue turn.

Node ``dia_id``: text ``"<speaker>: <text>"`` plus ``" [image: <caption>]"`` when the turn shares
an image (REALTALK's speaker is a chat handle: it heads the text as LoCoMo's speaker does, and entities come
from the turn's own words only, so a handle is never matched as a name); timestamp = the turn's own
time when it has one (REALTALK), else its session's datetime + its 0-based position in seconds (read
as UTC), NaN when neither is known. Edges (both directions, no self loops):

* temporal: consecutive turns of a session, plus each turn to its ``temporal_cap`` nearest turns
  within ``temporal_window_s`` seconds;
* semantic: each turn to its ``semantic_k`` most similar turns with cosine ``>= semantic_threshold``;
* entity: turns sharing an extracted entity (:func:`graphmem.builders.edges.entity_pairs`);
* causal: question -> answer and causal-connective cues between consecutive turns.

With ``GraphConfig.incremental`` the graph is the one a live memory grows turn by turn
(:mod:`graphmem.builders.incremental`): neighbours among earlier turns, entities in arrival order,
and the turn's words with its image caption as the memory receives them (``turn_body``).
"""

from __future__ import annotations

import math
from datetime import timezone
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from graphmem.builders import edges as E
from graphmem.builders.entities import EntityExtractor, extract_in_order
from graphmem.builders.incremental import Record
from graphmem.core.graph import MemoryGraph, default_key
from graphmem.datasets.types import Conversation, Session, Turn

if TYPE_CHECKING:
    from graphmem.builders.config import GraphConfig


def turn_body(turn: Turn) -> str:
    """The turn's words plus ``" [image: <caption>]"`` when it shares an image: what a live memory is given."""
    return turn.text + f" [image: {turn.image_caption}]" if turn.image_caption else turn.text


def turn_text(turn: Turn) -> str:
    """``"<speaker>: <text>"`` plus ``" [image: <caption>]"`` when the turn has an image caption."""
    return f"{turn.speaker}: {turn_body(turn)}"


def node_texts(conv: Conversation) -> list[str]:
    """Node texts in node order (what the encoder embeds)."""
    return [turn_text(t) for t in conv.turns]


def _utc(date) -> float:
    return date.replace(tzinfo=timezone.utc).timestamp()


def _turn_time(turn: Turn, session: Session) -> tuple[float | None, str | None]:
    """A turn's time and its date as written: its own (REALTALK), else its session's datetime + its position in
    seconds; ``None`` when neither is known."""
    if turn.date_time is not None:
        return _utc(turn.date_time), turn.raw_date_time
    return (None if session.date_time is None else _utc(session.date_time) + turn.position), session.raw_date_time


def turn_records(conv: Conversation) -> list[Record]:
    """The conversation's turns as a live memory receives them, in order: id = dia_id, the turn's words
    (:func:`turn_body`), speaker, time (the turn's own, else the session's datetime + position seconds; ``None``
    when unknown), the session index, and the dia_id and raw date as metadata."""
    out = []
    for s in conv.sessions:
        for t in s.turns:
            time, raw = _turn_time(t, s)
            out.append(Record(t.dia_id, turn_body(t), t.speaker, time, s.index, {"dia_id": t.dia_id, "date_time": raw}))
    return out


def build_locomo_graph(
    conv: Conversation, embeddings: Tensor, cfg: GraphConfig, extractor: EntityExtractor, dataset: str = "locomo"
) -> MemoryGraph:
    """The graph of ``conv`` from precomputed ``[turns, D]`` unit embeddings (module docstring); ``dataset`` is
    its ``info["dataset"]``."""
    turns, texts = conv.turns, node_texts(conv)
    timestamps, metadata = [], []
    for s in conv.sessions:
        for t in s.turns:
            time, raw = _turn_time(t, s)
            timestamps.append(math.nan if time is None else time)
            metadata.append(
                {"speaker": t.speaker, "session": s.index, "dia_id": t.dia_id, "position": t.position, "date_time": raw}
            )
    info = {
        "dataset": dataset,
        "sample_id": conv.sample_id,
        "speakers": [conv.speaker_a, conv.speaker_b],
        "features": cfg.features,
    }
    graph = MemoryGraph.empty(embeddings.shape[1], info=info)
    graph.add_nodes(
        [t.dia_id for t in turns],
        texts,
        embeddings,
        keys=[f"{t.speaker}: {default_key(turn_body(t) if cfg.incremental else t.text, 10)}" for t in turns],
        timestamps=timestamps,
        metadata=metadata,
    )

    group, order = E.sequence_positions(graph)
    if cfg.incremental:  # what a live memory reads of a turn, one turn at a time (graphmem.builders.incremental)
        cues = [turn_body(t) for t in turns]
        entities = extract_in_order(extractor, cues)
    else:
        cues = [t.text for t in turns]
        entities = extractor.extract([t.text + (f" {t.image_caption}" if t.image_caption else "") for t in turns])
    causal = E.causal_pairs(
        cues,
        [t.speaker for t in turns],
        group,
        order,
        cfg.causal_qa_confidence,
        cfg.causal_connective_confidence,
    )
    seq_a, seq_b = E.sequence_pairs(group, order)
    win_a, win_b = E.time_window_pairs(
        graph.timestamps, cfg.temporal_window_s, cfg.temporal_cap, (seq_a, seq_b), earlier_only=cfg.incremental
    )
    pairs = {
        "temporal": (torch.cat([seq_a, win_a]), torch.cat([seq_b, win_b])),
        "semantic": E.semantic_knn_pairs(
            graph.embeddings, cfg.semantic_k, cfg.semantic_threshold, earlier_only=cfg.incremental
        ),
        "causal": causal[:2],
        "entity": E.entity_pairs(entities, cfg.entity_fanout, cfg.entity_max_share, at_arrival=cfg.incremental),
    }
    E.add_relation_edges(graph, pairs, cfg.features, E.Phase1Inputs(group, order, entities, causal, cfg.temporal_tau))
    return graph
