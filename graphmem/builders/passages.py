"""Passage-corpus graphs: one MuSiQue record's paragraphs, or a pooled corpus over a whole file or a group of its
records (``DataConfig.pool_size``).

A *passage* is a titled paragraph, identified by its title: passages are title-deduplicated, and
the distinct texts that one title carries (MuSiQue uses several paragraphs of one article, also
within a record) are joined, in order of first appearance, into that title's passage, so no
supporting text is lost (``GraphConfig.duplicate_titles="join"``; ``"first"`` keeps only the
first text, which can drop a supporting paragraph's text). The pooled corpus of a file (the
HippoRAG 2 / GFM-RAG protocol) holds every distinct passage of every record, and every question
is asked over it.

Nodes: one per passage, id = the title (:func:`graphmem.datasets.musique.passage_id`), text
``"<title>: <passage text>"``, metadata ``kind="passage"``. With ``GraphConfig.sentence_nodes``
also one per sentence, id ``"<title>::<i>"`` (:func:`graphmem.datasets.hotpotqa.sentence_id`),
text ``"<title>: <sentence>"``, metadata ``kind="sentence"``; HotpotQA and 2Wiki bring their sentences,
MuSiQue's passages are split by :func:`graphmem.builders.sentences.split_sentences`.

Edges (both directions, no self loops):

* entity: a node whose text names another passage's title (:func:`title_mentions`: whole words,
  case-insensitive, a trailing parenthetical such as ``" (film)"`` optional) links to that passage
  (and its first ``entity_fanout`` sentences), plus shared extracted entities
  (:func:`graphmem.builders.edges.entity_pairs`);
* semantic: each node to its ``semantic_k`` most similar nodes with cosine ``>= semantic_threshold``;
* temporal (sentence nodes only): passage -> first sentence and consecutive sentences;
* causal (sentence nodes only): causal-connective cues between consecutive sentences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from torch import Tensor

from graphmem.builders import edges as E
from graphmem.builders.config import require_batch_rules
from graphmem.builders.entities import STOPWORDS, EntityExtractor
from graphmem.builders.sentences import split_sentences
from graphmem.core.graph import MemoryGraph, default_key
from graphmem.datasets.hotpotqa import sentence_id
from graphmem.datasets.musique import passage_id
from graphmem.datasets.types import HotpotRecord, MusiqueRecord

if TYPE_CHECKING:
    from graphmem.builders.config import GraphConfig

_WORDS = re.compile(r"\w+")
MAX_TITLE_WORDS = 12
DUPLICATE_TITLES = ("join", "first")


@dataclass(frozen=True)
class Passage:
    """A titled passage; ``sentences`` is ``None`` when the source gives none (split on demand)."""

    title: str
    text: str
    sentences: tuple[str, ...] | None = None


@dataclass(frozen=True)
class PassageCorpus:
    """The passages of one graph: one record's, or a pooled file's (``pooled=True``)."""

    name: str
    dataset: str
    passages: tuple[Passage, ...]
    pooled: bool = False
    merged_titles: tuple[str, ...] = ()


def hotpot_passages(record: HotpotRecord) -> list[Passage]:
    """HotpotQA (and 2Wiki) paragraphs as passages (text = the sentences joined, as HotpotQA stores them)."""
    return [
        Passage(p.title, "".join(p.sentences).strip(), tuple(s.strip() for s in p.sentences)) for p in record.paragraphs
    ]


def musique_passages(record: MusiqueRecord) -> list[Passage]:
    """MuSiQue paragraphs as passages, in ``idx`` order (same-title texts are joined by :func:`dedupe_titles`)."""
    return [Passage(p.title, p.text.strip()) for p in sorted(record.paragraphs, key=lambda p: p.idx)]


def dedupe_titles(passages: Iterable[Passage], mode: str = "join") -> tuple[list[Passage], list[str]]:
    """One passage per title, in order of first appearance; distinct texts of a title are joined
    with a space, their sentences concatenated (``mode="join"``), or all but the first are dropped
    (``mode="first"``). Returns the passages and the titles that had more than one text (the
    first text's sentences keep their indices ``0..n-1``)."""
    if mode not in DUPLICATE_TITLES:
        raise ValueError(f"duplicate-title mode {mode!r} is not one of {DUPLICATE_TITLES}")
    texts: dict[str, list[Passage]] = {}
    for p in passages:
        kept = texts.setdefault(p.title, [])
        if all(k.text != p.text for k in kept):
            kept.append(p)
    out, merged = [], []
    for title, parts in texts.items():
        if len(parts) > 1:
            merged.append(title)
        if len(parts) == 1 or mode == "first":
            out.append(parts[0])
            continue
        given = [q.sentences for q in parts]
        sentences = None if any(s is None for s in given) else tuple(s for ss in given for s in ss)
        out.append(Passage(title, " ".join(q.text for q in parts), sentences))
    return out, merged


def corpus(
    name: str, dataset: str, passages: Iterable[Passage], pooled: bool = False, duplicate_titles: str = "join"
) -> PassageCorpus:
    """A :class:`PassageCorpus` of the title-deduplicated ``passages`` (:func:`dedupe_titles`)."""
    kept, merged = dedupe_titles(passages, duplicate_titles)
    return PassageCorpus(name, dataset, tuple(kept), pooled, tuple(merged))


def _sentences(p: Passage) -> tuple[str, ...]:
    if p.sentences is not None:
        return tuple(s for s in p.sentences if s)

    return split_sentences(p.text)


def _nodes(c: PassageCorpus, sentence_nodes: bool) -> list[tuple[str, str, str, str, dict]]:
    """``(id, text, key, body, metadata)`` of every node, passage first, then its sentences
    (``body`` is the text without the title, what entities are read from)."""
    out = []
    for i, p in enumerate(c.passages):
        meta = {"kind": "passage", "title": p.title, "paragraph": i}
        out.append((passage_id(p.title), f"{p.title}: {p.text}", p.title, p.text, meta))
        if sentence_nodes:
            for j, s in enumerate(_sentences(p)):
                meta = {"kind": "sentence", "title": p.title, "paragraph": i, "sent_idx": j}
                out.append((sentence_id(p.title, j), f"{p.title}: {s}", f"{p.title}: {default_key(s, 10)}", s, meta))
    return out


def node_texts(c: PassageCorpus, cfg: GraphConfig) -> list[str]:
    """Node texts in node order (what the encoder embeds)."""
    return [node[1] for node in _nodes(c, cfg.sentence_nodes)]


def strip_parenthetical(title: str) -> str:
    """``title`` without a trailing parenthetical such as ``" (film)"``, stripped; ``title`` itself when
    that leaves nothing.

    The same as ``re.sub(r"\\s*\\([^)]*\\)\\s*$", "", title).strip() or title`` in time linear in the
    title (that search is quadratic on a long run of spaces or ``(``): the parenthetical closes at the
    last non-space character, opens at the first ``(`` after the ``)`` before it, and the spaces before
    that ``(`` go with it.
    """
    body = title.rstrip()
    if not body.endswith(")"):
        return title.strip() or title
    start = body.find("(", body.rfind(")", 0, len(body) - 1) + 1, len(body) - 1)
    if start < 0:
        return title.strip() or title
    return title[:start].strip() or title


def title_core(title: str) -> tuple[str, ...]:
    """Lower-cased words of ``title`` without a trailing parenthetical; ``()`` when it names nothing
    matchable (no word, or a single stopword or one-letter word)."""
    core = strip_parenthetical(title)
    words = tuple(w.lower() for w in _WORDS.findall(core))
    if not words or len(words) > MAX_TITLE_WORDS or (len(words) == 1 and (len(words[0]) < 2 or words[0] in STOPWORDS)):
        return ()
    return words


def title_mentions(texts: Sequence[str], titles: Sequence[str]) -> list[set[int]]:
    """For each text, the indices of the ``titles`` it names (whole words, case-insensitive).

    Word n-grams of each text are looked up in a table of title cores (:func:`title_core`), only
    from words that start some title, so the cost is linear in the text length.
    """
    table: dict[tuple[str, ...], list[int]] = {}
    lengths: dict[str, set[int]] = {}
    for i, t in enumerate(titles):
        core = title_core(t)
        if core:
            table.setdefault(core, []).append(i)
            lengths.setdefault(core[0], set()).add(len(core))
    out = []
    for text in texts:
        words = [w.lower() for w in _WORDS.findall(text)]
        found: set[int] = set()
        for pos, w in enumerate(words):
            for n in lengths.get(w, ()):
                found.update(table.get(tuple(words[pos : pos + n]), ()))
        out.append(found)
    return out


def build_passage_graph(
    c: PassageCorpus, embeddings: Tensor, cfg: GraphConfig, extractor: EntityExtractor
) -> MemoryGraph:
    """The graph of corpus ``c`` from precomputed unit embeddings in :func:`node_texts` order."""
    require_batch_rules(cfg, "passage corpora")
    nodes = _nodes(c, cfg.sentence_nodes)
    info = {
        "dataset": c.dataset,
        "corpus": c.name,
        "pooled": c.pooled,
        "passages": len(c.passages),
        "features": cfg.features,
    }
    graph = MemoryGraph.empty(embeddings.shape[1], info=info)
    ids, texts, keys, bodies, meta = (list(col) for col in zip(*nodes))
    graph.add_nodes(ids, texts, embeddings, keys=keys, metadata=meta)
    group, order = E.sequence_positions(graph)  # a passage node at order -1, before its sentences
    rows_of: dict[int, list[int]] = {}
    for row, m in enumerate(meta):
        rows_of.setdefault(m["paragraph"], []).append(row)

    entities = extractor.extract(bodies)
    titles = [p.title for p in c.passages]
    for p, rows in rows_of.items():
        entities[rows[0]].add(titles[p].lower())
    mention_a: list[int] = []
    mention_b: list[int] = []
    for row, named in enumerate(title_mentions(bodies, titles)):
        own = meta[row]["paragraph"]
        for p in sorted(named - {own}):
            entities[row].add(titles[p].lower())
            for target in rows_of[p][: 1 + cfg.entity_fanout]:
                mention_a.append(row)
                mention_b.append(target)
    sentence_texts = [b if m["kind"] == "sentence" else "" for b, m in zip(bodies, meta)]
    E.add_document_edges(graph, sentence_texts, group, order, entities, (mention_a, mention_b), cfg)
    return graph
