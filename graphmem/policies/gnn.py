"""Policy ``gnn``: a trained GNN reader scores the nodes; a score-guided walk honours the budget.

For a batch of queries over one graph:

1. entries come from :class:`~graphmem.policies.entries.EmbeddingEntrySelector` (``<= max_entries``);
2. the reader (:class:`models.gnn_reader.GNNReader`) scores every node for every query in one
   batched pass, seeded at those entries;
3. the candidates are the nodes a budgeted walk reaches: from the entries, for ``max_hops``
   depths, each reached node admits its ``top_k_neighbors`` highest-scoring out-neighbours not
   reached before (ties by ascending node id);
4. the candidates, ordered by score (ties by ascending node id), are loaded with
   :func:`~graphmem.policies.base.load_under_budget` (node and token limits).

So the loaded set obeys the same entry, fan-out, hop, node and token limits as every other
policy. The policy sees only the graph, the :class:`Query` and the :class:`Budget`.
"""

from __future__ import annotations

from os import PathLike
from typing import Sequence

import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget, Query, Retrieval, Timer, TraversalPolicy, load_under_budget, register_policy
from graphmem.policies.entries import make_entry_selector, node_id_rank


@register_policy("gnn")
class GNNPolicy(TraversalPolicy):
    """Reader-scored retrieval under the shared budget (see module docstring).

    Args:
        reader: a trained :class:`models.gnn_reader.GNNReader` (default: None).
        checkpoint: path to a checkpoint written by ``rl.gnn_train`` or
            :meth:`GNNReader.checkpoint`, read with ``weights_only=True`` (default: None).
        entries: a registered entry-selector name, or an object with
            ``select(graph, queries, budget) -> list[list[int]]`` (default: ``"embedding"``).
        query_chunk: queries scored per forward pass, bounding memory to
            ``E * query_chunk * H`` floats (default: 64).
        device: where the reader runs (default: ``"cpu"``).
    """

    def __init__(self, reader=None, checkpoint: str | PathLike | None = None, entries="embedding",
                 query_chunk: int = 64, device: str = "cpu"):
        from models.gnn_reader import GNNReader

        if (reader is None) == (checkpoint is None):
            raise ValueError("GNNPolicy needs exactly one of `reader` or `checkpoint`")
        self.reader = reader if reader is not None else GNNReader.from_checkpoint(str(checkpoint))
        self.reader = self.reader.to(device).eval()
        self.device = torch.device(device)
        self.entry_selector = make_entry_selector(entries)
        self.query_chunk = int(query_chunk)

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def score(self, graph: MemoryGraph, queries: Sequence[Query], entries: list[list[int]]) -> Tensor:
        """``[B, N]`` reader scores (CPU tensor), computed ``query_chunk`` queries at a time."""
        from models.gnn_reader import start_mask

        dev = self.device
        x, ei, et, ea = (t.to(dev) for t in (graph.embeddings, graph.edge_index, graph.edge_type, graph.edge_attr))
        out = []
        for lo in range(0, len(queries), self.query_chunk):
            chunk = queries[lo:lo + self.query_chunk]
            q = torch.stack([c.embedding.float().flatten() for c in chunk]).to(dev)
            start = start_mask(entries[lo:lo + self.query_chunk], graph.num_nodes).to(dev)
            out.append(self.reader(x, ei, et, ea, q, start).cpu())
        return torch.cat(out) if out else torch.empty(0, graph.num_nodes)

    # ------------------------------------------------------------------ retrieval
    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        return self.retrieve_batch(graph, [query], budget)[0]

    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        if not queries:
            return []
        with Timer() as t_entries:
            entries = [list(e)[:budget.max_entries] for e in self.entry_selector.select(graph, list(queries), budget)]
            scores = self.score(graph, queries, entries) if graph.num_nodes else torch.empty(len(queries), 0)
        share = t_entries.seconds / len(queries)
        results = []
        for b in range(len(queries)):
            with Timer() as t:
                result = walk_and_load(graph, entries[b], scores[b], budget)
            result.wall_time_s = share + t.seconds
            results.append(result)
        return results


def walk_and_load(graph: MemoryGraph, entries: list[int], scores: Tensor, budget: Budget) -> Retrieval:
    """Steps 3-4 of the module docstring for one query; ``scores`` is ``[N]``."""
    score_list = scores.tolist()
    rank = node_id_rank(graph).tolist()
    depth = {v: 0 for v in entries}
    parent_edge: dict[int, int] = {}
    considered: list[int] = []
    frontier = list(dict.fromkeys(entries))
    for d in range(1, budget.max_hops + 1):
        if budget.top_k_neighbors == 0 or not frontier:
            break
        nxt = []
        for u in frontier:
            out = graph.out_edges(u).tolist()
            considered.extend(out)
            first_edge: dict[int, int] = {}
            for e in out:
                v = int(graph.edge_index[1, e])
                if v not in depth and v not in first_edge:
                    first_edge[v] = e
            best = sorted(first_edge, key=lambda v: (-score_list[v], rank[v]))[:budget.top_k_neighbors]
            for v in best:
                depth[v] = d
                parent_edge[v] = first_edge[v]
                nxt.append(v)
        frontier = nxt
    ranked = sorted(depth, key=lambda v: (-score_list[v], rank[v]))
    loaded, tokens = load_under_budget(graph, ranked, budget)
    return Retrieval(
        loaded=loaded, entries=list(entries), edges_considered=considered,
        edges_traversed=[parent_edge[v] for v in loaded if v in parent_edge], loaded_tokens=tokens,
        max_depth=max((depth[v] for v in loaded), default=0), scores=[score_list[v] for v in loaded],
    )
