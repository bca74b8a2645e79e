"""Building graph sets: the config hash, set folders, and load, embed, build and save under the folder's lock.

:func:`build_graphset` loads a dataset through its registry entry (:func:`graphmem.builders.registry.load_units`),
embeds every node and question in one cached pass and builds one graph per unit; :func:`reuse_or_build`
keeps a saved set whose config hash matches and which verifies, else builds and commits a new one
(:mod:`graphmem.setstore`); :func:`graphset_dir` names a source's folder; :func:`open_graphset` is
the set a script runs on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from graphmem.builders.config import GraphConfig
from graphmem.builders.registry import DataConfig, load_units
from graphmem.graphset import GraphSet, union
from graphmem.paths import check_name
from graphmem.setformat import safe_name
from graphmem.setstore import (
    GraphSetError,
    drop_unreferenced,
    file_sha256,
    generation_of,
    keep_aside,
    read_manifest,
    set_lock,
)

BUILDER_VERSION = 1  # bump when a builder changes what it produces, to invalidate saved sets
# Settings added after saved sets existed: left out of the config hash while at their default,
# so sets built before them stay valid.
_HASHED_WHEN_SET = {"pooled": False, "train_files": (), "sentence_nodes": False, "duplicate_titles": "join"}
_UNHASHED = ("cache_dir", "max_text_chars")  # graph settings that never change what a build produces
log = logging.getLogger(__name__)


def _settings(data_cfg: DataConfig, graph_cfg: GraphConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The data and graph settings that change the output (not root/cache paths, not the training files)."""
    data = {k: v for k, v in asdict(data_cfg).items() if k not in ("root", "train_files") and not _at_default(k, v)}
    graph = {k: v for k, v in asdict(graph_cfg).items() if k not in _UNHASHED and not _at_default(k, v)}
    return data, graph


def source(data_cfg: DataConfig, graph_cfg: GraphConfig) -> dict[str, Any]:
    """What a set is built from: ``{"data.<key>": v, "graph.<key>": v}`` for every setting of :func:`config_hash`
    (the data file's name included, not its bytes): one set folder holds sets of one source only."""
    data, graph = _settings(data_cfg, graph_cfg)
    return {**{f"data.{k}": v for k, v in data.items()}, **{f"graph.{k}": v for k, v in graph.items()}}


def config_hash(data_cfg: DataConfig, graph_cfg: GraphConfig, data_sha256: str) -> str:
    """sha256 over the settings that change the output (not root/cache paths) and the data file bytes."""
    data, graph = _settings(data_cfg, graph_cfg)
    blob = json.dumps(
        {"data": data, "graph": graph, "data_sha256": data_sha256, "builder": BUILDER_VERSION}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _at_default(key: str, value: Any) -> bool:
    return key in _HASHED_WHEN_SET and value == _HASHED_WHEN_SET[key]


def build_graphset(data_cfg: DataConfig, graph_cfg: GraphConfig, encoder=None, progress: bool = True) -> GraphSet:
    """Load the dataset, embed every node and question in one cached pass, build one graph per record.

    Args:
        data_cfg: which file to load.
        graph_cfg: builder settings.
        encoder: an :class:`graphmem.embed.Encoder`; ``None`` = ``graph_cfg.encoder`` wrapped in
            :class:`graphmem.embed.CachedEncoder` at ``graph_cfg.cache_dir`` (default: ``None``).
        progress: show tqdm bars (default: ``True``).
    """
    import time

    from tqdm.auto import tqdm

    from graphmem.builders.entities import make_entity_extractor
    from graphmem.datasets.paths import data_file
    from graphmem.embed import CachedEncoder, encoder_fingerprint, make_encoder

    extractor = make_entity_extractor(graph_cfg.entity_extractor)
    path = data_file(data_cfg.file, data_cfg.root)
    t0 = time.perf_counter()
    units, questions, report = load_units(data_cfg.name, path, graph_cfg, data_cfg.pooled, data_cfg.limit)
    if not units or not questions:
        discarded = f", {len(report.discarded)} records or questions discarded" if report.discarded else ""
        raise ValueError(f"{path}: {len(units)} graphs and {len(questions)} questions{discarded}: nothing to build")
    log.info("%s: %d graph units, %d questions from %s", data_cfg.name, len(units), len(questions), path)
    if encoder is None:
        encoder = CachedEncoder(make_encoder(graph_cfg.encoder), graph_cfg.cache_dir)
        encoder.encoder.progress = progress  # the encoder's own bar over the embedding pass (long on CPU)
    t1 = time.perf_counter()
    flat = [t for unit in units for t in unit.texts] + [q.text for q in questions]
    embeddings = encoder.encode(flat)
    t2 = time.perf_counter()
    graphs, start = {}, 0
    threads = torch.get_num_threads()
    if len(units) > 1:
        torch.set_num_threads(1)  # per-graph ops are small: waking intra-op threads costs more than it saves
    try:
        for unit in tqdm(units, desc=f"build {data_cfg.name}", disable=not progress):
            graphs[unit.name] = unit.build(embeddings[start : start + len(unit.texts)], graph_cfg, extractor)
            start += len(unit.texts)
    finally:
        torch.set_num_threads(threads)
    t3 = time.perf_counter()
    log.info("%s: %d graphs built (embedding %.1fs, graphs %.1fs)", data_cfg.name, len(graphs), t2 - t1, t3 - t2)
    stats = {
        "load_s": round(t1 - t0, 3),
        "embed_s": round(t2 - t1, 3),
        "graph_s": round(t3 - t2, 3),
        "encoder": encoder.name,
        "texts_embedded": len(flat),
    }
    data_sha = file_sha256(path)
    provenance = {
        "dataset": data_cfg.name,
        "data": {
            **{k: v for k, v in asdict(data_cfg).items() if k != "root"},
            "resolved": str(path),
            "sha256": data_sha,
        },
        "graph": {k: v for k, v in asdict(graph_cfg).items() if k != "cache_dir"},
        "config_hash": config_hash(data_cfg, graph_cfg, data_sha),
        "builder_version": BUILDER_VERSION,
        "encoder": encoder.name,
        "encoder_fingerprint": encoder_fingerprint(encoder),
        "embedding_dim": int(embeddings.shape[1]),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return GraphSet(
        dataset=data_cfg.name + ("-pooled" if data_cfg.pooled else ""),
        graphs=graphs,
        questions=questions,
        query_embeddings=embeddings[start:],
        report=report,
        config_hash=provenance["config_hash"],
        stats=stats,
        provenance=provenance,
    )


def reuse_or_build(
    data_cfg: DataConfig,
    graph_cfg: GraphConfig,
    out_dir: str | Path,
    encoder=None,
    progress: bool = True,
    force: bool = False,
    check: Callable[[GraphSet], None] | None = None,
) -> tuple[GraphSet, str]:
    """The set saved in ``out_dir`` when its config hash matches and it verifies, else a new build saved there.

    Returns the set and what happened: ``"reused"``, ``"built"`` or ``"rebuilt: <why>"``. The
    folder's write lock is held from the check to the commit, so two processes never build it at once.
    A folder holding a set of another source (data file or settings) is refused unless ``force``
    (:func:`_replacing`): one folder never silently changes what it holds.
    ``check(graphset)`` runs on a new build before it is committed (and on a reused set): raising
    there leaves the folder as it was (default: none).
    """
    from graphmem.datasets.paths import data_file
    from graphmem.lexical import lexical_files

    out_dir = Path(out_dir)
    wanted = config_hash(data_cfg, graph_cfg, file_sha256(data_file(data_cfg.file, data_cfg.root)))
    lock = set_lock(out_dir)
    lock.acquire(blocking=True, on_wait=lambda h: log.info("waiting for another build of %s", out_dir))
    try:
        status, aside = "built", None
        try:
            manifest = read_manifest(out_dir)
        except GraphSetError as err:
            manifest, status = None, f"rebuilt: the saved set was refused ({err})"
        if manifest is not None and manifest.get("config_hash") != wanted:
            status, aside = _replacing(out_dir, manifest, data_cfg, graph_cfg, force)
        elif manifest is not None:
            status = "rebuilt: force=true"
            if not force:
                try:
                    graphset = GraphSet.load(out_dir)
                    if check is not None:
                        check(graphset)
                    if generation_of(manifest):  # what a killed build left behind is unreferenced
                        drop_unreferenced(out_dir, generation_of(manifest))
                    return graphset, "reused"
                except GraphSetError as err:
                    status = f"rebuilt: the saved set was refused ({err})"
        graphset = build_graphset(data_cfg, graph_cfg, encoder=encoder, progress=progress)
        if check is not None:
            check(graphset)
        if aside is not None:  # the set of another source, kept whole before the commit replaces it
            status += f" is kept in {keep_aside(out_dir, manifest, aside)}"
        graphset.save(out_dir, extra_files=lexical_files(graphset.graphs))  # the BM25 index of every graph
        return graphset, status
    finally:
        lock.release()


def built_from(manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """The :func:`source` of a saved set from its manifest's provenance; ``None`` when it records none."""
    provenance = manifest.get("provenance")
    data, graph = (provenance.get("data"), provenance.get("graph")) if isinstance(provenance, dict) else (None, None)
    if not isinstance(data, dict) or not isinstance(graph, dict):
        return None
    known = {cls: {f.name for f in dataclasses.fields(cls)} for cls in (DataConfig, GraphConfig)}
    try:
        return source(
            DataConfig.from_mapping({k: v for k, v in data.items() if k in known[DataConfig]}),
            GraphConfig.from_mapping({k: v for k, v in graph.items() if k in known[GraphConfig]}),
        )
    except (TypeError, ValueError):
        return None


def _replacing(
    out_dir: Path, manifest: Mapping[str, Any], data_cfg: DataConfig, graph_cfg: GraphConfig, force: bool
) -> tuple[str, str | None]:
    """What a build does to the set in ``out_dir`` whose config hash differs from its own: its status
    and the folder name to keep the old set in (``None``: nothing kept).

    The same :func:`source` (only the data file's bytes or the builder changed) is rebuilt in
    place. Another source, or one the manifest does not record, is refused with a
    :class:`GraphSetError` naming the folder, what it holds and what was asked, unless ``force``:
    then the old set is kept in ``<out_dir>/replaced-<its config hash[:12]>[-N]/``
    (:func:`graphmem.setstore.keep_aside`) just before the new one is committed.
    """
    held, asked = built_from(manifest), source(data_cfg, graph_cfg)
    if held == asked:
        return "rebuilt: the config hash differs", None
    if held is None:
        holds, wants = "an unrecorded source (no provenance in manifest.json)", f"data.file={data_cfg.file!r}"
    else:
        keys = sorted(k for k in {*held, *asked} if held.get(k, "(default)") != asked.get(k, "(default)"))
        holds = ", ".join(f"{k}={held.get(k, '(default)')!r}" for k in keys)
        wants = ", ".join(f"{k}={asked.get(k, '(default)')!r}" for k in keys)
    aside = f"replaced-{str(manifest.get('config_hash') or 'unrecorded')[:12]}"
    if not force:
        raise GraphSetError(
            f"{out_dir} holds the graph set built from {holds}; this build asks for {wants}: a set folder holds "
            f"one source, so it is not replaced (build into another folder, or scripts/build_graph.py ... "
            f"force=true replaces it and keeps the old set in {out_dir / aside}/)"
        )
    return f"rebuilt: force=true; the set built from {holds}", aside


def load_or_build(
    data_cfg: DataConfig, graph_cfg: GraphConfig, out_dir: str | Path, encoder=None, progress: bool = True
) -> GraphSet:
    """Load the set saved in ``out_dir`` when its config hash matches and it verifies; otherwise build and save it."""
    graphset, status = reuse_or_build(data_cfg, graph_cfg, out_dir, encoder=encoder, progress=progress)
    if status.startswith("rebuilt: the saved set was refused"):
        log.warning("%s: %s", out_dir, status)
    return graphset


def graphset_dir(root: str | Path, data_cfg: DataConfig, graph_cfg: GraphConfig) -> Path:
    """Where a dataset's graph set is saved: ``<root>/<dataset>[-pooled][-limit<N>][-sentences][-<encoder>][-<tag>]``.

    One folder per source: the dataset slice and encoder are spelled out (MiniLM, the default, is
    left unnamed), and every other setting that differs from its default, the data file included
    (another file than the dataset's in ``DEFAULT_FILES``), adds ``tag`` = the first 8 hex digits
    of the SHA-256 of those settings (sorted JSON of ``{"data.file": ..., "graph.<key>": ...}``).
    The default sets keep their plain names (``outputs/graphs/locomo``); a change of the data file's
    bytes or the builder rebuilds the set in place (:func:`reuse_or_build` checks the hash).
    """
    passage_graphs = data_cfg.pooled or data_cfg.name == "musique"  # the graphs sentence_nodes applies to
    named_data = DataConfig(name=data_cfg.name, pooled=data_cfg.pooled, limit=data_cfg.limit)
    named_graph = GraphConfig(encoder=graph_cfg.encoder, sentence_nodes=passage_graphs and graph_cfg.sentence_nodes)
    named, full = source(named_data, named_graph), source(data_cfg, graph_cfg)
    other = {k: full.get(k, "(default)") for k in sorted({*named, *full}) if full.get(k) != named.get(k)}
    name = data_cfg.name + ("-pooled" if data_cfg.pooled else "")
    name += f"-limit{data_cfg.limit}" if data_cfg.limit is not None else ""
    name += "-sentences" if named_graph.sentence_nodes else ""
    name += "" if graph_cfg.encoder == "minilm" else f"-{check_name('graph.encoder', graph_cfg.encoder)}"
    name += f"-{hashlib.sha256(json.dumps(other, sort_keys=True).encode()).hexdigest()[:8]}" if other else ""
    return Path(root) / name


def check_configs(data: Mapping[str, Any], graph: Mapping[str, Any]) -> tuple[DataConfig, GraphConfig]:
    """``data.*`` and ``graph.*`` checked (unknown keys and bad values raise ``ValueError``)."""
    try:
        return DataConfig.from_mapping(data), GraphConfig.from_mapping(graph)
    except (TypeError, ValueError) as err:
        raise ValueError(f"invalid data/graph config: {err}") from None


def open_graphset(
    saved: str | Path | None,
    data: Mapping[str, Any],
    graph: Mapping[str, Any],
    root: str | Path = "outputs/graphs",
    progress: bool = True,
) -> GraphSet:
    """The graph set a script runs on: ``saved`` when given, else :func:`load_or_build` under ``root``.

    ``data`` and ``graph`` are plain mappings (the Hydra groups), checked before any work in
    both cases. A saved set is what it was built from: its manifest's provenance, not ``data``,
    says which file it holds (a note is printed when ``data.name`` names another dataset).
    """
    data_cfg, graph_cfg = check_configs(data, graph)
    if saved:
        graphset = GraphSet.load(saved)
        built_from = graphset.provenance.get("dataset", graphset.dataset)
        if built_from != data_cfg.name:
            log.warning(
                "note: graphset=%s holds a %r set; data.name=%r is not used (results record the set's own provenance)",
                saved,
                built_from,
                data_cfg.name,
            )
        return graphset
    return load_or_build(data_cfg, graph_cfg, graphset_dir(root, data_cfg, graph_cfg), progress=progress)


def open_train_graphset(
    data: Mapping[str, Any], graph: Mapping[str, Any], root: str | Path = "outputs/graphs", progress: bool = True
) -> GraphSet | None:
    """The training-only graphs and questions of ``data.train_files`` (``None`` when it lists none).

    Each file is built like the main one (same kind, ``pooled`` and graph settings, no ``limit``)
    and saved beside it in ``<main set dir>-train-<file stem>``. Every graph is marked
    ``info["train_only"] = True``. Trainers add these to the training part of every fold; nothing
    evaluates on them.
    """
    data_cfg, graph_cfg = DataConfig.from_mapping(data), GraphConfig.from_mapping(graph)
    out: GraphSet | None = None
    for file in data_cfg.train_files:
        cfg = dataclasses.replace(data_cfg, file=file, limit=None, train_files=())
        main = graphset_dir(root, cfg, graph_cfg)
        part = load_or_build(
            cfg, graph_cfg, main.with_name(f"{main.name}-train-{safe_name(Path(file).stem)}"), progress=progress
        )
        for g in part.graphs.values():
            g.info["train_only"] = True
        out = part if out is None else union(out, part)
    return out
