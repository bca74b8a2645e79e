"""Add vector indexes to a saved graph set: ``python scripts/build_index.py graphset=outputs/graphs/locomo``.

Builds the :class:`~graphmem.index.vector_index.VectorIndex` of every graph of the set (``index``: the
:class:`~graphmem.index.vector_index.IndexSpec`) and adds the files to the set with
:func:`graphmem.store.setstore.add_files` (``indexes/<graph>/<spec key>.safetensors``, listed and
checksummed in the manifest, committed as one new generation). :meth:`GraphSet.load` attaches them
to their graphs, and the ANN entry selector (``entry_selector=ann`` with the same build parameters)
searches them instead of building its own. Prints the build time and the files' total size.
"""

from __future__ import annotations

import time
from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from graphmem.config.cli import set_threads
from graphmem.config.entry import main, plain
from graphmem.index.vector_index import IndexSpec, VectorIndexError, index_for
from graphmem.store.graphset import GraphSet
from graphmem.store.indexes import index_files
from graphmem.store.setstore import add_files


def build(cfg: DictConfig) -> dict[str, str]:
    spec = IndexSpec.from_mapping(plain(cfg.index))
    directory = Path(to_absolute_path(str(cfg.graphset)))
    gs = GraphSet.load(directory)
    set_threads(cfg)
    t = time.perf_counter()
    for graph in gs.graphs.values():
        index_for(graph, spec)
    build_s = time.perf_counter() - t
    stored = add_files(directory, index_files(gs.graphs, spec))
    mine = {rel: path for rel, path in stored.items() if rel.endswith(f"/{spec.key}.safetensors")}
    size = sum((directory / path).stat().st_size for path in mine.values())
    nodes = sum(g.num_nodes for g in gs.graphs.values())
    print(
        f"{len(mine)} {spec.key} indexes over {nodes} nodes built in {build_s:.1f}s, "
        f"{size / 2**20:.1f} MB, added to {directory}"
    )
    return mine


if __name__ == "__main__":
    main("build_index", build, errors=(VectorIndexError,))
