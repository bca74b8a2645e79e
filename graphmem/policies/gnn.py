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

Steps 3-4 exist twice: :func:`walk_and_load` for one query in plain Python (the reference), and
:func:`batched_walk` with tensor ops over the whole batch (what :meth:`GNNPolicy.retrieve_batch`
and the reader's validation in :mod:`rl.gnn_train` run). Both give the same :class:`Retrieval`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.graph_batch import GraphBatch
from graphmem.policies.base import (
    Budget,
    Query,
    Retrieval,
    Timer,
    TraversalPolicy,
    load_under_budget,
    register_policy,
    resolve_device,
)
from graphmem.policies.batched import (
    Scope,
    compact_left,
    greedy_admit,
    query_spans,
    rank_in_group,
    retrieve_union,
    scoped_entry_matrix,
    segments,
    split_list,
)
from graphmem.policies.entries import graph_cached, graph_tables, make_entry_selector, node_id_rank, validate_entries


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
        pack_queries: in :meth:`retrieve_graphs`, graphs with at most this many queries share
            one packed reader pass over their union; the others run alone (default: ``8``).
    """

    def __init__(
        self,
        reader=None,
        checkpoint: str | PathLike | None = None,
        entries="embedding",
        query_chunk: int = 64,
        device: str = "cpu",
        pack_queries: int = 8,
    ):
        from models.gnn_reader import GNNReader

        if (reader is None) == (checkpoint is None):
            raise ValueError("GNNPolicy needs exactly one of `reader` or `checkpoint`")
        if checkpoint is not None and not Path(checkpoint).is_file():
            raise ValueError(f"gnn checkpoint {str(checkpoint)!r} not found (train one with scripts/train_gnn.py)")
        self.reader = reader if reader is not None else GNNReader.from_checkpoint(str(checkpoint))
        self.reader = self.reader.to(device).eval()
        self.device = resolve_device(device)
        self.entry_selector = make_entry_selector(entries)
        self.query_chunk = int(query_chunk)
        self.pack_queries = int(pack_queries)

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def score(self, graph: MemoryGraph, queries: Sequence[Query], entries: list[list[int]]) -> Tensor:
        """``[B, N]`` reader scores on the policy's device, computed ``query_chunk`` queries at a time."""
        from models.gnn_reader import start_mask

        if not graph.num_nodes:
            return torch.empty(len(queries), 0, device=self.device)
        dev = self.device
        x, ei, et, ea = (t.to(dev) for t in (graph.embeddings, graph.edge_index, graph.edge_type, graph.edge_attr))
        out = []
        for lo in range(0, len(queries), self.query_chunk):
            chunk = queries[lo : lo + self.query_chunk]
            q = torch.stack([c.embedding.float().flatten() for c in chunk]).to(dev)
            start = start_mask(entries[lo : lo + self.query_chunk], graph.num_nodes, device=dev)
            out.append(self.reader(x, ei, et, ea, q, start))
        return torch.cat(out) if out else torch.empty(0, graph.num_nodes, device=dev)

    def select_entries(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[int]]:
        """Step 1: at most ``max_entries`` valid, distinct entry rows per query (:func:`validate_entries`)."""
        return [validate_entries(graph, e, budget) for e in self.entry_selector.select(graph, list(queries), budget)]

    # ------------------------------------------------------------------ retrieval
    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        """One query: the reader on this query alone, then :func:`walk_and_load`."""
        with Timer() as t:
            entries = self.select_entries(graph, [query], budget)
            result = walk_and_load(graph, entries[0], self.score(graph, [query], entries)[0], budget)
        result.wall_time_s = t.seconds
        return result

    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        """All queries at once: batched reader passes, then :func:`batched_walk`; each result carries
        an equal share of the wall time."""
        if not queries:
            return []
        with Timer() as t:
            entries = self.select_entries(graph, queries, budget)
            results = batched_walk(graph, entries, self.score(graph, queries, entries), budget).retrievals(
                graph, entries
            )
        for result in results:
            result.wall_time_s = t.seconds / len(queries)
        return results

    def retrieve_graphs(
        self, graphs: Sequence[MemoryGraph], queries: Sequence[Sequence[Query]], budget: Budget
    ) -> list[list[Retrieval]]:
        """The queries of graphs with at most ``pack_queries`` queries in one packed reader pass over
        the graphs' union (column ``j`` holds the ``j``-th query of every graph; no message crosses
        graphs), then one :func:`batched_walk`; graphs with more queries run alone. Results equal
        :meth:`retrieve_batch` up to float rounding of the reader's products."""
        return retrieve_union(
            self,
            graphs,
            queries,
            budget,
            lambda batch, flat, scope: self._retrieve_packed(batch, flat, scope, budget),
            self.pack_queries,
        )

    @torch.no_grad()
    def _retrieve_packed(
        self, batch: GraphBatch, queries: list[Query], scope: Scope, budget: Budget
    ) -> list[Retrieval]:
        """Entries per graph, the packed ``[B', N]`` reader scores (``B'`` = most queries of one graph,
        ``query_chunk`` columns per pass), each query's column as its ``[N]`` scores, one walk."""
        graph, dev, b = batch.graph, self.device, len(queries)
        entries = scoped_entry_matrix(self.entry_selector, batch, queries, scope.comp, budget, dev)
        comp = scope.comp.to(dev)
        column, counts = rank_in_group(comp, batch.num_graphs)
        width = int(counts.max())
        holder = torch.zeros(batch.num_graphs, width, dtype=torch.long, device=dev)  # the query of (graph, column)
        holder[comp, column] = torch.arange(b, device=dev)
        query_of = holder[batch.node_component.to(dev)].T  # [B', N]
        q = torch.stack([x.embedding.float().flatten() for x in queries]).to(dev)
        x = graph.embeddings.to(dev)
        start = torch.zeros(width, graph.num_nodes, device=dev)
        real = entries >= 0
        start[column[:, None].expand_as(entries)[real], entries[real]] = 1.0
        cosine = torch.zeros(graph.num_nodes, width, device=dev)
        ptr, first = batch.node_ptr.tolist(), (torch.cumsum(counts, 0) - counts).tolist()
        for c, n in enumerate(counts.tolist()):  # per graph, the product retrieve_batch makes on it alone
            if n:  # the queries of graph c are rows first[c]:first[c] + n (Scope keeps them in one run)
                cosine[ptr[c] : ptr[c + 1], :n] = self.reader.cosine(x[ptr[c] : ptr[c + 1]], q[first[c] : first[c] + n])
        ei, et, ea = (t.to(dev) for t in (graph.edge_index, graph.edge_type, graph.edge_attr))
        packed = torch.cat(
            [
                self.reader(
                    x,
                    ei,
                    et,
                    ea,
                    q,
                    start[lo : lo + self.query_chunk],
                    query_of[lo : lo + self.query_chunk],
                    cosine[:, lo : lo + self.query_chunk],
                )
                for lo in range(0, width, self.query_chunk)
            ]
        )  # [B', N]
        rows = [[v for v in r if v >= 0] for r in entries.tolist()]
        return batched_walk(graph, rows, packed[column], budget).retrievals(graph, rows, scope)


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
            best = sorted(first_edge, key=lambda v: (-score_list[v], rank[v]))[: budget.top_k_neighbors]
            for v in best:
                depth[v] = d
                parent_edge[v] = first_edge[v]
                nxt.append(v)
        frontier = nxt
    ranked = sorted(depth, key=lambda v: (-score_list[v], rank[v]))
    loaded, tokens = load_under_budget(graph, ranked, budget)
    return Retrieval(
        loaded=loaded,
        entries=list(entries),
        edges_considered=considered,
        edges_traversed=[parent_edge[v] for v in loaded if v in parent_edge],
        loaded_tokens=tokens,
        max_depth=max((depth[v] for v in loaded), default=0),
        scores=[score_list[v] for v in loaded],
    )


# ---------------------------------------------------------------------- batched walk
def neighbour_table(graph: MemoryGraph, device: str | torch.device | None = None) -> tuple[Tensor, Tensor]:
    """``(nbr, edge)``, both ``[N + 1, D]`` long: row ``u`` lists the distinct out-neighbours of
    ``u`` other than ``u`` itself, ascending by node-id rank, and for each the smallest id of an
    edge ``u -> v``. Rows are padded with ``N`` (neighbour) and ``-1`` (edge); row ``N`` is all
    padding, so a padded frontier slot ``N`` has no neighbours. Cached (on ``device`` too, when given)."""

    def build() -> tuple[Tensor, Tensor]:
        n = graph.num_nodes
        src, dst = graph.edge_index
        eid = torch.arange(src.numel())
        keep = src != dst
        src, dst, eid = src[keep], dst[keep], eid[keep]
        order = torch.argsort(src * max(n, 1) + node_id_rank(graph)[dst], stable=True)  # then by edge id
        src, dst, eid = src[order], dst[order], eid[order]
        first = torch.ones_like(src, dtype=torch.bool)
        first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
        src, dst, eid = src[first], dst[first], eid[first]
        counts = torch.bincount(src, minlength=n + 1)
        col = torch.arange(src.numel()) - (torch.cumsum(counts, 0) - counts)[src]
        width = int(counts.max()) if src.numel() else 0
        nbr = torch.full((n + 1, width), n, dtype=torch.long)
        edge = torch.full((n + 1, width), -1, dtype=torch.long)
        nbr[src, col] = dst
        edge[src, col] = eid
        return nbr, edge

    return graph_cached(graph, "policies.gnn.neighbour_table", (graph.edge_index,), build, device)


@dataclass
class WalkBatch:
    """Steps 3-4 for ``B`` queries as padded ``[B, R]`` tensors over each query's reached nodes.

    Node rows are padded with ``N``; ``R`` bounds the reached nodes of any query
    (``<= max_entries * (1 + k + ... + k^max_hops)``).

    Attributes:
        ranked: ``[B, R]`` reached nodes, by ``(-score, node-id rank)``.
        taken: ``[B, R]`` bool, the ranked nodes that are loaded (load order = ranked order).
        depth: ``[B, R]`` hop at which each ranked node was reached (0 for entries).
        parent_edge: ``[B, R]`` the edge that reached each ranked node (-1 for entries and padding).
        scores: ``[B, R]`` each ranked node's score.
        loaded_tokens: ``[B]`` tokens of the loaded nodes.
        visited: ``[B, S]`` the frontier nodes whose out-edges were considered, in visiting order.
        num_nodes: ``N``.
    """

    ranked: Tensor
    taken: Tensor
    depth: Tensor
    parent_edge: Tensor
    scores: Tensor
    loaded_tokens: Tensor
    visited: Tensor
    num_nodes: int

    def loaded_mask(self) -> Tensor:
        """``[B, N]`` bool, True at each query's loaded nodes."""
        n = self.num_nodes
        mask = torch.zeros(self.ranked.shape[0], n + 1, dtype=torch.bool, device=self.ranked.device)
        mask.scatter_(1, self.ranked.masked_fill(~self.taken, n), True)
        return mask[:, :n]

    def retrievals(
        self, graph: MemoryGraph, entries: Sequence[Sequence[int]], scope: Scope | None = None
    ) -> list[Retrieval]:
        """One :class:`Retrieval` per query, equal to :func:`walk_and_load`'s, built from a few
        ``tolist`` calls over the whole batch. With a ``scope`` (``graph`` is a graph batch's union),
        rows and edge ids are given relative to each query's own graph."""
        taken = self.taken
        traversed = taken & (self.parent_edge >= 0)
        considered, num_considered = self.considered_edges(graph)
        loaded, via = self.ranked, self.parent_edge
        if scope is not None:
            node_off, edge_off, _ = query_spans(graph, len(taken), scope, taken.device)
            loaded, via = loaded - node_off[:, None], via - edge_off[:, None]
            considered = considered - torch.repeat_interleave(edge_off, num_considered)
            entries = [[v - o for v in e] for e, o in zip(entries, node_off.tolist())]
        columns = {
            "loaded": (loaded[taken], taken.sum(1)),
            "scores": (self.scores[taken], taken.sum(1)),
            "edges_traversed": (via[traversed], traversed.sum(1)),
            "edges_considered": (considered, num_considered),
        }
        split = {name: split_list(flat.tolist(), counts.tolist()) for name, (flat, counts) in columns.items()}
        max_depth = torch.cat([self.depth.masked_fill(~taken, 0), self.depth.new_zeros(len(taken), 1)], 1).amax(1)
        return [
            Retrieval(
                loaded=loaded,
                entries=list(e),
                edges_considered=considered,
                edges_traversed=traversed,
                loaded_tokens=tokens,
                max_depth=depth,
                scores=scores,
            )
            for loaded, e, considered, traversed, tokens, depth, scores in zip(
                split["loaded"],
                entries,
                split["edges_considered"],
                split["edges_traversed"],
                self.loaded_tokens.tolist(),
                max_depth.tolist(),
                split["scores"],
            )
        ]

    def considered_edges(self, graph: MemoryGraph) -> tuple[Tensor, Tensor]:
        """The out-edges of the visited nodes, concatenated row by row in visiting order (each
        node's edges in :meth:`MemoryGraph.out_edges` order), and ``[B]`` edges per query."""
        _, (rowptr, perm) = graph_tables(graph, self.visited.device)
        degree = torch.cat([rowptr.diff(), rowptr.new_zeros(1)])  # padding N has none
        _, edges = segments(rowptr, perm, self.visited[self.visited < self.num_nodes])  # row-major: per query
        return edges, degree[self.visited].sum(1)


def batched_walk(graph: MemoryGraph, entries: Sequence[Sequence[int]], scores: Tensor, budget: Budget) -> WalkBatch:
    """Steps 3-4 of the module docstring for ``B`` queries at once; ``scores`` is ``[B, N]``.

    The same rules as :func:`walk_and_load` with tensor ops over the batch: at each hop
    ``d <= max_hops``, frontier node ``u`` (in frontier order) admits its ``top_k_neighbors``
    unreached out-neighbours by ``(-score, rank)``, each through its smallest edge id; the reached
    nodes are ranked the same way and loaded while ``|loaded| < max_nodes`` and a node's tokens fit
    what is left of ``max_tokens`` (a node that does not fit is skipped), admitted by
    :func:`~graphmem.policies.batched.greedy_admit`. The only Python loop runs over frontier
    slots, bounded by the budget, never over queries.
    ``entries`` are used as given (callers truncate them to ``max_entries``). Runs on the device
    of ``scores``.
    """
    bsz, n, dev = len(entries), graph.num_nodes, scores.device
    nbr_table, edge_table = neighbour_table(graph, dev)
    node_tokens, _ = graph_tables(graph, dev)
    rank = torch.cat([node_id_rank(graph, dev), torch.tensor([n], device=dev)])  # padding ranks last
    # sort keys are -score with NaN at padding: an ascending stable sort puts padding last and
    # breaks score ties by column order
    neg_scores = torch.cat([-scores, scores.new_full((bsz, 1), math.nan)], 1)  # [B, N + 1]
    frontier = _entry_frontier(entries, n, dev)  # [B, F]
    reached = torch.zeros(bsz, n + 1, dtype=torch.bool, device=dev)
    reached[:, n] = True  # padding is never free
    reached.scatter_(1, frontier, True)
    nodes, parents, depths, visited = [frontier], [torch.full_like(frontier, -1)], [torch.zeros_like(frontier)], []
    k = budget.top_k_neighbors
    for d in range(1, budget.max_hops + 1 if k > 0 else 1):
        if frontier.shape[1] == 0:
            break
        visited.append(frontier)
        admitted, via = [], []
        for u in frontier.unbind(1):
            nbr = nbr_table[u]  # [B, D]
            free = ~reached.gather(1, nbr)
            key = neg_scores.gather(1, nbr).masked_fill(~free, math.nan)
            top = torch.sort(key, dim=1, stable=True).indices[:, :k]
            ok = free.gather(1, top)
            chosen = nbr.gather(1, top).masked_fill(~ok, n)
            reached.scatter_(1, chosen, True)
            admitted.append(chosen)
            via.append(edge_table[u].gather(1, top).masked_fill(~ok, -1))
        frontier = torch.cat(admitted, 1)
        frontier, edge = compact_left(frontier, torch.cat(via, 1), keep=frontier < n)
        nodes.append(frontier)
        parents.append(edge)
        depths.append(torch.full_like(frontier, d))
    nodes, parents, depths = torch.cat(nodes, 1), torch.cat(parents, 1), torch.cat(depths, 1)

    order = torch.argsort(rank[nodes], dim=1, stable=True)
    order = order.gather(1, torch.sort(neg_scores.gather(1, nodes.gather(1, order)), dim=1, stable=True).indices)
    ranked = nodes.gather(1, order)
    tokens = torch.cat([node_tokens, node_tokens.new_zeros(1)])[ranked]
    zero = torch.zeros(bsz, dtype=torch.long, device=dev)
    taken, used, _ = greedy_admit(tokens, ranked < n, zero, zero, budget)
    padded_scores = torch.cat([scores, scores.new_zeros(bsz, 1)], 1)
    return WalkBatch(
        ranked=ranked,
        taken=taken,
        depth=depths.gather(1, order),
        parent_edge=parents.gather(1, order),
        scores=padded_scores.gather(1, ranked),
        loaded_tokens=used,
        visited=torch.cat(visited, 1) if visited else torch.empty(bsz, 0, dtype=torch.long, device=dev),
        num_nodes=n,
    )


def _entry_frontier(entries: Sequence[Sequence[int]], n: int, device: torch.device) -> Tensor:
    """``[B, F]`` long: each query's distinct entries in order, padded with ``n``."""
    rows = [list(dict.fromkeys(e)) for e in entries]
    width = max(map(len, rows), default=0)
    return torch.tensor([r + [n] * (width - len(r)) for r in rows], dtype=torch.long, device=device).reshape(
        len(rows), width
    )
