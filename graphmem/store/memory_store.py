"""The live memory's durable store: one SQLite database per memory, the truth every derived structure comes from.

A memory folder holds ``memory.sqlite3`` (with SQLite's ``-wal`` and ``-shm`` files) and ``writer.lock``.
The database (the standard library's :mod:`sqlite3`, WAL journal) has five tables::

    meta(key, value)                 schema version, the graph config, the encoder's name and width, relations,
                                     and the counts kept by triggers (:meth:`SQLiteStore.version`): ``changes``,
                                     the rows written to nodes, edges and vocabulary, and ``shape``, the same
                                     but for writes of the edges' Beta counters alone (feedback)
    nodes(seq, id, text, key, time, meta, entities, embedding)
                                     one row per record; seq is the arrival number (never reused)
    edges(src, dst, relation, S, F, attr, attr_init)
                                     directed edges between node seqs with their Beta counters and features,
                                     in insertion order (rowid); their one index is the key
                                     (hi, src, dst, relation), hi = max(src, dst) a generated column
    vocabulary(word, count)          the entity extractor's proper words and how many records show each
    feedback(seq, time, entry)       every feedback, as the JSON entry a trainer reads later

Every write (:meth:`SQLiteStore.write`) is one transaction: a crash leaves the database at the last
committed write, and readers (other connections, other processes) see whole transactions only. One writer at
a time: a read-write open takes ``writer.lock`` (:class:`~graphmem.store.lockfile.FileLock`, released by the
kernel when its holder dies) and a second writer is refused with one line, or waits. Deleted content is
overwritten in the file (``PRAGMA secure_delete``) and the WAL is checkpointed and truncated after a deletion,
so a forgotten text is gone from the file bytes.

The edges an add writes join the new record to records stored before it, so all have the new record's seq as
``hi``: they go to the end of the key index as they go to the end of the table, and an add changes a few pages at
the end of each B-tree however large the memory is. An index by ``src`` or by ``dst`` would take each edge into
the page of its older end, a page anywhere in the file. Deletions name the edges by their key (the memory holds
every edge). A database of schema 1 (the key ``(src, dst, relation)`` and an index by ``dst``) is rebuilt in the
new form by the first read-write open (:func:`_upgrade`).

:class:`MemoryStore` is the interface the live memory uses (transactions, records, edges, the log); a server
database can take SQLite's place behind it (``docs/memory.md``).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from graphmem.core.errors import InputError
from graphmem.store.lockfile import FileLock, LockBusyError

SCHEMA_VERSION = 2
DB_NAME = "memory.sqlite3"
LOCK_NAME = "writer.lock"
log = logging.getLogger(__name__)
EDGE_BLOCK = 65536
"""edges read per block at open"""

_EDGE_COLUMNS = """
    src INTEGER NOT NULL, dst INTEGER NOT NULL, relation INTEGER NOT NULL,
    S REAL NOT NULL, F REAL NOT NULL, attr BLOB NOT NULL, attr_init BLOB NOT NULL,
    hi INTEGER GENERATED ALWAYS AS (max(src, dst)) VIRTUAL"""
_EDGE_KEY = "hi = ? AND src = ? AND dst = ? AND relation = ?"

COUNTS = ("changes", "shape")
"""the counts in ``meta`` kept by triggers: every row written to the derived tables, and every one but for the edges'
Beta counters alone (what a feedback writes leaves the graph's shape and features as they were)"""


def _trigger(table: str, event: str, count: str) -> str:
    """The trigger that adds one to ``count`` for each row of ``table`` an ``event`` writes (:data:`COUNTS`)."""
    skips_counters = (count, table, event) == ("shape", "edges", "UPDATE")
    what = "UPDATE OF src, dst, relation, attr, attr_init" if skips_counters else event
    name = f"{table}_{event.lower()}" + ("" if count == "changes" else f"_{count}")
    body = f"UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = '{count}';"
    return f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {what} ON {table} BEGIN {body} END;\n"


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes(
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, key TEXT NOT NULL, time REAL,
    meta TEXT NOT NULL, entities TEXT NOT NULL, embedding BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS edges({_EDGE_COLUMNS});
CREATE UNIQUE INDEX IF NOT EXISTS edges_key ON edges(hi, src, dst, relation);
CREATE TABLE IF NOT EXISTS vocabulary(word TEXT PRIMARY KEY, count INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS feedback(seq INTEGER PRIMARY KEY, time REAL NOT NULL, entry TEXT NOT NULL);
""" + "".join(
    _trigger(table, event, count)
    for count in COUNTS
    for table in ("nodes", "edges", "vocabulary")
    for event in ("INSERT", "UPDATE", "DELETE")
)


class MemoryStoreError(InputError):
    """A memory folder that cannot be used (damaged, another version, another writer); the message names it."""


@dataclass(frozen=True)
class NodeRow:
    """One stored record: ``seq`` its arrival number, ``embedding`` float32, ``entities`` its extracted entities."""

    seq: int
    id: str
    text: str
    key: str
    time: float | None
    meta: dict[str, Any]
    entities: list[str]
    embedding: np.ndarray


@dataclass(frozen=True)
class EdgeRows:
    """Directed edges as columns: node seqs, relation index, counters and ``[E, 4]`` float32 features."""

    src: np.ndarray
    dst: np.ndarray
    relation: np.ndarray
    S: np.ndarray
    F: np.ndarray
    attr: np.ndarray
    attr_init: np.ndarray

    @classmethod
    def empty(cls) -> EdgeRows:
        z = np.empty(0, dtype=np.int64)
        f = np.empty(0, dtype=np.float32)
        return cls(z, z, z, f, f, np.empty((0, 4), np.float32), np.empty((0, 4), np.float32))


class MemoryStore(ABC):
    """What the live memory needs of a database: settings, records, edges, the vocabulary and the feedback log,
    read at open and written one transaction per operation."""

    @abstractmethod
    def settings(self) -> dict[str, Any]: ...

    @abstractmethod
    def nodes(self) -> Iterator[NodeRow]: ...

    @abstractmethod
    def edges(self) -> EdgeRows: ...

    @abstractmethod
    def vocabulary(self) -> dict[str, int]: ...

    @abstractmethod
    def feedback_log(self) -> list[dict[str, Any]]: ...

    @abstractmethod
    def version(self) -> dict[str, int] | None:
        """Numbers that change whenever the records, edges or vocabulary do (``None``: not known), read in the
        same snapshot as the rows: derived state saved at one version is the state of the store at that version."""

    @abstractmethod
    def snapshot(self) -> Any:
        """A context manager in which every read sees one committed state of the store."""

    @abstractmethod
    def write(self) -> Any:
        """A context manager holding one transaction: a :class:`Transaction` committed on exit, rolled back on error."""

    @abstractmethod
    def close(self) -> None: ...


class Transaction:
    """The writes of one transaction (:meth:`SQLiteStore.write`)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.deleted = False

    def add_node(self, row: NodeRow) -> None:
        self.conn.execute(
            "INSERT INTO nodes(seq, id, text, key, time, meta, entities, embedding) VALUES (?,?,?,?,?,?,?,?)",
            (
                row.seq,
                row.id,
                row.text,
                row.key,
                row.time,
                json.dumps(row.meta, sort_keys=True),
                json.dumps(sorted(row.entities)),
                np.ascontiguousarray(row.embedding, dtype="<f4").tobytes(),
            ),
        )

    def add_edges(self, edges: EdgeRows) -> None:
        self.conn.executemany(
            "INSERT INTO edges(src, dst, relation, S, F, attr, attr_init) VALUES (?,?,?,?,?,?,?)",
            zip(
                edges.src.tolist(),
                edges.dst.tolist(),
                edges.relation.tolist(),
                edges.S.tolist(),
                edges.F.tolist(),
                (a.astype("<f4").tobytes() for a in edges.attr),
                (a.astype("<f4").tobytes() for a in edges.attr_init),
            ),
        )

    def count_words(self, words: Iterable[str], delta: int) -> None:
        """Add ``delta`` to each word's count in the vocabulary; a word at zero is deleted."""
        for word in words:
            self.conn.execute(
                "INSERT INTO vocabulary(word, count) VALUES (?, ?) ON CONFLICT(word) DO UPDATE SET count = count + ?",
                (word, delta, delta),
            )
        if delta < 0:
            self.conn.execute("DELETE FROM vocabulary WHERE count <= 0")

    def update_node(self, seq: int, text: str, key: str, entities: Iterable[str], embedding: np.ndarray) -> None:
        self.conn.execute(
            "UPDATE nodes SET text = ?, key = ?, entities = ?, embedding = ? WHERE seq = ?",
            (text, key, json.dumps(sorted(entities)), np.ascontiguousarray(embedding, dtype="<f4").tobytes(), seq),
        )
        self.deleted = True  # the old text is overwritten: checkpoint the WAL so no copy of it stays

    def set_features(self, src: int, dst: int, relation: int, attr: np.ndarray, attr_init: np.ndarray) -> None:
        self.conn.execute(
            f"UPDATE edges SET attr = ?, attr_init = ? WHERE {_EDGE_KEY}",
            (attr.astype("<f4").tobytes(), attr_init.astype("<f4").tobytes(), *_key(src, dst, relation)),
        )

    def delete_edges(self, src: Sequence[int], dst: Sequence[int], relation: Sequence[int]) -> None:
        """Delete the edges ``src[i] -> dst[i]`` of ``relation[i]``, found by their key."""
        self.conn.executemany(f"DELETE FROM edges WHERE {_EDGE_KEY}", map(_key, src, dst, relation))
        self.deleted = True

    def delete_nodes(self, seqs: Sequence[int]) -> None:
        """Delete records; their edges go first, with :meth:`delete_edges` (an edge left naming one is a problem
        :meth:`SQLiteStore.integrity` reports)."""
        self.conn.executemany("DELETE FROM nodes WHERE seq = ?", [(s,) for s in seqs])
        self.deleted = True

    def set_counts(self, src: int, dst: int, relation: int, S: float, F: float) -> None:
        """The Beta counters of one stored edge after an update (GraphMemory eq. 21), as the graph holds them."""
        self.conn.execute(f"UPDATE edges SET S = ?, F = ? WHERE {_EDGE_KEY}", (S, F, *_key(src, dst, relation)))

    def log_feedback(self, entry: dict[str, Any]) -> int:
        cur = self.conn.execute(
            "INSERT INTO feedback(time, entry) VALUES (?, ?)", (time.time(), json.dumps(entry, sort_keys=True))
        )
        return int(cur.lastrowid)

    def feedback_mentioning(self, needles: Sequence[str]) -> list[tuple[int, dict[str, Any]]]:
        """``(seq, entry)`` of the logged feedback whose JSON contains any of ``needles``."""
        out, seen = [], set()
        for needle in needles:
            pattern = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            for seq, entry in self.conn.execute(
                "SELECT seq, entry FROM feedback WHERE entry LIKE ? ESCAPE '\\'", (pattern,)
            ):
                if seq not in seen:
                    seen.add(seq)
                    out.append((seq, json.loads(entry)))
        return out

    def rewrite_feedback(self, seq: int, entry: dict[str, Any]) -> None:
        self.conn.execute("UPDATE feedback SET entry = ? WHERE seq = ?", (json.dumps(entry, sort_keys=True), seq))
        self.deleted = True


class SQLiteStore(MemoryStore):
    """:class:`MemoryStore` in one SQLite file (module docstring).

    Args:
        folder: the memory's folder (created with ``create``).
        settings: what the memory is built with, stored at creation and compared at every open (JSON values).
        writer: take the writer lock (read-write); ``False``: a reader.
        wait: a writer waits for the lock instead of being refused (default: refused).
        synchronous: SQLite's ``synchronous`` in WAL mode: ``normal`` (a commit survives a crash of the
            process) or ``full`` (also of the machine) (default: ``normal``).
    """

    def __init__(
        self,
        folder: str | Path,
        settings: dict[str, Any] | None = None,
        *,
        create: bool = True,
        writer: bool = True,
        wait: bool = False,
        synchronous: str = "normal",
    ) -> None:
        self.folder = Path(folder)
        db = self.folder / DB_NAME
        if not db.exists() and not (create and writer):
            raise MemoryStoreError(f"{self.folder}: no memory here ({DB_NAME} missing); open it with create=True")
        if synchronous not in ("normal", "full"):
            raise MemoryStoreError(f"synchronous={synchronous!r} is not one of ('normal', 'full')")
        self.lock = None
        if writer:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.lock = _take_writer(self.folder, wait)
        try:
            self.conn = self._connect(db, writer, synchronous)
            self._settings = self._check_settings(settings)
        except BaseException:
            self._release()
            raise

    def _connect(self, db: Path, writer: bool, synchronous: str) -> sqlite3.Connection:
        uri = f"file:{db}" + ("" if writer else "?mode=ro")
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.execute("PRAGMA busy_timeout = 30000")
            if writer:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
                conn.execute("PRAGMA secure_delete = ON")
                _upgrade(conn, db)
                if _stored_version(conn) in (None, SCHEMA_VERSION):  # another version: the settings check refuses it
                    conn.executescript(_SCHEMA)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as err:
            raise MemoryStoreError(f"{db}: not a usable memory database ({err})") from None
        return conn

    def _check_settings(self, settings: dict[str, Any] | None) -> dict[str, Any]:
        stored = {k: json.loads(v) for k, v in self.conn.execute("SELECT key, value FROM meta") if k not in COUNTS}
        if not stored:
            if settings is None or self.lock is None:
                raise MemoryStoreError(f"{self.folder}: the memory database holds no settings")
            stored = {"schema_version": SCHEMA_VERSION, **settings}
            with self.write() as tx:
                tx.conn.executemany(
                    "INSERT INTO meta(key, value) VALUES (?, ?)", [(k, json.dumps(v)) for k, v in stored.items()]
                )
        if self.lock is not None and stored.get("schema_version") == SCHEMA_VERSION:
            # a count starts with its triggers: a memory made before them starts it at 0 now
            self.conn.executemany("INSERT OR IGNORE INTO meta(key, value) VALUES (?, '0')", [(c,) for c in COUNTS])
        if stored.get("schema_version") != SCHEMA_VERSION:
            upgrade = " (a read-write open upgrades a memory of schema 1)" if stored.get("schema_version") == 1 else ""
            raise MemoryStoreError(
                f"{self.folder}: schema_version {stored.get('schema_version')!r} is not {SCHEMA_VERSION}{upgrade}"
            )
        return stored

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)

    def nodes(self) -> Iterator[NodeRow]:
        rows = self.conn.execute("SELECT seq, id, text, key, time, meta, entities, embedding FROM nodes ORDER BY seq")
        for seq, nid, text, key, t, meta, entities, emb in rows:
            yield NodeRow(seq, nid, text, key, t, json.loads(meta), json.loads(entities), np.frombuffer(emb, "<f4"))

    def edges(self) -> EdgeRows:
        """Every edge in insertion order, read a block of rows at a time: the numbers as one array per block, the
        features' bytes joined per block (in one snapshot when called inside :meth:`snapshot`)."""
        numbers, attr, init = [], [], []
        cur = self.conn.execute("SELECT src, dst, relation, S, F FROM edges ORDER BY rowid")
        while rows := cur.fetchmany(EDGE_BLOCK):
            numbers.append(np.array(rows, dtype=np.float64).reshape(-1, 5))  # seqs are exact below 2**53
        cur = self.conn.execute("SELECT attr, attr_init FROM edges ORDER BY rowid")
        while rows := cur.fetchmany(EDGE_BLOCK):
            attr.append(np.frombuffer(b"".join([r[0] for r in rows]), "<f4").reshape(-1, 4))
            init.append(np.frombuffer(b"".join([r[1] for r in rows]), "<f4").reshape(-1, 4))
        if not numbers:
            return EdgeRows.empty()
        num = np.concatenate(numbers)
        seq = num[:, :3].astype(np.int64)
        return EdgeRows(
            seq[:, 0].copy(),
            seq[:, 1].copy(),
            seq[:, 2].copy(),
            num[:, 3].astype(np.float32),
            num[:, 4].astype(np.float32),
            np.concatenate(attr),
            np.concatenate(init),
        )

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads that see one committed state of the store (a read transaction), whatever a writer commits meanwhile."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def vocabulary(self) -> dict[str, int]:
        return dict(self.conn.execute("SELECT word, count FROM vocabulary"))

    def feedback_log(self) -> list[dict[str, Any]]:
        return [
            {"seq": seq, "time": t, **json.loads(entry)}
            for seq, t, entry in self.conn.execute("SELECT seq, time, entry FROM feedback ORDER BY seq")
        ]

    def version(self) -> dict[str, int] | None:
        """What names the state of the derived tables: the rows written to ``nodes``, ``edges`` and ``vocabulary``
        since the count began (``changes``, counted by triggers in the database, so a write by any client counts),
        the same without the writes of Beta counters alone (``shape``, where its count has begun), the records, the
        next seq and the last edge rowid; ``None`` for a database without the count (one no writer of this version
        has opened)."""
        counts = dict(self.conn.execute(f"SELECT key, value FROM meta WHERE key IN {COUNTS}"))
        if "changes" not in counts:
            return None
        nodes, next_seq = self.conn.execute("SELECT count(*), coalesce(max(seq), -1) + 1 FROM nodes").fetchone()
        edges = self.conn.execute("SELECT coalesce(max(rowid), 0) FROM edges").fetchone()[0]
        out = {k: int(counts[k]) for k in COUNTS if k in counts}
        return out | {"nodes": int(nodes), "next_seq": int(next_seq), "last_edge": int(edges)}

    def next_seq(self) -> int:
        return int(self.conn.execute("SELECT coalesce(max(seq), -1) + 1 FROM nodes").fetchone()[0])

    @contextmanager
    def write(self) -> Iterator[Transaction]:
        if self.lock is None:
            raise MemoryStoreError(f"memory {self.folder} is open for reading only")
        tx = Transaction(self.conn)
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield tx
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        if tx.deleted:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def integrity(self) -> list[str]:
        """Problems SQLite's own check and the edges' ends find (an empty list: sound)."""
        problems = [r[0] for r in self.conn.execute("PRAGMA integrity_check") if r[0] != "ok"]
        dangling = self.conn.execute(
            "SELECT count(*) FROM edges WHERE src NOT IN (SELECT seq FROM nodes) OR dst NOT IN (SELECT seq FROM nodes)"
        ).fetchone()[0]
        if dangling:
            problems.append(f"{dangling} edges name a node that is not stored")
        return problems

    def close(self) -> None:
        try:
            if self.lock is not None:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self.lock is not None:
            _give_writer(self.folder, self.lock)
            self.lock = None


def _key(src: int, dst: int, relation: int) -> tuple[int, int, int, int]:
    """The parameters of ``_EDGE_KEY`` for the edge ``src -> dst`` of ``relation``."""
    src, dst = int(src), int(dst)
    return max(src, dst), src, dst, int(relation)


def _stored_version(conn: sqlite3.Connection) -> Any:
    """The schema version the database's meta table holds (``None`` without one)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() if "meta" in tables else None
    return None if row is None else json.loads(row[0])


def _upgrade(conn: sqlite3.Connection, db: Path) -> None:
    """Rebuild the edges of a schema-1 database in the schema-2 form (module docstring), in one transaction: the
    same rows with the same rowids, so that they are read in the same order; then the schema version is 2 (and
    schema 1's count of write transactions, which nothing reads, is dropped)."""
    columns = [r[1] for r in conn.execute("PRAGMA table_xinfo(edges)")]
    if not columns or "hi" in columns or _stored_version(conn) != 1:
        return  # new, already upgraded, or of a version this code does not know
    log.info("upgrading %s to schema 2: rebuilding its edges", db)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"CREATE TABLE edges_upgraded({_EDGE_COLUMNS})")
        conn.execute(
            "INSERT INTO edges_upgraded(rowid, src, dst, relation, S, F, attr, attr_init) "
            "SELECT rowid, src, dst, relation, S, F, attr, attr_init FROM edges ORDER BY rowid"
        )
        conn.execute("DROP TABLE edges")
        conn.execute("ALTER TABLE edges_upgraded RENAME TO edges")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version' AND value = '1'")
        conn.execute("DELETE FROM meta WHERE key = 'writes'")  # schema 1's count of write transactions, unread
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


_HELD: set[str] = set()  # memory folders this process holds a writer of (the file lock is per process)
_HELD_CHANGED = threading.Condition()


def _take_writer(folder: Path, wait: bool) -> FileLock:
    """The writer lock of ``folder``: one writer per memory across processes (the lock file) and within this one."""
    key = os.path.realpath(folder)
    with _HELD_CHANGED:
        while key in _HELD:
            if not wait:
                raise MemoryStoreError(f"memory {folder} has a writer already (in this process)")
            _HELD_CHANGED.wait()
        _HELD.add(key)
    try:
        return FileLock(folder / LOCK_NAME).acquire(blocking=wait)
    except LockBusyError as err:
        _give_writer(folder, None)
        raise MemoryStoreError(f"memory {folder} has a writer already: {err}") from None


def _give_writer(folder: Path, lock: FileLock | None) -> None:
    if lock is not None:
        lock.release()
    with _HELD_CHANGED:
        _HELD.discard(os.path.realpath(folder))
        _HELD_CHANGED.notify_all()
