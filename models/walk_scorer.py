"""WalkScorer: the learned router's score of a walk candidate ``u -> v`` (``u`` loaded, ``v`` not).

For a query ``q`` (unit ``q̂``), its relation intent ``π(q)``, the best cosine of its entries
``c* = max_e cos(q, x_e)`` and a candidate pair ``u -> v`` with inductive edge features ``e_uv``
(:class:`models.edge_encoder.EdgeEncoder`) and raw pair features ``a_uv``:

    m(q)   = R · π(q) + g([q̂ ; π(q)])                          modulation (HAGE), g: MLP, last layer zero-init
             (``modulation=False``: m(q) = R · π(q), the intent alone)
    σ_uv   = [cos(q, x_u), cos(q, x_v), cos(x_u, x_v), cos(q, x_u) - c*, cos(q, x_v) - c*,
              max_w cos(q, x_w) - c*, mean_w cos(q, x_w) - c*, max_w cos(q, x_w) - cos(q, x_v)]
             over the out-neighbours w of v (what loading v would open: a one-step look-ahead)
    ρ_v    = [1(entry), 1(depth 1), 1(depth 2), 1(depth > 2), 1(o = 0), min(o, 12) / 12]
             with o the entry's rank among the entries, or the parent's load slot
    λ_qv   = [φ_bm25, φ_rare, φ_name, φ_number, φ_date](q, v)  lexical features of query and node text
             (:mod:`graphmem.index.lexical_features`; only with ``lexical``)
    w_uv   = h([m(q) ⊙ e_uv ; a_uv ; σ_uv ; ρ_v ; λ_qv])        structural weight, h: MLP
    ι_qv   = (A q̂) · (B x̂_v)                                   low-rank query/node interaction (rank 0: none)
    s_uv   = cos(q, x_v) + ι_qv + w_uv (+ b_uv)                 the candidate's score

with ``b_uv`` a fixed term a caller may add (the router's reading of the memory's Beta counters,
:class:`graphmem.policies.router.RouterPolicy` ``counter_weight``): per pair (``_Context.pair_bias``, 0 for
entries) and per target node (``_Context.node_bias``, entries included).

Entries have no parent: ``e = a = 0`` and ``cos(q, x_u) = c*``. At initialisation ``A = 0`` and
the last layers of ``g`` and ``h`` are zero, so ``s = cos(q, x_v)``: the untrained router walks
by cosine. Everything is computed from the frozen node and query embeddings and from pair
features every graph has, so a trained scorer applies to graphs it never saw; ``λ`` comes from the
query and node texts and the graph's own token statistics, computed only for the candidates.

The stop head ``stop = α · max open s + β · loaded / max_nodes + b`` decides when the walk ends:
the greedy walk stops when ``stop`` beats every open candidate. ``b`` starts at -1, below any
cosine of a relevant node, so the untrained walk fills its budget, yet near enough that sampled
walks try stopping and a node cost in the reward can teach the head when to.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy
import torch
from torch import Tensor, nn

from graphmem.core.budget import Budget
from graphmem.core.csr import append_rows, csr_positions, empty_with_room, with_room
from graphmem.index.lexical_features import NUM_LEXICAL_FEATURES, Lexical, pair_features
from models.edge_encoder import EDGE_FEATURE_DIM, EDGE_MODES, NUM_PAIR_FEATURES, EdgeEncoder
from models.intent import RelationIntent
from models.walk_columns import SIMILARITY_COLUMNS, NodeColumns

NUM_SIMILARITY_FEATURES = 8
INTENTS = ("prototype", "head", "uniform")
DENSE_COSINE_LIMIT = 1 << 22  # B x N up to which cos(q, x_v) is one matmul per batch ...
DENSE_COSINE_NODES = 1 << 17  # ... on graphs up to this size (above: gathered rows, cost bounded by the walk) ...
ONE_QUERY_NODES = 1 << 12  # ... and, for one query, up to this size (its walk reads fewer rows than a larger graph has)
NUM_PATH_FEATURES = 6
ORDER_SCALE = 12
COSINE_BLOCK = 1 << 10  # rows gathered at once for one query's cosines (their products stay in the cache)
STATIC_PAIR_BLOCK = 1 << 16  # pairs whose edge features are computed at once (the encoder's activations stay small)
STATIC_MIN_ROWS = 64  # rows a static product is computed over at least: a row's value then does not depend on the
# rows beside it (a product of one or two rows takes another kernel, whose sums round differently)
SPAN_PAIRS = 1 << 16  # graphs up to this many pairs score a served walk's expansions from per-query node columns


@functools.lru_cache(maxsize=1024)
def _path_host(entry: bool, depth: int, orders: tuple[int, ...], dtype: numpy.dtype) -> numpy.ndarray:
    """:func:`_path_rows` on the CPU as a NumPy array (for :meth:`WalkScorer.score_span`; cached)."""
    return _path_rows(entry, depth, orders, torch.from_numpy(numpy.empty(0, dtype)).dtype, torch.device("cpu")).numpy()


@functools.lru_cache(maxsize=1024)
def _path_rows(entry: bool, depth: int, orders: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """``ρ_v`` ``[len(orders), 6]`` of candidates at depth ``depth`` (entries or not) with orders ``orders``,
    computed as :meth:`WalkScorer.score` computes it (cached: it depends on nothing else)."""
    o = torch.tensor(orders, dtype=torch.long, device=device)
    d, is_entry = torch.full_like(o, depth), torch.full_like(o, entry, dtype=torch.bool)
    row = torch.stack([is_entry, d == 1, d == 2, d > 2, o == 0, o.clamp(max=ORDER_SCALE) / ORDER_SCALE], -1)
    return row.to(dtype)


@dataclass
class ScorerConfig:
    """Shape of a :class:`WalkScorer`."""

    dim: int = 384
    """node / query embedding size D"""
    rank: int = 8
    """rank of the query/node interaction ι (0 disables it)"""
    hidden: int = 64
    """width of the heads g and h"""
    edge_mode: str = "inductive"
    """EdgeEncoder mode: onehot, phase1, table or inductive"""
    edge_hidden: int = 32
    """width of the edge encoder's MLP"""
    edge_rank: int = 8
    """rank of the edge encoder's embedding interaction"""
    edge_residual: bool = False
    """add HAGE's per-edge table as a residual on the training graphs' edges (inductive mode)"""
    intent: str = "head"
    """relation intent: prototype, head, uniform (no intent)"""
    modulation: bool = True
    """the query's own modulation g([q̂ ; π(q)]) in m(q) (False: m(q) = R · π(q); with intent=uniform nothing
    in the scorer weighs the edge features by the query)"""
    stop: bool = True
    """whether the walk has a learned stop action"""
    lexical: bool = True
    """lexical features λ_qv of query and node text in the structural head (False: embeddings only)"""

    def __post_init__(self) -> None:
        for name in ("dim", "hidden", "edge_hidden"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"ScorerConfig.{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("rank", "edge_rank"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"ScorerConfig.{name} must be a non-negative integer, got {getattr(self, name)!r}")
        if self.edge_mode not in EDGE_MODES:
            raise ValueError(f"edge encoder mode {self.edge_mode!r} is not one of {EDGE_MODES}")
        for name in ("modulation", "stop", "lexical", "edge_residual"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ScorerConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if self.intent not in INTENTS:
            raise ValueError(f"ScorerConfig.intent must be one of {INTENTS}, got {self.intent!r}")


class _Context:
    """Per-batch precomputation: unit queries, their modulations and low-rank projections."""

    def __init__(
        self, tables, q_unit: Tensor, ref: Tensor, m: Tensor, qa, xb, px, delta, cos, pair_e=None, lexical=None
    ):
        self.tables, self.q, self.ref, self.m = tables, q_unit, ref, m
        self.qa, self.xb, self.px, self.delta, self.cos = qa, xb, px, delta, cos
        self.pair_e = pair_e  # [P, 4] e of every pair, when precomputed (question time)
        self.lexical = lexical  # the queries' lexical inputs (graphmem.index.lexical_features.Lexical), or None
        self.columns = None  # one query's node columns (models.walk_columns.NodeColumns), made on first use
        self.spans = WalkScorer.serves_spans(self)  # whether WalkScorer.score_span applies (one query, question time)
        self.stop = None  # the stop head's weights as float32 scalars (WalkScorer.stop_value), likewise
        self.pair_bias = None  # [P] a fixed term added to every pair's score (the memory's counters), or None
        self.node_bias = None  # [N] a fixed term added to the score of every candidate with that target, or None
        self.head = None  # the structural head's weights (WalkScorer.node_columns), likewise
        self.host = None  # m(q) of row 0, every pair's e and a as NumPy arrays (WalkScorer.node_columns), likewise
        self.bias = None  # pair_bias and node_bias as NumPy arrays (WalkScorer.node_columns), likewise

    def cosine(self, query: Tensor, nodes: Tensor) -> Tensor:
        """``[C]`` ``cos(q, x_v)`` of query rows and nodes: a lookup in the dense ``[B, N]`` table
        when one was made, else a product of the gathered rows."""
        if self.cos is not None:
            return self.cos[query, nodes]
        return (self.q[query] * self.tables.x[nodes]).sum(-1)

    def cosine_one(self, nodes: Tensor) -> Tensor:
        """:meth:`cosine` of query row 0 and ``nodes``: the same lookup, or the same products summed row by row
        (a row's sum does not depend on the rows summed beside it), a block of rows at a time."""
        if self.cos is not None:
            return self.cos[0].index_select(0, nodes)
        q, x = self.q[0], self.tables.x
        parts = [x.index_select(0, block).mul_(q).sum(-1) for block in nodes.split(COSINE_BLOCK)]
        return torch.cat(parts) if len(parts) != 1 else parts[0]


class WalkScorer(nn.Module):
    """Candidate scores and stop logits of the best-first walk (module docstring for the formulas).

    Args:
        config: a :class:`ScorerConfig`.
        residual_graphs: graphs of HAGE's per-edge residual table (edge modes ``table`` and, optionally,
            ``inductive``) (default: None).
    """

    def __init__(self, config: ScorerConfig | None = None, residual_graphs=None, **overrides):
        super().__init__()
        cfg = config or ScorerConfig()
        if overrides:
            cfg = ScorerConfig(**{**asdict(cfg), **overrides})
        self.config = cfg
        r = EDGE_FEATURE_DIM
        self.edges = EdgeEncoder(cfg.dim, cfg.edge_mode, cfg.edge_hidden, cfg.edge_rank, residual_graphs)
        self.intent = RelationIntent(cfg.dim, kind=cfg.intent, num_relations=r)
        self.modulator = None
        if cfg.modulation:
            self.modulator = nn.Sequential(nn.Linear(cfg.dim + r, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, r))
            nn.init.zeros_(self.modulator[2].weight)
            nn.init.zeros_(self.modulator[2].bias)
        if cfg.rank:
            self.query_proj = nn.Linear(cfg.dim, cfg.rank, bias=False)  # A
            self.node_proj = nn.Linear(cfg.dim, cfg.rank, bias=False)  # B
            nn.init.zeros_(self.query_proj.weight)
        width = r + NUM_PAIR_FEATURES + NUM_SIMILARITY_FEATURES + NUM_PATH_FEATURES
        width += NUM_LEXICAL_FEATURES if cfg.lexical else 0
        self.head = nn.Sequential(nn.Linear(width, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 1))
        nn.init.zeros_(self.head[2].weight)
        nn.init.zeros_(self.head[2].bias)
        self.stop_weights = nn.Parameter(torch.zeros(2)) if cfg.stop else None
        self.stop_bias = nn.Parameter(torch.tensor(-1.0)) if cfg.stop else None

    # ------------------------------------------------------------------ CandidateScorer
    def static(self, tables) -> dict[str, Tensor | None]:
        """The query-independent part of :meth:`prepare` over ``tables``: ``B x̂`` and ``P x̂`` of every node,
        the residual ``δ`` and the edge features ``e`` of every pair. At question time the weights are
        fixed, so this is computed once per graph (and cached by the policy) instead of once per batch.
        The lexical features ``λ_qv`` depend on the query: they come with :meth:`prepare`'s ``lexical``."""
        st = self.static_nodes(tables)
        every = torch.arange(tables.pairs.num_pairs, device=tables.x.device)
        blocks = list(every.split(STATIC_PAIR_BLOCK))
        if len(blocks) > 1 and blocks[-1].numel() < STATIC_MIN_ROWS:
            blocks[-2:] = [torch.cat(blocks[-2:])]
        blocks = [self.edges(tables.pairs, b, st["px"], st["delta"])[0] for b in blocks]
        # each held with room to grow: a live memory's next read grows them within their buffers (grown_static)
        if len(blocks) > 1 and not torch.is_grad_enabled() and blocks[0].device.type == "cpu":
            st["pair_e"] = torch.cat(blocks, out=empty_with_room(tables.pairs.num_pairs, blocks[0].shape[1]))
        else:
            st["pair_e"] = with_room(torch.cat(blocks) if len(blocks) != 1 else blocks[0])
        return {k: with_room(t) if k in ("xb", "px") and t is not None else t for k, t in st.items()}

    def grown_static(self, tables, old: dict[str, Tensor | None], growth) -> dict[str, Tensor | None]:
        """:meth:`static` of ``tables``, whose pair table grew (``growth``, a
        :class:`~models.edge_encoder.PairGrowth`) from the one that ``old`` was computed on: the rows of the nodes
        and pairs that are new or changed are computed, the others copied (each row's value is the one
        :meth:`static` gives: its products are row by row, over at least :data:`STATIC_MIN_ROWS` rows). Not for a
        per-edge residual table (its rows follow the graphs it was trained on). The tensors are taken out of ``old``
        and grown within their own buffers where nothing else holds them (:func:`graphmem.core.csr.grow_rows`)."""
        if old["delta"] is not None or tables.edge_rows is not None:
            raise ValueError("grown_static: a per-edge residual table is made anew, not grown")
        x, n0 = tables.x, growth.nodes_before

        def grown(name: str, project) -> Tensor | None:
            if old[name] is None:
                return None
            if old[name].shape[0] != n0:
                raise ValueError(f"grown_static: {name} holds {old[name].shape[0]} rows, the earlier table {n0} nodes")
            lo = max(0, min(n0, x.shape[0] - STATIC_MIN_ROWS))
            made = project(x[lo:])
            rows = append_rows(old, name, made[n0 - lo :])
            rows[lo:n0] = made[: n0 - lo]
            return rows

        xb, px = grown("xb", self.node_proj), grown("px", self.edges.node_projection)
        changed = growth.changed
        pad = torch.arange(max(0, min(STATIC_MIN_ROWS, tables.pairs.num_pairs) - changed.numel()))
        e = self.edges(tables.pairs, torch.cat([changed, pad]), px, None)[0][: changed.numel()]
        pair_e = growth.merge(old, "pair_e", torch.zeros(growth.at.numel(), *old["pair_e"].shape[1:]))
        pair_e[changed] = e
        return {"xb": xb, "px": px, "delta": None, "pair_e": pair_e}

    def prepare(
        self,
        tables,
        q: Tensor,
        entries: Tensor,
        lexical: Lexical | None = None,
        static: dict[str, Tensor | None] | None = None,
    ) -> _Context:
        """Unit queries ``q̂``, their entries' best cosine ``c*``, modulations ``m(q)`` and the projections
        ``A q̂``, ``B x̂`` (every node of ``tables``: query-independent, taken from ``static`` — :meth:`static`
        of these tables — when given); ``lexical``: the queries' terms and the node table of ``tables``'
        graph (:func:`graphmem.index.lexical_features.lexical_inputs`), required when the scorer uses lexical
        features. ``cos(q, x_v)`` of every node is one ``[B, N]`` matmul when ``B N <=`` :data:`DENSE_COSINE_LIMIT`
        and ``N <=`` :data:`DENSE_COSINE_NODES` (one query: :data:`ONE_QUERY_NODES`, beyond which the row costs
        more than the walk reads), else each candidate's is a product of gathered rows."""
        if self.config.lexical and lexical is None:
            raise ValueError(
                "WalkScorer(lexical=True) needs the queries' lexical inputs (graphmem.index.lexical_features)"
            )
        if lexical is not None and len(lexical.queries) != q.shape[0]:
            raise ValueError(f"lexical inputs for {len(lexical.queries)} queries, but {q.shape[0]} query rows")
        qn = nn.functional.normalize(q.float(), dim=-1)
        real = entries >= 0
        cos_e = (qn[:, None, :] * tables.x[entries.clamp(min=0)]).sum(-1)
        ref = cos_e.masked_fill(~real, float("-inf")).max(1).values
        ref = torch.where(real.any(1), ref, torch.zeros_like(ref))
        pi = self.intent(qn)
        m = EDGE_FEATURE_DIM * pi
        if self.modulator is not None:  # g([q̂ ; π(q)]), its layers applied as functions of their weights
            first, last = self.modulator[0], self.modulator[2]
            hidden = nn.functional.relu(nn.functional.linear(torch.cat([qn, pi], -1), first.weight, first.bias))
            m = m + nn.functional.linear(hidden, last.weight, last.bias)
        st = static if static is not None else {**self.static_nodes(tables), "pair_e": None}
        qa = nn.functional.linear(qn, self.query_proj.weight) if self.config.rank else None
        n, b = tables.num_nodes, qn.shape[0]
        dense = b * n <= DENSE_COSINE_LIMIT and n <= (DENSE_COSINE_NODES if b > 1 else ONE_QUERY_NODES)
        cos = qn @ tables.x.T if dense else None
        lexical = lexical.to(qn.device) if self.config.lexical else None
        return _Context(tables, qn, ref, m, qa, st["xb"], st["px"], st["delta"], cos, st["pair_e"], lexical)

    def static_nodes(self, tables) -> dict[str, Tensor | None]:
        """``B x̂``, ``P x̂`` and ``δ`` of :meth:`static` (what a training batch recomputes, with gradients)."""
        xb = self.node_proj(tables.x) if self.config.rank else None
        px, delta = self.edges.node_projection(tables.x), self.edges.pair_delta(tables.pairs, tables.edge_rows)
        return {"xb": xb, "px": px, "delta": delta}

    def score(self, ctx: _Context, cand) -> Tensor:
        """``s_uv`` ``[C]`` (module docstring) of :class:`graphmem.policies.walk.Candidates`.

        Candidates that carry a ``span`` ``(lo, hi, u, depth, order)`` (the out-pairs ``lo:hi`` of one loaded
        node ``u`` of a one-query context, :func:`graphmem.policies.walk_one.walk_one`) or ``entry_cols`` (the
        query's entries ``nodes``, in those columns) are scored by :meth:`score_span` / :meth:`score_entries` when the
        context allows it: the same values, op for op, from gathered rows."""
        span, cols = getattr(cand, "span", None), getattr(cand, "entry_cols", None)
        if (span is not None or cols is not None) and ctx.spans:
            return self.score_span(ctx, *span) if span is not None else self.score_entries(ctx, cand.nodes, cols)
        x, ref = ctx.tables.x, ctx.ref[cand.query]
        entry = cand.is_entry
        cos_v = ctx.cosine(cand.query, cand.child)
        cos_u = torch.where(entry, ref, ctx.cosine(cand.query, cand.parent.clamp(min=0)))
        p = cand.pair.clamp(min=0)
        e = ctx.pair_e[p] if ctx.pair_e is not None else self.edges(ctx.tables.pairs, p, ctx.px, ctx.delta)[0]
        inner = (~entry).to(x.dtype)[:, None]
        e, raw = e * inner, ctx.tables.pairs.raw[p] * inner
        cos_uv = raw[:, EDGE_FEATURE_DIM + 1]  # p_s of the pair
        ahead_max, ahead_mean = self.look_ahead(ctx, cand)
        sims = torch.stack(
            [cos_u, cos_v, cos_uv, cos_u - ref, cos_v - ref, ahead_max - ref, ahead_mean - ref, ahead_max - cos_v], -1
        )
        d, o = cand.depth, cand.order
        path = torch.stack([entry, d == 1, d == 2, d > 2, o == 0, o.clamp(max=ORDER_SCALE) / ORDER_SCALE], -1).to(
            x.dtype
        )
        parts = [ctx.m[cand.query] * e, raw, sims, path]
        if ctx.lexical is not None:
            parts.append(pair_features(ctx.lexical, cand.query, cand.child).to(x.dtype))
        z = torch.cat(parts, -1)
        s = cos_v + self.head(z).squeeze(-1)
        if ctx.qa is not None:
            s = s + (ctx.qa[cand.query] * ctx.xb[cand.child]).sum(-1)
        if ctx.pair_bias is not None:
            s = s + ctx.pair_bias[p] * inner[:, 0]
        if ctx.node_bias is not None:
            s = s + ctx.node_bias[cand.child]
        return s

    @staticmethod
    def serves_spans(ctx: _Context) -> bool:
        """Whether :meth:`score_span` applies: one query on the CPU, every pair's ``e`` precomputed (question time)."""
        return (
            ctx.pair_e is not None
            and ctx.q.shape[0] == 1
            and ctx.q.device.type == "cpu"
            and ctx.tables.pairs.num_pairs > 0
        )

    def score_span(self, ctx: _Context, lo: int, hi: int, u: int, depth: int, order: int) -> Tensor:
        """:meth:`score` of the candidates ``u -> dst[p]``, ``p in lo:hi`` (depth ``depth``, order ``order``) of
        query row 0: ``z`` written column by column from slices of the per-graph ``e`` and ``a`` and from the
        query's node columns (:class:`~models.walk_columns.NodeColumns`), every column the value :meth:`score`
        computes (``m ⊙ e`` the same float32 products), and the same head on the same rows."""
        cols = self.node_columns(ctx)
        m, pair_e, raw = ctx.host
        at_v, at_u = cols.span(lo, hi), cols.node(u)
        z = numpy.empty((hi - lo, ctx.head[0].shape[1]), dtype=raw.dtype)
        e, a, sims = EDGE_FEATURE_DIM, EDGE_FEATURE_DIM + NUM_PAIR_FEATURES, SIMILARITY_COLUMNS
        numpy.multiply(m, pair_e[lo:hi], out=z[:, :e])
        z[:, e:a] = raw[lo:hi]
        z[:, a], z[:, a + 1], z[:, a + 2], z[:, a + 3] = at_u[0], at_v[:, 0], raw[lo:hi, e + 1], at_u[1]
        z[:, a + 4 : a + 3 + sims] = at_v[:, 1:sims]
        z[:, a + 3 + sims : a + 3 + sims + NUM_PATH_FEATURES] = _path_host(False, depth, (order,), raw.dtype)
        return self._head_score(ctx, z, at_v, slice(lo, hi), cols.dst[lo:hi])

    def score_entries(self, ctx: _Context, nodes: list[int], cols: tuple[int, ...]) -> Tensor:
        """:meth:`score` of entries ``nodes`` (columns ``cols``) of query row 0, as :meth:`score_span` does:
        ``e``, ``a`` zeroed as :meth:`score` zeroes them (times 0), ``cos(q, x_u) = c*``."""
        at_v = self.node_columns(ctx).nodes(nodes)
        m, pair_e, raw = ctx.host
        z = numpy.empty((len(nodes), ctx.head[0].shape[1]), dtype=raw.dtype)
        e, a, sims = EDGE_FEATURE_DIM, EDGE_FEATURE_DIM + NUM_PAIR_FEATURES, SIMILARITY_COLUMNS
        zero, ref = raw.dtype.type(0), ctx.ref[:1].detach().numpy()
        z[:, :e] = m * (pair_e[:1] * zero)
        z[:, e:a] = raw[:1] * zero
        z[:, a], z[:, a + 1], z[:, a + 2], z[:, a + 3] = ref, at_v[:, 0], raw[0, e + 1] * zero, ref - ref
        z[:, a + 4 : a + 3 + sims] = at_v[:, 1:sims]
        z[:, a + 3 + sims : a + 3 + sims + NUM_PATH_FEATURES] = _path_host(True, 0, cols, raw.dtype)
        return self._head_score(ctx, z, at_v, None, nodes)

    def node_columns(self, ctx: _Context) -> NodeColumns:
        """The query's :class:`~models.walk_columns.NodeColumns`, made on first use: of every node at once where
        ``ctx`` holds the dense cosine row and at most :data:`SPAN_PAIRS` pairs (one pass over the pairs costs
        less than the walk's own reads there), else of each node when first asked for."""
        if ctx.columns is None:
            every = ctx.cos is not None and ctx.tables.pairs.num_pairs <= SPAN_PAIRS
            ctx.columns = NodeColumns(ctx, every)
            ctx.host = tuple(t.detach().numpy() for t in (ctx.m[:1], ctx.pair_e, ctx.tables.pairs.raw))
            ctx.bias = tuple(None if t is None else t.detach().cpu().numpy() for t in (ctx.pair_bias, ctx.node_bias))
            first, last = self.head[0], self.head[2]
            ctx.head = (first.weight, first.bias, last.weight, last.bias)
        return ctx.columns

    def _head_score(self, ctx: _Context, z: numpy.ndarray, at_v: numpy.ndarray, pairs: slice | None, child) -> Tensor:
        """``cos(q, x_v) + h(z) + ι_qv`` of :meth:`score` for the structural columns ``z`` ``[C, W]`` without
        ``λ_qv``, and the targets' node columns ``at_v`` (``λ_qv`` after the similarity columns, ``ι_qv`` last),
        then the fixed terms in :meth:`score`'s order: the pairs' (``pairs``; entries: times 0) and the targets'
        (``child``)."""
        if ctx.lexical is not None:
            z[:, -NUM_LEXICAL_FEATURES:] = at_v[:, SIMILARITY_COLUMNS : SIMILARITY_COLUMNS + NUM_LEXICAL_FEATURES]
        w1, b1, w2, b2 = ctx.head
        h = nn.functional.linear(nn.functional.linear(torch.from_numpy(z), w1, b1).relu_(), w2, b2)
        s = at_v[:, 0] + h.detach().numpy()[:, 0]  # the same float32 additions, in the same order
        if ctx.qa is not None:
            s = s + at_v[:, -1]
        pair_bias, node_bias = ctx.bias
        if pair_bias is not None:
            s = s + (pair_bias[pairs] if pairs is not None else pair_bias[0] * pair_bias.dtype.type(0))
        if node_bias is not None:
            s = s + node_bias[child]
        return torch.from_numpy(s)

    def stop_value(self, ctx: _Context, best: float, count: int, budget: Budget) -> float | None:
        """:meth:`stop_logit` of one row as a Python float (``best`` finite), computed in float32 op for op as
        the tensors are (float32 weights; ``None`` without a stop head or with other weights)."""
        if ctx.stop is None:
            weights = self.stop_weights
            if weights is None or weights.dtype != torch.float32:
                ctx.stop = ()
            else:
                ctx.stop = tuple(numpy.float32(w) for w in (*weights.tolist(), self.stop_bias.item()))
        if not ctx.stop:
            return None
        w0, w1, b = ctx.stop
        f = numpy.float32
        return float(f(w0 * f(best) + f(w1 * f(count)) / f(budget.max_nodes)) + b)

    @staticmethod
    def look_ahead(ctx: _Context, cand) -> tuple[Tensor, Tensor]:
        """``(max, mean)`` ``[C]`` of ``cos(q, x_w)`` over the out-neighbours ``w`` of each candidate's target
        (``cos(q, x_v)`` itself where ``v`` has none): ``C x degree`` lookups, bounded by the budget."""
        pairs = ctx.tables.pairs
        seg, pid = csr_positions(pairs.rowptr, cand.child)
        cos_w = ctx.cosine(cand.query[seg], pairs.dst[pid])
        c = cand.child.numel()
        count = torch.zeros(c, dtype=cos_w.dtype, device=cos_w.device).index_add_(0, seg, torch.ones_like(cos_w))
        total = torch.zeros_like(count).index_add_(0, seg, cos_w)
        best = torch.full_like(count, float("-inf")).scatter_reduce_(0, seg, cos_w, "amax")
        own = ctx.cosine(cand.query, cand.child)
        has = count > 0
        return torch.where(has, best, own), torch.where(has, total / count.clamp(min=1), own)

    def stop_logit(self, ctx: _Context, best: Tensor, count: Tensor, budget: Budget) -> Tensor | None:
        """``α · best + β · count / max_nodes + b`` ``[B]``; ``None`` without a stop head.

        A row with no open candidate (``best = -inf``) gets the bias alone (that step cannot act anyway).
        """
        if self.stop_weights is None:
            return None
        best = torch.where(torch.isfinite(best), best, torch.zeros_like(best))
        return self.stop_weights[0] * best + self.stop_weights[1] * count.float() / budget.max_nodes + self.stop_bias

    # ------------------------------------------------------------------ regularisers
    def anchor_loss(self, ctx: _Context, pairs: Tensor) -> Tensor:
        """``mean ||e_ij - e0_ij||^2`` over the (distinct) pairs ``pairs``; 0 for static edges."""
        if not self.edges.learned or pairs.numel() == 0:
            return ctx.q.new_zeros(())
        pairs = torch.unique(pairs)
        e, e0 = self.edges(ctx.tables.pairs, pairs, ctx.px, ctx.delta)
        return (e - e0).pow(2).sum(-1).mean()

    def checkpoint(self) -> dict[str, Any]:
        """Config, weights and the graphs of the per-edge residual table (names and edge counts)."""
        res = self.edges.residual
        held = {} if res is None else {n: int(res.offsets[i + 1] - res.offsets[i]) for i, n in enumerate(res.names)}
        return {
            "config": asdict(self.config),
            "state_dict": {k: v.detach().clone() for k, v in self.state_dict().items()},
            "residual_graphs": held,
        }

    def digest(self) -> str:
        """SHA-256 of the config and every weight (name, dtype, shape and bytes): the same for the same scorer in any
        process, so that tensors computed from its weights and saved can be told apart from another's."""
        h = hashlib.sha256(json.dumps(asdict(self.config), sort_keys=True).encode())
        for name, t in sorted(self.state_dict().items()):
            t = t.detach().cpu().contiguous()
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        return h.hexdigest()

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any]) -> WalkScorer:
        """The scorer :meth:`checkpoint` wrote (a checkpoint's ``scorer`` entry)."""
        held = state.get("residual_graphs") or None
        scorer = cls(ScorerConfig(**{"lexical": False, **state["config"]}), held)  # older scorers: no λ
        scorer.load_state_dict(state["state_dict"])
        return scorer
