"""The writer as an entity extractor: what a trained writer (SAGE §4.1) writes becomes a record's entities.

:class:`WriterExtractor` implements the builders' extractor interface (``extract(texts) -> list[set[str]]``):
the texts are cut into windows of ``fragments_per_task`` consecutive texts, as a rebuild annotates a graph
(:func:`rl.writer.grpo.graph_windows`), the writer writes triples for each window (greedy, under its grammar
when configured), and each text's entities are the heads and tails of the triples anchored to it
(:func:`rl.writer.grpo.triple_entities`, grounded and linked as the writer's config says). A live memory
(``Memory.open(..., extractor=WriterExtractor(...))``) calls it on each record as it arrives, so there the
writer sees one record at a time.
"""

from __future__ import annotations

from typing import Sequence

import torch

from rl.writer.grpo import WriterConfig, WriterTask, triple_entities, write_triples


class WriterExtractor:
    """Entities written by a writer model (module docstring).

    Args:
        model: the writer (a causal LM, e.g. from :func:`rl.writer.model.load_writer`).
        tokenizer: its tokenizer.
        cfg: the writer's config (window size, grammar, grounding, linking).
    """

    def __init__(self, model, tokenizer, cfg: WriterConfig) -> None:
        self.model, self.tokenizer, self.cfg = model, tokenizer, cfg
        self.name = f"writer:{getattr(model.config, 'name_or_path', '') or type(model).__name__}"

    def extract(self, texts: Sequence[str]) -> list[set[str]]:
        k, out = self.cfg.fragments_per_task, []
        for lo in range(0, len(texts), k):
            window = list(texts[lo : lo + k])
            ids = [f"f{i}" for i in range(len(window))]
            task = WriterTask(f"w@{lo}", ids, window, torch.empty(len(window), 0), torch.empty(0, 0), [])
            triples = write_triples(self.model, self.tokenizer, [task], self.cfg)
            out += triple_entities(triples, ids, window, self.cfg.link_mentions, self.cfg.grounded)
        return out
