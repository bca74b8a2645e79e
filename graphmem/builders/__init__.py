"""Graph builders (writers): dataset records -> :class:`graphmem.graph.MemoryGraph`."""

from graphmem.builders.entities import (
    ENTITY_EXTRACTORS,
    CueEntityExtractor,
    EntityExtractor,
    make_entity_extractor,
    register_entity_extractor,
)
from graphmem.builders.hotpotqa import build_hotpot_graph
from graphmem.builders.locomo import build_locomo_graph

__all__ = [
    "ENTITY_EXTRACTORS",
    "CueEntityExtractor",
    "EntityExtractor",
    "build_hotpot_graph",
    "build_locomo_graph",
    "make_entity_extractor",
    "register_entity_extractor",
]
