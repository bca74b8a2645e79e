"""The learned router walking the graph at question time (HAGE §3, with the walk done by the model).

Two walks, chosen by what the policy is given:

**The budget-aware walk** (a :class:`models.walk_scorer.WalkScorer`, what ``scripts/train.py``
trains): :func:`rl.walk.walk`, greedy. From the selector's entries (up to ``max_entries``, kept
or passed over by the scorer), the walk repeatedly loads the best open candidate ``u -> v`` of
the whole frontier (``u`` loaded, ``v`` not; at most ``top_k_neighbors`` children per node,
depth ``<= max_hops``, node and token caps) until its stop head or the budget ends it, with

    s_uv(q) = cos(q, x_v) + ι_qv + w_uv(q, e_uv)

(formulas in :mod:`models.walk_scorer`; ``e_uv`` from the inductive edge encoder, so a trained
scorer applies to graphs it never saw). The episode trained is this walk, sampled.

**HAGE's hop-level walk** (a :class:`models.router.QueryRouter`, trained by :mod:`rl.reinforce`).
From the shared entry nodes (:class:`~graphmem.policies.selectors.EmbeddingEntrySelector`), the
policy expands hop by hop. For a frontier node ``v`` and query ``q`` every out-edge ``v -> u`` to
an unvisited ``u`` is scored by the :class:`models.router.QueryRouter`

    s_vu(q) = cos(q, x_u) + w_vu(q)

``greedy`` (default) keeps the ``budget.top_k_neighbors`` best edges of each frontier node;
``beam`` keeps the ``beam_width`` best edges of the whole hop. Kept targets are loaded in
descending score under the node and token budget (a node that would break the token budget is
skipped, as :func:`~graphmem.policies.batched.load_under_budget` does), become visited, and the
loaded ones form the next frontier, for at most ``budget.max_hops`` hops. All queries of a batch are scored together.

Edge features: those of a given :class:`models.edge_features.EdgeFeatures` when it holds the
graph (matched by name and edge count), else the graph's own ``edge_attr``. The policy sees the
query and the budget only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from graphmem.checkpoint import require_checkpoint
from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import csr_positions, greedy_admit, ragged_block, segment_topk
from graphmem.policies.ranking import query_matrix
from graphmem.policies.selectors import SelectorSpec, make_entry_selector
from graphmem.policies.tables import first_occurrence, unit_embeddings
from graphmem.policies.types import Query, merge_by_query
from models.edge_encoder import pair_table
from models.edge_features import EdgeFeatures
from models.intent import IntentProvider, RelationIntent
from models.router import QueryRouter
from models.walk_scorer import WalkScorer
from rl.walk import walk, walk_tables, walk_trace

# one [B, N] matmul for cos(q, x_v) beats gathering [C, D] candidate rows when B * N <= this * C
DENSE_COSINE_FACTOR = 16


def read_router_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """``torch.load(path, weights_only=True)`` of a router checkpoint; pickled code is refused."""
    require_checkpoint(path)
    try:
        state = torch.load(str(path), map_location=map_location, weights_only=True)
    except Exception as err:  # the unpickler refuses anything but tensors and plain containers
        raise ValueError(f"{path}: refused to load checkpoint (not a plain-tensor checkpoint): {err}") from None
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a router checkpoint (not a dict)")
    if state.get("kind") == "walk":
        if "scorer" not in state:
            raise ValueError(f"{path}: walk checkpoint without its 'scorer'")
    elif "router" not in state or "router_config" not in state:
        raise ValueError(
            f"{path}: not a router checkpoint (missing 'router'/'router_config', and not a walk checkpoint)"
        )
    return state


@register_policy("router")
class RouterPolicy(TraversalPolicy):
    """Learned traversal under the shared budget.

    Args:
        checkpoint: path of a checkpoint written by a trainer: :mod:`rl.walk_trainer` (the
            budget-aware walk) or :mod:`rl.reinforce` (HAGE's walk) (default: ``None``).
        scorer: a :class:`~models.walk_scorer.WalkScorer` to walk with, instead of a checkpoint.
        router, intent, edge_features: HAGE's modules to use directly instead of a checkpoint.
        search: ``"greedy"`` or ``"beam"`` (default: ``"greedy"``).
        beam_width: edges kept per hop in beam search; 0 means ``max_entries * top_k_neighbors``
            (default: 0).
        device: ``"cpu"``, ``"cuda"`` or ``"auto"`` (cuda when available) (default: ``"auto"``).
        entry_selector: registered selector name or instance (default: ``"embedding"``).
        intent_provider: supplies intent weights when the intent kind is ``external``.
        strict_split: refuse, rather than warn about, graph sets holding graphs the checkpoint
            was trained or selected on (:func:`graphmem.checkpoint.check_inputs`) (default: ``False``).

    ``search`` and ``beam_width`` apply to HAGE's walk; the budget-aware walk is best-first.
    """

    def __init__(
        self,
        checkpoint: str | Path | None = None,
        scorer: WalkScorer | None = None,
        router: QueryRouter | None = None,
        intent: RelationIntent | None = None,
        edge_features: EdgeFeatures | None = None,
        search: str = "greedy",
        beam_width: int = 0,
        device: str = "auto",
        entry_selector: SelectorSpec = "embedding",
        intent_provider: IntentProvider | None = None,
        strict_split: bool = False,
    ):
        if search not in ("greedy", "beam"):
            raise ValueError(f"search {search!r} is not 'greedy' or 'beam'")
        self.device = resolve_device(device)
        self.entry_selector = make_entry_selector(entry_selector)
        state = read_router_checkpoint(checkpoint, self.device) if checkpoint is not None else None
        self.checkpoint_path, self.strict_split = checkpoint, bool(strict_split)
        self.trained_inputs = None if state is None else state.get("inputs")
        if state is not None and state.get("kind") == "walk":
            scorer = WalkScorer.from_checkpoint(state["scorer"])
        self.scorer = None if scorer is None else scorer.to(self.device).eval()
        if self.scorer is not None:
            return
        if state is not None:
            router = QueryRouter(**state["router_config"])
            router.load_state_dict(state["router"])
            intent = RelationIntent(**state["intent_config"])
            intent.load_state_dict(state["intent"])
            edge_features = EdgeFeatures.from_state(
                state["edge_names"], state["edges"], state.get("edge_init", "phase1")
            )
        if router is None:
            raise ValueError("RouterPolicy needs a checkpoint, a walk scorer or a router module")
        self.router = router.to(self.device).eval()
        self.intent = (
            (intent or RelationIntent(router.dim, kind="uniform", num_relations=router.num_relations))
            .to(self.device)
            .eval()
        )
        self.edge_features = edge_features
        self.search, self.beam_width = search, beam_width
        self.intent_provider = intent_provider

    def _edge_attr(self, graph: MemoryGraph) -> Tensor:
        name = graph.name
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

    def traverse(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        """The budget-aware walk (with a scorer) or HAGE's hop-level walk, for all queries at once."""
        if self.scorer is not None:
            return self._best_first(scope, entries, budget)
        return self._hop_level(scope, entries, budget)

    def _best_first(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        """:func:`rl.walk.walk` (greedy) over ``scope.graph``; the considered edges are the out-edges
        of every loaded node the walk could expand (depth below ``max_hops``)."""
        graph, dev = scope.graph, scope.device
        tables = self._walk_tables(scope)
        q = query_matrix(graph, scope.queries).to(dev)
        ep = walk(tables, self.scorer, q, entries, budget)
        tr = walk_trace(ep, tables, budget)
        rowptr, perm = graph.csr()
        seg, pos = csr_positions(rowptr.to(dev), tr.expanded_node)
        considered = (tr.expanded_query[seg], perm.to(dev)[pos])
        moved = tr.edge >= 0
        traversed = (tr.query[moved], tr.edge[moved])
        return RetrievalBatch(entries, tr.tokens, tr.query, tr.node, tr.depth, considered, traversed, tr.score)

    def _walk_tables(self, scope: Scope):
        """:class:`rl.walk.WalkTables` of ``scope.graph`` (cached on it) with the rows of the scorer's
        per-edge residual table for the graphs it holds (by name and edge count)."""
        graph, residual = scope.graph, self.scorer.edges.residual

        def build():
            return walk_tables(unit_embeddings(graph), graph.node_tokens(), pair_table(graph), device=self.device)

        tables = graph.cached(
            f"policies.walk_tables:{self.device}",
            build,
            (graph.embeddings, graph.edge_index, graph.edge_type, graph.edge_attr_init, graph.timestamps),
        )
        if residual is None:
            return tables
        parts = scope.batch.graphs
        rows = residual.edge_rows([g.name for g in parts], [g.num_edges for g in parts]).to(self.device)
        return walk_tables(tables.x, tables.tokens, tables.pairs, rows)

    def _hop_level(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        """HAGE's walk for all queries at once.

        Per hop, every out-edge of every frontier node of every query is one row of a ragged
        candidate list; the router scores them in one call; the kept targets of each query form a
        ``[B, L]`` block admitted under the budget by :func:`greedy_admit`. Visited pairs are held
        as ``query * N + node`` keys, so the walk keeps no ``[B, N]`` state of its own: after entry
        selection its work is bounded by the budget and the out-degrees, not by ``N``.
        ``cos(q, x_v)`` is read from the scope's cosine matrix when the entry selector computed it,
        or, on a single graph, computed as one matmul when that is cheaper than gathering the
        candidates' embedding rows. Each graph's edge features are read as :meth:`_edge_attr` gives them.
        """
        graph, dev, nq, n = scope.graph, scope.device, len(scope.queries), scope.graph.num_nodes
        cos_all = scope.cosine(compute=False)
        q_unit, m = self._modulation(graph, scope.queries)
        x, rowptr, perm, dst, etype, edge_cos, tokens = self._graph_tensors(graph)
        node_off = scope.node_offset
        attrs = [self._edge_attr(g).to(dev) for g in scope.batch.graphs]
        eattr = attrs[0] if len(attrs) == 1 else torch.cat(attrs)  # one graph: no [E, R] copy per call
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
            seg, pos = csr_positions(rowptr, nodes)  # CSR positions: each frontier node's edges are contiguous
            qi, edges, tgt = rows[seg], perm[pos], dst[pos]
            considered_q.append(qi)
            considered_e.append(edges)
            fresh = ~torch.isin(qi * n + tgt, visited)
            seg, pos, edges, qi, tgt = seg[fresh], pos[fresh], edges[fresh], qi[fresh], tgt[fresh]
            if edges.numel() == 0:
                break
            if cos_all is None and scope.num_graphs == 1 and nq * n <= DENSE_COSINE_FACTOR * edges.numel():
                cos_all = scope.cosine()
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
        # each hop's items are grouped by query: merged, a query's items come hop by hop
        parts = [(r, v, e, sc, torch.full_like(v, h)) for r, v, e, sc, h in parts]
        rows, nodes, via, score, depth = merge_by_query(parts, nq)
        moved = via >= 0
        considered = merge_by_query(list(zip(considered_q, considered_e)), nq) if considered_q else None
        return RetrievalBatch(entries, used, rows, nodes, depth, considered, (rows[moved], via[moved]), score)

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


def edge_cosines(graph: MemoryGraph, chunk: int = 1 << 18) -> Tensor:
    """``[E]`` ``cos(x_i, x_j)`` of every edge ``i -> j``, cached while the embeddings and edges are unchanged."""

    def build():
        x, (src, dst) = unit_embeddings(graph), graph.edge_index
        return torch.cat(
            [(x[src[a : a + chunk]] * x[dst[a : a + chunk]]).sum(-1) for a in range(0, graph.num_edges, chunk)]
            or [torch.empty(0)]
        )

    return graph.cached("policies.edge_cosines", build, (graph.embeddings, graph.edge_index))
