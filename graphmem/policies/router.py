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
from graphmem.policies.base import Budget, Query, Retrieval, TraversalPolicy, register_policy
from graphmem.policies.batched import segment_topk, segments, split_list
from graphmem.policies.entries import make_entry_selector, query_matrix, unit_embeddings
from models.edge_features import EdgeFeatures
from models.intent import IntentProvider, RelationIntent
from models.router import QueryRouter, edge_similarities

GRAPH_NAME_KEYS = ("name", "sample_id", "graph")


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
    """Split hop-ordered ``values`` into one list per query row (order within a query kept)."""
    if not rows:
        return [[] for _ in range(nq)]
    row, val = torch.cat(rows), torch.cat(values)
    order = torch.argsort(row, stable=True)
    return split_list(val[order].tolist(), torch.bincount(row, minlength=nq).tolist())


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

    def __init__(self, checkpoint: str | Path | None = None, router: QueryRouter | None = None,
                 intent: RelationIntent | None = None, edge_features: EdgeFeatures | None = None,
                 search: str = "greedy", beam_width: int = 0, device: str = "auto", entry_selector="embedding",
                 intent_provider: IntentProvider | None = None):
        if search not in ("greedy", "beam"):
            raise ValueError(f"search {search!r} is not 'greedy' or 'beam'")
        self.device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                                   ("cpu" if device == "auto" else device))
        if checkpoint is not None:
            state = read_router_checkpoint(checkpoint, self.device)
            router = QueryRouter(**state["router_config"])
            router.load_state_dict(state["router"])
            intent = RelationIntent(**state["intent_config"])
            intent.load_state_dict(state["intent"])
            edge_features = EdgeFeatures.from_state(state["edge_names"], state["edges"], state.get("edge_init", "phase1"))
        if router is None:
            raise ValueError("RouterPolicy needs a checkpoint or a router module")
        self.router = router.to(self.device).eval()
        self.intent = (intent or RelationIntent(router.dim, kind="uniform", num_relations=router.num_relations)).to(self.device).eval()
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

    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        return self.retrieve_batch(graph, [query], budget)[0]

    @torch.no_grad()
    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        if not queries:
            return []
        t0, dev = time.perf_counter(), self.device
        entries = self.entry_selector.select(graph, queries, budget)
        nq = len(queries)
        q = query_matrix(graph, queries).to(dev)
        external = self.intent_provider([x.text for x in queries]) if self.intent.kind == "external" else None
        m = self.router.modulation(q, self.intent(q, external))
        x = unit_embeddings(graph).to(dev)
        rowptr, perm = (t.to(dev) for t in graph.csr())
        src_all, dst = graph.edge_index.to(dev)
        etype, eattr = graph.edge_type.to(dev), self._edge_attr(graph).to(dev)
        q_unit = torch.nn.functional.normalize(q, dim=-1)
        tokens = graph.node_tokens().tolist()
        loaded = [[] for _ in range(nq)]
        used, depth = [0] * nq, [0] * nq
        traversed, scores = [[] for _ in range(nq)], [[] for _ in range(nq)]
        considered_q, considered_e = [], []  # per hop: query row and edge id of every inspected out-edge
        visited = torch.zeros(nq, graph.num_nodes, dtype=torch.bool, device=dev)

        def try_load(i: int, v: int, score: float) -> bool:
            if len(loaded[i]) >= budget.max_nodes or used[i] + tokens[v] > budget.max_tokens:
                return False
            loaded[i].append(v)
            used[i] += tokens[v]
            scores[i].append(score)
            return True

        frontier_q, frontier_v = [], []
        for i, ent in enumerate(entries):
            if ent:
                visited[i, torch.tensor(ent, device=dev)] = True
            for v in ent:
                if try_load(i, v, 0.0):
                    frontier_q.append(i)
                    frontier_v.append(v)
        for hop in range(1, budget.max_hops + 1):
            if not frontier_v or budget.top_k_neighbors == 0:
                break
            fq = torch.tensor(frontier_q, dtype=torch.long, device=dev)
            seg, edges = segments(rowptr, perm, torch.tensor(frontier_v, dtype=torch.long, device=dev))
            qi, tgt = fq[seg], dst[edges]
            considered_q.append(qi)
            considered_e.append(edges)
            fresh = ~visited[qi, tgt]
            seg, edges, qi, tgt = seg[fresh], edges[fresh], qi[fresh], tgt[fresh]
            if edges.numel() == 0:
                break
            qn, src = q_unit[qi], src_all[edges]
            cos = (qn * x[tgt]).sum(-1)
            sims = edge_similarities(qn, x[src], x[tgt], cos) if self.router.similarities else None
            s = self.router.score(m, eattr[edges], etype[edges], qi, cos, sims)
            if self.search == "greedy":
                keep = segment_topk(s, seg, budget.top_k_neighbors)
            else:
                keep = segment_topk(s, qi, self.beam_width or budget.max_entries * budget.top_k_neighbors)
            keep = keep[torch.argsort(s[keep], descending=True, stable=True)]
            visited[qi[keep], tgt[keep]] = True  # reached: loaded now or skipped for good
            frontier_q, frontier_v, seen = [], [], set()
            for i, v, e, sc in zip(qi[keep].tolist(), tgt[keep].tolist(), edges[keep].tolist(), s[keep].tolist()):
                if (i, v) in seen:  # reached over two edges this hop: loaded once, best edge first
                    continue
                seen.add((i, v))
                if try_load(i, v, sc):
                    traversed[i].append(e)
                    depth[i] = hop
                    frontier_q.append(i)
                    frontier_v.append(v)
        considered = _group_by_query(considered_q, considered_e, nq)
        per_query = (time.perf_counter() - t0) / nq
        return [Retrieval(loaded=loaded[i], entries=list(entries[i]), edges_considered=considered[i],
                          edges_traversed=traversed[i], loaded_tokens=used[i], max_depth=depth[i],
                          wall_time_s=per_query, scores=scores[i]) for i in range(nq)]
