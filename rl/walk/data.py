"""Training and validation data of the walk: the graphs' union as :class:`~graphmem.policies.walk.WalkTables` and,
per question, its query embedding, entry rows and gold rows (rows of the union).

Entries come from the entry selector the policy uses at question time, each question's from its
own graph; gold rows are the question's resolvable evidence (used by rewards and positives only).
With ``reward="answer"`` or ``"judge"`` the evidence is never read: the gold rows are empty and
the answer's tokens (:class:`rl.walk.rewards.AnswerTargets`) are kept instead. Questions without
entries, or without a gold node (evidence) or an answer token (answer, judge), are dropped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
from torch import Tensor

from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.core.graph_batch import GraphBatch
from graphmem.datasets.types import Question
from graphmem.index.lexical_features import Lexical, lexical_inputs
from graphmem.policies.selectors import make_entry_selector
from graphmem.policies.walk import WalkTables, graph_walk_tables
from models.edge_encoder import PerEdgeResidual
from rl.walk.rewards import REWARDS, AnswerTargets, answer_targets, answer_tokens


@dataclass
class WalkData:
    """Questions over a union of graphs, as tensors (``-1`` padded rows of the union).

    Attributes:
        tables: the union's :class:`WalkTables`.
        names: the graphs of the union, in order.
        node_ptr: ``[C + 1]`` the union rows of graph ``c`` are ``node_ptr[c]:node_ptr[c+1]``.
        q: ``[Q, D]`` query embeddings.
        entries: ``[Q, E]`` entry rows.
        gold: ``[Q, G]`` gold rows.
        qids: question ids, aligned with the rows.
        dropped: questions left out (no gold node in their graph, or no entries).
        lexical: the questions' lexical inputs over the union (rows aligned), from their texts only.
        answers: the answer tokens each node holds (``reward`` answer or judge), else ``None``.
        kept: the index of each row's question in the questions given.
    """

    tables: WalkTables
    names: list[str]
    node_ptr: Tensor
    q: Tensor
    entries: Tensor
    gold: Tensor
    qids: list[str]
    dropped: int = 0
    lexical: Lexical | None = None
    answers: AnswerTargets | None = None
    kept: list[int] | None = None

    def __len__(self) -> int:
        return len(self.qids)

    def to(self, device: str | torch.device) -> WalkData:
        tables = self.tables.to(device)
        moved = (x.to(device) for x in (self.q, self.entries, self.gold))
        lexical = None if self.lexical is None else self.lexical.to(device)
        answers = None if self.answers is None else self.answers.to(device)
        return WalkData(tables, self.names, self.node_ptr, *moved, self.qids, self.dropped, lexical, answers, self.kept)

    def local_rows(self, rows: Tensor, graph: int) -> list[int]:
        """Union rows of graph number ``graph`` as that graph's own rows (``-1`` padding dropped)."""
        off = int(self.node_ptr[graph])
        return [int(v) - off for v in rows.tolist() if v >= 0]


def padded(rows: Sequence[Sequence[int]]) -> Tensor:
    """``[len(rows), longest]`` long, ``-1`` padded."""
    width = max([len(r) for r in rows] + [1])
    return torch.tensor([list(r) + [-1] * (width - len(r)) for r in rows], dtype=torch.long).view(len(rows), width)


def walk_data(
    graphs: Mapping[str, MemoryGraph],
    questions: Sequence[Question],
    embeddings: Tensor,
    budget: Budget,
    entry_selector="embedding",
    residual: PerEdgeResidual | None = None,
    reward: str = "evidence",
) -> WalkData:
    """:class:`WalkData` of ``questions`` (embeddings ``[Q, D]`` aligned) over the graphs they are asked on.

    ``residual`` (HAGE's per-edge table) gives the union's edges their rows in that table; ``reward``
    (:data:`rl.walk.rewards.REWARDS`) decides whether the evidence or the answer is read (module docstring).
    """
    if reward not in REWARDS:
        raise ValueError(f"walk_data: reward must be one of {REWARDS}, got {reward!r}")
    labels = reward == "evidence"
    selector = make_entry_selector(entry_selector)
    names = sorted({q.graph for q in questions})
    members = [graphs[n] for n in names]
    node_ptr = torch.tensor([0] + [g.num_nodes for g in members], device=torch.device("cpu")).cumsum(0)
    by_graph: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        by_graph.setdefault(q.graph, []).append(i)
    keep, entries, gold, dropped, texts, graph_of = [], [], [], 0, [], []
    for c, name in enumerate(names):
        graph, off = graphs[name], int(node_ptr[c])
        idx = by_graph[name]
        queries = [Query(questions[i].qid, questions[i].text, embeddings[i]) for i in idx]
        texts.append([])
        for i, picked in zip(idx, selector.select(graph, queries, budget)):
            if labels:
                rows = [graph.index_of(e) for e in dict.fromkeys(questions[i].evidence) if graph.has_node(e)]
            else:
                rows = []
            if not picked or not (rows if labels else answer_tokens(questions[i].answer)):
                dropped += 1
                continue
            keep.append(i)
            graph_of.append(c)
            texts[-1].append(questions[i].text)
            entries.append([v + off for v in list(picked)[: budget.max_entries]])
            gold.append([v + off for v in rows])
    q = embeddings[torch.tensor(keep, dtype=torch.long)].float() if keep else embeddings[:0].float()
    qids = [questions[i].qid for i in keep]
    answers = None if labels else answer_targets(members, node_ptr, [questions[i] for i in keep], graph_of)
    edge_rows = None if residual is None else residual.edge_rows(names, [g.num_edges for g in members])
    lexical = lexical_inputs(members, texts)
    tables = graph_walk_tables(GraphBatch.from_graphs(members).graph, edge_rows)
    return WalkData(tables, names, node_ptr, q, padded(entries), padded(gold), qids, dropped, lexical, answers, keep)
