"""Approximate nearest-neighbour search over a graph's node embeddings (FAISS), kept up to date.

A :class:`VectorIndex` holds the unit node embeddings of one :class:`~graphmem.core.graph.MemoryGraph`
in a FAISS index (HNSW by default, or IVF), built once per graph. Every vector sits in a *slot*
(its FAISS id); ``slot_row[s]`` is the graph row the slot stands for, ``-1`` once the slot is dead.
The graph's mutations append to :attr:`MemoryGraph.node_log`, and :meth:`VectorIndex.sync` replays
the new events before each search:

* ``add``: the new rows get fresh slots;
* ``revise`` (a new embedding): the row's slot dies and the row gets a fresh slot;
* ``remove``: the rows' slots die and the later rows shift down (``slot_row`` is renumbered);
* ``text`` (a new text, same embedding): nothing changes.

Events that only append rows are replayed in time proportional to the new rows (``slot_row`` grows in a buffer
with spare room, the selector's bitmap with it); any other event walks every slot once.

Dead slots (tombstones) stay in the FAISS structure but are excluded from every result through a
FAISS ID selector; once they exceed ``rebuild_fraction`` of the slots the index is rebuilt. A change
the log cannot explain (the embedding tensor replaced or edited in place by direct assignment) also
rebuilds it, so a search never answers for stale vectors.

:meth:`VectorIndex.search` returns, per query, the ``k`` rows of largest cosine among the index's
candidates (``k + overfetch`` asked of FAISS), re-scored exactly from the graph's embeddings and
ordered by (cosine desc, node id asc) like the exact selector. The index sees embeddings only.
:meth:`VectorIndex.nearest` is the live memory's semantic-neighbour search on the same index: the nearest rows
before a given row, ordered by (cosine desc, row asc) like the batch builder's kNN, so that one index serves a
memory's writes and its retrievals' entries.

Its files (FAISS's own bytes, :meth:`VectorIndex.to_bytes`, beside ``slot_row`` and
:func:`graph_fingerprint`, no pickle) are :mod:`graphmem.store.indexes`'.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import weakref
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.core.rows import append_to

INDEX_KINDS = ("hnsw", "ivf")
FORMAT_VERSION = 1


class VectorIndexError(ValueError):
    """A vector index file or spec is invalid; the message names the file or field."""


SPEC_RANGES = {
    "m": (1, 1024),
    "ef_construction": (1, 1_000_000),
    "ef_search": (1, 1_000_000),
    "nprobe": (1, 1_000_000),
    "nlist": (0, 10_000_000),
    "overfetch": (0, 1_000_000),
}
"""``IndexSpec`` integer field -> allowed ``[lo, hi]``: FAISS allocates ``m`` links per node and level, so an
``m`` of 10^8 asks for more memory than any machine holds; the caps are far above any useful setting."""


@dataclass(frozen=True)
class IndexSpec:
    """Which FAISS index to build and how to search it (``configs/policy/*`` ``entry_index``).

    Args:
        kind: ``"hnsw"`` (``IndexHNSWFlat``, inner product) or ``"ivf"`` (``IndexIVFFlat``).
        m: HNSW links per node (default: 32).
        ef_construction: HNSW candidate list while building (default: 80).
        ef_search: HNSW candidate list while searching (default: 128).
        nlist: IVF lists; 0 = ``round(4 sqrt(N))`` (default: 0).
        nprobe: IVF lists scanned per query (default: 16).
        overfetch: extra candidates asked of FAISS beyond ``k`` before exact re-scoring (default: 6).
        rebuild_fraction: rebuild once dead slots exceed this share of all slots (default: 0.25).
    """

    kind: str = "hnsw"
    m: int = 32
    ef_construction: int = 80
    ef_search: int = 128
    nlist: int = 0
    nprobe: int = 16
    overfetch: int = 6
    rebuild_fraction: float = 0.25

    def __post_init__(self) -> None:
        if self.kind not in INDEX_KINDS:
            raise VectorIndexError(f"IndexSpec.kind {self.kind!r} is not one of {INDEX_KINDS}")
        for name, (lo, hi) in SPEC_RANGES.items():
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise VectorIndexError(f"IndexSpec.{name}={v!r}: must be an integer in [{lo}, {hi:,}]")
        if not isinstance(self.rebuild_fraction, (int, float)) or not 0 < self.rebuild_fraction <= 1:
            raise VectorIndexError(f"IndexSpec.rebuild_fraction must be in (0, 1], got {self.rebuild_fraction!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> IndexSpec:
        """Build from a dict / config node; unknown keys are an error."""
        values = dict(values or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise VectorIndexError(f"IndexSpec: unknown keys {unknown}; known: {sorted(names)}")
        return cls(**values)

    @functools.cached_property
    def key(self) -> str:
        """Name of this spec in :attr:`MemoryGraph.indexes` (build parameters only)."""
        if self.kind == "hnsw":
            return f"hnsw-m{self.m}-efc{self.ef_construction}"
        return f"ivf-nlist{self.nlist}"


def _faiss():
    try:
        import faiss
    except ImportError as err:  # pragma: no cover - faiss-cpu is a declared dependency
        raise ImportError("vector indexes need the faiss-cpu package (pip install faiss-cpu)") from err
    faiss.omp_set_num_threads(torch.get_num_threads())
    return faiss


def unit_rows(embeddings: Tensor) -> np.ndarray:
    """``[n, D]`` float32 C-contiguous L2-normalised rows (what the index stores and is asked)."""
    return np.ascontiguousarray(torch.nn.functional.normalize(embeddings.float(), dim=1).numpy())


def graph_fingerprint(graph: MemoryGraph) -> str:
    """SHA-256 of the node ids (in row order) and the embedding bytes: which graph an index is for."""
    h = hashlib.sha256("\x1f".join(graph.node_ids).encode())
    h.update(np.ascontiguousarray(graph.embeddings.float().numpy()))  # its bytes, read in place
    return h.hexdigest()


class VectorIndex:
    """A FAISS index over one graph's unit node embeddings (see module docstring).

    Build with :meth:`build` (or :func:`index_for`, which keeps it in ``graph.indexes``).
    """

    def __init__(self, spec: IndexSpec, index, slot_row: np.ndarray, dim: int) -> None:
        self.spec, self.index, self.dim = spec, index, dim
        self.slot_row = slot_row
        self.builds = 1  # times the FAISS structure was built (1 + rebuilds)
        self._mark: tuple | None = None  # (log length, weakref to embeddings, version) when last synced

    @property
    def slot_row(self) -> np.ndarray:
        """``[slots]`` the graph row of each slot, ``-1`` once dead (a view of a buffer with spare room)."""
        return self._slot_row[: self._slots]

    @slot_row.setter
    def slot_row(self, value: np.ndarray) -> None:
        self._slot_row = np.array(value, dtype=np.int64)
        self._slots = self._slot_row.size
        self._live_bits: np.ndarray | None = None  # packed live-slot bitmap of the FAISS ID selector
        self._dead: int | None = None  # dead slots (counted on demand)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, graph: MemoryGraph, spec: IndexSpec | None = None) -> VectorIndex:
        """Index every node of ``graph`` (slot ``i`` = row ``i``)."""
        spec = spec or IndexSpec()
        out = cls(spec, _new_index(spec, graph.dim, graph.num_nodes), np.empty(0, dtype=np.int64), graph.dim)
        out._train_and_add(graph)
        out.mark_synced(graph)
        return out

    def _train_and_add(self, graph: MemoryGraph) -> None:
        x = unit_rows(graph.embeddings)
        if self.spec.kind == "ivf" and len(x):
            _faiss()
            self.index.train(x)
        self._add(x)
        self.slot_row = np.arange(graph.num_nodes, dtype=np.int64)

    def _add(self, x: np.ndarray) -> None:
        """Append vectors; FAISS numbers them ``ntotal, ntotal + 1, ...``, which are their slots."""
        if len(x):
            _faiss()
            self.index.add(x)

    def rebuild(self, graph: MemoryGraph) -> None:
        """Build the FAISS structure anew from the graph's current embeddings (no dead slots)."""
        self.index = _new_index(self.spec, graph.dim, graph.num_nodes)
        self._train_and_add(graph)
        self.builds += 1
        self.mark_synced(graph)

    # ------------------------------------------------------------------ keeping up with the graph
    @property
    def num_slots(self) -> int:
        return int(self.slot_row.size)

    @property
    def num_dead(self) -> int:
        if self._dead is None:
            self._dead = int((self.slot_row < 0).sum())
        return self._dead

    def mark_synced(self, graph: MemoryGraph) -> None:
        self._mark = (len(graph.node_log), weakref.ref(graph.embeddings), graph.embeddings._version)

    def is_synced(self, graph: MemoryGraph) -> bool:
        """Whether the index reflects ``graph`` as it is now (no unseen log event, same embedding tensor)."""
        if self._mark is None:
            return False
        n, ref, version = self._mark
        return n == len(graph.node_log) and ref() is graph.embeddings and version == graph.embeddings._version

    def sync(self, graph: MemoryGraph) -> None:
        """Apply the graph's node mutations since the last sync (module docstring)."""
        if self.is_synced(graph):
            return
        n_seen = self._mark[0] if self._mark is not None else len(graph.node_log) + 1
        events = graph.node_log[n_seen:]
        # only logged events can be replayed; any other change (direct assignment, in-place edit) rebuilds
        if (
            n_seen > len(graph.node_log)
            or not events
            or not (self._append(events, graph) or self._replay(events, graph))
        ):
            self.rebuild(graph)
            return
        if self.num_dead > self.spec.rebuild_fraction * max(self.num_slots, 1):
            self.rebuild(graph)
            return
        self.mark_synced(graph)

    def _append(self, events: list[tuple], graph: MemoryGraph) -> bool:
        """Replay ``events`` that only append rows (each new row a fresh slot) in time proportional to the new rows,
        not to the index; False, changing nothing, when some event does more or they do not lead to the graph's
        node count."""
        if not self.index.is_trained:
            return False
        old = rows = self.num_slots - self.num_dead
        for event in events:
            if event[0] == "add" and event[1] == rows:
                rows += event[2]
            elif event[0] not in ("text", "meta", "edges"):
                return False
        if rows != graph.num_nodes:
            return False
        start, stop = self._slots, self._slots + rows - old
        self._slot_row, self._slots = append_to(self._slot_row, start, np.arange(old, rows)), stop
        if self._live_bits is not None:  # the new slots are live: their bytes appended as zeros, then their bits set
            used = (start + 7) // 8
            self._live_bits = append_to(self._live_bits, used, np.zeros((stop + 7) // 8 - used, dtype=np.uint8))
            at = np.arange(start, stop)
            np.bitwise_or.at(self._live_bits, at >> 3, (1 << (at & 7)).astype(np.uint8))
        self._add(unit_rows(graph.embeddings[old:rows]))
        return True

    def _replay(self, events: list[tuple], graph: MemoryGraph) -> bool:
        """Replay ``events`` on ``slot_row``; False when they do not lead to the graph's node count."""
        if not self.index.is_trained:
            return False
        n_rows = int((self.slot_row >= 0).sum())
        row_slot = np.full(n_rows, -1, dtype=np.int64)
        live = self.slot_row >= 0
        row_slot[self.slot_row[live]] = np.flatnonzero(live)
        for event in events:
            op = event[0]
            if op == "add":
                _, start, count = event
                if start != row_slot.size:
                    return False
                row_slot = np.concatenate([row_slot, np.full(count, -1, dtype=np.int64)])
            elif op == "revise":
                row = event[1]
                if not 0 <= row < row_slot.size:
                    return False
                if row_slot[row] >= 0:
                    self.slot_row[row_slot[row]] = -1
                row_slot[row] = -1
            elif op in ("text", "meta", "edges"):  # the embeddings are unchanged
                continue
            elif op == "remove":
                rows = np.asarray(event[1], dtype=np.int64)
                if rows.size and (rows.min() < 0 or rows.max() >= row_slot.size):
                    return False
                dead = row_slot[rows]
                self.slot_row[dead[dead >= 0]] = -1
                row_slot = np.delete(row_slot, rows)
            else:
                return False
        if row_slot.size != graph.num_nodes:
            return False
        fresh = np.flatnonzero(row_slot < 0)
        self.slot_row = np.concatenate([np.full(self.num_slots, -1, dtype=np.int64), fresh]).astype(np.int64)
        kept = row_slot >= 0
        self.slot_row[row_slot[kept]] = np.flatnonzero(kept)
        self._add(unit_rows(graph.embeddings[torch.from_numpy(fresh)]))
        self._live_bits = self._dead = None
        return True

    # ------------------------------------------------------------------ search
    def _params(self):
        faiss = _faiss()
        if self.spec.kind == "hnsw":
            params = faiss.SearchParametersHNSW()
            params.efSearch = self.spec.ef_search
        else:
            params = faiss.SearchParametersIVF()
            params.nprobe = self.spec.nprobe
        if self.num_dead:
            if self._live_bits is None:
                self._live_bits = np.packbits(self.slot_row >= 0, bitorder="little")
            self._selector = faiss.IDSelectorBitmap(self.num_slots, faiss.swig_ptr(self._live_bits))
            params.sel = self._selector
        return params

    def search(self, graph: MemoryGraph, queries: Tensor, k: int) -> Tensor:
        """``[B, min(k, N)]`` rows of ``graph`` nearest to each query (``-1`` padded), best first.

        ``queries`` are ``[B, D]`` (normalised here). The index is synced with the graph first; the
        FAISS candidates are re-scored with the exact cosine and ordered by (cosine desc, node id asc); a query
        whose tie at the ``k``-th place runs to the last candidate fetched is ranked over every node
        (:meth:`_exact_top`), so ties break as in exact selection.
        Small arrays throughout, in numpy: a query at batch 1 costs the FAISS search plus microseconds.
        """
        self.sync(graph)
        b, n = queries.shape[0], graph.num_nodes
        k = min(k, n)
        if b == 0 or k == 0:
            return torch.full((b, k), -1, dtype=torch.long)
        q = queries.detach().float().cpu().numpy()
        q = np.ascontiguousarray(q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12))
        fetch = min(k + self.spec.overfetch, self.index.ntotal)
        _, slots = self.index.search(q, fetch, params=self._params())
        rows = np.where(slots >= 0, self.slot_row[np.maximum(slots, 0)], -1)
        x = graph.embeddings.detach().numpy()[np.maximum(rows, 0)]  # [B, fetch, D]
        score = np.einsum("bfd,bd->bf", x, q) / np.maximum(np.linalg.norm(x, axis=2), 1e-12)
        score[rows < 0] = -np.inf
        order = np.argsort(-score, axis=1, kind="stable")
        rows, score = np.take_along_axis(rows, order, 1), np.take_along_axis(score, order, 1)
        tied = ((score[:, 1:] == score[:, :-1]) & (score[:, 1:] > -np.inf)).any(1)
        for i in np.flatnonzero(tied).tolist():  # equal cosines: ascending node id, as exact selection
            pairs = sorted((-float(s), graph.node_ids[int(r)], int(r)) for s, r in zip(score[i], rows[i]) if r >= 0)
            rows[i, : len(pairs)] = [p[2] for p in pairs]
        # a tie at the k-th place that runs to the last candidate fetched may hold nodes FAISS did not return
        # (every cosine 0, say): those rows are ranked over every node, so ties break as the exact path breaks them
        cut = (score[:, k - 1] == score[:, -1]) & (score[:, k - 1] > -np.inf) if fetch < n else np.zeros(b, bool)
        out = rows[:, :k].copy()
        for i in np.flatnonzero(cut).tolist():
            out[i] = self._exact_top(graph, q[i], k)
        return torch.from_numpy(np.ascontiguousarray(out))

    def nearest(self, graph: MemoryGraph, x: Tensor, k: int, before: int) -> tuple[list[int], list[float]]:
        """At most ``k`` of the first ``before`` rows of ``graph`` nearest to the unit vector ``x``, and their
        cosines, by (cosine desc, row asc): a live memory's semantic neighbours among the records before a new one.

        FAISS is asked for ``k + overfetch`` candidates before ``before`` (more while later rows crowd them out);
        each candidate's cosine is its float64 product with ``x`` rounded to float32, as the exact search computes
        it."""
        self.sync(graph)
        if before < 1 or k < 1:
            return [], []
        enough = min(k + self.spec.overfetch, before)
        want = min(enough + graph.num_nodes - before, self.index.ntotal)
        q = x.detach().float().cpu().numpy()[None, :]
        q = np.ascontiguousarray(q / max(float(np.linalg.norm(q)), 1e-12))
        params = self._params()
        while True:
            _, slots = self.index.search(q, want, params=params)
            rows = self.slot_row[slots[0][slots[0] >= 0]]
            rows = rows[(rows >= 0) & (rows < before)]
            if rows.size >= enough or want >= self.index.ntotal:
                break
            want = min(2 * want, self.index.ntotal)
        return nearest_of(graph.embeddings, torch.from_numpy(rows), x, k)

    @staticmethod
    def _exact_top(graph: MemoryGraph, q: np.ndarray, k: int) -> np.ndarray:
        """The ``k`` rows of ``graph`` by (cosine with the normalised ``q`` desc, node id asc), over every node."""
        x = graph.embeddings.detach().float().numpy()
        score = (x @ q) / np.maximum(np.linalg.norm(x, axis=1), 1e-12)
        kth = -np.partition(-score, k - 1)[k - 1]
        above = np.flatnonzero(score > kth)
        above = sorted(above.tolist(), key=lambda r: (-float(score[r]), graph.node_ids[r]))
        tied = sorted(np.flatnonzero(score == kth).tolist(), key=lambda r: graph.node_ids[r])
        return np.asarray((above + tied)[:k], dtype=np.int64)

    # ------------------------------------------------------------------ as bytes
    def to_bytes(self) -> np.ndarray:
        """FAISS's own serialisation of the index (``uint8``), what a file of it holds beside ``slot_row``."""
        return _faiss().serialize_index(self.index)

    @classmethod
    def from_bytes(cls, spec: IndexSpec, data: np.ndarray, slot_row: np.ndarray, dim: int) -> VectorIndex:
        """The index :meth:`to_bytes` gave, with its slot table (not yet synced with a graph)."""
        return cls(spec, _faiss().deserialize_index(data), slot_row, dim)


def nearest_of(embeddings: Tensor, rows: Tensor, x: Tensor, k: int) -> tuple[list[int], list[float]]:
    """The ``k`` of ``rows`` nearest to ``x`` and their cosines, by (cosine desc, row asc), each cosine the float64
    product of its row with ``x`` rounded to float32 (as the batch builder's kNN computes it)."""
    cos = (embeddings[rows].double() @ x.double()).float()
    pairs = sorted(zip((-cos).tolist(), rows.tolist()))[:k]
    return [r for _, r in pairs], [-c for c, _ in pairs]


def _new_index(spec: IndexSpec, dim: int, n: int):
    """An empty FAISS index of ``spec`` (inner product on unit vectors = cosine) for ``n`` vectors."""
    faiss = _faiss()
    if spec.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, spec.m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = spec.ef_construction
        index.hnsw.efSearch = spec.ef_search
        return index
    nlist = min(spec.nlist or round(4 * n**0.5), n) or 1
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.own_fields = True
    quantizer.this.disown()
    index.cp.min_points_per_centroid = 1
    index.nprobe = spec.nprobe
    return index


def index_for(graph: MemoryGraph, spec: IndexSpec | None = None) -> VectorIndex:
    """The graph's index of ``spec`` from ``graph.indexes`` (built and kept there on first use)."""
    spec = spec or IndexSpec()
    index = graph.indexes.get(spec.key)
    if index is None or index.dim != graph.dim:
        index = graph.indexes[spec.key] = VectorIndex.build(graph, spec)
    return index
