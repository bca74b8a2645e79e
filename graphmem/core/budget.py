"""The retrieval budget every policy works under (a module of its own, so that the models can
type their budget arguments without importing the policies)."""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.core.tokens import TOKENIZER_NAME


@dataclass(frozen=True)
class Budget:
    """Retrieval limits shared by every policy (GraphMemory Appendix B.2 defaults).

    Args:
        max_entries: entry nodes chosen before traversal (default: 6).
        top_k_neighbors: neighbors of a loaded node considered (default: 2).
        max_hops: hops from an entry node (default: 2).
        max_nodes: loaded nodes (default: 12).
        max_tokens: tokens of serialized content, counted with ``tokenizer`` (default: 2500).
        tokenizer: name of the token counting rule (default: ``regex-word-v1``).
    """

    max_entries: int = 6
    top_k_neighbors: int = 2
    max_hops: int = 2
    max_nodes: int = 12
    max_tokens: int = 2500
    tokenizer: str = TOKENIZER_NAME

    def __post_init__(self) -> None:
        for name in ("max_entries", "top_k_neighbors", "max_hops", "max_nodes", "max_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Budget.{name} must be a non-negative integer, got {value!r}")
        if self.max_entries == 0 or self.max_nodes == 0:
            raise ValueError("Budget.max_entries and Budget.max_nodes must be at least 1")
        if self.tokenizer != TOKENIZER_NAME:
            raise ValueError(
                f"Budget.tokenizer {self.tokenizer!r} is unknown; the only tokenizer is {TOKENIZER_NAME!r}"
            )
