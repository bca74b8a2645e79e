"""Graph builders (writers): dataset records -> :class:`~graphmem.core.MemoryGraph`, and graph sets built from them.

:mod:`~graphmem.builders.config` holds how graphs are built (:class:`GraphConfig`),
:mod:`~graphmem.builders.registry` the datasets (one entry each) and :class:`DataConfig`,
:mod:`~graphmem.builders.pipeline` the build of a saved :class:`graphmem.store.graphset.GraphSet`.
"""

from graphmem.builders.config import GraphConfig
from graphmem.builders.entities import (
    ENTITY_EXTRACTORS,
    CueEntityExtractor,
    EntityExtractor,
    ground_mentions,
    link_mentions,
    make_entity_extractor,
    register_entity_extractor,
)
from graphmem.builders.hotpotqa import build_hotpot_graph
from graphmem.builders.locomo import build_locomo_graph
from graphmem.builders.pipeline import (
    build_graphset,
    check_configs,
    config_hash,
    graphset_dir,
    load_or_build,
    open_graphset,
    open_train_graphset,
    reuse_or_build,
)
from graphmem.builders.registry import DATASETS, REGISTRY, DataConfig, Dataset

__all__ = [
    "DATASETS",
    "ENTITY_EXTRACTORS",
    "REGISTRY",
    "CueEntityExtractor",
    "DataConfig",
    "Dataset",
    "EntityExtractor",
    "GraphConfig",
    "build_graphset",
    "build_hotpot_graph",
    "build_locomo_graph",
    "check_configs",
    "config_hash",
    "graphset_dir",
    "ground_mentions",
    "link_mentions",
    "load_or_build",
    "make_entity_extractor",
    "open_graphset",
    "open_train_graphset",
    "register_entity_extractor",
    "reuse_or_build",
]
