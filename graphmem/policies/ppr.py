"""Personalized PageRank from the entry nodes over the typed, evidence-weighted graph.

``method: push`` (the default) computes it by forward push with residual threshold ``epsilon``
(:mod:`graphmem.policies.push`: work per query at most ``1 / (alpha epsilon)`` CSR rows, whatever
the graph's size; estimate ``hat p = p + alpha r`` with ``0 <= pi_v - hat p_v <= (1 - alpha) ||r||_1``
and ``||r||_1 < epsilon sum_{u: r_u > 0} d_u``).
``method: power`` runs the global power iteration below, over every edge of the graph: the oracle.

Edge strength ``a_e = rho_{type(e)} * w_e`` with relation weight ``rho`` and posterior mean
``w_e = (S_e + 1) / (S_e + F_e + 2)`` (GraphMemory eq. 19; ``w_e = 1`` if ``use_posterior`` is
off). The row-stochastic transition is

    P[u, v] = sum_{e: u->v} a_e / sum_{e: u->*} a_e,

and a node with no positive out-strength is dangling (set ``D``). With restart vector ``r``
uniform over the query's entry nodes and restart probability ``alpha``, power iteration runs

    p <- (1 - alpha) P^T p + ((1 - alpha) * sum_{u in D} p_u + alpha) r,     p_0 = r,

i.e. dangling mass returns to the restart vector, so every iterate sums to one and the fixed
point solves ``(I - (1 - alpha)(P^T + r 1_D^T)) p = alpha r``. Each query column stops when
``||p_{t+1} - p_t||_1 < tol`` (or after ``max_iter``). Nodes within ``max_hops`` of an entry and
with ``p > 0`` are then loaded by decreasing ``p`` (ties by string id) under the budget;
``top_k_neighbors`` does not apply. With ``push`` the candidates are the touched nodes (``hat p > 0``)
within ``max_hops`` (a bounded breadth-first ball), ranked by ``hat p`` and loaded the same way.

Queries are batched as ``[N, B]`` column blocks with ``N * B <= max_block_elements``. A column's
PPR vector does not depend on the other columns of its block, bit for bit: every sum over nodes
is a COO product (``torch.sparse.mm``), which accumulates each output entry over the nonzeros
in a fixed order with one axpy across the columns. The dangling mass is an extra row of the
propagation operator and the L1 change a product with a row of ones, never ``Tensor.sum``,
whose reduction order changes with the number of columns (COO, not CSR, for the same reason).
All other steps are elementwise.

:meth:`PersonalizedPageRank.traverse` ranks, admits and traces whole blocks with tensor
operations. Over a graph batch, column ``j`` holds the ``j``-th query of every graph (the
``pack_queries`` hint): each (graph, column) pair iterates, stops and ranks exactly as it would alone.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.core.retrieval import merge_by_query
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import csr_values, greedy_admit, rank_in_group
from graphmem.policies.push import PushTable, forward_push, push_retrieval, push_table
from graphmem.policies.ranking import topk_by_score
from graphmem.policies.selectors import SelectorSpec, make_entry_selector
from graphmem.policies.tables import csr, edge_targets, kept, node_id_rank, token_counts


def transition_matrix(
    graph: MemoryGraph, relation_weights: dict[str, float] | None = None, use_posterior: bool = True
) -> tuple[Tensor, Tensor]:
    """``(P^T as coalesced sparse COO [N, N] float64, dangling mask [N])`` (see module docstring).

    COO (not CSR) keeps each query column's product bit-identical whatever the batch size.
    """
    rho = torch.ones(len(graph.relations), dtype=torch.float64)
    for name, value in (relation_weights or {}).items():
        if name not in graph.relations:
            raise ValueError(f"relation_weights: unknown relation {name!r}; graph relations: {list(graph.relations)}")
        if value < 0:
            raise ValueError(f"relation_weights[{name!r}] = {value} must be >= 0")
        rho[graph.relations.index(name)] = float(value)
    n, (src, dst) = graph.num_nodes, graph.edge_index
    a = rho[graph.edge_type]
    if use_posterior:
        a = a * graph.posterior_mean.double()
    out_strength = torch.zeros(n, dtype=torch.float64).index_add_(0, src, a)
    dangling = out_strength <= 0
    keep = a > 0
    values = a[keep] / out_strength[src[keep]]
    pt = torch.sparse_coo_tensor(torch.stack([dst[keep], src[keep]]), values, (n, n), check_invariants=False)
    return pt.coalesce(), dangling


class PPROperators(NamedTuple):
    """Sparse operators of one graph or graph batch with ``C`` components: ``pt`` ``[N, N]`` (``P^T``),
    ``step`` ``[N + C, N]``, ``ones`` ``[C, N]`` and ``node_comp`` ``[N]`` (component of each node)."""

    pt: Tensor
    step: Tensor
    ones: Tensor
    node_comp: Tensor


def ppr_operators(
    pt: Tensor, dangling: Tensor, alpha: float, node_comp: Tensor | None = None, num_comp: int = 1
) -> PPROperators:
    """``step = (1 - alpha) [P^T; 1_{D_c}^T for each component c]`` and ``ones = [1_{V_c}^T]``, coalesced COO float64.

    ``y = step @ p`` holds ``(1 - alpha) P^T p`` in its first ``N`` rows and, in row ``N + c``, the
    scaled dangling mass ``(1 - alpha) sum_{u in D, u in c} p_u`` of component ``c``; row ``c`` of
    ``ones @ x`` sums the entries of ``x`` on component ``c``. A single graph is one component
    (``node_comp=None``). Components never share an edge, so each one's rows of every product are
    those of the component alone.
    """
    n = pt.shape[0]
    node_comp = torch.zeros(n, dtype=torch.long) if node_comp is None else node_comp
    d = dangling.nonzero().flatten()
    rows = torch.cat([pt.indices(), torch.stack([n + node_comp[d], d])], 1)
    values = torch.cat([pt.values(), torch.ones(d.numel(), dtype=torch.float64)]) * (1.0 - alpha)
    step = torch.sparse_coo_tensor(rows, values, (n + num_comp, n), check_invariants=False).coalesce()
    ones = torch.sparse_coo_tensor(
        torch.stack([node_comp, torch.arange(n)]),
        torch.ones(n, dtype=torch.float64),
        (num_comp, n),
        check_invariants=False,
    ).coalesce()
    return PPROperators(pt, step, ones, node_comp)


def power_iteration(ops: PPROperators, restart: Tensor, alpha: float, tol: float, max_iter: int) -> Tensor:
    """``[N, B]`` PPR vectors for the restart columns ``restart`` ``[N, B]`` (module docstring).

    With several components, one column carries one query per component (its restart mass lies
    in that component) and each (component, column) pair is its own PPR problem: it stops, and its
    entries are written to the output, when its L1 change ``||p_{t+1} - p_t||_1`` over the
    component falls below ``tol``. A column leaves the working block once all its pairs have
    stopped, and a component's nonzeros leave the operators once all its pairs have (the
    remaining nonzeros keep their order, so every other entry is computed exactly as before).
    The restart term touches only the nonzeros ``(node, column, weight)`` of ``restart``.
    """
    n = restart.shape[0]
    p = torch.empty_like(restart)
    comp = ops.node_comp
    step, ones = ops.step, ops.ones
    cols = torch.arange(restart.shape[1], device=restart.device)
    active = torch.ones(ones.shape[0], restart.shape[1], dtype=torch.bool, device=restart.device)
    live = active.any(1)
    node, col = restart.nonzero(as_tuple=True)
    weight = restart[node, col]
    cur = restart
    for _ in range(max_iter):
        y = step @ cur
        nxt = y[:n]
        nxt[node, col] += (y[n + comp[node], col] + alpha) * weight
        done = (ones @ torch.sub(nxt, cur).abs_()) < tol
        stop = done & active
        if not bool(stop.any()):
            cur = nxt
            continue
        out = stop[comp]  # [N, b]: entries whose pair stops now
        p[:, cols] = torch.where(out, nxt, p[:, cols])
        active &= ~done
        keep = active.any(0)
        if not bool(keep.all()):
            cols, nxt, active = cols[keep], nxt[:, keep], active[:, keep]
            if cols.numel() == 0:
                return p
            kept = keep[col]
            node, col, weight = node[kept], (keep.cumsum(0) - 1)[col[kept]], weight[kept]
        if ones.shape[0] > 1 and not bool((active.any(1) == live).all()):
            live = active.any(1)
            step, ones = _restrict(step, live, comp, n), _restrict(ones, live, None, n)
        cur = nxt
    rest = active[comp]
    p[:, cols] = torch.where(rest, cur, p[:, cols])
    return p


def _restrict(op: Tensor, live: Tensor, comp: Tensor | None, n: int) -> Tensor:
    """The nonzeros of a coalesced COO operator whose row belongs to a ``live`` component, in
    their order (still coalesced). Rows ``< n`` of ``step`` belong to their node's component
    (``comp``), row ``n + c`` to ``c``; row ``c`` of ``ones`` (``comp=None``) to ``c``."""
    rows = op.indices()[0]
    owner = rows if comp is None else torch.where(rows < n, comp[rows.clamp(max=n - 1)], rows - n)
    keep = live[owner]
    return torch.sparse_coo_tensor(
        op.indices()[:, keep], op.values()[keep], op.shape, device=op.device, is_coalesced=True, check_invariants=False
    )


def hop_distance(adjacency_t: Tensor, restart: Tensor, max_hops: int) -> Tensor:
    """``[N, B]`` int: BFS hops from the support of each restart column (``max_hops + 1`` = farther)."""
    dist = torch.full(restart.shape, max_hops + 1, dtype=torch.long, device=restart.device)
    frontier = restart > 0
    dist[frontier] = 0
    for h in range(1, max_hops + 1):
        reached = (adjacency_t @ frontier.double()) > 0
        frontier = reached & (dist > h)
        dist[frontier] = h
    return dist


def admit_ranked(
    key: Tensor, id_rank: Tensor, tokens: Tensor, budget: Budget, col_offset: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """:func:`load_under_budget` for every row of ``key`` ``[B, N]``, nodes ranked by ``(-key, id_rank)``.

    Column ``j`` of row ``b`` is node ``j + col_offset[b]`` of ``id_rank`` and ``tokens`` (default: ``j``).
    Nodes with ``key > 0`` are the candidates; every other key must be negative and distinct
    within its row, so the ranking has no ties outside the candidates. The ranking is read in
    windows (the first ``max_nodes`` places, then four times as many each round), each admitted by
    :func:`greedy_admit` with the row's ``(used, count)`` carried over; a row takes another window
    only while it is below ``max_nodes``, its last window held candidates only and the smallest
    node still fits in its token budget.

    Returns ``(loaded [B, max_nodes] long in load order, -1 padded, used tokens [B])``.
    """
    (b, n), dev = key.shape, key.device
    loaded = torch.full((b, budget.max_nodes), -1, dtype=torch.long, device=dev)
    used = torch.zeros(b, dtype=torch.long, device=dev)
    count = torch.zeros(b, dtype=torch.long, device=dev)
    rows, start, width = torch.arange(b, device=dev), 0, min(n, budget.max_nodes)
    smallest = int(tokens.min())
    while rows.numel():
        off = None if col_offset is None else col_offset[rows]
        nodes = topk_by_score(key[rows], width, id_rank, off)[:, start:]
        valid = key[rows[:, None], nodes] > 0
        at = nodes if off is None else (nodes + off[:, None]).clamp(max=tokens.numel() - 1)
        admit, used_r, count_r = greedy_admit(tokens[at], valid, used[rows], count[rows], budget)
        r, j = admit.nonzero(as_tuple=True)
        slot = count[rows][r] + admit.long().cumsum(1)[r, j] - 1
        loaded[rows[r], slot] = nodes[r, j]
        used[rows], count[rows] = used_r, count_r
        if width == n:
            break
        rows = rows[(count_r < budget.max_nodes) & valid[:, -1] & (used_r + smallest <= budget.max_tokens)]
        start, width = width, min(n, 4 * width)
    return loaded, used


@register_policy("ppr")
class PersonalizedPageRank(TraversalPolicy):
    """Personalized PageRank from the entries, best nodes loaded under the budget.

    Args:
        alpha: restart probability (default: ``0.15``).
        method: ``"push"`` (local forward push, bounded per query) or ``"power"`` (global power
            iteration, the oracle) (default: ``"push"``).
        epsilon: push residual threshold: ``u`` is pushed while ``r_u >= epsilon * max(out-degree, 1)``
            (default: ``3e-5``).
        tol: power iteration: per-column L1 stopping tolerance (default: ``1e-8``).
        max_iter: most power iterations, or push rounds (default: ``200``).
        relation_weights: multiplier per relation name (default: ``None``, all 1).
        use_posterior: multiply edge strength by the posterior mean (default: ``True``).
        max_block_elements: power iteration: most entries ``N * B`` of one block of query columns; a batch is cut
            into blocks of ``max(1, max_block_elements // N)`` columns (default: ``2**21``).
        entry_selector: entry selector name or instance (default: ``"embedding"``).
        device: where the iteration runs (default: ``"cpu"``).
        pack_queries: in :meth:`retrieve_graphs`, graphs with at most this many queries share
            columns over their union; the others run alone (default: ``8``).
    """

    def __init__(
        self,
        alpha: float = 0.15,
        method: str = "push",
        epsilon: float = 3e-5,
        tol: float = 1e-8,
        max_iter: int = 200,
        relation_weights: dict[str, float] | None = None,
        use_posterior: bool = True,
        max_block_elements: int = 1 << 21,
        entry_selector: SelectorSpec = "embedding",
        device: str | torch.device = "cpu",
        pack_queries: int = 8,
    ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if max_block_elements < 1 or max_iter < 1:
            raise ValueError("max_block_elements and max_iter must be >= 1")
        if method not in ("push", "power"):
            raise ValueError(f"method must be 'push' or 'power', got {method!r}")
        if not epsilon > 0.0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        self.method, self.epsilon = method, float(epsilon)
        self.device = resolve_device(device)
        self.alpha, self.tol, self.max_iter = float(alpha), float(tol), int(max_iter)
        self.relation_weights = dict(relation_weights or {})
        self.use_posterior, self.max_block_elements = bool(use_posterior), int(max_block_elements)
        self.entry_selector = make_entry_selector(entry_selector)
        self.pack_queries = int(pack_queries)

    def operators(self, scope: Scope) -> PPROperators:
        """The PPR operators of ``scope.graph``, one component per graph of the scope (cached)."""
        graph, batch = scope.graph, scope.batch
        name = f"policies.ppr_operators:{sorted(self.relation_weights.items())}:{self.use_posterior}:{self.alpha}"
        parts = {"node_comp": batch.node_component, "num_comp": batch.num_graphs} if batch.num_graphs > 1 else {}
        return kept(
            graph,
            name,
            lambda: ppr_operators(
                *transition_matrix(graph, self.relation_weights, self.use_posterior), self.alpha, **parts
            ),
            (graph.edge_index, graph.edge_type, graph.S, graph.F),
            scope.device,
        )

    def push_table(self, scope: Scope) -> PushTable:
        """The :class:`~graphmem.policies.push.PushTable` of ``scope.graph`` (cached)."""
        graph = scope.graph
        name = f"policies.ppr_push:{sorted(self.relation_weights.items())}:{self.use_posterior}"
        return kept(
            graph,
            name,
            lambda: push_table(transition_matrix(graph, self.relation_weights, self.use_posterior)[0], graph.num_nodes),
            (graph.edge_index, graph.edge_type, graph.S, graph.F),
            scope.device,
        )

    def scores(self, graph: MemoryGraph, restart: Tensor) -> Tensor:
        """``[N, B]`` float64 PPR vectors for restart columns ``restart`` (each summing to 1), on its device:
        the push estimates ``hat p = p + alpha r`` (scattered into dense columns) or the power iteration,
        by ``method``."""
        scope = Scope.single(graph, [], restart.device)
        if self.method == "power":
            return power_iteration(self.operators(scope), restart, self.alpha, self.tol, self.max_iter)
        node, col = restart.nonzero(as_tuple=True)
        b = restart.shape[1]
        res = forward_push(
            self.push_table(scope), col, node, restart[node, col], b, self.alpha, self.epsilon, self.max_iter
        )
        out = torch.zeros_like(restart)
        out[res.node, res.query] = res.estimate
        return out

    def traverse(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        """Queries packed into columns, one per graph each (a single graph: one query per column),
        cut into blocks of ``max(1, max_block_elements // N)`` columns, each block one :meth:`_block`;
        with ``push``, all queries at once by :func:`~graphmem.policies.push.push_retrieval`."""
        if self.method == "push":
            dev = scope.device
            return push_retrieval(
                self.push_table(scope),
                entries,
                budget,
                self.alpha,
                self.epsilon,
                self.max_iter,
                node_id_rank(scope.graph, dev),
                token_counts(scope.graph, dev),
                csr(scope.graph, dev),
                edge_targets(scope.graph, dev),
            )
        column, counts = rank_in_group(scope.comp, scope.num_graphs)
        ops = self.operators(scope)
        width = max(1, self.max_block_elements // scope.graph.num_nodes)
        used = torch.zeros(entries.shape[0], dtype=torch.long, device=scope.device)
        blocks = []
        for start in range(0, int(counts.max()), width):
            sel = ((column >= start) & (column < start + width)).nonzero().flatten()
            block, used[sel] = self._block(scope, ops, sel, entries[sel], column[sel] - start, budget)
            blocks.append(block)
        if len(blocks) == 1:
            query, node, depth, score, cq, ce, tq, te = blocks[0]
        else:  # over a graph batch a block holds queries of every graph: group them again
            b = entries.shape[0]
            query, node, depth, score = merge_by_query([k[:4] for k in blocks], b)
            (cq, ce), (tq, te) = merge_by_query([k[4:6] for k in blocks], b), merge_by_query([k[6:] for k in blocks], b)
        return RetrievalBatch(entries, used, query, node, depth, (cq, ce), (tq, te), score)

    def _block(
        self, scope: Scope, ops: PPROperators, sel: Tensor, entries: Tensor, column: Tensor, budget: Budget
    ) -> tuple[tuple[Tensor, ...], Tensor]:
        """PPR, hop distances, ranking, admission and trace for the queries ``sel`` with entry rows
        ``entries`` ``[b, k]`` (``-1`` padded), whose restart vectors go to columns ``column``.
        Each query ranks the nodes of its own graph, as a ``[b, largest graph]`` layout.

        Non-candidates get the key ``-1 - id_rank`` (negative and distinct) for :func:`admit_ranked`,
        padding columns past a graph's size lower keys still. Edges considered: the out-edges of the
        loaded nodes; traversed: those between two loaded nodes.

        Returns ``((query, node, depth, score, considered query, edge, traversed query, edge), used [b])``.
        """
        graph, dev = scope.graph, scope.device
        n, b = graph.num_nodes, entries.shape[0]
        node_off, size = scope.node_offset[sel], scope.sizes[sel]
        rank, tokens, dst = node_id_rank(graph, dev), token_counts(graph, dev), edge_targets(graph, dev)
        q, slot = (entries >= 0).nonzero(as_tuple=True)
        restart = torch.zeros(n, int(column.max()) + 1, dtype=torch.float64, device=dev)
        restart[entries[q, slot], column[q]] = 1.0 / (entries >= 0).sum(1).double()[q]
        p = power_iteration(ops, restart, self.alpha, self.tol, self.max_iter)
        dist = hop_distance(ops.pt, restart, budget.max_hops)
        j = torch.arange(int(size.max()), device=dev)
        valid = j < size[:, None]
        at = (node_off[:, None] + j).clamp(max=n - 1)
        p, dist = p[at, column[:, None]], dist[at, column[:, None]]  # [b, W] over each query's own nodes
        candidate = (p > 0) & (dist <= budget.max_hops) & valid
        key = torch.where(candidate, p, torch.where(valid, -1.0 - rank[at].double(), -1.0 - n - j.double()))
        slots, used = admit_ranked(key, rank, tokens, budget, node_off)

        q, slot = (slots >= 0).nonzero(as_tuple=True)
        local = slots[q, slot]
        node = local + node_off[q]
        seg, edges = csr_values(*csr(graph, dev), node)
        edge_q = q[seg]
        member = torch.zeros(b, j.numel(), dtype=torch.bool, device=dev)
        member[q, local] = True
        hit = member[edge_q, dst[edges] - node_off[edge_q]]
        return (sel[q], node, dist[q, local], p[q, local], sel[edge_q], edges, sel[edge_q[hit]], edges[hit]), used
