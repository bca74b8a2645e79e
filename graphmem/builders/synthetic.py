"""Synthetic memory graphs for benchmarks and for tests of learned routers.

:func:`make_synthetic_graph` draws a topic-clustered graph of any size (10^3..10^6 nodes) with
vectorised tensor ops: node ``i`` belongs to a topic, its embedding is the topic centre plus
noise, its text is a short random sentence of topic words and common words (so token counts are
realistic), and its edges are mixed by relation: ``temporal`` to the next nodes in time order,
``semantic`` to random nodes of the same topic, ``causal`` to a later node of the same topic,
``entity`` to random nodes anywhere.

:func:`make_bridge_graph` builds tasks whose gold node is reachable only through a bridge node
with negative cosine to the query. Gold rows are returned separately and never stored in the
graph.
"""

from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np
import torch

from graphmem.core import Query
from graphmem.core.graph import RELATIONS, MemoryGraph
from graphmem.index.lexical import STOP_WORDS

DEFAULT_MIX: dict[str, float] = {"temporal": 0.25, "semantic": 0.4, "causal": 0.15, "entity": 0.2}
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "di", "fe", "go", "hu", "ja")
_COMMON = (
    "the",
    "a",
    "we",
    "talked",
    "about",
    "and",
    "then",
    "later",
    "said",
    "it",
    "was",
    "at",
    "with",
    "my",
    "our",
    "new",
    "old",
    "trip",
    "plan",
    "friend",
    "work",
    "home",
    "week",
    "day",
    "because",
)


def _vocabulary(rng: np.random.Generator, size: int) -> np.ndarray:
    parts = rng.integers(0, len(_SYLLABLES), size=(size, 3))
    words = {"".join(_SYLLABLES[j] for j in row) for row in parts}
    return np.array(sorted(words))


def _texts(
    rng: np.random.Generator, topic: np.ndarray, words: tuple[int, int], topic_vocab: int
) -> tuple[list[str], list[str]]:
    """One sentence per node: topic words mixed with common words; keys are the first 6 words."""
    n = topic.size
    vocab = np.concatenate([_vocabulary(rng, 4 * topic_vocab * (int(topic.max()) + 1)), np.array(_COMMON)])
    lengths = rng.integers(words[0], words[1] + 1, size=n)
    owner = np.repeat(np.arange(n), lengths)
    topical = rng.random(owner.size) < 0.5
    rare = vocab.size - len(_COMMON)  # topic words first, common words last
    word = np.where(
        topical,
        (topic[owner] * topic_vocab + rng.integers(0, topic_vocab, owner.size)) % rare,
        rare + rng.integers(0, len(_COMMON), owner.size),
    )
    tokens = vocab[word]
    sizes = np.char.str_len(tokens) + 1
    ends = np.cumsum(np.bincount(owner, weights=sizes, minlength=n).astype(np.int64)) - 1
    starts = np.concatenate([[0], ends[:-1] + 1])
    blob = " ".join(tokens.tolist())
    texts = [blob[a:b] + "." for a, b in zip(starts.tolist(), ends.tolist())]
    keys = [" ".join(t.split(" ", 6)[:6]) for t in texts]
    return texts, keys


def _topic_embeddings(
    rng: np.random.Generator, gen: torch.Generator, n: int, dim: int, num_topics: int, noise: float
) -> tuple[np.ndarray, torch.Tensor]:
    """``(topic [n], unit embeddings [n, dim])``: ``x_i = normalize(c_topic(i) + noise / sqrt(dim) * eps_i)``
    around ``num_topics`` random unit centres ``c``."""
    topic = rng.integers(0, num_topics, size=n)
    centres = torch.nn.functional.normalize(torch.randn(num_topics, dim, generator=gen), dim=1)
    emb = centres[torch.from_numpy(topic)] + noise / dim**0.5 * torch.randn(n, dim, generator=gen)
    return topic, torch.nn.functional.normalize(emb, dim=1)


def synthetic_embeddings(
    num_nodes: int, dim: int = 64, seed: int = 0, num_topics: int | None = None, noise: float = 0.6
) -> torch.Tensor:
    """``[N, dim]`` unit vectors drawn exactly as :func:`make_synthetic_graph` draws its node
    embeddings (same seed: same vectors), without the graph's texts and edges."""
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    t = num_topics or max(4, int(round(num_nodes**0.5)))
    return _topic_embeddings(
        np.random.default_rng(seed), torch.Generator().manual_seed(seed), num_nodes, dim, t, noise
    )[1]


def make_synthetic_graph(
    num_nodes: int,
    avg_degree: float = 8.0,
    relation_mix: Mapping[str, float] | None = None,
    dim: int = 64,
    seed: int = 0,
    num_topics: int | None = None,
    words: tuple[int, int] = (8, 30),
    noise: float = 0.6,
    validate: bool = True,
) -> MemoryGraph:
    """A random topic-clustered memory graph.

    Args:
        num_nodes: nodes ``N``.
        avg_degree: mean out-degree; ``round(N * avg_degree)`` edges in all (default: ``8.0``).
        relation_mix: share of edges per relation name (default: temporal .25, semantic .4,
            causal .15, entity .2).
        dim: embedding dimension (default: ``64``).
        seed: seed of every random draw (default: ``0``).
        num_topics: topic clusters (default: ``max(4, round(sqrt(N)))``).
        words: inclusive range of words per node text (default: ``(8, 30)``).
        noise: std of the per-node embedding noise around its unit topic centre, per unit
            norm (default: ``0.6``).
        validate: run :meth:`MemoryGraph.validate` on the result (default: ``True``).
    """
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2, got {num_nodes}")
    mix = dict(relation_mix or DEFAULT_MIX)
    unknown = set(mix) - set(RELATIONS)
    if unknown or any(v < 0 for v in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"relation_mix must give non-negative shares of {list(RELATIONS)}, got {mix}")
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    n = num_nodes
    t = num_topics or max(4, int(round(n**0.5)))
    topic, emb = _topic_embeddings(rng, gen, n, dim, t, noise)
    src, dst, rel = _edges(rng, topic, t, avg_degree, mix)
    texts, keys = _texts(rng, topic, words, topic_vocab=12)
    info = {"synthetic": True, "seed": seed, "avg_degree": avg_degree}
    graph = _assemble(texts, keys, emb, src, dst, rel, info)
    return graph.validate() if validate else graph


def _edges(
    rng: np.random.Generator, topic: np.ndarray, t: int, avg_degree: float, mix: Mapping[str, float]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(src, dst, relation)`` of ``round(N * avg_degree)`` edges mixed by relation (module docstring)."""
    n = topic.size
    total = int(round(n * avg_degree))
    shares = np.array([mix.get(r, 0.0) for r in RELATIONS], dtype=np.float64)
    counts = np.floor(total * shares / shares.sum()).astype(np.int64)
    counts[int(np.argmax(shares))] += total - counts.sum()
    by_topic = np.argsort(topic, kind="stable")
    topic_start = np.searchsorted(topic[by_topic], np.arange(t))
    topic_size = np.bincount(topic, minlength=t)
    srcs, dsts, rels = [], [], []
    for r, c in enumerate(counts.tolist()):
        if c == 0:
            continue
        src = rng.integers(0, n, size=c)
        name = RELATIONS[r]
        if name == "temporal":
            dst = np.minimum(src + rng.integers(1, 4, size=c), n - 1)
        elif name in ("semantic", "causal"):
            tp = topic[src]
            dst = by_topic[topic_start[tp] + (rng.random(c) * topic_size[tp]).astype(np.int64)]
            if name == "causal":  # causes point forward in time
                src, dst = np.minimum(src, dst), np.maximum(src, dst)
        else:
            dst = rng.integers(0, n, size=c)
        ok = src != dst
        srcs.append(src[ok]), dsts.append(dst[ok]), rels.append(np.full(int(ok.sum()), r))
    return tuple(torch.from_numpy(np.concatenate(x)).long() for x in (srcs, dsts, rels))


def _assemble(texts: list[str], keys: list[str], emb: torch.Tensor, src, dst, rel, info: dict) -> MemoryGraph:
    """A graph of these nodes (ids ``n0..``, one minute apart) and edges, Beta counters at zero."""
    n, dim = emb.shape
    width = len(str(n - 1))
    graph = MemoryGraph.empty(dim, info=info)
    graph.node_ids = [f"n{i:0{width}d}" for i in range(n)]
    graph.texts, graph.keys = texts, keys
    graph.embeddings = emb.contiguous()
    graph.timestamps = torch.arange(n, dtype=torch.float64) * 60.0
    graph.metadata = [{} for _ in range(n)]
    graph.edge_index = torch.stack([src, dst])
    graph.edge_type = rel
    graph.S = torch.zeros(src.numel())
    graph.F = torch.zeros(src.numel())
    graph.edge_attr = torch.nn.functional.one_hot(rel, len(RELATIONS)).float()
    graph.edge_attr_init = graph.edge_attr.clone()
    graph.invalidate()
    return graph


_FUNCTION = ("the", "and", "to", "of", "in", "was", "it", "we")  # Zipf ranks 1-8 (dropped by the tokenizer)
_MONTHS = ("January February March April May June July August September October November December").split()


def _word_pool(rng: np.random.Generator) -> np.ndarray:
    """Every word of 2-4 syllables (about 70,000), shuffled, none of them a stop word."""
    words = {"".join(p) for r in (2, 3, 4) for p in itertools.product(_SYLLABLES, repeat=r)}
    pool = np.array(sorted({w for w in words if len(w) >= 4 and w not in STOP_WORDS}))
    return pool[rng.permutation(pool.size)]


def _zipf(rng: np.random.Generator, size: int, count: int, s: float) -> np.ndarray:
    """``count`` draws of ranks ``0..size-1`` with ``P(r) ∝ (r + 1)^-s``."""
    cdf = np.cumsum(np.arange(1, size + 1, dtype=np.float64) ** -s)
    return np.minimum(np.searchsorted(cdf, rng.random(count) * cdf[-1]), size - 1)


def _text_words(
    rng: np.random.Generator, topic: np.ndarray, pool: np.ndarray, words: tuple[int, int], general: int, tv: int
) -> list[str]:
    """Per node, ``words`` lowercase words: a Zipf(1.05) draw over ``general`` words (function words first)
    or, a third of the time, a Zipf(0.8) draw over its topic's ``tv`` words; space separated."""
    n = topic.size
    vocab = np.concatenate([np.array(_FUNCTION), pool[:general]])
    topical = pool[general : general + tv * (int(topic.max()) + 1)]
    lengths = rng.integers(words[0], words[1] + 1, size=n)
    owner = np.repeat(np.arange(n), lengths)
    own = rng.random(owner.size) < 1 / 3
    tokens = np.where(
        own,
        topical[(topic[owner] * tv + _zipf(rng, tv, owner.size, 0.8)) % topical.size],
        vocab[_zipf(rng, vocab.size, owner.size, 1.05)],
    )
    ends = np.cumsum(np.bincount(owner, weights=np.char.str_len(tokens) + 1, minlength=n).astype(np.int64)) - 1
    starts = np.concatenate([[0], ends[:-1] + 1])
    blob = " ".join(tokens.tolist())
    return [blob[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def make_text_graph(
    num_nodes: int,
    avg_degree: float = 8.0,
    dim: int = 64,
    seed: int = 0,
    num_topics: int | None = None,
    words: tuple[int, int] = (8, 24),
    noise: float = 0.6,
    general_vocab: int = 30000,
    names: int = 5000,
    validate: bool = True,
) -> MemoryGraph:
    """A topic-clustered memory graph whose texts read like notes, for lexical retrieval at any size.

    Embeddings and edges as :func:`make_synthetic_graph` (``x_v`` around the unit centre of the node's
    topic). Node ``v``'s text: ``words`` words, each a Zipf(1.05) draw over ``general_vocab`` words
    (function words ranked first) or, a third of the time, one of its topic's 12 words (Zipf 0.8), so a
    word's postings range from a few nodes to about half the graph; then ``with <Name>`` (one of the
    topic's 3 people, or with probability 0.3 a Zipf(1.0) draw over ``names`` capitalised names), with
    probability 0.3 ``on <Month> <day> <year>`` and with probability 0.3 ``about <number> times``. The words
    that name the topic are in the text and the embedding alike: a query near ``x_v`` that quotes ``v``'s
    words finds ``v`` both ways. Vectorised; 10^6 nodes take seconds.
    """
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2, got {num_nodes}")
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    n, t = num_nodes, num_topics or max(4, int(round(num_nodes**0.5)))
    topic, emb = _topic_embeddings(rng, gen, n, dim, t, noise)
    src, dst, rel = _edges(rng, topic, t, avg_degree, DEFAULT_MIX)
    pool = _word_pool(rng)
    general = min(general_vocab, pool.size // 2)
    tv = max(1, min(12, (pool.size - general - names) // t))
    core = _text_words(rng, topic, pool, words, general, tv)
    people = np.char.capitalize(pool[-names:])
    cast = rng.integers(0, names, size=(t, 3))
    who = np.where(rng.random(n) < 0.3, _zipf(rng, names, n, 1.0), cast[topic, rng.integers(0, 3, n)])
    month, day, year = rng.integers(0, 12, n), rng.integers(1, 29, n), rng.integers(1990, 2031, n)
    dated, counted, number = rng.random(n) < 0.3, rng.random(n) < 0.3, rng.integers(2, 10000, n)
    texts = [
        f"{c} with {people[w]}"
        + (f" on {_MONTHS[m]} {d} {y}" if dt else "")
        + (f" about {k} times" if ct else "")
        + "."
        for c, w, m, d, y, dt, ct, k in zip(
            core,
            who.tolist(),
            month.tolist(),
            day.tolist(),
            year.tolist(),
            dated.tolist(),
            counted.tolist(),
            number.tolist(),
        )
    ]
    keys = [" ".join(c.split(" ", 6)[:6]) for c in core]
    info = {"synthetic": "text", "seed": seed, "avg_degree": avg_degree}
    graph = _assemble(texts, keys, emb, src, dst, rel, info)
    return graph.validate() if validate else graph


def text_queries(graph: MemoryGraph, num: int, noise: float = 0.3, seed: int = 0, quote: int = 4) -> list[Query]:
    """Queries about random nodes ``v``: the text quotes ``quote`` of ``v``'s words (its name, date and number
    among them when drawn) as ``"When did we talk about <words>?"``; the embedding is
    ``x_v + noise * N(0, I) / sqrt(D)``."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, graph.num_nodes, size=num)
    gen = torch.Generator().manual_seed(seed)
    emb = graph.embeddings[torch.from_numpy(rows)] + noise * torch.randn(num, graph.dim, generator=gen) / graph.dim**0.5
    out = []
    for i, v in enumerate(rows.tolist()):
        said = [
            w
            for w in graph.texts[v].rstrip(".").split(" ")
            if w not in _FUNCTION and w not in ("with", "on", "about", "times")
        ]
        pick = sorted(rng.choice(len(said), size=min(quote, len(said)), replace=False).tolist())
        out.append(Query(f"text-{i}", "When did we talk about " + " ".join(said[j] for j in pick) + "?", emb[i]))
    return out


def _unit_orthogonal(gen: torch.Generator, q: torch.Tensor) -> torch.Tensor:
    """Random unit vectors orthogonal to the unit rows of ``q``."""
    v = torch.randn(q.shape, generator=gen)
    v = v - (v * q).sum(1, keepdim=True) * q
    return torch.nn.functional.normalize(v, dim=1)


def make_bridge_graph(
    num_queries: int = 8,
    num_decoys: int = 3,
    num_filler: int = 64,
    dim: int = 32,
    seed: int = 0,
    bridge_cosine: float = -0.5,
    decoy_cosine: float = 0.7,
    bridge_relation: str = "causal",
) -> tuple[MemoryGraph, list[Query], list[int]]:
    """Tasks whose gold node is reachable only through a bridge with negative cosine to the query.

    For each query ``q``: an entry node (cosine ~0.99), ``num_decoys`` decoys (cosine
    ``decoy_cosine``) that lead only into filler nodes, a bridge (cosine ``bridge_cosine``) reached
    from the entry by a ``bridge_relation`` edge, and the gold node (cosine 0) whose only in-edge
    is ``bridge -> gold`` (also ``bridge_relation``); decoy and filler edges use other relations.
    Rows and ids are shuffled so neither order nor ids reveal roles.

    Args:
        num_queries: tasks in the graph (default: ``8``).
        num_decoys: decoy neighbours of each entry (default: ``3``).
        num_filler: unrelated nodes shared by all tasks (default: ``64``).
        dim: embedding dimension (default: ``32``).
        seed: seed of every random draw (default: ``0``).
        bridge_cosine: cosine of bridge to query (default: ``-0.5``).
        decoy_cosine: cosine of decoys to query (default: ``0.7``).
        bridge_relation: relation of the entry->bridge->gold path (default: ``"causal"``).

    Returns:
        ``(graph, queries, gold)``: the graph, one :class:`Query` per task and the gold row of
        each task; gold is kept out of the graph.
    """
    if bridge_relation not in RELATIONS:
        raise ValueError(f"bridge_relation {bridge_relation!r} is not one of {list(RELATIONS)}")
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    m, k = num_queries, num_decoys
    q, emb = _bridge_embeddings(gen, m, k, num_filler, dim, bridge_cosine, decoy_cosine)
    n, per_task = emb.shape[0], 3 + k
    perm = torch.from_numpy(rng.permutation(n))  # logical row -> stored row
    base = torch.arange(m) * per_task
    entry, bridge, gold = perm[base], perm[base + 1], perm[base + 2]
    decoys = perm[base[:, None] + 3 + torch.arange(k)[None, :]]
    fill = perm[m * per_task + torch.arange(num_filler)]
    src, dst, typ = _bridge_edges(rng, entry, bridge, gold, decoys, fill, bridge_relation)

    stored = torch.empty_like(emb)
    stored[perm] = emb
    texts, keys = _texts(rng, rng.integers(0, 4, size=n), (6, 20), topic_vocab=20)
    ids = [f"m{int(i):04d}" for i in rng.permutation(n)]
    graph = MemoryGraph.empty(dim, info={"synthetic": "bridge", "seed": seed})
    graph.add_nodes(ids, texts, stored, keys=keys)
    graph.add_edges(src, dst, typ)
    queries = [
        Query(qid=f"bridge-{i}", text=f"bridge task {i}: {texts[int(entry[i])]}", embedding=q[i].clone())
        for i in range(m)
    ]
    return graph.validate(), queries, gold.tolist()


def _bridge_embeddings(
    gen: torch.Generator, m: int, k: int, num_filler: int, dim: int, bridge_cosine: float, decoy_cosine: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``m`` unit queries and the logical rows: per task ``i`` (rows ``i·(3 + k)`` on) the entry (cosine 0.99 to
    its query), bridge, gold (cosine 0) and ``k`` decoys, each ``c·q + sqrt(1 - c²)·u`` with ``u ⊥ q``; then filler."""
    q = torch.nn.functional.normalize(torch.randn(m, dim, generator=gen), dim=1)

    def at_cosine(c: float) -> torch.Tensor:
        return c * q + (1.0 - c * c) ** 0.5 * _unit_orthogonal(gen, q)

    per_task = 3 + k  # entry, bridge, gold, decoys
    parts = [at_cosine(0.99), at_cosine(bridge_cosine), at_cosine(0.0)] + [at_cosine(decoy_cosine) for _ in range(k)]
    task_emb = torch.stack(parts, 1).reshape(m * per_task, dim)  # task i occupies rows i*per_task ...
    filler = torch.nn.functional.normalize(torch.randn(num_filler, dim, generator=gen), dim=1)
    return q, torch.cat([task_emb, filler])


def _bridge_edges(rng, entry, bridge, gold, decoys, fill, bridge_relation: str):
    """``(src, dst, type)`` of the bridge tasks' edges (stored rows, self-loops dropped): entry -> decoys
    (another relation), entry -> bridge -> gold (``bridge_relation``), each decoy -> 2 random fillers and
    each filler -> 2 random fillers (random other relations)."""
    m, k, num_filler = entry.numel(), decoys.shape[1], fill.numel()
    rel = {r: RELATIONS.index(r) for r in RELATIONS}
    other = [r for r in RELATIONS if r != bridge_relation]
    src = [entry.repeat_interleave(k), entry, bridge]
    dst = [decoys.flatten(), bridge, gold]
    typ = [
        torch.full((m * k,), rel[other[0]]),
        torch.full((m,), rel[bridge_relation]),
        torch.full((m,), rel[bridge_relation]),
    ]
    if num_filler:
        ds = decoys.flatten().repeat_interleave(2)
        src += [ds, fill.repeat_interleave(2)]
        dst += [
            fill[torch.from_numpy(rng.integers(0, num_filler, ds.numel()))],
            fill[torch.from_numpy(rng.integers(0, num_filler, 2 * num_filler))],
        ]
        typ += [
            torch.from_numpy(rng.choice([rel[r] for r in other], ds.numel())),
            torch.from_numpy(rng.choice([rel[r] for r in other], 2 * num_filler)),
        ]
    src, dst, typ = torch.cat(src).long(), torch.cat(dst).long(), torch.cat(typ).long()
    ok = src != dst
    src, dst, typ = src[ok], dst[ok], typ[ok]
    return src, dst, typ
