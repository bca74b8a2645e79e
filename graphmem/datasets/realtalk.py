"""Loader for REALTALK files in their original format: one JSON object per file, one conversation each.

REALTALK (Lee et al. 2025) holds real 21-day messaging-app chats with LoCoMo's QA layout. What differs
from LoCoMo, and what this loader does with it:

* One conversation per file, with no ``sample_id``: the file's stem names the conversation
  (``Chat_1_Emi_Elise``), and several files are read as several conversations
  (``data.file`` a folder or a list, :func:`graphmem.builders.registry.load_records`).
* The speakers are ``name.speaker_1`` / ``name.speaker_2``, and a turn's ``speaker`` is a chat
  handle: participants chat in persona, so the dialogue and the questions may call "Emi" "Kate". The
  handle stays the turn's ``speaker``, apart from the names in its text: it heads the node text as
  LoCoMo's speaker does, entities are extracted from the turn's own words only
  (:mod:`graphmem.builders.locomo`), and nothing maps handles to names.
* The turn text is ``clean_text``; every turn carries its own ``date_time`` (``"%d.%m.%Y, %H:%M:%S"``),
  which is the node's time. An unparsable one falls back to its session's date and is reported.
* ``dia_id``s are ``D<n>:<t>`` where ``<n>`` counts days in some files, not sessions; they are unique
  within a file, and evidence is resolved by ``dia_id`` lookup only.
* Evidence strings are split on ``[;,\\s]+``, trailing dots stripped and same-day ranges
  (``D12:3-D12:5``, ``D12:3-5``) expanded (:func:`graphmem.datasets.locomo.normalize_evidence`);
  a piece that is no id is reported as malformed, an id naming no turn as dangling, and both are
  dropped. A question left with no resolvable evidence is kept, counted in
  :attr:`LoadReport.unresolved_gold`, and excluded from recall (its gold set is empty).
* Categories follow LoCoMo's numbering: 1 multi-hop, 2 temporal, 3 open-domain
  (:data:`REALTALK_CATEGORIES`); a QA item of another category is discarded and reported.

Anything that breaks the conversation (not an object, no speakers, no session, a turn without
``dia_id`` / ``speaker`` / ``clean_text``, a repeated ``dia_id``, ``qa`` not a list) raises
:class:`RealtalkFormatError` naming the file and the field.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from graphmem.datasets.locomo import QAFields, parse_session_datetime, read_qa, read_sessions
from graphmem.datasets.records import read_json
from graphmem.datasets.types import LOCOMO_CATEGORIES, Conversation, LoadReport, Question, Turn

REALTALK_CATEGORIES = {c: LOCOMO_CATEGORIES[c] for c in (1, 2, 3)}
"""The categories REALTALK uses, in LoCoMo's numbering (its scorer skips 4 and 5, which occur only in LoCoMo)."""
DATE_FORMAT = "%d.%m.%Y, %H:%M:%S"


class RealtalkFormatError(ValueError):
    """A REALTALK file that cannot be loaded; the message names the file and the field."""


def parse_turn_datetime(raw: Any) -> datetime | None:
    """Parse ``"29.12.2023, 22:42:04"``; ``None`` when unparsable."""
    return parse_session_datetime(raw, (DATE_FORMAT,))


def load_realtalk(path: str | Path) -> tuple[list[Conversation], list[Question], LoadReport]:
    """Read one REALTALK file (one conversation); returns ``[conversation]``, its questions and the report."""
    path = Path(path)
    raw = read_json(path, RealtalkFormatError, (dict, "one conversation object"))
    report = LoadReport(source=str(path))
    sample_id = path.stem
    conv = _conversation(raw, sample_id, str(path), report)
    qa = raw.get("qa")
    if not isinstance(qa, list):
        raise RealtalkFormatError(f"{path}: field 'qa' must be a list of QA items, got {qa!r:.60}")
    turn_ids = {t.dia_id for t in conv.turns}
    fields = QAFields(categories=REALTALK_CATEGORIES, adversarial=None)
    questions = [q for i, item in enumerate(qa) if (q := read_qa(item, sample_id, i, turn_ids, report, fields))]
    report.records, report.questions = 1, len(questions)
    return [conv], questions, report


def _conversation(raw: dict, sample_id: str, where: str, report: LoadReport) -> Conversation:
    names = raw.get("name")
    if not isinstance(names, dict):
        raise RealtalkFormatError(
            f"{where}: field 'name' must be an object {{speaker_1, speaker_2}}, got {names!r:.60}"
        )
    speakers = []
    for key in ("speaker_1", "speaker_2"):
        value = names.get(key)
        if not isinstance(value, str) or not value.strip():
            raise RealtalkFormatError(f"{where}: field 'name.{key}' must be a non-empty string, got {value!r:.60}")
        speakers.append(value)
    read_turn = partial(_turn, sample_id=sample_id, report=report)
    sessions = read_sessions(raw, sample_id, where, "", report, RealtalkFormatError, read_turn, (DATE_FORMAT,))
    return Conversation(sample_id=sample_id, speaker_a=speakers[0], speaker_b=speakers[1], sessions=sessions)


def _turn(t: dict, session: int, pos: int, where: str, sample_id: str, report: LoadReport) -> Turn:
    values = {}
    for name in ("dia_id", "speaker", "clean_text"):
        value = t.get(name)
        if not isinstance(value, str) or (name != "clean_text" and not value):
            kind = "string" if name == "clean_text" else "non-empty string"
            raise RealtalkFormatError(f"{where}: field {name!r} must be a {kind}, got {value!r:.60}")
        values[name] = value
    raw_date = t.get("date_time")
    date = parse_turn_datetime(raw_date)
    if date is None and raw_date is not None:
        report.unparsed_dates.append(f"{sample_id} {values['dia_id']}: {raw_date!r}")
    caption = t.get("blip_caption")
    return Turn(
        dia_id=values["dia_id"],
        speaker=values["speaker"],
        text=values["clean_text"],
        session=session,
        position=pos,
        image_caption=caption if isinstance(caption, str) and caption.strip() else None,
        date_time=date,
        raw_date_time=raw_date if isinstance(raw_date, str) else None,
    )
