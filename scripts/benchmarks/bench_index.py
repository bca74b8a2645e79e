"""Choose the vector index library by measurement: FAISS (HNSW, IVF), hnswlib and usearch side by side.

For each candidate and each collection of unit vectors (synthetic topic-clustered vectors of
``--dim`` at every size of ``--sizes``, drawn as :func:`graphmem.builders.synthetic.synthetic_embeddings`
draws them, and the MiniLM node embeddings of the saved LoCoMo and HotpotQA graph sets) it
measures, on the same vectors and queries:

* ``build_s``: wall time to build the index over all vectors (``--threads`` threads);
* ``query_p50_ms`` / ``query_p95_ms``: one query at a time (batch 1, one thread), ``k = 6``;
* ``recall_at_k``: share of the exact top-k (cosine, one matmul) found, over all queries;
* ``add_ms_per_vector``: adding ``--mutations`` new vectors to the built index;
* ``update`` / ``remove``: whether the library removes (or replaces) a vector in place, and whether a
  removed vector is then absent from the results (checked, not quoted);
* ``bytes``: serialised size; ``roundtrip``: serialised to a byte array without pickle, read back,
  and the same results returned;
* the install weight of each library (its files on disk, dependencies included).

Synthetic queries are vectors near random data points (``x + noise * N(0, I) / sqrt(dim)``); MiniLM
queries are the questions of both sets. Libraries that are not installed are reported as such. Writes
``<out>/index_choice.json``.

    python scripts/benchmarks/bench_index.py --sizes 1000 10000 100000 1000000 --out outputs/benchmark
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from graphmem.builders.synthetic import synthetic_embeddings
from graphmem.config.entry import command
from graphmem.store.graphset import GraphSet

K = 6


def exact_topk(data: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """``[Q, k]`` rows of the ``k`` largest inner products (the reference), in chunks of queries."""
    x = torch.from_numpy(data)
    out = [
        torch.topk(torch.from_numpy(queries[i : i + 256]) @ x.T, k, dim=1).indices for i in range(0, len(queries), 256)
    ]
    return torch.cat(out).numpy()


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean over queries of ``|found ∩ exact| / k``."""
    return float(np.mean([len(set(f.tolist()) & set(e.tolist())) / exact.shape[1] for f, e in zip(found, exact)]))


# ---------------------------------------------------------------------------- candidates
class Faiss:
    """FAISS ``IndexHNSWFlat`` (inner product) or ``IndexIVFFlat`` (inner product, ``nlist = 4 sqrt(N)``)."""

    def __init__(self, kind: str, m: int, ef_construction: int, ef_search: int, nprobe: int) -> None:
        import faiss

        self.faiss, self.kind = faiss, kind
        self.m, self.efc, self.efs, self.nprobe = m, ef_construction, ef_search, nprobe
        self.name = f"faiss-{kind}"

    def build(self, data: np.ndarray) -> None:
        f = self.faiss
        if self.kind == "hnsw":
            index = f.IndexHNSWFlat(data.shape[1], self.m, f.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.efc
            index.hnsw.efSearch = self.efs
            self.index = f.IndexIDMap2(index)
        else:
            nlist = max(1, int(4 * len(data) ** 0.5))
            quantizer = f.IndexFlatIP(data.shape[1])
            index = f.IndexIVFFlat(quantizer, data.shape[1], nlist, f.METRIC_INNER_PRODUCT)
            index.cp.min_points_per_centroid = 1  # small collections: train on what there is, quietly
            index.train(data[np.random.default_rng(0).permutation(len(data))[: nlist * 39]])
            index.nprobe = self.nprobe
            self._keep = quantizer
            self.index = index
        self.index.add_with_ids(data, np.arange(len(data), dtype=np.int64))

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        return self.index.search(q, k)[1]

    def add(self, data: np.ndarray, ids: np.ndarray) -> None:
        self.index.add_with_ids(data, ids.astype(np.int64))

    def remove(self, ids: np.ndarray) -> bool:
        try:
            self.index.remove_ids(ids.astype(np.int64))
            return True
        except RuntimeError:  # HNSW graphs cannot drop a vector
            return False

    def to_bytes(self) -> bytes:
        return self.faiss.serialize_index(self.index).tobytes()

    def from_bytes(self, blob: bytes) -> None:
        self.index = self.faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))
        if self.kind == "hnsw":
            self.faiss.downcast_index(self.index.index).hnsw.efSearch = self.efs
        else:
            self.index.nprobe = self.nprobe

    def set_threads(self, n: int) -> None:
        self.faiss.omp_set_num_threads(n)


class Hnswlib:
    """hnswlib ``Index('ip')`` with deletion marks and slot reuse (``allow_replace_deleted``)."""

    name = "hnswlib"

    def __init__(self, m: int, ef_construction: int, ef_search: int) -> None:
        import hnswlib

        self.lib, self.m, self.efc, self.efs, self.threads = hnswlib, m, ef_construction, ef_search, 1

    def build(self, data: np.ndarray) -> None:
        self.index = self.lib.Index(space="ip", dim=data.shape[1])
        self.index.init_index(len(data) + 4096, self.m, self.efc, allow_replace_deleted=True)
        self.index.add_items(data, np.arange(len(data)), num_threads=self.threads)
        self.index.set_ef(self.efs)

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        return self.index.knn_query(q, k, num_threads=1)[0].astype(np.int64)

    def add(self, data: np.ndarray, ids: np.ndarray) -> None:
        self.index.add_items(data, ids, num_threads=self.threads)

    def remove(self, ids: np.ndarray) -> bool:
        for i in ids.tolist():
            self.index.mark_deleted(i)
        return True

    def to_bytes(self) -> bytes:  # hnswlib writes its binary format to a path only
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            self.index.save_index(f.name)
            return Path(f.name).read_bytes()

    def from_bytes(self, blob: bytes) -> None:
        import tempfile

        dim = self.index.dim
        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            Path(f.name).write_bytes(blob)
            self.index = self.lib.Index(space="ip", dim=dim)
            self.index.load_index(f.name, allow_replace_deleted=True)
        self.index.set_ef(self.efs)

    def set_threads(self, n: int) -> None:
        self.threads = n


class Usearch:
    """usearch ``Index(metric='ip', dtype='f32')`` (HNSW with in-place removal)."""

    name = "usearch"

    def __init__(self, m: int, ef_construction: int, ef_search: int) -> None:
        from usearch.index import Index

        self.cls, self.m, self.efc, self.efs, self.threads = Index, m, ef_construction, ef_search, 1

    def build(self, data: np.ndarray) -> None:
        self.index = self.cls(
            ndim=data.shape[1],
            metric="ip",
            dtype="f32",
            connectivity=self.m,
            expansion_add=self.efc,
            expansion_search=self.efs,
        )
        self.index.add(np.arange(len(data)), data, threads=self.threads)

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        res = self.index.search(q, k, threads=1)
        keys = np.asarray(res.keys, dtype=np.int64).reshape(len(q), -1)
        return keys

    def add(self, data: np.ndarray, ids: np.ndarray) -> None:
        self.index.add(ids, data, threads=self.threads)

    def remove(self, ids: np.ndarray) -> bool:
        self.index.remove(ids)
        return True

    def to_bytes(self) -> bytes:
        return bytes(self.index.save())

    def from_bytes(self, blob: bytes) -> None:
        self.index = self.cls.restore(bytearray(blob))
        self.index.expansion_search = self.efs

    def set_threads(self, n: int) -> None:
        self.threads = n


def candidates(args) -> list:
    """Every candidate whose library imports here (the others are listed as missing)."""
    out, missing = [], []
    makers = [
        ("faiss", lambda: Faiss("hnsw", args.m, args.ef_construction, args.ef_search, args.nprobe)),
        ("faiss", lambda: Faiss("ivf", args.m, args.ef_construction, args.ef_search, args.nprobe)),
        ("hnswlib", lambda: Hnswlib(args.m, args.ef_construction, args.ef_search)),
        ("usearch", lambda: Usearch(args.m, args.ef_construction, args.ef_search)),
    ]
    for module, make in makers:
        try:
            out.append(make())
        except ImportError:
            missing.append(module)
    return out, sorted(set(missing))


# ---------------------------------------------------------------------------- measurement
def measure(cand, data: np.ndarray, queries: np.ndarray, threads: int, mutations: int, seed: int) -> dict:
    """Build, query one at a time, mutate and round-trip one candidate on one collection."""
    exact = exact_topk(data, queries, K)
    cand.set_threads(threads)
    t = time.perf_counter()
    cand.build(data)
    build_s = time.perf_counter() - t
    torch_threads = torch.get_num_threads()
    cand.set_threads(1)
    lat, found = [], []
    for q in queries:
        t = time.perf_counter()
        found.append(cand.search(q[None, :], K)[0])
        lat.append(1e3 * (time.perf_counter() - t))
    found = np.stack(found)
    lat.sort()
    res = {
        "build_s": build_s,
        "query_p50_ms": statistics.median(lat),
        "query_p95_ms": lat[int(0.95 * (len(lat) - 1))],
        "recall_at_k": recall(found, exact),
    }
    # serialise without pickle and read back: same answers
    blob = cand.to_bytes()
    cand.from_bytes(blob)
    again = np.stack([cand.search(q[None, :], K)[0] for q in queries[:50]])
    res["bytes"] = len(blob)
    res["roundtrip_same_results"] = bool((again == found[:50]).all())
    # incremental add of new vectors, then remove them again: are they found, then gone?
    rng = np.random.default_rng(seed + 7)
    new = data[rng.integers(0, len(data), mutations)] + 0.01 * rng.standard_normal((mutations, data.shape[1]))
    new = (new / np.linalg.norm(new, axis=1, keepdims=True)).astype(np.float32)
    ids = np.arange(len(data), len(data) + mutations)
    cand.set_threads(threads)
    t = time.perf_counter()
    cand.add(new, ids)
    res["add_ms_per_vector"] = 1e3 * (time.perf_counter() - t) / mutations
    cand.set_threads(1)
    hit = cand.search(new[:50], 1)[:, 0]
    res["added_found_top1"] = float(np.mean(hit == ids[:50]))
    res["remove_supported"] = cand.remove(ids)
    if res["remove_supported"]:
        after = cand.search(new[:50], K)
        res["removed_absent"] = bool(not np.isin(after, ids).any())
    torch.set_num_threads(torch_threads)
    return res


def install_weight(dist: str) -> dict:
    """Bytes on disk of a distribution and of its declared dependencies that are installed."""
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return {"installed": False}
    own = sum((Path(d.locate_file(f)).stat().st_size for f in d.files or [] if Path(d.locate_file(f)).is_file()))
    deps = {}
    for req in d.requires or []:
        name = req.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip().split("[")[0]
        if name and name not in ("numpy", "packaging", "tqdm"):  # shared with the project already
            deps[name] = install_weight(name).get("mb")
    return {"installed": True, "version": d.version, "mb": round(own / 2**20, 1), "extra_dependencies_mb": deps}


def minilm_collection(paths: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """Node embeddings and question embeddings of the saved graph sets (unit rows)."""
    data, queries = [], []
    for p in paths:
        if not (Path(p) / "manifest.json").exists():
            continue
        gs = GraphSet.load(p)
        data += [g.embeddings for g in gs.graphs.values()]
        queries.append(gs.query_embeddings)
    if not data:
        return None
    unit = lambda t: torch.nn.functional.normalize(torch.cat(t).float(), dim=1).numpy()  # noqa: E731
    return unit(data), unit(queries)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000, 1000000])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--noise", type=float, default=0.3, help="query = data point + noise * N(0, I) / sqrt(dim)")
    parser.add_argument("--m", type=int, default=32, help="HNSW links per node")
    parser.add_argument("--ef-construction", type=int, default=80)
    parser.add_argument("--ef-search", type=int, default=64)
    parser.add_argument("--nprobe", type=int, default=16, help="IVF lists scanned per query")
    parser.add_argument("--threads", type=int, default=2, help="threads for building and adding")
    parser.add_argument("--mutations", type=int, default=1000)
    parser.add_argument("--graphsets", nargs="*", default=["outputs/graphs/locomo", "outputs/graphs/hotpotqa"])
    parser.add_argument("--only", nargs="*", default=None, help="candidate names to run (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="outputs/benchmark")
    return parser


def work(args: argparse.Namespace) -> None:

    cands, missing = candidates(args)
    if args.only:
        cands = [c for c in cands if c.name in args.only]
    report = {
        "config": vars(args),
        "k": K,
        "load_average_at_start": os.getloadavg(),
        "missing_libraries": missing,
        "install": {d: install_weight(d) for d in ("faiss-cpu", "hnswlib", "usearch")},
        "collections": {},
    }
    collections = [(f"synthetic-{n}", n) for n in args.sizes] + [("minilm", None)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, n in collections:
        if n is None:
            got = minilm_collection(args.graphsets)
            if got is None:
                continue
            data, queries = got
        else:
            data = synthetic_embeddings(n, args.dim, args.seed).numpy()
            rng = np.random.default_rng(args.seed + 1)
            q = data[rng.integers(0, n, args.queries)] + args.noise * rng.standard_normal((args.queries, args.dim)) / (
                args.dim**0.5
            )
            queries = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
        data = np.ascontiguousarray(data, dtype=np.float32)
        entry = {"vectors": len(data), "dim": data.shape[1], "queries": len(queries), "candidates": {}}
        for cand in cands:
            entry["candidates"][cand.name] = res = measure(cand, data, queries, args.threads, args.mutations, args.seed)
            print(
                f"{name:>18} {cand.name:<11} build {res['build_s']:8.2f}s  p50 {res['query_p50_ms']:.3f} ms"
                f"  p95 {res['query_p95_ms']:.3f} ms  recall@{K} {res['recall_at_k']:.4f}"
                f"  add {res['add_ms_per_vector']:.3f} ms/vec  remove {res['remove_supported']}",
                flush=True,
            )
            del cand.index
        entry["load_average_after"] = os.getloadavg()
        report["collections"][name] = entry
        (out / "index_choice.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {out / 'index_choice.json'}")


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    importlib.import_module("graphmem")  # the project's package, installed in the environment
    main()
