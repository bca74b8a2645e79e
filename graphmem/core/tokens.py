"""The one tokenizer every budget in graphmem is counted with.

Budgets must be comparable across policies and machines, and must not depend on a model
download, so token counts use a fixed, dependency-free rule named :data:`TOKENIZER_NAME`:
a token is a maximal run of word characters or a single non-space symbol
(regex ``\\w+|[^\\w\\s]``). On English chat text this is within ~10% of BPE counts.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from graphmem.core.rows import append_to, kept_rows, seed_rows

if TYPE_CHECKING:
    from graphmem.core.graph import MemoryGraph

TOKENIZER_NAME = "regex-word-v1"
NODE_TOKENS = "core.node_tokens"  # the key of a graph's token counts in ``graph.derived``
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Number of tokens of ``text`` under :data:`TOKENIZER_NAME`."""
    return len(_TOKEN_RE.findall(text))


def more_tokens_than(text: str, limit: int) -> bool:
    """Whether ``text`` holds more than ``limit`` tokens, reading it only until it does (a text of at most
    ``limit`` characters never does: every token is at least one character)."""
    if len(text) <= limit:
        return False
    for n, _ in enumerate(_TOKEN_RE.finditer(text), 1):
        if n > limit:
            return True
    return False


def serialize_node(node_id: str, text: str) -> str:
    """One line of serialized memory, ``Ser`` in GraphMemory Algorithm 1: ``[id] text``."""
    return f"[{node_id}] {text}"


def node_tokens(graph: MemoryGraph) -> Tensor:
    """``[N]`` long: tokens of each node's serialized line, kept in ``graph.derived``; the counts are kept across
    mutations that only append nodes (:func:`graphmem.core.rows.kept_rows`)."""
    counts = graph.derived.get(NODE_TOKENS)
    if counts is None:

        def extend(held: np.ndarray | None, rows: range) -> np.ndarray:
            ids, texts = graph.node_ids, graph.texts
            new = np.fromiter((count_tokens(serialize_node(ids[i], texts[i])) for i in rows), np.int64, len(rows))
            return append_to(np.empty(0, np.int64) if held is None else held, rows.start, new)

        kept = kept_rows(graph, NODE_TOKENS, [graph.node_ids, graph.texts], extend)
        counts = graph.derived.put(NODE_TOKENS, torch.from_numpy(kept[: graph.num_nodes]))
    return counts


def seed_node_tokens(graph: MemoryGraph, counts: np.ndarray) -> None:
    """Take ``counts`` ``[N]`` (saved with the graph's ids and texts, by :func:`node_tokens`) as the graph's token
    counts instead of counting every text again."""
    if counts.shape != (graph.num_nodes,):
        raise ValueError(f"{counts.shape[0]} token counts for a graph of {graph.num_nodes} nodes")
    seed_rows(graph, NODE_TOKENS, [graph.node_ids, graph.texts], np.array(counts, dtype=np.int64))
