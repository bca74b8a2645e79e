"""The live memory: the one object an agent touches, to write turns as they happen, read before it answers,
and improve the graph from what happened afterwards.

    from graphmem import Memory

    with Memory.open("outputs/memories/alice", encoder="hashing") as mem:
        mem.add("I adopted a greyhound called Pixel last May.", speaker="Alice", session=1)
        r = mem.retrieve("What is the name of Alice's dog?")
        print(r.ranked_ids(), r.texts())
        mem.feedback(r, helpful=r.ranked_ids()[:1])

One memory is one folder: a SQLite database (:mod:`graphmem.store.memory_store`) is the truth, and the graph's
tensors, the vector index, BM25 and the builder's state are derived from it at open (loaded from what the last
writer saved at close when the database has not changed since, :mod:`graphmem.store.memory_state`). Each
:meth:`Memory.add`, :meth:`Memory.add_many`, :meth:`Memory.forget`, :meth:`Memory.revise` and
:meth:`Memory.feedback` is one transaction. A record's node and edges follow the batch builder's rules in their
arrival-order form (:mod:`graphmem.builders.incremental`), so a memory grown record by record equals the graph
the batch builder gives with ``graph.incremental=true``. Retrieval runs any registered policy over the graph
(the trained walk when a checkpoint is given, else ``hybrid``); feedback applies GraphMemory's Beta update
(eq. 21) to the transitions the retrieval used and is logged for later training (:mod:`graphmem.feedback`).
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
import hashlib
import json
import logging
import math
import threading
import uuid
import weakref
from collections import Counter, OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from graphmem.builders.config import GraphConfig
from graphmem.builders.entities import CueEntityExtractor, EntityExtractor, extract_one, make_entity_extractor
from graphmem.builders.incremental import IncrementalBuilder, Record
from graphmem.core import Budget, Query
from graphmem.core.closing import Closing
from graphmem.core.csr import ROOM, held_rows
from graphmem.core.errors import InputError
from graphmem.core.graph import RELATIONS, MemoryGraph
from graphmem.core.tokens import node_tokens, seed_node_tokens
from graphmem.datasets.types import LoadReport, Question
from graphmem.feedback import check_labels, label_transitions
from graphmem.index.embed import Encoder, encoder_fingerprint, make_encoder
from graphmem.index.lexical import BM25Index
from graphmem.index.vector_index import IndexSpec, index_for, nearest_of
from graphmem.policies import make_policy
from graphmem.policies.base import TraversalPolicy
from graphmem.policies.router import SAVED_STATIC, STATIC_NAMES, static_to_save
from graphmem.store.graphset import GraphSet
from graphmem.store.memory_indexes import forget_indexes, load_indexes, save_indexes
from graphmem.store.memory_state import (
    MemoryState,
    load_state,
    pairs_path,
    pairs_version,
    read_pairs,
    save_pairs,
    save_state,
    state_path,
)
from graphmem.store.memory_store import EdgeRows, MemoryStoreError, NodeRow, SQLiteStore
from models.edge_encoder import PairTable, SavedPairTable, saved_pair_table, seed_pair_table

__all__ = ["DuplicateIdError", "Memory", "MemoryError", "MemoryRetrieval", "UnknownIdError", "check_policy"]

log = logging.getLogger(__name__)
ANN_MIN_NODES = 4096
"""memories of at least this many records find a new record's semantic neighbours in an HNSW index (exact below)"""


class MemoryError(InputError, ValueError):  # noqa: A001  (the memory's own error, not the builtin's)
    """Input a memory cannot take (an empty or oversized text, an unknown id, another encoder); one line."""


class UnknownIdError(MemoryError):
    """An id the memory does not hold: a record's, or a retrieval's that :meth:`Memory.feedback` no longer keeps."""


class DuplicateIdError(MemoryError):
    """A new record's id that the memory holds already (or that a batch gives twice)."""


@dataclass
class MemoryRetrieval:
    """What :meth:`Memory.retrieve` returns: the ranked records with their texts and the trace.

    ``ranked`` is the policy's list, most relevant first (node ids); ``loaded`` the load order; ``traversed``
    the edges the walk took, as ``(source id, target id, relation)``; ``edges_considered`` how many candidate
    edges it scored; ``id`` names it for :meth:`Memory.feedback`.
    """

    id: str
    query: str
    policy: str
    ranked: list[str]
    texts_by_id: dict[str, str]
    scores: list[float] | None
    loaded: list[str]
    entries: list[str]
    traversed: list[tuple[str, str, str]]
    edges_considered: int
    loaded_tokens: int
    max_depth: int
    wall_time_s: float

    def ranked_ids(self) -> list[str]:
        return list(self.ranked)

    def texts(self) -> list[str]:
        """The loaded texts in ranked order."""
        return [self.texts_by_id[i] for i in self.ranked]

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["texts"] = self.texts()
        out["traversed"] = [list(e) for e in self.traversed]
        del out["texts_by_id"]
        return out


@dataclass
class _Buffers:
    """Capacity-doubling tensors behind the graph's fields: appending costs O(1) amortised, and the graph's
    fields are views of their first rows. A buffer grown by a bulk append (the edges read at open) keeps an
    eighth of spare rows beyond it, so that the writes after an open do not copy it at once (spare rows are
    not resident until written)."""

    emb: Tensor
    time: Tensor
    edge_index: Tensor = field(default_factory=lambda: torch.empty(2, 64, dtype=torch.long))
    edge_type: Tensor = field(default_factory=lambda: torch.empty(64, dtype=torch.long))
    S: Tensor = field(default_factory=lambda: torch.empty(64))
    F: Tensor = field(default_factory=lambda: torch.empty(64))
    attr: Tensor = field(default_factory=lambda: torch.empty(64, 4))
    attr_init: Tensor = field(default_factory=lambda: torch.empty(64, 4))

    @staticmethod
    def grown(buf: Tensor, need: int, dim: int = 0) -> Tensor:
        size = buf.shape[dim]
        if need <= size:
            return buf
        shape = list(buf.shape)
        shape[dim] = max(need + need // 8, 2 * size, 64)
        out = torch.empty(shape, dtype=buf.dtype)
        out.narrow(dim, 0, size).copy_(buf)
        return out


PAUSE_COLLECTOR_RECORDS = 50_000
"""records from which reading or saving a memory pauses Python's cyclic collector (:func:`_collector_paused`)"""


@contextmanager
def _collector_paused(pause: bool, collect: bool = False) -> Iterator[None]:
    """Python's cyclic collector paused (when ``pause``): reading or saving a large memory makes millions of small
    objects (its records' texts, metadata and entity sets) and no cycle, and the full collections their number
    would set off, each a pass over every object, find nothing. With ``collect``, what is cyclic garbage already is
    freed first (a memory let go of is not: it is freed at once, :func:`_weak_method`): a full collection costs a
    fraction of a second, which only a large memory's open repays."""
    if not pause or not gc.isenabled():
        yield
        return
    if collect:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _weak_method(method):
    """``method`` called through a weak reference to its object: a part the object holds can call back into it
    without the two making a cycle, so a memory let go of is freed at once rather than by the cyclic collector
    (which :func:`_collector_paused` may be holding off)."""
    ref = weakref.WeakMethod(method)
    return lambda *args: ref()(*args)


def _rows_view(held: Tensor | None, buf: Tensor, n: int) -> Tensor:
    """``buf[:n]``: ``held`` itself when it is that view already."""
    if held is not None and held.shape == (n, *buf.shape[1:]) and held.data_ptr() == buf.data_ptr():
        return held
    return buf[:n]


class Memory(Closing):
    """One live memory (module docstring). Open it with :meth:`open`; every public method is thread-safe.
    ``state_loaded`` says whether its open loaded the state the last writer saved (else it read the rows)."""

    ann_min_nodes = ANN_MIN_NODES
    neighbour_index = IndexSpec()
    """the HNSW index of the semantic-neighbour search: the graph's dense index of this spec, which the ``ann``
    entry selector of the same spec (its default) searches too, so that one index serves both"""

    def __init__(
        self,
        store: SQLiteStore,
        cfg: GraphConfig,
        encoder: Encoder,
        policy: TraversalPolicy,
        budget: Budget,
        extractor: EntityExtractor | None = None,
    ) -> None:
        self.store, self.cfg, self.encoder, self.policy, self.budget = store, cfg, encoder, policy, budget
        self.extractor = extractor if extractor is not None else _registered_extractor(cfg.entity_extractor)
        self._lock = threading.RLock()
        self._recent: OrderedDict[str, MemoryRetrieval] = OrderedDict()
        self._policies: dict[str, TraversalPolicy] = {policy.name: policy}
        self._load()

    # ------------------------------------------------------------------ opening and closing
    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        encoder: str | Encoder = "minilm",
        policy: str | TraversalPolicy | Mapping[str, Any] | None = None,
        checkpoint: str | Path | None = None,
        create: bool = True,
        graph: Mapping[str, Any] | None = None,
        budget: Budget | None = None,
        readonly: bool = False,
        wait: bool = False,
        synchronous: str = "normal",
        extractor: EntityExtractor | None = None,
    ) -> Memory:
        """Open the memory at ``path`` (a folder), creating it with ``create``.

        Args:
            path: the memory's folder (one memory, one namespace).
            encoder: ``minilm`` or ``hashing`` (the names ``configs/graph`` takes), or an encoder object; a
                memory is always reopened with the encoder it was created with.
            policy: a registered policy name (configured as ``configs/policy/<name>.yaml``), a policy config
                (:func:`graphmem.config.cli.policy_config`: ``_target_`` and its arguments) or a policy object
                (default: ``router`` with ``checkpoint``, else ``hybrid``).
            checkpoint: a trained walk (``best.pt`` of ``scripts/train.py``), refused when trained on another
                encoder's embeddings.
            graph: graph settings as in ``configs/graph/default.yaml`` (stored at creation; a reopen with other
                values is refused).
            budget: the retrieval budget (default: GraphMemory's, :class:`~graphmem.core.Budget`).
            readonly: open as a reader (no writes; any number of readers beside one writer).
            wait: a second writer waits for the first to close instead of being refused.
            synchronous: ``normal`` (a write survives a crash of the process) or ``full`` (also of the machine).
            extractor: an entity extractor object (e.g. a trained writer, :class:`rl.writer.extractor.
                WriterExtractor`) instead of the registered ``graph.entity_extractor``; its name is stored, and a
                reopen with another one is refused.
        """
        enc = make_encoder(encoder) if isinstance(encoder, str) else encoder
        graph = {**dict(graph or {}), **({"entity_extractor": extractor.name} if extractor is not None else {})}
        cfg = GraphConfig.from_mapping({**graph, "encoder": enc_name(encoder), "incremental": True})
        settings = {
            "graph": {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("cache_dir",)},
            "encoder": {"name": enc.name, "dim": int(enc.dim), "fingerprint": encoder_fingerprint(enc)},
            "relations": list(RELATIONS),
        }
        store = SQLiteStore(path, settings, create=create, writer=not readonly, wait=wait, synchronous=synchronous)
        try:
            cfg = _check_settings(store, settings, graph)
            made = _make_policy(policy, checkpoint, store.settings()["encoder"])
            return cls(store, cfg, enc, made, budget or Budget(), extractor=extractor)
        except BaseException:
            store.close()
            raise

    def close(self) -> None:
        """Close the store; a writer first saves its indexes and derived state for the next open
        (:mod:`graphmem.store.memory_indexes`, :mod:`graphmem.store.memory_state`)."""
        with self._lock:
            try:
                if self.store.lock is not None and hasattr(self, "graph"):
                    save_indexes(self.store.folder, self.graph)
                    version = self.store.version()
                    if version is not None:
                        self._save_state(version)
                        self._save_pairs(pairs_version(version))
            finally:
                self.store.close()

    def __len__(self) -> int:
        return self.graph.num_nodes

    def __contains__(self, id: object) -> bool:  # noqa: A002
        """Whether ``id`` is the id of one of the memory's records."""
        with self._lock:
            return id in self._row

    # ------------------------------------------------------------------ derived state
    def _load(self) -> None:
        """Rebuild every derived structure, in one snapshot of the store: from the state saved at close when the
        store is at the version it was saved at (:mod:`graphmem.store.memory_state`), else from the store's rows,
        read one at a time into the buffers (no copy of the whole store is held at once); then the graph's saved
        retrieval indexes."""
        with self.store.snapshot():
            dim, version = int(self.store.settings()["encoder"]["dim"]), self.store.version()
            large = version is not None and version["nodes"] >= PAUSE_COLLECTOR_RECORDS
            with _collector_paused(large, collect=True):
                tokens = self._read(dim, version)
        g = self.graph
        g.indexes.clear()
        g.grown.clear()
        g.node_log.clear()
        g.invalidate()
        if tokens is not None:
            seed_node_tokens(g, tokens)
        load_indexes(self.store.folder, g)  # the retrieval indexes the last writer saved, when made for this graph
        shape = pairs_version(version)
        self._pairs_version = shape if self._seed_pairs(shape) else None

    def _read(self, dim: int, version: dict[str, int] | None) -> np.ndarray | None:
        """The derived state from the state saved at ``version``, else from the rows; the saved state's arrays,
        copied into the buffers, are let go on return, before the indexes load. Returns the records' saved token
        counts (``None``: read from the rows, they are counted when first needed)."""
        state = load_state(self.store.folder, version, dim)
        self.state_loaded = state is not None
        self._read_state(state, dim) if self.state_loaded else self._read_store(dim)
        self._state_version = version if self.state_loaded else None
        return None if state is None else state.tokens

    def _read_store(self, dim: int) -> None:
        self.buffers = _Buffers(emb=torch.empty(64, dim), time=torch.empty(64, dtype=torch.float64))
        ids, texts, keys, metadata, seqs, entities = [], [], [], [], [], []
        for n, r in enumerate(self.store.nodes()):
            self.buffers.emb = _Buffers.grown(self.buffers.emb, n + 1)
            self.buffers.time = _Buffers.grown(self.buffers.time, n + 1)
            self.buffers.emb.numpy()[n] = r.embedding
            self.buffers.time[n] = math.nan if r.time is None else r.time
            for column, value in zip(
                (ids, texts, keys, metadata, seqs, entities), (r.id, r.text, r.key, r.meta, r.seq, set(r.entities))
            ):
                column.append(value)
        self._derive(dim, ids, texts, keys, metadata, seqs)
        edges = self.store.edges()
        self._append_edges(
            torch.from_numpy(self._rows_of_seqs(edges.src)),
            torch.from_numpy(self._rows_of_seqs(edges.dst)),
            torch.from_numpy(edges.relation),
            torch.from_numpy(edges.attr),
            torch.from_numpy(edges.S),
            torch.from_numpy(edges.F),
            torch.from_numpy(edges.attr_init),
        )
        self._replay(entities)

    def _read_state(self, s: MemoryState, dim: int) -> None:
        """:meth:`_read_store` from a saved state: its arrays copied into buffers with spare rows (:meth:`_Buffers.
        grown`)."""
        n = len(s.ids)
        emb, time = torch.empty(0, dim), torch.empty(0, dtype=torch.float64)
        self.buffers = _Buffers(emb=_Buffers.grown(emb, n), time=_Buffers.grown(time, n))
        self.buffers.emb.numpy()[:n], self.buffers.time.numpy()[:n] = s.emb, s.time
        self._derive(dim, s.ids, s.texts, s.keys, s.metadata, s.seq.tolist())
        edges = [torch.from_numpy(a) for a in (*s.edge_index, s.edge_type, s.attr, s.S, s.F, s.attr_init)]
        self._append_edges(*edges)
        self._replay([set(e) for e in s.entities])

    def _derive(self, dim: int, ids: list, texts: list, keys: list, metadata: list, seqs: list) -> None:
        """The graph of the records read at open (no edges yet), and the maps from ids and seqs to rows."""
        self.graph = MemoryGraph.empty(
            dim,
            info={
                "dataset": "memory",
                "name": self.store.folder.name,
                "features": self.cfg.features,
                "rules": "incremental",
            },
        )
        g = self.graph
        g.node_ids[:], g.texts[:], g.keys[:], g.metadata[:] = ids, texts, keys, metadata
        self._seq = seqs
        self._row = {nid: i for i, nid in enumerate(ids)}
        self._next_seq = self.store.next_seq() if self.store.lock is not None else (max(self._seq, default=-1) + 1)
        self._n_edges = 0

    def _replay(self, entities: list[set[str]]) -> None:
        """The graph's views of the buffers, the vocabulary and the builder's state, once the edges are in."""
        self._views(len(self._seq))
        self.vocabulary = Counter(self.store.vocabulary())
        self.builder = IncrementalBuilder(self.cfg, self.extractor, _weak_method(self._neighbours))
        self.builder.replay(self.graph, entities, set(self.vocabulary))

    def _saved_state(self) -> MemoryState:
        """The derived state as :func:`~graphmem.store.memory_state.save_state` keeps it."""
        g = self.graph
        return MemoryState(
            np.asarray(self._seq, dtype=np.int64),
            g.embeddings.numpy(),
            g.timestamps.numpy(),
            g.edge_index.numpy(),
            g.edge_type.numpy(),
            g.S.numpy(),
            g.F.numpy(),
            g.edge_attr.numpy(),
            g.edge_attr_init.numpy(),
            node_tokens(g).numpy(),
            list(g.node_ids),
            list(g.texts),
            list(g.keys),
            list(g.metadata),
            [sorted(e) for e in self.builder.node_entities],
        )

    def _save_state(self, version: dict[str, int]) -> None:
        """Save the derived state for the next open when the store (at ``version`` now) has changed since the state
        this memory opened or last saved (a failed save is logged: the next open reads the store)."""
        if version == self._state_version and state_path(self.store.folder).is_file():
            return
        try:
            with _collector_paused(len(self) >= PAUSE_COLLECTOR_RECORDS):
                save_state(self.store.folder, self._saved_state(), version)
        except OSError as err:
            log.warning("memory %s: state not saved (%s); the next open reads the store", self.store.folder, err)
            return
        self._state_version = version

    def _seed_pairs(self, version: dict[str, int] | None) -> bool:
        """Take the walk's per-node codes saved at ``version`` now, and its pair table when the walk first needs it
        (:func:`models.edge_encoder.seed_pair_table`; ``version``: :func:`~graphmem.store.memory_state.pairs_version`);
        whether there were any."""
        small, self._pairs_static = SavedPairTable.SMALL, False
        got = read_pairs(self.store.folder, version, small)
        if got is None:
            return False
        codes, arrays, static = got
        folder, fields = self.store.folder, tuple(PairTable.__dataclass_fields__)

        def table() -> dict[str, np.ndarray] | None:  # read when the walk first needs it (the file checked again)
            got = read_pairs(folder, version, fields, optional=PairTable.OPTIONAL, room=ROOM)
            return None if got is None else got[1]

        try:
            seed_pair_table(self.graph, SavedPairTable(None, codes, *(arrays[k] for k in small)), table)
        except ValueError as err:
            log.warning("memory %s: saved pair table not used (%s)", folder, err)
            return False
        if isinstance(static, dict) and isinstance(static.get("digest"), str):
            names = tuple(n for n in STATIC_NAMES if n in static.get("names", ()))

            def tensors() -> dict[str, Tensor | None] | None:  # read when the walk of that digest first needs them
                got = read_pairs(folder, version, tuple(f"static_{n}" for n in names), room=ROOM)
                if got is None:
                    return None
                held = got[1]
                return {n: held_rows(held[f"static_{n}"]) if n in names else None for n in STATIC_NAMES}

            self.graph.grown[SAVED_STATIC] = (static["digest"], tensors)
            self._pairs_static = True
        return True

    def _save_pairs(self, version: dict[str, int]) -> None:
        """Save the walk's pair table for the next open when the file does not hold it already (at ``version``, with
        the walk's static tensors when a walk holds them) and one is kept for the memory as it is now; else remove
        the file of another version (a failed save is logged)."""
        path = pairs_path(self.store.folder)
        current = version == self._pairs_version and path.is_file()
        if current and self._pairs_static:
            return
        saved = saved_pair_table(self.graph)  # the kept table, grown to the adds since it
        static = static_to_save(self.graph) if saved is not None else None  # its walk's tensors, when held
        if current and static is None:
            return
        if saved is None:
            path.unlink(missing_ok=True)
            return
        arrays = {k: v.numpy() for k in PairTable.__dataclass_fields__ if (v := getattr(saved.table, k)) is not None}
        arrays |= {k: getattr(saved, k) for k in SavedPairTable.SMALL}
        if static is not None:
            arrays |= {f"static_{k}": t.numpy() for k, t in static[1].items()}
            static = {"digest": static[0], "names": sorted(static[1])}
        try:
            save_pairs(self.store.folder, arrays, saved.codes, version, static)
        except OSError as err:
            log.warning("memory %s: pair table not saved (%s)", self.store.folder, err)
            return
        self._pairs_version, self._pairs_static = version, static is not None

    def _rows_of_seqs(self, seqs: np.ndarray) -> np.ndarray:
        """The rows of stored records' ``seqs`` (rows are in ascending seq order)."""
        order = np.asarray(self._seq, dtype=np.int64)
        rows = np.searchsorted(order, seqs).clip(max=max(len(order) - 1, 0))
        if seqs.size and (not order.size or not np.array_equal(order[rows], seqs)):
            raise MemoryStoreError(f"memory {self.store.folder}: an edge names a record that is not stored")
        return rows

    def _views(self, n: int) -> None:
        """Point the graph's fields at the first ``n`` rows and the edges of the buffers. A node field already
        viewing those rows is kept (the vector index takes a new embedding tensor for a change it must find in
        the log, :meth:`graphmem.index.vector_index.VectorIndex.sync`)."""
        b, g, e = self.buffers, self.graph, self._n_edges
        g.embeddings, g.timestamps = _rows_view(g.embeddings, b.emb, n), _rows_view(g.timestamps, b.time, n)
        g.edge_index, g.edge_type = b.edge_index[:, :e], b.edge_type[:e]
        g.S, g.F, g.edge_attr, g.edge_attr_init = b.S[:e], b.F[:e], b.attr[:e], b.attr_init[:e]

    def _append_edges(self, src, dst, rel, attr, S=None, F=None, attr_init=None) -> None:
        b, k, e = self.buffers, int(src.numel()), self._n_edges
        if k == 0:
            return
        b.edge_index = _Buffers.grown(b.edge_index, e + k, dim=1)
        for name in ("edge_type", "S", "F", "attr", "attr_init"):
            setattr(b, name, _Buffers.grown(getattr(b, name), e + k))
        b.edge_index[0, e : e + k], b.edge_index[1, e : e + k] = src, dst
        b.edge_type[e : e + k] = rel
        b.S[e : e + k] = 0.0 if S is None else S
        b.F[e : e + k] = 0.0 if F is None else F
        b.attr[e : e + k] = attr
        b.attr_init[e : e + k] = attr if attr_init is None else attr_init
        self._n_edges = e + k

    def _neighbours(self, x: Tensor, k: int, n: int) -> tuple[list[int], list[float]]:
        """Semantic neighbours of ``x`` among the first ``n`` rows: exact cosine below :attr:`ann_min_nodes`
        rows, else the HNSW index's candidates; most similar first, equal cosines to the lower row."""
        if n < self.ann_min_nodes:
            emb = self.graph.embeddings[:n]
            rough = emb @ x  # candidates in float32; the ranking from float64 rounded to float32, as the batch's
            near = (rough >= torch.topk(rough, min(k, n)).values[-1] - 1e-5).nonzero().flatten()
            return nearest_of(emb, near, x, k)
        return index_for(self.graph, self.neighbour_index).nearest(self.graph, x, k, n)

    # ------------------------------------------------------------------ writes
    def add(
        self,
        text: str,
        *,
        speaker: str | None = None,
        time: float | None = None,
        session: str | int | None = None,
        id: str | None = None,  # noqa: A002  (the record's id, as the API names it)
        meta: Mapping[str, Any] | None = None,
        embedding: Tensor | None = None,
        key: str | None = None,
    ) -> str:
        """Add one turn or passage; returns its id (a new UUID when none is given). One transaction.

        ``embedding``: the node text's embedding by the memory's encoder, when the caller has it already."""
        record = dict(text=text, speaker=speaker, time=time, session=session, id=id, meta=meta, key=key)
        return self.add_many([record], None if embedding is None else torch.as_tensor(embedding)[None, :])[0]

    def add_many(self, records: Iterable[Mapping[str, Any] | Record], embeddings: Tensor | None = None) -> list[str]:
        """Add records (mappings with :meth:`add`'s keys, or :class:`Record`) in one transaction; returns their ids.

        ``embeddings``: ``[n, D]`` embeddings of the records' node texts by the memory's encoder (computed here
        when not given); rows are L2-normalised."""
        with self._lock:
            recs = self._records(records)
            if not recs:
                return []
            emb = self._embeddings(recs, embeddings)
            try:
                with self.store.write() as tx:
                    for r, x in zip(recs, emb):
                        self._add_one(tx, r, x)
            except BaseException:
                self._load()  # the transaction rolled back: the derived state follows the store
                raise
            self.graph.invalidate()
            return [r.id for r in recs]

    def _embeddings(self, recs: list[Record], given: Tensor | None) -> Tensor:
        if given is None:
            return torch.as_tensor(self.encoder.encode([r.node_text for r in recs]), dtype=torch.float32)
        emb = torch.as_tensor(given, dtype=torch.float32)
        if emb.shape != (len(recs), self.graph.dim) or not torch.isfinite(emb).all():
            raise MemoryError(
                f"field 'embedding' must be {len(recs)} x {self.graph.dim} finite floats, got {tuple(emb.shape)}"
            )
        norms = emb.norm(dim=1, keepdim=True)
        if (norms == 0).any():
            raise MemoryError("field 'embedding' holds a zero vector")
        off = ((norms - 1).abs() > 1e-4).flatten()
        if off.any():
            emb = emb.clone()
            emb[off] = emb[off] / norms[off]
        return emb

    def _add_one(self, tx, record: Record, x: Tensor) -> None:
        g, b, j = self.graph, self.buffers, len(self)
        b.emb = _Buffers.grown(b.emb, j + 1)
        b.time = _Buffers.grown(b.time, j + 1)
        b.emb[j] = x
        b.time[j] = math.nan if record.time is None else float(record.time)
        metadata = self.builder.metadata(record)
        g.node_ids.append(record.id)
        g.texts.append(record.node_text)
        g.keys.append(record.routing_key)
        g.metadata.append(metadata)
        self._views(j + 1)
        g.node_log.append(("add", j, 1))  # before the plan: the vector index takes the row, then finds those before it
        plan = self.builder.plan(g, record, metadata)
        attr = plan.features if plan.features is not None else _onehot(plan.relation)
        self._append_edges(plan.src, plan.dst, plan.relation, attr)
        self._views(j + 1)
        seq = self._next_seq
        self._seq.append(seq)
        self._row[record.id] = j
        self._next_seq += 1
        tx.add_node(
            NodeRow(
                seq,
                record.id,
                record.node_text,
                record.routing_key,
                record.time,
                metadata,
                sorted(plan.entities),
                x.numpy(),
            )
        )
        tx.add_edges(self._edge_rows(plan.src, plan.dst, plan.relation, attr))
        new_words = [w for w in plan.words]
        self.vocabulary.update(new_words)
        tx.count_words(new_words, 1)

    def _edge_rows(self, src: Tensor, dst: Tensor, rel: Tensor, attr: Tensor) -> EdgeRows:
        seq = self._seq
        z = np.zeros(src.numel(), np.float32)
        a = attr.numpy().astype(np.float32)
        return EdgeRows(
            np.asarray([seq[i] for i in src.tolist()], np.int64),
            np.asarray([seq[i] for i in dst.tolist()], np.int64),
            rel.numpy().astype(np.int64),
            z,
            z,
            a,
            a,
        )

    def _edge_keys(self, edges: Tensor) -> tuple[list[int], list[int], list[int]]:
        """The stored ``(src, dst, relation)`` of the graph's edges ``edges`` (node seqs, relation index)."""
        g, seq = self.graph, self._seq
        src, dst = g.edge_index[:, edges].tolist()
        return [seq[u] for u in src], [seq[v] for v in dst], g.edge_type[edges].tolist()

    def _records(self, records: Iterable[Mapping[str, Any] | Record]) -> list[Record]:
        out, seen = [], set()
        for i, raw in enumerate(records):
            r = raw if isinstance(raw, Record) else _record(raw, i)
            self._check_text(r.text, f"record {i}")
            if r.id in self._row or r.id in seen:
                raise DuplicateIdError(f"record {i}: id {r.id!r} is already in the memory")
            if r.time is not None and not math.isfinite(r.time):
                raise MemoryError(f"record {i}: field 'time' must be a finite number of seconds, got {r.time!r}")
            seen.add(r.id)
            out.append(r)
        return out

    def _check_text(self, text: Any, where: str) -> None:
        if not isinstance(text, str) or not text.strip():
            raise MemoryError(f"{where}: field 'text' must be a non-empty string")
        if len(text) > self.cfg.max_text_chars:
            raise MemoryError(
                f"{where}: field 'text' has {len(text):,} characters, "
                f"more than max_text_chars {self.cfg.max_text_chars:,}"
            )

    def forget(self, ids: str | Sequence[str]) -> int:
        """Delete records: their text, embedding, edges and index entries, and every mention in the feedback log
        (the database file is overwritten where they were). Returns how many were deleted. One transaction; the
        derived state is compacted in place (:meth:`_forgotten`), as reopening the store would make it."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        with self._lock:
            self._known(ids)
            rows = sorted({self._row[i] for i in ids})
            texts = [self.graph.texts[r] for r in rows]
            words = Counter(w for r in rows for w in self._words(self._body(r)))
            drop = torch.zeros(len(self), dtype=torch.bool)
            drop[rows] = True
            gone = self._edges_touching(drop)
            forget_indexes(self.store.folder)  # first: a crash after the write leaves no saved file holding them
            try:
                with self.store.write() as tx:
                    tx.delete_edges(*self._edge_keys(gone.nonzero().flatten()))
                    tx.delete_nodes([self._seq[r] for r in rows])
                    tx.count_words(words.elements(), -1)  # once per forgotten record that held the word
                    for seq, entry in tx.feedback_mentioning(ids + texts):
                        tx.rewrite_feedback(seq, _scrub(entry, set(ids), texts))
            except BaseException:
                self._load()  # the transaction rolled back: the derived state follows the store
                raise
            self._forgotten(rows, words, drop, gone)
            for key in [k for k, r in self._recent.items() if set(ids) & set(r.loaded) or r.query in texts]:
                del self._recent[key]
            return len(rows)

    def _edges_touching(self, drop: Tensor) -> Tensor:
        """``[E]`` whether each edge has an end among the rows ``drop`` marks (``[N]`` bool)."""
        ends = self.buffers.edge_index[:, : self._n_edges]
        return drop[ends[0]] | drop[ends[1]]

    def _forgotten(self, rows: list[int], words: Counter, drop: Tensor, gone: Tensor) -> None:
        """Bring the derived state up to a committed :meth:`forget` of ``rows`` (sorted; ``drop`` marks them) and of
        the edges ``gone`` marks (:meth:`_edges_touching`), as reopening the store makes it: the remaining rows and
        edges keep their order and are renumbered, the builder's state and the word counts lose the rows, the removal
        is logged so that the vector indexes mark their slots dead (and are rebuilt when too many are), and BM25 is
        made again when next used, as at open."""
        g, b, n = self.graph, self.buffers, len(self)
        keep = (~drop).nonzero().flatten()
        new_row = torch.full((n,), -1, dtype=torch.long)
        new_row[keep] = torch.arange(keep.numel())
        m = keep.numel()
        self._keep_edges(~gone)
        e = self._n_edges
        b.edge_index[:, :e] = new_row[b.edge_index[:, :e]]
        b.emb[:m], b.time[:m] = b.emb[keep], b.time[keep]
        kept = keep.tolist()
        for rows_of in (g.node_ids, g.texts, g.keys, g.metadata, self._seq):
            rows_of[:] = [rows_of[i] for i in kept]
        self._row = {nid: i for i, nid in enumerate(g.node_ids)}
        self._views(m)
        self.builder.forget(set(rows), dict(zip(kept, range(m))), g.metadata)
        self._recount(words, Counter())
        g.node_log.append(("remove", rows))
        self._edited()

    def revise(self, id: str, text: str, key: str | None = None) -> None:  # noqa: A002
        """Replace one record's text: its key, embedding and entities follow, its place, edges and counters are
        kept, and the Phase-1 features of its edges (cosine ``p_s``, entity overlap ``p_e``) are recomputed."""
        with self._lock:
            self._known([id])
            row = self._row[id]
            self._check_text(text, f"record {id!r}")
            r = Record(id=id, text=text, speaker=self.graph.metadata[row].get("speaker"), key=key)
            x = torch.as_tensor(self.encoder.encode([r.node_text]), dtype=torch.float32)[0]
            ents, new_words = extract_one(self.extractor, text, self.builder.vocabulary)
            old_words = self._words(self._body(row))
            old_ents = self.builder.node_entities[row]
            forget_indexes(self.store.folder)  # first: a crash after the write leaves no saved file holding it
            try:
                with self.store.write() as tx:
                    tx.update_node(self._seq[row], r.node_text, r.routing_key, ents, x.numpy())
                    tx.count_words(old_words, -1)
                    tx.count_words(new_words, 1)
                    features = self._revise_features(tx, row, x, ents)
                    for seq, entry in tx.feedback_mentioning([self.graph.texts[row]]):
                        tx.rewrite_feedback(seq, _scrub(entry, set(), [self.graph.texts[row]]))
            except BaseException:
                self._load()  # the transaction rolled back: the derived state follows the store
                raise
            self._revised(row, r, x, (old_ents, ents), (old_words, new_words), features)

    def _revised(self, row: int, r: Record, x: Tensor, ents: tuple, words: tuple, features: tuple) -> None:
        """Bring the derived state up to a committed :meth:`revise` of ``row``, as reopening the store makes it:
        the node's text, key and embedding (logged, so that a vector index re-reads that row only; BM25 is made
        again when next used, as at open), its entities'
        mentions (rows in ascending order), the word counts and the extractor's vocabulary, the features of its
        edges; the vector indexes give the row's new vector a new slot when next used."""
        g, b = self.graph, self.buffers
        b.emb[row] = x
        g.texts[row], g.keys[row] = r.node_text, r.routing_key
        g.node_log += [("revise", row), ("text", row), ("meta", row), ("edges",)]  # its key, its edges' features
        (old_ents, new_ents), (old_words, new_words) = ents, words
        mentions = self.builder.entities.mentions
        for e in old_ents - new_ents:
            mentions[e].remove(row)
            if not mentions[e]:
                del mentions[e]
        for e in sorted(new_ents - old_ents):
            bisect.insort(mentions.setdefault(e, []), row)
        self._recount(Counter(old_words), Counter(new_words))
        edges, feats, inits = features
        if edges:
            at = torch.tensor(edges, dtype=torch.long)
            b.attr[at], b.attr_init[at] = torch.stack(feats), torch.stack(inits)
        self._views(len(self))
        self._edited()

    def _recount(self, removed: Counter, added: Counter) -> None:
        """The word counts after records holding ``removed`` words left and ones holding ``added`` came: a word
        no record holds any more leaves the counts and the extractor's vocabulary."""
        self.vocabulary.subtract(removed)
        self.vocabulary.update(added)
        gone = [w for w in removed if self.vocabulary[w] <= 0]
        for w in gone:
            del self.vocabulary[w]
        self.builder.vocabulary.difference_update(gone)
        self.builder.vocabulary |= set(added)

    def _edited(self) -> None:
        """What every forget or revise leaves behind (the saved indexes and state, which hold the old texts, vectors
        and words, were removed before its write): BM25 made again on first use (its vocabulary as at open, without
        words no record holds), and the derived tables dropped."""
        for name in [k for k, v in self.graph.indexes.items() if isinstance(v, BM25Index)]:
            del self.graph.indexes[name]
        self.graph.invalidate()

    def _revise_features(self, tx, row: int, x: Tensor, entities: set[str]) -> tuple[list, list, list]:
        """Write the Phase-1 features of ``row``'s edges with its new embedding ``x`` and ``entities``; returns the
        edges and their features ``(edges, attr, attr_init)``."""
        g = self.graph
        self.builder.node_entities[row] = entities
        edges = ((g.edge_index[0] == row) | (g.edge_index[1] == row)).nonzero().flatten().tolist()
        out: tuple[list, list, list] = (edges, [], [])
        for e in edges:
            s, d = int(g.edge_index[0, e]), int(g.edge_index[1, e])
            a, b = self.builder.node_entities[s], self.builder.node_entities[d]
            feats = g.edge_attr[e].clone()
            init = g.edge_attr_init[e].clone()
            if self.cfg.features == "scored":
                xs, xd = (x if s == row else g.embeddings[s]), (x if d == row else g.embeddings[d])
                p_s = float((xs * xd).sum().clamp(-1.0, 1.0))
                p_e = len(a & b) / len(a | b) if a | b else 0.0
                feats[1], feats[3], init[1], init[3] = p_s, p_e, p_s, p_e
            tx.set_features(self._seq[s], self._seq[d], int(g.edge_type[e]), feats.numpy(), init.numpy())
            out[1].append(feats)
            out[2].append(init)
        return out

    def link(self, source: str, target: str, relation: str) -> bool:
        """Add the edge ``source -> target`` of ``relation`` (a curator's edit, GraphMemory §3): Beta counters at
        the prior ``S = F = 0`` (eq. 17), Phase-1 features as the builder computes them. False when it exists."""
        with self._lock:
            self._known([source, target])
            if relation not in self.graph.relations or source == target:
                raise MemoryError(
                    f"link: relation {relation!r} is not one of {list(self.graph.relations)}"
                    if source != target
                    else f"link: {source!r} cannot link to itself"
                )
            u, v, rel = self._row[source], self._row[target], self.graph.relations.index(relation)
            if bool((self.graph.edge_type[self.graph.edges_between(u, v)] == rel).any()):
                return False
            src, dst, r = torch.tensor([u]), torch.tensor([v]), torch.tensor([rel])
            attr = (
                self.builder._features(self.graph, src, dst, None, 0.0) if self.cfg.features == "scored" else _onehot(r)
            )
            with self.store.write() as tx:
                tx.add_edges(self._edge_rows(src, dst, r, attr))
            self._append_edges(src, dst, r, attr)
            self._views(len(self))
            self.graph.invalidate()
            return True

    def unlink(self, source: str, target: str, relation: str | None = None) -> int:
        """Delete the edges ``source -> target`` (of ``relation`` only, when given); returns how many."""
        with self._lock:
            self._known([source, target])
            g = self.graph
            edges = g.edges_between(self._row[source], self._row[target])
            if relation is not None:
                edges = (
                    edges[g.edge_type[edges] == g.relations.index(relation)] if relation in g.relations else edges[:0]
                )
            if edges.numel() == 0:
                return 0
            try:
                with self.store.write() as tx:
                    tx.delete_edges(*self._edge_keys(edges))
            except BaseException:
                self._load()
                raise
            keep = torch.ones(self._n_edges, dtype=torch.bool)
            keep[edges] = False
            self._keep_edges(keep)
            return int(edges.numel())

    def _keep_edges(self, keep: Tensor) -> None:
        """Keep the edges ``keep`` marks, in their order (the store's, as reopening it gives them); the node
        tables and indexes stay."""
        b, e, k = self.buffers, self._n_edges, int(keep.sum())
        b.edge_index[:, :k] = b.edge_index[:, :e][:, keep]
        for name in ("edge_type", "S", "F", "attr", "attr_init"):
            buf = getattr(b, name)
            buf[:k] = buf[:e][keep]
        self._n_edges = k
        self._views(len(self))
        self.graph.node_log.append(("edges",))
        self.graph.invalidate()

    def feedback(
        self,
        retrieval: MemoryRetrieval | str,
        *,
        reward: float | None = None,
        helpful: Sequence[str] | None = None,
        labels: Sequence[Sequence[Any]] | None = None,
    ) -> dict[str, Any]:
        """Record the outcome of a retrieval and apply GraphMemory's Beta update (eq. 21). Exactly one of
        ``reward`` (in [0, 1]) or ``helpful`` (the ids that helped), which label the transitions the retrieval
        traversed (:func:`graphmem.feedback.label_transitions`), or ``labels``: a Reflector's own
        ``(source id, target id, helpful|harmful|neutral, confidence)`` transitions (:func:`graphmem.feedback.
        check_labels`). Every parallel edge of a labelled transition is updated; none is created. The entry is
        logged for training; returns it."""
        with self._lock:
            r = self._recent.get(retrieval) if isinstance(retrieval, str) else retrieval
            if r is None:
                raise UnknownIdError(f"retrieval {retrieval!r} is unknown (not one of the last {len(self._recent)})")
            if labels is not None:
                if reward is not None or helpful is not None:
                    raise MemoryError("feedback takes 'labels' alone, without 'reward' or 'helpful'")
                labels = check_labels(labels)
            else:
                labels = label_transitions(r.traversed, reward=reward, helpful=helpful)
            g, applied, skipped = self.graph, 0, 0
            counts: dict[int, tuple[np.float32, np.float32]] = {}  # edge -> its S, F after the update
            for src, dst, label, c in labels:
                if src not in self._row or dst not in self._row or label == "neutral" or c == 0:
                    skipped += src not in self._row or dst not in self._row
                    continue
                for e in g.edges_between(self._row[src], self._row[dst]).tolist():
                    s, f = counts.get(e, (np.float32(g.S[e]), np.float32(g.F[e])))
                    # float32 additions, as the counters are held: the store keeps the very values, so that
                    # reopening it gives the counters this memory has
                    counts[e] = (s + np.float32(c), f) if label == "helpful" else (s, f + np.float32(c))
                    applied += 1
            with self.store.write() as tx:
                for e, (s, f) in counts.items():
                    u, v = g.edge_index[:, e].tolist()
                    tx.set_counts(self._seq[u], self._seq[v], int(g.edge_type[e]), float(s), float(f))
                entry = {
                    "retrieval": r.to_json(),
                    "reward": reward,
                    "helpful": None if helpful is None else list(helpful),
                    "labels": [list(x) for x in labels],
                    "edges_updated": applied,
                    "transitions_gone": skipped,
                }
                entry["seq"] = tx.log_feedback({k: v for k, v in entry.items() if k != "seq"})
            for e, (s, f) in counts.items():  # committed: the graph follows the store
                g.S[e], g.F[e] = float(s), float(f)
            g.invalidate()
            return entry

    # ------------------------------------------------------------------ reads
    def retrieve(
        self,
        query: str,
        *,
        budget: Budget | None = None,
        policy: str | TraversalPolicy | None = None,
        embedding: Tensor | None = None,
    ) -> MemoryRetrieval:
        """The records ``policy`` (default: the memory's) loads for ``query`` under ``budget``, ranked.

        ``embedding``: the query's embedding by the memory's encoder, when the caller has it already."""
        if not isinstance(query, str) or not query.strip():
            raise MemoryError("field 'query' must be a non-empty string")
        with self._lock:
            pol = self._policy(policy)
            if embedding is None:
                x = torch.as_tensor(self.encoder.encode([query]), dtype=torch.float32)[0]
            else:
                x = torch.as_tensor(embedding, dtype=torch.float32).flatten()
                if x.shape != (self.graph.dim,) or not torch.isfinite(x).all():
                    raise MemoryError(f"field 'embedding' must be {self.graph.dim} finite floats, got {tuple(x.shape)}")
            q = Query(qid=f"q{len(self._recent)}", text=query, embedding=x)
            g = self.graph
            r = pol.retrieve_batch(g, [q], budget or self.budget)[0]
            ids = g.node_ids
            out = MemoryRetrieval(
                id=uuid.uuid4().hex,
                query=query,
                policy=pol.name,
                ranked=[ids[i] for i in r.ranked],
                texts_by_id={ids[i]: g.texts[i] for i in r.loaded},
                scores=None if r.scores is None else [float(s) for s in r.scores],
                loaded=[ids[i] for i in r.loaded],
                entries=[ids[i] for i in r.entries],
                traversed=[
                    (ids[int(g.edge_index[0, e])], ids[int(g.edge_index[1, e])], g.relations[int(g.edge_type[e])])
                    for e in r.edges_traversed
                ],
                edges_considered=len(r.edges_considered),
                loaded_tokens=int(r.loaded_tokens),
                max_depth=int(r.max_depth),
                wall_time_s=float(r.wall_time_s),
            )
            self._recent[out.id] = out
            while len(self._recent) > 1024:
                self._recent.popitem(last=False)
            return out

    def _policy(self, policy: str | TraversalPolicy | None) -> TraversalPolicy:
        if policy is None:
            return self.policy
        if isinstance(policy, TraversalPolicy):
            return policy
        if policy not in self._policies:
            self._policies[policy] = _make_policy(policy, None, self.store.settings()["encoder"])
        return self._policies[policy]

    def get(self, id: str) -> dict[str, Any]:  # noqa: A002
        """One record: id, text, key, time and metadata."""
        with self._lock:
            self._known([id])
            i = self._row[id]
            t = float(self.graph.timestamps[i])
            return {
                "id": id,
                "text": self.graph.texts[i],
                "key": self.graph.keys[i],
                "time": None if math.isnan(t) else t,
                "meta": dict(self.graph.metadata[i]),
            }

    def stats(self) -> dict[str, Any]:
        """Sizes (records, edges by relation, feedback entries), the database's bytes and the settings."""
        with self._lock:
            g = self.graph
            counts = torch.bincount(g.edge_type, minlength=len(g.relations)).tolist()
            files = [self.store.folder / n for n in ("memory.sqlite3", "memory.sqlite3-wal")]
            return {
                "name": self.store.folder.name,
                "records": len(self),
                "edges": g.num_edges,
                "edges_by_relation": dict(zip(g.relations, counts)),
                "feedback": int(self.store.conn.execute("SELECT count(*) FROM feedback").fetchone()[0]),
                "bytes": sum(p.stat().st_size for p in files if p.exists()),
                "encoder": self.store.settings()["encoder"]["name"],
                "policy": self.policy.name,
                "writer": self.store.lock is not None,
            }

    def feedback_log(self) -> list[dict[str, Any]]:
        """Every logged feedback entry, oldest first (what a trainer reads)."""
        with self._lock:
            return self.store.feedback_log()

    def integrity(self) -> list[str]:
        """Problems found in the database and between it and the derived graph (an empty list: sound)."""
        with self._lock:
            problems = self.store.integrity()
            n_db = int(self.store.conn.execute("SELECT count(*) FROM nodes").fetchone()[0])
            e_db = int(self.store.conn.execute("SELECT count(*) FROM edges").fetchone()[0])
            if (n_db, e_db) != (len(self), self.graph.num_edges):
                problems.append(
                    f"database holds {n_db} records and {e_db} edges, the graph {len(self)} and {self.graph.num_edges}"
                )
            try:
                self.graph.validate()
            except ValueError as err:
                problems.append(str(err))
            return problems

    def export_graphset(self, folder: str | Path, questions: Sequence[Question]) -> Path:
        """Write the memory as a graph set of one graph, named after the memory, with ``questions`` asked over it
        (their ``graph`` is set to that name), which the scripts read (``scripts/evaluate.py graphset=<folder>``)."""
        with self._lock:
            if not questions:
                raise MemoryError("export_graphset: a graph set needs at least one question over the memory")
            name = self.graph.info["name"]
            qs = [dataclasses.replace(q, graph=name) for q in questions]
            emb = torch.as_tensor(self.encoder.encode([q.text for q in qs]), dtype=torch.float32)
            settings = self.store.settings()
            digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
            provenance = {
                "encoder": settings["encoder"]["name"],
                "encoder_fingerprint": settings["encoder"]["fingerprint"],
                "memory": str(self.store.folder),
                "config_hash": digest,
            }
            gs = GraphSet(
                "memory",
                {name: self.graph.copy()},
                qs,
                emb,
                LoadReport(str(self.store.folder), 1, len(qs)),
                config_hash=digest,
                stats={"encoder": provenance["encoder"]},
                provenance=provenance,
            )
            return gs.save(folder)

    # ------------------------------------------------------------------ helpers
    def _known(self, ids: Sequence[str]) -> None:
        for i in ids:
            if not isinstance(i, str) or i not in self._row:
                raise UnknownIdError(f"id {i!r} is not a record of memory {self.store.folder.name!r}")

    def _words(self, text: str) -> set[str]:
        """The proper words a record's words add to the entity extractor's vocabulary (none without one)."""
        return self.extractor.proper_words([text]) if isinstance(self.extractor, CueEntityExtractor) else set()

    def _body(self, row: int) -> str:
        """A stored record's own words: its node text without the ``"<speaker>: "`` prefix."""
        text, speaker = self.graph.texts[row], self.graph.metadata[row].get("speaker")
        return text[len(speaker) + 2 :] if speaker and text.startswith(f"{speaker}: ") else text


def enc_name(encoder: str | Encoder) -> str:
    """The config name of ``encoder`` (``minilm``, ``hashing``), or its own name for an encoder object."""
    return encoder if isinstance(encoder, str) else getattr(encoder, "config_name", encoder.name)


def _registered_extractor(name: str) -> EntityExtractor:
    try:
        return make_entity_extractor(name)
    except (KeyError, ValueError) as err:
        raise MemoryError(
            f"the memory's entity extractor {name!r} is not a registered one; open it with extractor=<that object>"
        ) from err


def _onehot(relation: Tensor) -> Tensor:
    return torch.nn.functional.one_hot(relation.clamp(max=3), 4).float()


def _record(raw: Mapping[str, Any], i: int) -> Record:
    if not isinstance(raw, Mapping):
        raise MemoryError(f"record {i}: must be a mapping with a 'text', got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"text", "speaker", "time", "session", "id", "meta", "key"})
    if unknown:
        raise MemoryError(f"record {i}: unknown fields {unknown}")
    rid = raw.get("id") or uuid.uuid4().hex
    if not isinstance(rid, str):
        raise MemoryError(f"record {i}: field 'id' must be a string, got {rid!r}")
    meta = dict(raw.get("meta") or {})
    reserved = sorted(set(meta) & {"speaker", "session"})
    if reserved:
        raise MemoryError(f"record {i}: field 'meta' may not hold {reserved} (give them as fields)")
    t = raw.get("time")
    if t is not None and (not isinstance(t, (int, float)) or isinstance(t, bool)):
        raise MemoryError(f"record {i}: field 'time' must be a number of seconds, got {t!r}")
    key = raw.get("key")
    if key is not None and not isinstance(key, str):
        raise MemoryError(f"record {i}: field 'key' must be a string, got {key!r}")
    return Record(
        id=rid,
        text=raw.get("text"),
        speaker=raw.get("speaker"),
        time=t,
        session=raw.get("session"),
        meta=meta,
        key=key,
    )


def _scrub(entry: dict[str, Any], ids: set[str], texts: Sequence[str]) -> dict[str, Any]:
    """A feedback entry with every mention of forgotten ``ids`` and ``texts`` removed."""
    r = dict(entry.get("retrieval") or {})
    for key in ("ranked", "loaded", "entries", "helpful"):
        if isinstance(r.get(key), list):
            r[key] = [i for i in r[key] if i not in ids]
    keep = [i for i, rid in enumerate(entry.get("retrieval", {}).get("ranked", [])) if rid not in ids]
    if isinstance(r.get("texts"), list):
        r["texts"] = [r["texts"][i] for i in keep if i < len(r["texts"])]
        r["texts"] = [t for t in r["texts"] if t not in texts]
    if isinstance(r.get("scores"), list):
        r["scores"] = [r["scores"][i] for i in keep if i < len(r["scores"])]
    r["traversed"] = [e for e in r.get("traversed", []) if e[0] not in ids and e[1] not in ids]
    if any(t and t in (r.get("query") or "") for t in texts):
        r["query"] = "[forgotten]"
    out = {**entry, "retrieval": r}
    if isinstance(out.get("helpful"), list):
        out["helpful"] = [i for i in out["helpful"] if i not in ids]
    out["labels"] = [x for x in out.get("labels", []) if x[0] not in ids and x[1] not in ids]
    return out


def _check_settings(store: SQLiteStore, wanted: dict[str, Any], graph: Mapping[str, Any] | None) -> GraphConfig:
    """The stored graph config, after refusing an open with another encoder or other explicit graph settings."""
    have = store.settings()
    enc, want = have["encoder"], wanted["encoder"]
    if (enc["name"], enc["dim"]) != (want["name"], want["dim"]) or enc["fingerprint"] != want["fingerprint"]:
        raise MemoryError(
            f"memory {store.folder} was created with encoder {have['graph']['encoder']!r} ({enc['name']}, "
            f"{enc['dim']}-d); open it with that encoder"
        )
    for key, value in (graph or {}).items():
        if have["graph"].get(key) != value:
            raise MemoryError(
                f"memory {store.folder} was created with graph.{key}={have['graph'].get(key)!r}, not {value!r}"
            )
    return GraphConfig.from_mapping({**have["graph"], "cache_dir": None})


def check_policy(
    policy: str | TraversalPolicy | Mapping[str, Any] | None, checkpoint: str | Path | None, encoder: Encoder
) -> TraversalPolicy:
    """The policy :meth:`Memory.open` makes for a memory of ``encoder`` (refusing a checkpoint of another encoder):
    a check before any memory is opened, as a server's at its start."""
    return _make_policy(
        policy, checkpoint, {"name": encoder.name, "dim": int(encoder.dim), "fingerprint": encoder_fingerprint(encoder)}
    )


def _make_policy(
    policy: str | TraversalPolicy | Mapping[str, Any] | None, checkpoint: str | Path | None, encoder: Mapping[str, Any]
) -> TraversalPolicy:
    """The memory's policy: an object as given, else a policy config (given, or ``configs/policy/<name>.yaml``)
    with ``checkpoint`` (default ``router`` with a checkpoint, else ``hybrid``); a checkpoint of another encoder
    is refused."""
    if isinstance(policy, TraversalPolicy):
        return policy
    from graphmem.config.cli import policy_config  # noqa: PLC0415

    if isinstance(policy, Mapping):
        config = dict(policy)
    else:
        config = policy_config(policy or ("router" if checkpoint is not None else "hybrid"))
    if checkpoint is not None:
        config["checkpoint"] = str(checkpoint)
    checkpoint = config.get("checkpoint")
    made = make_policy(config)
    inputs = getattr(made, "trained_inputs", None) or {}
    if inputs and (
        inputs.get("embedding_dim") != encoder["dim"]
        or (inputs.get("encoder_fingerprint") and inputs["encoder_fingerprint"] != encoder["fingerprint"])
    ):
        raise MemoryError(
            f"checkpoint {checkpoint}: trained on {inputs.get('embedding_dim')}-d embeddings of "
            f"{inputs.get('encoder')}, the memory's come from {encoder['name']} ({encoder['dim']}-d)"
        )
    return made
