"""Supervised warm start of the memory writer on silver triples (before GRPO, SAGE §4.1).

A writer that never produces the triple format earns no task reward, so GRPO has nothing to
push on. The warm start teaches the format first, from the builder's own extraction: for each
fragment ``f`` at position ``i`` of a task, the graph builder's entity extractor
(``graph.entity_extractor``, offline cue-based by default) gives its entities ``e_1 .. e_m`` in
order of first mention, and the silver completion holds

    (e_j | with | e_{j+1}) [Fi]     for j = 1 .. m - 1      (m >= 2)
    (e_1 | is | e_1) [Fi]                                   (m = 1)

(``Fi``: the fragment's position label in the prompt, :mod:`rl.writer.format`)

so fragments sharing an entity are joined by :func:`rl.writer.grpo.entity_edges` exactly as the
builder's entity edges join them (up to its fan-out caps). Fragments without entities get no
line. Training is TRL's ``SFTTrainer`` on prompt-completion pairs (loss on the completion only).

:func:`well_formed` is the format check used before and after: a completion is well-formed when
it has at least one non-empty line and every non-empty line is an anchored triple citing a
fragment of its task.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from rl.writer.format import anchor_label, clean_entity, well_formed
from rl.writer.grpo import WriterConfig, WriterTask, _prompt, _steps, generate_completions, uses_chat


@dataclass
class SFTConfig:
    """Settings of :func:`warm_start` (mirrored by ``configs/writer.yaml`` ``sft``)."""

    enabled: bool = True
    """run the warm start before GRPO"""
    max_steps: int = 40
    """optimizer steps"""
    batch_size: int = 8
    """prompt-completion pairs per step"""
    learning_rate: float = 1e-4
    """AdamW learning rate (SmolLM2's last blocks; a random tiny writer needs ~1e-3)"""
    max_entities: int = 4
    """entities per fragment used for its silver lines"""
    max_lines: int = 3
    """silver lines per task (the first ones), so a completion fits ``max_completion_length``"""
    eval_tasks: int = 8
    """held-out tasks (validation graphs) on which well-formed output is measured"""
    shown_only: bool = False
    """silver entities from the text the prompt shows, written as it writes them (:func:`silver_triples`'s
    ``shown_chars`` = ``writer.max_fragment_chars``); false: from the whole text, lower-cased"""


def silver_triples(
    task: WriterTask, extractor, max_entities: int = 4, max_lines: int | None = None, shown_chars: int | None = None
) -> str:
    """The silver completion of ``task`` (module docstring), one triple per line, the first ``max_lines``.

    Lines go round the fragments: the first line of every fragment (in prompt order), then the second of
    every fragment, ..., so a cut at ``max_lines`` keeps as many fragments as it can.

    With ``shown_chars``, the entities are extracted from the text the prompt shows (each fragment's first
    ``shown_chars`` characters, :func:`rl.writer.format.render_prompt`) and written as that text writes them, case
    kept: the warm start then teaches copying a span the writer sees, never an entity past the cut or a lower-cased
    form of it. Without it, from the whole text, lower-cased."""
    per_fragment = []
    texts = [_whole_words(t, shown_chars) for t in task.texts] if shown_chars else list(task.texts)
    for i, (text, found) in enumerate(zip(texts, extractor.extract(texts))):
        low = text.lower()
        ents = sorted(found, key=lambda e: (low.find(e) if e in low else len(low), e))[:max_entities]
        if shown_chars:
            ents = [text[low.find(e) : low.find(e) + len(e)] for e in ents if e in low]
        ents = [e for e in map(clean_entity, ents) if e]
        label = anchor_label(i)
        lines = [f"({ents[0]} | is | {ents[0]}) [{label}]"] if len(ents) == 1 else []
        per_fragment.append(lines + [f"({a} | with | {b}) [{label}]" for a, b in zip(ents, ents[1:])])
    depth = max(map(len, per_fragment), default=0)
    lines = [fl[j] for j in range(depth) for fl in per_fragment if j < len(fl)]
    return "\n".join(lines[:max_lines])


def warm_start_silver(task: WriterTask, extractor, sft: SFTConfig, cfg: WriterConfig) -> str:
    """The silver completion the warm start fits for ``task``: :func:`silver_triples` under ``sft``, from the text
    the prompt shows (``cfg.max_fragment_chars``) with ``sft.shown_only``."""
    shown = cfg.max_fragment_chars if sft.shown_only else None
    return silver_triples(task, extractor, sft.max_entities, sft.max_lines, shown)


def _whole_words(text: str, n: int) -> str:
    """``text[:n]`` less a word the cut splits (a word of the prompt's text that continues past it)."""
    cut = text[:n]
    if len(text) > n and (text[n].isalnum() or text[n] == "_") and (tail := re.search(r"\w+$", cut)):
        return cut[: tail.start()]
    return cut


def well_formed_fraction(model, tokenizer, tasks: Sequence[WriterTask], cfg: WriterConfig) -> float:
    """Share of greedy completions over ``tasks`` that are :func:`well_formed`."""
    if not tasks:
        return float("nan")
    texts, cuts = generate_completions(model, tokenizer, tasks, cfg)
    return sum(well_formed(t, task.fragment_ids, c) for t, c, task in zip(texts, cuts, tasks)) / len(tasks)


def warm_start(model, tokenizer, tasks: Sequence[WriterTask], extractor, cfg: WriterConfig, sft: SFTConfig):
    """TRL ``SFTTrainer`` on ``(prompt, silver completion)`` pairs; returns ``(model, log history)``."""
    from datasets import Dataset
    from trl import SFTConfig as TRLSFTConfig
    from trl import SFTTrainer

    rows, chat = [], uses_chat(cfg, tokenizer)
    for task in tasks:
        completion = warm_start_silver(task, extractor, sft, cfg)
        if not completion:
            continue
        prompt = _prompt(task, cfg, chat)
        if chat:
            rows.append({"prompt": prompt, "completion": [{"role": "assistant", "content": completion}]})
        else:
            rows.append({"prompt": prompt, "completion": completion + (tokenizer.eos_token or "")})
    if not rows:
        raise ValueError("warm start: no task has a fragment with an extracted entity")
    args = TRLSFTConfig(
        output_dir=f"{cfg.output_dir}/sft",
        max_steps=_steps("sft.max_steps", sft.max_steps),
        per_device_train_batch_size=sft.batch_size,
        learning_rate=sft.learning_rate,
        lr_scheduler_type="constant",
        logging_steps=10,
        save_strategy="no",
        report_to=cfg.report_to,
        use_cpu=True,
        bf16=False,
        seed=cfg.seed,
        disable_tqdm=True,
        gradient_checkpointing=False,  # trl turns it on: with frozen blocks it recomputes and backpropagates them all
        max_length=None,
        completion_only_loss=True,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    trainer.train()
    return trainer.model, [h for h in trainer.state.log_history if "loss" in h]
