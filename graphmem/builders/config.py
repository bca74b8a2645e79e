"""How graphs are built: :class:`GraphConfig` (mirrored by ``configs/graph/*.yaml``).

Which file they are built from is :class:`graphmem.builders.registry.DataConfig`, checked against
the dataset registry; what a build does with both is :mod:`graphmem.builders.pipeline`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from graphmem.core.errors import InputError

FEATURES = ("scored", "onehot")


def config_from_mapping(cls, values: Mapping[str, Any]):
    """``cls(**values)`` for a config dataclass; a key that is not one of its fields raises ``ValueError``."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown keys {unknown}; known: {sorted(names)}")
    return cls(**dict(values))


@dataclass(frozen=True)
class GraphConfig:
    """How graphs are built (mirrored by ``configs/graph/*.yaml``)."""

    features: str = "scored"
    """Phase-1 edge features: ``scored`` ([p_t, p_s, p_c, p_e] for every edge) or ``onehot`` (of the relation)."""
    encoder: str = "minilm"
    """node/query encoder: ``minilm`` (all-MiniLM-L6-v2) or ``hashing`` (offline bag-of-words substitute)."""
    cache_dir: str | None = None
    """embedding cache folder; ``None`` = ``$GRAPHMEM_CACHE_DIR`` or ``<repo>/.cache/embeddings``."""
    semantic_k: int = 5
    """semantic neighbours per node (kNN by cosine)."""
    semantic_threshold: float = 0.4
    """minimum cosine of a semantic edge, in [-1, 1]."""
    temporal_window_s: float = 3600.0
    """extra temporal edges between nodes at most this many seconds apart (0 = none)."""
    temporal_cap: int = 2
    """most extra time-window temporal edges per node."""
    temporal_tau: float = 4.0
    """decay (in positions) of the temporal-proximity feature exp(-(gap - 1) / tau)."""
    entity_extractor: str = "offline"
    """registered entity extractor name (see graphmem.builders.entities)."""
    entity_fanout: int = 3
    """each mention of an entity links to at most this many later mentions."""
    entity_max_share: float = 0.1
    """entities in more than max(10, share * nodes) nodes are skipped, in [0, 1]."""
    causal_qa_confidence: float = 0.6
    """confidence of a question -> reply causal cue, in [0, 1]."""
    causal_connective_confidence: float = 0.5
    """confidence of a causal connective (because, therefore, ...), in [0, 1]."""
    sentence_nodes: bool = False
    """passage graphs (MuSiQue, pooled corpora): also one node per sentence of each passage."""
    duplicate_titles: str = "join"
    """passage graphs: distinct texts of one title are ``join``-ed into its passage, or only the ``first`` is kept."""
    incremental: bool = False
    """build with the rules of a live memory, which sees one record at a time: semantic and time-window neighbours
    among earlier nodes only (equal distances to the earlier node), entities extracted in arrival order, an entity's
    share cap applied as each mention arrives (:mod:`graphmem.builders.incremental`, ``docs/memory.md``)."""
    max_text_chars: int = 1_000_000
    """longest text field of a turn or passage, in characters; a longer one is refused naming the file, record and
    field (:meth:`graphmem.builders.registry.Dataset.check_text_sizes`). Not hashed: it decides whether a set is
    built, not what it holds."""

    def __post_init__(self) -> None:
        if self.features not in FEATURES:
            raise ValueError(f"GraphConfig.features {self.features!r} is not one of {FEATURES}")
        if self.duplicate_titles not in ("join", "first"):
            raise ValueError(f"GraphConfig.duplicate_titles {self.duplicate_titles!r} is not one of ('join', 'first')")
        for name in ("sentence_nodes", "incremental"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"GraphConfig.{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("semantic_k", "temporal_cap", "entity_fanout"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"GraphConfig.{name} must be a non-negative integer, got {v!r}")
        v = self.max_text_chars
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"GraphConfig.max_text_chars must be a positive integer, got {v!r}")
        ranges = {
            "semantic_threshold": (-1.0, 1.0),
            "entity_max_share": (0.0, 1.0),
            "causal_qa_confidence": (0.0, 1.0),
            "causal_connective_confidence": (0.0, 1.0),
        }
        for name, (lo, hi) in ranges.items():
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise ValueError(f"GraphConfig.{name} must be in [{lo}, {hi}], got {v!r}")
        if not isinstance(self.temporal_window_s, (int, float)) or not self.temporal_window_s >= 0:
            raise ValueError(f"GraphConfig.temporal_window_s must be >= 0, got {self.temporal_window_s!r}")
        if not isinstance(self.temporal_tau, (int, float)) or not self.temporal_tau > 0:
            raise ValueError(f"GraphConfig.temporal_tau must be > 0, got {self.temporal_tau!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> GraphConfig:
        """Build from a dict / OmegaConf node; unknown keys are an error."""
        return config_from_mapping(cls, values)


class BatchRulesOnly(InputError, ValueError):
    """``graph.incremental`` asked of a builder that has only the batch rules (documents, pooled passages)."""


def require_batch_rules(cfg: GraphConfig, what: str) -> None:
    """Refuse ``graph.incremental=true`` for ``what``: the arrival-order rules are defined for conversations."""
    if cfg.incremental:
        raise BatchRulesOnly(
            f"graph.incremental=true: {what} are built with the batch rules only (the arrival-order rules of a live "
            "memory are defined for conversation turns, docs/memory.md)"
        )
