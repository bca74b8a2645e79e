"""Policy ``gnn``: a trained GNN reader scores the nodes; a score-guided walk honours the budget.

For a batch of queries over one graph:

1. entries come from the entry selector (default :class:`~graphmem.policies.selectors.EmbeddingEntrySelector`,
   ``<= max_entries``);
2. the reader (:class:`models.gnn_reader.GNNReader`) scores every node for every query in one
   batched pass, seeded at those entries;
3. the candidates are the nodes a budgeted walk reaches: from the entries, for ``max_hops``
   depths, each reached node admits its ``top_k_neighbors`` highest-scoring out-neighbors not
   reached before (ties by ascending node id);
4. the candidates, ordered by score (ties by ascending node id), are loaded with
   :func:`~graphmem.policies.batched.load_under_budget` (node and token limits).

So the loaded set obeys the same entry, fan-out, hop, node and token limits as every other
policy.

``method: ball`` (the default) never runs the reader over the whole graph. The walk reads the scores
of the entries and, at hop ``d``, of the out-neighbours of its depth-``d - 1`` frontier; before each
hop the reader runs once, over a disjoint union of one part per query
(:func:`~graphmem.policies.subgraph.layered_subgraphs`): for the nodes ``T`` whose scores the hop reads
and are not yet known, layer ``l`` of ``L`` runs on the relational in-edges of ``S_l`` (``S_L = T``, and
``S_{l-1}`` adds their sources), and layer 1 on the entries' out-edges into ``S_1`` (before it only
the entries hold non-zero states, so every other message is zero), each mean taken over the node's
full in-degree. A node's state after ``l`` layers depends only on the states of its relational
in-neighbours after ``l - 1`` layers, so by induction every node of ``S_l`` has its full-graph state
after ``l`` layers; the readout at ``v`` in ``T`` reads ``h_v^{(L)}``, ``x_v``, ``q`` and, with a lexical
reader, the lexical features of ``q`` and ``v`` (:func:`~graphmem.index.lexical_features.pair_features`, the
values the full pass reads from :func:`~graphmem.index.lexical_features.dense_features`). So every score the
walk reads equals the full-graph pass (up to float summation order), and the policy loads what
``method: full`` (one reader pass over every node) loads. The edges read per query are those into the
``L - 1``-hop neighbourhood of at most ``max_entries * (1 + D + k D + ... )`` nodes (``D`` the largest
out-degree) and the entries' own, not ``N``.
The policy sees only the graph, the :class:`Query` and the :class:`Budget`.

Steps 3-4 are :func:`batched_walk`, tensor ops over the whole batch (what :meth:`GNNPolicy.traverse`
and the reader's validation in :mod:`rl.gnn.train` run); the tests check it against a per-query
Python walk. Over a graph batch the reader scores the queries packed (the ``pack_queries`` hint):
column ``j`` holds the ``j``-th query of every graph, and no message crosses graphs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from os import PathLike
from typing import Any, Sequence

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.core.retrieval import Query
from graphmem.index.lexical_features import (
    NUM_LEXICAL_FEATURES,
    Lexical,
    dense_features,
    lexical_inputs,
    pair_features,
    scope_lexical,
)
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import compact_left, csr_values, greedy_admit, rank_in_group
from graphmem.policies.selectors import SelectorSpec, make_entry_selector
from graphmem.policies.subgraph import layered_subgraphs, lookup, relational_in_degree
from graphmem.policies.tables import csr, dense_rows, distinct_neighbors, kept, node_id_rank, token_counts
from graphmem.store.checkpoint import CheckpointError, load_checkpoint, require_checkpoint


def load_reader(path: str | PathLike, key: str = "policy.checkpoint") -> tuple[Any, dict[str, Any]]:
    """``(reader, state)``: the :class:`models.gnn_reader.GNNReader` of the ``"gnn"`` checkpoint ``path``
    (:func:`graphmem.store.checkpoint.load_checkpoint`) and the checkpoint's state; the one way a reader is
    loaded. A missing file (named by the config ``key``), a damaged one or a state that does not rebuild a
    reader is a :class:`~graphmem.store.checkpoint.CheckpointError` naming the file."""
    from models.gnn_reader import GNNReader  # lazily: torch_geometric takes seconds to import

    state = load_checkpoint(require_checkpoint(path, key), "gnn")
    try:
        return GNNReader.from_checkpoint(state), state
    except Exception as err:  # noqa: BLE001 - a missing key or a shape mismatch: not a reader file
        reason = " ".join(f"{type(err).__name__}: {err}".split())[:200]
        raise CheckpointError(f"{path}: not a readable reader checkpoint ({reason})") from None


@register_policy("gnn")
class GNNPolicy(TraversalPolicy):
    """Reader-scored retrieval under the shared budget (see module docstring).

    Args:
        reader: a trained :class:`models.gnn_reader.GNNReader` (default: None).
        checkpoint: path to a ``"gnn"`` checkpoint written by :func:`rl.gnn.train.save_checkpoint`, read by
            :func:`load_reader` (default: None).
        entry_selector: a registered entry-selector name, or an object with
            ``select(graph, queries, budget) -> list[list[int]]`` (default: ``"embedding"``).
        query_chunk: queries scored per forward pass, bounding memory to
            ``E * query_chunk * H`` floats (default: 64).
        device: where the reader runs: ``"cpu"``, ``"cuda"``, ``"auto"`` (default: ``"cpu"``).
        pack_queries: ``method: full``, in :meth:`retrieve_graphs`: graphs with at most this many queries
            share one packed reader pass over their union; the others run alone (default: ``8``).
        method: ``"ball"`` (reader on the neighbourhoods the walk reads, exact; module docstring) or
            ``"full"`` (one reader pass over every node of the graph) (default: ``"ball"``).
        strict_split: refuse, rather than warn about, graph sets holding graphs the checkpoint
            was trained or selected on (:func:`graphmem.store.checkpoint.check_inputs`) (default: ``False``).
    """

    def __init__(
        self,
        reader=None,
        checkpoint: str | PathLike | None = None,
        entry_selector: SelectorSpec = "embedding",
        query_chunk: int = 64,
        device: str | torch.device = "cpu",
        pack_queries: int = 8,
        method: str = "ball",
        strict_split: bool = False,
    ):
        if method not in ("ball", "full"):
            raise ValueError(f"method must be 'ball' or 'full', got {method!r}")
        self.method = method
        self.device = resolve_device(device)
        if (reader is None) == (checkpoint is None):
            raise ValueError("GNNPolicy needs exactly one of `reader` or `checkpoint`")
        self.checkpoint_path, self.strict_split, self.trained_inputs = checkpoint, bool(strict_split), None
        if checkpoint is not None:
            reader, state = load_reader(checkpoint)
            self.trained_inputs = state.get("inputs")
        self.reader = reader
        self.reader = self.reader.to(self.device).eval()
        self.entry_selector = make_entry_selector(entry_selector)
        self.query_chunk = int(query_chunk)
        self.pack_queries = int(pack_queries)

    @torch.no_grad()
    def score(self, graph: MemoryGraph, queries: Sequence[Query], entries: list[list[int]]) -> Tensor:
        """``[B, N]`` reader scores of one graph on the policy's device, ``query_chunk`` queries at a time."""
        from models.gnn_reader import start_mask  # lazily, as in load_reader

        dev = self.device
        x, ei, et, ea = (t.to(dev) for t in (graph.embeddings, graph.edge_index, graph.edge_type, graph.edge_attr))
        out = []
        for lo in range(0, len(queries), self.query_chunk):
            chunk = queries[lo : lo + self.query_chunk]
            q = torch.stack([c.embedding.float().flatten() for c in chunk]).to(dev)
            start = start_mask(entries[lo : lo + self.query_chunk], graph.num_nodes, device=dev)
            out.append(self.reader(x, ei, et, ea, q, start, lexical=self._lexical(graph, chunk)))
        return torch.cat(out) if out else torch.empty(0, graph.num_nodes, device=dev)

    def _lexical(self, graph: MemoryGraph, queries: Sequence[Query]) -> Tensor | None:
        """``[B, N, F]`` lexical features of the queries and every node (when the reader reads them)."""
        if not self.reader.config.lexical:
            return None
        return dense_features(lexical_inputs([graph], [[x.text for x in queries]], self.device))

    def traverse(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        """Reader scores (one graph: :meth:`score`; a graph batch: :meth:`packed_scores`), then :func:`batched_walk`."""
        rows = [[v for v in r if v >= 0] for r in entries.tolist()]
        if self.method == "ball":
            lexical = scope_lexical(scope) if self.reader.config.lexical else None  # each query on its own graph
            source = BallScores(
                self.reader, scope.graph, scope.queries, rows, scope.device, lexical=lexical, chunk=self.query_chunk
            )
            return batched_walk(scope.graph, rows, source, budget).result(entries)
        if scope.num_graphs == 1:
            scores = self.score(scope.graph, scope.queries, rows)
        else:
            scores = self.packed_scores(scope, entries)
        return batched_walk(scope.graph, rows, scores, budget).result(entries)

    def packed_scores(self, scope: Scope, entries: Tensor) -> Tensor:
        """``[B, N]`` reader scores over a graph batch from packed passes: ``[B', N]`` columns (``B'`` =
        most queries of one graph, ``query_chunk`` columns per pass), each query's column its scores."""
        batch, queries = scope.batch, scope.queries
        graph, dev, b, comp = batch.graph, scope.device, len(queries), scope.comp
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
        lexical = torch.zeros(width, graph.num_nodes, NUM_LEXICAL_FEATURES, device=dev)
        ptr, first = batch.node_ptr.tolist(), (torch.cumsum(counts, 0) - counts).tolist()
        for c, n in enumerate(counts.tolist()):  # per graph, the product retrieve_batch makes on it alone
            if n:  # the queries of graph c are rows first[c]:first[c] + n (Scope keeps them in one run)
                cosine[ptr[c] : ptr[c + 1], :n] = self.reader.cosine(x[ptr[c] : ptr[c + 1]], q[first[c] : first[c] + n])
                own = self._lexical(batch.graphs[c], queries[first[c] : first[c] + n])
                if own is not None:
                    lexical[:n, ptr[c] : ptr[c + 1]] = own
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
                    lexical[lo : lo + self.query_chunk] if self.reader.config.lexical else None,
                )
                for lo in range(0, width, self.query_chunk)
            ]
        )  # [B', N]
        return packed[column]


def neighbor_table(graph: MemoryGraph, device: str | torch.device | None = None) -> tuple[Tensor, Tensor]:
    """``(nbr, edge)``, both ``[N + 1, D]`` long: row ``u`` lists the distinct out-neighbors of
    ``u`` other than ``u`` itself, ascending by node-id rank, and for each the smallest id of an
    edge ``u -> v`` (:func:`~graphmem.policies.tables.distinct_neighbors`). Rows are padded with
    ``N`` (neighbor) and ``-1`` (edge); row ``N`` is all padding, so a padded frontier slot ``N``
    has no neighbors. Cached (on ``device`` too, when given)."""

    def build() -> tuple[Tensor, Tensor]:
        n = graph.num_nodes
        rowptr, target, edge = distinct_neighbors(graph, self_loops=False)
        width = int(rowptr.diff().max()) if n else 0
        nbr = torch.cat([dense_rows(rowptr, target, width, n), torch.full((1, width), n, dtype=torch.long)])
        return nbr, torch.cat([dense_rows(rowptr, edge, width, -1), torch.full((1, width), -1, dtype=torch.long)])

    return kept(graph, "policies.gnn.neighbor_table", build, (graph.edge_index,), device)


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
        csr: the graph's ``(rowptr, perm)`` on the walk's device.
    """

    ranked: Tensor
    taken: Tensor
    depth: Tensor
    parent_edge: Tensor
    scores: Tensor
    loaded_tokens: Tensor
    visited: Tensor
    num_nodes: int
    csr: tuple[Tensor, Tensor]

    def loaded_mask(self) -> Tensor:
        """``[B, N]`` bool, True at each query's loaded nodes."""
        n = self.num_nodes
        mask = torch.zeros(self.ranked.shape[0], n + 1, dtype=torch.bool, device=self.ranked.device)
        mask.scatter_(1, self.ranked.masked_fill(~self.taken, n), True)
        return mask[:, :n]

    def result(self, entries: Tensor) -> RetrievalBatch:
        """The retrievals of the walk from ``entries`` (``[B, K]`` rows, ``-1`` padded): the loaded nodes
        in ranked order with their scores and depths, the edges that reached them, and the out-edges
        of every visited frontier node."""
        taken, b = self.taken, self.taken.shape[0]
        rows = torch.arange(b, device=taken.device)
        query = rows[:, None].expand_as(taken)
        traversed = taken & (self.parent_edge >= 0)
        considered, num_considered = self.considered_edges()
        return RetrievalBatch(
            entries=entries,
            tokens=self.loaded_tokens,
            query=query[taken],
            loaded=self.ranked[taken],
            depth=self.depth[taken],
            considered=(torch.repeat_interleave(rows, num_considered), considered),
            traversed=(query[traversed], self.parent_edge[traversed]),
            scores=self.scores[taken],
        )

    def considered_edges(self) -> tuple[Tensor, Tensor]:
        """The out-edges of the visited nodes, concatenated row by row in visiting order (each
        node's edges in :meth:`MemoryGraph.out_edges` order), and ``[B]`` edges per query."""
        rowptr, perm = self.csr
        real = self.visited < self.num_nodes
        _, edges = csr_values(rowptr, perm, self.visited[real])  # row-major: per query
        v = self.visited.clamp(max=max(self.num_nodes - 1, 0))
        degree = (rowptr[v + 1] - rowptr[v]).masked_fill(~real, 0)  # padding N has none
        return edges, degree.sum(1)


class DenseScores:
    """Scores of every node, ``[B, N]``: the full-graph reader pass (``method: full``), or any given scores."""

    def __init__(self, scores: Tensor):
        self.neg_scores = torch.cat([-scores, scores.new_full((scores.shape[0], 1), math.nan)], 1)  # [B, N + 1]

    def need(self, nodes: Tensor) -> None:
        """Nothing to compute: every node is scored."""

    def negated(self, nodes: Tensor) -> Tensor:
        """``-score`` of ``nodes`` ``[B, M]`` (NaN at padding ``N``)."""
        return self.neg_scores.gather(1, nodes)


def reader_inputs(graph: MemoryGraph, device: str | torch.device | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``(embeddings [N, D], edge_type [E], edge_attr [E, d_e])`` of ``graph`` on ``device``, copied there
    once per graph (cached), so that reading some of their rows costs no transfer of the whole."""
    return kept(
        graph,
        "policies.gnn.reader_inputs",
        lambda: (graph.embeddings, graph.edge_type, graph.edge_attr),
        (graph.embeddings, graph.edge_type, graph.edge_attr),
        device,
    )


def parts_cost_more(parts_edges: int, graph: MemoryGraph, config, queries: int, share: float) -> bool:
    """Whether one full-graph pass with ``queries`` columns is the cheaper way to the scores of parts
    that read ``parts_edges`` edges: they read more than ``share`` of its ``L * E_rel * queries``
    edge-columns (``E_rel`` relational edges: ``2E`` with inverses). The full pass computes each
    edge's weights once for all its columns and sums its messages over the columns in one kernel; a
    part does both once per query, so a part's edge costs many of the full pass's edge-columns (on one
    CPU thread: about seven in training, 32 questions with gradients on LoCoMo; twenty and more in a
    batch of 200 questions on pooled HotpotQA, whose parts outgrow the caches)."""
    relational = graph.num_edges * (2 if config.add_inverse else 1)
    return parts_edges > share * config.num_layers * relational * queries


class BallScores:
    """Reader scores computed on demand on each query's neighbourhood (``method: ball``, module docstring).

    :meth:`need` scores the ``(query, node)`` pairs not scored yet, with one reader pass over the
    disjoint union of what each query's targets need
    (:func:`~graphmem.policies.subgraph.layered_subgraphs`, seeded at the query's entries), in the
    packed layout of :class:`~models.gnn_reader.GNNReader` (one column; each node holds the query of
    its part). Known scores are sorted keys ``query * N + node``. A reader with lexical features reads
    them as the full pass does: ``lexical`` (the queries'
    :class:`~graphmem.index.lexical_features.Lexical` inputs; default: from the queries' texts) gives each
    target the features of its query (:func:`~graphmem.index.lexical_features.pair_features`).

    Where at least ``shared_from`` queries need scores and their parts would read more than
    ``full_share`` of the edge-columns of one full-graph pass over them (the targets' own in-edges,
    which the last layer reads, already do; :func:`parts_cost_more`: their
    neighbourhoods cover much of a small graph), the scores come from full-graph passes instead,
    ``chunk`` queries each, which score every node of those queries at once: the same scores, cheaper
    there. A single query is always scored on its part.
    """

    def __init__(
        self,
        reader,
        graph: MemoryGraph,
        queries: Sequence[Query],
        entries: list[list[int]],
        device,
        lexical: Lexical | None = None,
        full_share: float = 1 / 32,
        shared_from: int = 8,
        chunk: int = 64,
    ):
        self.reader, self.graph, self.device = reader, graph, torch.device(device)
        if reader.config.lexical and lexical is None:
            lexical = lexical_inputs([graph], [[q.text for q in queries]])
        self.lexical = None if not reader.config.lexical else lexical.to(self.device)
        self.query = torch.stack([q.embedding.float().flatten() for q in queries]).to(self.device)
        self.entries, self.full_share, self.shared_from, self.chunk = (
            entries,
            float(full_share),
            int(shared_from),
            int(chunk),
        )
        n = graph.num_nodes
        keys = sorted({b * n + v for b, row in enumerate(entries) for v in row})
        self.entry_keys = torch.tensor(keys, dtype=torch.long, device=self.device)
        self.keys = torch.empty(0, dtype=torch.long, device=self.device)
        self.values = torch.empty(0, device=self.device)

    @torch.no_grad()
    def need(self, nodes: Tensor) -> None:
        """Score the real nodes (``< N``) of ``nodes`` ``[B, M]`` not scored yet."""
        from models.gnn_reader import ball_scores  # lazily, as in load_reader

        n, cfg = self.graph.num_nodes, self.reader.config
        rows = torch.arange(nodes.shape[0], device=self.device)[:, None].expand_as(nodes)
        real = nodes < n
        keys = torch.unique(rows[real] * n + nodes[real])
        keys = keys[~torch.isin(keys, self.keys)]
        if keys.numel() == 0:
            return
        query, node = keys // n, keys % n
        asking = torch.unique(query)
        # the last layer alone reads the targets' in-edges: a lower bound of what the parts read
        last = int(relational_in_degree(self.graph, cfg.add_inverse, self.device)[node].sum()) if cfg.num_layers else 0
        if asking.numel() >= self.shared_from and parts_cost_more(
            last, self.graph, cfg, asking.numel(), self.full_share
        ):
            keys, values = self._full_pass(asking)  # every node of these queries: later hops find them scored
        else:
            sub = layered_subgraphs(self.graph, query, node, self.entry_keys, cfg.num_layers, cfg.add_inverse)
            phi = None if self.lexical is None else pair_features(self.lexical, query, node)
            values = ball_scores(self.reader, *reader_inputs(self.graph, self.device), self.query, sub, phi)
        self.keys, order = torch.sort(torch.cat([self.keys, keys]))
        self.values = torch.cat([self.values, values.to(self.values.dtype)])[order]

    def _full_pass(self, queries: Tensor) -> tuple[Tensor, Tensor]:
        """``(keys, scores)`` of every node not scored yet for ``queries`` (distinct, sorted), from
        full-graph passes of ``chunk`` queries each."""
        from models.gnn_reader import start_mask  # lazily, as in load_reader

        g, dev, n = self.graph, self.device, self.graph.num_nodes
        x, ei, et, ea = (t.to(dev) for t in (g.embeddings, g.edge_index, g.edge_type, g.edge_attr))
        keys, values = [], []
        for lo in range(0, queries.numel(), self.chunk):
            part = queries[lo : lo + self.chunk]
            start = start_mask([self.entries[b] for b in part.tolist()], n, device=dev)
            phi = None if self.lexical is None else dense_features(self.lexical, part)
            keys.append((part[:, None] * n + torch.arange(n, device=dev)).flatten())
            values.append(self.reader(x, ei, et, ea, self.query[part], start, lexical=phi).flatten())  # [b, N]
        keys, values = torch.cat(keys), torch.cat(values)
        new = ~torch.isin(keys, self.keys)
        return keys[new], values[new]

    def negated(self, nodes: Tensor) -> Tensor:
        """``-score`` of ``nodes`` ``[B, M]`` (NaN at padding ``N``); every real node was :meth:`need` -ed."""
        n = self.graph.num_nodes
        rows = torch.arange(nodes.shape[0], device=self.device)[:, None].expand_as(nodes)
        found, pos = lookup(self.keys, rows * n + nodes)
        if not bool(found[nodes < n].all()):
            raise RuntimeError("BallScores: a score was read before it was computed")
        return torch.where(found & (nodes < n), -self.values[pos] if self.values.numel() else 0.0, math.nan)


def batched_walk(
    graph: MemoryGraph, entries: Sequence[Sequence[int]], scores: Tensor | DenseScores, budget: Budget
) -> WalkBatch:
    """Steps 3-4 of the module docstring for ``B`` queries at once; ``scores`` is ``[B, N]``, or an
    object with ``need(nodes)`` (called with every node the next hop reads, before it reads them) and
    ``negated(nodes) -> -scores`` (``[B, M]``; NaN at padding ``N``), as :class:`BallScores`.

    With tensor ops over the batch: at each hop
    ``d <= max_hops``, frontier node ``u`` (in frontier order) admits its ``top_k_neighbors``
    unreached out-neighbors by ``(-score, rank)``, each through its smallest edge id; the reached
    nodes are ranked the same way and loaded while ``|loaded| < max_nodes`` and a node's tokens fit
    what is left of ``max_tokens`` (a node that does not fit is skipped), admitted by
    :func:`~graphmem.policies.batched.greedy_admit`. The only Python loop runs over frontier
    slots, bounded by the budget, never over queries. The reached nodes are kept as a ``[B, R]``
    list (``R`` bounded by the budget), so the walk allocates nothing of size ``N`` per query.
    ``entries`` are used as given (callers truncate them to ``max_entries``). Runs on the device
    of the scores.
    """
    source = DenseScores(scores) if isinstance(scores, Tensor) else scores
    bsz, n = len(entries), graph.num_nodes
    dev = source.neg_scores.device if isinstance(source, DenseScores) else source.device
    nbr_table, edge_table = neighbor_table(graph, dev)
    node_tokens = token_counts(graph, dev)
    rank = node_id_rank(graph, dev)
    frontier = _entry_frontier(entries, n, dev)  # [B, F]
    reached = frontier  # [B, R]; padding n is never free
    nodes, parents, depths, visited = [frontier], [torch.full_like(frontier, -1)], [torch.zeros_like(frontier)], []
    k = budget.top_k_neighbors
    hops = budget.max_hops if k > 0 else 0
    source.need(torch.cat([frontier, nbr_table[frontier].flatten(1)], 1) if hops else frontier)
    for d in range(1, hops + 1):
        if frontier.shape[1] == 0:
            break
        if d > 1:
            source.need(nbr_table[frontier].flatten(1))
        visited.append(frontier)
        admitted, via = [], []
        for u in frontier.unbind(1):
            nbr = nbr_table[u]  # [B, D]
            free = (nbr < n) & ~(nbr[:, :, None] == reached[:, None, :]).any(2)
            key = source.negated(nbr).masked_fill(~free, math.nan)
            top = torch.sort(key, dim=1, stable=True).indices[:, :k]
            ok = free.gather(1, top)
            chosen = nbr.gather(1, top).masked_fill(~ok, n)
            reached = torch.cat([reached, chosen], 1)
            admitted.append(chosen)
            via.append(edge_table[u].gather(1, top).masked_fill(~ok, -1))
        frontier = torch.cat(admitted, 1)
        frontier, edge = compact_left(frontier, torch.cat(via, 1), keep=frontier < n)
        nodes.append(frontier)
        parents.append(edge)
        depths.append(torch.full_like(frontier, d))
    nodes, parents, depths = torch.cat(nodes, 1), torch.cat(parents, 1), torch.cat(depths, 1)

    real = nodes < n
    order = torch.argsort(
        torch.where(real, rank[nodes.clamp(max=max(n - 1, 0))], n), dim=1, stable=True
    )  # padding last
    order = order.gather(1, torch.sort(source.negated(nodes.gather(1, order)), dim=1, stable=True).indices)
    ranked = nodes.gather(1, order)
    tokens = torch.where(ranked < n, node_tokens[ranked.clamp(max=max(n - 1, 0))], 0)
    zero = torch.zeros(bsz, dtype=torch.long, device=dev)
    taken, used, _ = greedy_admit(tokens, ranked < n, zero, zero, budget)
    return WalkBatch(
        ranked=ranked,
        taken=taken,
        depth=depths.gather(1, order),
        parent_edge=parents.gather(1, order),
        scores=torch.where(ranked < n, -source.negated(ranked), 0.0),
        loaded_tokens=used,
        visited=torch.cat(visited, 1) if visited else torch.empty(bsz, 0, dtype=torch.long, device=dev),
        num_nodes=n,
        csr=csr(graph, dev),
    )


def _entry_frontier(entries: Sequence[Sequence[int]], n: int, device: torch.device) -> Tensor:
    """``[B, F]`` long: each query's distinct entries in order, padded with ``n``."""
    rows = [list(dict.fromkeys(e)) for e in entries]
    width = max(map(len, rows), default=0)
    return torch.tensor([r + [n] * (width - len(r)) for r in rows], dtype=torch.long, device=device).reshape(
        len(rows), width
    )
