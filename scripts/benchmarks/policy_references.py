"""Per-query reference implementations of the policies: the test oracles of the batched paths.

:data:`REFERENCES` maps a registered policy name to ``reference(policy, graph, query, budget) ->
Retrieval``: the policy's algorithm for one query in plain Python (lists, sets, sorts), reading
the policy's settings and learned modules. The parity tests (``test_policies.py`` and the
policy-specific ones) require ``policy.retrieve_batch`` to give exactly these retrievals, trace
included, for every registered policy; a new policy registers its oracle with :func:`reference`.

:func:`make_test_policy` builds any registered policy for a test, with small untrained modules for
the constructor parameters that need one (a walk scorer, a reader). ``scripts/benchmark.py`` times
these as the per-query baseline of every policy's batched code.
"""

from __future__ import annotations

import inspect
from collections import deque
from typing import Callable, Sequence

import torch

from graphmem.core import Budget, Query, Retrieval
from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import node_tokens
from graphmem.index.lexical import tokenize
from graphmem.index.lexical_features import lexical_inputs
from graphmem.policies import POLICIES, TraversalPolicy, make_policy
from graphmem.policies.batched import load_under_budget
from graphmem.policies.ppr import hop_distance, transition_matrix
from graphmem.policies.ranking import cosine_matrix, query_matrix
from graphmem.policies.selectors import validate_entries
from graphmem.policies.tables import node_id_rank
from graphmem.policies.uniform_bfs import _signed, neighbor_priority, query_seed
from graphmem.policies.walk import Candidates, graph_walk_tables
from rl.common.seeding import seed_everything

Reference = Callable[[TraversalPolicy, MemoryGraph, Query, Budget], Retrieval]
REFERENCES: dict[str, Reference] = {}


def reference(name: str) -> Callable[[Reference], Reference]:
    """Register ``fn`` as the reference of policy ``name``."""

    def wrap(fn: Reference) -> Reference:
        REFERENCES[name] = fn
        return fn

    return wrap


def _scorer(dim: int, relations: int):
    from models.walk_scorer import ScorerConfig, WalkScorer  # lazily: torch_geometric takes seconds to import

    return WalkScorer(ScorerConfig(dim=dim, hidden=8))


def _reader(dim: int, relations: int):
    from models.gnn_reader import GNNReader  # lazily: torch_geometric takes seconds to import

    return GNNReader(input_dim=dim, num_relations=relations)


# Untrained modules for constructor parameters that need a model, by parameter name.
MODULES = {"scorer": _scorer, "reader": _reader}


def make_test_policy(name: str, dim: int = 16, relations: int = 4, **kwargs) -> TraversalPolicy:
    """:func:`~graphmem.policies.make_policy` of ``name`` on the CPU, with seeded untrained modules for the
    :data:`MODULES` parameters."""
    cls = POLICIES[name]
    params = inspect.signature(cls).parameters
    seed_everything(0)
    for param, factory in MODULES.items():
        if param in params and param not in kwargs:
            kwargs[param] = factory(dim, relations)
    if "device" in params:
        kwargs.setdefault("device", "cpu")
    return make_policy(name, **kwargs)


def entries_of(policy: TraversalPolicy, graph: MemoryGraph, query: Query, budget: Budget) -> list[int]:
    """The policy's entry selector on this query alone, validated."""
    return validate_entries(graph, policy.entry_selector.select(graph, [query], budget)[0], budget)


# ---------------------------------------------------------------------------- Algorithm 1 and its variants
# expand(v) -> (ids of every out-edge inspected, [(neighbor row, edge id), ...] to push in order)
Expand = Callable[[int], tuple[list[int], list[tuple[int, int]]]]


def bounded_bfs(graph: MemoryGraph, entries: Sequence[int], budget: Budget, expand: Expand) -> Retrieval:
    """GraphMemory Algorithm 1's FIFO loop with a pluggable neighbor choice ``expand``.

    The trace lists every inspected out-edge and, for each loaded non-entry node, the edge whose
    push loaded it.
    """
    tokens = node_tokens(graph).tolist()
    queue: deque[tuple[int, int, int]] = deque((v, 0, -1) for v in entries)
    loaded: list[int] = []
    visited: set[int] = set()
    considered: list[int] = []
    traversed: list[int] = []
    used = max_depth = 0
    while queue and len(loaded) < budget.max_nodes:
        v, d, via = queue.popleft()
        if v in visited:
            continue
        visited.add(v)
        if used + tokens[v] > budget.max_tokens:
            continue
        loaded.append(v)
        used += tokens[v]
        max_depth = max(max_depth, d)
        if via >= 0:
            traversed.append(via)
        if d < budget.max_hops:
            inspected, chosen = expand(v)
            considered.extend(inspected)
            queue.extend((u, d + 1, e) for u, e in chosen)
    return Retrieval(loaded, list(entries), considered, traversed, used, max_depth)


def distinct_targets(graph: MemoryGraph, v: int) -> dict[int, list[int]]:
    """Out-neighbor ``u`` of ``v`` -> the ids of the edges ``v -> u`` (ascending)."""
    out: dict[int, list[int]] = {}
    for e in graph.out_edges(v).tolist():
        out.setdefault(int(graph.edge_index[1, e]), []).append(e)
    return out


@reference("beta_bfs")
def beta_bfs(policy, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
    """Top-k distinct neighbors by the posterior mean of their heaviest edge, ties by target id."""
    ids, w = graph.node_ids, graph.posterior_mean.tolist()

    def expand(v: int):
        best = {u: max(es, key=lambda e: (w[e], -e)) for u, es in distinct_targets(graph, v).items()}
        ranked = sorted(best, key=lambda u: (-w[best[u]], ids[u]))[: budget.top_k_neighbors]
        return graph.out_edges(v).tolist(), [(u, best[u]) for u in ranked]

    return bounded_bfs(graph, entries_of(policy, graph, query, budget), budget, expand)


@reference("uniform_bfs")
def uniform_bfs(policy, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
    """The ``min(k, deg)`` distinct neighbors with the smallest hashed priorities (lowest edge id kept)."""
    seed, ids = _signed(query_seed(policy.seed, query.qid)), graph.node_ids

    def expand(v: int):
        neigh = sorted(((u, es[0]) for u, es in distinct_targets(graph, v).items()), key=lambda item: ids[item[0]])
        keys = neighbor_priority(
            torch.full((len(neigh),), seed),
            torch.full((len(neigh),), v),
            torch.tensor([u for u, _ in neigh], dtype=torch.long),
        ).tolist()
        picks = sorted(range(len(neigh)), key=lambda i: (keys[i], i))[: budget.top_k_neighbors]
        return graph.out_edges(v).tolist(), [neigh[i] for i in picks]

    return bounded_bfs(graph, entries_of(policy, graph, query, budget), budget, expand)


# ---------------------------------------------------------------------------- ranking policies
@reference("dense_topk")
def dense_topk(policy, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
    """Every node by cosine (ties by string id), loaded under the budget."""
    scores = cosine_matrix(graph, [query])[0].tolist()
    ranked = sorted(range(graph.num_nodes), key=lambda v: (-scores[v], graph.node_ids[v]))
    loaded, used = load_under_budget(graph, ranked, budget)
    return Retrieval(loaded, loaded[: budget.max_entries], loaded_tokens=used, scores=[scores[v] for v in loaded])


def okapi(docs: list[list[str]], query: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 with Lucene's IDF of the distinct terms of ``query`` to every token list of ``docs``, term by term."""
    import math

    n, avgdl = len(docs), (sum(map(len, docs)) / max(len(docs), 1)) or 1.0
    out = []
    for d in docs:
        s = 0.0
        for t in set(query):
            df, tf = sum(t in x for x in docs), d.count(t)
            if df and tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return out


def hand_bm25(graph: MemoryGraph, text: str, k1: float, b: float) -> list[float]:
    """:func:`okapi` of ``text`` to every node text of ``graph``, both tokenized."""
    return okapi([tokenize(t) for t in graph.texts], tokenize(text), k1, b)


@reference("bm25")
def bm25(policy, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
    """Every node by BM25 (ties, the nodes sharing no term among them, by string id), loaded under the budget."""
    scores = hand_bm25(graph, query.text, policy.k1, policy.b)
    ranked = sorted(range(graph.num_nodes), key=lambda v: (-scores[v], graph.node_ids[v]))
    loaded, used = load_under_budget(graph, ranked, budget)
    return Retrieval(loaded, loaded[: budget.max_entries], loaded_tokens=used, scores=[scores[v] for v in loaded])


@reference("hybrid")
def hybrid(policy, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
    """The top ``candidates`` by cosine and by BM25 (matching nodes only), fused by reciprocal rank."""
    f, ids = policy.fusion, graph.node_ids
    cos = cosine_matrix(graph, [query])[0].tolist()
    lex = hand_bm25(graph, query.text, f.k1, f.b)
    depth = f.candidates or budget.max_nodes
    dense = sorted(range(graph.num_nodes), key=lambda v: (-cos[v], ids[v]))[:depth]
    lexical = sorted((v for v in range(graph.num_nodes) if lex[v] > 0), key=lambda v: (-lex[v], ids[v]))
    fused: dict[int, float] = {}
    for ranking, w in zip((dense, lexical[:depth]), f.weights):
        for i, v in enumerate(ranking):
            fused[v] = fused.get(v, 0.0) + w / (f.k + i + 1)
    ranked = sorted(fused, key=lambda v: (-fused[v], ids[v]))
    loaded, used = load_under_budget(graph, ranked, budget)
    return Retrieval(loaded, loaded[: budget.max_entries], loaded_tokens=used, scores=[fused[v] for v in loaded])


@reference("ppr")
def ppr(policy, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
    """One restart column; nodes within ``max_hops`` with ``p > 0`` by decreasing ``p`` (ties by id).
    Edges considered: out-edges of loaded nodes; traversed: those between two loaded nodes."""
    entries = entries_of(policy, graph, query, budget)
    restart = torch.zeros(graph.num_nodes, 1, dtype=torch.float64)
    if entries:
        restart[torch.tensor(entries), 0] = 1.0 / len(entries)
    p = policy.scores(graph, restart)[:, 0]
    pt, _ = transition_matrix(graph, policy.relation_weights, policy.use_posterior)
    dist = hop_distance(pt, restart, budget.max_hops)[:, 0]
    idx = ((p > 0) & (dist <= budget.max_hops)).nonzero().flatten().tolist()
    ranked = sorted(idx, key=lambda v: (-float(p[v]), graph.node_ids[v]))
    loaded, used = load_under_budget(graph, ranked, budget)
    considered = [e for v in loaded for e in graph.out_edges(v).tolist()]
    members = set(loaded)
    return Retrieval(
        loaded,
        entries,
        considered,
        [e for e in considered if int(graph.edge_index[1, e]) in members],
        used,
        max((int(dist[v]) for v in loaded), default=0),
        scores=[float(p[v]) for v in loaded],
    )


# ---------------------------------------------------------------------------- learned walks
@reference("router")
def router(policy, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
    """The best-first walk of :mod:`graphmem.policies.walk` for one query, with a Python list as its pool.

    The pool holds the entries (in entry order), then the out-pairs of every loaded node that may
    still grow (depth below ``max_hops``), in load order and pair order, each scored once by the
    policy's scorer when pushed. A step loads the open candidate with the highest score (the first
    in pool order on ties) unless the stop head's logit is higher; a candidate is open when its
    target is not loaded, its parent has fewer than ``top_k_neighbors`` children and its target
    fits the token budget.
    """
    dev, scorer = policy.device, policy.scorer
    entries = entries_of(policy, graph, query, budget)
    residual = scorer.edges.residual
    rows = None if residual is None else residual.edge_rows([graph.name], [graph.num_edges])
    tables = graph_walk_tables(graph, rows).to(dev)
    q = query_matrix(graph, [query]).to(dev)
    given = (lexical_inputs([graph], [[query.text]], dev),) if scorer.config.lexical else ()
    ctx = scorer.prepare(tables, q, torch.tensor([entries], dtype=torch.long, device=dev).reshape(1, -1), *given)
    rowptr, dst, pair_edge = (t.tolist() for t in (tables.pairs.rowptr, tables.pairs.dst, tables.pairs.edge))
    tokens = node_tokens(graph).tolist()

    def scored(parent: int, children: list[int], pairs: list[int], depth: int, order: list[int]) -> list[float]:
        def t(v):
            return torch.tensor(v, dtype=torch.long, device=dev)

        cand = Candidates(
            t([0] * len(children)),
            t([parent] * len(children)),
            t(children),
            t(pairs),
            t([depth] * len(children)),
            t(order),
        )
        with torch.no_grad():
            return scorer.score(ctx, cand).tolist()

    # pool rows: [node, parent slot (-1: entry), pair (-1: entry), depth, score]
    pool = [
        [v, -1, -1, 0, s]
        for v, s in zip(entries, scored(-1, entries, [-1] * len(entries), 0, list(range(len(entries)))))
    ]
    loaded, depths, scores, traversed, considered, children = [], [], [], [], [], []
    used = 0
    while len(loaded) < budget.max_nodes:
        best = _best_open(pool, loaded, children, used, tokens, budget)
        if best is None:
            break
        with torch.no_grad():
            stop = scorer.stop_logit(
                ctx, torch.tensor([pool[best][4]], device=dev), torch.tensor([len(loaded)], device=dev), budget
            )
        if stop is not None and float(stop[0]) > pool[best][4]:
            break
        v, slot, pair, depth, s = pool[best]
        if slot >= 0:
            children[slot] += 1
            traversed.append(pair_edge[pair])
        loaded.append(v)
        depths.append(depth)
        scores.append(s)
        children.append(0)
        used += tokens[v]
        if depth < budget.max_hops and budget.top_k_neighbors > 0:
            considered.extend(graph.out_edges(v).tolist())
            pids = list(range(rowptr[v], rowptr[v + 1]))
            if pids:
                kids = [dst[p] for p in pids]
                pos = len(loaded) - 1
                for p, u, su in zip(pids, kids, scored(v, kids, pids, depth + 1, [pos] * len(pids))):
                    pool.append([u, pos, p, depth + 1, su])
    return Retrieval(loaded, entries, considered, traversed, used, max(depths, default=0), scores=scores)


def _best_open(pool: list[list], loaded: list[int], children: list[int], used: int, tokens: list[int], budget: Budget):
    """Index of the open pool row with the highest score (the first in pool order on ties), None when none is open:
    its target not loaded, its parent slot under ``top_k_neighbors`` children, its tokens within the budget."""
    best = None
    for i, (v, slot, _, _, s) in enumerate(pool):
        if v in loaded or (slot >= 0 and children[slot] >= budget.top_k_neighbors):
            continue
        if used + tokens[v] > budget.max_tokens or (best is not None and s <= pool[best][4]):
            continue
        best = i
    return best


def walk_and_load(graph: MemoryGraph, entries: list[int], scores: torch.Tensor, budget: Budget) -> Retrieval:
    """The ``gnn`` walk for one query (``scores`` ``[N]``): for ``max_hops`` depths each frontier node
    admits its ``top_k_neighbors`` best unreached out-neighbors (no self-loops; ties by id), then the
    reached nodes by score are loaded under the budget."""
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
        loaded,
        list(entries),
        considered,
        [parent_edge[v] for v in loaded if v in parent_edge],
        tokens,
        max((depth[v] for v in loaded), default=0),
        scores=[score_list[v] for v in loaded],
    )


@reference("gnn")
def gnn(policy, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
    """The reader on this query alone, then :func:`walk_and_load`."""
    entries = entries_of(policy, graph, query, budget)
    return walk_and_load(graph, entries, policy.score(graph, [query], [entries])[0], budget)
