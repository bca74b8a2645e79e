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
``d * V + t``, so scoring given rows costs ``O(len(rows) * |q| * log nnz)``; :meth:`BM25Index.top_k`
reads the postings of the query terms only (the rows that hold none score 0 and are not returned), and
:meth:`BM25Index.rank_bounded` only their heads: postings are kept by weight descending within each term,
and the read stops once the unread postings' bound falls under the k-th best score (exact top-k).
Mutations (:meth:`add`, :meth:`revise`, :meth:`remove`) rewrite the arrays and recompute the
weights lazily, on the next query (``O(nnz)``: ``N`` and ``avgdl`` change every weight).

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


class BM25Index:
    """BM25 over rows of texts (see module docstring). Build with :meth:`build` or :func:`bm25_for`."""

    def __init__(self, tokens: list[str], indptr: np.ndarray, terms: np.ndarray, tf: np.ndarray, k1: float, b: float):
        if not (isinstance(k1, (int, float)) and k1 >= 0) or not (isinstance(b, (int, float)) and 0 <= b <= 1):
            raise LexicalIndexError(f"BM25Index: need k1 >= 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        self.k1, self.b = float(k1), float(b)
        self.tokens = list(tokens)
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        self.indptr, self.terms, self.tf = indptr.astype(np.int64), terms.astype(np.int64), tf.astype(np.int64)
        self._derived: dict[str, np.ndarray] | None = None
        self._mark: tuple | None = None  # (log length, texts list) when last synced with a graph
        self.last_read = (0, 0)  # (postings read, postings of its terms) by the last rank_bounded call

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> BM25Index:
        """Index ``texts`` (row ``i`` = ``texts[i]``)."""
        out = cls([], np.zeros(1, dtype=np.int64), np.empty(0, np.int64), np.empty(0, np.int64), k1, b)
        out.add(texts)
        return out

    @property
    def num_rows(self) -> int:
        return int(self.indptr.size - 1)

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
        self.indptr, self.terms, self.tf, self._derived = indptr, terms, tf, None

    # ------------------------------------------------------------------ mutations
    def add(self, texts: Sequence[str]) -> None:
        """Append one row per text."""
        n = self.num_rows
        source = np.concatenate([np.arange(n), np.full(len(texts), -1)])
        self._assemble(source, {n + j: t for j, t in enumerate(texts)})

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
    def _d(self) -> dict[str, np.ndarray]:
        """Per-term IDF, per-entry BM25 weight, sorted row-term keys, impact-ordered postings and each term's
        largest weight (rebuilt after a mutation)."""
        if self._derived is None:
            n, v = self.num_rows, len(self.tokens)
            row = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.indptr))
            df = np.bincount(self.terms, minlength=v)
            length = np.bincount(row, weights=self.tf, minlength=n)
            avgdl = float(length.mean()) if n and length.sum() else 1.0
            idf = np.log1p((n - df + 0.5) / (df + 0.5))
            norm = self.k1 * (1.0 - self.b + self.b * length / avgdl)
            weight = idf[self.terms] * self.tf * (self.k1 + 1.0) / (self.tf + norm[row])
            order = np.lexsort((-weight, self.terms))  # postings by term, each by weight desc (row asc on ties)
            self._derived = {
                "df": df,
                "idf": idf,
                "weight": weight,
                "keys": row * max(v, 1) + self.terms,  # ascending: CSR order is (row, term)
                "post_ptr": np.concatenate([[0], np.cumsum(df)]),
                "post_row": row[order],
                "post_weight": weight[order],
            }
            first = np.minimum(self._derived["post_ptr"][:-1], max(weight.size - 1, 0))
            top = self._derived["post_weight"][first] if weight.size else np.zeros(v)
            self._derived["term_max"] = np.where(df > 0, top, 0.0)  # ub(t): the first weight of its postings
        return self._derived

    def _query_terms(self, query: str) -> np.ndarray:
        """Distinct in-vocabulary term ids of ``query`` (held by at least one row), ascending."""
        df = self._d()["df"]
        ids = {self.vocab[t] for t in tokenize(query) if t in self.vocab}
        return np.asarray(sorted(i for i in ids if df[i] > 0), dtype=np.int64)

    # ------------------------------------------------------------------ queries
    def idf(self, token: str) -> float:
        """``idf(token)`` (module docstring); 0 for a token no row holds."""
        i = self.vocab.get(token)
        d = self._d()
        return float(d["idf"][i]) if i is not None and d["df"][i] > 0 else 0.0

    def max_score(self, query: str) -> float:
        """``sum_t idf(t) * (k1 + 1)`` over the distinct in-vocabulary terms of ``query``: above every score."""
        return float(self._d()["idf"][self._query_terms(query)].sum() * (self.k1 + 1.0))

    def scores(self, query: str, rows: Tensor) -> Tensor:
        """BM25 scores of ``query`` for the given ``rows`` (any shape; ``-1`` padding scores 0), float32.

        Costs ``O(rows.numel() * |q| * log nnz)``: no pass over the other rows.
        """
        r = torch.as_tensor(rows).detach().cpu().numpy().astype(np.int64)
        if r.size and int(r.max()) >= self.num_rows:
            raise LexicalIndexError(f"BM25Index.scores: row {int(r.max())} is not one of {self.num_rows} rows")
        q, d = self._query_terms(query), self._d()
        out = np.zeros(r.shape, dtype=np.float64)
        if q.size and r.size and d["keys"].size:
            keys = np.maximum(r, 0)[..., None] * max(len(self.tokens), 1) + q
            pos = np.minimum(np.searchsorted(d["keys"], keys), d["keys"].size - 1)
            hit = (d["keys"][pos] == keys) & (r >= 0)[..., None]
            out = np.where(hit, d["weight"][pos], 0.0).sum(-1)
        return torch.from_numpy(out.astype(np.float32))

    def rank(self, query: str, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)`` of the rows holding a query term, by (score desc, row asc); the first ``k`` only
        when given. Reads the postings of the query terms only (accumulated densely when they are many)."""
        q, d = self._query_terms(query), self._d()
        if not q.size:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        ptr = d["post_ptr"]
        counts = ptr[q + 1] - ptr[q]
        pos = np.repeat(ptr[q] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        if pos.size * 8 > self.num_rows:  # long postings: one dense accumulation over the rows
            acc = np.bincount(d["post_row"][pos], weights=d["post_weight"][pos], minlength=self.num_rows)
            rows = np.flatnonzero(acc > 0)
            score = acc[rows]
        else:
            rows, inverse = np.unique(d["post_row"][pos], return_inverse=True)
            score = np.bincount(inverse, weights=d["post_weight"][pos], minlength=rows.size)
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
        return np.bincount(seg, weights=self._d()["weight"][pos[hit]], minlength=rows.size)

    def rank_bounded(
        self, query: str, k: int, tie: np.ndarray | None = None, chunk: int = 2048
    ) -> tuple[np.ndarray, np.ndarray]:
        """The first ``k`` of :meth:`rank`'s rows, ordered by (score desc, ``tie[row]`` asc; default ``tie``: the
        row), read from the heads of the impact-ordered postings only (Fagin's threshold algorithm with
        MaxScore's order of terms and accumulators).

        Each query term's postings are kept by weight descending, so after reading the first ``r_t`` of them
        every unread posting of ``t`` weighs at most ``u_t`` (the next weight: ``ub(t)``, the term's largest,
        before any read; 0 once all are read), and ``U = sum_t u_t``. Terms are read one after another by ``ub``
        descending (the rare ones first), in chunks of that sequence of postings (``max(4k, chunk)`` postings,
        doubling), adding their weights into a partial score ``p(d)`` per row seen. After each chunk the ``k``
        rows of largest ``p`` are scored exactly (:meth:`row_scores`); the smallest of those ``k`` exact scores,
        ``theta``, is at most the true k-th best score. The read stops once ``U < theta``. Then

            score(d) <= p(d) + U   for every row d (p = 0 for a row never seen),

        and tighter, ``score(d) <= p(d) + sum of u_t over the terms not yet read for d`` (a row holds a term
        once), so only the seen rows whose bound reaches ``theta`` can be in the exact top-``k``; they are scored
        exactly and ranked. Once every posting is read, ``theta`` is the k-th ``p`` less ``1e-9`` of it. Every
        other row scores strictly below ``theta`` and ranks after the k-th under any tie order: the result is
        the exact top-``k`` of :meth:`rank` (the same float64 scores), ties included.
        Bounds are compared with a relative margin of ``1e-9`` against rounding. Work: the postings read
        before ``U`` falls under ``theta`` (typically the rare terms' and a chunk of the next) and the
        survivors' own entries; not ``N``. ``last_read`` keeps ``(postings read, postings of the query's
        terms)`` of the last call.
        """
        q, d = self._query_terms(query), self._d()
        if not q.size or k < 1:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        by_ub = np.argsort(-d["term_max"][q], kind="stable")
        start, df = d["post_ptr"][q[by_ub]], d["df"][q[by_ub]]
        offset = np.concatenate([[0], np.cumsum(df)])  # the terms' postings, one after another
        u = d["term_max"][q[by_ub]].copy()
        cand, part, held, theta = np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0), -np.inf
        read, step, bit = 0, max(4 * k, chunk), 2.0 ** np.arange(q.size) if q.size <= 52 else np.zeros(q.size)
        while read < offset[-1] and not u.sum() * (1.0 + 1e-9) < theta:
            lo = np.clip(read - offset[:-1], 0, df)
            read = min(read + step, int(offset[-1]))
            hi = np.clip(read - offset[:-1], 0, df)
            take = hi - lo
            pos = np.repeat(start + lo - np.cumsum(take) + take, take) + np.arange(int(take.sum()))
            cand, inverse = np.unique(np.concatenate([cand, d["post_row"][pos]]), return_inverse=True)
            part = np.bincount(inverse, weights=np.concatenate([part, d["post_weight"][pos]]))
            held = np.bincount(inverse, weights=np.concatenate([held, np.repeat(bit, take)]))  # terms read per row
            u = np.where(hi < df, d["post_weight"][start + np.minimum(hi, df - 1)], 0.0)
            step *= 2
            if cand.size >= k and read == offset[-1]:  # all read: p is the exact score up to summation order
                theta = max(theta, float(np.partition(part, cand.size - k)[cand.size - k]) * (1.0 - 1e-9))
            elif cand.size >= k:
                top = np.sort(cand[np.argpartition(-part, k - 1)[:k]])
                theta = max(theta, float(self.row_scores(q, top).min()))
        self.last_read = (read, int(d["df"][q].sum()))
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
        source = self._replay(graph)
        if source is None:
            fresh = BM25Index.build(graph.texts, self.k1, self.b)
            self.tokens, self.vocab = fresh.tokens, fresh.vocab
            self.indptr, self.terms, self.tf, self._derived = fresh.indptr, fresh.terms, fresh.tf, None
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
            elif op not in ("revise", "edges"):  # a new embedding or new edges only: the texts stay
                return None
        return source if len(source) == graph.num_nodes == len(graph.texts) else None


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
