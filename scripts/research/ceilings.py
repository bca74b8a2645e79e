"""Ceilings of a budget-respecting walk on the LoCoMo folds (research script).

    python scripts/research/ceilings.py /work/main/outputs/graphs/locomo

Per fold's test conversations (categories 1-4, the harness's ``overall``): dense top-k and PPR
recall from the harness, and from the embedding entries (top ``max_entries`` by cosine):
gold in the entries, gold within 1 / 2 hops, and a greedy oracle walk (best-first tree from kept
entries, at most ``top_k_neighbors`` children per node, depth <= ``max_hops``, <= ``max_nodes``
nodes, token cap) that covers gold nodes cheapest first.
"""

from __future__ import annotations

import sys
from collections import deque

import numpy as np
import torch

from graphmem.eval.harness import evaluate_policy
from graphmem.graphset import GraphSet
from graphmem.policies.base import Budget, make_policy
from graphmem.policies.selectors import EmbeddingEntrySelector
from rl.common.splits import conversation_folds


def oracle_walk(graph, entries: list[int], gold: set[int], budget: Budget) -> set[int]:
    """Greedy oracle: repeatedly add the cheapest path (in new nodes) from the loaded tree to an uncovered gold."""
    nbrs = graph.cached("research.nbrs", lambda: _nbrs(graph))
    tokens = graph.node_tokens().tolist()
    depth: dict[int, int] = {}  # loaded node -> depth
    children: dict[int, int] = {}
    used = 0
    while len(depth) < budget.max_nodes:
        best = None
        sources = [
            (u, d, False)
            for u, d in depth.items()
            if d < budget.max_hops and children.get(u, 0) < budget.top_k_neighbors
        ]
        sources += [(e, 0, True) for e in entries if e not in depth]
        for g in gold - set(depth):
            for src, d0, is_new in sources:
                path = _shortest(nbrs, src, g, budget.max_hops - d0, depth)
                if path is None:
                    continue
                new = path if is_new else path[1:]
                if best is None or len(new) < len(best[2]):
                    best = (d0, path, new, is_new)
        if best is None:
            break
        d0, path, new, is_new = best
        if len(depth) + len(new) > budget.max_nodes or used + sum(tokens[v] for v in new) > budget.max_tokens:
            break
        for i, v in enumerate(path):
            if i == 0 and not is_new:
                continue
            if i > 0:
                children[path[i - 1]] = children.get(path[i - 1], 0) + 1
            depth[v] = d0 + i
            used += tokens[v]
    return set(depth)


def _nbrs(graph) -> list[list[int]]:
    out = [set() for _ in range(graph.num_nodes)]
    for u, v in graph.edge_index.T.tolist():
        if u != v:
            out[u].add(v)
    return [sorted(s) for s in out]


def _shortest(nbrs, src: int, goal: int, max_steps: int, loaded) -> list[int] | None:
    """Shortest path ``src -> goal`` of at most ``max_steps`` edges through unloaded nodes."""
    if src == goal:
        return [src]
    prev = {src: None}
    frontier = [src]
    for _ in range(max_steps):
        nxt = []
        for u in frontier:
            for v in nbrs[u]:
                if v in prev or v in loaded:
                    continue
                prev[v] = u
                if v == goal:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return path[::-1]
                nxt.append(v)
        frontier = nxt
    return None


def hops_from(nbrs, sources: list[int], limit: int) -> dict[int, int]:
    dist = {s: 0 for s in sources}
    q = deque(sources)
    while q:
        u = q.popleft()
        if dist[u] >= limit:
            continue
        for v in nbrs[u]:
            if v not in dist:
                dist[v] = dist[u] + 1
                q.append(v)
    return dist


def main(path: str) -> None:
    gs = GraphSet.load(path)
    budget = Budget()
    folds = conversation_folds(list(gs.graphs), k=5, seed=0, val_fraction=0.2)
    selector = EmbeddingEntrySelector()
    queries = gs.queries()
    dense, ppr = make_policy("dense_topk"), make_policy("ppr")
    rows = []
    for split in folds:
        idx = [i for i, q in enumerate(gs.questions) if q.graph in split.test and q.category != 5]  # LoCoMo's overall
        sub = [gs.questions[i] for i in idx]
        r_dense = evaluate_policy(dense, gs, budget, sub, progress=False).overall["evidence_recall"]
        r_ppr = evaluate_policy(ppr, gs, budget, sub, progress=False).overall["evidence_recall"]
        stats = {"entries": [], "hop1": [], "hop2": [], "oracle": []}
        for i in idx:
            q = gs.questions[i]
            graph = gs.graphs[q.graph]
            gold = {graph.index_of(e) for e in q.evidence if graph.has_node(e)}
            if not gold:
                continue
            ent = selector.select(graph, [queries[i]], budget)[0]
            nbrs = graph.cached("research.nbrs", lambda: _nbrs(graph))
            dist = hops_from(nbrs, ent, 2)
            for key, lim in (("entries", 0), ("hop1", 1), ("hop2", 2)):
                stats[key].append(sum(1 for g in gold if dist.get(g, 99) <= lim) / len(gold))
            loaded = oracle_walk(graph, ent, gold, budget)
            stats["oracle"].append(len(loaded & gold) / len(gold))
        row = {"fold": split.fold, "n": len(stats["oracle"]), "dense": r_dense, "ppr": r_ppr}
        row.update({k: float(np.mean(v)) for k, v in stats.items()})
        rows.append(row)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    keys = [k for k in rows[0] if k not in ("fold", "n")]
    print("mean", {k: round(float(np.mean([r[k] for r in rows])), 3) for k in keys})


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1] if len(sys.argv) > 1 else "/work/main/outputs/graphs/locomo")
