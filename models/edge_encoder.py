"""Inductive edge features: ``e_ij`` computed from what every memory graph has, shared across graphs.

HAGE's per-edge table (``edge_mode="table"``, :class:`PerEdgeResidual`) holds one free row per edge of
the training graphs, so nothing it learns reaches a graph it was not trained on. Here an edge
``i -> j`` (all parallel edges of one node pair together: a *pair*) is described by

    a_ij = [relation multi-hot (R), Phase-1 [p_t, p_s, p_c, p_e], parallel edges / R,
            log(1 + |t_j - t_i| / 1 s) / 10, time known, sign(t_j - t_i),
            speaker change, speakers known,
            same sequence, sign(o_j - o_i), log(1 + |o_j - o_i|) / 3, log(1 + o_j) / 3, order of j known,
            log(1 + deg_i) / 4, log(1 + deg_j) / 4, log(1 + tokens_j) / 5]

(:func:`pair_table`). A node's *sequence* and *order* in it come from its metadata, as the
builders write them (``session`` / ``position`` for conversation turns, ``paragraph`` /
``sent_idx`` for document sentences); the order features are set for pairs in one sequence.
Missing timestamps, speakers or orders give 0 with a 0 "known" flag. The encoder computes

    e_ij = e0_ij + f([a_ij ; (P x_i) ⊙ (P x_j)])            f: 2-layer MLP, last layer zero-init
           (+ δ_ij, HAGE's per-edge residual, optional, zero-init, 0 on graphs it does not hold)

with ``e0_ij`` the pair's Phase-1 features (``edge_attr_init``, the max over its parallel edges)
and ``P`` a shared low-rank projection of the node embeddings. The anchor term

    L_anchor = mean_ij ||e_ij - e0_ij||^2

keeps its HAGE meaning: a pull of the learned features to their Phase-1 values. ``mode`` selects
the ablation variants: ``onehot`` (the relation multi-hot, static), ``phase1`` (``e0``, static),
``table`` (``e0 + δ``: the paper's per-edge trainable features, transductive) and ``inductive``
(``e0 + f``, plus ``δ`` with ``residual=True``).
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import Tensor, nn

from graphmem.core.csr import (
    append_rows,
    csr_positions,
    empty_with_room,
    grow_rows,
    grown_rowptr,
    held_rows,
    insertion_points,
    with_room,
)
from graphmem.core.graph import EDGE_FEATURE_DIM, MemoryGraph
from graphmem.core.rows import append_to, kept_rows, seed_rows
from graphmem.core.tokens import node_tokens

EDGE_MODES = ("onehot", "phase1", "table", "inductive")
NUM_PAIR_FEATURES = 22  # width of PairTable.raw for 4 relations (see pair_features)
MOVE_BLOCK = 1 << 16  # pair ids renumbered at once after a growth (the temporary stays in the cache)
SEQUENCE_KEYS = ("session", "paragraph")  # metadata naming a node's sequence ...
ORDER_KEYS = ("position", "sent_idx")  # ... and its place in it
SPEAKERS, SEQUENCES = "models.edge_encoder.speakers", "models.edge_encoder.sequences"  # their kept rows
log = logging.getLogger(__name__)


@dataclass
class PairTable:
    """Distinct node pairs ``i -> j`` (``i != j``) of a graph in CSR order, with their features.

    Attributes:
        rowptr: ``[N + 1]``: the pairs out of node ``i`` are ``rowptr[i]:rowptr[i+1]``, by target.
        src, dst: ``[P]`` endpoints.
        edge: ``[P]`` the smallest edge id of the pair (reported as the traversed edge).
        edge_pair: ``[E]`` the pair of every edge (``-1`` for self loops); ``None`` in a table grown by appends
            while nothing has read it (:func:`edge_pairs` makes it, and the tables grown after that keep it).
        raw: ``[P, F]`` the inductive features ``a_ij`` (module docstring); its first columns are
            :attr:`onehot` and :attr:`phase1`, which are views of them (held once, copied once when the table grows).
        in_degree: ``[N]`` the pairs into each node (what a growth reads to find them without a scan; ``None``:
            not made, as in a table saved without it).
    """

    rowptr: Tensor
    src: Tensor
    dst: Tensor
    edge: Tensor
    edge_pair: Tensor | None
    raw: Tensor
    in_degree: Tensor | None = None

    OPTIONAL = ("edge_pair", "in_degree")
    """the fields that may be ``None``"""

    @property
    def onehot(self) -> Tensor:
        """``[P, 4]`` relation multi-hot (relations past the 4th share the last column): ``raw[:, :4]``."""
        return self.raw[:, :EDGE_FEATURE_DIM]

    @property
    def phase1(self) -> Tensor:
        """``[P, 4]`` Phase-1 features ``e0_ij`` (max over the pair's edges): ``raw[:, 4:8]``."""
        return self.raw[:, EDGE_FEATURE_DIM : 2 * EDGE_FEATURE_DIM]

    @property
    def num_pairs(self) -> int:
        return int(self.dst.numel())

    def max_degree(self) -> int:
        return int(self.rowptr.diff().max()) if self.rowptr.numel() > 1 else 0

    def to(self, device: str | torch.device) -> PairTable:
        fields = (getattr(self, f) for f in self.__dataclass_fields__)
        return PairTable(*(None if v is None else v.to(device) for v in fields))


def _speakers(graph: MemoryGraph) -> tuple[Tensor, Tensor]:
    """``[N]`` speaker codes and ``[N]`` known flags from ``metadata['speaker']`` (codes in order of first
    appearance, kept across appends: :func:`graphmem.core.rows.kept_rows`)."""

    def extend(state, rows: range):
        codes, code = state if state else ({}, np.empty(0, np.int64))
        new = []
        for i in rows:
            m = graph.metadata[i]
            new.append(codes.setdefault(str(m["speaker"]), len(codes)) if m.get("speaker") else -1)
        return codes, append_to(code, rows.start, np.asarray(new, dtype=np.int64))

    code = kept_rows(graph, SPEAKERS, [graph.metadata], extend)[1]
    code = torch.from_numpy(code[: graph.num_nodes])
    return code, code >= 0


def _sequences(graph: MemoryGraph) -> tuple[Tensor, Tensor]:
    """``[N]`` sequence codes (``-1``: none) and ``[N]`` orders (NaN: none) from the node metadata (codes in order
    of first appearance, kept across appends: :func:`graphmem.core.rows.kept_rows`)."""

    def extend(state, rows: range):
        codes, group, order = state if state else ({}, np.empty(0, np.int64), np.empty(0, np.float64))
        new_group, new_order = [], []
        for i in rows:
            m = graph.metadata[i]
            g = next((m[k] for k in SEQUENCE_KEYS if m.get(k) is not None), None)
            o = next((m[k] for k in ORDER_KEYS if isinstance(m.get(k), (int, float))), None)
            new_group.append(-1 if g is None else codes.setdefault(str(g), len(codes)))
            new_order.append(math.nan if o is None else float(o))
        group = append_to(group, rows.start, np.asarray(new_group, dtype=np.int64))
        return codes, group, append_to(order, rows.start, np.asarray(new_order, dtype=np.float64))

    _, group, order = kept_rows(graph, SEQUENCES, [graph.metadata], extend)
    n = graph.num_nodes
    return torch.from_numpy(group[:n]), torch.from_numpy(order[:n])


def build_pair_table(graph: MemoryGraph) -> PairTable:
    """:class:`PairTable` of ``graph`` (uncached; see :func:`pair_table`)."""
    n, e = graph.num_nodes, graph.num_edges
    src, dst = graph.edge_index
    keep = src != dst
    key = src * max(n, 1) + dst
    uniq, inverse = torch.unique(key[keep], return_inverse=True)  # sorted: CSR order by (src, dst)
    p = uniq.numel()
    edge_pair = torch.full((e,), -1, dtype=torch.long)
    edge_pair[keep] = inverse
    ids = torch.arange(e)[keep]
    ps, pd = uniq // max(n, 1), uniq % max(n, 1)
    rep = torch.full((p,), e, dtype=torch.long).scatter_reduce(0, inverse, ids, "amin")
    rel = nn.functional.one_hot(graph.edge_type[keep].clamp(max=EDGE_FEATURE_DIM - 1), EDGE_FEATURE_DIM).float()
    pair_rows = inverse[:, None].expand(-1, EDGE_FEATURE_DIM)
    onehot = torch.zeros(p, EDGE_FEATURE_DIM).scatter_reduce_(0, pair_rows, rel, "amax")
    count = torch.zeros(p).index_add_(0, inverse, torch.ones(inverse.numel()))
    phase1 = torch.full((p, EDGE_FEATURE_DIM), -math.inf).scatter_reduce_(
        0, pair_rows, graph.edge_attr_init[keep].float(), "amax"
    )
    phase1 = torch.where(torch.isfinite(phase1), phase1, torch.zeros_like(phase1))
    rowptr = torch.zeros(n + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(ps, minlength=n), 0)
    raw = pair_features(graph, ps, pd, onehot, phase1, count, rowptr, room=True)
    # every field with room to grow, each copied on its own: a memory's next read grows them in place
    ps, pd, rep, edge_pair = with_room(ps), with_room(pd), with_room(rep), with_room(edge_pair)
    return PairTable(rowptr, ps, pd, rep, edge_pair, raw, with_room(torch.bincount(pd, minlength=n)))


def pair_features(
    graph: MemoryGraph,
    src: Tensor,
    dst: Tensor,
    onehot: Tensor,
    phase1: Tensor,
    count: Tensor,
    rowptr: Tensor,
    room: bool = False,
) -> Tensor:
    """``[P, F]`` inductive features ``a_ij`` of the pairs ``src -> dst`` (module docstring); the first columns are
    ``onehot`` and ``phase1`` as given, which :class:`PairTable` reads back as views. With ``room`` (CPU), written
    into a buffer with spare rows (:func:`~graphmem.core.csr.empty_with_room`)."""
    t = graph.timestamps.double()
    known = torch.isfinite(t[src]) & torch.isfinite(t[dst])
    dt = torch.where(known, t[dst] - t[src], torch.zeros_like(t[src]))
    spk, spk_known = _speakers(graph)
    both = spk_known[src] & spk_known[dst]
    group, order = _sequences(graph)
    same = (group[src] == group[dst]) & (group[src] >= 0)
    ordered = same & torch.isfinite(order[src]) & torch.isfinite(order[dst])
    do = torch.where(ordered, order[dst] - order[src], torch.zeros_like(order[src]))
    o_dst = torch.where(torch.isfinite(order[dst]), order[dst], torch.zeros_like(order[dst]))
    deg_src, deg_dst = _degree_columns(rowptr, src, dst)
    tokens = node_tokens(graph).float()
    cols = [
        onehot,
        phase1,
        (count / len(graph.relations))[:, None],
        (torch.log1p(dt.abs()) / 10.0).float()[:, None],
        known.float()[:, None],
        torch.sign(dt).float()[:, None],
        (both & (spk[src] != spk[dst])).float()[:, None],
        both.float()[:, None],
        same.float()[:, None],
        torch.sign(do).float()[:, None],
        (torch.log1p(do.abs()) / 3.0).float()[:, None],
        (torch.log1p(o_dst.clamp(min=0)) / 3.0).float()[:, None],
        torch.isfinite(order[dst]).float()[:, None],
        deg_src[:, None],
        deg_dst[:, None],
        (torch.log1p(tokens[dst]) / 5.0)[:, None],
    ]
    if not room or src.device.type != "cpu":
        return torch.cat(cols, 1)
    return torch.cat(cols, 1, out=empty_with_room(src.numel(), sum(c.shape[1] for c in cols)))


DEGREE_COLUMNS = slice(19, 21)
"""the columns of :func:`pair_features` that read the pair count of a node other than the pair's own"""


def _degree_columns(rowptr: Tensor, src: Tensor, dst: Tensor) -> tuple[Tensor, Tensor]:
    """``log(1 + deg_i) / 4`` and ``log(1 + deg_j) / 4`` of the pairs ``src -> dst`` (``deg``: pairs out of a node)."""
    deg = rowptr.diff().float()
    return torch.log1p(deg[src]) / 4.0, torch.log1p(deg[dst]) / 4.0


@dataclass
class PairGrowth:
    """How a graph's :class:`PairTable` was made from the one before it (:func:`grow_pair_table`): the new pairs
    went in before the earlier table's pairs ``at`` (ascending), so each earlier pair keeps its order and moves on
    by the new pairs ahead of it; the pairs ``changed`` (ascending, in the new table) are new or have new
    features, every other row is the row it had. ``nodes_before``: the nodes the earlier table had; ``before``
    and ``after``: the serial numbers of the two tables (:func:`pair_serial`)."""

    at: Tensor
    changed: Tensor
    nodes_before: int
    before: int = -1
    after: int = -1

    def merge(self, held: dict[str, Tensor], name: str, new: Tensor) -> Tensor:
        """Rows of the grown table from the earlier table's rows ``held[name]`` (taken out of ``held``: moved within
        their own buffer when nothing else holds them, :func:`graphmem.core.csr.grow_rows`) and the new pairs'
        rows ``new``."""
        return grow_rows(held, name, self.at, new)

    def move(self, pairs: Tensor) -> None:
        """Replace the earlier pair ids ``pairs`` (``-1``: none, kept) by their new ids, in place, a block at a time."""
        for block in pairs.split(MOVE_BLOCK):
            block += torch.bucketize(block, self.at, right=True)  # -1 stays: every insertion point is >= 0


def grow_pair_table(
    old: dict[str, Tensor | None], graph: MemoryGraph, n0: int, e0: int
) -> tuple[PairTable, PairGrowth] | None:
    """:func:`build_pair_table` of ``graph``, made from the fields ``old`` of the table of its first ``n0`` nodes
    and ``e0`` edges (which it still holds unchanged: :meth:`~graphmem.core.graph.MemoryGraph.appended_since`),
    with the rows that did not change kept, so that a read after a write does not sort and featurise every pair
    again; ``None`` when an appended edge joins a pair the table holds (then the table is made anew). Each field
    is taken out of ``old`` as it grows: moved within its own buffer when nothing else holds it, else copied
    (:func:`graphmem.core.csr.grow_rows`), so a table no one else holds is let go of field by field.

    The rows are those :func:`build_pair_table` gives: the new pairs are merged into the ``(src, dst)`` order,
    and a pair's features are computed again when it is new or when one of its nodes gained out-pairs (the degree
    columns, :data:`DEGREE_COLUMNS`). The pairs into such a node are found as the reverses of its out-pairs when
    their count is its ``in_degree`` (a graph whose edges go both ways), else by a scan of every pair. Every
    edge's pair (``edge_pair``, renumbered past the new pairs) is kept only once something has read it
    (:func:`edge_pairs`); else the grown table holds none. The moves are linear in the pairs, at the speed of
    memory; the rest is linear in what was added."""
    n, e = graph.num_nodes, graph.num_edges
    src, dst = graph.edge_index[:, e0:]
    keep = src != dst
    fresh, inverse = torch.unique(src[keep] * n + dst[keep], return_inverse=True)
    ps, pd = fresh // n, fresh % n
    p0, k = old["src"].numel(), fresh.numel()
    at = insertion_points(old["rowptr"], old["dst"], ps, pd, ties_after=False)  # among the earlier pairs
    held = at < p0
    if bool(((old["src"][at[held]] == ps[held]) & (old["dst"][at[held]] == pd[held])).any()):
        return None  # a pair the table holds gained an edge: its count and features are made anew
    ids = torch.arange(e0, e)[keep]
    rep = torch.full((k,), e, dtype=torch.long).scatter_reduce(0, inverse, ids, "amin")
    rel = nn.functional.one_hot(graph.edge_type[e0:][keep].clamp(max=EDGE_FEATURE_DIM - 1), EDGE_FEATURE_DIM).float()
    rows = inverse[:, None].expand(-1, EDGE_FEATURE_DIM)
    onehot = torch.zeros(k, EDGE_FEATURE_DIM).scatter_reduce_(0, rows, rel, "amax")
    count = torch.zeros(k).index_add_(0, inverse, torch.ones(inverse.numel()))
    phase1 = torch.full((k, EDGE_FEATURE_DIM), -math.inf).scatter_reduce_(
        0, rows, graph.edge_attr_init[e0:][keep].float(), "amax"
    )
    phase1 = torch.where(torch.isfinite(phase1), phase1, torch.zeros_like(phase1))
    rowptr = grown_rowptr(old.pop("rowptr"), ps, n)
    growth = PairGrowth(at, torch.empty(0, dtype=torch.long), n0)
    placed = at + torch.arange(k)
    edge_pair = None
    if old.get("edge_pair") is not None and graph.grown.get(EDGE_PAIRS_READ):
        appended = torch.full((e - e0,), -1, dtype=torch.long)
        appended[keep] = placed[inverse]
        edge_pair = append_rows(old, "edge_pair", appended)
        growth.move(edge_pair[:e0])
    old.pop("edge_pair", None)
    if old.get("in_degree") is None:
        old["in_degree"] = torch.bincount(old["dst"], minlength=n0)
    in_degree = append_rows(old, "in_degree", torch.zeros(n - n0, dtype=torch.long))
    in_degree.index_add_(0, pd, torch.ones_like(pd))
    out_src, out_dst = growth.merge(old, "src", ps), growth.merge(old, "dst", pd)
    raw = growth.merge(old, "raw", pair_features(graph, ps, pd, onehot, phase1, count, rowptr))
    grew = torch.unique(ps[ps < n0])  # earlier nodes with new out-pairs: the degree columns of their pairs change
    out_of = csr_positions(rowptr, grew)[1]
    into = _reverse_pairs(rowptr, out_dst, grew, in_degree)
    if into is None:  # some pair into them is not the reverse of one out of them: a scan
        into = torch.zeros(n, dtype=torch.bool).index_fill_(0, grew, True)[out_dst].nonzero().flatten()
    growth.changed = changed = torch.unique(torch.cat([placed, out_of, into]))
    raw[changed, DEGREE_COLUMNS] = torch.stack(_degree_columns(rowptr, out_src[changed], out_dst[changed]), 1)
    edge = growth.merge(old, "edge", rep)
    return PairTable(rowptr, out_src, out_dst, edge, edge_pair, raw, in_degree), growth


def _reverse_pairs(rowptr: Tensor, dst: Tensor, nodes: Tensor, in_degree: Tensor) -> Tensor | None:
    """The rows of the pairs ``w -> u`` into ``nodes`` that reverse a pair ``u -> w`` out of them (a binary search
    of ``u`` in each ``w``'s row); ``None`` when they are fewer than the pairs into some node (``in_degree``)."""
    seg, pos = csr_positions(rowptr, nodes)
    u, w = nodes[seg], dst[pos]
    at = insertion_points(rowptr, dst, w, u, ties_after=False)
    found = (at < rowptr[w + 1]) & (dst[at.clamp(max=max(dst.numel() - 1, 0))] == u)
    got = torch.bincount(seg[found], minlength=nodes.numel())
    return at[found] if torch.equal(got, in_degree[nodes]) else None


EDGE_PAIRS_READ = "models.edge_encoder.edge_pairs_read"
"""set in ``graph.grown`` once :func:`edge_pairs` was read: the graph's grown tables keep every edge's pair from then"""


def edge_pairs(graph: MemoryGraph, table: PairTable) -> Tensor:
    """``[E]`` ``table.edge_pair`` of ``graph``'s table, made when the table holds none (a binary search of each edge's
    ``(src, dst)`` among the pairs, sorted by them) and kept in it; the tables grown from it keep it too."""
    if table.edge_pair is None:
        n, (src, dst) = max(graph.num_nodes, 1), graph.edge_index
        keep = src != dst
        out = torch.full((graph.num_edges,), -1, dtype=torch.long)
        out[keep] = torch.searchsorted(table.src * n + table.dst, src[keep] * n + dst[keep])
        table.edge_pair = out
    graph.grown[EDGE_PAIRS_READ] = True
    return table.edge_pair


PAIR_TABLE = "models.edge_encoder.pair_table"
_SERIALS = itertools.count()


def pair_table(graph: MemoryGraph) -> PairTable:
    """:func:`build_pair_table`, kept in ``graph.derived`` while its edges, Phase-1 features and timestamps stay.

    The last table made is also kept in ``graph.grown`` with a serial number: when the graph has only grown
    since (:meth:`~graphmem.core.graph.MemoryGraph.appended_since`), the new table is made from it
    (:func:`grow_pair_table`, which lets go of it as it goes), and how is kept for the tables made from the
    pair table in turn (:func:`pair_growth`). A table saved beside the graph (:func:`seed_pair_table`) is read
    the first time one is needed, and taken as it is, or grown, when the graph is the same or has only grown."""
    deps = (graph.edge_index, graph.edge_type, graph.edge_attr_init, graph.timestamps)
    table = graph.derived.get(PAIR_TABLE, deps)
    if table is not None:
        return table
    held, grown, serial = graph.grown.pop(PAIR_TABLE, None), None, next(_SERIALS)
    saved = graph.grown.pop(SAVED_PAIR_TABLE, None)
    if held is None and saved is not None:
        mark, read = saved
        same = mark == graph.log_mark()
        table = read() if same or graph.appended_since(mark) else None
        if table is not None:
            read_serial = serial if same else next(_SERIALS)
            graph.grown[READ_PAIR_TABLE] = (read_serial, table.rowptr.numel() - 1, table.num_pairs)
            if same:
                graph.grown[PAIR_TABLE] = (mark, table, None, serial)
                return graph.derived.put(PAIR_TABLE, table, deps)
            held = (mark, table, None, read_serial)
        table = None
    if held is not None and graph.appended_since(held[0]):
        (_, n0, e0), old, before = held[0], vars(held[1]).copy(), held[3]
        held = None  # the fields in ``old`` are the earlier table's last hold here
        grown = grow_pair_table(old, graph, n0, e0)
        if grown is not None:
            grown[1].before, grown[1].after = before, serial
    del held
    table, growth = grown if grown is not None else (build_pair_table(graph), None)
    graph.grown[PAIR_TABLE] = (graph.log_mark(), table, growth, serial)
    return graph.derived.put(PAIR_TABLE, table, deps)


SAVED_PAIR_TABLE = "models.edge_encoder.saved_pair_table"
READ_PAIR_TABLE = "models.edge_encoder.read_pair_table"
"""``(serial, nodes, pairs)`` of the table :func:`pair_table` read from a file (:func:`seed_pair_table`): what tensors
saved beside it are for (:func:`pair_serial`, :class:`PairGrowth`'s ``before``)"""


@dataclass
class SavedPairTable:
    """A graph's current :func:`pair_table` and the per-node codes its features were made from (speakers, and
    sequences with the orders in them, :func:`_speakers`, :func:`_sequences`): what a graph read back later, the
    same one, needs in order not to make them again (:func:`saved_pair_table`, :func:`seed_pair_table`)."""

    table: PairTable | None
    codes: dict[str, dict[str, int]]  # "speakers", "sequences": each code's name
    speaker: np.ndarray  # [N] int64 (-1: none)
    group: np.ndarray  # [N] int64 (-1: none)
    order: np.ndarray  # [N] float64 (NaN: none)

    SMALL = ("speaker", "group", "order")
    """the per-node arrays (read at once); the table's fields are read when first needed"""


def saved_pair_table(graph: MemoryGraph) -> SavedPairTable | None:
    """The graph's pair table, with its per-node codes, when one is kept for its present edges and features, or
    for an earlier graph that has only grown since (then grown to this one first, :func:`pair_table`); ``None``
    when none is."""
    deps = (graph.edge_index, graph.edge_type, graph.edge_attr_init, graph.timestamps)
    table = graph.derived.get(PAIR_TABLE, deps)
    if table is None:
        held = graph.grown.get(PAIR_TABLE)
        if held is None or not graph.appended_since(held[0]):
            return None
        del held
        table = pair_table(graph)
    _speakers(graph), _sequences(graph)  # up to date: each adds nothing when kept
    n = graph.num_nodes
    speakers, speaker = graph.indexes[SPEAKERS][3]
    sequences, group, order = graph.indexes[SEQUENCES][3]
    codes = {"speakers": dict(speakers), "sequences": dict(sequences)}
    return SavedPairTable(table, codes, speaker[:n], group[:n], order[:n])


def seed_pair_table(graph: MemoryGraph, saved: SavedPairTable, read: Callable[[], dict[str, Any] | None]) -> None:
    """Take ``saved``'s codes (saved with this very graph) as the graph's speaker and sequence codes, and ``read``
    as the way to its pair table: the fields of :class:`PairTable` as arrays, read the first time :func:`pair_table`
    needs the table (``None``, or fields that do not fit the graph as it was: the table is made instead). Raises
    ``ValueError`` when the codes do not fit the graph."""
    n, e = graph.num_nodes, graph.num_edges
    arrays = (saved.speaker, saved.group, saved.order)
    if any(a.shape != (n,) for a in arrays) or set(saved.codes) != {"speakers", "sequences"}:
        raise ValueError(f"saved speaker and sequence codes of other sizes than the graph's {n} nodes")
    for a, codes in ((saved.speaker, saved.codes["speakers"]), (saved.group, saved.codes["sequences"])):
        if n and (a.min() < -1 or a.max() >= len(codes)) or sorted(codes.values()) != list(range(len(codes))):
            raise ValueError("saved speaker or sequence codes out of their range")
    seed_rows(graph, SPEAKERS, [graph.metadata], (dict(saved.codes["speakers"]), saved.speaker.copy()))
    sequences = (dict(saved.codes["sequences"]), saved.group.copy(), saved.order.copy())
    seed_rows(graph, SEQUENCES, [graph.metadata], sequences)

    def table() -> PairTable | None:
        fields = read()
        if fields is None:
            return None
        out = PairTable(**{k: held_rows(fields[k]) if k in fields else None for k in PairTable.__dataclass_fields__})
        p = out.src.shape[0]
        sizes = (out.rowptr.shape, out.raw.shape, out.dst.shape, out.edge.shape)
        types = [getattr(out, k).dtype for k in ("rowptr", "src", "dst", "edge", "raw")]
        optional = ((out.edge_pair, (e,)), (out.in_degree, (n,)))  # a table may be saved without them
        if (
            sizes != ((n + 1,), (p, NUM_PAIR_FEATURES), (p,), (p,))
            or types != [torch.long] * 4 + [torch.float32]
            or any(t is not None and (t.shape != shape or t.dtype != torch.long) for t, shape in optional)
        ):
            log.warning("a saved pair table does not fit its graph (%d nodes, %d edges): it is made again", n, e)
            return None
        if int(out.rowptr[-1]) != p:
            log.warning("a saved pair table's rows do not add up to its %d pairs: it is made again", p)
            return None
        return out

    graph.grown[SAVED_PAIR_TABLE] = (graph.log_mark(), table)


def pair_growth(graph: MemoryGraph) -> PairGrowth | None:
    """How the graph's last :func:`pair_table` was made from the one before it (``None``: made anew)."""
    held = graph.grown.get(PAIR_TABLE)
    return held[2] if held is not None else None


def pair_serial(graph: MemoryGraph, pairs: PairTable) -> int | None:
    """The serial number of the graph's last :func:`pair_table` when ``pairs`` is it (or a copy sharing its pair
    ends), else ``None``."""
    held = graph.grown.get(PAIR_TABLE)
    return held[3] if held is not None and held[1].src is pairs.src else None


class PerEdgeResidual(nn.Module):
    """HAGE's per-edge trainable features as a zero-initialised residual ``δ`` over named graphs.

    Row ``offsets[g] + k`` belongs to edge ``k`` of graph ``g``; a pair's residual is the mean over
    its edges. Graphs it does not hold get ``δ = 0``.

    Args:
        graphs: graphs by name, or their edge counts by name (the counts fix the rows).
        dim: feature size (default: 4).
    """

    def __init__(self, graphs: Mapping[str, MemoryGraph | int], dim: int = EDGE_FEATURE_DIM):
        super().__init__()
        self.names = list(graphs)
        sizes = [g if isinstance(g, int) else g.num_edges for g in graphs.values()]
        counts = torch.tensor(sizes, dtype=torch.long)
        offsets = torch.zeros(len(self.names) + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(counts, 0)
        self.register_buffer("offsets", offsets)
        self.delta = nn.Parameter(torch.zeros(int(offsets[-1]), dim))
        self._row = {n: i for i, n in enumerate(self.names)}

    def edge_rows(self, names: list[str | None], edge_counts: list[int]) -> Tensor:
        """``[sum(edge_counts)]`` row of each edge of the listed graphs (``-1`` where not held)."""
        out = []
        for name, count in zip(names, edge_counts):
            i = self._row.get(name) if name is not None else None
            if i is None or int(self.offsets[i + 1] - self.offsets[i]) != count:
                out.append(torch.full((count,), -1, dtype=torch.long))
            else:
                out.append(torch.arange(int(self.offsets[i]), int(self.offsets[i + 1])))
        return torch.cat(out) if out else torch.empty(0, dtype=torch.long)

    def pair_residual(self, edge_rows: Tensor, edge_pair: Tensor, num_pairs: int) -> Tensor:
        """``[P, dim]`` mean ``δ`` over the edges of each pair (0 for pairs of graphs not held)."""
        held = (edge_rows >= 0) & (edge_pair >= 0)
        rows, pairs = edge_rows[held], edge_pair[held]
        total = self.delta.new_zeros(num_pairs, self.delta.shape[1]).index_add(0, pairs, self.delta[rows])
        count = self.delta.new_zeros(num_pairs).index_add(0, pairs, torch.ones_like(pairs, dtype=self.delta.dtype))
        return total / count.clamp(min=1)[:, None]


class EdgeEncoder(nn.Module):
    """``e_ij`` for the pairs of any graph (module docstring).

    Args:
        dim: node embedding size ``D``.
        mode: ``onehot``, ``phase1``, ``table`` or ``inductive`` (default: ``"inductive"``).
        hidden: width of ``f`` (default: 32).
        rank: rank of the embedding interaction ``(P x_i) ⊙ (P x_j)`` (0 disables it) (default: 8).
        residual: graphs (or edge counts) by name of a :class:`PerEdgeResidual` (needed for
            ``table``; optional for ``inductive``) (default: None).
    """

    def __init__(
        self,
        dim: int,
        mode: str = "inductive",
        hidden: int = 32,
        rank: int = 8,
        residual: Mapping[str, MemoryGraph | int] | None = None,
    ):
        super().__init__()
        if mode not in EDGE_MODES:
            raise ValueError(f"edge encoder mode {mode!r} is not one of {EDGE_MODES}")
        if mode == "table" and residual is None:
            raise ValueError("edge encoder mode 'table' needs the graphs of its per-edge table (residual=...)")
        self.mode, self.rank = mode, rank if mode == "inductive" else 0
        self.residual = PerEdgeResidual(residual) if residual is not None and mode in ("table", "inductive") else None
        if mode == "inductive":
            if self.rank:
                self.project = nn.Linear(dim, self.rank, bias=False)
            self.f = nn.Sequential(
                nn.Linear(NUM_PAIR_FEATURES + self.rank, hidden), nn.ReLU(), nn.Linear(hidden, EDGE_FEATURE_DIM)
            )
            nn.init.zeros_(self.f[2].weight)
            nn.init.zeros_(self.f[2].bias)

    @property
    def learned(self) -> bool:
        return self.mode in ("table", "inductive")

    def node_projection(self, x_unit: Tensor) -> Tensor | None:
        """``[N, rank]`` ``P x`` of every node (``None`` without the embedding interaction)."""
        return self.project(x_unit) if self.rank else None

    def pair_delta(self, table: PairTable, edge_rows: Tensor | None) -> Tensor | None:
        """``[P, 4]`` per-edge residual ``δ`` of every pair of ``table`` (``None`` without a residual table).

        ``edge_rows`` (``[E]``, :meth:`PerEdgeResidual.edge_rows`) locates the rows of the table's edges;
        without it (a graph the table does not hold) there is no residual.
        """
        if self.residual is None or edge_rows is None:
            return None
        return self.residual.pair_residual(edge_rows, table.edge_pair, table.num_pairs)

    def forward(
        self, table: PairTable, pairs: Tensor, px: Tensor | None = None, delta: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(e [C, 4], e0 [C, 4])`` for pair ids ``pairs`` ``[C]`` of ``table``.

        ``px`` is :meth:`node_projection` of the table's nodes (needed when ``rank > 0``), ``delta``
        :meth:`pair_delta` (``None``: no residual).
        """
        e0 = table.phase1[pairs]
        if self.mode == "onehot":
            return table.onehot[pairs], table.onehot[pairs]
        e = e0
        if self.mode == "inductive":
            parts = [table.raw[pairs]]
            if self.rank:
                parts.append(px[table.src[pairs]] * px[table.dst[pairs]])
            e = e + self.f(torch.cat(parts, -1))
        if delta is not None:
            e = e + delta[pairs]
        return e, e0

    def config(self) -> dict:
        return {"mode": self.mode, "rank": self.rank}
