"""Supervised training of the GNN reader on gold evidence (SAGE §4.2, "Reader Training").

Each training question contributes its gold evidence rows ``P`` in its graph; the reader scores
every node ``s = f(q, G)`` seeded at the entries the inference policy would choose, so training
and retrieval see the same start states. Two losses are available:

* ``ranking`` (default) — multi-positive ranking: every positive competes with the negatives only,
  ``L = (1/|P|) \\sum_{p in P} [ -s_p + log(exp(s_p) + \\sum_{n \\notin P} exp(s_n)) ]``;
* ``bce`` — weighted binary cross-entropy, positives weighted by ``pos_weight``:
  ``L = mean_v [ -w_v (y_v log \\sigma(s_v) + (1 - y_v) log(1 - \\sigma(s_v))) ]``,
  ``w_v = pos_weight`` if ``y_v = 1`` else 1.

With ``neighbourhood`` (the default) training runs on the neighbourhoods the ``gnn`` policy reads
(``method: ball``): each question's candidates ``C`` are the nodes within ``max_hops`` out-edge hops
of its entries (every node the walk can score), the reader runs once over what its layers need to
give every candidate its full-graph score, one part per question
(:func:`graphmem.policies.subgraph.layered_subgraphs`; where those parts would read most of a small
graph's edges, one shared full-graph pass gives the same scores cheaper, :func:`candidate_scores`), and
the losses compare the candidates only (gold outside ``C`` cannot be loaded); a lexical reader reads
each candidate's features from the example's
``[B, N, F]`` table, as the full pass does. Without it, every node of the graph is scored and compared. The
validation recall is that of the policy's walk either way (``method: ball`` and ``full`` load the
same nodes).

The reported metric is evidence recall of the ``gnn`` policy's walk under a :class:`Budget`
(``|loaded ∩ gold| / |gold|``, averaged over questions). It is computed for all queries of a graph
at once: one batched reader forward (``eval_chunk`` queries at a time) and
:func:`graphmem.policies.gnn.batched_walk`, the policy's own walk over the batch. The
best epoch is chosen on the validation examples only; :func:`graph_split` makes train /
validation / test graph lists with :func:`rl.common.splits.conversation_folds`. A REINFORCE fine-tune
stage is not part of this module.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.eval.metrics import mask_recall
from graphmem.index.lexical_features import Lexical, dense_features, lexical_inputs
from graphmem.policies.gnn import BallScores, batched_walk, parts_cost_more, reader_inputs
from graphmem.policies.selectors import make_entry_selector
from graphmem.policies.subgraph import ball, layered_subgraphs, lookup, relational_in_degree
from graphmem.policies.tables import csr
from graphmem.store.checkpoint import save_checkpoint as write_checkpoint
from models.gnn_reader import GNNReader, ReaderConfig, ReaderShape, ball_scores, start_mask
from rl.common.divergence import check_loss, check_weights
from rl.common.seeding import deterministic, seed_everything
from rl.common.splits import conversation_folds


@dataclass
class GNNTrainConfig(ReaderShape):
    """Settings of :func:`train_reader` (mirrored by ``configs/gnn.yaml``): the reader's shape
    (:class:`~models.gnn_reader.ReaderShape`: ``hidden_dim``, ``num_layers``, ``add_inverse``) and these."""

    loss: str = "ranking"
    """'ranking' (multi-positive) or 'bce' (weighted)"""
    pos_weight: float = 10.0
    """weight of positives in the 'bce' loss"""
    lr: float = 3e-3
    """Adam learning rate"""
    weight_decay: float = 0.0
    """Adam weight decay"""
    epochs: int = 30
    """passes over the training examples"""
    query_batch: int = 32
    """queries of one graph per optimizer step"""
    eval_chunk: int = 256
    """queries scored per forward pass when measuring recall (one pass per graph when it holds fewer)"""
    seed: int = 0
    """fixes initialization and example order"""
    device: str = "cpu"
    """where the reader trains"""
    lexical: bool = True
    """the reader reads the lexical features of query and node text (graphmem/index/lexical_features.py)"""
    neighbourhood: bool = True
    """train on the neighbourhoods the policy reads, losses over its candidates (module docstring); false: every node"""


@dataclass
class ReaderExample:
    """Queries over one graph with their entries and gold rows (gold is used by the loss only), the
    lexical features ``[B, N, F]`` of the query texts and the nodes, and the lexical inputs they come
    from (``terms``, what the neighbourhood scores of :class:`~graphmem.policies.gnn.BallScores` read)."""

    graph: MemoryGraph
    query_embeddings: Tensor
    entries: list[list[int]]
    gold: list[list[int]]
    qids: list[str] = field(default_factory=list)
    lexical: Tensor | None = None
    terms: Lexical | None = None


def examples_from_graphset(
    graphset, question_indices: Sequence[int], budget: Budget, entries="embedding", max_queries: int | None = None
) -> list[ReaderExample]:
    """Group questions of a ``GraphSet`` by graph (one example per graph, or per ``max_queries``
    questions of it); questions without gold rows in their graph are dropped.

    Entries come from the selector named ``entries`` (or given as an object), exactly as at retrieval.
    """
    entry_selector = make_entry_selector(entries)
    by_graph: dict[str, list[int]] = {}
    for i in question_indices:
        by_graph.setdefault(graphset.questions[i].graph, []).append(i)
    out = []
    for name in sorted(by_graph):
        graph = graphset.graphs[name]
        keep = []
        for i in by_graph[name]:
            rows = [graph.index_of(e) for e in graphset.questions[i].evidence if graph.has_node(e)]
            if rows:
                keep.append((i, sorted(set(rows))))
        step = max_queries or max(len(keep), 1)
        for lo in range(0, len(keep), step):
            part = keep[lo : lo + step]
            emb = graphset.query_embeddings[[i for i, _ in part]].float()
            queries = [
                Query(graphset.questions[i].qid, graphset.questions[i].text, emb[k]) for k, (i, _) in enumerate(part)
            ]
            entries = [list(e)[: budget.max_entries] for e in entry_selector.select(graph, queries, budget)]
            terms = lexical_inputs([graph], [[q.text for q in queries]])
            gold, qids = [g for _, g in part], [q.qid for q in queries]
            out.append(ReaderExample(graph, emb, entries, gold, qids, dense_features(terms), terms))
    return out


# ---------------------------------------------------------------------- losses
def ranking_loss(scores: Tensor, positive: Tensor) -> Tensor:
    """Multi-positive ranking loss (module docstring); ``scores`` and bool ``positive`` are ``[B, N]``."""
    neg_lse = torch.logsumexp(scores.masked_fill(positive, -math.inf), dim=1, keepdim=True)  # [B, 1]
    per_pos = -scores + torch.logaddexp(scores, neg_lse)
    per_pos = per_pos.masked_fill(~positive, 0.0)
    return (per_pos.sum(1) / positive.sum(1).clamp(min=1)).mean()


def weighted_bce_loss(scores: Tensor, positive: Tensor, pos_weight: float) -> Tensor:
    """Weighted binary cross-entropy (module docstring)."""
    target = positive.float()
    weight = torch.where(positive, torch.full_like(target, pos_weight), torch.ones_like(target))
    return F.binary_cross_entropy_with_logits(scores, target, weight=weight)


def _check_lexical(reader: GNNReader, ex: ReaderExample, field: str = "lexical") -> None:
    if reader.config.lexical and getattr(ex, field) is None:
        raise ValueError(f"graph {ex.graph.name!r}: the reader reads lexical features, its example has no {field}")


def _batch_scores(reader: GNNReader, ex: ReaderExample, rows: list[int], device) -> Tensor:
    g = ex.graph
    _check_lexical(reader, ex)
    start = start_mask([ex.entries[i] for i in rows], g.num_nodes, device=device)
    return reader(
        g.embeddings.to(device),
        g.edge_index.to(device),
        g.edge_type.to(device),
        g.edge_attr.to(device),
        ex.query_embeddings[rows].to(device),
        start,
        lexical=ex.lexical[rows].to(device) if reader.config.lexical else None,
    )


def candidate_scores(
    reader: GNNReader, ex: ReaderExample, rows: list[int], budget: Budget, device, max_share: float = 0.125
) -> tuple[Tensor, Tensor, Tensor]:
    """``(query [C], node [C], scores [C])``: the reader's scores of the candidates of questions ``rows``
    (batch positions ``0 .. len(rows) - 1``), from one pass over what their layers need
    (:func:`~graphmem.policies.subgraph.layered_subgraphs`, module docstring).

    Those parts give each candidate its full-graph score, so where they would read more than
    ``max_share`` of the edge-columns of one full-graph pass with ``B`` columns (the candidates' own
    in-edges, which the last layer reads, already do; :func:`~graphmem.policies.gnn.parts_cost_more`: the
    neighbourhoods cover much of a small graph), the scores are read from that pass instead: the same
    scores, at less cost.
    """
    g, n, cfg = ex.graph, ex.graph.num_nodes, reader.config
    pairs = [(b, v) for b, i in enumerate(rows) for v in ex.entries[i][: budget.max_entries]]
    query = torch.tensor([b for b, _ in pairs], dtype=torch.long, device=device)
    node = torch.tensor([v for _, v in pairs], dtype=torch.long, device=device)
    rowptr, perm = csr(g, device)
    hops = budget.max_hops if budget.top_k_neighbors > 0 else 0
    cq, cn, _ = ball(rowptr, g.edge_index[1].to(device)[perm], query, node, hops, n)
    last = int(relational_in_degree(g, cfg.add_inverse, device)[cn].sum()) if cfg.num_layers else 0
    if parts_cost_more(last, g, cfg, len(rows), max_share):  # the last layer alone reads the candidates' in-edges
        return cq, cn, _batch_scores(reader, ex, rows, device)[cq, cn]
    sub = layered_subgraphs(g, cq, cn, torch.unique(query * n + node), cfg.num_layers, cfg.add_inverse)
    phi = None
    if cfg.lexical:  # each candidate's features with its query, as the full pass reads them
        _check_lexical(reader, ex)
        phi = ex.lexical[torch.tensor(rows, dtype=torch.long)[cq.cpu()], cn.cpu()].to(device)
    return cq, cn, ball_scores(reader, *reader_inputs(g, device), ex.query_embeddings[rows].to(device), sub, phi)


def candidate_loss(
    cfg: GNNTrainConfig, query: Tensor, node: Tensor, scores: Tensor, ex: ReaderExample, rows: list[int]
) -> Tensor:
    """The configured loss over each question's candidates, laid out as ``[B, C_max]`` rows (padding
    is neither positive nor negative)."""
    n = ex.graph.num_nodes
    gold = torch.tensor(sorted({b * n + v for b, i in enumerate(rows) for v in ex.gold[i]}), dtype=torch.long)
    positive, _ = lookup(gold.to(query.device), query * n + node)
    if cfg.loss != "ranking":
        return weighted_bce_loss(scores[None], positive[None], cfg.pos_weight)
    counts = torch.bincount(query, minlength=len(rows))
    col = torch.arange(query.numel(), device=query.device) - (torch.cumsum(counts, 0) - counts)[query]
    mat = scores.new_full((len(rows), int(counts.max())), -math.inf)
    pos = torch.zeros(mat.shape, dtype=torch.bool, device=query.device)
    mat = mat.index_put((query, col), scores)
    pos[query, col] = positive
    return ranking_loss(mat, pos)


# ---------------------------------------------------------------------- evaluation
def gold_mask(ex: ReaderExample) -> Tensor:
    """``[B, N]`` bool, True at each question's gold rows."""
    mask = torch.zeros(len(ex.gold), ex.graph.num_nodes, dtype=torch.bool)
    for b, rows in enumerate(ex.gold):
        mask[b, rows] = True
    return mask


def walk_recall(ex: ReaderExample, scores, budget: Budget) -> Tensor:
    """``[B]`` evidence recall ``|loaded ∩ gold| / |gold|`` of the batched walk ranked by ``scores``."""
    entries = [list(e)[: budget.max_entries] for e in ex.entries]
    return mask_recall(batched_walk(ex.graph, entries, scores, budget).loaded_mask().cpu(), gold_mask(ex))


@torch.no_grad()
def evidence_recall(
    reader: GNNReader,
    examples: Sequence[ReaderExample],
    budget: Budget,
    device: str = "cpu",
    chunk: int = 256,
    neighbourhood: bool = False,
) -> float:
    """Mean ``|loaded ∩ gold| / |gold|`` of the ``gnn`` walk under ``budget`` over all questions: with
    ``neighbourhood``, scored as ``method: ball`` scores (the same walk and loaded sets up to float
    summation order), else by one full-graph pass per ``chunk`` questions."""
    reader.eval()
    total, count = 0.0, 0
    for ex in examples:
        rows = list(range(len(ex.gold)))
        if neighbourhood:
            queries = [Query(str(i), "", ex.query_embeddings[i]) for i in rows]
            entries = [list(e)[: budget.max_entries] for e in ex.entries]
            _check_lexical(reader, ex, "terms")
            source = BallScores(reader, ex.graph, queries, entries, device, lexical=ex.terms)
            total += float(walk_recall(ex, source, budget).sum())
            count += len(rows)
            continue
        scores = torch.cat(
            [_batch_scores(reader, ex, rows[lo : lo + chunk], device).cpu() for lo in range(0, len(rows), chunk)]
        )
        total += float(walk_recall(ex, scores, budget).sum())
        count += len(rows)
    return total / max(count, 1)


# ---------------------------------------------------------------------- training
@deterministic
def train_reader(
    train: Sequence[ReaderExample],
    cfg: GNNTrainConfig,
    budget: Budget,
    val: Sequence[ReaderExample] | None = None,
    reader: GNNReader | None = None,
    progress: bool = False,
) -> tuple[GNNReader, list[dict]]:
    """Train (or fine-tune ``reader``) and return the best-on-validation reader and per-epoch history.

    Without ``val`` the last epoch is kept. A non-finite loss or weight stops it
    (:class:`graphmem.core.errors.DivergedError`, :mod:`rl.common.divergence`). Deterministic on CPU for a fixed
    ``cfg.seed`` and thread count (:mod:`rl.common.seeding`).
    """
    seed_everything(cfg.seed)
    rng = random.Random(cfg.seed)
    device = torch.device(cfg.device)
    if reader is None:
        g0 = train[0].graph
        reader = GNNReader(
            ReaderConfig(
                input_dim=g0.dim,
                num_relations=len(g0.relations),
                edge_dim=int(g0.edge_attr.shape[1]),
                lexical=cfg.lexical,
                **cfg.shape(),
            )
        )
    reader.to(device)
    opt = torch.optim.Adam(reader.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    batches = [
        (k, list(range(lo, min(lo + cfg.query_batch, len(ex.gold)))))
        for k, ex in enumerate(train)
        for lo in range(0, len(ex.gold), cfg.query_batch)
    ]
    history: list[dict] = []
    best_state, best_val = None, -1.0
    epochs = range(cfg.epochs)
    if progress:
        from tqdm import tqdm

        epochs = tqdm(epochs, desc="reader")
    for epoch in epochs:
        reader.train()
        rng.shuffle(batches)
        total, t0 = 0.0, time.perf_counter()
        for step, (k, rows) in enumerate(batches):
            ex, where = train[k], f"epoch {epoch} step {step}"
            if cfg.neighbourhood:
                loss = candidate_loss(cfg, *candidate_scores(reader, ex, rows, budget, device), ex, rows)
            else:
                scores = _batch_scores(reader, ex, rows, device)
                positive = torch.zeros_like(scores, dtype=torch.bool)
                for b, i in enumerate(rows):
                    positive[b, ex.gold[i]] = True
                loss = (
                    ranking_loss(scores, positive)
                    if cfg.loss == "ranking"
                    else weighted_bce_loss(scores, positive, cfg.pos_weight)
                )
            check_loss(loss, where, f" (learning rate {cfg.lr:g})")
            opt.zero_grad()
            loss.backward()
            opt.step()
            check_weights(reader, where, f" (learning rate {cfg.lr:g})")
            total += loss.item()
        row = {"epoch": epoch, "loss": total / max(len(batches), 1), "train_s": time.perf_counter() - t0}
        if val:
            row["val_recall"] = evidence_recall(reader, val, budget, cfg.device, cfg.eval_chunk)
            if row["val_recall"] > best_val:
                best_val, best_state = (
                    row["val_recall"],
                    {k: v.detach().clone() for k, v in reader.state_dict().items()},
                )
        history.append(row)
    if best_state is not None:
        reader.load_state_dict(best_state)
    return reader.cpu().eval(), history


def save_checkpoint(
    reader: GNNReader,
    path: str | Path,
    cfg: GNNTrainConfig | None = None,
    metrics: dict | None = None,
    run_id: str | None = None,
    inputs: dict | None = None,
) -> Path:
    """Write ``reader.checkpoint()`` (plus training settings, the run id and the
    :func:`graphmem.store.checkpoint.checkpoint_inputs` record) as a ``"gnn"`` checkpoint
    (:func:`graphmem.store.checkpoint.save_checkpoint`: atomic, checksummed)."""
    ckpt = reader.checkpoint()
    if cfg is not None:
        ckpt["train_config"] = asdict(cfg)
    if metrics is not None:
        ckpt["metrics_json"] = json.dumps(metrics)
    if run_id is not None:
        ckpt["run_id"] = run_id
    return write_checkpoint(path, "gnn", ckpt, inputs)


def graph_split(
    names: Sequence[str], k: int = 5, fold: int = 0, seed: int = 0, val_fraction: float = 0.2
) -> dict[str, list[str]]:
    """``train`` / ``val`` / ``test`` graph names of fold ``fold`` of :func:`rl.common.splits.conversation_folds`
    (the split the router's training script uses for the same ``k``, ``seed`` and ``val_fraction``)."""
    split = conversation_folds(list(names), k=k, seed=seed, val_fraction=val_fraction)[fold]
    return {"train": list(split.train), "val": list(split.val), "test": list(split.test)}


@torch.no_grad()
def cosine_walk_recall(examples: Sequence[ReaderExample], budget: Budget) -> float:
    """Reference: the same budgeted walk ranked by plain query-node cosine instead of the reader."""
    total, count = 0.0, 0
    for ex in examples:
        cos = F.normalize(ex.query_embeddings.float(), dim=1) @ F.normalize(ex.graph.embeddings.float(), dim=1).T
        total += float(walk_recall(ex, cos, budget).sum())
        count += len(ex.gold)
    return total / max(count, 1)
