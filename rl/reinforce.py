"""REINFORCE for the QueryRouter and the edge features (HAGE §3, Appendix B), batched.

Per optimizer step, for a batch of training questions expanded into episodes (one per entry node
used as a start), with returns and a moving-average baseline:

    G_t = Σ_{k≥0} γ^k r_{t+k}                        (per episode, zero after it ends)
    b  ← β b + (1 - β) · mean_t,episodes G_t          (b starts at the first batch mean)
    A_t = G_t - b
    L   = -(1/B) Σ_episodes Σ_t log π(a_t | s_t) · A_t  +  λ_anchor ||E - E0||^2  -  c_H · H(π)

The router and intent head use Adam at ``lr_router``, the edge features Adam at ``lr_edges``.
Gradients are clipped to ``max_grad_norm``. Actions are sampled with noise keyed by
(seed, epoch, step, episode index in the batch), so a run is reproducible and, under
``torchrun``, N ranks each rolling out a slice of the batch reproduce one process
(:mod:`rl.common.distributed` says what is reduced; rank 0 alone validates, logs and checkpoints).
Model selection is on validation evidence recall of
the policy walking at question time under the evaluation budget.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from graphmem.datasets.types import Question
from graphmem.device import resolve_device
from graphmem.graph import MemoryGraph
from graphmem.graph_batch import GraphBatch
from graphmem.policies.base import Budget, Query
from graphmem.policies.selectors import make_entry_selector
from models.edge_features import EdgeFeatures
from models.intent import IntentProvider, RelationIntent
from models.router import QueryRouter
from rl.common.checkpoint import graph_fingerprint, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rl.common.distributed import World, current_world
from rl.common.logging import Logger
from rl.common.seeding import deterministic, seed_everything
from rl.mdp import MDPConfig
from rl.rollout import episode_keys, make_episodes, rollout


@dataclass
class TrainConfig:
    seed: int = 0
    """fixes initialisation, question order and action sampling"""
    device: str = "auto"
    """cpu, cuda, or auto (cuda when available)"""
    dtype: str = "float32"
    """float32, or float64 to train in double precision (exactness checks; validation walks in float32)"""
    epochs: int = 200
    """passes over the training questions"""
    batch_size: int = 64
    """questions per optimizer step"""
    starts_per_question: int = 2
    """episodes per question, starting at its best entry nodes"""
    gamma: float = 0.99
    """discount γ"""
    baseline_beta: float = 0.99
    """decay β of the moving-average baseline"""
    anchor_lambda: float = 1.0
    """λ_anchor of the L2 pull of edge features to their Phase-1 values"""
    lr_router: float = 3e-3
    """Adam learning rate of router and intent head (HAGE: 1e-3 over 200 epochs, see hage_full)"""
    lr_edges: float = 1e-4
    """Adam learning rate of the edge features"""
    max_grad_norm: float = 1.0
    """gradient clipping norm (0 disables)"""
    entropy_coef: float = 0.0
    """entropy bonus c_H"""
    temperature: float = 0.1
    """softmax temperature T of the sampling policy (cosines differ by hundredths: T = 1 samples almost uniformly)"""
    max_hops: int = 5
    """H_max of training episodes"""
    hit_reward: float = 10.0
    """R_hit"""
    step_penalty: float = 0.05
    """λ_step"""
    timeout_penalty: float = 1.0
    """λ_timeout"""
    action_space: str = "frontier"
    """frontier (out-edges of every visited node, as the question-time walk ranks them) or node (current node only)"""
    hidden: int = 64
    """router hidden width"""
    relation_dim: int = 4
    """relation embedding size (0: none)"""
    router_head: str = "mlp"
    """structural-weight head: mlp or linear"""
    similarities: bool = True
    """feed the edge's semantic similarities [cos(q,x_i), cos(q,x_j), cos(x_i,x_j)] to the head"""
    router_mode: str = "learned"
    """learned, or fixed (m = 1, w = Σ e: the edges-only / no-router variants)"""
    intent: str = "prototype"
    """relation intent source: prototype, head, uniform, external"""
    edge_init: str = "phase1"
    """edge features start: phase1 (graph scores) or onehot"""
    train_edges: bool = True
    """whether edge features are trained"""
    eval_every: int = 1
    """epochs between validations"""
    checkpoint_dir: str = ""
    """where last.pt / best.pt go ('' disables)"""
    checkpoint_every: int = 1
    """epochs between periodic checkpoints"""
    resume: bool = False
    """continue from checkpoint_dir/last.pt when it exists"""
    run_id: str = ""
    """the run's id (rl.common.run_folder), written into last.pt / best.pt; checkpoints of another run are refused"""

    def __post_init__(self) -> None:
        positive = ("batch_size", "starts_per_question", "max_hops", "hidden", "eval_every", "checkpoint_every")
        for name in ("epochs", *positive):  # epochs = 0: the initialised modules, untrained
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (name in positive):
                raise ValueError(
                    f"trainer.{name} must be a {'positive' if name in positive else 'non-negative'} "
                    f"integer, got {value!r}"
                )
        for name in ("lr_router", "lr_edges", "temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"trainer.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("gamma", "baseline_beta"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"trainer.{name} must lie in [0, 1], got {getattr(self, name)!r}")
        for name in (
            "anchor_lambda",
            "max_grad_norm",
            "entropy_coef",
            "step_penalty",
            "timeout_penalty",
            "relation_dim",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"trainer.{name} must be >= 0, got {getattr(self, name)!r}")
        choices = {
            "device": None,
            "dtype": ("float32", "float64"),
            "router_head": ("mlp", "linear"),
            "router_mode": ("learned", "fixed"),
            "action_space": ("frontier", "node"),
            "intent": ("prototype", "head", "uniform", "external"),
            "edge_init": ("phase1", "onehot"),
        }
        for name, allowed in choices.items():
            if allowed is not None and getattr(self, name) not in allowed:
                raise ValueError(f"trainer.{name} must be one of {allowed}, got {getattr(self, name)!r}")

    def mdp(self) -> MDPConfig:
        return MDPConfig(self.max_hops, self.hit_reward, self.step_penalty, self.timeout_penalty, self.action_space)


@dataclass
class TrainResult:
    router: QueryRouter
    intent: RelationIntent
    edges: EdgeFeatures
    history: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int = -1
    best_score: float = float("nan")
    best_state: dict[str, Any] | None = None


def build_modules(
    cfg: TrainConfig, graphs: Mapping[str, MemoryGraph], dim: int
) -> tuple[QueryRouter, RelationIntent, EdgeFeatures]:
    """Router, intent and edge features as ``cfg`` describes (seed the RNG first for a fixed init)."""
    router = QueryRouter(
        dim,
        hidden=cfg.hidden,
        relation_dim=cfg.relation_dim,
        head=cfg.router_head,
        mode=cfg.router_mode,
        similarities=cfg.similarities,
    )
    intent = RelationIntent(dim, kind=cfg.intent if cfg.router_mode == "learned" else "uniform")
    edges = EdgeFeatures(graphs, init=cfg.edge_init, trainable=cfg.train_edges)
    return router, intent, edges


def gold_rows(graph: MemoryGraph, question: Question) -> list[int]:
    """Rows of the question's gold evidence nodes in ``graph`` (reward only)."""
    return [graph.index_of(e) for e in dict.fromkeys(question.evidence) if graph.has_node(e)]


def _padded(rows: Sequence[Sequence[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max([len(r) for r in rows] + [1])), -1, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def prepare_questions(
    batch: GraphBatch,
    graphs: Mapping[str, MemoryGraph],
    questions: Sequence[Question],
    embeddings: torch.Tensor,
    budget: Budget,
    entry_selector,
) -> dict[str, torch.Tensor]:
    """Training tensors: query embeddings, global entry rows (selector order) and gold rows, ``-1`` padded.

    Questions without any gold node in their graph are dropped (they carry no learning signal).
    """
    keep, entries, gold = [], [], []
    by_graph: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        by_graph.setdefault(q.graph, []).append(i)
    for name, idx in by_graph.items():
        graph, off = graphs[name], batch.offset_of(name)
        queries = [Query(questions[i].qid, questions[i].text, embeddings[i]) for i in idx]
        for i, ent in zip(idx, entry_selector.select(graph, queries, budget)):
            g = gold_rows(graph, questions[i])
            if g and ent:
                keep.append(i)
                entries.append([v + off for v in ent])
                gold.append([v + off for v in g])
    order = torch.tensor(keep, dtype=torch.long)
    return {"q": embeddings[order].float(), "index": order, "entries": _padded(entries), "gold": _padded(gold)}


def validation_recall(
    router: QueryRouter,
    intent: RelationIntent,
    edges: EdgeFeatures,
    graphs: Mapping[str, MemoryGraph],
    questions: Sequence[Question],
    embeddings: torch.Tensor,
    budget: Budget,
    entry_selector="embedding",
    intent_provider: IntentProvider | None = None,
    device: str | torch.device = "cpu",
) -> float:
    """Mean evidence recall of the router walking at question time (gold joined after retrieval)."""
    from graphmem.eval.harness import run_retrievals
    from graphmem.eval.metrics import resolvable_evidence
    from graphmem.policies.router import RouterPolicy

    live = {
        name: dataclasses.replace(g, edge_attr=edges.of(name).detach().cpu().float(), _cache={})
        for name, g in graphs.items()
        if name in {q.graph for q in questions}
    }
    policy = RouterPolicy(
        router=router, intent=intent, device=str(device), entry_selector=entry_selector, intent_provider=intent_provider
    )
    queries = [Query(q.qid, q.text, embeddings[i]) for i, q in enumerate(questions)]
    retrievals, _ = run_retrievals(policy, live, queries, [q.graph for q in questions], budget)
    recalls = []
    for q, r in zip(questions, retrievals):
        gold = set(resolvable_evidence(q, live[q.graph]))
        if gold:
            recalls.append(len(gold & set(r.loaded_ids(live[q.graph]))) / len(gold))
    router.train(), intent.train()
    return float(np.mean(recalls)) if recalls else float("nan")


def _to_device(obj: Any, device: str | torch.device) -> Any:
    """``obj`` with every tensor in nested dicts/lists moved to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(v, device) for v in obj)
    return obj


class ReinforceStep:
    """One optimizer step of :func:`train` (module docstring), callable on its own: this rank's
    rollout of the batch's episodes, the returns, the moving-average baseline and advantages
    (global means over all ranks), the policy-gradient loss, backward, the gradient all-reduce, the
    anchor term, clipping and the Adam steps of the router + intent head (``lr_router``) and the
    edge features (``lr_edges``).

    Args:
        cfg: the training config (objective, baseline, anchor, clipping, learning rates).
        router, intent, edges: the modules, on their device and dtype.
        batch: the training graphs as one union (``edges`` holds a feature row per union edge).
        data: :func:`prepare_questions` tensors on the device (``q``, ``entries``, ``gold``).
        external: ``[Q, R]`` external intents of the questions (``intent='external'``), else ``None``.
        world: the process group (default: one process).

    ``baseline`` (``None`` before the first step) carries over between calls and into checkpoints.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        router: QueryRouter,
        intent: RelationIntent,
        edges: EdgeFeatures,
        batch: GraphBatch,
        data: Mapping[str, torch.Tensor],
        external: torch.Tensor | None = None,
        world: World | None = None,
    ) -> None:
        self.cfg, self.router, self.intent, self.edges = cfg, router, intent, edges
        self.batch, self.data, self.external, self.world = batch, data, external, world or current_world()
        router_params = [p for p in [*router.parameters(), *intent.parameters()] if p.requires_grad]
        self.opt_router = torch.optim.Adam(router_params, lr=cfg.lr_router) if router_params else None
        self.opt_edges = torch.optim.Adam([edges.weight], lr=cfg.lr_edges) if edges.trainable else None
        self.trained = router_params + ([edges.weight] if edges.trainable else [])
        self.baseline: float | None = None

    @property
    def trains(self) -> bool:
        """Whether any parameter is trained (else :func:`train` takes no step)."""
        return self.opt_router is not None or self.opt_edges is not None

    def __call__(self, rows: torch.Tensor, epoch: int, step: int) -> dict[str, float]:
        """Update on questions ``rows`` of ``data`` (the whole batch; this rank rolls out its slice).
        Returns the batch's mean return, success rate and loss and its episode count (all ranks)."""
        cfg, world, data, edges = self.cfg, self.world, self.data, self.edges
        device, dtype = data["q"].device, data["q"].dtype
        # ---------------------------------------------------------- rollout (this rank's slice of the batch)
        ep = make_episodes(rows, data["entries"][rows], data["gold"][rows], cfg.starts_per_question)
        mine = world.shard(len(ep), device)
        keys = episode_keys(cfg.seed, epoch, step, int(mine[0]) if len(mine) else 0, len(mine), device)
        ep = ep.take(mine)
        q = data["q"][ep.query]
        pi = self.intent(q, None if self.external is None else self.external[ep.query])
        traj = rollout(self.router, q, pi, edges(), self.batch, ep, cfg.mdp(), cfg.temperature, keys=keys)
        # ---------------------------------------------------------- returns and advantages (global means)
        returns = traj.returns(cfg.gamma).to(dtype)
        acted = traj.acted.float()
        totals = world.all_reduce_sum(
            torch.stack(
                [
                    (returns * acted).sum().double(),
                    acted.sum().double(),
                    torch.tensor(len(ep), dtype=torch.float64, device=device),
                    traj.reward.sum().double(),
                    traj.success.sum().double(),
                ]
            )
        )
        n_acted, n_episodes = totals[1].clamp_min(1), max(float(totals[2]), 1.0)
        mean_return = float(totals[0] / n_acted)
        baseline = mean_return if self.baseline is None else self.baseline
        advantage = (returns - baseline) * acted
        self.baseline = cfg.baseline_beta * baseline + (1 - cfg.baseline_beta) * mean_return
        # ---------------------------------------------------------- loss (this rank's share of the batch loss)
        pg_loss = -(traj.logp * advantage.detach()).sum() / n_episodes
        entropy = (traj.entropy * acted).sum() / n_acted.float()
        loss = pg_loss - cfg.entropy_coef * entropy
        # ---------------------------------------------------------- update
        optimizers = [opt for opt in (self.opt_router, self.opt_edges) if opt]
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        if loss.requires_grad:
            loss.backward()
        world.all_reduce_grads(self.trained)  # the sum of the ranks' shares is the batch gradient
        anchor = edges.anchor_loss() if edges.trainable else loss.new_zeros(())
        if edges.trainable:  # a function of the (identical) parameters: added once, after the reduction
            (cfg.anchor_lambda * anchor).backward()
        if cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.trained, cfg.max_grad_norm)
        for opt in optimizers:
            opt.step()
        return {
            "return": float(totals[3]) / n_episodes,
            "success": float(totals[4]) / n_episodes,
            "loss": float(loss.detach()) + (cfg.anchor_lambda * float(anchor.detach())) / world.size,
            "episodes": int(totals[2]),
        }


@deterministic
def train(
    cfg: TrainConfig,
    graphs: Mapping[str, MemoryGraph],
    questions: Sequence[Question],
    embeddings: torch.Tensor,
    val_questions: Sequence[Question] = (),
    val_embeddings: torch.Tensor | None = None,
    budget: Budget = Budget(),
    logger: Logger | None = None,
    entry_selector="embedding",
    intent_provider: IntentProvider | None = None,
    world: World | None = None,
) -> TrainResult:
    """Train on ``questions`` over ``graphs`` (edge features are kept for every graph in ``graphs``).

    ``world`` (default: the initialised process group, else one process) shards each batch's
    episodes across ranks; every rank must call ``train`` with the same arguments. Runs under
    :func:`rl.common.seeding.deterministic_algorithms`: same seed and thread count, same numbers.
    """
    # ------------------------------------------------------------------ setup
    world = world or current_world()
    seed_everything(cfg.seed)
    device = world.device(resolve_device(cfg.device))
    selector = make_entry_selector(entry_selector)
    router, intent, edges = build_modules(cfg, graphs, embeddings.shape[1])
    dtype = getattr(torch, cfg.dtype)
    router, intent, edges = router.to(device, dtype), intent.to(device, dtype), edges.to(device, dtype)
    batch = GraphBatch.from_graphs(graphs)
    data = {
        k: v.to(device, dtype) if v.is_floating_point() else v.to(device)
        for k, v in prepare_questions(batch, graphs, questions, embeddings, budget, selector).items()
    }
    external = None
    if intent.kind == "external":
        if intent_provider is None:
            raise ValueError("intent='external' needs an intent_provider")
        external = intent_provider([questions[i].text for i in data["index"].tolist()]).to(device, dtype)
    update = ReinforceStep(cfg, router, intent, edges, batch, data, external, world)
    opt_router, opt_edges = update.opt_router, update.opt_edges
    order_gen = torch.Generator().manual_seed(cfg.seed)  # the same global batches on every rank
    ckpt_dir = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    arch = {"router_config": router.config(), "intent_config": intent.config(), "edge_init": edges.init}
    fingerprint = graph_fingerprint(graphs)
    start_epoch, result = 0, TrainResult(router, intent, edges)
    n_train = int(data["q"].shape[0])

    def snapshot(epoch: int) -> dict[str, Any]:
        return {
            **arch,
            "router": router.state_dict(),
            "intent": intent.state_dict(),
            "edges": edges.state_dict(),
            "edge_names": edges.names,
            "fingerprint": fingerprint,
            "run_id": cfg.run_id,
            "config": asdict(cfg),
            "epoch": epoch,
            "baseline": update.baseline,
            "history": result.history,
            "best_epoch": result.best_epoch,
            "best_score": result.best_score,
            "rng": rng_state(),
            "order_rng": order_gen.get_state(),
            "opt_router": opt_router.state_dict() if opt_router else {},
            "opt_edges": opt_edges.state_dict() if opt_edges else {},
        }

    # ------------------------------------------------------------------ resume
    if cfg.resume and ckpt_dir is not None and world.broadcast_object((ckpt_dir / "last.pt").is_file(), device):
        st = load_checkpoint(ckpt_dir / "last.pt", fingerprint, arch, "cpu", cfg.run_id) if world.is_main else None
        st = world.broadcast_object(
            st, device
        )  # rank 0's file: no shared filesystem needed; load_state_dict moves to device
        router.load_state_dict(st["router"]), intent.load_state_dict(st["intent"]), edges.load_state_dict(st["edges"])
        if opt_router:
            opt_router.load_state_dict(st["opt_router"])
        if opt_edges:
            opt_edges.load_state_dict(st["opt_edges"])
        set_rng_state(st["rng"])
        order_gen.set_state(st["order_rng"])
        update.baseline, start_epoch = st["baseline"], st["epoch"] + 1
        result.history, result.best_epoch, result.best_score = list(st["history"]), st["best_epoch"], st["best_score"]

    for epoch in range(start_epoch, cfg.epochs):
        t0, stats = time.perf_counter(), {"return": [], "success": [], "loss": [], "episodes": 0}
        perm = torch.randperm(n_train, generator=order_gen).to(device)
        for step, lo in enumerate(range(0, n_train if update.trains else 0, cfg.batch_size)):
            done = update(perm[lo : lo + cfg.batch_size], epoch, step)
            stats["return"].append(done["return"])
            stats["success"].append(done["success"])
            stats["loss"].append(done["loss"])
            stats["episodes"] += done["episodes"]
        stats["loss"] = world.all_reduce_sum(torch.tensor(stats["loss"], dtype=torch.float64, device=device)).tolist()

        # -------------------------------------------------------------- evaluate, log, checkpoint
        row = {
            "epoch": epoch,
            "episodes": stats["episodes"],
            "baseline": update.baseline,
            "seconds": time.perf_counter() - t0,
            **{k: float(np.mean(stats[k])) if stats[k] else float("nan") for k in ("return", "success", "loss")},
        }
        improved = False
        if world.is_main and val_questions and ((epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs):
            walker = (
                (router, intent)
                if dtype == torch.float32
                else (copy.deepcopy(router).float(), copy.deepcopy(intent).float())
            )
            row["val_recall"] = validation_recall(
                *walker, edges, graphs, val_questions, val_embeddings, budget, selector, intent_provider, device
            )
            improved = not (row["val_recall"] <= result.best_score)  # also true for the first (best is NaN)
            if improved:
                result.best_epoch, result.best_score = epoch, row["val_recall"]
                result.best_state = {
                    k: {n: t.detach().clone() for n, t in m.state_dict().items()}
                    for k, m in (("router", router), ("intent", intent), ("edges", edges))
                }
        result.history.append(row)
        if logger is not None and world.is_main:
            logger.log(row, step=epoch)
        if ckpt_dir is not None and world.is_main:
            if improved:
                save_checkpoint(ckpt_dir / "best.pt", snapshot(epoch))
            if (epoch + 1) % cfg.checkpoint_every == 0 or epoch + 1 == cfg.epochs:
                save_checkpoint(ckpt_dir / "last.pt", snapshot(epoch))
        world.barrier()  # the other ranks wait for rank 0's validation and checkpoints
    # ------------------------------------------------------------------ model selection
    if world.is_main and result.best_state is None and ckpt_dir is not None and (ckpt_dir / "best.pt").is_file():
        result.best_state = load_checkpoint(ckpt_dir / "best.pt", fingerprint, arch, device, cfg.run_id)
    if world.distributed:  # every rank returns rank 0's selection
        result.best_epoch, result.best_score, best = world.broadcast_object(
            (result.best_epoch, result.best_score, _to_device(result.best_state, "cpu")), device
        )
        result.best_state = best
    if result.best_state is not None:  # keep the modules of the best validation epoch
        router.load_state_dict(result.best_state["router"]), intent.load_state_dict(result.best_state["intent"])
        edges.load_state_dict(result.best_state["edges"])
    return result
