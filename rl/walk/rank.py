"""Training the router's ranking head on the lists its trained walk returns (:class:`models.rank_head.RankHead`).

The walk is frozen. Each training question is walked once, greedily, by the router as it serves
(:meth:`graphmem.policies.router.RouterPolicy.list_inputs`), and its list gets ``negatives`` hard
negatives: the entry selector's candidates ranked right after the entries (with the hybrid selector,
the BM25 and dense neighbours of what the walk started from). An epoch is one pass over the training
questions in batches of ``batch_size`` questions, one Adam step per batch on ListNet's loss
(:func:`models.rank_head.listwise_loss`). Every epoch is validated on the validation questions' lists,
loaded nodes only, as served:

    val = mean_q  (R@2(q) + R@5(q)) / 2,   R@k(q) = |top-k of the ranked list ∩ G_q| / |G_q|

over the questions with resolvable gold nodes ``G_q`` (gold is read here, for labels and the score,
never by the policy). The selected head is the best validation epoch; when the walk's own load order
scores at least as well on validation, no head is kept and the router returns its load order.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.eval.metrics import mean_recall_at, resolvable_evidence
from graphmem.policies.base import Scope
from graphmem.policies.rank_features import NUM_RANK_FEATURES
from graphmem.policies.router import RouterPolicy
from models.rank_head import RESIDUALS, RankHead, RankHeadConfig, RankInputs, listwise_loss
from rl.common.divergence import check_loss, check_weights
from rl.common.logging import Logger
from rl.common.seeding import seed_everything

CUTS = (2, 5)
QUERIES_PER_CALL = 128  # questions walked together when the lists are collected (bounds the walk's [B, P] tensors)
log = logging.getLogger(__name__)


@dataclass
class RankConfig:
    """The ranking head's training (``trainer.rank``)."""

    epochs: int = 30
    """passes over the training questions' lists (0: no head, the load order is returned)"""
    lr: float = 3e-3
    """Adam learning rate"""
    weight_decay: float = 1e-4
    """L2 weight decay"""
    hidden: int = 32
    """the head's item state size H"""
    residual: str = "cosine"
    """what the untrained head ranks by (:data:`models.rank_head.RESIDUALS`): cosine, walk_score or load_order"""
    negatives: int = 8
    """hard negatives per training question: the entry selector's next candidates after the entries"""
    batch_size: int = 32
    """questions per optimizer step"""
    graphs_per_call: int = 64
    """graphs walked together when the lists are collected"""

    def __post_init__(self) -> None:
        for name in ("epochs", "negatives"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"trainer.rank.{name} must be a non-negative integer, got {v!r}")
        for name in ("hidden", "batch_size", "graphs_per_call"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"trainer.rank.{name} must be a positive integer, got {v!r}")
        if not self.lr > 0 or not self.weight_decay >= 0:
            raise ValueError(f"trainer.rank: lr must be > 0 and weight_decay >= 0, got {self.lr}, {self.weight_decay}")
        if self.residual not in RESIDUALS:  # before the walk trains, and with epochs=0 too
            raise ValueError(f"trainer.rank.residual={self.residual!r}: must be one of {sorted(RESIDUALS)}")


@dataclass
class Lists:
    """The items of many questions' lists (:class:`RankInputs`), which are gold, and each question's gold count."""

    items: RankInputs
    gold: Tensor
    n_gold: Tensor

    def batch(self, rows: Tensor) -> tuple[RankInputs, Tensor]:
        keep = torch.isin(self.items.query, rows)
        return self.items.select(keep), self.gold[keep]


@dataclass
class RankResult:
    """The selected head (``None``: the load order won on validation) and the per-epoch history."""

    head: RankHead | None
    selected: str
    best_epoch: int
    val: dict[str, float]
    history: list[dict[str, Any]] = field(default_factory=list)

    def checkpoint(self) -> dict[str, Any] | None:
        return None if self.head is None else self.head.checkpoint()


def collect_lists(
    policy: RouterPolicy,
    graphs: Mapping[str, MemoryGraph],
    questions: Sequence[Question],
    embeddings: Tensor,
    budget: Budget,
    negatives: int,
    graphs_per_call: int = 64,
) -> Lists:
    """The walk's lists (with ``negatives`` hard negatives each) of the questions that have a resolvable gold node."""
    by_graph: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        if any(graphs[q.graph].has_node(e) for e in q.evidence):
            by_graph.setdefault(q.graph, []).append(i)
    parts, golds, counts, done, items = [], [], [], 0, 0
    for call in _calls(by_graph, graphs_per_call):
        chunk = [n for n, _ in call]
        asked = [[questions[i] for i in idx] for _, idx in call]
        queries = [[Query(q.qid, q.text, embeddings[i]) for q, i in zip(qs, idx)] for qs, (_, idx) in zip(asked, call)]
        scope = Scope.union([graphs[n] for n in chunk], queries, policy.device)
        x = policy.list_inputs(scope, budget, negatives)
        gold_rows = [
            [graphs[n].index_of(e) + off for e in resolvable_evidence(q, graphs[n])]
            for n, qs, off in zip(chunk, asked, scope.batch.node_ptr.tolist())
            for q in qs
        ]
        n = max(scope.graph.num_nodes, 1)
        keys = torch.tensor([b * n + v for b, rows in enumerate(gold_rows) for v in rows], dtype=torch.long)
        golds.append(torch.isin(x.query.cpu() * n + x.node.cpu(), keys))
        counts += [len(rows) for rows in gold_rows]
        parts.append(
            dataclasses.replace(
                x.to("cpu"), query=x.query.cpu() + done, src=x.src.cpu() + items, dst=x.dst.cpu() + items
            )
        )
        done, items = done + len(gold_rows), items + int(x.query.numel())
    if not parts:
        raise ValueError("ranking head: no question has a gold node in its graph")
    fields = [f.name for f in dataclasses.fields(RankInputs)]
    merged = RankInputs(*(torch.cat([getattr(p, f) for p in parts]) for f in fields))
    return Lists(merged, torch.cat(golds), torch.tensor(counts, dtype=torch.float32))


def _calls(by_graph: Mapping[str, list[int]], graphs_per_call: int) -> list[list[tuple[str, list[int]]]]:
    """The walks of :func:`collect_lists`, in graph-name order: each call at most ``graphs_per_call`` graphs
    (each once) and :data:`QUERIES_PER_CALL` questions, a graph with more questions walked in several calls."""
    calls: list[list[tuple[str, list[int]]]] = []
    size = 0
    for name in sorted(by_graph):
        idx = by_graph[name]
        for lo in range(0, len(idx), QUERIES_PER_CALL):
            unit = idx[lo : lo + QUERIES_PER_CALL]
            fits = calls and len(calls[-1]) < graphs_per_call and size + len(unit) <= QUERIES_PER_CALL
            if fits and all(n != name for n, _ in calls[-1]):
                calls[-1].append((name, unit))
                size += len(unit)
            else:
                calls.append([(name, unit)])
                size = len(unit)
    return calls


def ranked_recall(scores: Tensor | None, lists: Lists) -> float:
    """The validation score of the module docstring for the loaded items ranked by ``scores``
    (``None``: in load order)."""
    x = lists.items
    loaded = x.loaded
    query, gold = x.query[loaded], lists.gold[loaded]
    key = -x.slot[loaded].float() if scores is None else scores[loaded]
    order = torch.argsort(-key, stable=True)
    order = order[torch.argsort(query[order], stable=True)]
    query, gold = query[order], gold[order]
    counts = torch.bincount(query, minlength=lists.n_gold.numel())
    position = torch.arange(query.numel()) - (torch.cumsum(counts, 0) - counts)[query]
    return mean_recall_at(query, gold, position, lists.n_gold, CUTS)


def train_rank_head(
    cfg: RankConfig, train: Lists, val: Lists | None, logger: Logger | None = None, seed: int = 0
) -> RankResult:
    """The loop of the module docstring; without validation lists the last epoch is kept."""
    seed_everything(seed)
    head = RankHead(RankHeadConfig(NUM_RANK_FEATURES, cfg.hidden, cfg.residual))
    optimizer = torch.optim.Adam(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    generator = torch.Generator().manual_seed(seed)
    n = int(train.n_gold.numel())
    load_order = ranked_recall(None, val) if val is not None else float("nan")
    best, best_epoch, best_state, history = float("-inf"), -1, None, []
    for epoch in range(cfg.epochs):
        perm, losses = torch.randperm(n, generator=generator), []
        head.train()
        for step, lo in enumerate(range(0, n, cfg.batch_size)):
            items, gold = train.batch(perm[lo : lo + cfg.batch_size])
            loss = listwise_loss(head(items), items.query, gold)
            check_loss(loss, f"rank epoch {epoch} step {step}", f" (trainer.rank.lr={cfg.lr:g})")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            check_weights(head, f"rank epoch {epoch} step {step}", f" (trainer.rank.lr={cfg.lr:g})")
            losses.append(float(loss.detach()))
        head.eval()
        row = {"phase": "rank", "epoch": epoch, "rank_loss": sum(losses) / len(losses)}
        if val is not None:
            with torch.no_grad():
                row["val_ranked_recall"] = ranked_recall(head(val.items), val)
        score = row.get("val_ranked_recall", float(epoch))
        if score > best:
            best, best_epoch = score, epoch
            best_state = {k: v.detach().clone() for k, v in head.state_dict().items()}
        history.append(row)
        if logger is not None:
            logger.log(row)
    if best_state is not None:
        head.load_state_dict(best_state)
    values = {"head": best, "load_order": load_order}
    kept = val is None or best > load_order
    log.info(
        "ranking head: %s kept (validation ranked recall: head %.4f at epoch %d, load order %.4f; %d training lists)",
        "the head" if kept else "the load order",
        best,
        best_epoch,
        load_order,
        n,
    )
    if not kept:
        return RankResult(None, "load order", best_epoch, values, history)
    return RankResult(head, "head", best_epoch, values, history)
