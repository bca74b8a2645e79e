"""The datasets a graph set can be built from, one :class:`Dataset` entry each, and :class:`DataConfig`.

Adding a dataset is adding one entry to :data:`REGISTRY`: its name, default file (relative to the
data root), loader, unit maker (:mod:`graphmem.builders.units`), the text fields whose size is
bounded, how its records are named, and whether its records can be pooled into one graph.
:class:`DataConfig` (mirrored by ``configs/data/*.yaml``) is checked against the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from graphmem.builders import units as U
from graphmem.builders.config import config_from_mapping
from graphmem.datasets.hotpotqa import load_hotpotqa
from graphmem.datasets.locomo import load_locomo
from graphmem.datasets.musique import load_musique
from graphmem.datasets.twowiki import load_twowiki
from graphmem.datasets.types import LoadReport, Question

if TYPE_CHECKING:
    from graphmem.builders.config import GraphConfig


@dataclass(frozen=True)
class Dataset:
    """One dataset: how its file is read and what graph units its records become.

    ``load(path) -> (records, questions, report)``; ``units(path, records, questions, report, cfg,
    pooled) -> (graph units, questions)``; ``fields(record)`` yields ``(field, text)`` of every text
    a node is made of; ``record_id(record)`` is the graph its questions name (``q.graph``), spelled
    ``id_key`` in the file.
    """

    name: str
    default_file: str
    load: Callable[[Path], tuple[list, list[Question], LoadReport]]
    units: Callable[..., tuple[list[U.GraphUnit], list[Question]]]
    fields: Callable[[Any], Iterator[tuple[str, str]]]
    record_id: Callable[[Any], str]
    id_key: str
    poolable: bool = False

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
            name="hotpotqa",
            default_file="hotpotqa/hotpot_dev_distractor_200.jsonl",
            load=load_hotpotqa,
            units=U.hotpot_units,
            fields=U.hotpot_fields,
            record_id=_qid,
            id_key="_id",
            poolable=True,
        ),
        Dataset(
            name="musique",
            default_file="musique/musique_ans_50.json",
            load=load_musique,
            units=U.musique_units,
            fields=U.musique_fields,
            record_id=_qid,
            id_key="id",
            poolable=True,
        ),
        Dataset(
            name="2wiki",
            default_file="2wikimultihopqa/2wiki_train_500.json",
            load=load_twowiki,
            units=U.twowiki_units,
            fields=U.hotpot_fields,
            record_id=_qid,
            id_key="_id",
            poolable=True,
        ),
    )
}
DATASETS = tuple(REGISTRY)
DEFAULT_FILES = {name: d.default_file for name, d in REGISTRY.items()}
POOLABLE = tuple(name for name, d in REGISTRY.items() if d.poolable)


def load_units(
    kind: str, path: Path, cfg: GraphConfig, pooled: bool = False, limit: int | None = None
) -> tuple[list[U.GraphUnit], list[Question], LoadReport]:
    """Load ``path`` as dataset ``kind`` and return its graph units, questions and load report.

    ``limit`` keeps the first ``limit`` records and the questions asked over them; their text
    sizes are checked (:meth:`Dataset.check_text_sizes`) before any unit is made.
    """
    if kind not in REGISTRY:
        raise ValueError(f"unknown dataset kind {kind!r}")
    dataset = REGISTRY[kind]
    if pooled and not dataset.poolable:
        raise ValueError(f"pooled mode is for {POOLABLE}, not {kind!r} (a LoCoMo graph is already one memory)")
    records, questions, report = dataset.load(path)
    if limit is not None:
        records = records[:limit]
        keep = {dataset.record_id(r) for r in records}
        questions = [q for q in questions if q.graph in keep]
    dataset.check_text_sizes(path, records, cfg.max_text_chars)
    units, questions = dataset.units(path, records, questions, report, cfg, pooled)
    return units, questions, report


@dataclass(frozen=True)
class DataConfig:
    """Which benchmark file to load (mirrored by ``configs/data/*.yaml``)."""

    name: str = "locomo"
    """dataset kind: ``locomo``, ``hotpotqa``, ``musique`` or ``2wiki``."""
    file: str | None = None
    """data file, relative to the data root (or absolute); ``None`` = the dataset's file in ``DEFAULT_FILES``."""
    root: str | None = None
    """data root; ``None`` = ``$GRAPHMEM_DATA_ROOT`` or ``<repo>/../shared/data``."""
    limit: int | None = None
    """keep only the first ``limit`` records (graphs, or the records pooled) and their questions; ``None`` = all."""
    pooled: bool = False
    """one memory graph over every distinct passage of the file, every question asked over it (HotpotQA, MuSiQue,
    2Wiki)."""
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
        return config_from_mapping(cls, values)
