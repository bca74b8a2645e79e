"""The learned router walking the graph at question time (HAGE §3, with the walk done by the model).

From the shared entry nodes (:class:`~graphmem.policies.entries.EmbeddingEntrySelector`), the
policy expands hop by hop. For a frontier node ``v`` and query ``q`` every out-edge ``v -> u`` to
an unvisited ``u`` is scored by the :class:`models.router.QueryRouter`

    s_vu(q) = cos(q, x_u) + w_vu(q)

``greedy`` (default) keeps the ``budget.top_k_neighbors`` best edges of each frontier node;
``beam`` keeps the ``beam_width`` best edges of the whole hop. Kept targets are loaded in
descending score under the node and token budget (:func:`load_under_budget` semantics: a node that
would break the token budget is skipped), become visited, and the loaded ones form the next
frontier, for at most ``budget.max_hops`` hops. All queries of a batch are scored together.

Edge features: those of a given :class:`models.edge_features.EdgeFeatures` when it holds the
graph (matched by name and edge count), else the graph's own ``edge_attr``. The policy sees the
query and the budget only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.policies.base import (
    Budget,
    Query,
    Retrieval,
    TraversalPolicy,
    register_policy,
    resolve_device,
    share_wall_time,
)
from graphmem.policies.batched import (
    Scope,
    entry_matrix,
    greedy_admit,
    pad_rows,
    query_spans,
    ragged_block,
    rank_in_group,
    retrieve_union,
    scoped_entry_matrix,
    segment_topk,
    segments,
    split_list,
)
from graphmem.policies.entries import (
    EmbeddingEntrySelector,
    cosine_matrix,
    make_entry_selector,
    node_id_rank,
    query_matrix,
    scoped_cosine,
    scoped_topk,
    topk_by_score,
    unit_embeddings,
    validate_entries,
)
from models.edge_features import EdgeFeatures
from models.intent import IntentProvider, RelationIntent
from models.router import QueryRouter, edge_similarities

GRAPH_NAME_KEYS = ("name", "sample_id", "graph")
# one [B, N] matmul for cos(q, x_v) beats gathering [C, D] candidate rows when B * N <= this * C
DENSE_COSINE_FACTOR = 16


def graph_name(graph: MemoryGraph) -> str | None:
    """The graph's name from its ``info`` (``name``, ``sample_id`` or ``graph``), if any."""
    for key in GRAPH_NAME_KEYS:
        if isinstance(graph.info.get(key), str):
            return graph.info[key]
    return None


def read_router_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """``torch.load(path, weights_only=True)`` of a router checkpoint; pickled code is refused."""
    try:
        state = torch.load(str(path), map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # the unpickler refuses anything but tensors and plain containers
        raise ValueError(f"{path}: refused to load checkpoint (not a plain-tensor checkpoint): {err}") from None
    if not isinstance(state, dict) or "router" not in state or "router_config" not in state:
        raise ValueError(f"{path}: not a router checkpoint (missing 'router'/'router_config')")
    return state


def _group_by_query(rows: list[Tensor], values: list[Tensor], nq: int) -> list[list[int]]:
    """One list per query row of the hop-ordered ``values``: hop by hop, in order within a hop.

    Each item's place is its query's start, plus that query's items in earlier hops, plus its rank
    among its query's items in hop ``h`` (:func:`~graphmem.policies.batched.rank_in_group`).
    """
    if not rows:
        return [[] for _ in range(nq)]
    ranks = [rank_in_group(r, nq) for r in rows]
    total = torch.stack([c for _, c in ranks]).sum(0)
    offset = torch.cumsum(total, 0) - total
    out = torch.empty(int(total.sum()), dtype=values[0].dtype, device=values[0].device)
    for r, v, (rank, c) in zip(rows, values, ranks):
        out[offset[r] + rank] = v
        offset = offset + c
    return split_list(out.tolist(), total.tolist())


@register_policy("router")
class RouterPolicy(TraversalPolicy):
    """Learned traversal under the shared budget.

    Args:
        checkpoint: path of a checkpoint written by the trainer (default: ``None``).
        router, intent, edge_features: modules to use directly instead of a checkpoint.
        search: ``"greedy"`` or ``"beam"`` (default: ``"greedy"``).
        beam_width: edges kept per hop in beam search; 0 means ``max_entries * top_k_neighbors``
            (default: 0).
        device: ``"cpu"``, ``"cuda"`` or ``"auto"`` (cuda when available) (default: ``"auto"``).
        entry_selector: registered selector name or instance (default: ``"embedding"``).
        intent_provider: supplies intent weights when the intent kind is ``external``.
    """

    def __init__(
        self,
        checkpoint: str | Path | None = None,
        router: QueryRouter | None = None,
        intent: RelationIntent | None = None,
        edge_features: EdgeFeatures | None = None,
        search: str = "greedy",
        beam_width: int = 0,
        device: str = "auto",
        entry_selector="embedding",
        intent_provider: IntentProvider | None = None,
    ):
        if search not in ("greedy", "beam"):
            raise ValueError(f"search {search!r} is not 'greedy' or 'beam'")
        self.device = resolve_device(device)
        if checkpoint is not None:
            state = read_router_checkpoint(checkpoint, self.device)
            router = QueryRouter(**state["router_config"])
            router.load_state_dict(state["router"])
            intent = RelationIntent(**state["intent_config"])
            intent.load_state_dict(state["intent"])
            edge_features = EdgeFeatures.from_state(
                state["edge_names"], state["edges"], state.get("edge_init", "phase1")
            )
        if router is None:
            raise ValueError("RouterPolicy needs a checkpoint or a router module")
        self.router = router.to(self.device).eval()
        self.intent = (
            (intent or RelationIntent(router.dim, kind="uniform", num_relations=router.num_relations))
            .to(self.device)
            .eval()
        )
        self.edge_features = edge_features
        self.search, self.beam_width = search, beam_width
        self.entry_selector = make_entry_selector(entry_selector)
        self.intent_provider = intent_provider

    def _edge_attr(self, graph: MemoryGraph) -> Tensor:
        name = graph_name(graph)
        ef = self.edge_features
        if ef is not None and name is not None and name in ef:
            a, b = ef.span(name)
            if b - a == graph.num_edges:
                return ef.weight[a:b].detach()
        return graph.edge_attr.float()

    def _modulation(self, graph: MemoryGraph, queries: Sequence[Query]) -> tuple[Tensor, Tensor]:
        """Unit query rows ``[B, D]`` and their modulations ``m(q)`` ``[B, R]``."""
        q = query_matrix(graph, queries).to(self.device)
        external = self.intent_provider([x.text for x in queries]) if self.intent.kind == "external" else None
        return q, self.router.modulation(q, self.intent(q, external))

    def _keep(self, s: Tensor, seg: Tensor, qi: Tensor, budget: Budget) -> Tensor:
        """Positions of the kept candidates, best score first (ties: earlier position first)."""
        if self.search == "greedy":
            keep = segment_topk(s, seg, budget.top_k_neighbors)
        else:
            keep = segment_topk(s, qi, self.beam_width or budget.max_entries * budget.top_k_neighbors)
        return keep[torch.argsort(s[keep], descending=True, stable=True)]

    # ------------------------------------------------------------------ reference: one query
    @torch.no_grad()
    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        """Per-query reference of the walk: Python lists and sets over this query's candidate edges."""
        t0 = time.perf_counter()
        entries = validate_entries(graph, self.entry_selector.select(graph, [query], budget)[0], budget)
        q_unit, m = self._modulation(graph, [query])
        x = unit_embeddings(graph).to(self.device)
        etype, eattr = graph.edge_type.to(self.device), self._edge_attr(graph).to(self.device)
        tokens = graph.node_tokens().tolist()
        loaded, scores, traversed, considered = [], [], [], []
        used = depth = 0

        def fits(v: int) -> bool:
            return len(loaded) < budget.max_nodes and used + tokens[v] <= budget.max_tokens

        visited, frontier = set(entries), []
        for v in entries:
            if fits(v):
                loaded.append(v)
                scores.append(0.0)
                frontier.append(v)
                used += tokens[v]
        for hop in range(1, budget.max_hops + 1):
            if not frontier or budget.top_k_neighbors == 0:
                break
            seg, cand, source, target = [], [], [], []
            for j, v in enumerate(frontier):
                out = graph.out_edges(v)
                considered.extend(out.tolist())
                fresh = [(e, u) for e, u in zip(out.tolist(), graph.edge_index[1, out].tolist()) if u not in visited]
                seg.extend([j] * len(fresh))
                cand.extend(e for e, _ in fresh)
                source.extend([v] * len(fresh))
                target.extend(u for _, u in fresh)
            if not cand:
                break
            edges = torch.tensor(cand, dtype=torch.long, device=self.device)
            src, tgt = x[source], x[target]
            qn = q_unit.expand(len(cand), -1)
            cos = (qn * tgt).sum(-1)
            sims = edge_similarities(qn, src, tgt, cos) if self.router.similarities else None
            zeros = torch.zeros(len(cand), dtype=torch.long, device=self.device)
            s = self.router.score(m, eattr[edges], etype[edges], zeros, cos, sims)
            keep = self._keep(s, torch.tensor(seg, device=self.device), zeros, budget).tolist()
            s = s.tolist()
            visited.update(target[k] for k in keep)
            reached, frontier = set(), []
            for k in keep:
                v = target[k]
                if v in reached:  # reached over two edges this hop: loaded once, best edge first
                    continue
                reached.add(v)
                if fits(v):
                    loaded.append(v)
                    scores.append(s[k])
                    traversed.append(cand[k])
                    frontier.append(v)
                    used += tokens[v]
                    depth = hop
        return Retrieval(
            loaded=loaded,
            entries=entries,
            edges_considered=considered,
            edges_traversed=traversed,
            loaded_tokens=used,
            max_depth=depth,
            wall_time_s=time.perf_counter() - t0,
            scores=scores,
        )

    # ------------------------------------------------------------------ batched
    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        """:meth:`select_entries` for all queries (one ``[B, D] x [D, N]`` matmul for the embedding
        selector), then :meth:`traverse_batch`."""
        if not queries:
            return []
        t0 = time.perf_counter()
        entries, cos_all = self.select_entries(graph, queries, budget)
        return share_wall_time(self.traverse_batch(graph, queries, entries, budget, cos_all), t0)

    def retrieve_graphs(
        self, graphs: Sequence[MemoryGraph], queries: Sequence[Sequence[Query]], budget: Budget
    ) -> list[list[Retrieval]]:
        """All queries of all ``graphs`` in one walk over their disjoint union: entries and
        ``cos(q, x_v)`` from each query's own component (:func:`~graphmem.policies.entries.scoped_cosine`),
        each component's edge features as :meth:`retrieve_batch` would read them."""

        def run(batch, flat, scope):
            if type(self.entry_selector) is EmbeddingEntrySelector:
                cos = scoped_cosine(batch, flat, scope.comp, self.device)
                entries = scoped_topk(cos, budget.max_entries, batch, scope.comp)
            else:
                cos, entries = (
                    None,
                    scoped_entry_matrix(self.entry_selector, batch, flat, scope.comp, budget, self.device),
                )
            return self.traverse_batch(batch.graph, flat, entries, budget, cos, scope)

        return retrieve_union(self, graphs, queries, budget, run)

    def select_entries(
        self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget
    ) -> tuple[Tensor, Tensor | None]:
        """``([B, <=max_entries] entry rows, -1 padded; [B, N] cos(q, x_v) or None)`` on the policy's
        device: the embedding selector's score matrix is kept for :meth:`traverse_batch`."""
        if type(self.entry_selector) is EmbeddingEntrySelector and graph.num_nodes:
            cos_all = cosine_matrix(graph, queries, self.device)
            return topk_by_score(cos_all, budget.max_entries, node_id_rank(graph, self.device)), cos_all
        return entry_matrix(self.entry_selector, graph, queries, budget, self.device), None

    @torch.no_grad()
    def traverse_batch(
        self,
        graph: MemoryGraph,
        queries: Sequence[Query],
        entries: Tensor | Sequence[Sequence[int]],
        budget: Budget,
        cos_all: Tensor | None = None,
        scope: Scope | None = None,
    ) -> list[Retrieval]:
        """The walk for all queries at once, from given entry rows (``[B, <=max_entries]``, ``-1`` padded).

        Per hop, every out-edge of every frontier node of every query is one row of a ragged
        candidate list; the router scores them in one call; the kept targets of each query form a
        ``[B, L]`` block admitted under the budget by :func:`greedy_admit`. Visited pairs are held
        as ``query * N + node`` keys, so the walk keeps no ``[B, N]`` state of its own: after entry
        selection its work is bounded by the budget and the out-degrees, not by ``N``. ``cos(q, x_v)`` is read from
        ``cos_all`` (``[B, N]``, e.g. the entry selector's matrix) when given, or computed as one
        matmul when that is cheaper than gathering the candidates' embedding rows.

        With a ``scope`` (``graph`` is a :class:`~graphmem.graph_batch.GraphBatch` union), column ``j``
        of ``cos_all`` row ``b`` is node ``j`` of the query's component, no ``[B, N]`` matmul over the
        union is made, and rows and edge ids are reported relative to each query's component.
        """
        if not isinstance(entries, Tensor):
            entries = pad_rows([validate_entries(graph, e, budget) for e in entries], budget.max_entries)
        dev, nq, n = self.device, len(queries), graph.num_nodes
        entries = entries.to(dev)
        cos_all = None if cos_all is None else cos_all.to(dev)
        q_unit, m = self._modulation(graph, queries)
        x, rowptr, perm, dst, etype, edge_cos, tokens = self._graph_tensors(graph)
        node_off, edge_off, _ = query_spans(graph, nq, scope, dev)
        if scope is None:
            eattr = self._edge_attr(graph).to(dev)
        else:
            eattr = torch.cat([self._edge_attr(g).to(dev) for g in scope.batch.graphs])
        used = torch.zeros(nq, dtype=torch.long, device=dev)
        count = torch.zeros_like(used)
        valid = entries >= 0
        admit, used, count = greedy_admit(tokens[entries.clamp(min=0)], valid, used, count, budget)
        rows, col = admit.nonzero(as_tuple=True)
        nodes = entries[rows, col]
        parts = [(rows, nodes, torch.full_like(nodes, -1), torch.zeros(nodes.numel(), device=dev), 0)]
        visited = (torch.arange(nq, device=dev)[:, None] * n + entries)[valid]
        considered_q, considered_e = [], []
        for hop in range(1, budget.max_hops + 1):
            if nodes.numel() == 0 or budget.top_k_neighbors == 0:
                break
            seg, pos = segments(rowptr, None, nodes)  # CSR positions: each frontier node's edges are contiguous
            qi, edges, tgt = rows[seg], perm[pos], dst[pos]
            considered_q.append(qi)
            considered_e.append(edges)
            fresh = ~torch.isin(qi * n + tgt, visited)
            seg, pos, edges, qi, tgt = seg[fresh], pos[fresh], edges[fresh], qi[fresh], tgt[fresh]
            if edges.numel() == 0:
                break
            if cos_all is None and scope is None and nq * n <= DENSE_COSINE_FACTOR * edges.numel():
                cos_all = q_unit @ x.T
            if cos_all is not None:
                off = node_off[qi]
                cos, cos_src = cos_all[qi, tgt - off], cos_all[qi, nodes[seg] - off]
            else:
                cos, cos_src = (q_unit[qi] * x[tgt]).sum(-1), (q_unit[rows] * x[nodes]).sum(-1)[seg]
            sims = torch.stack([cos_src, cos, edge_cos[pos]], -1) if self.router.similarities else None
            s = self.router.score(m, eattr[edges], etype[pos], qi, cos, sims)
            keep = self._keep(s, seg, qi, budget)
            qi, tgt, edges, s = qi[keep], tgt[keep], edges[keep], s[keep]
            key = qi * n + tgt
            visited = torch.cat([visited, key])
            first = first_occurrence(key).nonzero().flatten()  # one candidate per (query, node): its best edge
            block = ragged_block(qi[first], nq)
            item = first[block.clamp(min=0)]
            admit, used, count = greedy_admit(tokens[tgt[item]], block >= 0, used, count, budget)
            picked = item[admit]  # row-major: per query in score order
            rows, nodes = qi[picked], tgt[picked]
            parts.append((rows, nodes, edges[picked], s[picked], hop))
        if scope is not None:  # report rows and edge ids of each query's own component
            parts = [(r, v - node_off[r], torch.where(e >= 0, e - edge_off[r], -1), sc, h) for r, v, e, sc, h in parts]
            considered_e = [e - edge_off[q] for q, e in zip(considered_q, considered_e)]
            entries = torch.where(entries >= 0, entries - node_off[:, None], -1)
        return self._retrievals(parts, considered_q, considered_e, entries, used, nq)

    @staticmethod
    def _retrievals(parts, considered_q, considered_e, entries: Tensor, used: Tensor, nq: int) -> list[Retrieval]:
        """Retrieval objects from the per-hop loaded ``(rows, nodes, via, score, hop)`` parts, with one
        ``tolist`` per field; stable sorting by query row keeps each query's load order."""
        rows = torch.cat([p[0] for p in parts])
        order = torch.argsort(rows, stable=True)
        counts = torch.bincount(rows, minlength=nq).tolist()
        nodes, via, score = (torch.cat([p[i] for p in parts])[order] for i in (1, 2, 3))
        hop = torch.cat([torch.full_like(p[1], p[4]) for p in parts])
        depth = torch.zeros(nq, dtype=torch.long, device=rows.device).scatter_reduce(0, rows, hop, "amax").tolist()
        moved = via >= 0
        traversed = split_list(via[moved].tolist(), torch.bincount(rows[order][moved], minlength=nq).tolist())
        loaded, scores = split_list(nodes.tolist(), counts), split_list(score.tolist(), counts)
        considered = _group_by_query(considered_q, considered_e, nq)
        ent = [[v for v in row if v >= 0] for row in entries.tolist()]
        used = used.tolist()
        return [
            Retrieval(
                loaded=loaded[i],
                entries=ent[i],
                edges_considered=considered[i],
                edges_traversed=traversed[i],
                loaded_tokens=used[i],
                max_depth=depth[i],
                scores=scores[i],
            )
            for i in range(nq)
        ]

    def _graph_tensors(self, graph: MemoryGraph) -> tuple[Tensor, ...]:
        """Query-independent tensors of ``graph`` on the policy's device, cached on the graph:
        ``(x, rowptr, perm, dst, edge_type, edge_cos, tokens)`` with the per-edge arrays in CSR order
        (position ``rowptr[v] + j`` is the ``j``-th out-edge of ``v``), so a frontier node's edges are
        read contiguously."""

        def build():
            rowptr, perm = graph.csr()
            per_edge = (graph.edge_index[1][perm], graph.edge_type[perm], edge_cosines(graph)[perm])
            return tuple(
                t.to(self.device) for t in (unit_embeddings(graph), rowptr, perm, *per_edge, graph.node_tokens())
            )

        return graph.cached(f"policies.router_tensors:{self.device}", build, (graph.embeddings, graph.edge_index))


def first_occurrence(key: Tensor) -> Tensor:
    """``[K]`` bool: whether each key is the first of its value in order."""
    order = torch.argsort(key, stable=True)
    sorted_key = key[order]
    first = torch.ones_like(key, dtype=torch.bool)
    first[order[1:]] = sorted_key[1:] != sorted_key[:-1]
    return first


def edge_cosines(graph: MemoryGraph, chunk: int = 1 << 18) -> Tensor:
    """``[E]`` ``cos(x_i, x_j)`` of every edge ``i -> j``, cached while the embeddings and edges are unchanged."""

    def build():
        x, (src, dst) = unit_embeddings(graph), graph.edge_index
        return torch.cat(
            [(x[src[a : a + chunk]] * x[dst[a : a + chunk]]).sum(-1) for a in range(0, graph.num_edges, chunk)]
            or [torch.empty(0)]
        )

    return graph.cached("policies.edge_cosines", build, (graph.embeddings, graph.edge_index))
