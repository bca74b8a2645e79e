"""The datasets a graph set can be built from, one :class:`Dataset` entry each, and :class:`DataConfig`.

Adding a dataset is adding one entry to :data:`REGISTRY`: its name, default file (relative to the
data root), loader, unit maker (:mod:`graphmem.builders.units`), the text fields whose size is
bounded, how its records are named, and, when its records can be pooled, their passages.
:class:`DataConfig` (mirrored by ``configs/data/*.yaml``) is checked against the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from graphmem.builders import passages as P
from graphmem.builders import units as U
from graphmem.builders.config import config_from_mapping
from graphmem.datasets.hotpotqa import load_hotpotqa
from graphmem.datasets.locomo import load_locomo
from graphmem.datasets.musique import load_musique
from graphmem.datasets.realtalk import load_realtalk
from graphmem.datasets.twowiki import load_twowiki
from graphmem.datasets.types import LoadReport, Question

if TYPE_CHECKING:
    from graphmem.builders.config import GraphConfig


@dataclass(frozen=True)
class Dataset:
    """One dataset: how its file is read and what graph units its records become.

    ``load(path) -> (records, questions, report)``; ``units(path, records, questions, report, cfg)
    -> (graph units, questions)``, one graph per record; ``fields(record)`` yields ``(field, text)`` of
    every text a node is made of; ``record_id(record)`` is the graph its questions name (``q.graph``),
    spelled ``id_key`` in the file; ``passages(record)`` is a record's passages in a pooled graph
    (:func:`graphmem.builders.units.pooled_units`), ``None`` for a dataset that is not poolable.
    """

    name: str
    default_file: str
    load: Callable[[Path], tuple[list, list[Question], LoadReport]]
    units: Callable[..., tuple[list[U.GraphUnit], list[Question]]]
    fields: Callable[[Any], Iterator[tuple[str, str]]]
    record_id: Callable[[Any], str]
    id_key: str
    passages: Callable[[Any], list[P.Passage]] | None = None

    @property
    def poolable(self) -> bool:
        return self.passages is not None

    def check_text_sizes(self, path: Path, records: list, max_chars: int) -> None:
        """Raise :class:`graphmem.builders.units.TextSizeError` for the first field of ``records`` longer than
        ``max_chars`` characters, naming the file, the record (index and id) and the field."""
        for i, r in enumerate(records):
            for field, text in self.fields(r):
                if len(text) > max_chars:
                    raise U.TextSizeError(
                        f"{path}: record {i} ({self.id_key} {self.record_id(r)!r}): {field}: {len(text):,} "
                        f"characters, more than graph.max_text_chars={max_chars:,}: refused (one turn or passage is "
                        "one node; shorten it or raise graph.max_text_chars)"
                    )


def _sample_id(record) -> str:
    return record.sample_id


def _qid(record) -> str:
    return record.qid


REGISTRY: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(
            name="locomo",
            default_file="locomo/locomo_dev8.json",
            load=load_locomo,
            units=U.locomo_units,
            fields=U.locomo_fields,
            record_id=_sample_id,
            id_key="sample_id",
        ),
        Dataset(
            name="realtalk",
            default_file="realtalk",  # the folder: one conversation per file
            load=load_realtalk,
            units=partial(U.locomo_units, dataset="realtalk"),
            fields=partial(U.locomo_fields, prefix="", text="clean_text"),
            record_id=_sample_id,
            id_key="file",
        ),
        Dataset(
            name="hotpotqa",
            default_file="hotpotqa/hotpot_dev_distractor_200.jsonl",
            load=load_hotpotqa,
            units=U.hotpot_units,
            fields=U.hotpot_fields,
            record_id=_qid,
            id_key="_id",
            passages=P.hotpot_passages,
        ),
        Dataset(
            name="musique",
            default_file="musique/musique_ans_50.json",
            load=load_musique,
            units=U.musique_units,
            fields=U.musique_fields,
            record_id=_qid,
            id_key="id",
            passages=P.musique_passages,
        ),
        Dataset(
            name="2wiki",
            default_file="2wikimultihopqa/2wiki_train_500.json",
            load=load_twowiki,
            units=U.twowiki_units,
            fields=U.hotpot_fields,
            record_id=_qid,
            id_key="_id",
            passages=P.hotpot_passages,
        ),
    )
}
DATASETS = tuple(REGISTRY)
DEFAULT_FILES = {name: d.default_file for name, d in REGISTRY.items()}
POOLABLE = tuple(name for name, d in REGISTRY.items() if d.poolable)


def load_records(dataset: Dataset, paths: Path | list[Path]) -> tuple[list, list[Question], LoadReport, list[Path]]:
    """The records, questions and load report of one file or several (``data.file`` a list or a folder: their
    records in file order, one report over them), and the file each record came from. A record whose id
    (``dataset.id_key``) an earlier file already holds is refused, naming both files."""
    paths = [paths] if isinstance(paths, Path) else list(paths)
    records, questions, report, origin, seen = [], [], None, [], {}
    for path in paths:
        r, q, rep = dataset.load(path)
        for record in r:
            rid = dataset.record_id(record)
            if rid in seen:
                raise ValueError(f"{path}: {dataset.id_key} {rid!r} is also in {seen[rid]}: one record, one file")
            seen[rid] = path
        records, questions, origin = records + r, questions + q, origin + [path] * len(r)
        report = rep if report is None else report.merge(rep)
    if len(paths) > 1:
        report.source = f"{paths[0].parent} ({len(paths)} files: {', '.join(p.name for p in paths[:3])}" + (
            ", ...)" if len(paths) > 3 else ")"
        )
    return records, questions, report, origin


def load_units(
    kind: str,
    path: Path | list[Path],
    cfg: GraphConfig,
    pooled: bool = False,
    limit: int | None = None,
    pool_size: int | None = None,
) -> tuple[list[U.GraphUnit], list[Question], LoadReport]:
    """Load ``path`` (one file, or several: :func:`load_records`) as dataset ``kind`` and return its graph units,
    questions and load report.

    ``limit`` keeps the first ``limit`` records and the questions asked over them; their text
    sizes are checked (:meth:`Dataset.check_text_sizes`) before any unit is made. With ``pooled``
    (one file only), ``pool_size`` cuts the records into pooled graphs of that many records each
    (:mod:`graphmem.builders.units`; ``None`` = one over them all).
    """
    if kind not in REGISTRY:
        raise ValueError(f"unknown dataset kind {kind!r}")
    dataset = REGISTRY[kind]
    if pooled and not dataset.poolable:
        raise ValueError(f"pooled mode is for {POOLABLE}, not {kind!r} (a conversation graph is already one memory)")
    _check_pool_size(pooled, pool_size)
    paths = [path] if isinstance(path, Path) else list(path)
    if pooled and len(paths) != 1:
        raise ValueError(f"pooled mode reads one data file (its graph is named after it), got {len(paths)} files")
    records, questions, report, origin = load_records(dataset, paths)
    if limit is not None:
        records, origin = records[:limit], origin[:limit]
        keep = {dataset.record_id(r) for r in records}
        questions = [q for q in questions if q.graph in keep]
    for p in paths:
        dataset.check_text_sizes(p, [r for r, o in zip(records, origin) if o == p], cfg.max_text_chars)
    path = paths[0]
    if pooled:
        units, questions = U.pooled_units(path, dataset, records, questions, report, cfg, pool_size)
    else:
        units, questions = dataset.units(path, records, questions, report, cfg)
    return units, questions, report


def _check_pool_size(pooled: bool, pool_size: Any) -> None:
    """``pool_size`` is ``None`` or a positive integer, and set only with ``pooled``; else ``ValueError`` naming it."""
    if pool_size is None:
        return
    if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
        raise ValueError(f"DataConfig.pool_size must be a positive integer or null, got {pool_size!r}")
    if not pooled:
        raise ValueError(
            f"DataConfig.pool_size={pool_size} needs DataConfig.pooled=true (it cuts a pooled corpus into graphs of "
            "that many records; data=<kind>_pooled)"
        )


@dataclass(frozen=True)
class DataConfig:
    """Which benchmark file to load (mirrored by ``configs/data/*.yaml``)."""

    name: str = "locomo"
    """dataset kind: ``locomo``, ``realtalk``, ``hotpotqa``, ``musique`` or ``2wiki``."""
    file: Any = None
    """data file, relative to the data root (or absolute): one file, a folder (its ``.json`` / ``.jsonl`` files,
    sorted by name) or a list of files and folders, read as one set (:func:`load_records`); ``None`` = the
    dataset's file in ``DEFAULT_FILES``."""
    root: str | None = None
    """data root; ``None`` = ``$GRAPHMEM_DATA_ROOT`` or ``<repo>/../shared/data``."""
    limit: int | None = None
    """keep only the first ``limit`` records (graphs, or the records pooled) and their questions; ``None`` = all."""
    pooled: bool = False
    """one memory graph over every distinct passage of the file, every question asked over it (HotpotQA, MuSiQue,
    2Wiki)."""
    pool_size: int | None = None
    """with ``pooled``: one pooled graph per group of this many consecutive records (in file order; the last group
    may be smaller), each question asked over its own group's graph; ``None`` = one over the whole file."""
    train_files: tuple[str, ...] = ()
    """more files of the same kind, for training only (:func:`graphmem.builders.pipeline.open_train_graphset`);
    never evaluated."""

    def __post_init__(self) -> None:
        if self.name not in DATASETS:
            raise ValueError(f"DataConfig.name {self.name!r} is not one of {DATASETS}")
        if not isinstance(self.pooled, bool):
            raise ValueError(f"DataConfig.pooled must be true or false, got {self.pooled!r}")
        if self.pooled and self.name not in POOLABLE:
            raise ValueError(f"DataConfig.pooled is for {POOLABLE}, not {self.name!r}")
        _check_pool_size(self.pooled, self.pool_size)
        files = self.train_files
        if isinstance(files, str) or not all(isinstance(f, str) and f for f in (files or ())):
            raise ValueError(f"DataConfig.train_files must be a list of file paths, got {files!r}")
        object.__setattr__(self, "train_files", tuple(files or ()))
        if self.file is None:
            object.__setattr__(self, "file", DEFAULT_FILES[self.name])
        if isinstance(self.file, (list, tuple)) and not isinstance(self.file, str):
            if not self.file or not all(isinstance(f, str) and f for f in self.file):
                raise ValueError(f"DataConfig.file must be a non-empty path or a list of them, got {self.file!r}")
            object.__setattr__(self, "file", tuple(self.file) if len(self.file) > 1 else self.file[0])
        if not isinstance(self.file, (str, tuple)) or not self.file:
            raise ValueError(f"DataConfig.file must be a non-empty path or a list of them, got {self.file!r}")
        if self.limit is not None and (
            not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1
        ):
            raise ValueError(f"DataConfig.limit must be a positive integer or null, got {self.limit!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> DataConfig:
        """Build from a dict / OmegaConf node; unknown keys are an error."""
        return config_from_mapping(cls, values)
