"""Training the walk router: imitation warm start, then policy gradients on walk episodes (or HAGE's MDP).

The episode is the question-time retrieval (:mod:`graphmem.policies.walk`) under the evaluation budget; the
rewards are those of :mod:`rl.walk.rewards` (``objective.reward``: evidence, answer or judge, minus the
node and token costs), the losses those of :mod:`rl.walk.objectives`. One epoch, as Stable-Baselines3
splits ``collect_rollouts`` from ``train``:

    for rows in batches of training questions:
        batch = trainer.rollout(rows)          # sampled walks (group_size per question) and their rewards
        stats = trainer.update(batch)          # the phase's loss + λ_anchor · L_anchor, one Adam step
                                               # (ppo_epochs steps on the same walks for PPO)
    val = trainer.validate()                   # greedy walks on the validation questions: mean return
    trainer.save("last.pt"); best epoch -> "best.pt"

The estimator (``objective.estimator``) is REINFORCE with a moving-average baseline, REINFORCE with the
group's leave-one-out baseline, or PPO-clip. Validation scores the objective itself, so a run from the
answer or judge reward selects its epoch without an evidence label.

Phases run in order: ``imitation`` (``objective.imitation_epochs``), then ``reinforce`` on the walk or
``hage_mdp`` (``objective.rl_epochs``), the second starting from the first's best epoch. The model
kept is the best validation epoch of the last phase that ran (so an SL+RL model is always one
that policy gradients moved). Sampling noise comes from one generator seeded by ``run.seed``.

Under ``torchrun`` the trainer is data-parallel (:mod:`rl.walk.parallel`): each rank walks its
slice of every global batch, the gradients are all-reduced by DDP, and rank 0 writes the checkpoints.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from graphmem.config.bounds import OPTIM
from graphmem.core import Budget
from graphmem.core.device import resolve_device
from graphmem.core.errors import NothingMeasuredError
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.policies import make_policy
from graphmem.policies.walk import walk
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.common.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rl.common.distributed import current_world
from rl.common.divergence import check_loss, check_weights
from rl.common.logging import Logger
from rl.common.seeding import deterministic, seed_everything
from rl.walk.data import WalkData, walk_data
from rl.walk.objectives import HageMDP, LeaveOneOut, MovingBaseline
from rl.walk.parallel import WalkLoss, batch_noise, summed
from rl.walk.rank import RankConfig, RankResult, collect_lists, train_rank_head
from rl.walk.rewards import (
    JUDGE_ROLE,
    REWARDS,
    JudgeReward,
    costs,
    evidence_rewards,
    failed_share_problem,
    judge_reward,
)

OBJECTIVES = ("walk", "hage_mdp")
ESTIMATORS = ("moving_average", "leave_one_out", "ppo")


def _checked(obj, positive=(), non_negative=(), choices=None) -> None:
    """Refuse non-numbers, non-positive ``positive`` fields, negative ``non_negative`` fields and values
    outside ``choices``, naming the field."""
    for name in positive + non_negative:
        v = getattr(obj, name)
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and (v > 0 if name in positive else v >= 0)
        if not ok:
            raise ValueError(f"{type(obj).__name__}.{name} must be {'> 0' if name in positive else '>= 0'}, got {v!r}")
    for name, allowed in (choices or {}).items():
        if getattr(obj, name) not in allowed:
            raise ValueError(f"{type(obj).__name__}.{name} must be one of {allowed}, got {getattr(obj, name)!r}")


@dataclass
class ObjectiveConfig:
    """What is optimised (mirrored by ``configs/trainer/default.yaml: objective``)."""

    rl: str = "walk"
    """policy-gradient episodes: walk (the question-time walk) or hage_mdp (HAGE's MDP)"""
    imitation_epochs: int = 10
    """epochs of the supervised warm start (imitation of oracle walks); 0 = RL only"""
    rl_epochs: int = 6
    """epochs of REINFORCE after the warm start; 0 = supervised only"""
    reward: str = "evidence"
    """walk reward (rl.walk.rewards): evidence (gold evidence), answer (answer tokens in the loaded text) or
    judge (an LLM's verdict); answer and judge read no evidence label"""
    temperature: float = 0.1
    """τ of the sampling policy softmax(s / τ) (and of the imitation loss)"""
    rl_temperature: float | None = None
    """τ of the policy-gradient phase (None = temperature): a warm-started walk explores its stop action only
    when τ leaves it a chance"""
    node_cost: float = 0.0
    """walk reward: cost per loaded node (what the stop head trades recall against)"""
    token_cost: float = 0.0
    """walk reward: cost per loaded token"""
    estimator: str = "moving_average"
    """policy-gradient estimator: moving_average (REINFORCE, per-step moving baseline), leave_one_out
    (REINFORCE, group-relative baseline over group_size walks) or ppo (PPO-clip)"""
    group_size: int = 1
    """walks per question in a batch (leave_one_out: >= 2; ppo: its baseline is leave-one-out when >= 2)"""
    ppo_epochs: int = 4
    """ppo: optimizer steps on each batch of walks"""
    clip: float = 0.2
    """ppo: ε of the ratio clipping"""
    kl_coef: float = 0.0
    """ppo: β_KL of the KL(π_old || π) penalty"""
    gamma: float = 1.0
    """walk reward discount"""
    baseline_beta: float = 0.9
    """decay β of the moving-average baseline"""
    entropy_coef: float = 0.0
    """entropy bonus c_H of the walk objective"""
    anchor_lambda: float = 1.0
    """λ_anchor of the pull of learned edge features to their Phase-1 values"""
    mdp: dict[str, Any] = field(default_factory=dict)
    """HageMDP overrides (max_hops, hit_reward, step_penalty, timeout_penalty, starts_per_question, gamma)"""
    judge: dict[str, Any] = field(default_factory=dict)
    """reward judge: graphmem.llm.client.LLMConfig fields (default: the local model, no cache)"""
    max_failed_share: float = 0.5
    """LLM-backed rewards (judge): the largest share of an epoch's calls that may fail (unreachable, an error,
    no score in the reply); past it, or when every call failed, the run stops (exit 3) before best.pt"""

    def __post_init__(self) -> None:
        _checked(
            self,
            ("temperature", "group_size", "ppo_epochs", "clip"),
            ("imitation_epochs", "rl_epochs", "node_cost", "token_cost", "entropy_coef", "anchor_lambda", "kl_coef"),
            {"rl": OBJECTIVES, "reward": REWARDS, "estimator": ESTIMATORS},
        )
        if self.rl_temperature is not None:
            _checked(self, ("rl_temperature",))
        _checked(self, (), ("max_failed_share",))
        if self.max_failed_share > 1:
            raise ValueError(f"ObjectiveConfig.max_failed_share must lie in [0, 1], got {self.max_failed_share!r}")
        if not 0 <= self.gamma <= 1 or not 0 <= self.baseline_beta <= 1:
            raise ValueError("ObjectiveConfig.gamma and baseline_beta must lie in [0, 1]")
        if self.estimator == "leave_one_out" and self.group_size < 2:
            raise ValueError(f"ObjectiveConfig.estimator=leave_one_out needs group_size >= 2, got {self.group_size}")
        if self.reward != "evidence" and (self.imitation_epochs or self.rl == "hage_mdp"):
            raise ValueError(
                f"ObjectiveConfig.reward={self.reward} reads no evidence label, but imitation and hage_mdp need "
                "them: set imitation_epochs=0 and rl=walk"
            )
        self.hage_mdp()  # unknown MDP keys fail here
        try:
            LLMConfig.from_dict(self.judge)
        except ValueError as err:
            raise ValueError(f"ObjectiveConfig.judge: {err}") from None

    def hage_mdp(self) -> HageMDP:
        return HageMDP(**self.mdp)

    def tau(self, phase: str) -> float:
        """The temperature of ``phase``: ``rl_temperature`` in the policy-gradient phases when it is set."""
        return self.temperature if phase == "imitation" or self.rl_temperature is None else self.rl_temperature


@dataclass
class OptimConfig:
    """Adam settings."""

    lr: float = 3e-3
    """learning rate of the imitation phase"""
    rl_lr: float = 3e-4
    """learning rate of the policy-gradient phase"""
    weight_decay: float = 0.0
    """L2 weight decay"""
    max_grad_norm: float = 1.0
    """gradient clipping (0 = off)"""
    batch_size: int = 64
    """questions per optimizer step"""

    def __post_init__(self) -> None:
        _checked(self, ("lr", "rl_lr", "batch_size"), ("weight_decay", "max_grad_norm"))
        for name, bound in OPTIM.items():  # a variant's overrides meet the compose-time bounds here
            bound.check(None, f"trainer.optim.{name}", getattr(self, name))


@dataclass
class RunConfig:
    """Seed, device, validation and checkpoints."""

    seed: int = 0
    """fixes initialisation, question order and sampling"""
    device: str = "auto"
    """cpu, cuda or auto"""
    eval_every: int = 1
    """epochs between validations (the last epoch of a phase is always validated)"""
    checkpoint_dir: str = ""
    """where last.pt / best.pt go ('' = none)"""
    resume: bool = False
    """continue from checkpoint_dir/last.pt"""
    run_id: str = ""
    """the run id (graphmem.store.run_folder), written into last.pt / best.pt; another run's checkpoints are refused"""

    def __post_init__(self) -> None:
        _checked(self, ("eval_every",), ("seed",))


@dataclass
class TrainConfig:
    """The trainer's settings: ``model`` (:class:`ScorerConfig`), ``objective``, ``optim``, ``run``, and
    ``rank`` (:class:`rl.walk.rank.RankConfig`, the ranking head trained on the selected walk's lists)."""

    model: ScorerConfig = field(default_factory=ScorerConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)
    rank: RankConfig = field(default_factory=RankConfig)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> TrainConfig:
        """From nested dicts (the Hydra group); unknown keys are an error naming the part."""
        parts = {
            "model": ScorerConfig,
            "objective": ObjectiveConfig,
            "optim": OptimConfig,
            "run": RunConfig,
            "rank": RankConfig,
        }
        unknown = sorted(set(values) - set(parts))
        if unknown:
            raise ValueError(f"trainer: unknown parts {unknown}; known: {sorted(parts)}")
        built = {}
        for name, kind in parts.items():
            given = dict(values.get(name) or {})
            fields = {f.name for f in dataclasses.fields(kind)}
            bad = sorted(set(given) - fields)
            if bad:
                raise ValueError(f"trainer.{name}: unknown keys {bad}; known: {sorted(fields)}")
            built[name] = kind(**given)
        return cls(**built)

    @classmethod
    def merged(cls, base: Mapping[str, Any], overrides: Mapping[str, Any] = {}, **run: Any) -> TrainConfig:
        """``base`` with a variant's ``overrides`` (``part -> key -> value``) and ``run`` fields on top."""
        parts = {name: dict(value or {}) for name, value in base.items()}
        for name, value in overrides.items():
            if not isinstance(value, Mapping):
                raise ValueError(f"trainer override {name!r} must be a mapping of a part's keys, got {value!r}")
            parts[name] = {**parts.get(name, {}), **value}
        parts["run"] = {**parts.get("run", {}), **run}
        return cls.from_mapping(parts)

    def phases(self) -> list[tuple[str, int, float]]:
        """``(phase, epochs, learning rate)`` in order, phases without epochs left out."""
        o = self.objective
        rl = "reinforce" if o.rl == "walk" else "hage_mdp"
        out = [("imitation", o.imitation_epochs, self.optim.lr), (rl, o.rl_epochs, self.optim.rl_lr)]
        return [p for p in out if p[1] > 0]


@dataclass
class Rollout:
    """Sampled walks of one batch of questions (everything the update needs); ``rows`` holds each walk's
    question row (a question walked ``group_size`` times appears that many times, consecutively)."""

    rows: torch.Tensor
    ctx: Any
    episodes: Any
    gold: torch.Tensor
    visited: torch.Tensor | None = None  # HAGE's MDP: the nodes visited at the start
    rewards: torch.Tensor | None = None  # [T, B] the walk rewards (rl.walk.rewards)
    q: torch.Tensor | None = None  # what the scorer's context is prepared from (PPO's later epochs)
    entries: torch.Tensor | None = None
    advantage: torch.Tensor | None = None  # PPO: fixed at the first epoch
    old_logp: torch.Tensor | None = None


@dataclass
class TrainResult:
    scorer: WalkScorer
    history: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int = -1
    best_phase: str = ""
    best_score: float = float("nan")
    reward_calls: dict[str, Any] | None = None  # the LLM-backed reward's calls and failures (WalkTrainer.reward_report)
    rank: RankResult | None = None  # the ranking head trained on the selected walk's lists (None: not trained)


class WalkTrainer:
    """Trains a :class:`WalkScorer` on the questions of ``graphs`` (module docstring).

    Args:
        cfg: a :class:`TrainConfig`.
        graphs: graphs by name (every question's graph must be there).
        questions, embeddings: training questions and their ``[Q, D]`` query embeddings.
        val_questions, val_embeddings: validation questions (model selection) (default: none).
        budget: the evaluation budget every walk runs under (default: GraphMemory's).
        logger: receives one row per epoch (default: none).
        entry_selector: the policy's entry selector (default: ``"embedding"``).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        graphs: Mapping[str, MemoryGraph],
        questions: Sequence[Question],
        embeddings: torch.Tensor,
        val_questions: Sequence[Question] = (),
        val_embeddings: torch.Tensor | None = None,
        budget: Budget = Budget(),
        logger: Logger | None = None,
        entry_selector="embedding",
        inputs: Mapping[str, Any] | None = None,
    ):
        self.cfg, self.budget, self.logger = cfg, budget, logger
        self.graphs, self.entry_selector = graphs, entry_selector
        self.parts = (questions, embeddings, val_questions, val_embeddings)  # the ranking head's lists
        self.inputs = dict(inputs or {})  # graphmem.store.checkpoint.checkpoint_inputs, stored in every checkpoint
        self.device = resolve_device(cfg.run.device)
        seed_everything(cfg.run.seed)
        if cfg.objective.rl == "hage_mdp" and cfg.objective.rl_epochs and cfg.model.stop:
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, stop=False))  # the MDP never stops
            self.cfg = cfg
        train_graphs = {q.graph: graphs[q.graph] for q in questions}
        residual = train_graphs if cfg.model.edge_mode == "table" or cfg.model.edge_residual else None
        self.scorer = WalkScorer(dataclasses.replace(cfg.model, dim=int(embeddings.shape[1])), residual).to(self.device)
        table = self.scorer.edges.residual
        kind = cfg.objective.reward
        self.train = walk_data(graphs, questions, embeddings, budget, entry_selector, table, kind).to(self.device)
        self.val: WalkData | None = None
        if val_questions:
            val = walk_data(graphs, val_questions, val_embeddings, budget, entry_selector, table, kind)
            self.val = val.to(self.device)
        self.judges: dict[str, JudgeReward] = {}
        self.judge_client: LLMClient | None = None
        if kind == "judge":
            self.judge_client = client = LLMClient(LLMConfig.from_dict(cfg.objective.judge))
            for name, data, qs in (("train", self.train, questions), ("val", self.val, val_questions)):
                if data is not None:
                    self.judges[name] = judge_reward(client, graphs, data.names, [qs[i] for i in data.kept])
        self.generator = torch.Generator().manual_seed(cfg.run.seed)
        self.finished = False
        self.mdp = cfg.objective.hage_mdp()
        self.result = TrainResult(self.scorer)
        self.ckpt = Path(cfg.run.checkpoint_dir) if cfg.run.checkpoint_dir else None
        self.world = current_world()
        self.loss = WalkLoss(self.scorer, self.train.tables, budget, cfg.objective, self.world)
        self.model: torch.nn.Module = self.loss
        if self.world.distributed:  # DDP broadcasts rank 0's weights, then averages the gradients
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.loss, device_ids=ids, find_unused_parameters=True
            )

    # ------------------------------------------------------------------ rollout: sampled walks
    def rollout(self, rows: torch.Tensor, phase: str) -> Rollout:
        """Sampled walks of this rank's slice of the global batch ``rows`` (all of it in one process), each
        question walked ``group_size`` times in the policy-gradient phase, with their rewards."""
        d, o = self.train, self.cfg.objective
        q, entries, gold = d.q[rows], d.entries[rows][:, : self.budget.max_entries], d.gold[rows]
        if phase != "hage_mdp":
            k = o.group_size if phase == "reinforce" else 1
            noise = batch_noise(d.tables, self.budget, entries.shape[1], len(rows) * k, self.generator)
            mine = self.world.shard(len(rows), rows.device)
            walks = (mine[:, None] * k + torch.arange(k, device=rows.device)).flatten()
            rows = rows[mine].repeat_interleave(k)
            q, entries, gold = d.q[rows], d.entries[rows][:, : self.budget.max_entries], d.gold[rows]
            ctx = self.scorer.prepare(d.tables, q, entries, d.lexical[rows])  # this rank's rows' lexical inputs
            draws = noise[:, walks.cpu()]
            ep = walk(d.tables, self.scorer, q, entries, self.budget, True, o.tau(phase), ctx=ctx, noise=draws)
            rewards = self.rewards(d, ep, rows, "train") if phase == "reinforce" else None
            return Rollout(rows, ctx, ep, gold, rewards=rewards, q=q, entries=entries)
        row, start, blocked, gold = self.mdp.episodes(entries, gold)
        noise = batch_noise(d.tables, self.mdp.budget(), 1, len(row), self.generator)
        span = self.world.shard(len(rows), rows.device)
        mine = ((row >= span[0]) & (row <= span[-1])).nonzero().flatten() if span.numel() else row[:0]
        row, start, blocked, gold = row[mine], start[mine], blocked[mine], gold[mine]
        ctx = self.scorer.prepare(d.tables, q[row], start, d.lexical[rows[row]])
        ep = walk(
            d.tables,
            self.scorer,
            q[row],
            start,
            self.mdp.budget(),
            True,
            o.tau(phase),
            ctx=ctx,
            allow_stop=False,
            blocked=blocked,
            noise=noise[:, mine.cpu()],
        )
        return Rollout(rows[span], ctx, ep, gold, torch.cat([start, blocked], 1))

    # ------------------------------------------------------------------ update: loss and one Adam step
    def rewards(self, data: WalkData, ep, rows: torch.Tensor, split: str) -> torch.Tensor:
        """``[T, B]`` the objective's reward of each step minus its costs (:mod:`rl.walk.rewards`)."""
        o = self.cfg.objective
        if o.reward == "evidence":
            gained = evidence_rewards(ep, data.gold[rows])
        elif o.reward == "answer":
            gained = data.answers.rewards(ep, rows)
        else:
            gained = self.judges[split].rewards(ep, rows)
        return gained - costs(ep, data.tables, o.node_cost, o.token_cost)

    def update(self, batch: Rollout, phase: str, where: str = "") -> dict[str, float]:
        """The phase's loss and ``λ_anchor · L_anchor`` (:class:`rl.walk.parallel.WalkLoss`), one Adam step
        (``ppo_epochs`` of them on the same walks for PPO); a non-finite loss or weight raises
        :class:`graphmem.core.errors.DivergedError` naming ``where`` (:mod:`rl.common.divergence`)."""
        steps = self.cfg.objective.ppo_epochs if phase == "reinforce" and self.cfg.objective.estimator == "ppo" else 1
        first: dict[str, float] = {}
        hint = f" (learning rate {self.optimizer.param_groups[0]['lr']:g})"
        for step in range(steps):
            if step:  # the first pass's graph is freed by its backward
                batch.ctx = self.scorer.prepare(
                    self.train.tables, batch.q, batch.entries, self.train.lexical[batch.rows]
                )
            total, stats = self.model(batch, phase, self.baseline)
            check_loss(total, where or phase, hint)
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
            if self.cfg.optim.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.scorer.parameters(), self.cfg.optim.max_grad_norm)
            self.optimizer.step()
            check_weights(self.scorer, where or phase, hint)
            first = first or stats
        return {**first, **{k: stats[k] for k in ("kl", "clip_fraction") if k in stats}}

    # ------------------------------------------------------------------ validation: greedy walks
    @torch.no_grad()
    def validate(self, chunk: int = 1024) -> float:
        """Mean return of the greedy walk over the validation questions under the objective's reward and
        costs (each rank walks its slice): the evidence recall for ``reward=evidence`` without costs."""
        d = self.val
        self.scorer.eval()
        mine = self.world.shard(len(d), d.q.device)
        rec = [
            self.rewards(
                d, walk(d.tables, self.scorer, d.q[r], d.entries[r], self.budget, lexical=d.lexical[r]), r, "val"
            ).sum()
            for r in mine.split(chunk)
        ]
        self.scorer.train()
        total = torch.stack(rec).sum() if rec else torch.zeros((), device=d.q.device)
        total = summed(self.world, d.q.device)(total.double())
        return float(total) / len(d) if len(d) else float("nan")

    # ------------------------------------------------------------------ LLM-backed rewards: calls and failures
    def _reward_counts(self) -> torch.Tensor:
        """``[calls, failures]`` of the LLM-backed reward so far, summed over the ranks (zeros without one)."""
        counts = torch.tensor([[j.calls, j.failures] for j in self.judges.values()] or [[0, 0]], dtype=torch.float64)
        return summed(self.world, self.device)(counts.sum(0)).cpu() if self.judges else counts.sum(0)

    def _failure_kinds(self) -> dict[str, int]:
        """This process's failed reward calls by kind (rate_limit, api_error, malformed, ...)."""
        if self.judge_client is None:
            return {}
        return dict(self.judge_client.usage_report()["roles"].get(JUDGE_ROLE, {}).get("failure_kinds") or {})

    def _check_rewards(self, since: torch.Tensor, where: str) -> dict[str, int]:
        """The LLM-backed reward's calls and failures since ``since`` (:meth:`_reward_counts`); raises
        :class:`NothingMeasuredError` (exit status 3) when every one failed or more than
        ``objective.max_failed_share`` did (:func:`rl.walk.rewards.failed_share_problem`)."""
        if not self.judges:
            return {}
        calls, failures = (int(x) for x in self._reward_counts() - since)
        o = self.cfg.objective
        problem = failed_share_problem(o.reward, self.judge_client.model, calls, failures, o.max_failed_share, where)
        if problem:
            kinds = ", ".join(f"{k}: {n}" for k, n in sorted(self._failure_kinds().items())) or "none here"
            raise NothingMeasuredError(f"{problem} (failures by kind: {kinds}); nothing promoted to best.pt")
        return {"judge_calls": calls, "judge_failures": failures}

    def reward_report(self) -> dict[str, Any] | None:
        """The LLM-backed reward's calls and failures of this process's run (all ranks), or ``None`` for
        a reward without calls: ``reward``, ``model``, ``calls``, ``failures``, ``failed_share``,
        ``max_failed_share`` and this process's ``failure_kinds``."""
        if not self.judges:
            return None
        calls, failures = (int(x) for x in self._reward_counts())
        o = self.cfg.objective
        return {
            "reward": o.reward,
            "model": self.judge_client.model,
            "calls": calls,
            "failures": failures,
            "failed_share": failures / calls if calls else None,
            "max_failed_share": o.max_failed_share,
            "failure_kinds": self._failure_kinds(),
        }

    # ------------------------------------------------------------------ checkpoints
    def state(self, phase: int, epoch: int) -> dict[str, Any]:
        return {
            "run_id": self.cfg.run.run_id,
            "scorer": self.scorer.checkpoint(),
            "config": asdict(self.cfg),
            "budget": asdict(self.budget),
            "phase": phase,
            "epoch": epoch,
            "optimizer": self.optimizer.state_dict(),
            "baseline": None if getattr(self.baseline, "values", None) is None else self.baseline.values.cpu(),
            "history": self.result.history,
            "best": [self.result.best_phase, self.result.best_epoch, self.result.best_score],
            "rng": rng_state(self.generator),
            "rank_head": None if self.result.rank is None else self.result.rank.checkpoint(),
            "finished": self.finished,  # written true once, by the last save of a training that ran to its end
        }

    def save(self, name: str, phase: int, epoch: int) -> Path | None:
        """Rank 0 writes ``name`` (the other ranks hold the same state)."""
        if self.ckpt is None or not self.world.is_main:
            return None
        return save_checkpoint(self.ckpt / name, "walk", self.state(phase, epoch), self.inputs)

    def _resume(self) -> tuple[int, int]:
        """``(phase, next epoch)`` from ``last.pt``, or ``(0, 0)``."""
        path = None if self.ckpt is None else self.ckpt / "last.pt"
        if not (self.cfg.run.resume and path is not None and path.is_file()):
            return 0, 0
        st = load_checkpoint(path, "walk", run_id=self.cfg.run.run_id)  # on the CPU: the RNG states stay there
        self.scorer.load_state_dict(st["scorer"]["state_dict"])
        self._start_phase(st["phase"])
        self.optimizer.load_state_dict(st["optimizer"])
        if isinstance(self.baseline, MovingBaseline):
            self.baseline.values = None if st["baseline"] is None else st["baseline"].to(self.device)
        self.result.history = list(st["history"])
        self.result.best_phase, self.result.best_epoch, self.result.best_score = st["best"]
        set_rng_state(st["rng"], self.generator)
        return st["phase"], st["epoch"] + 1

    def _start_phase(self, index: int) -> None:
        """A fresh Adam at the phase's learning rate and a fresh baseline (HAGE's: one value, its β; the
        group's leave-one-out mean when a question is walked ``group_size >= 2`` times)."""
        phase, _, lr = self.cfg.phases()[index]
        o = self.cfg.objective
        self.optimizer = torch.optim.Adam(self.scorer.parameters(), lr=lr, weight_decay=self.cfg.optim.weight_decay)
        self.baseline: MovingBaseline | LeaveOneOut
        if phase == "hage_mdp":
            self.baseline = MovingBaseline(self.mdp.baseline_beta, per_step=False)
        elif o.estimator == "leave_one_out" or (o.estimator == "ppo" and o.group_size > 1):
            self.baseline = LeaveOneOut(o.group_size)
        else:
            self.baseline = MovingBaseline(o.baseline_beta)

    def _best_state(self, current: dict | None) -> dict | None:
        """The best epoch's weights: kept in memory, or read back from ``best.pt`` after a resume."""
        if current is None and self.ckpt is not None and (self.ckpt / "best.pt").is_file():
            best = load_checkpoint(self.ckpt / "best.pt", "walk", run_id=self.cfg.run.run_id)
            return best["scorer"]["state_dict"]
        return current

    # ------------------------------------------------------------------ the loop
    @deterministic
    def learn(self) -> TrainResult:
        """Every phase's epochs (module docstring), under torch's deterministic algorithms; the best
        validation epoch of the last phase is loaded into :attr:`scorer` and returned with the history."""
        phases = self.cfg.phases()
        start_phase, start_epoch = self._resume()
        best_state = None
        for p, (phase, epochs, _) in enumerate(phases):
            if p < start_phase:
                continue
            if p > start_phase or start_epoch == 0:
                best_state = self._best_state(best_state) if p > 0 else None
                if best_state is not None:  # RL starts from the warm start's best epoch
                    self.scorer.load_state_dict(best_state)
                self._start_phase(p)
                self.result.best_score, best_state = float("nan"), None
            for epoch in range(start_epoch if p == start_phase else 0, epochs):
                t0, rows, since = time.perf_counter(), [], self._reward_counts()
                perm = torch.randperm(len(self.train), generator=self.generator).to(self.device)
                for step, lo in enumerate(range(0, len(self.train), self.cfg.optim.batch_size)):
                    batch = self.rollout(perm[lo : lo + self.cfg.optim.batch_size], phase)
                    self._check_rewards(since, f"in {phase} epoch {epoch}")  # before a step on failed rewards
                    rows.append(self.update(batch, phase, f"{phase} epoch {epoch} step {step}"))
                row = {
                    "phase": phase,
                    "epoch": epoch,
                    "seconds": time.perf_counter() - t0,
                    **{k: sum(r[k] for r in rows) / len(rows) for k in rows[0]},
                }
                validated = self.val is not None and ((epoch + 1) % self.cfg.run.eval_every == 0 or epoch + 1 == epochs)
                if validated:
                    row["val_return"] = self.validate()
                    check_loss(row["val_return"], f"the validation of {phase} epoch {epoch} (its mean return)")
                row.update(self._check_rewards(since, f"in {phase} epoch {epoch}"))  # before anything is promoted
                if validated:
                    improved = not (row["val_return"] <= self.result.best_score)  # first validation: NaN best
                    if improved:
                        self.result.best_phase, self.result.best_epoch = phase, epoch
                        self.result.best_score = row["val_return"]
                        best_state = {k: v.detach().clone() for k, v in self.scorer.state_dict().items()}
                        self.save("best.pt", p, epoch)
                self.result.history.append(row)
                if self.logger is not None:
                    self.logger.log(row, step=len(self.result.history) - 1)
                self.save("last.pt", p, epoch)
            start_epoch = 0
        best_state = self._best_state(best_state)
        if best_state is not None:
            self.scorer.load_state_dict(best_state)
        self.result.reward_calls = self.reward_report()
        # the head learns from evidence labels: a run from the answer or judge reward reads none, so it has no head
        if self.cfg.rank.epochs and self.cfg.objective.reward == "evidence" and self.world.is_main:
            self.result.rank = self.train_rank_head()
        names = [name for name, _, _ in phases]
        if self.result.best_phase in names:  # best.pt, last: the selected walk (with its head), marked finished
            self.finished = True
            self.save("best.pt", names.index(self.result.best_phase), self.result.best_epoch)
        return self.result

    def train_rank_head(self) -> RankResult:
        """The ranking head on the lists of the selected walk (:mod:`rl.walk.rank`), the walk frozen."""
        rc = self.cfg.rank
        policy = make_policy(
            "router", scorer=self.scorer, device=str(self.device), entry_selector=self.entry_selector, rank=False
        )
        questions, embeddings, val_questions, val_embeddings = self.parts
        lists = lambda qs, emb: collect_lists(  # noqa: E731
            policy, self.graphs, qs, emb, self.budget, rc.negatives, rc.graphs_per_call
        )
        val = lists(val_questions, val_embeddings) if val_questions else None
        return train_rank_head(rc, lists(questions, embeddings), val, seed=self.cfg.run.seed)
