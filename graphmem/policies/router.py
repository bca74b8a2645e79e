"""The learned router walking the graph at question time (HAGE §3, with the walk done by the model).

The budget-aware walk of a :class:`models.walk_scorer.WalkScorer` (what ``scripts/train.py``
trains): :func:`graphmem.policies.walk.walk`, greedy. From the selector's entries (up to ``max_entries``, kept
or passed over by the scorer), the walk repeatedly loads the best open candidate ``u -> v`` of
the whole frontier (``u`` loaded, ``v`` not; at most ``top_k_neighbors`` children per node,
depth ``<= max_hops``, node and token caps) until its stop head or the budget ends it, with

    s_uv(q) = cos(q, x_v) + ι_qv + w_uv(q, e_uv)

(formulas in :mod:`models.walk_scorer`; ``e_uv`` from the inductive edge encoder, so a trained
scorer applies to graphs it never saw). The episode trained is this walk, sampled; HAGE's own
MDP is an objective of the same trainer (``objective.rl=hage_mdp``). The policy sees the query
and the budget only.

With ``counter_weight`` ``κ > 0`` the walk also reads the memory's Beta counters (GraphMemory eq. 19), 0 at
``S = F = 0`` so that a memory that received no feedback is walked as without it (:func:`counter_bias`):

* ``counter_pool="pair"``: a pair ``u -> v`` with mean counters ``S̄_uv, F̄_uv`` over its edges gains
  ``b_uv = κ · ((S̄_uv + 1) / (S̄_uv + F̄_uv + 2) - 1/2)`` (GraphMemory's transitions);
* ``counter_pool="target"``: every candidate with target ``v`` (entries too) gains
  ``b_v = κ · ((S_v + 1) / (S_v + F_v + 2) - 1/2)`` with ``S_v = Σ_u S̄_uv``, ``F_v = Σ_u F̄_uv`` over the pairs
  into ``v``: what was learned of ``v`` through any parent.

The walk decides what is loaded; the returned list is ordered by the checkpoint's ranking head
(:class:`models.rank_head.RankHead`, trained by :mod:`rl.walk.rank` on the walk's own lists), the
load order staying in the trace. A checkpoint without a head, or ``rank=False``, returns the load
order.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from pathlib import Path

import torch
from torch import Tensor

from graphmem.index.lexical_features import NUM_LEXICAL_FEATURES, pair_features, scope_lexical
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import csr_positions
from graphmem.policies.rank_features import one_query_rank_inputs, rank_inputs
from graphmem.policies.ranking import query_matrix
from graphmem.policies.selectors import SelectorSpec, make_entry_selector
from graphmem.policies.tables import csr, kept
from graphmem.policies.walk import graph_walk_tables, walk, walk_tables, walk_trace
from graphmem.policies.walk_one import walk_one
from graphmem.store.checkpoint import CheckpointError, load_checkpoint, require_checkpoint
from models.edge_encoder import READ_PAIR_TABLE, edge_pairs, pair_growth, pair_serial, pair_table
from models.rank_head import RankHead, RankInputs
from models.walk_columns import SIMILARITY_COLUMNS
from models.walk_scorer import WalkScorer

COUNTER_POOLS = ("pair", "target")
log = logging.getLogger(__name__)


def read_router_checkpoint(path: str | Path) -> dict:
    """The state of a walk router checkpoint (:func:`graphmem.store.checkpoint.load_checkpoint` of kind ``"walk"``,
    on the CPU) that holds its ``scorer`` and was written by a training that ran to its end (field ``finished``,
    set by the trainer's last save of ``best.pt``); :class:`~graphmem.store.checkpoint.CheckpointError` naming the
    file otherwise: a killed training's ``best.pt``, or any ``last.pt``, holds weights no selection finished."""
    state = load_checkpoint(require_checkpoint(path), "walk")
    if "scorer" not in state:
        raise CheckpointError(f"{path}: not a router checkpoint (kind 'walk' without its 'scorer')")
    if state.get("finished") is not True:
        at = f" (saved at phase {state.get('phase')} epoch {state.get('epoch')})" if "epoch" in state else ""
        raise CheckpointError(
            f"{path}: written by a training that never finished{at}, field 'finished': its weights are no selected "
            "model; resume that run (trainer.run.resume=true) or evaluate the best.pt of a finished one"
        )
    return state


@register_policy("router")
class RouterPolicy(TraversalPolicy):
    """Learned traversal under the shared budget.

    Args:
        checkpoint: path of a checkpoint written by :mod:`rl.walk.trainer` (default: ``None``).
        scorer: a :class:`~models.walk_scorer.WalkScorer` to walk with, instead of a checkpoint.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"`` (cuda when available) (default: ``"auto"``).
        entry_selector: registered selector name or instance (default: ``"embedding"``).
        strict_split: refuse, rather than warn about, graph sets holding graphs the checkpoint
            was trained or selected on (:func:`graphmem.store.checkpoint.check_inputs`) (default: ``False``).
        rank: order the returned list by the checkpoint's ranking head (``False``: load order)
            (default: ``True``).
        rank_head: a :class:`~models.rank_head.RankHead` to rank with, instead of the checkpoint's.
        counter_weight: ``κ`` of the counters' term (module docstring; 0: the counters are not read)
            (default: ``0.0``).
        counter_pool: ``pair`` or ``target``: which counters a candidate reads (module docstring)
            (default: ``"pair"``).
    """

    def __init__(
        self,
        checkpoint: str | Path | None = None,
        scorer: WalkScorer | None = None,
        device: str = "auto",
        entry_selector: SelectorSpec = "embedding",
        strict_split: bool = False,
        rank: bool = True,
        rank_head: RankHead | None = None,
        counter_weight: float = 0.0,
        counter_pool: str = "pair",
    ):
        if isinstance(counter_weight, bool) or not isinstance(counter_weight, (int, float)) or counter_weight < 0:
            raise ValueError(f"RouterPolicy.counter_weight must be a number >= 0, got {counter_weight!r}")
        if counter_pool not in COUNTER_POOLS:
            raise ValueError(f"RouterPolicy.counter_pool must be one of {COUNTER_POOLS}, got {counter_pool!r}")
        self.counter_weight, self.counter_pool = float(counter_weight), counter_pool
        self.device = resolve_device(device)
        self.entry_selector = make_entry_selector(entry_selector)
        state = read_router_checkpoint(checkpoint) if checkpoint is not None else None
        self.checkpoint_path, self.strict_split = checkpoint, bool(strict_split)
        self.trained_inputs = None if state is None else state.get("inputs")
        if state is not None:
            scorer = WalkScorer.from_checkpoint(state["scorer"])
        if scorer is None:
            raise ValueError("RouterPolicy needs a checkpoint or a walk scorer")
        self.scorer = scorer.to(self.device).eval()
        if state is not None and state.get("rank_head") is not None and rank_head is None:
            rank_head = RankHead.from_checkpoint(state["rank_head"])
        self.rank_head = rank_head.to(self.device).eval() if rank and rank_head is not None else None
        self._weights = _weights_of(self.scorer)  # what the static tensors depend on

    def traverse(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        """The budget-aware walk for all queries at once."""
        return self._best_first(scope, entries, budget)

    def _best_first(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        """:func:`graphmem.policies.walk.walk` (greedy) over ``scope.graph`` (one query:
        :func:`~graphmem.policies.walk_one.walk_one`, the same walk without the batch's masks); the considered
        edges are the out-edges of every loaded node the walk could expand (depth below ``max_hops``). The
        scorer's query-independent tensors (:meth:`~models.walk_scorer.WalkScorer.static`) are computed
        once per graph and weights. With a ranking head, each loaded node's ``rank`` is its relevance."""
        graph, dev, one = scope.graph, scope.device, len(scope.queries) == 1
        rowptr, perm = csr(graph)
        tables, tr, q, lexical, ctx = self._trace(scope, entries, budget, one)
        lexical = self._lexical(scope, lexical) if self.rank_head is not None else lexical
        with torch.inference_mode() if one else torch.no_grad():  # as the walk (_trace)
            seg, pos = csr_positions(rowptr.to(dev), tr.expanded_node)
            considered = (tr.expanded_query[seg], perm.to(dev)[pos])
            moved = tr.edge >= 0
            traversed = (tr.query[moved], tr.edge[moved])
            rank = None
            if self.rank_head is not None:
                rank = self.rank_head(self._rank_items(tables, tr, q, lexical, ctx, entries))
            return RetrievalBatch(
                entries, tr.tokens, tr.query, tr.node, tr.depth, considered, traversed, tr.score, rank=rank
            )

    def read_counters(self, ctx, graph, tables) -> None:
        """Set ``ctx``'s pair or node term from ``graph``'s counters (module docstring)."""
        bias = counter_bias(graph, tables.pairs, self.counter_weight, self.counter_pool).to(tables.x.device)
        if self.counter_pool == "pair":
            ctx.pair_bias = bias
        else:
            ctx.node_bias = bias

    def list_inputs(self, scope: Scope, budget: Budget, negatives: int = 0) -> RankInputs:
        """The ranking head's :class:`~models.rank_head.RankInputs` of the walk's lists for the scope's queries
        (what :meth:`traverse` ranks), with up to ``negatives`` hard negatives per query: the entry selector's
        candidates ranked right after the entries (:mod:`graphmem.policies.rank_features`)."""
        wide = dataclasses.replace(budget, max_entries=budget.max_entries + negatives)
        ranked = self.select_entries(scope, wide)
        entries = ranked[:, : budget.max_entries]
        tables, tr, q, lexical, _ = self._trace(scope, entries, budget)
        loaded = (tr.query, tr.node, tr.depth, tr.score)
        extra = ranked[:, budget.max_entries :] if negatives else None
        return rank_inputs(tables, q, self._lexical(scope, lexical), entries, loaded, extra)

    def _lexical(self, scope: Scope, lexical):
        return lexical if lexical is not None else scope_lexical(scope)

    def _rank_items(self, tables, tr, q: Tensor, lexical, ctx, entries: Tensor) -> RankInputs:
        """The ranking head's inputs of the walk's lists (``lexical``: the queries' lexical inputs): for one query,
        from the walk's own node columns where they hold ``λ_qv``
        (:func:`~graphmem.policies.rank_features.one_query_rank_inputs`, the same rows)."""
        if q.shape[0] != 1:
            return rank_inputs(tables, q, lexical, entries, (tr.query, tr.node, tr.depth, tr.score))
        cols = ctx.columns
        if cols is not None and ctx.lexical is not None:
            held = cols.nodes(tr.node.tolist())[:, SIMILARITY_COLUMNS : SIMILARITY_COLUMNS + NUM_LEXICAL_FEATURES]
            lex = torch.from_numpy(held)
        else:
            lex = pair_features(lexical, torch.zeros_like(tr.node), tr.node)
        return one_query_rank_inputs(tables, q, lex, entries, (tr.node, tr.depth, tr.score))

    def _trace(self, scope: Scope, entries: Tensor, budget: Budget, serving: bool = False):
        """``(tables, WalkTrace, unit queries, lexical inputs or None, the scorer's context)`` of the greedy walk of
        the scope's queries. ``serving`` (one query served): the walk runs in inference mode, which makes every
        tensor operation cheaper; the per-graph tables it reads are made before, outside it (tensors made in
        inference mode could not be used by training later)."""
        tables, static = self._walk_tables(scope)
        q = query_matrix(scope.graph, scope.queries).to(scope.device)
        lexical = scope_lexical(scope) if self.scorer.config.lexical else None  # per query: never cached
        with torch.inference_mode() if serving else torch.no_grad():
            ctx = self.scorer.prepare(tables, q, entries[:, : budget.max_entries].to(scope.device), lexical, static)
            if self.counter_weight:
                self.read_counters(ctx, scope.graph, tables)
            if q.shape[0] == 1:
                return tables, walk_one(tables, self.scorer, q, entries, budget, ctx), q, lexical, ctx
            trace = walk_trace(walk(tables, self.scorer, q, entries, budget, ctx=ctx), tables, budget)
        return tables, trace, q, lexical, ctx

    def _walk_tables(self, scope: Scope):
        """:class:`graphmem.policies.walk.WalkTables` of ``scope.graph`` (cached on it) with the rows of the
        scorer's per-edge residual table for the graphs it holds (by name and edge count), and the scorer's
        :meth:`~models.walk_scorer.WalkScorer.static` tensors of them (cached on the graph while its
        tensors and the scorer's weights are unchanged)."""
        graph, scorer = scope.graph, self.scorer
        residual = scorer.edges.residual

        def build():
            return graph_walk_tables(graph).to(self.device)

        deps = (graph.embeddings, graph.edge_index, graph.edge_type, graph.edge_attr_init, graph.timestamps)
        tables = kept(graph, f"policies.walk_tables:{self.device}", build, deps)
        if residual is not None:
            parts = scope.batch.graphs
            rows = residual.edge_rows([g.name for g in parts], [g.num_edges for g in parts]).to(self.device)
            pairs = dataclasses.replace(tables.pairs, edge_pair=_edge_pairs(graph, tables.pairs))  # the residual's
            tables = walk_tables(tables.x, tables.tokens, pairs, rows)

        names = ",".join(g.name or "" for g in scope.batch.graphs) if residual is not None else ""
        key = f"policies.walk_static:{self.device}:{id(scorer)}:{names}"
        stamp = _weights_stamp(self._weights)

        def static():
            """The graph's last static tensors when they are this scorer's, its weights are unchanged and they are
            of this pair table, or grown from them when the table grew from theirs
            (:meth:`~models.walk_scorer.WalkScorer.grown_static`), else made. The last ones are kept across the
            graph's mutations (one scorer's: a memory served by one walk); those saved with a pair table read
            from a file stand for them when they are this scorer's (:func:`saved_static`)."""
            held, growth = graph.grown.pop(LAST_STATIC, None), pair_growth(graph)
            serial, made = pair_serial(graph, tables.pairs), None
            with torch.no_grad():
                if residual is None and tables.x.device.type == "cpu":
                    if held is None or held[:2] != (key, stamp):
                        saved = saved_static(graph, scorer, key, stamp)
                        made = saved[3] if saved is not None and saved[2] == serial else None
                        held = saved or held
                    if made is None and held is not None and held[:2] == (key, stamp) and growth is not None:
                        if (growth.before, growth.after) == (held[2], serial):
                            made = scorer.grown_static(tables, held[3], growth)
                del held
                if made is None:
                    made = scorer.static(tables)
            graph.grown[LAST_STATIC] = (key, stamp, serial, made, weakref.ref(scorer))
            return made

        return tables, kept(graph, key, static, (*deps, *self._weights))


LAST_STATIC = "policies.walk_static.last"
SAVED_STATIC = "policies.walk_static.saved"
"""``(digest, read)``: the static tensors saved beside the pair table a graph reads from a file
(:data:`models.edge_encoder.READ_PAIR_TABLE`), of the scorer of that digest (:meth:`WalkScorer.digest`); ``read()``
gives them by name, or ``None``"""
STATIC_NAMES = ("xb", "px", "pair_e")
"""the static tensors that are saved (``delta``, a per-edge residual's, is not: its tensors are never grown)"""


def _weights_of(scorer: WalkScorer) -> tuple[Tensor, ...]:
    """The scorer's parameters and buffers, in one fixed order."""
    return (*scorer.parameters(), *scorer.buffers())


def _weights_stamp(weights: tuple[Tensor, ...]) -> tuple[int, ...]:
    """The version counters of ``weights`` (:func:`_weights_of`): they change with every in-place update of one."""
    return tuple(w._version for w in weights)


def saved_static(graph, scorer: WalkScorer, key: str, stamp: tuple[int, ...]) -> tuple | None:
    """The entry of :data:`LAST_STATIC` that the static tensors saved with the graph's pair table give (taken when
    they are ``scorer``'s and fit the table read, else ``None``; those of another scorer are left for it)."""
    saved, read = graph.grown.get(SAVED_STATIC), graph.grown.get(READ_PAIR_TABLE)
    if saved is None or read is None or saved[0] != scorer.digest():
        return None
    del graph.grown[SAVED_STATIC]
    tensors, (serial, n, p) = saved[1](), read
    rows = {"xb": n, "px": n, "pair_e": p}
    if tensors is None or any(
        (t is not None) and (t.ndim != 2 or t.shape[0] != rows[k] or t.dtype != torch.float32)
        for k, t in tensors.items()
    ):
        log.warning("the walk's saved static tensors do not fit the pair table read (%d nodes, %d pairs)", n, p)
        return None
    return key, stamp, serial, {**tensors, "delta": None}


def static_to_save(graph) -> tuple[str, dict[str, Tensor]] | None:
    """``(digest, tensors)``: the static tensors of ``graph``'s pair table held from the last walk on the CPU, grown to
    the table when it grew since them, with the digest of their scorer; ``None`` when there are none, or the last
    ones are of another table, of weights changed since or of a scorer gone."""
    held = graph.grown.get(LAST_STATIC)
    if held is None or not held[0].startswith("policies.walk_static:cpu:"):
        return None
    key, stamp, serial, made, ref = held
    tables = graph_walk_tables(graph)
    scorer, now = ref(), pair_serial(graph, tables.pairs)
    if scorer is None or _weights_stamp(_weights_of(scorer)) != stamp or made["delta"] is not None or now is None:
        return None
    if serial != now:
        growth = pair_growth(graph)
        if growth is None or (growth.before, growth.after) != (serial, now):
            return None
        del held
        with torch.no_grad():
            made = scorer.grown_static(tables, graph.grown.pop(LAST_STATIC)[3], growth)
        graph.grown[LAST_STATIC] = (key, stamp, now, made, ref)
    return scorer.digest(), {k: made[k] for k in STATIC_NAMES if made[k] is not None}


def _edge_pairs(graph, pairs) -> Tensor:
    """``[E]`` every edge's pair in ``pairs`` (``graph``'s :class:`~models.edge_encoder.PairTable`, or its copy on a
    device): its own, else made in the graph's kept table (:func:`~models.edge_encoder.edge_pairs`), which a grown
    table holds none of until something reads them."""
    if pairs.edge_pair is not None:
        return pairs.edge_pair
    return edge_pairs(graph, pair_table(graph)).to(pairs.src.device)


def counter_bias(graph, pairs, weight: float, pool: str = "pair") -> Tensor:
    """``[P]`` ``b_uv`` of every pair of ``pairs`` (``graph``'s :class:`~models.edge_encoder.PairTable`), or with
    ``pool="target"`` ``[N]`` ``b_v`` of every node (module docstring)."""
    edge_pair = _edge_pairs(graph, pairs)
    held = edge_pair >= 0
    at = edge_pair[held].cpu()
    count = torch.zeros(pairs.num_pairs).index_add_(0, at, torch.ones(at.numel()))
    s = torch.zeros(pairs.num_pairs).index_add_(0, at, graph.S[held.cpu()].float()) / count.clamp(min=1)
    f = torch.zeros(pairs.num_pairs).index_add_(0, at, graph.F[held.cpu()].float()) / count.clamp(min=1)
    if pool == "target":
        n, dst = graph.num_nodes, pairs.dst.cpu()
        s, f = torch.zeros(n).index_add_(0, dst, s), torch.zeros(n).index_add_(0, dst, f)
    return weight * ((s + 1) / (s + f + 2) - 0.5)
