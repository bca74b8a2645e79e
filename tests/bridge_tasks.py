"""Bridge-crossing tasks for the learned router's tests (shared by test_rl.py and its subprocess runs).

Each graph holds one question. From the entry ``e`` (cosine .95 to the query) semantic edges lead
to distractors with high cosine, and one causal edge leads to a bridge ``b`` with cosine -0.5.
The gold node ``g`` (cosine .2) is reachable only from ``b`` (temporal edge); ``b`` also has entity
edges to decoys with higher cosine than ``g``. Fillers with cosine .4-.6 crowd ``g`` out of any
cosine top-k. A cosine-greedy walk therefore never reaches ``g``; a policy that learns
"causal, then temporal" always does.
"""

from __future__ import annotations

import math

import torch

from graphmem.datasets.types import Question
from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget

BRIDGE_BUDGET = Budget(max_entries=1, top_k_neighbors=1, max_hops=2, max_nodes=3, max_tokens=2500)


def _near(q: torch.Tensor, cos: float, gen: torch.Generator) -> torch.Tensor:
    r = torch.randn(q.numel(), generator=gen)
    r = torch.nn.functional.normalize(r - (r @ q) * q, dim=0)
    return cos * q + math.sqrt(1 - cos * cos) * r


def bridge_task(
    seed: int, dim: int = 16, distractors: int = 4, fillers: int = 12
) -> tuple[MemoryGraph, Question, torch.Tensor]:
    """One bridge graph, its question and the query embedding."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(dim, generator=gen), dim=0)
    cos = [0.95] + [0.7 + 0.15 * k / distractors for k in range(distractors)] + [-0.5, 0.2, 0.35, 0.3]
    cos += [0.4 + 0.2 * k / fillers for k in range(fillers)]
    names = ["entry"] + [f"dist{k}" for k in range(distractors)] + ["bridge", "gold", "decoy0", "decoy1"]
    names += [f"fill{k}" for k in range(fillers)]
    shuffle = torch.randperm(len(names), generator=gen).tolist()  # node ids carry no position hint
    ids = [f"s{seed}-n{shuffle[i]:02d}" for i in range(len(names))]
    row = dict(zip(names, range(len(names))))
    graph = MemoryGraph.empty(dim, info={"name": f"bridge{seed}"})
    graph.add_nodes(ids, [f"memory {i}" for i in ids], torch.stack([_near(q, c, gen) for c in cos]))
    d = [row[f"dist{k}"] for k in range(distractors)]
    f = [row[f"fill{k}"] for k in range(fillers)]
    graph.add_edges([row["entry"]] * distractors, d, "semantic")
    graph.add_edges([row["entry"]], [row["bridge"]], "causal")
    graph.add_edges(d, f[:distractors], "semantic")
    graph.add_edges(d, f[distractors : 2 * distractors], "entity")
    graph.add_edges([row["bridge"]], [row["gold"]], "temporal")
    graph.add_edges([row["bridge"]] * 2, [row["decoy0"], row["decoy1"]], "entity")
    graph.add_edges([row["decoy0"], row["decoy1"]], f[-2:], "semantic")
    question = Question(
        qid=f"bridge{seed}#0",
        graph=f"bridge{seed}",
        text=f"question {seed}",
        answer=None,
        evidence=(ids[row["gold"]],),
        category=1,
    )
    return graph.validate(), question, q


def bridge_tasks(seeds) -> tuple[dict[str, MemoryGraph], list[Question], torch.Tensor]:
    graphs, questions, emb = {}, [], []
    for s in seeds:
        g, qu, q = bridge_task(s)
        graphs[qu.graph] = g
        questions.append(qu)
        emb.append(q)
    return graphs, questions, torch.stack(emb)
