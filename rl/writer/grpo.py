"""A memory writer trained with GRPO on a reader-aware reward (SAGE §4.1).

The writer is a causal LM. For a *task* — a window of memory fragments plus the questions whose
gold evidence falls inside it — it writes entity–relation triples with source anchors, one per
line: ``(head | relation | tail) [Fi]``, citing the fragment by its position label in the prompt
(mapped back to its id in code, :mod:`rl.writer.format`). The triples become a graph ``G`` (``reward_graph``):

* ``window``: a graph over the window's fragments alone (:func:`graph_from_triples`: fragments that share an
  entity are joined by ``entity`` edges in both directions; with ``link_mentions`` a fragment also holds every
  written entity its text names), and a question's gold ``D+`` is its gold inside the window;
* ``whole``: the window's whole graph with its ``entity`` edges replaced by those the completion's triples imply,
  by the rule and fan-out caps a rewrite uses (:func:`rewrite_entity_edges`; with ``link_mentions`` every fragment
  of the graph whose text names a written entity holds it), and ``D+`` is the question's gold in the whole
  graph: a completion earns recall by writing the entity that leads the reader from this window to a gold
  passage anywhere in the graph, as a rewritten graph is read;

a frozen GNN reader (policy ``gnn``) retrieves ``P_k(q, G)`` for every question under a :class:`Budget`.
The reward of one completion is

* ``r_rec = |P_k ∩ D+| / |D+|`` and ``r_pre = |P_k ∩ D+| / |P_k|`` averaged over the task's questions,
  ``r_task = (α r_rec + β r_pre) / (α + β)``;
* ``ρ_rep = (|T| - |uniq(T)|) / |T|`` over the parsed triples ``T`` (normalised case and spaces),
  giving :func:`task_reward` ``= r_task - λ_rep ρ_rep``;
* :func:`format_score` ``r_fmt`` = mean over non-empty lines of a line credit: 1 for a triple that
  cites a label ``F1 .. Fk`` of the task, ``c`` (``format_partial``) for a triple with another
  anchor, ``c / 2`` for ``(head | relation | tail)`` without an anchor, 0 otherwise; weighted by
  ``λ_fmt`` through trl's ``reward_weights``. The partial credits give a group of completions that
  are all off-format a reward spread, so GRPO's group-normalised advantage is not zero.

A completion that fills ``max_completion_length`` without its end-of-sequence token is *cut*: its unfinished
last line is left out of the parse and the format credit (:func:`rl.writer.format.judged_lines`) and counted
as a cut line, so the token budget is not mistaken for a malformed triple.

The deducibility and answer-F1 terms (γ, δ), which need an LLM judge, are not implemented.
``r_rec``, ``r_pre`` and ``ρ_rep`` are also logged per step as zero-weight reward functions
(:meth:`ReaderReward.part`), and each completion's parts and line counts are kept in
:attr:`ReaderReward.records` (:func:`generation_failures` counts the completions and lines that did not parse).

**Groups.** trl's sampler repeats each prompt ``num_generations`` times in a generation batch, so the
``num_generations`` completions of one task form one GRPO group, and the advantage of a completion is its
reward standardised over its group; ``batch_size`` must be a multiple of ``num_generations``
(``batch_size / num_generations`` tasks per step).
Training is trl's ``GRPOTrainer`` with the clipped objective (``loss_type="grpo"``), offline on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from graphmem.builders import GraphConfig
from graphmem.builders.edges import replace_entity_edges
from graphmem.builders.entities import ground_mentions, link_mentions
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.eval.stats import paired_comparison
from graphmem.policies import make_policy
from rl.writer.format import format_score, judged_lines, parse_triples, render_prompt, repetition_rate
from rl.writer.grammar import constrain_generate, make_grammar
from rl.writer.model import (
    byte_tokenizer,  # noqa: F401  (re-exported)
    fresh_copy,
    load_writer,
    train_last_layers,
)


@dataclass
class WriterConfig:
    """Settings of :func:`train_writer` (mirrored by ``configs/writer.yaml``)."""

    model: str = "smollm2"
    """'smollm2' (local SmolLM2-135M-Instruct gguf), 'tiny' (random tiny Llama, byte tokenizer: tests) or a
    local HF folder"""
    trainable_layers: int | None = 4
    """partial fine-tuning: only the last this many decoder blocks and the final norm are trained (null: all)"""
    tiny_hidden: int = 64
    """hidden width of the random tiny Llama (its MLP is 2x, heads of width 16)"""
    tiny_layers: int = 3
    """layers of the random tiny Llama"""
    reader_checkpoint: str | None = None
    """frozen reader checkpoint (from scripts/train_gnn.py)"""
    fragments_per_task: int = 8
    """memory fragments shown in one prompt"""
    min_gold: int = 1
    """a question joins a task window holding at least ``min(min_gold, |gold|)`` of its gold nodes (2: only
    windows where an edge between two of its gold passages can raise its recall)"""
    max_fragment_chars: int = 80
    """fragment text is cut to this many characters in the prompt"""
    alpha: float = 1.0
    """weight of evidence recall in r_task"""
    beta: float = 1.0
    """weight of evidence precision in r_task"""
    lambda_rep: float = 0.5
    """penalty on the repetition rate of duplicate triples"""
    lambda_fmt: float = 0.2
    """weight of the format reward"""
    format_partial: float = 0.5
    """line credit c of a triple whose anchor is not a fragment of the task (c/2 without an anchor)"""
    reader_budget: dict = field(
        default_factory=lambda: {"max_entries": 2, "top_k_neighbors": 2, "max_hops": 2, "max_nodes": 4}
    )
    """Budget the frozen reader retrieves under (k = max_nodes)"""
    max_steps: int = 20
    """GRPO optimizer steps"""
    batch_size: int = 8
    """completions per step (per_device_train_batch_size): ``batch_size / num_generations`` task groups"""
    num_generations: int = 4
    """completions per prompt (the GRPO group)"""
    max_completion_length: int = 64
    """new tokens per completion"""
    learning_rate: float = 5e-5
    """writer learning rate"""
    kl_beta: float = 0.0
    """KL coefficient to the reference model"""
    epsilon: float = 0.2
    """PPO-style clip range of the GRPO objective"""
    num_iterations: int = 1
    """GRPO updates per generation batch (clipping acts when > 1)"""
    temperature: float = 0.7
    """sampling temperature"""
    reward_graph: str = "window"
    """what the reward's reader reads: ``window`` (the window's fragments joined by the completion) or ``whole``
    (the window's whole graph, its entity edges those of the completion; module docstring)"""
    grounded: bool = False
    """a written entity counts only on the fragments whose text names it (its words a run of the text's words): an
    entity the anchor's text does not name is dropped, in the reward's graph as in a rewritten graph"""
    link_mentions: bool = False
    """entity linking by mention: a written entity also anchors every fragment (of the task window in the reward,
    of the graph in a rewrite) whose text names it, so one triple naming a bridge entity joins all its passages"""
    grammar: bool = False
    """sample and decode under the triple grammar (:mod:`rl.writer.grammar`): every completion is anchored triples"""
    chat_template: bool | None = None
    """wrap each prompt as one user turn of the tokenizer's chat template; null: when the tokenizer has one"""
    seed: int = 0
    """fixes the model init (tiny), data order and sampling"""
    output_dir: str = "outputs/writer"
    """trainer output folder"""
    report_to: str = "none"
    """TRL/transformers ``report_to`` (``wandb``: reward, its parts and the well-formed share per step)"""

    def __post_init__(self):
        if self.reward_graph not in REWARD_GRAPHS:
            raise ValueError(f"writer.reward_graph: {self.reward_graph!r} is not one of {', '.join(REWARD_GRAPHS)}")
        if self.model not in WRITER_MODELS and not (isinstance(self.model, str) and Path(self.model).is_dir()):
            raise ValueError(
                f"writer.model={self.model!r}: neither {' nor '.join(map(repr, WRITER_MODELS))} nor a model folder "
                "that exists here (a local Hugging Face folder saved with save_model=...)"
            )
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 0:
            raise ValueError(f"writer.max_steps={self.max_steps!r}: must be a non-negative integer of GRPO steps")


WRITER_MODELS = ("smollm2", "tiny")


REWARD_GRAPHS = ("window", "whole")


def _steps(key: str, n: int) -> int:
    """``n`` optimizer steps for a TRL trainer, which reads ``max_steps <= 0`` as "train by epochs": refused."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{key}={n!r}: the trainer needs at least one step (TRL would run an epoch instead)")
    return n


@dataclass
class WriterTask:
    """Fragments of one window and the questions whose gold evidence lies in it (gold: reward only)."""

    task_id: str
    fragment_ids: list[str]
    texts: list[str]
    embeddings: Tensor
    query_embeddings: Tensor
    gold: list[list[str]]
    """per question, its gold in the window, or with ``graph`` its gold in the whole graph"""
    graph: MemoryGraph | None = None
    """the window's whole graph, which the reward's reader reads (``reward_graph: whole``); None: the window alone"""

    def prompt(self, max_chars: int = 200) -> str:
        """:func:`rl.writer.format.render_prompt`: fragments labelled ``[F1] .. [Fk]``, never their ids."""
        return render_prompt(self.texts, max_chars)


def tasks_from_graph(
    graph: MemoryGraph,
    name: str,
    query_embeddings: Tensor,
    evidence: Sequence[Sequence[str]],
    fragments_per_task: int,
    min_gold: int = 1,
    whole: bool = False,
) -> list[WriterTask]:
    """Windows of consecutive nodes; a question joins each window holding at least ``min(min_gold, n)`` of
    its ``n`` gold nodes in the graph. The reward scores its gold in the window, or with ``whole`` its gold in
    the graph, which the task then holds (``reward_graph: whole``)."""
    present = [sum(graph.has_node(e) for e in ev) for ev in evidence]
    tasks = []
    for lo in range(0, graph.num_nodes, fragments_per_task):
        rows = list(range(lo, min(lo + fragments_per_task, graph.num_nodes)))
        ids = [graph.node_ids[r] for r in rows]
        inside = set(ids)
        picked = [(k, [e for e in ev if e in inside]) for k, ev in enumerate(evidence)]
        picked = [(k, g) for k, g in picked if g and len(g) >= min(min_gold, present[k])]
        if whole:
            picked = [(k, [e for e in evidence[k] if graph.has_node(e)]) for k, _ in picked]
        if picked:
            tasks.append(
                WriterTask(
                    f"{name}@{lo}",
                    ids,
                    [graph.texts[r] for r in rows],
                    graph.embeddings[rows],
                    query_embeddings[[k for k, _ in picked]].float(),
                    [g for _, g in picked],
                    graph if whole else None,
                )
            )
    return tasks


def tasks_from_graphset(
    graphset, question_indices: Sequence[int], fragments_per_task: int, min_gold: int = 1, whole: bool = False
) -> list[WriterTask]:
    """:func:`tasks_from_graph` over every graph of a ``GraphSet`` for the given questions."""
    by_graph: dict[str, list[int]] = {}
    for i in question_indices:
        by_graph.setdefault(graphset.questions[i].graph, []).append(i)
    tasks = []
    for name in sorted(by_graph):
        idx = by_graph[name]
        tasks += tasks_from_graph(
            graphset.graphs[name],
            name,
            graphset.query_embeddings[idx],
            [graphset.questions[i].evidence for i in idx],
            fragments_per_task,
            min_gold,
            whole,
        )
    return tasks


# ---------------------------------------------------------------------- graph building
def entity_edges(
    triples: Sequence[tuple[str, str, str, str]],
    fragment_ids: Sequence[str],
    texts: Sequence[str],
    link: bool = False,
    grounded: bool = False,
) -> tuple[list[int], list[int]]:
    """Both directions between every pair of distinct fragments that hold a common entity (:func:`triple_entities`)."""
    mentions: dict[str, set[int]] = {}
    for row, found in enumerate(triple_entities(triples, fragment_ids, texts, link, grounded)):
        for entity in found:
            mentions.setdefault(entity, set()).add(row)
    pairs = {(a, b) for rows in mentions.values() for a in rows for b in rows if a != b}
    src, dst = zip(*sorted(pairs)) if pairs else ((), ())
    return list(src), list(dst)


def graph_from_triples(
    triples,
    fragment_ids: Sequence[str],
    texts: Sequence[str],
    embeddings: Tensor,
    link: bool = False,
    grounded: bool = False,
) -> MemoryGraph:
    """A graph whose nodes are the fragments and whose edges are :func:`entity_edges`."""
    g = MemoryGraph.empty(int(embeddings.shape[1]))
    g.add_nodes(list(fragment_ids), list(texts), embeddings.float())
    src, dst = entity_edges(triples, fragment_ids, texts, link, grounded)
    if src:
        g.add_edges(src, dst, "entity")
    return g


def triple_entities(
    triples, fragment_ids: Sequence[str], texts: Sequence[str], link: bool = False, grounded: bool = False
) -> list[set[str]]:
    """Per fragment, the heads and tails of the triples anchored to it; with ``grounded`` only those its text names
    (:func:`graphmem.builders.entities.ground_mentions`), and with ``link`` also every written entity its text names
    (:func:`graphmem.builders.entities.link_mentions`).

    With both, the fragments holding an entity are exactly those whose texts name it, however many windows wrote it,
    so the edges one window's triples make are the edges they make in any graph rewritten with them."""
    row = {f: i for i, f in enumerate(fragment_ids)}
    out: list[set[str]] = [set() for _ in fragment_ids]
    for head, _, tail, anchor in triples:
        out[row[anchor]] |= {head, tail}
    if grounded:
        written = [i for i, found in enumerate(out) if found]
        for i, kept in zip(written, ground_mentions([texts[i] for i in written], [out[i] for i in written])):
            out[i] = kept
    return link_mentions(texts, out) if link else out


def named_by_anchor(triples, fragment_ids: Sequence[str], texts: Sequence[str]) -> tuple[int, int]:
    """``(written, named)``: the heads and tails of ``triples``, and how many of them their anchor fragment's text
    names (what :func:`triple_entities` keeps with ``grounded``)."""
    row = {f: i for i, f in enumerate(fragment_ids)}
    entities = [(e, row[anchor]) for head, _, tail, anchor in triples for e in (head, tail)]
    kept = ground_mentions([texts[i] for _, i in entities], [{e} for e, _ in entities])
    return len(entities), sum(bool(k) for k in kept)


def rewrite_entity_edges(
    graph: MemoryGraph, triples, cfg: GraphConfig, link: bool = False, grounded: bool = False
) -> MemoryGraph:
    """A copy of ``graph`` whose ``entity`` edges are those the triples imply in the graph's texts
    (:func:`triple_entities`), joined by the builders' rule and caps
    (:func:`graphmem.builders.edges.replace_entity_edges`), not as a clique per entity."""
    return replace_entity_edges(graph, triple_entities(triples, graph.node_ids, graph.texts, link, grounded), cfg)


# ---------------------------------------------------------------------- rewards
class ReaderReward:
    """Scores completions of :class:`WriterTask` prompts with a frozen reader (module docstring)."""

    def __init__(
        self,
        tasks: Sequence[WriterTask],
        reader,
        cfg: WriterConfig,
        eos_token_id: int | None = None,
        graph_cfg: GraphConfig | None = None,
    ):
        """``graph_cfg``: the entity-edge rule and caps of the tasks' whole graphs (``reward_graph: whole``)."""
        self.tasks = {t.task_id: t for t in tasks}
        if graph_cfg is None and any(t.graph is not None for t in tasks):
            raise ValueError("writer reward: tasks on whole graphs need the graphs' GraphConfig (graph_cfg)")
        self.graph_cfg = graph_cfg
        self.eos_token_id = eos_token_id
        self.policy = make_policy("gnn", reader=reader)
        self.budget = Budget(**cfg.reader_budget)
        self.cfg = cfg
        self._linking = (cfg.link_mentions, cfg.grounded)
        self.records: list[dict] = []
        self._cache: dict[tuple[str, str], dict[str, float]] = {}

    def cut(self, ids) -> bool:
        """Whether completion token ``ids`` filled ``max_completion_length`` without the end-of-sequence token."""
        ids = list(ids) if ids is not None else []
        return len(ids) >= self.cfg.max_completion_length and self.eos_token_id not in ids

    def components(self, completion: str, task_id: str, cut: bool = False) -> dict[str, float]:
        """``r_rec, r_pre, r_task, rho_rep, r_fmt`` and the line counts (``lines`` judged, ``valid_lines``,
        ``cut_lines``) of one completion; cached by ``(task, text, cut)``, so every reward function scores it once."""
        key = (task_id, completion, cut)
        if key not in self._cache:
            self._cache[key] = self._components(completion, task_id, cut)
        return self._cache[key]

    def _cuts(self, completions, completion_ids) -> list[bool]:
        return [self.cut(i) for i in completion_ids] if completion_ids is not None else [False] * len(completions)

    def _components(self, completion: str, task_id: str, cut: bool) -> dict[str, float]:
        task = self.tasks[task_id]
        triples, good, total = parse_triples(completion, task.fragment_ids, cut)
        if task.graph is None:
            graph = graph_from_triples(triples, task.fragment_ids, task.texts, task.embeddings, *self._linking)
        else:
            graph = rewrite_entity_edges(task.graph, triples, self.graph_cfg, *self._linking)
        queries = [Query(f"{task_id}#{k}", "", e) for k, e in enumerate(task.query_embeddings)]
        rec = pre = 0.0
        for got, gold in zip(self.policy.retrieve_batch(graph, queries, self.budget), task.gold):
            hit = len(set(got.loaded_ids(graph)) & set(gold))
            rec += hit / len(gold)
            pre += hit / len(got.loaded) if got.loaded else 0.0
        rec, pre = rec / len(task.gold), pre / len(task.gold)
        a, b = self.cfg.alpha, self.cfg.beta
        return {
            "r_rec": rec,
            "r_pre": pre,
            "r_task": (a * rec + b * pre) / (a + b),
            "rho_rep": repetition_rate(triples),
            "r_fmt": format_score(completion, task.fragment_ids, self.cfg.format_partial, cut),
            "lines": total,
            "valid_lines": good,
            "cut_lines": judged_lines(completion, cut)[1],
            "well_formed": float(total > 0 and good == total),
        }

    def task_reward(self, prompts, completions, task_id, trainer_state=None, completion_ids=None, **_) -> list[float]:
        """``r_task - λ_rep ρ_rep`` per completion (trl reward-function signature).

        Each completion's reward parts are also appended to :attr:`records` with its task and the
        GRPO step it was sampled for (``trainer_state.global_step + 1``).
        """
        step = trainer_state.global_step + 1 if trainer_state is not None else None
        out = []
        for c, t, cut in zip(completions, task_id, self._cuts(completions, completion_ids)):
            parts = self.components(_text(c), t, cut)
            out.append(parts["r_task"] - self.cfg.lambda_rep * parts["rho_rep"])
            self.records.append(
                {
                    "step": step,
                    "task_id": t,
                    "task": out[-1],
                    "format": parts["r_fmt"],
                    **{k: parts[k] for k in PART_KEYS + ("well_formed", "lines", "valid_lines", "cut_lines")},
                }
            )
        return out

    def part(self, name: str):
        """A trl reward function returning the part ``name`` (``r_rec``, ``r_pre``, ``rho_rep``) of each
        completion; given weight 0, it only makes trl log that part per step (and to W&B)."""

        def reward(prompts, completions, task_id, completion_ids=None, **_) -> list[float]:
            cuts = self._cuts(completions, completion_ids)
            return [self.components(_text(c), t, cut)[name] for c, t, cut in zip(completions, task_id, cuts)]

        reward.__name__ = name
        return reward

    def format_reward(self, prompts, completions, task_id, completion_ids=None, **_) -> list[float]:
        """``r_fmt`` per completion (trl reward-function signature)."""
        return self.part("r_fmt")(prompts, completions, task_id, completion_ids)

    def well_formed(self, prompts, completions, task_id, completion_ids=None, **_) -> list[float]:
        """1 for a completion whose every judged line is an anchored triple of its task, else 0.

        Given weight 0, so it only makes trl log the well-formed share of each step.
        """
        return self.part("well_formed")(prompts, completions, task_id, completion_ids)


PART_KEYS = ("r_rec", "r_pre", "rho_rep")
"""the reward parts logged per step besides the trained rewards (zero-weight reward functions)"""


def generation_failures(records: Sequence[dict]) -> dict[str, float | int]:
    """Counts over completion records (``lines``, ``valid_lines``, ``well_formed``, ``cut_lines``): completions,
    empty ones (no judged line), those not well-formed, judged lines, lines that did not parse into an anchored
    triple and unfinished last lines of cut completions, with the shares ``not_well_formed / completions`` and
    ``unparsed / lines``."""
    n = len(records)
    lines = sum(int(r["lines"]) for r in records)
    unparsed = lines - sum(int(r["valid_lines"]) for r in records)
    bad = sum(1 for r in records if not r["well_formed"])
    return {
        "completions": n,
        "empty": sum(1 for r in records if int(r["lines"]) == 0),
        "not_well_formed": bad,
        "lines": lines,
        "unparsed_lines": unparsed,
        "cut_lines": sum(int(r.get("cut_lines", 0)) for r in records),
        "not_well_formed_share": bad / n if n else 0.0,
        "unparsed_line_share": unparsed / lines if lines else 0.0,
    }


def _text(completion) -> str:
    if isinstance(completion, list):  # conversational completions: [{"role", "content"}]
        return "".join(m.get("content", "") for m in completion)
    return str(completion)


# ---------------------------------------------------------------------- training
def uses_chat(cfg: WriterConfig, tokenizer) -> bool:
    """``cfg.chat_template``, or when it is null whether ``tokenizer`` has a chat template."""
    return bool(getattr(tokenizer, "chat_template", None)) if cfg.chat_template is None else cfg.chat_template


def _prompt(task: WriterTask, cfg: WriterConfig, chat: bool):
    """The task prompt: plain text, or one user message when ``chat`` (:func:`uses_chat`)."""
    text = task.prompt(cfg.max_fragment_chars)
    return [{"role": "user", "content": text}] if chat else text


def trainable_writer(cfg: WriterConfig):
    """``cfg.model`` loaded with only its last ``cfg.trainable_layers`` blocks trained (:func:`train_last_layers`);
    ``(model, tokenizer, {"trainable": n, "total": N})``."""
    model, tokenizer = load_writer(cfg.model, cfg.seed, cfg.tiny_hidden, cfg.tiny_layers)
    return model, tokenizer, train_last_layers(model, cfg.trainable_layers)


def train_writer(
    tasks: Sequence[WriterTask],
    reader,
    cfg: WriterConfig,
    model=None,
    tokenizer=None,
    graph_cfg: GraphConfig | None = None,
):
    """Run GRPO; returns ``(trainer, history, records)``: one dict of logged metrics per step, and
    one of reward parts per sampled completion (:meth:`ReaderReward.task_reward`). ``graph_cfg``: the entity-edge
    rule of the tasks' whole graphs (``reward_graph: whole``)."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    if cfg.batch_size % cfg.num_generations:
        raise ValueError(
            f"writer.batch_size ({cfg.batch_size}) must be a multiple of writer.num_generations ({cfg.num_generations})"
        )
    if model is None:
        model, tokenizer, _ = trainable_writer(cfg)
    reward = ReaderReward(tasks, reader, cfg, tokenizer.eos_token_id, graph_cfg)
    chat = uses_chat(cfg, tokenizer)
    data = Dataset.from_list([{"prompt": _prompt(t, cfg, chat), "task_id": t.task_id} for t in tasks])
    args = GRPOConfig(
        output_dir=cfg.output_dir,
        max_steps=_steps("writer.max_steps", cfg.max_steps),
        per_device_train_batch_size=cfg.batch_size,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        learning_rate=cfg.learning_rate,
        beta=cfg.kl_beta,
        epsilon=cfg.epsilon,
        loss_type="grpo",
        num_iterations=cfg.num_iterations,
        temperature=cfg.temperature,
        reward_weights=[1.0, cfg.lambda_fmt, 0.0] + [0.0] * len(PART_KEYS),
        logging_steps=1,
        save_strategy="no",
        report_to=cfg.report_to,
        use_cpu=True,
        bf16=False,
        seed=cfg.seed,
        disable_tqdm=True,
        gradient_checkpointing=False,  # trl turns it on: with frozen blocks it recomputes and backpropagates them all
    )
    history: list[dict] = []

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                history.append({"step": state.global_step, **logs})

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward.task_reward, reward.format_reward, reward.well_formed, *map(reward.part, PART_KEYS)],
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[Record()],
    )
    restore = constrain_generate(model, make_grammar(model, tokenizer, cfg.fragments_per_task)) if cfg.grammar else None
    try:
        trainer.train()
    finally:
        if restore is not None:
            restore()
    return trainer, history, reward.records


def quarter_comparison(records: Sequence[dict], lambda_fmt: float) -> dict[str, dict | None]:
    """Last quarter of the GRPO steps against the first, paired by task.

    For each task sampled in both quarters, its mean reward over the completions of the last
    ``T // 4`` steps minus the mean over the first ``T // 4`` (``T`` the last step) — so a change in
    which prompts a quarter happened to draw is not counted as learning. Per part: ``reward`` =
    ``task + λ_fmt · format`` (the trained reward), ``task``, ``format``, ``well_formed``; each a
    :func:`graphmem.eval.stats.paired_comparison` (mean difference, bootstrap 95 % CI, paired-t p,
    ``n`` tasks), ``None`` with fewer than two tasks in both quarters or under four steps.
    """
    parts = ("reward", "task", "format", "well_formed")
    last = max((r["step"] for r in records if r["step"] is not None), default=0)
    q = last // 4
    rows: dict[tuple[str, str], list[dict]] = {}  # (quarter, task) -> its completions
    for r in records:
        if q and r["step"] is not None and (r["step"] <= q or r["step"] > last - q):
            rows.setdefault(("first" if r["step"] <= q else "last", r["task_id"]), []).append(r)
    means = {side: {part: {} for part in parts} for side in ("first", "last")}
    for (side, task), rs in rows.items():
        for part in parts:
            values = [r["task"] + lambda_fmt * r["format"] if part == "reward" else r[part] for r in rs]
            means[side][part][task] = sum(values) / len(values)
    out: dict[str, dict | None] = {}
    for part in parts:
        cmp = paired_comparison("last_quarter", means["last"][part], "first_quarter", means["first"][part], part)
        out[part] = None if cmp is None else cmp.to_json()
    return out


@torch.no_grad()
def generate_completions(
    model, tokenizer, tasks: Sequence[WriterTask], cfg: WriterConfig, batch_size: int = 8
) -> tuple[list[str], list[bool]]:
    """Greedy completion text of every task, ``batch_size`` prompts per ``generate`` call (left padding), and
    whether each was cut (filled ``max_completion_length`` without the end-of-sequence token). Decoded by a
    :func:`rl.writer.model.fresh_copy` of ``model``, so the text depends on its weights alone."""
    model = fresh_copy(model)
    chat = uses_chat(cfg, tokenizer)
    grammar = make_grammar(model, tokenizer, cfg.fragments_per_task) if cfg.grammar else None
    extra = {"logits_processor": [grammar]} if grammar is not None else {}

    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    out, cuts = [], []
    try:
        for lo in range(0, len(tasks), batch_size):
            part = tasks[lo : lo + batch_size]
            texts = [_prompt(t, cfg, chat) for t in part]
            if chat:
                texts = [tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in texts]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not chat)
            if grammar is not None:
                grammar.reset()
                grammar.rows_k = [len(t.fragment_ids) for t in part]
            gen = model.generate(
                **enc,
                max_new_tokens=cfg.max_completion_length,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                **extra,
            )
            new = gen[:, enc["input_ids"].shape[1] :]
            out += [tokenizer.decode(row, skip_special_tokens=True) for row in new]
            ended = (new == tokenizer.eos_token_id).any(dim=1)
            cuts += [bool(new.shape[1] >= cfg.max_completion_length and not e) for e in ended.tolist()]
    finally:
        tokenizer.padding_side = side
    return out, cuts


def write_triples(
    model, tokenizer, tasks: Sequence[WriterTask], cfg: WriterConfig, batch_size: int = 8
) -> list[tuple[str, str, str, str]]:
    """Greedy triples for every task; used to rebuild graphs after a writer update."""
    texts, cuts = generate_completions(model, tokenizer, tasks, cfg, batch_size)
    return [triple for t, x, c in zip(tasks, texts, cuts) for triple in parse_triples(x, t.fragment_ids, c)[0]]


def graph_windows(graph: MemoryGraph, k: int, name: str = "w") -> list[WriterTask]:
    """Every window of ``k`` consecutive nodes of ``graph`` as a question-less task ``<name>@<first row>``
    (the windows of :func:`tasks_from_graph`, which keeps only those holding gold evidence)."""
    return [
        WriterTask(
            f"{name}@{lo}",
            graph.node_ids[lo : lo + k],
            graph.texts[lo : lo + k],
            graph.embeddings[lo : lo + k],
            torch.empty(0, graph.dim),
            [],
        )
        for lo in range(0, graph.num_nodes, k)
    ]


def rewrite_graph(
    model, tokenizer, graph: MemoryGraph, cfg: WriterConfig, graph_cfg: GraphConfig, batch_size: int = 8
) -> tuple[MemoryGraph, int]:
    """Let the writer annotate every window of ``graph`` (:func:`graph_windows`).

    Returns the graph with its entity edges rebuilt from the triples (:func:`rewrite_entity_edges`,
    ``graph_cfg``'s fan-out caps) and the triple count.
    """
    triples = write_triples(model, tokenizer, graph_windows(graph, cfg.fragments_per_task), cfg, batch_size)
    return rewrite_entity_edges(graph, triples, graph_cfg, cfg.link_mentions, cfg.grounded), len(triples)
