"""Building graph sets: the config hash, set folders, and load, embed, build and save under the folder's lock.

:func:`build_graphset` loads a dataset through its registry entry (:func:`graphmem.builders.registry.load_units`),
embeds every node and question in one cached pass and builds one graph per unit; :func:`reuse_or_build`
keeps a saved set whose config hash matches and which verifies, else builds and commits a new one
(:mod:`graphmem.store.setstore`); :func:`graphset_dir` names a source's folder; :func:`open_graphset` is
the set a script runs on, :func:`open_train_graphset` the training-only sets beside it
(``data.train_files`` and ``train_sets``, :func:`train_sources`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from graphmem.builders.config import GraphConfig
from graphmem.builders.entities import make_entity_extractor
from graphmem.builders.registry import DataConfig, load_units
from graphmem.datasets.paths import DataNotFoundError, data_files, data_root
from graphmem.index.embed import encoder_fingerprint, make_encoder
from graphmem.store.encoder_cache import CachedEncoder
from graphmem.store.graphset import GraphSet, union
from graphmem.store.indexes import lexical_files
from graphmem.store.paths import check_name
from graphmem.store.setformat import safe_name
from graphmem.store.setstore import (
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
_HASHED_WHEN_SET = {
    "pooled": False,
    "train_files": (),
    "sentence_nodes": False,
    "duplicate_titles": "join",
    "pool_size": None,
    "incremental": False,
}
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


def data_sha256(paths: Sequence[Path]) -> str:
    """The SHA-256 a set records of its data: the file's own for one file; for several (``data.file`` a list or a
    folder), the SHA-256 over each file's name and SHA-256 in order (moving the data root changes nothing)."""
    if len(paths) == 1:
        return file_sha256(paths[0])
    blob = "".join(f"{Path(p).name}\0{file_sha256(p)}\n" for p in paths)
    return hashlib.sha256(blob.encode()).hexdigest()


def _at_default(key: str, value: Any) -> bool:
    return key in _HASHED_WHEN_SET and value == _HASHED_WHEN_SET[key]


def build_graphset(data_cfg: DataConfig, graph_cfg: GraphConfig, encoder=None, progress: bool = True) -> GraphSet:
    """Load the dataset, embed every node and question in one cached pass, build one graph per record.

    Args:
        data_cfg: which file to load.
        graph_cfg: builder settings.
        encoder: an :class:`graphmem.index.embed.Encoder`; ``None`` = ``graph_cfg.encoder`` wrapped in
            :class:`graphmem.store.encoder_cache.CachedEncoder` at ``graph_cfg.cache_dir`` (default: ``None``).
        progress: show tqdm bars (default: ``True``).
    """
    import time

    from tqdm.auto import tqdm

    extractor = make_entity_extractor(graph_cfg.entity_extractor)
    paths = data_files(data_cfg.file, data_cfg.root)
    t0 = time.perf_counter()
    units, questions, report = load_units(
        data_cfg.name, paths, graph_cfg, data_cfg.pooled, data_cfg.limit, data_cfg.pool_size
    )
    _check_something_to_build(units, questions, report)
    log.info("%s: %d graph units, %d questions from %s", data_cfg.name, len(units), len(questions), report.source)
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
    data_sha = data_sha256(paths)
    provenance = {
        "dataset": data_cfg.name,
        "data": {
            **{k: v for k, v in asdict(data_cfg).items() if k != "root"},
            "resolved": str(paths[0]) if len(paths) == 1 else [str(p) for p in paths],
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


def _check_something_to_build(units: list, questions: list, report) -> None:
    """``ValueError`` naming the data when a load left no graph or no question."""
    if not units or not questions:
        discarded = f", {len(report.discarded)} records or questions discarded" if report.discarded else ""
        raise ValueError(
            f"{report.source}: {len(units)} graphs and {len(questions)} questions{discarded}: nothing to build"
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
    out_dir = Path(out_dir)
    wanted = config_hash(data_cfg, graph_cfg, data_sha256(data_files(data_cfg.file, data_cfg.root)))
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
    (:func:`graphmem.store.setstore.keep_aside`) just before the new one is committed.
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


@dataclasses.dataclass(frozen=True)
class TrainSource:
    """One training-only set of a run: the config key it comes from (``data.train_files[0]``, ``train_sets[1]``)
    and its data settings."""

    key: str
    data: DataConfig

    def folder(self, root: str | Path, graph_cfg: GraphConfig) -> Path:
        """Its set folder: a ``train_sets`` or ``cv_sets`` item's own :func:`graphset_dir` (one folder per source,
        as every set); a ``data.train_files`` file's ``<its graphset_dir>-train-<file stem>``, where such sets have
        always lived."""
        own = graphset_dir(root, self.data, graph_cfg)
        if not self.key.startswith("data.train_files["):
            return own
        return own.with_name(f"{own.name}-train-{safe_name(Path(self.data.file).stem)}")

    def label(self) -> str:
        """``<key> (<kind>[ pooled] <file>)``, how errors and logs name it."""
        return f"{self.key} ({self.data.name}{' pooled' if self.data.pooled else ''} {self.data.file})"


TRAIN_SETS_EXAMPLE = " of data mappings, e.g. train_sets='[{name: hotpotqa, file: hotpotqa/hotpot_train_100.jsonl}]'"
"""How a refusal of ``train_sets`` shows what the key takes."""


def train_sources(
    data: Mapping[str, Any], train_sets: Sequence[Any] = (), train_files: bool = True, cv_sets: Sequence[Any] = ()
) -> list[TrainSource]:
    """The sets of a run beside its main one, checked before any work: the sets cross-validated with it
    (``cv_sets``, keyed ``cv_sets[i]``), then the training-only sets: each file of ``data.train_files`` (with
    ``train_files``; built like the main file: same kind and ``pooled``, no ``limit``), then each item of
    ``train_sets``. A ``cv_sets`` or ``train_sets`` item is a mapping of :class:`DataConfig` keys (``name``
    required) over its defaults, so a set may be of another kind than the main one (conversations or passages).

    A bad item raises ``ValueError`` in one line naming ``train_sets[i].<key>``. Two sets reading the same data
    file (the main one included) are refused, naming both: their graphs and questions would share names; except
    two training-only sets of which one is pooled and the other not (one file's questions over their own graphs
    and over the pools: :func:`open_train_graphset` gives the later set's questions ids of their own).
    """
    main = DataConfig.from_mapping(data)
    sources = []
    for key, items in (("cv_sets", cv_sets), ("train_sets", train_sets)):
        if isinstance(items, (str, Mapping)) or not isinstance(items, Sequence):
            raise ValueError(f"{key}={items!r}: must be a list{TRAIN_SETS_EXAMPLE.replace('train_sets', key)}")
    sources += [TrainSource(f"cv_sets[{i}]", _train_set_config(i, item, "cv_sets")) for i, item in enumerate(cv_sets)]
    if train_files:
        sources += [
            TrainSource(f"data.train_files[{i}]", dataclasses.replace(main, file=f, limit=None, train_files=()))
            for i, f in enumerate(main.train_files)
        ]
    sources += [TrainSource(f"train_sets[{i}]", _train_set_config(i, item)) for i, item in enumerate(train_sets)]
    seen = dict.fromkeys(_resolved(main), ("the main set (data)", None))
    for src in sources:
        for path in _resolved(src.data, src.key):
            label, pooled = seen.get(path, (None, None))
            if label is not None and not (src.key.startswith("train_sets[") and pooled not in (None, src.data.pooled)):
                raise ValueError(
                    f"{src.label()} and {label} both read {path}: their graphs and questions would share names "
                    "(a training-only graph is never validated or tested); drop one of them, or pool one of two "
                    "training-only sets and not the other"
                )
        training_only = not src.key.startswith("cv_sets[")
        seen.update(
            dict.fromkeys(_resolved(src.data, src.key), (src.label(), src.data.pooled if training_only else None))
        )
    return sources


def _train_set_config(i: int, item: Any, group: str = "train_sets") -> DataConfig:
    """``<group>[i]`` (``train_sets``, ``cv_sets``) as a :class:`DataConfig`, any error one line naming
    ``<group>[i].<key>``."""
    key = f"{group}[{i}]"
    if not isinstance(item, Mapping):
        raise ValueError(f"{key} must be a mapping of data keys ({{name: hotpotqa, file: ...}}), got {item!r}")
    fields = [f.name for f in dataclasses.fields(DataConfig)]
    for k in item:
        if k not in fields:
            raise ValueError(f"{key}.{k}: unknown key; a training set takes the data keys {fields}")
    if "name" not in item:
        raise ValueError(f"{key}.name: missing; every training set names its dataset kind")
    if item.get("train_files"):
        raise ValueError(f"{key}.train_files: a training set is one file; list each file as an item of its own")
    try:
        return DataConfig.from_mapping(dict(item))
    except (TypeError, ValueError) as err:
        text = str(err)
        raise ValueError(
            text.replace("DataConfig.", f"{key}.") if text.startswith("DataConfig.") else f"{key}: {text}"
        ) from None


def _resolved(cfg: DataConfig, key: str | None = None) -> list[Path]:
    """The data files of ``cfg`` (resolved against its root); missing, refused naming ``<key>.file`` when given."""
    try:
        return [p.resolve() for p in data_files(cfg.file, cfg.root)]
    except DataNotFoundError as err:
        if key is not None:
            raise ValueError(f"{key}.file: {err}") from None
        files = [cfg.file] if isinstance(cfg.file, str) else list(cfg.file)
        return [(Path(f) if Path(f).is_absolute() else data_root(cfg.root) / f).expanduser().resolve() for f in files]


def open_train_graphset(
    data: Mapping[str, Any],
    graph: Mapping[str, Any],
    root: str | Path = "outputs/graphs",
    progress: bool = True,
    train_sets: Sequence[Any] = (),
    train_files: bool = True,
    main: GraphSet | None = None,
) -> GraphSet | None:
    """The training-only graphs and questions of a run's :func:`train_sources` (``None`` when it has none).

    Each set is built (or reused) with the run's graph settings in its own folder under ``root``
    (:meth:`TrainSource.folder`) and every graph marked ``info["train_only"] = True``; trainers add
    them to the training part of every fold and nothing evaluates on them. Graph names and question
    ids must differ between the sets and from those of ``main`` (refused naming both, before the
    next set is built), and every set's embeddings have ``main``'s size. ``provenance["train_sets"]``
    lists each set's :func:`train_record`.
    """
    graph_cfg = check_configs(data, graph)[1]
    out, records = None, []
    every = [src for src in train_sources(data, train_sets, train_files) if not src.key.startswith("cv_sets[")]
    read: set[Path] = set()
    for src, part, folder in _open_sets(every, graph_cfg, root, progress, main, read):
        for g in part.graphs.values():
            g.info["train_only"] = True
        records.append(train_record(src, part, folder))
        out = part if out is None else union(out, part)
    return None if out is None else dataclasses.replace(out, provenance={"train_sets": records})


def open_cv_graphset(
    data: Mapping[str, Any],
    graph: Mapping[str, Any],
    main: GraphSet,
    cv_sets: Sequence[Any],
    root: str | Path = "outputs/graphs",
    progress: bool = True,
) -> GraphSet:
    """``main`` with the graphs and questions of every ``cv_sets`` item (:func:`train_sources`), each built (or
    reused) with the run's graph settings in its own folder under ``root``, to be cross-validated together (a
    trainer splits them by source: :func:`rl.common.splits.source_folds`). Graph names and question ids must
    differ between the sets (refused naming both). The set's ``dataset`` joins the sets' names
    (``locomo+realtalk``), its provenance is ``main``'s with ``cv_sets``, each set's :func:`train_record`."""
    graph_cfg = check_configs(data, graph)[1]
    out, records, names = main, [], [main.dataset]
    every = train_sources(data, cv_sets=cv_sets, train_files=False)
    for src, part, folder in _open_sets(every, graph_cfg, root, progress, main):
        records.append(train_record(src, part, folder))
        names.append(part.dataset)
        out = union(out, part)
    provenance = {**(main.provenance or {}), "cv_sets": records}
    return dataclasses.replace(out, dataset="+".join(names), provenance=provenance)


def _open_sets(
    sources: list[TrainSource], graph_cfg: GraphConfig, root, progress: bool, main: GraphSet | None, read=None
):
    """``(source, its set, its folder)`` for each source, built or reused in its folder; each set is checked apart
    from ``main`` and the sets before it (:func:`_check_apart`) before the next is built. With ``read`` (the files
    read so far), a set of a file read before (the other shape of a training file: :func:`train_sources`) has its
    question ids suffixed ``@pooled`` or ``@per-question``, so that both shapes' questions train."""
    loaded = [("the main set", main)] if main is not None else []
    for src in sources:
        folder = src.folder(root, graph_cfg)
        part = load_or_build(src.data, graph_cfg, folder, progress=progress)
        files = set(_resolved(src.data))
        if read is not None and files & read:
            part = _renamed(part, "@pooled" if src.data.pooled else "@per-question")
        read = None if read is None else read | files
        for label, other in loaded:  # by content against the evaluated set: two training shapes of a file may share it
            _check_apart(src.label(), part, label, other, content=other is main)
        loaded.append((src.label(), part))
        yield src, part, folder


def _renamed(part: GraphSet, suffix: str) -> GraphSet:
    """``part`` with ``suffix`` after each question id (its graphs and embeddings as they are)."""
    questions = [dataclasses.replace(q, qid=q.qid + suffix) for q in part.questions]
    return dataclasses.replace(part, questions=questions)


def _check_apart(label: str, part: GraphSet, other_label: str, other: GraphSet, content: bool = True) -> None:
    """Refuse ``part`` beside ``other`` (naming both) when they share graph names or question ids, or (``content``:
    ``other`` is the evaluated set), whatever the names, a question's text (:func:`_question_key`) or a graph's
    passages (:func:`_graph_key`): a copy of the test file with renamed ids is the test set; refused too when their
    embeddings differ in size."""
    shared = sorted(set(part.graphs) & set(other.graphs))
    repeated = sorted({q.qid for q in part.questions} & {q.qid for q in other.questions})
    if shared or repeated:
        what = f"graphs {shared[:3]}" if shared else f"questions {repeated[:3]}"
        raise ValueError(f"{label} and {other_label} share {what}: a training-only set must be apart from the others")
    theirs = {_question_key(q.text): q.qid for q in other.questions} if content else {}
    same_text = [(q.qid, theirs[k]) for q in part.questions if (k := _question_key(q.text)) in theirs]
    graphs = {_graph_key(g): n for n, g in other.graphs.items()} if content else {}
    same_graph = [(n, graphs[k]) for n, g in part.graphs.items() if (k := _graph_key(g)) in graphs]
    if same_text or same_graph:
        pairs = same_text or same_graph
        what = "question texts" if same_text else "graphs of the same passages"
        first = ", ".join(f"{a} = {b}" for a, b in pairs[:3])
        raise ValueError(
            f"{label} and {other_label} share {len(pairs)} {what} under other names ({first}"
            f"{' ...' if len(pairs) > 3 else ''}): a training-only set holding the evaluated content would leak it"
        )
    dims = int(part.query_embeddings.shape[1]), int(other.query_embeddings.shape[1])
    if dims[0] != dims[1]:
        raise ValueError(f"{label} has {dims[0]}-d embeddings, {other_label} {dims[1]}-d: build both with one encoder")


def _question_key(text: str) -> str:
    """A question's text compared by content: case and runs of white space ignored."""
    return " ".join(text.casefold().split())


def _graph_key(graph) -> str:
    """A graph compared by content: the SHA-256 of its passages' texts (:func:`_question_key`), in sorted order."""
    texts = sorted(_question_key(t) for t in graph.texts)
    return hashlib.sha256("\0".join(texts).encode("utf-8")).hexdigest()


def train_record(src: TrainSource, part: GraphSet, folder: Path) -> dict[str, Any]:
    """What results record of one training-only set: its key, data settings, resolved file and SHA-256, set folder,
    config hash and counts of graphs and questions."""
    data = (part.provenance or {}).get("data") or {}
    settings = {k: v for k, v in asdict(src.data).items() if k not in ("root", "train_files")}
    return {
        "key": src.key,
        **settings,
        "resolved": data.get("resolved"),
        "sha256": data.get("sha256"),
        "folder": str(folder),
        "config_hash": part.config_hash,
        "graphs": len(part.graphs),
        "questions": len(part.questions),
    }
