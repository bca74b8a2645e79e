"""A family of memory graphs where the relation of an edge, not cosine, decides which neighbour holds the evidence.

Each graph is one conversation: a chain of ``events`` nodes in time order (one session,
``position`` = order, timestamps ``600 s · i``, alternating speakers). Its edges, inserted in
both directions as the builders insert them:

* ``temporal``: ``i <-> i + 1`` (the chain);
* ``causal``, ``entity``, ``semantic``: three random perfect matchings of the nodes (each node has
  exactly one partner per relation; a causal pair's earlier node is the cause), drawn so that no
  node pair carries two relations.

Every node embedding is ``normalize(c + noise · ε_i / √D)`` around one centre ``c`` per graph, so
the cosine between any two nodes of a graph has one distribution whatever relation links them:
an anchor's neighbours cannot be told apart by cosine, to each other or to the query. Phase-1
features are those of the builders (:func:`graphmem.builders.edges.phase1_features`: temporal
proximity in the session, cosine, causal confidence 1 on causal pairs, entity Jaccard over one
shared hidden entity per entity pair): they name the relation but not the direction of an edge.

A question asks for one relation out of an anchor node ``a``. Its kind fixes relation and direction:

    next      temporal, the later neighbour      "What happened right after ...?"
    previous  temporal, the earlier neighbour    "What happened right before ...?"
    effect    causal, a is the cause             "What did ... lead to?"
    cause     causal, a is the effect            "What led to ...?"
    entity    entity                             "Who else was in it with the same person as ...?"
    semantic  semantic                           "What else was on the same theme as ...?"

The question's text is the kind's wording and the anchor's key; its embedding is

    q = normalize(x_a + s · u_k + n_q · ε / √D)

with ``u_k`` a unit intent direction per kind (one draw per family, shared by all its graphs), so
the query points at its anchor (what the entry selector finds) and carries its relation intent.
The gold node is the one neighbour the kind names; it is returned on the question only
(:class:`graphmem.datasets.types.Question.evidence`), never stored in the graph.

An *untyped* family (``typed=False``, ``link_strength > 0``) labels every edge ``semantic`` and
leaves the Phase-1 causal and entity scores at 0, as a builder without relation extraction would;
each linked pair instead shares a vector in its relation's block of coordinates, so the relation
of an edge is written only in the contents of its two nodes (and, for temporal edges, in their
order), while every neighbour still shares one such vector with the anchor: cosine still cannot
tell them apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphmem.builders.edges import Phase1Inputs, phase1_features
from graphmem.builders.synthetic import _texts
from graphmem.core.graph import RELATIONS, MemoryGraph
from graphmem.datasets.types import Question

KINDS: dict[str, tuple[str, int, str]] = {
    "next": ("temporal", 1, "What happened right after"),
    "previous": ("temporal", -1, "What happened right before"),
    "effect": ("causal", 1, "What did this lead to:"),
    "cause": ("causal", -1, "What led to this:"),
    "entity": ("entity", 0, "Who else was in it with the same person as"),
    "semantic": ("semantic", 0, "What else was on the same theme as"),
}
"""question kind -> (relation, direction of the gold from the anchor: +1 later, -1 earlier, 0 either, wording)"""

MATCHED = ("causal", "entity", "semantic")  # relations drawn as perfect matchings
STEP_S = 600.0
TEMPORAL_TAU = 2.0  # tau of the Phase-1 temporal proximity (the builders' default)
UNTYPED = "semantic"  # the one label of every edge of an untyped family (links by similarity)


@dataclass(frozen=True)
class RelationFamily:
    """A generated family: graphs by name, questions (gold on them only) and their ``[Q, D]`` query embeddings."""

    graphs: dict[str, MemoryGraph]
    questions: list[Question]
    query_embeddings: torch.Tensor
    intents: torch.Tensor
    """``[len(KINDS), D]`` the unit intent directions ``u_k`` (in :data:`KINDS` order)"""
    links: dict[str, dict[str, list[tuple[int, int]]]]
    """graph -> relation -> its node pairs ``(earlier row, later row)``: the true relation of every edge,
    also where the graph does not label it (``typed=False``)"""


def _matching(rng: np.random.Generator, n: int, used: set[tuple[int, int]], tries: int = 1000) -> list[tuple[int, int]]:
    """A random perfect matching of ``n`` (even) nodes as ``(lo, hi)`` pairs, none in ``used``."""
    for _ in range(tries):
        order = rng.permutation(n)
        pairs = [tuple(sorted((int(a), int(b)))) for a, b in zip(order[0::2], order[1::2])]
        if not used.intersection(pairs):
            return pairs
    raise ValueError(f"no matching of {n} nodes avoids the {len(used)} pairs already used; use more events")


def make_relation_graph(
    rng: np.random.Generator,
    gen: torch.Generator,
    name: str,
    events: int,
    dim: int,
    noise: float,
    typed: bool = True,
    link_strength: float = 0.0,
) -> tuple[MemoryGraph, dict[str, list[tuple[int, int]]]]:
    """One conversation of the family and its undirected pairs by relation (``(lo, hi)``, ``lo`` earlier);
    ``typed`` and ``link_strength`` as :func:`make_relation_family` takes them."""
    centre = torch.nn.functional.normalize(torch.randn(1, dim, generator=gen), dim=1)
    emb = centre + noise / dim**0.5 * torch.randn(events, dim, generator=gen)
    pairs: dict[str, list[tuple[int, int]]] = {"temporal": [(i, i + 1) for i in range(events - 1)]}
    used = set(pairs["temporal"])
    for relation in MATCHED:
        pairs[relation] = _matching(rng, events, used)
        used.update(pairs[relation])
    if link_strength > 0:  # each linked pair shares a vector in its relation's block of coordinates
        block = dim // len(RELATIONS)
        for r, relation in enumerate(RELATIONS):
            rows = torch.tensor(pairs[relation], dtype=torch.long)
            z = torch.nn.functional.normalize(torch.randn(len(rows), block, generator=gen), dim=1)
            shared = torch.zeros(len(rows), dim)
            shared[:, r * block : (r + 1) * block] = link_strength * z
            emb = emb.index_add(0, rows[:, 0], shared).index_add(0, rows[:, 1], shared)
    emb = torch.nn.functional.normalize(emb, dim=1)
    texts, keys = _texts(rng, np.zeros(events, dtype=np.int64), (8, 16), topic_vocab=40)
    width = len(str(events - 1))
    speakers = ("A", "B")
    graph = MemoryGraph.empty(dim, info={"name": name, "synthetic": "relation_family", "typed": typed})
    graph.add_nodes(
        [f"{name}:e{i:0{width}d}" for i in range(events)],
        texts,
        emb,
        keys=keys,
        timestamps=[i * STEP_S for i in range(events)],
        metadata=[{"session": 1, "position": i, "speaker": speakers[i % 2]} for i in range(events)],
    )
    order = list(range(events))
    group = [1] * events
    entities = [set() for _ in range(events)]
    for k, (a, b) in enumerate(pairs["entity"] if typed else []):
        entities[a].add(f"person{k}")
        entities[b].add(f"person{k}")
    causal_pairs = pairs["causal"] if typed else []
    causal_lo = torch.tensor([a for a, _ in causal_pairs], dtype=torch.long)
    causal_hi = torch.tensor([b for _, b in causal_pairs], dtype=torch.long)
    causal = (causal_lo, causal_hi, torch.ones(causal_lo.numel()))
    src, dst, rel = [], [], []
    for relation, rows in pairs.items():
        lo = torch.tensor([a for a, _ in rows], dtype=torch.long)
        hi = torch.tensor([b for _, b in rows], dtype=torch.long)
        src += [lo, hi]
        dst += [hi, lo]
        label = relation if typed else UNTYPED
        rel.append(torch.full((2 * len(rows),), graph.relations.index(label), dtype=torch.long))
    src, dst, rel = torch.cat(src), torch.cat(dst), torch.cat(rel)
    feats = phase1_features(graph, src, dst, Phase1Inputs(group, order, entities, causal, TEMPORAL_TAU))
    graph.add_edges(src, dst, rel, features=feats)
    return graph.validate(), pairs


def gold_of(pairs: dict[str, list[tuple[int, int]]], anchor: int, kind: str) -> int | None:
    """The row the question ``kind`` about ``anchor`` asks for (``None`` when the anchor has none)."""
    relation, direction, _ = KINDS[kind]
    for lo, hi in pairs[relation]:
        if anchor not in (lo, hi):
            continue
        other = hi if anchor == lo else lo
        if direction == 0 or (other > anchor) == (direction > 0):
            return other
    return None


def make_relation_family(
    num_graphs: int = 40,
    events: int = 24,
    questions_per_graph: int = 24,
    dim: int = 32,
    seed: int = 0,
    noise: float = 1.0,
    intent_strength: float = 0.5,
    query_noise: float = 0.3,
    prefix: str = "rel",
    typed: bool = True,
    link_strength: float = 0.0,
) -> RelationFamily:
    """``num_graphs`` conversations and their questions (module docstring), every draw from ``seed``.

    Args:
        num_graphs: conversations in the family (default: ``40``).
        events: nodes per conversation, even (default: ``24``).
        questions_per_graph: questions drawn without replacement per conversation from every
            (anchor, kind) with a gold node (default: ``24``).
        dim: embedding dimension ``D`` (default: ``32``).
        seed: seed of every draw (default: ``0``).
        noise: spread ``noise`` of the node embeddings around their conversation's centre (default: ``1.0``).
        intent_strength: weight ``s`` of the intent direction in the query embedding (default: ``0.5``).
        query_noise: ``n_q``, the query embedding's own noise (default: ``0.3``).
        prefix: graph names are ``<prefix><seed>-<number>`` (default: ``"rel"``).
        typed: label each edge with its relation (default: ``True``); ``False``: every edge is ``semantic``
            and the Phase-1 causal and entity scores are 0, so only the edge's content tells its relation.
        link_strength: weight ``w`` of a vector ``z_ij`` shared by the two nodes of each linked pair, drawn
            in the relation's own block of ``D / 4`` coordinates: ``x_i = normalize(c + noise · ε_i / √D +
            w Σ_j z_ij)``; every neighbour shares one such vector with the anchor, so cosine still
            cannot tell them apart, but the pair's embeddings jointly say its relation (default: ``0.0``).
    """
    if num_graphs < 1 or questions_per_graph < 1:
        raise ValueError(f"num_graphs and questions_per_graph must be >= 1, got {num_graphs}, {questions_per_graph}")
    if events < 8 or events % 2:
        raise ValueError(f"events must be an even number >= 8 (each node has one partner per relation), got {events}")
    if link_strength < 0 or (link_strength > 0 and dim % len(RELATIONS)):
        raise ValueError(f"link_strength must be >= 0, and > 0 only with dim a multiple of {len(RELATIONS)}")
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    kinds = list(KINDS)
    intents = torch.nn.functional.normalize(torch.randn(len(kinds), dim, generator=gen), dim=1)
    graphs: dict[str, MemoryGraph] = {}
    links: dict[str, dict[str, list[tuple[int, int]]]] = {}
    questions: list[Question] = []
    rows: list[torch.Tensor] = []
    width = len(str(num_graphs - 1))
    for g in range(num_graphs):
        name = f"{prefix}{seed}-{g:0{width}d}"
        graph, pairs = make_relation_graph(rng, gen, name, events, dim, noise, typed, link_strength)
        graphs[name], links[name] = graph, pairs
        asks = [(a, k) for a in range(events) for k in range(len(kinds)) if gold_of(pairs, a, kinds[k]) is not None]
        picked = sorted(rng.choice(len(asks), size=min(questions_per_graph, len(asks)), replace=False).tolist())
        for j in picked:
            anchor, k = asks[j]
            gold = gold_of(pairs, anchor, kinds[k])
            q = graph.embeddings[anchor] + intent_strength * intents[k]
            q = q + query_noise / dim**0.5 * torch.randn(dim, generator=gen)
            rows.append(torch.nn.functional.normalize(q, dim=0))
            questions.append(
                Question(
                    qid=f"{name}#{len(questions)}",
                    graph=name,
                    text=f"{KINDS[kinds[k]][2]} {graph.keys[anchor]}?",
                    answer=graph.texts[gold],
                    evidence=(graph.node_ids[gold],),
                    category=kinds[k],
                )
            )
    return RelationFamily(graphs, questions, torch.stack(rows), intents, links)
