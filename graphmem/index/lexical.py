"""Okapi BM25 over a graph's node texts: one inverted index per graph, kept in step with its mutations.

Tokenizer (:func:`tokenize`, ``TOKENIZER_NAME``): the text is lowercased (``str.lower``); a token is
a maximal run of Unicode letters and digits (regex ``[^\\W_]+``: punctuation, whitespace and ``_``
separate tokens, so ``"don't"`` gives ``don``, ``t`` and ``"2023-05-08"`` gives ``2023``, ``05``,
``08``); tokens in :data:`STOP_WORDS` (English function words and single letters) are dropped. No
stemming: ``painting`` and ``paint`` are different terms.

Scoring: rows are node rows, the document of row ``d`` is the token list of its text, ``|d|`` its
length, ``avgdl`` the mean length over the ``N`` rows and ``df(t)`` the number of rows holding ``t``::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))         (Lucene's non-negative IDF)
    score(q, d) = sum over distinct t in q of
                  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

with ``k1 = 1.5``, ``b = 0.75`` by default. A query term counts once however often it repeats, so
``max_score(q) = sum_t idf(t) * (k1 + 1)`` over the query's distinct in-vocabulary terms (those held
by at least one row) bounds every score of ``q`` from above. ``bm25s``'s ``lucene`` variant gives these
scores divided by ``k1 + 1`` (the same ranking); ``scripts/benchmarks/bench_lexical.py`` checks both against a hand
computation.

Storage: the rows' term ids and frequencies in CSR form (``indptr``, ``terms`` sorted within each
row, ``tf``). :meth:`BM25Index.scores` finds ``tf(t, d)`` by binary search in the sorted keys
``d << 32 | t``, so scoring given rows costs ``O(len(rows) * |q| * log nnz)``; :meth:`BM25Index.top_k`
reads the postings of the query terms only (the rows that hold none score 0 and are not returned), and
:meth:`BM25Index.rank_bounded` only their heads: postings are ordered by weight descending within each term,
and the read stops once the unread postings' bound falls under the k-th best score (exact top-k).
A weight is computed when it is read, since ``N`` and ``avgdl`` move every weight. :meth:`add` appends
(the arrays grow at their end, and the new entries join per-term lists beside the impact order, which is
made anew once they exceed an eighth of it: amortised ``O(new entries)``); :meth:`revise` and
:meth:`remove` rewrite the arrays and the derived ones are made on the next query (``O(nnz)``).

A graph's index lives in ``graph.indexes`` (:func:`bm25_for`); :meth:`BM25Index.sync` replays the
graph's :attr:`~graphmem.core.graph.MemoryGraph.node_log` (``add``, ``text``, ``remove``) before each use,
and rebuilds when the texts changed in a way the log does not explain. Its files (the arrays, the
vocabulary and :func:`text_fingerprint`, no pickle) are :mod:`graphmem.store.indexes`'.
"""

from __future__ import annotations

import hashlib
import re
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.core.rows import append_to

TOKENIZER_NAME = "lower-alnum-stop-v1"
FORMAT_VERSION = 1
_WORD = re.compile(r"[^\W_]+")
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves b c d e f g h j k l m n o p q r s t u v w x y z""".split()
)


class LexicalIndexError(ValueError):
    """A BM25 index file or setting is invalid; the message names the file or field."""


def tokenize(text: str) -> list[str]:
    """Lowercased runs of letters and digits, stop words dropped (module docstring)."""
    return [t for t in _WORD.findall(text.lower()) if t not in STOP_WORDS]


def text_fingerprint(graph: MemoryGraph) -> str:
    """SHA-256 of the node ids and texts in row order: which graph a BM25 index is for."""
    h = hashlib.sha256()
    for nid, text in zip(graph.node_ids, graph.texts):
        h.update(nid.encode() + b"\x1f" + text.encode() + b"\x1e")
    return h.hexdigest()


class _Derived:
    """What scoring reads beside the CSR: per-term document frequencies, per-row lengths, the sorted row-term keys,
    and the postings, impact-ordered up to ``base_nnz`` entries (see :meth:`BM25Index._d`) and, for the entries
    appended since, one buffer of entry positions per term. Arrays that grow are capacity-doubling buffers read
    through views (``df``, ``length``, ``keys``)."""

    def __init__(self, index: BM25Index, order: np.ndarray | None = None):
        n, v, terms, tf = index.num_rows, len(index.tokens), index.terms, index.tf
        row = np.repeat(np.arange(n, dtype=np.int64), np.diff(index.indptr))
        self.rows, self.nnz, self.vocab = n, int(terms.size), v
        self._df = np.bincount(terms, minlength=v).astype(np.int64)
        self._length = np.bincount(row, weights=tf, minlength=n).astype(np.int64)  # |d|, in whole tokens
        self.total = int(self._length.sum())
        self._keys = (row << KEY_SHIFT) | terms  # ascending: CSR order is (row, term)
        self._idf_at: tuple | None = None
        self.base(index, row, order)

    df = property(lambda self: self._df[: self.vocab], doc="``[V]`` rows holding each term")
    length = property(lambda self: self._length[: self.rows], doc="``[N]`` each row's length ``|d|``")
    keys = property(lambda self: self._keys[: self.nnz], doc="``[nnz]`` ``row << KEY_SHIFT | term``, ascending")

    @property
    def avgdl(self) -> float:
        return self.total / self.rows if self.rows and self.total else 1.0

    def idf(self) -> np.ndarray:
        """``[V]`` ``idf(t)`` of every vocabulary row for the current ``N`` (made once per state)."""
        if self._idf_at != (self.rows, self.nnz):
            self._idf, self._idf_at = np.log1p((self.rows - self.df + 0.5) / (self.df + 0.5)), (self.rows, self.nnz)
        return self._idf

    def base(self, index: BM25Index, row: np.ndarray | None = None, order: np.ndarray | None = None) -> None:
        """Impact-order every entry: postings by term, each by its weight now descending (row ascending on ties),
        with the suffix maxima of ``tf`` and minima of ``|d|`` that :meth:`BM25Index.bound` reads. ``order``: that
        order of the entries, as :meth:`order` gave it for these entries (saved with the index), not made again."""
        n, terms, tf = self.rows, index.terms, index.tf
        if row is None:
            row = np.repeat(np.arange(n, dtype=np.int64), np.diff(index.indptr))
        self.base_avgdl = self.avgdl  # the mean length the order is made at (what bound() scales from)
        if order is None:
            order = np.lexsort((-index.entry_weights(np.arange(terms.size), row, self), terms))
        self.base_nnz = int(terms.size)
        self.post_ptr = np.concatenate([[0], np.cumsum(np.bincount(terms, minlength=self.vocab))]).astype(np.int64)
        self.post_row = row[order]
        # each posting's count and record length beside it, so that reading postings in order reads memory in order
        self.post_tf, self.post_len = tf[order].astype(np.int32), self.length[self.post_row].astype(np.int32)
        # within each term's postings, a running maximum over the reversed postings that restarts at each term:
        # the term's rank times a bound above every value is added first (terms descend along the reversal)
        seg = terms[order][::-1]
        step = int(tf.max(initial=0)) + 1
        self.tf_max = (np.maximum.accumulate(self.post_tf[::-1] + seg * step) - seg * step)[::-1].copy()
        step = int(self.length.max(initial=0)) + 1
        back = np.maximum.accumulate(seg * step - self.post_len[::-1])
        self.len_min = (seg * step - back)[::-1].copy()
        # term -> [positions buffer, count]: the entries appended after the order, by position
        self.delta: dict[int, list] = {}

    def order(self) -> np.ndarray:
        """``[base_nnz]`` the impact order as entry positions (what :meth:`base` sorted them into), recovered from
        the postings: each posting's ``(row, term)`` key found in the sorted keys."""
        terms = np.repeat(np.arange(self.post_ptr.size - 1, dtype=np.int64), np.diff(self.post_ptr))
        return np.searchsorted(self.keys, (self.post_row << KEY_SHIFT) | terms)

    def appended(self, index: BM25Index, rows: int, new_terms: np.ndarray, new_tf: np.ndarray) -> None:
        """Take the ``rows`` rows just appended to ``index``, whose entries are ``new_terms`` / ``new_tf``."""
        v = len(index.tokens)
        self._df = append_to(self._df, self.vocab, np.zeros(v - self.vocab, np.int64))
        self.vocab = v
        np.add.at(self.df, new_terms, 1)  # a row holds each of its terms once
        row = np.repeat(np.arange(rows, dtype=np.int64), np.diff(index.indptr)[self.rows :])
        lengths = np.bincount(row, weights=new_tf, minlength=rows).astype(np.int64)
        self._length = append_to(self._length, self.rows, lengths)
        self.total += int(new_tf.sum())
        self._keys = append_to(self._keys, self.nnz, ((row + self.rows) << KEY_SHIFT) | new_terms)
        order = np.argsort(new_terms, kind="stable")  # the new entries term by term, each term's by position
        terms, pos = new_terms[order], order + self.nnz
        starts = np.flatnonzero(np.diff(terms, prepend=-1))
        for t, a, b in zip(terms[starts].tolist(), starts.tolist(), [*starts[1:].tolist(), terms.size]):
            held = self.delta.get(t)
            if held is None:
                self.delta[t] = [pos[a:b].copy(), b - a]
            else:
                held[0], held[1] = append_to(held[0], held[1], pos[a:b]), held[1] + b - a
        self.rows, self.nnz = self.rows + rows, self.nnz + int(new_terms.size)


KEY_SHIFT = 32
"""a row-term key is ``row << KEY_SHIFT | term`` (vocabularies below ``2**32`` tokens)"""
REBASE_FRACTION = 8
"""the postings are impact-ordered anew once the entries appended since exceed ``1 / REBASE_FRACTION`` of the rest"""
REBASE_MIN = 4096
"""... and this many entries"""


class BM25Index:
    """BM25 over rows of texts (see module docstring). Build with :meth:`build` or :func:`bm25_for`."""

    def __init__(self, tokens: list[str], indptr: np.ndarray, terms: np.ndarray, tf: np.ndarray, k1: float, b: float):
        if not (isinstance(k1, (int, float)) and k1 >= 0) or not (isinstance(b, (int, float)) and 0 <= b <= 1):
            raise LexicalIndexError(f"BM25Index: need k1 >= 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        self.k1, self.b = float(k1), float(b)
        self.tokens = list(tokens)
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        self._set(indptr, terms, tf)
        self._mark: tuple | None = None  # (log length, texts list) when last synced with a graph
        self.last_read = (0, 0)  # (postings read, postings of its terms) by the last rank_bounded call

    def _set(self, indptr: np.ndarray, terms: np.ndarray, tf: np.ndarray) -> None:
        """Replace the CSR (``indptr`` ``[N + 1]``, ``terms`` and ``tf`` ``[nnz]``); the derived arrays are made
        anew when next read."""
        self._indptr, self._terms, self._tf = indptr.astype(np.int64), terms.astype(np.int64), tf.astype(np.int64)
        self._rows, self._nnz = int(self._indptr.size - 1), int(self._indptr[-1])
        self._derived: _Derived | None = None

    @property
    def indptr(self) -> np.ndarray:
        """``[N + 1]`` the entries of row ``d`` are ``indptr[d]:indptr[d + 1]`` (a view: appends leave it as it is)."""
        return self._indptr[: self._rows + 1]

    @property
    def terms(self) -> np.ndarray:
        """``[nnz]`` each entry's term id, ascending within its row."""
        return self._terms[: self._nnz]

    @property
    def tf(self) -> np.ndarray:
        """``[nnz]`` each entry's count of its term in its row."""
        return self._tf[: self._nnz]

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> BM25Index:
        """Index ``texts`` (row ``i`` = ``texts[i]``)."""
        out = cls([], np.zeros(1, dtype=np.int64), np.empty(0, np.int64), np.empty(0, np.int64), k1, b)
        out.add(texts)
        return out

    @property
    def num_rows(self) -> int:
        return self._rows

    def _encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Sorted distinct term ids of ``text`` (new tokens join the vocabulary) and their counts."""
        ids = []
        for t in tokenize(text):
            if t not in self.vocab:
                self.vocab[t] = len(self.tokens)
                self.tokens.append(t)
            ids.append(self.vocab[t])
        terms, counts = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
        return terms, counts.astype(np.int64)

    def _assemble(self, source: Sequence[int] | np.ndarray, fresh: Mapping[int, str]) -> None:
        """New rows: row ``i`` is old row ``source[i]``, or the text ``fresh[i]`` where ``source[i] < 0``."""
        src = np.asarray(source, dtype=np.int64).reshape(-1)
        old_len = np.diff(self.indptr)
        new_rows = np.flatnonzero(src < 0)
        encoded = [self._encode(fresh[int(i)]) for i in new_rows]
        lengths = np.where(src >= 0, old_len[np.maximum(src, 0)] if old_len.size else 0, 0)
        lengths[new_rows] = [t.size for t, _ in encoded]
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        terms, tf = np.empty(int(indptr[-1]), np.int64), np.empty(int(indptr[-1]), np.int64)
        kept = np.flatnonzero(src >= 0)
        if kept.size:  # copy the kept rows' entries in one gather
            span = lengths[kept]
            seg = np.repeat(np.arange(kept.size), span)
            off = np.arange(int(span.sum())) - np.repeat(np.cumsum(span) - span, span)
            terms[indptr[kept][seg] + off] = self.terms[self.indptr[src[kept]][seg] + off]
            tf[indptr[kept][seg] + off] = self.tf[self.indptr[src[kept]][seg] + off]
        for i, (t, c) in zip(new_rows.tolist(), encoded):
            terms[indptr[i] : indptr[i + 1]], tf[indptr[i] : indptr[i + 1]] = t, c
        self._set(indptr, terms, tf)

    # ------------------------------------------------------------------ mutations
    def add(self, texts: Sequence[str]) -> None:
        """Append one row per text: ``O(new entries)`` amortised (the arrays grow at their end, the derived ones
        too; the impact order takes the new entries when they grow past a share of the rest)."""
        encoded = [self._encode(t) for t in texts]
        if not encoded:
            return
        new_terms, new_tf = np.concatenate([t for t, _ in encoded]), np.concatenate([c for _, c in encoded])
        ends = self._nnz + np.cumsum([t.size for t, _ in encoded], dtype=np.int64)
        self._indptr = append_to(self._indptr, self._rows + 1, ends)
        self._terms = append_to(self._terms, self._nnz, new_terms)
        self._tf = append_to(self._tf, self._nnz, new_tf)
        self._rows, self._nnz = self._rows + len(encoded), self._nnz + int(new_terms.size)
        if self._derived is not None:
            self._derived.appended(self, len(encoded), new_terms, new_tf)

    def revise(self, row: int, text: str) -> None:
        """Replace the text of ``row``."""
        self._check_rows([row], "revise")
        source = np.arange(self.num_rows)
        source[row] = -1
        self._assemble(source, {row: text})

    def remove(self, rows: Sequence[int]) -> None:
        """Delete ``rows``; later rows shift down (as :meth:`MemoryGraph.remove_nodes`)."""
        self._check_rows(rows, "remove")
        keep = np.ones(self.num_rows, dtype=bool)
        keep[np.asarray(rows, dtype=np.int64)] = False
        self._assemble(np.flatnonzero(keep), {})

    def _check_rows(self, rows: Sequence[int], what: str) -> None:
        bad = [int(r) for r in rows if not 0 <= int(r) < self.num_rows]
        if bad:
            raise LexicalIndexError(f"BM25Index.{what}: row {bad[0]} is not one of {self.num_rows} rows")

    # ------------------------------------------------------------------ derived arrays
    def _d(self) -> _Derived:
        """The derived arrays (:class:`_Derived`), made after a revise or remove, and impact-ordered anew once the
        entries appended since the last order exceed a ``1 / REBASE_FRACTION`` share of the rest.

        Weights are computed when read (:meth:`entry_weights`), since every one moves with ``N`` and ``avgdl``.
        The impact order was that of the weights when it was made; as ``avgdl`` moves since, a term's postings
        may no longer be in exact weight order, so the bounded read bounds the unread postings twice and takes
        the smaller (:meth:`bound`): ``w(t, d)`` grows with ``tf`` and falls with ``|d|``, so after position
        ``j`` of a term's postings every weight is at most the weight of (the largest ``tf``, the smallest
        ``|d|``) from ``j`` on; and at most the weight of posting ``j`` at the mean length ``a0`` of when the
        order was made, times ``max(1, avgdl / a0)`` (a weight's denominator ``tf + k1 (1 - b) + k1 b |d| / a``
        shrinks by at most that factor as ``a`` grows)."""
        d = self._derived
        if d is None:
            d = self._derived = _Derived(self)
        elif d.nnz - d.base_nnz > max(REBASE_MIN, d.base_nnz // REBASE_FRACTION):
            d.base(self)
        return d

    def impact_order(self) -> np.ndarray:
        """``[nnz]`` the order of every entry that :meth:`_d` makes first for this index (entry positions, postings by
        term, each by weight descending), to save with it: the order kept now when it holds every entry, else
        made again (as an index read back from its arrays would make it)."""
        d = self._derived
        if d is None or d.base_nnz != self._nnz:
            d = self._derived = _Derived(self)
        return d.order()

    def take_order(self, order: np.ndarray) -> None:
        """Use ``order`` (:meth:`impact_order` of an index of these very entries, saved with it) instead of making it
        when the derived arrays are first made; a wrong one is refused (:class:`LexicalIndexError`)."""
        n = self._nnz
        if order.shape != (n,) or (n and (order.min() < 0 or order.max() >= n)):
            raise LexicalIndexError(f"BM25Index: an impact order of {order.shape} entries, not of {n}")
        d = _Derived(self, order.astype(np.int64, copy=False))
        if n and np.any(np.bincount(order, minlength=n) != 1):
            raise LexicalIndexError("BM25Index: the impact order does not hold every entry once")
        # the order base() makes: by term, then weight descending, then row ascending
        t, w = self.terms[order], self.entry_weights(order, d.post_row, d)
        same = t[1:] == t[:-1]
        later = (w[1:] > w[:-1]) | ((w[1:] == w[:-1]) & (order[1:] < order[:-1]))
        if np.any(t[1:] < t[:-1]) or np.any(same & later):
            raise LexicalIndexError("BM25Index: the impact order is not by term, weight and row")
        self._derived = d

    def weights(self, idf: np.ndarray, tf: np.ndarray, length: np.ndarray, avgdl: float) -> np.ndarray:
        """Float64 ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl))``, element by element (so the
        same entry gives the same float however it is reached)."""
        return idf * tf * (self.k1 + 1.0) / (tf + self.k1 * (1.0 - self.b + self.b * length / avgdl))

    def entry_weights(self, pos: np.ndarray, rows: np.ndarray, d: _Derived | None = None) -> np.ndarray:
        """:meth:`weights` of the CSR entries ``pos`` (of rows ``rows``)."""
        d = d or self._d()
        return self.weights(d.idf()[self.terms[pos]], self.tf[pos], d.length[rows], d.avgdl)

    def posting_weights(self, t: np.ndarray, at: np.ndarray) -> np.ndarray:
        """:meth:`weights` of the ordered postings ``at`` of terms ``t``, read from the counts and lengths kept in
        posting order."""
        d = self._d()
        return self.weights(d.idf()[t], d.post_tf[at], d.post_len[at], d.avgdl)

    def bound(self, q: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Per term ``q[i]``, a bound on the weight of every ordered posting from position ``at[i]`` on (the caller
        masks a term whose postings are all read): the smaller of the weight of the largest ``tf`` and the
        smallest ``|d|`` among them, and posting ``at[i]``'s weight when the order was made scaled by how far
        ``avgdl`` has grown since (:meth:`_d`; exact right after the order is made)."""
        d = self._d()
        if not d.tf_max.size:
            return np.zeros(q.size)
        j, idf = np.clip(at, 0, d.tf_max.size - 1), d.idf()[q]
        apart = self.weights(idf, d.tf_max[j], d.len_min[j], d.avgdl)
        # the posting at j weighed the most of its term's rest when the order was made, at the mean length then
        # (times the most a weight can have grown since: avgdl / avgdl then when it grew, and a margin for rounding)
        then = self.weights(idf, d.post_tf[j], d.post_len[j], d.base_avgdl) * (max(1.0, d.avgdl / d.base_avgdl) + 1e-12)
        return np.minimum(apart, then)

    def _delta(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(positions, rows, query term index)`` of the entries appended after the impact order whose term is
        one of ``q``, term by term in the order of ``q``, each term's by position."""
        d = self._d()
        held = [d.delta.get(t) for t in q.tolist()]
        parts = [h[0][: h[1]] for h in held if h is not None]
        pos = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        which = np.repeat(np.arange(q.size), [0 if h is None else h[1] for h in held])
        return pos, np.searchsorted(self.indptr, pos, side="right") - 1, which

    def _query_terms(self, query: str) -> np.ndarray:
        """Distinct in-vocabulary term ids of ``query`` (held by at least one row), ascending."""
        df = self._d().df
        ids = {self.vocab[t] for t in tokenize(query) if t in self.vocab}
        return np.asarray(sorted(i for i in ids if df[i] > 0), dtype=np.int64)

    # ------------------------------------------------------------------ queries
    def idf(self, token: str) -> float:
        """``idf(token)`` (module docstring); 0 for a token no row holds."""
        i, d = self.vocab.get(token), self._d()
        return float(d.idf()[i]) if i is not None and d.df[i] > 0 else 0.0

    def max_score(self, query: str) -> float:
        """``sum_t idf(t) * (k1 + 1)`` over the distinct in-vocabulary terms of ``query``: above every score."""
        return float(self._d().idf()[self._query_terms(query)].sum() * (self.k1 + 1.0))

    def scores(self, query: str, rows: Tensor) -> Tensor:
        """BM25 scores of ``query`` for the given ``rows`` (any shape; ``-1`` padding scores 0), float32.

        Costs ``O(rows.numel() * |q| * log nnz)``: no pass over the other rows.
        """
        r = torch.as_tensor(rows).detach().cpu().numpy().astype(np.int64)
        if r.size and int(r.max()) >= self.num_rows:
            raise LexicalIndexError(f"BM25Index.scores: row {int(r.max())} is not one of {self.num_rows} rows")
        q, d = self._query_terms(query), self._d()
        out = np.zeros(r.shape, dtype=np.float64)
        if q.size and r.size and d.nnz:
            keys_all = d.keys
            rr = np.broadcast_to(np.maximum(r, 0)[..., None], (*r.shape, q.size))
            keys = (rr << KEY_SHIFT) | q
            pos = np.minimum(np.searchsorted(keys_all, keys), d.nnz - 1)
            hit = (keys_all[pos] == keys) & (r >= 0)[..., None]
            weight = np.zeros(keys.shape)
            weight[hit] = self.entry_weights(pos[hit], rr[hit])
            out = weight.sum(-1)
        return torch.from_numpy(out.astype(np.float32))

    def _postings(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, weights)`` of every posting of the terms ``q``, term by term in the order of ``q``."""
        d = self._d()
        ptr, ordered = d.post_ptr, q < d.post_ptr.size - 1
        t = np.where(ordered, q, 0)
        counts = np.where(ordered, ptr[t + 1] - ptr[t], 0)
        at = np.repeat(ptr[t] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        rows, weight = d.post_row[at], self.posting_weights(np.repeat(q, counts), at)
        dpos, drow, which = self._delta(q)
        if not dpos.size:
            return rows, weight
        term = np.concatenate([np.repeat(np.arange(q.size), counts), which])
        order = np.argsort(term, kind="stable")
        return np.concatenate([rows, drow])[order], np.concatenate([weight, self.entry_weights(dpos, drow)])[order]

    def rank(self, query: str, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)`` of the rows holding a query term, by (score desc, row asc); the first ``k`` only
        when given. Reads the postings of the query terms only (accumulated densely when they are many)."""
        q = self._query_terms(query)
        if not q.size:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        post_row, weight = self._postings(q)
        if post_row.size * 8 > self.num_rows:  # long postings: one dense accumulation over the rows
            acc = np.bincount(post_row, weights=weight, minlength=self.num_rows)
            rows = np.flatnonzero(acc > 0)
            score = acc[rows]
        else:
            rows, inverse = np.unique(post_row, return_inverse=True)
            score = np.bincount(inverse, weights=weight, minlength=rows.size)
        if k is not None and k < rows.size:  # keep every row tied with the k-th, then order and cut
            kth = np.partition(score, score.size - k)[score.size - k]
            top = score >= kth
            rows, score = rows[top], score[top]
        order = np.lexsort((rows, -score))[:k]
        return rows[order], score[order]

    def row_scores(self, terms: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Float64 BM25 of the given distinct query ``terms`` (ascending) for distinct ``rows``, read from the
        rows' own CSR entries (``O(sum |d|)``) and summed per row in ascending term order: bit for bit the sums
        :meth:`rank` accumulates from the postings."""
        start, count = self.indptr[rows], self.indptr[rows + 1] - self.indptr[rows]
        pos = np.repeat(start - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
        held = self.terms[pos]
        hit = terms[np.minimum(np.searchsorted(terms, held), terms.size - 1)] == held
        seg = np.repeat(np.arange(rows.size), count)[hit]
        return np.bincount(seg, weights=self.entry_weights(pos[hit], rows[seg]), minlength=rows.size)

    def rank_bounded(
        self, query: str, k: int, tie: np.ndarray | None = None, chunk: int = 2048
    ) -> tuple[np.ndarray, np.ndarray]:
        """The first ``k`` of :meth:`rank`'s rows, ordered by (score desc, ``tie[row]`` asc; default ``tie``: the
        row), read from the heads of the impact-ordered postings only (Fagin's threshold algorithm with
        MaxScore's order of terms and accumulators).

        The postings appended since the impact order was made (:meth:`_d`) are few and read first, whole. Each
        query term's ordered postings are kept by weight descending (as of when the order was made), and after
        reading the first ``r_t`` of them every unread posting of ``t`` weighs at most ``u_t`` (:meth:`bound`
        at ``r_t``; 0 once all are read), and ``U = sum_t u_t``. Terms are read one after another by ``ub``
        (``u_t`` before any read) descending (the rare ones first), in chunks of that sequence of postings
        (``max(4k, chunk)`` postings, doubling), adding their weights into a partial score ``p(d)`` per row
        seen. After each chunk the ``k`` rows of largest ``p`` are scored exactly (:meth:`row_scores`); the
        smallest of those ``k`` exact scores, ``theta``, is at most the true k-th best score. The read stops
        once ``U < theta``. Then

            score(d) <= p(d) + U   for every row d (p = 0 for a row never seen),

        and tighter, ``score(d) <= p(d) + sum of u_t over the terms not yet read for d`` (a row holds a term
        once), so only the seen rows whose bound reaches ``theta`` can be in the exact top-``k``; they are scored
        exactly and ranked. Once every posting is read, ``theta`` is the k-th ``p`` less ``1e-9`` of it. Every
        other row scores strictly below ``theta`` and ranks after the k-th under any tie order: the result is
        the exact top-``k`` of :meth:`rank` (the same float64 scores), ties included.
        Bounds are compared with a relative margin of ``1e-9`` against rounding. Work: the appended postings,
        the ordered postings read before ``U`` falls under ``theta`` (typically the rare terms' and a chunk of
        the next) and the survivors' own entries; not ``N``. ``last_read`` keeps ``(postings read, postings of
        the query's terms)`` of the last call.
        """
        q, d = self._query_terms(query), self._d()
        if not q.size or k < 1:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        ordered = q < d.post_ptr.size - 1  # terms the impact order knows (a newer one has appended postings only)
        inside = np.where(ordered, q, 0)
        start = d.post_ptr[inside]
        df = np.where(ordered, d.post_ptr[inside + 1] - start, 0)
        by_ub = np.argsort(-np.where(df > 0, self.bound(q, start), 0.0), kind="stable")
        t, start, df = q[by_ub], start[by_ub], df[by_ub]
        offset = np.concatenate([[0], np.cumsum(df)])  # the terms' ordered postings, one after another
        bit = 2.0 ** np.arange(t.size) if t.size <= 52 else np.zeros(t.size)
        dpos, drow, which = self._delta(t)  # the appended postings first, whole
        cand, inverse = np.unique(drow, return_inverse=True)
        part = np.bincount(inverse, weights=self.entry_weights(dpos, drow), minlength=cand.size)
        held = np.bincount(inverse, weights=bit[which], minlength=cand.size)  # terms read per row
        u = np.where(df > 0, self.bound(t, start), 0.0)
        read, step, theta = 0, max(4 * k, chunk), -np.inf
        while read < offset[-1] and not u.sum() * (1.0 + 1e-9) < theta:
            lo = np.clip(read - offset[:-1], 0, df)
            read = min(read + step, int(offset[-1]))
            hi = np.clip(read - offset[:-1], 0, df)
            take = hi - lo
            at = np.repeat(start + lo - np.cumsum(take) + take, take) + np.arange(int(take.sum()))
            cand, inverse = np.unique(np.concatenate([cand, d.post_row[at]]), return_inverse=True)
            weight = self.posting_weights(np.repeat(t, take), at)
            part = np.bincount(inverse, weights=np.concatenate([part, weight]))
            held = np.bincount(inverse, weights=np.concatenate([held, np.repeat(bit, take)]))
            u = np.where(hi < df, self.bound(t, start + hi), 0.0)
            step *= 2
            if cand.size >= k and read == offset[-1]:  # all read: p is the exact score up to summation order
                theta = max(theta, float(np.partition(part, cand.size - k)[cand.size - k]) * (1.0 - 1e-9))
            elif cand.size >= k:
                top = np.sort(cand[np.argpartition(-part, k - 1)[:k]])
                theta = max(theta, float(self.row_scores(q, top).min()))
        self.last_read = (read + int(dpos.size), int(d.df[q].sum()))
        keep = cand[(part + self._unread_bound(held, u)) * (1.0 + 1e-9) >= theta]
        score = self.row_scores(q, keep)
        order = np.lexsort((keep if tie is None else tie[keep], -score))[:k]
        return keep[order], score[order]

    @staticmethod
    def _unread_bound(held: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Per seen row, ``sum of u_t`` over the terms ``t`` not read for it (bit ``t`` of ``held`` unset; a row
        holds a term at most once, so a term read for it adds nothing unread); ``U`` for more than 52 terms."""
        if u.size > 52:
            return np.full(held.size, u.sum())
        read_for = (held.astype(np.int64)[:, None] >> np.arange(u.size)) & 1
        return u.sum() - read_for @ u

    def top_k(self, queries: Sequence[str], k: int) -> tuple[Tensor, Tensor]:
        """``(scores [Q, k] float32, rows [Q, k] long)``: each query's ``k`` best rows by (score desc,
        row asc); rows that hold no query term are left out, so a row list may end in ``-1`` rows
        with ``-inf`` scores."""
        scores = torch.full((len(queries), k), float("-inf"))
        rows = torch.full((len(queries), k), -1, dtype=torch.long)
        for i, query in enumerate(queries):
            r, s = self.rank(query, k)
            rows[i, : r.size] = torch.from_numpy(r)
            scores[i, : r.size] = torch.from_numpy(s.astype(np.float32))
        return scores, rows

    # ------------------------------------------------------------------ keeping up with a graph
    def mark_synced(self, graph: MemoryGraph) -> None:
        self._mark = (len(graph.node_log), graph.texts, list(graph.texts))

    def sync(self, graph: MemoryGraph) -> None:
        """Replay the graph's node mutations since the last sync: ``add`` and ``text`` events index
        the rows' current texts, ``remove`` drops rows, and a kept row whose text is no longer the
        one indexed (a texts list assigned directly) is indexed anew; a log that does not explain
        the graph's rows rebuilds the index. While the log and the texts list are those of the last
        sync nothing is checked: edit texts through :meth:`MemoryGraph.revise_node`."""
        mark = self._mark
        if mark is not None and mark[0] == len(graph.node_log) and mark[1] is graph.texts:
            if self.num_rows == graph.num_nodes:
                return
        if (
            mark is not None
            and mark[1] is graph.texts
            and len(mark[2]) == self.num_rows < graph.num_nodes == len(graph.texts)
            and graph.rows_appended_since(mark[0], self.num_rows, TEXTS_KEPT)
        ):
            new = graph.texts[self.num_rows :]  # rows appended to the same list: index the new ones only
            self.add(new)
            mark[2].extend(new)
            self._mark = (len(graph.node_log), graph.texts, mark[2])
            return
        source = self._replay(graph)
        if source is None:
            fresh = BM25Index.build(graph.texts, self.k1, self.b)
            self.tokens, self.vocab = fresh.tokens, fresh.vocab
            self._set(fresh.indptr, fresh.terms, fresh.tf)
        else:
            seen = mark[2]
            source = [s if s >= 0 and seen[s] == graph.texts[i] else -1 for i, s in enumerate(source)]
            if source != list(range(self.num_rows)) or self.num_rows != graph.num_nodes:
                self._assemble(source, {i: graph.texts[i] for i, s in enumerate(source) if s < 0})
        self.mark_synced(graph)

    def _replay(self, graph: MemoryGraph) -> list[int] | None:
        """Old row (or -1: index anew) of every current row of ``graph``, from its log; ``None``
        when the log does not explain the graph's rows."""
        if self._mark is None or self._mark[0] > len(graph.node_log) or len(self._mark[2]) != self.num_rows:
            return None
        source = list(range(self.num_rows))
        for event in graph.node_log[self._mark[0] :]:
            op = event[0]
            if op == "add" and event[1] == len(source):
                source += [-1] * event[2]
            elif op == "text" and 0 <= event[1] < len(source):
                source[event[1]] = -1
            elif op == "remove" and all(0 <= r < len(source) for r in event[1]):
                drop = set(event[1])
                source = [s for i, s in enumerate(source) if i not in drop]
            elif op not in TEXTS_KEPT:
                return None
        return source if len(source) == graph.num_nodes == len(graph.texts) else None


TEXTS_KEPT = ("revise", "meta", "edges")
"""log events that leave every text as it was (a new embedding, key or metadata; edges)"""


def index_key(k1: float = 1.5, b: float = 0.75) -> str:
    """Name of a BM25 index in :attr:`MemoryGraph.indexes`."""
    return f"bm25-k1-{k1:g}-b-{b:g}"


def bm25_for(graph: MemoryGraph, k1: float = 1.5, b: float = 0.75) -> BM25Index:
    """The graph's BM25 index from ``graph.indexes`` (built on first use), synced with the graph."""
    index = graph.indexes.get(index_key(k1, b))
    if index is None:
        index = graph.indexes[index_key(k1, b)] = BM25Index.build(graph.texts, k1, b)
        index.mark_synced(graph)
    index.sync(graph)
    return index
