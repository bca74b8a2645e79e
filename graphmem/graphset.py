"""GraphSet: the graphs, questions and query embeddings every trainer and evaluator consumes.

On disk (no pickle), one unit committed by its manifest (:mod:`graphmem.setstore`)::

    <dir>/manifest.json                    dataset, config hash, provenance, questions, load report,
                                           graphs (name -> file, info), every file's SHA-256 and
                                           the SHA-256 of its own content
    <dir>/gen-<id>/queries.safetensors     query_embeddings [Q, D], bound to the manifest's ordered questions
    <dir>/gen-<id>/graphs/<safe name>.safetensors   one MemoryGraph each, saved under its name

:meth:`GraphSet.load` checks every listed file against its checksum, each graph's name and info
against its manifest entry, the manifest's own checksum, and the query embeddings for shape,
dimension, finiteness, non-zero rows and their binding to the questions before anything is
used. It imports neither the encoder nor sentence-transformers, so saved sets load on machines
without the text stack.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from graphmem.datasets.types import LoadReport, Question
from graphmem.graph import MemoryGraph
from graphmem.paths import check_name
from graphmem.policies.base import Query
from graphmem.setformat import MANIFEST_VERSION, read_set, safe_name, write_set
from graphmem.setstore import (
    GraphSetError,
    drop_unreferenced,
    file_sha256,
    generation_of,
    keep_aside,
    read_manifest,
    set_lock,
)

__all__ = ["GraphSet", "GraphSetError", "DataConfig", "GraphConfig", "MANIFEST_VERSION", "file_sha256", "safe_name"]
BUILDER_VERSION = 1  # bump when a builder changes what it produces, to invalidate saved sets
DATASETS = ("locomo", "hotpotqa", "musique")
DEFAULT_FILES = {
    "locomo": "locomo/locomo_dev8.json",
    "hotpotqa": "hotpotqa/hotpot_dev_distractor_200.jsonl",
    "musique": "musique/musique_ans_50.json",
}
POOLABLE = ("hotpotqa", "musique")
# Settings added after saved sets existed: left out of the config hash while at their default,
# so sets built before them stay valid.
_HASHED_WHEN_SET = {"pooled": False, "train_files": (), "sentence_nodes": False, "duplicate_titles": "join"}
_UNHASHED = ("cache_dir", "max_text_chars")  # graph settings that never change what a build produces
FEATURES = ("scored", "onehot")
log = logging.getLogger(__name__)


def _from_mapping(cls, values: Mapping[str, Any]):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown keys {unknown}; known: {sorted(names)}")
    return cls(**dict(values))


@dataclass(frozen=True)
class DataConfig:
    """Which benchmark file to load (mirrored by ``configs/data/*.yaml``)."""

    name: str = "locomo"
    """dataset kind: ``locomo``, ``hotpotqa`` or ``musique``."""
    file: str | None = None
    """data file, relative to the data root (or absolute); ``None`` = the dataset's file in ``DEFAULT_FILES``."""
    root: str | None = None
    """data root; ``None`` = ``$GRAPHMEM_DATA_ROOT`` or ``<repo>/../shared/data``."""
    limit: int | None = None
    """keep only the first ``limit`` records (graphs, or the records pooled) and their questions; ``None`` = all."""
    pooled: bool = False
    """one memory graph over every distinct passage of the file, every question asked over it (HotpotQA, MuSiQue)."""
    train_files: tuple[str, ...] = ()
    """more files of the same kind, for training only (:func:`open_train_graphset`); never evaluated."""

    def __post_init__(self) -> None:
        if self.name not in DATASETS:
            raise ValueError(f"DataConfig.name {self.name!r} is not one of {DATASETS}")
        if not isinstance(self.pooled, bool):
            raise ValueError(f"DataConfig.pooled must be true or false, got {self.pooled!r}")
        if self.pooled and self.name not in POOLABLE:
            raise ValueError(f"DataConfig.pooled is for {POOLABLE}, not {self.name!r}")
        files = self.train_files
        if isinstance(files, str) or not all(isinstance(f, str) and f for f in (files or ())):
            raise ValueError(f"DataConfig.train_files must be a list of file paths, got {files!r}")
        object.__setattr__(self, "train_files", tuple(files or ()))
        if self.file is None:
            object.__setattr__(self, "file", DEFAULT_FILES[self.name])
        if not isinstance(self.file, str) or not self.file:
            raise ValueError("DataConfig.file must be a non-empty path")
        if self.limit is not None and (
            not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1
        ):
            raise ValueError(f"DataConfig.limit must be a positive integer or null, got {self.limit!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> DataConfig:
        """Build from a dict / OmegaConf node; unknown keys are an error."""
        return _from_mapping(cls, values)


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
    max_text_chars: int = 1_000_000
    """longest text field of a turn or passage, in characters; a longer one is refused naming the file, record and
    field (:func:`graphmem.builders.units.check_text_sizes`). Not hashed: it decides whether a set is built, not
    what it holds."""

    def __post_init__(self) -> None:
        if self.features not in FEATURES:
            raise ValueError(f"GraphConfig.features {self.features!r} is not one of {FEATURES}")
        if self.duplicate_titles not in ("join", "first"):
            raise ValueError(f"GraphConfig.duplicate_titles {self.duplicate_titles!r} is not one of ('join', 'first')")
        if not isinstance(self.sentence_nodes, bool):
            raise ValueError(f"GraphConfig.sentence_nodes must be true or false, got {self.sentence_nodes!r}")
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
        return _from_mapping(cls, values)


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


@dataclass
class GraphSet:
    """Graphs by name, questions (each names its graph), ``[Q, D]`` query embeddings and the load report.

    ``provenance`` says where the set comes from (data file and its SHA-256, data and graph
    settings, config hash, build time; once saved or loaded, also the folder and the manifest's
    SHA-256). ``files`` holds the verified paths of the set's other files (:mod:`graphmem.setstore`).
    """

    dataset: str
    graphs: dict[str, MemoryGraph]
    questions: list[Question]
    query_embeddings: Tensor
    report: LoadReport
    config_hash: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.query_embeddings.shape[0] != len(self.questions):
            raise ValueError(
                f"GraphSet: {self.query_embeddings.shape[0]} query embeddings for {len(self.questions)} questions"
            )
        missing = sorted({q.graph for q in self.questions} - set(self.graphs))
        if missing:
            raise ValueError(f"GraphSet: questions refer to unknown graphs {missing[:5]}")

    def queries(self) -> list[Query]:
        """What policies may see: qid, text and embedding of each question (no gold fields)."""
        return [Query(qid=q.qid, text=q.text, embedding=self.query_embeddings[i]) for i, q in enumerate(self.questions)]

    def check(self, where: str = "GraphSet") -> GraphSet:
        """Refuse an empty set, a repeated question id, and query rows not finite non-zero ``[Q, D]`` floats."""
        if not self.graphs or not self.questions:
            raise GraphSetError(f"{where}: {len(self.graphs)} graphs and {len(self.questions)} questions (empty set)")
        emb = self.query_embeddings
        dims = sorted({int(g.embeddings.shape[1]) for g in self.graphs.values()})
        if emb.ndim != 2 or not emb.is_floating_point() or len(dims) != 1 or emb.shape[1] != dims[0]:
            raise GraphSetError(
                f"{where}: query embeddings are {emb.dtype} of shape {tuple(emb.shape)}, "
                f"expected floats [{len(self.questions)}, D] with D = the graphs' embedding size {dims}"
            )
        bad = (~torch.isfinite(emb)).any(dim=1).nonzero().flatten().tolist()
        if bad:
            raise GraphSetError(
                f"{where}: {len(bad)} query embedding rows hold inf or NaN, first row {bad[0]} "
                f"(question {self.questions[bad[0]].qid!r})"
            )
        zero = (emb == 0).all(dim=1).nonzero().flatten().tolist()
        if zero:
            raise GraphSetError(
                f"{where}: {len(zero)} query embedding rows are all zero (no direction to rank by), first row "
                f"{zero[0]} (question {self.questions[zero[0]].qid!r})"
            )
        seen: set[str] = set()
        for q in self.questions:
            if q.qid in seen:
                raise GraphSetError(f"{where}: question id {q.qid!r} occurs more than once")
            seen.add(q.qid)
        return self

    def save(self, directory: str | Path, extra_files: Mapping[str, Any] | None = None) -> Path:
        """Write the set under ``directory`` as one committed unit (:func:`graphmem.setformat.write_set`).

        Args:
            extra_files: more files of the set, relative path -> ``write(path)`` function; they are
                listed, checksummed and committed with the graphs (default: none).
        """
        return write_set(self, directory, extra_files)

    @staticmethod
    def read_manifest(directory: str | Path) -> dict | None:
        """The manifest of a saved set, or ``None`` when there is none (refused, naming it, when unreadable)."""
        return read_manifest(directory)

    @classmethod
    def load(cls, directory: str | Path) -> GraphSet:
        """Read and verify a set written by :meth:`save` (:func:`graphmem.setformat.read_set`; no encoder needed).

        Vector indexes saved with the set (``indexes/``, ``scripts/build_index.py``) and BM25 indexes
        (``lexical/``, written by every build) are attached to their graphs
        (:func:`graphmem.vector_index.attach_indexes`, :func:`graphmem.lexical.attach_lexical`); one
        built for other node ids, embeddings or texts than its graph's, or damaged, refuses the set.
        """
        from graphmem.lexical import LexicalIndexError, attach_lexical
        from graphmem.vector_index import VectorIndexError, attach_indexes

        graphset = read_set(cls, directory)
        try:
            attach_indexes(graphset.graphs, graphset.files)
            attach_lexical(graphset.graphs, graphset.files)
        except (VectorIndexError, LexicalIndexError) as err:
            raise GraphSetError(str(err)) from None
        return graphset


# ---------------------------------------------------------------------------------- building


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
    from graphmem.builders.units import load_units
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


def union(first: GraphSet, second: GraphSet) -> GraphSet:
    """The graphs and questions of both sets (graph names and question ids must not repeat)."""
    shared = sorted(set(first.graphs) & set(second.graphs))
    repeated = sorted({q.qid for q in first.questions} & {q.qid for q in second.questions})
    if shared or repeated:
        raise ValueError(f"union: graphs {shared[:3]} / questions {repeated[:3]} are in both graph sets")
    return GraphSet(
        dataset=first.dataset,
        graphs={**first.graphs, **second.graphs},
        questions=first.questions + second.questions,
        query_embeddings=torch.cat([first.query_embeddings, second.query_embeddings]),
        report=first.report,
        config_hash=first.config_hash,
        stats=first.stats,
    )


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
