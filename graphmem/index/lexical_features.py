"""Lexical features of (query, node) pairs: what the MiniLM cosine cannot see (names, dates, numbers, rare words).

Every feature is computed from the query text and the node text alone (never from gold), with
statistics of the node's own graph, so it applies to any graph. With ``Q`` the distinct
:func:`graphmem.index.lexical.tokenize` tokens of the query, ``T_v`` those of node ``v``, ``tf(t, v)`` the
count of ``t`` in ``v``, ``|v|`` the node's length in tokens, ``avgdl`` the graph's mean length,
``idf(t)`` the graph's BM25 idf and ``k1, b`` its parameters:

    w(t, v)  = tf(t, v) (k1 + 1) / (tf(t, v) + k1 (1 - b + b |v| / avgdl))
    φ_bm25   = Σ_{t ∈ Q ∩ T_v} idf(t) w(t, v)  /  Σ_{t ∈ Q} idf(t) (k1 + 1)      ∈ [0, 1)
    φ_K      = |Q_K ∩ T_v| / max(1, |Q_K|)      for each kind K of query token:

* ``rare``: ``df(t) <= max(1, ρ N)`` in the node's graph (``N`` nodes, ``ρ =`` :data:`RARE_FRACTION`),
  tokens the graph never holds included (the same as ``idf(t)`` above the idf of that document frequency);
* ``name``: tokens of query words written with a capital first letter, not the first word of a
  sentence (of the text, or after ``.``, ``!``, ``?``), at least two characters long;
* ``number``: tokens of digits only that are not a year;
* ``date``: month and weekday names (written capitalised), years (four digits, 1000-2999) and day
  ordinals (``1st`` .. ``31st``).

The BM25 feature is the node's BM25 score (:class:`graphmem.index.lexical.BM25Index`) divided by the local
bound ``max_score(q)``, so it needs no pass over the graph. Tokens are matched by a 64-bit hash of
the token string (:func:`token_id`), so a graph batch is the concatenation of its graphs' tables.

The node side (:class:`NodeTerms`, a CSR of each node's distinct token ids and weights ``w``, and
the same entries as sorted keys ``r(t) N + v`` with ``r(t)`` the token's row in the graph's
vocabulary) is built once per graph and cached on it; the query side (:class:`QueryTerms`) once per
batch of queries. :func:`pair_features` gives the features of ``C`` (query, node) pairs by one
binary search of each (query token, node) key, ``O(C L log M)`` for ``L`` query tokens and ``M``
entries: nothing per query grows with the graph beyond ``log M``; :func:`dense_features` those of
every node of a graph, through the inverted lists of the query tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from graphmem.core.csr import csr_positions
from graphmem.core.rows import append_to
from graphmem.index.lexical import bm25_for, tokenize

FEATURES = ("bm25", "rare", "name", "number", "date")
NUM_LEXICAL_FEATURES = len(FEATURES)
KINDS = FEATURES[1:]
RARE_FRACTION = 0.02
CPU = torch.device("cpu")  # where the tables are built (from the BM25 index's arrays), whatever the default device
MONTHS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_WORD = re.compile(r"[^\W_][\w'’-]*")
_SENTENCE_MARKS = (".", "!", "?")  # a sentence ends with one of them, white space after it
_YEAR = re.compile(r"[12]\d{3}")
_ORDINAL = re.compile(r"(?:[1-9]|[12]\d|3[01])(?:st|nd|rd|th)")


def token_id(token: str) -> int:
    """A signed 64-bit id of a token string (blake2b), the same in every graph and process."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


class NodeTerms:
    """Per node, its distinct tokens and their BM25 weights ``w(t, v)``, as a CSR over ``N`` nodes.

    Attributes:
        rowptr: ``[N + 1]`` the entries of node ``v`` are ``rowptr[v]:rowptr[v + 1]``.
        term: ``[M]`` :func:`token_id` of each entry.
        weight: ``[M]`` ``w(t, v)`` (module docstring).
        vocab_row: ``[M]`` ``r(t)``, the entry's token's row in the vocabulary of the node's graph (offset by the
            vocabularies of the graphs before it in a union).
        vocab_size: rows of the (union's) vocabulary.

        key: ``[M]`` ``r(t) N + v`` of each entry, sorted.
        key_weight: ``[M]`` ``w(t, v)`` in the order of ``key``.
        key_entry: ``[M]`` the CSR entry (``term`` / ``weight`` index) of each key.

    The three sorted ``key`` arrays are made when first read (one sort of the entries), and so are ``term`` and
    ``weight`` of a table made from a BM25 index (``source``): the served walk reads only the entries of the
    nodes it scores (:func:`query_features`, :meth:`weights_at`), so a read after a write makes no pass over
    every entry.
    """

    def __init__(self, rowptr, term, weight, vocab_row, vocab_size, keys: tuple | None = None, source=None):
        self.rowptr, self._term, self._weight, self.vocab_row = rowptr, term, weight, vocab_row
        self.vocab_size, self._keys, self._source = vocab_size, keys, source

    @property
    def num_nodes(self) -> int:
        return int(self.rowptr.numel()) - 1

    @property
    def term(self) -> Tensor:
        if self._term is None:
            self._term = torch.from_numpy(self._source.ids[self.vocab_row.numpy()])
        return self._term

    @property
    def weight(self) -> Tensor:
        if self._weight is None:
            node = np.repeat(np.arange(self.num_nodes), np.diff(self.rowptr.numpy()))
            self._weight = torch.from_numpy(self._source.weight_at(np.arange(node.size), node))
        return self._weight

    def weights_at(self, pos: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """``w(t, v)`` (float32) of the CSR entries ``pos`` of nodes ``nodes``: the same floats as ``weight[pos]``."""
        if self._weight is None:
            return self._source.weight_at(pos, nodes)
        held = self.__dict__.get("_host_weight")
        if held is None:
            held = self._host_weight = self._weight.cpu().numpy()
        return held[pos]

    def _sorted(self) -> tuple[Tensor, Tensor, Tensor]:
        if self._keys is None:
            node = torch.repeat_interleave(torch.arange(self.num_nodes, device=self.rowptr.device), self.rowptr.diff())
            key, order = torch.sort(self.vocab_row * max(self.num_nodes, 1) + node)
            self._keys = (key, self.weight[order], order)
        return self._keys

    key = property(lambda self: self._sorted()[0])
    key_weight = property(lambda self: self._sorted()[1])
    key_entry = property(lambda self: self._sorted()[2])

    def to(self, device) -> NodeTerms:
        moved = [t.to(device) for t in (self.rowptr, self.term, self.weight, self.vocab_row)]
        keys = None if self._keys is None else tuple(t.to(device) for t in self._keys)
        return NodeTerms(*moved, self.vocab_size, keys)

    def host(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rowptr, vocab_row)`` on the host (views of CPU tables; made once per table elsewhere)."""
        got = self.__dict__.get("_host")
        if got is None:
            got = self._host = (self.rowptr.cpu().numpy(), self.vocab_row.cpu().numpy())
        return got

    @staticmethod
    def concat(parts: Sequence[NodeTerms]) -> NodeTerms:
        """The table of a disjoint union of graphs (nodes in the order of ``parts``)."""
        if len(parts) == 1:
            return parts[0]
        sizes = torch.tensor([int(p.term.numel()) for p in parts], device=parts[0].term.device)
        offsets = torch.cumsum(sizes, 0) - sizes
        rowptr = torch.cat([parts[0].rowptr[:1]] + [p.rowptr[1:] + int(o) for p, o in zip(parts, offsets)])
        n, keys, rows, nodes, vocab = sum(p.num_nodes for p in parts), [], [], 0, 0
        for p in parts:  # part i's rows and nodes after those of the parts before it: still sorted
            own = max(p.num_nodes, 1)
            keys.append((torch.div(p.key, own, rounding_mode="floor") + vocab) * n + p.key % own + nodes)
            rows.append(p.vocab_row + vocab)
            nodes, vocab = nodes + p.num_nodes, vocab + p.vocab_size
        cat = lambda name: torch.cat([getattr(p, name) for p in parts])  # noqa: E731
        entry = torch.cat([p.key_entry + int(o) for p, o in zip(parts, offsets)])
        sorted_keys = (torch.cat(keys), cat("key_weight"), entry)
        return NodeTerms(rowptr, cat("term"), cat("weight"), torch.cat(rows), vocab, sorted_keys)

    def inverted(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(term, node, weight)`` of every entry, sorted by term (for :func:`dense_features`)."""
        node = torch.repeat_interleave(torch.arange(self.num_nodes, device=self.term.device), self.rowptr.diff())
        order = torch.argsort(self.term, stable=True)
        return self.term[order], node[order], self.weight[order]


@dataclass
class GraphLexicon:
    """What a query's terms need of one graph: BM25 parameters, idf and document frequencies."""

    index: object  # graphmem.index.lexical.BM25Index
    df: Any  # token -> its document frequency (.get(token, default))
    num_nodes: int
    vocab: Any  # token -> its row r(t) in NodeTerms.key (.get(token, default))
    seen: dict[str, tuple[int, float, float, int]] = field(default_factory=dict)

    def rare(self, token: str) -> bool:
        return self.df.get(token, 0) <= max(1.0, RARE_FRACTION * self.num_nodes)

    def token(self, t: str) -> tuple[int, float, float, int]:
        """``(token_id(t), idf(t), rare(t), r(t))``, kept per token (the lexicon is rebuilt when the graph changes)."""
        got = self.seen.get(t)
        if got is None:
            got = self.seen[t] = (token_id(t), float(self.index.idf(t)), float(self.rare(t)), self.vocab.get(t, -1))
        return got


@dataclass
class QueryTerms:
    """Distinct tokens of ``B`` queries, padded to ``L``, with what each contributes.

    Attributes:
        term: ``[B, L]`` :func:`token_id` of each token (0 at padding; use ``valid``).
        valid: ``[B, L]`` bool, real tokens.
        row: ``[B, L]`` the token's row ``r(t)`` of :attr:`NodeTerms.key` in the query's graph, -1 where the
            graph holds no such token (and at padding).
        value: ``[B, L, F]`` per token: ``idf(t)`` and its kind flags (rare, name, number, date).
        norm: ``[B, F]`` the denominators: ``Σ_t idf(t) (k1 + 1)`` and ``max(1, |Q_K|)`` per kind.
    """

    term: Tensor
    valid: Tensor
    value: Tensor
    norm: Tensor
    row: Tensor

    def __len__(self) -> int:
        return int(self.term.shape[0])

    def __getitem__(self, rows) -> QueryTerms:
        return QueryTerms(self.term[rows], self.valid[rows], self.value[rows], self.norm[rows], self.row[rows])

    def to(self, device) -> QueryTerms:
        return QueryTerms(*(t.to(device) for t in (self.term, self.valid, self.value, self.norm, self.row)))

    def shifted(self, rows: int) -> QueryTerms:
        """These terms with their vocabulary rows after ``rows`` rows of graphs before theirs in a union."""
        if rows == 0:
            return self
        return dataclasses.replace(self, row=torch.where(self.row >= 0, self.row + rows, self.row))

    @staticmethod
    def concat(parts: Sequence[QueryTerms]) -> QueryTerms:
        if len(parts) == 1:
            return parts[0]
        width = max([int(p.term.shape[1]) for p in parts] + [1])

        def pad(t: Tensor, value) -> Tensor:
            extra = width - t.shape[1]
            return torch.cat([t, t.new_full((t.shape[0], extra, *t.shape[2:]), value)], 1) if extra else t

        return QueryTerms(
            torch.cat([pad(p.term, 0) for p in parts]),
            torch.cat([pad(p.valid, False) for p in parts]),
            torch.cat([pad(p.value, 0.0) for p in parts]),
            torch.cat([p.norm for p in parts]),
            torch.cat([pad(p.row, -1) for p in parts]),
        )


@dataclass
class Lexical:
    """The lexical inputs of a batch: the node table of the graph (or union) and the queries' terms."""

    nodes: NodeTerms
    queries: QueryTerms

    def __getitem__(self, rows) -> Lexical:
        return Lexical(self.nodes, self.queries[rows])

    def to(self, device) -> Lexical:
        if self.nodes.rowptr.device == torch.device(device) and self.queries.term.device == self.nodes.rowptr.device:
            return self
        return Lexical(self.nodes.to(device), self.queries.to(device))


# ---------------------------------------------------------------------- building
def _node_tables(graph) -> tuple[NodeTerms, GraphLexicon]:
    """From the graph's BM25 index (:func:`graphmem.index.lexical.bm25_for`): its CSR of term ids and counts, its
    rows' lengths and document frequencies (the entries' token ids and weights made when first read)."""
    index = bm25_for(graph)
    d = index._d()
    indptr, terms = torch.from_numpy(index.indptr), torch.from_numpy(index.terms)  # never written again
    size, vocab = len(index.tokens), index.vocab
    lexicon = GraphLexicon(index, _VocabView(vocab, size, d.df.copy()), index.num_rows, _VocabView(vocab, size))
    source = _Entries(index.tf, d.length, d.avgdl, index.k1, index.b, _token_ids(index))
    return NodeTerms(indptr, None, None, terms, size, source=source), lexicon


@dataclass
class _Entries:
    """What a graph's entry weights are made of: each entry's count, each node's length (views of the BM25 index's
    arrays, whose leading parts are never written again), the mean length and the token ids."""

    tf: np.ndarray
    length: np.ndarray
    avgdl: float
    k1: float
    b: float
    ids: np.ndarray

    def weight_at(self, pos: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Float32 ``w(t, v) = tf (k1 + 1) / (tf + k1 (1 - b + b |v| / avgdl))`` of entries ``pos`` (of ``nodes``),
        computed in float64 and rounded once."""
        tf, k1, b = self.tf[pos].astype(np.float64), self.k1, self.b
        return (tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * self.length[nodes] / self.avgdl))).astype(np.float32)


def _token_ids(index) -> np.ndarray:
    """``[V]`` :func:`token_id` of every token of a BM25 index's vocabulary, kept on the index with the token list
    they were made from: the list only grows while it is the same list (a token keeps its row), so each token is
    hashed once; a new list (the index rebuilt) is hashed anew."""
    tokens = index.tokens
    held = index.__dict__.get("_token_ids")
    buf, done = (held[1], held[2]) if held is not None and held[0] is tokens else (np.empty(0, np.int64), 0)
    if done < len(tokens):
        new = np.fromiter((token_id(t) for t in tokens[done:]), dtype=np.int64, count=len(tokens) - done)
        buf = append_to(buf, done, new)
    index._token_ids = (tokens, buf, len(tokens))
    return buf[: len(tokens)]


class _VocabView:
    """``token -> row`` (or ``values[row]``) of the first ``size`` tokens of a BM25 index's vocabulary, read from
    the index's own dict: no copy of the vocabulary per graph version. A later token is unknown here (as in a
    copy made now)."""

    def __init__(self, vocab: dict[str, int], size: int, values=None):
        self.vocab, self.size, self.values = vocab, size, values

    def get(self, token: str, default=None):
        row = self.vocab.get(token)
        if row is None or row >= self.size:
            return default
        return row if self.values is None else int(self.values[row])


def graph_tables(graph) -> tuple[NodeTerms, GraphLexicon]:
    """:class:`NodeTerms` and :class:`GraphLexicon` of a graph, kept in ``graph.derived`` (dropped on any mutation)."""
    tables = graph.derived.get("index.lexical_features.node_terms", (graph.embeddings,))
    if tables is None:
        tables = graph.derived.put("index.lexical_features.node_terms", _node_tables(graph), (graph.embeddings,))
    return tables


def node_terms(graph) -> NodeTerms:
    return graph_tables(graph)[0]


def query_kinds(text: str) -> dict[str, set[str]]:
    """The tokens of each kind (module docstring) among the distinct tokens of ``text``, linear in its length.

    ``gaps[i]`` is the text between word ``i - 1`` and word ``i`` of :data:`_WORD` (one ``findall`` and one
    ``split``). A word starts a sentence when it is the first, or when the last non-space character of its gap
    is ``.``, ``!`` or ``?`` (a word's own characters end in none of them), so no word reads the text before
    it again: a 100,000-word question takes one pass. Only a word that starts with a capital or a digit can be
    of a kind; each distinct one is classified once (:func:`_word_kind`)."""
    own = set(tokenize(text))
    words, gaps = _WORD.findall(text), _WORD.split(text)
    kinds: dict[str, set[str]] = {k: set() for k in ("name", "number", "date")}
    seen: dict[str, tuple[str | None, list[str]]] = {}
    for i in [i for i, w in enumerate(words) if w[0].isupper() or w[0].isdigit()]:
        kind, toks = seen.get(words[i]) or seen.setdefault(words[i], _word_kind(words[i], own))
        if kind == "capital" and i and not gaps[i].rstrip().endswith(_SENTENCE_MARKS):
            kinds["name"].update(t for t in toks if len(t) >= 2)
        elif kind in ("date", "number"):
            kinds[kind].update(toks)
    return kinds


def _word_kind(word: str, own: set[str]) -> tuple[str | None, list[str]]:
    """``(kind, tokens)`` of one word: ``date``, ``number``, ``capital`` (a name unless it starts a sentence) or
    ``None``, and its tokens among ``own``."""
    lower = word.lower()
    toks = [t for t in tokenize(word) if t in own]
    if word[0].isupper() and (lower in MONTHS or lower in WEEKDAYS):
        return "date", toks
    if _YEAR.fullmatch(lower) or _ORDINAL.fullmatch(lower):
        return "date", toks
    if lower.isdigit():
        return "number", toks
    return ("capital" if word[0].isupper() else None), toks


def query_terms(lexicon: GraphLexicon, texts: Sequence[str]) -> QueryTerms:
    """:class:`QueryTerms` of query texts asked on the graph of ``lexicon``."""
    index = lexicon.index
    k1 = float(index.k1)
    rows, norms = [], []
    for text in texts:
        toks = list(dict.fromkeys(tokenize(text)))
        kinds = query_kinds(text)
        values = []
        for t in toks:
            _, idf, rare, _ = lexicon.token(t)
            values.append([idf, rare, *(float(t in kinds[k]) for k in ("name", "number", "date"))])
        total = [sum(v[0] for v in values) * (k1 + 1.0)] + [sum(v[j] for v in values) for j in range(1, 5)]
        norms.append([x if x > 0 else 1.0 for x in total])
        rows.append((toks, values))
    width = max([len(t) for t, _ in rows] + [1])
    pad = lambda seq, fill: list(seq) + [fill] * (width - len(seq))  # noqa: E731
    ids = [[lexicon.token(t) for t in toks] for toks, _ in rows]
    term = torch.tensor([pad([x[0] for x in got], 0) for got in ids], dtype=torch.long, device=CPU)
    row = torch.tensor([pad([x[3] for x in got], -1) for got in ids], dtype=torch.long, device=CPU)
    valid = torch.tensor([pad([True] * len(toks), False) for toks, _ in rows], dtype=torch.bool, device=CPU)
    zero = [0.0] * NUM_LEXICAL_FEATURES
    value = torch.tensor([pad(values, zero) for _, values in rows], dtype=torch.float32, device=CPU)
    norm = torch.tensor(norms, dtype=torch.float32, device=CPU).view(len(rows), NUM_LEXICAL_FEATURES)
    b = len(rows)
    return QueryTerms(
        term.view(b, width), valid.view(b, width), value.view(b, width, NUM_LEXICAL_FEATURES), norm, row.view(b, width)
    )


def lexical_inputs(graphs: Sequence, texts: Sequence[Sequence[str]], device=None) -> Lexical:
    """:class:`Lexical` of query texts ``texts[c]`` asked on ``graphs[c]`` (a union in that order)."""
    tables = [graph_tables(g) for g in graphs]
    nodes = NodeTerms.concat([t[0] for t in tables])
    offsets = [0]
    for t in tables[:-1]:
        offsets.append(offsets[-1] + t[0].vocab_size)
    queries = QueryTerms.concat([query_terms(t[1], x).shifted(o) for t, x, o in zip(tables, texts, offsets)])
    out = Lexical(nodes, queries)
    return out if device is None else out.to(device)


def scope_lexical(scope) -> Lexical:
    """The lexical inputs of a :class:`~graphmem.policies.base.Scope`'s queries, each on its own graph,
    over the scope's union (its graphs' tables concatenated)."""
    texts, start = [], 0
    for c in scope.counts:
        texts.append([x.text for x in scope.queries[start : start + c]])
        start += c
    return lexical_inputs(scope.batch.graphs, texts, scope.device)


# ---------------------------------------------------------------------- features
def pair_features(lex: Lexical, query: Tensor, node: Tensor) -> Tensor:
    """``[C, F]`` features (module docstring) of the pairs (query row ``query[c]``, node row ``node[c]``):
    for each query token ``t`` of row ``query[c]``, the key ``r(t) N + node[c]`` is looked up in the sorted
    :attr:`NodeTerms.key` (a hit: ``t ∈ T_v``, with ``w(t, v)`` beside it). The hits' values are summed in
    the order of the node's entries (:attr:`NodeTerms.key_entry`), the order a scan of the node's tokens
    adds them in, so the sums are the same floats whichever way the pairs are found."""
    q, nodes = lex.queries, lex.nodes
    out = torch.zeros(node.numel(), NUM_LEXICAL_FEATURES, dtype=q.value.dtype, device=node.device)
    if nodes.key.numel():
        row = q.row[query]  # [C, L]
        key = row * nodes.num_nodes + node[:, None]
        pos = torch.searchsorted(nodes.key, key).clamp_(max=int(nodes.key.numel()) - 1)
        c, j = ((nodes.key[pos] == key) & (row >= 0)).nonzero(as_tuple=True)
        p = pos[c, j]
        contrib = q.value[query[c], j]  # [H, F]
        contrib[:, 0] = contrib[:, 0] * nodes.key_weight[p]
        order = torch.argsort(c * int(nodes.key.numel()) + nodes.key_entry[p])
        out.index_add_(0, c[order], contrib[order])
    return out / q.norm[query]


def query_features(lex: Lexical, node: Tensor, query: int = 0) -> Tensor:
    """:func:`pair_features` of one query row with the nodes ``node``, bit for bit, read from each node's own CSR
    entries (a few cache lines per node, where :func:`pair_features` searches the keys of the whole graph): an
    entry whose vocabulary row is one of the query's tokens is a hit, with ``w(t, v)`` beside it, and each
    node's hits are added in the order of its entries, one float32 addition at a time (``index_add_``), then
    divided by the same norms."""
    terms = lex.queries
    rowptr, entry_row = lex.nodes.host()
    rows = terms.row[query].cpu().numpy()
    held = np.flatnonzero(rows >= 0)
    held = held[np.argsort(rows[held], kind="stable")]
    at = node.cpu().numpy()
    start, count = rowptr[at], rowptr[at + 1] - rowptr[at]
    pos = np.repeat(start - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
    seg, row = np.repeat(np.arange(at.size), count), entry_row[pos]
    j = np.minimum(np.searchsorted(rows[held], row), max(held.size - 1, 0))
    hit = rows[held][j] == row if held.size else np.zeros(row.size, dtype=bool)
    value = terms.value[query].cpu().numpy()
    contrib = value[held[j[hit]]]
    contrib[:, 0] = contrib[:, 0] * lex.nodes.weights_at(pos[hit], at[seg[hit]])
    out = torch.zeros(at.size, NUM_LEXICAL_FEATURES, dtype=terms.value.dtype)
    out.index_add_(0, torch.from_numpy(seg[hit]), torch.from_numpy(contrib))
    return (out / terms.norm[query].cpu()).to(node.device)


def dense_features(lex: Lexical, rows: Tensor | None = None) -> Tensor:
    """``[B, N, F]`` features of every query of ``lex`` (or of ``rows``) with every node of its table:
    work proportional to the entries of the query tokens' inverted lists."""
    q = lex.queries if rows is None else lex.queries[rows]
    term_sorted, node_sorted, weight_sorted = lex.nodes.inverted()
    n, bsz = lex.nodes.num_nodes, len(q)
    qb, qj = q.valid.nonzero(as_tuple=True)
    t = q.term[qb, qj]
    lo = torch.searchsorted(term_sorted, t, side="left")
    hi = torch.searchsorted(term_sorted, t, side="right")
    seg, pos = csr_positions(torch.stack([lo, hi], 1).flatten(), torch.arange(0, 2 * t.numel(), 2, device=t.device))
    contrib = q.value[qb[seg], qj[seg]].clone()
    contrib[:, 0] = contrib[:, 0] * weight_sorted[pos]
    out = torch.zeros(bsz * n, NUM_LEXICAL_FEATURES, dtype=q.value.dtype, device=t.device)
    out.index_add_(0, qb[seg] * n + node_sorted[pos], contrib)
    return out.view(bsz, n, NUM_LEXICAL_FEATURES) / q.norm[:, None, :]
