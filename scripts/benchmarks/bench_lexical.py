"""Choose the BM25 library by measurement: graphmem.index.lexical, bm25s and tantivy side by side.

For each candidate and each corpus (the node texts of the largest graph of each saved graph set of
``--sets``, its questions as queries; and synthetic topic-clustered texts of every size of
``--sizes`` from :func:`graphmem.builders.synthetic.make_synthetic_graph`, queried with node-text prefixes)
it measures, on the same tokens (:func:`graphmem.index.lexical.tokenize`, fed pre-tokenized to every
library, so only indexing and scoring differ):

* ``build_s``: wall time to index every text (one thread);
* ``query_p50_ms`` / ``query_p95_ms``: one query at a time, the top ``K = 12`` rows;
* ``agree_at_k``: mean share of graphmem.index.lexical's top-``K`` rows the candidate returns (same
  ranking function: 1.0 up to ties; tantivy's differs, ``k1 = 1.2`` and quantised lengths);
* ``given_rows_ms``: BM25 scores of 50 given rows for one query (the learned walk's need), or how
  the library gets them (``null``: no way short of scoring every row);
* ``add_ms`` / ``remove_ms``: adding 10 texts / removing 10 rows and querying again;
* ``bytes``, ``pickle_free`` and ``roundtrip``: saved, read back, same top-``K`` rows.

``hand_check`` scores a four-text corpus against Okapi BM25 with Lucene's IDF written out term by
term (``k1 = 1.5``, or tantivy's fixed ``1.2``) and reports the largest relative error. Writes
``<out>/lexical_library_bench.json`` with the command that produced it.

    python scripts/benchmarks/bench_lexical.py --sets outputs/graphs/locomo outputs/graphs/hotpotqa-pooled \\
        --sizes 10000 100000 --out docs/results
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.config.entry import command
from graphmem.core.graph import MemoryGraph
from graphmem.index.lexical import BM25Index, tokenize
from graphmem.store.graphset import GraphSet
from graphmem.store.indexes import load_bm25, save_bm25
from graphmem.store.io import write_json

K = 12
HAND_DOCS = ["the cat sat on the mat", "dog dog barks", "a cat and a dog", "quiet evening"]
HAND_QUERY = "dog cat cat"


def hand_bm25(docs: list[list[str]], query: list[str], k1: float, b: float = 0.75) -> list[float]:
    """Okapi BM25 with Lucene's IDF, term by term."""
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    out = []
    for d in docs:
        s = 0.0
        for t in set(query):
            df = sum(t in x for x in docs)
            tf = d.count(t)
            if df and tf:
                s += (
                    math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl))
                )
        out.append(s)
    return out


# ---------------------------------------------------------------------------- candidates
class Graphmem:
    """:class:`graphmem.index.lexical.BM25Index` (numpy CSR, one safetensors file)."""

    k1, pickle_free = 1.5, True

    def build(self, docs: list[list[str]]) -> None:
        self.texts = [" ".join(d) for d in docs]
        self.index = BM25Index.build(self.texts)

    def top(self, query: list[str], k: int) -> list[int]:
        return [r for r in self.index.top_k([" ".join(query)], k)[1][0].tolist() if r >= 0]

    def all_scores(self, query: list[str], n: int) -> list[float]:
        return self.index.scores(" ".join(query), torch.arange(n)).tolist()

    def given_rows(self, query: list[str], rows: np.ndarray) -> np.ndarray:
        return self.index.scores(" ".join(query), torch.from_numpy(rows)).numpy()

    def add(self, docs: list[list[str]]) -> None:
        self.texts += [" ".join(d) for d in docs]
        self.index.add(self.texts[-len(docs) :])

    def remove(self, rows: list[int]) -> None:
        drop = set(rows)
        self.texts = [t for i, t in enumerate(self.texts) if i not in drop]
        self.index.remove(rows)

    def roundtrip(self, folder: Path) -> int:
        g = MemoryGraph.empty(1)
        g.add_nodes([str(i) for i in range(len(self.texts))], self.texts, torch.zeros(len(self.texts), 1))
        self.index.mark_synced(g)
        path = save_bm25(self.index, folder / "bm25.safetensors", g)
        self.index = load_bm25(path, g)
        return path.stat().st_size


class Bm25s:
    """``bm25s`` (scipy-style CSC matrix of precomputed scores, ``method="lucene"``)."""

    k1, pickle_free = 1.5, True  # saved as .npy (allow_pickle=False) + JSON

    def build(self, docs: list[list[str]]) -> None:
        import bm25s

        self.docs = [list(d) for d in docs]
        self.model = bm25s.BM25(k1=self.k1, b=0.75, method="lucene")
        self.model.index(self.docs, show_progress=False)

    def _ids(self, query: list[str]) -> list[str]:
        vocab = self.model.vocab_dict
        return [t for t in dict.fromkeys(query) if t in vocab]

    def top(self, query: list[str], k: int) -> list[int]:
        scores = self._scores(query)
        top = np.argpartition(-scores, k)[:k] if scores.size > k else np.arange(scores.size)
        order = top[np.lexsort((top, -scores[top]))]
        return [int(v) for v in order if scores[v] > 0]

    def _scores(self, query: list[str]) -> np.ndarray:
        ids = self._ids(query)
        return self.model.get_scores(ids) if ids else np.zeros(len(self.docs))

    def all_scores(self, query: list[str], n: int) -> list[float]:
        return self._scores(query).tolist()

    def given_rows(self, query: list[str], rows: np.ndarray) -> np.ndarray:
        return self._scores(query)[rows]  # a pass over every row

    def add(self, docs: list[list[str]]) -> None:
        self.build(self.docs + docs)  # no incremental indexing: a rebuild

    def remove(self, rows: list[int]) -> None:
        drop = set(rows)
        self.build([d for i, d in enumerate(self.docs) if i not in drop])

    def roundtrip(self, folder: Path) -> int:
        import bm25s

        self.model.save(str(folder / "bm25s"), show_progress=False)
        self.model = bm25s.BM25.load(str(folder / "bm25s"), show_progress=False)
        return sum(p.stat().st_size for p in (folder / "bm25s").iterdir())


class Tantivy:
    """``tantivy`` (Lucene-like segments; BM25 with ``k1 = 1.2``, ``b = 0.75`` fixed, quantised lengths)."""

    k1, pickle_free = 1.2, True

    def build(self, docs: list[list[str]], folder: Path | None = None) -> None:
        import tantivy

        self.tantivy = tantivy
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("text", stored=False, tokenizer_name="default")
        builder.add_integer_field("row", stored=True, indexed=True, fast=True)
        self.schema = builder.build()
        self.folder = folder
        self.index = tantivy.Index(self.schema, path=str(folder) if folder else None)
        self.writer = self.index.writer(heap_size=50_000_000, num_threads=1)
        self.n = 0
        self._add(docs)

    def _add(self, docs: list[list[str]]) -> None:
        for d in docs:
            self.writer.add_document(self.tantivy.Document(text=" ".join(d), row=self.n))
            self.n += 1
        self._commit()

    def _commit(self) -> None:
        self.writer.commit()
        self.writer.wait_merging_threads()
        self.writer = self.index.writer(heap_size=50_000_000, num_threads=1)
        self.index.reload()
        self.searcher = self.index.searcher()

    def _query(self, query: list[str]):
        t = self.tantivy
        terms = [(t.Occur.Should, t.Query.term_query(self.schema, "text", w)) for w in dict.fromkeys(query)]
        return t.Query.boolean_query(terms) if terms else t.Query.empty_query()

    def top(self, query: list[str], k: int) -> list[int]:
        hits = self.searcher.search(self._query(query), k).hits
        return [self.searcher.doc(addr)["row"][0] for _, addr in hits]

    def all_scores(self, query: list[str], n: int) -> list[float]:
        out = [0.0] * n
        for score, addr in self.searcher.search(self._query(query), max(n, 1)).hits:
            out[self.searcher.doc(addr)["row"][0]] = score
        return out

    def given_rows(self, query: list[str], rows: np.ndarray):
        return None  # no score-these-documents call: a search over all matches, or one explain per row

    def add(self, docs: list[list[str]]) -> None:
        self._add(docs)

    def remove(self, rows: list[int]) -> None:
        for r in rows:  # rows keep their ids (no renumbering): a caller keeps its own map
            self.writer.delete_documents_by_term("row", r)
        self._commit()

    def roundtrip(self, folder: Path) -> int:
        path = folder / "tantivy"
        path.mkdir()
        docs = getattr(self, "_docs", None)
        self.build(docs, path)
        size = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
        self.index = self.tantivy.Index.open(str(path))
        self.searcher = self.index.searcher()
        return size


CANDIDATES = {"graphmem.index.lexical": Graphmem, "bm25s": Bm25s, "tantivy": Tantivy}
MODULES = {"bm25s": "bm25s", "tantivy": "tantivy"}  # pip install graphmem[bench-lexical]


# ---------------------------------------------------------------------------- measuring
def corpora(sets: list[str], sizes: list[int], max_queries: int) -> list[tuple[str, list[list[str]], list[list[str]]]]:
    """``(name, tokenized texts, tokenized queries)`` of each set's largest graph and each synthetic size."""
    out = []
    for path in sets:
        gs = GraphSet.load(path)
        name, graph = max(gs.graphs.items(), key=lambda item: item[1].num_nodes)
        qs = [q.text for q in gs.questions if q.graph == name][:max_queries]
        out.append((f"{gs.dataset}:{name}", [tokenize(t) for t in graph.texts], [tokenize(q) for q in qs]))
    for n in sizes:
        g = make_synthetic_graph(n, dim=8, seed=0)
        rows = np.random.default_rng(0).integers(0, n, max_queries)
        out.append((f"synthetic:{n}", [tokenize(t) for t in g.texts], [tokenize(g.texts[r])[:6] for r in rows]))
    return out


def measure(cls, docs: list[list[str]], queries: list[list[str]], reference: list[list[int]] | None) -> dict:
    cand = cls()
    t = time.perf_counter()
    cand.build(docs)
    out = {"build_s": round(time.perf_counter() - t, 4)}
    times, tops = [], []
    for q in queries:
        t = time.perf_counter()
        tops.append(cand.top(q, K))
        times.append((time.perf_counter() - t) * 1e3)
    out["query_p50_ms"] = round(statistics.median(times), 3)
    out["query_p95_ms"] = round(float(np.percentile(times, 95)), 3)
    if reference is not None:
        out["agree_at_k"] = round(
            float(np.mean([len(set(a) & set(r)) / max(len(r), 1) for a, r in zip(tops, reference)])), 4
        )
    rows = np.random.default_rng(1).integers(0, len(docs), 50)
    t = time.perf_counter()
    given = cand.given_rows(queries[0], rows)
    out["given_rows_ms"] = None if given is None else round((time.perf_counter() - t) * 1e3, 3)
    extra = docs[:10]
    t = time.perf_counter()
    cand.add(extra)
    cand.top(queries[0], K)
    out["add_ms"] = round((time.perf_counter() - t) * 1e3, 2)
    t = time.perf_counter()
    cand.remove(list(range(len(docs), len(docs) + 10)))
    cand.top(queries[0], K)
    out["remove_ms"] = round((time.perf_counter() - t) * 1e3, 2)
    before = [cand.top(q, K) for q in queries[:20]]
    cand._docs = docs
    folder = Path(tempfile.mkdtemp())
    try:
        out["bytes"] = cand.roundtrip(folder)
        out["roundtrip"] = [cand.top(q, K) for q in queries[:20]] == before
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out["pickle_free"] = cls.pickle_free
    return out


def hand_check(cls) -> dict:
    docs, query = [tokenize(d) for d in HAND_DOCS], tokenize(HAND_QUERY)
    cand = cls()
    cand.build(docs)
    got, want = cand.all_scores(query, len(docs)), hand_bm25(docs, query, cls.k1)
    err = max(abs(g - w) / max(abs(w), 1e-12) for g, w in zip(got, want) if w) if any(want) else 0.0
    ratio = [g / w for g, w in zip(got, want) if w]
    return {
        "k1": cls.k1,
        "scores": [round(s, 6) for s in got],
        "hand": [round(s, 6) for s in want],
        "max_rel_err": err,
        "score_over_hand": [round(r, 6) for r in ratio],  # a constant ratio: the same ranking, rescaled
    }


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="*", default=["outputs/graphs/locomo", "outputs/graphs/hotpotqa-pooled"])
    parser.add_argument("--sizes", nargs="*", type=int, default=[10000, 100000])
    parser.add_argument("--queries", type=int, default=200, help="queries per corpus")
    parser.add_argument("--only", nargs="*", default=sorted(CANDIDATES), help="candidates to run (if installed)")
    parser.add_argument("--out", default="docs/results")
    return parser


def work(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    missing = [n for n in args.only if n in MODULES and importlib.util.find_spec(MODULES[n]) is None]
    args.only = [n for n in args.only if n not in missing]
    result = {"command": "python scripts/benchmarks/" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "k": K}
    result["not_installed"] = missing
    result["hand_check"] = {name: hand_check(CANDIDATES[name]) for name in args.only}
    result["corpora"] = {}
    for name, docs, queries in corpora(args.sets, args.sizes, args.queries):
        ref_index = BM25Index.build([" ".join(d) for d in docs])
        reference = [[r for r in ref_index.top_k([" ".join(q)], K)[1][0].tolist() if r >= 0] for q in queries]
        row = {"texts": len(docs), "queries": len(queries)}
        for cand in args.only:
            row[cand] = measure(CANDIDATES[cand], docs, queries, reference)
            print(name, cand, row[cand], flush=True)
        result["corpora"][name] = row
    out = Path(args.out) / "lexical_library_bench.json"
    write_json(out, result, indent=2)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
