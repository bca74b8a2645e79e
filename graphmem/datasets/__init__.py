"""Dataset loaders (original file formats) and the data-root logic."""

from graphmem.datasets.hotpotqa import HotpotFormatError, load_hotpotqa, sentence_id, title_id
from graphmem.datasets.locomo import LocomoFormatError, load_locomo, parse_session_datetime
from graphmem.datasets.musique import MusiqueFormatError, load_musique, passage_id
from graphmem.datasets.paths import DataNotFoundError, data_file, data_files, data_root, repo_root
from graphmem.datasets.realtalk import REALTALK_CATEGORIES, RealtalkFormatError, load_realtalk
from graphmem.datasets.twowiki import TwoWikiFormatError, load_twowiki
from graphmem.datasets.types import (
    LOCOMO_CATEGORIES,
    Conversation,
    HotpotRecord,
    LoadReport,
    MusiqueParagraph,
    MusiqueRecord,
    MusiqueStep,
    Paragraph,
    Question,
    Session,
    Turn,
)

__all__ = [
    "LOCOMO_CATEGORIES",
    "REALTALK_CATEGORIES",
    "Conversation",
    "DataNotFoundError",
    "HotpotFormatError",
    "HotpotRecord",
    "LoadReport",
    "LocomoFormatError",
    "MusiqueFormatError",
    "MusiqueParagraph",
    "MusiqueRecord",
    "MusiqueStep",
    "Paragraph",
    "Question",
    "RealtalkFormatError",
    "Session",
    "Turn",
    "TwoWikiFormatError",
    "data_file",
    "data_files",
    "data_root",
    "load_hotpotqa",
    "load_locomo",
    "load_musique",
    "load_realtalk",
    "load_twowiki",
    "passage_id",
    "parse_session_datetime",
    "repo_root",
    "sentence_id",
    "title_id",
]
