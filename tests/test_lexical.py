"""The BM25 index: tokenizer, scores against a hand computation, ranking, graph mutations, files."""

import json
import math

import pytest
import torch
from policy_references import okapi

from graphmem.builders import DataConfig, GraphConfig, reuse_or_build
from graphmem.core.graph import MemoryGraph
from graphmem.index.lexical import BM25Index, LexicalIndexError, bm25_for, index_key, tokenize
from graphmem.store.graphset import GraphSet, GraphSetError
from graphmem.store.indexes import attach_lexical, lexical_files, load_bm25, save_bm25

DOCS = ["the cat sat on the mat", "dog dog barks", "a cat and a dog", "quiet evening"]


def text_graph(texts, dim: int = 4) -> MemoryGraph:
    g = MemoryGraph.empty(dim)
    gen = torch.Generator().manual_seed(0)
    g.add_nodes([f"n{i}" for i in range(len(texts))], list(texts), torch.randn(len(texts), dim, generator=gen))
    return g


def test_tokenizer_lowercases_splits_on_non_alphanumerics_and_drops_stop_words():
    assert tokenize("The Cat's 2023-05-08 meeting_notes, DON'T!") == [
        "cat",
        "2023",
        "05",
        "08",
        "meeting",
        "notes",
        "don",
    ]
    assert tokenize("") == [] and tokenize("the a of") == []


def test_scores_match_a_hand_computed_case():
    index = BM25Index.build(DOCS)
    toks = [tokenize(d) for d in DOCS]
    assert toks[0] == ["cat", "sat", "mat"] and toks[1] == ["dog", "dog", "barks"]
    # N = 4, avgdl = (3 + 3 + 2 + 2) / 4 = 2.5; "dog": df = 2, idf = ln(1 + 2.5 / 2.5) = ln 2
    # row 1: tf = 2, |d| = 3: ln 2 * 2 * 2.5 / (2 + 1.5 * (0.25 + 0.75 * 3 / 2.5)) = ln 2 * 5 / 3.725
    assert index.idf("dog") == pytest.approx(math.log(2))
    got = index.scores("dog cat cat", torch.arange(4))
    assert got[1].item() == pytest.approx(math.log(2) * 5 / 3.725, rel=1e-6)
    assert got.tolist() == pytest.approx(okapi(toks, ["dog", "cat", "cat"]), rel=1e-6)
    assert index.max_score("dog cat cat unknownword") == pytest.approx(2 * math.log(2) * 2.5)
    assert (got < index.max_score("dog cat")).all()
    assert index.idf("unknownword") == 0.0


def test_scores_of_given_rows_any_shape_and_padding():
    index = BM25Index.build(DOCS)
    full = index.scores("cat dog", torch.arange(4))
    block = index.scores("cat dog", torch.tensor([[3, 0], [-1, 2]]))
    assert block.shape == (2, 2)
    assert torch.equal(block, torch.stack([full[[3, 0]], torch.stack([torch.tensor(0.0), full[2]])]))
    with pytest.raises(LexicalIndexError, match="row 9"):
        index.scores("cat", torch.tensor([9]))


def test_top_k_orders_by_score_then_row_and_pads():
    index = BM25Index.build(["red apple", "green pear", "red apple", "red wine", "blue"])
    scores, rows = index.top_k(["red apple", "nothing here"], 4)
    assert rows.tolist() == [[0, 2, 3, -1], [-1, -1, -1, -1]]
    assert (
        scores[0, 0] == scores[0, 1] > scores[0, 2] > 0 and torch.isinf(scores[0, 3]) and torch.isinf(scores[1]).all()
    )
    assert torch.allclose(scores[0, :3], index.scores("red apple", rows[0, :3]))


def test_graph_mutations_keep_the_index_in_step():
    g = text_graph(DOCS)
    index = bm25_for(g)
    assert index.top_k(["zebra"], 3)[1][0, 0] == -1
    g.add_nodes(["z"], ["a zebra crossing"], torch.randn(1, 4))
    assert bm25_for(g) is index and index.top_k(["zebra"], 3)[1][0].tolist() == [4, -1, -1]
    g.revise_node("n3", text="zebra stripes at evening")
    assert bm25_for(g).top_k(["zebra"], 3)[1][0].tolist() == [4, 3, -1]  # the shorter text first
    assert index.top_k(["quiet"], 3)[1][0, 0] == -1
    g.remove_nodes(["n0", "z"])  # rows shift: n3 is now row 2
    assert sorted(bm25_for(g).top_k(["zebra cat"], 3)[1][0].tolist()) == [-1, 1, 2]
    fresh = BM25Index.build(g.texts)
    assert (
        index.scores("zebra cat dog", torch.arange(3)).tolist()
        == fresh.scores("zebra cat dog", torch.arange(3)).tolist()
    )
    assert index.top_k(["zebra cat"], 3)[1].tolist() == fresh.top_k(["zebra cat"], 3)[1].tolist()


def test_texts_replaced_outside_the_log_rebuild():
    g = text_graph(DOCS)
    index = bm25_for(g)
    g.texts = ["owl", "owl", "cat", "dog"]
    assert bm25_for(g).top_k(["owl"], 2)[1][0].tolist() == [0, 1]
    assert index.num_rows == 4


def test_save_load_round_trip_and_refusals(tmp_path):
    g = text_graph(DOCS)
    path = tmp_path / "bm25.safetensors"
    save_bm25(bm25_for(g), path, g)
    loaded = load_bm25(path, g)
    assert loaded.top_k(["dog cat"], 4)[1].tolist() == bm25_for(g).top_k(["dog cat"], 4)[1].tolist()
    other = text_graph(["something else"] + DOCS[1:])
    with pytest.raises(LexicalIndexError, match="another graph"):
        load_bm25(path, other)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(LexicalIndexError, match=f"{path}: checksum mismatch"):
        load_bm25(path, g)
    path.write_bytes(b"not a file")
    with pytest.raises(LexicalIndexError, match=str(path)):
        load_bm25(path, g)


def test_a_saved_index_keeps_its_impact_order_and_a_wrong_order_is_refused(tmp_path, monkeypatch):
    """The postings' order is saved with the index and read back instead of sorting every entry again: the derived
    arrays equal those of an index made from the texts, after appends too; a file without it is read as before."""
    import numpy as np

    from graphmem.builders.synthetic import make_text_graph
    from graphmem.index import lexical
    from graphmem.index.lexical import text_fingerprint
    from graphmem.store.io import write_sealed

    g = make_text_graph(400, dim=8, seed=3, validate=False)
    index = bm25_for(g)
    index.rank_bounded("alpha", 5)
    g.add_nodes(["x1", "x2"], ["a late note on the harbour", "the harbour again"], torch.randn(2, 8))
    path = tmp_path / "bm25.safetensors"
    save_bm25(bm25_for(g), path, g)  # synced: the appended rows are past the order it made first
    fresh = BM25Index.build(g.texts)
    want = fresh._d()
    with monkeypatch.context() as patch:
        patch.setattr(np, "lexsort", lambda *a, **k: pytest.fail("the entries were sorted again"))
        loaded = load_bm25(path, g)
        got = loaded._d()
    for name in ("post_ptr", "post_row", "post_tf", "post_len", "tf_max", "len_min"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert got.base_avgdl == want.base_avgdl and got.base_nnz == want.base_nnz == fresh.terms.size
    for q in ("harbour note", g.texts[7], "nothing matches zzz"):
        assert [a.tolist() for a in loaded.rank_bounded(q, 5)] == [a.tolist() for a in fresh.rank_bounded(q, 5)]

    order = fresh.impact_order()
    same = np.flatnonzero(fresh.terms[order][1:] == fresh.terms[order][:-1])[0]
    swapped = order.copy()
    swapped[[same, same + 1]] = swapped[[same + 1, same]]
    for bad, message in ((order[:-1], "an impact order of"), (swapped, "not by term, weight and row")):
        copy = BM25Index(fresh.tokens, fresh.indptr, fresh.terms, fresh.tf, fresh.k1, fresh.b)
        with pytest.raises(LexicalIndexError, match=message):
            copy.take_order(bad)

    tensors = {"indptr": fresh.indptr, "terms": fresh.terms, "tf": fresh.tf}
    tensors["vocab"] = np.frombuffer("\n".join(fresh.tokens).encode(), dtype=np.uint8).copy()
    meta = {"format_version": lexical.FORMAT_VERSION, "tokenizer": lexical.TOKENIZER_NAME, "k1": fresh.k1}
    meta |= {"b": fresh.b, "graph_fingerprint": text_fingerprint(g)}
    write_sealed(path, tensors, "graphmem_bm25", meta)  # an index saved without its order
    assert [a.tolist() for a in load_bm25(path, g).rank_bounded("harbour", 5)] == [
        a.tolist() for a in fresh.rank_bounded("harbour", 5)
    ]


def test_lexical_files_attach_to_their_graphs(tmp_path):
    graphs = {"a": text_graph(DOCS), "b": text_graph(["zebra"])}
    files = {}
    for rel, write in lexical_files(graphs).items():
        files[rel] = tmp_path / rel
        write(files[rel])
    fresh = {"a": text_graph(DOCS), "b": text_graph(["zebra"])}
    assert attach_lexical(fresh, {**files, "notes.txt": tmp_path / "x"}) == 2
    assert index_key() in fresh["b"].indexes
    assert fresh["b"].indexes[index_key()].top_k(["zebra"], 1)[1].tolist() == [[0]]


def test_built_sets_carry_their_bm25_index_and_refuse_a_damaged_one(tmp_path):
    data, graph = DataConfig(name="locomo", limit=1), GraphConfig(encoder="hashing", cache_dir=str(tmp_path / "c"))
    built, status = reuse_or_build(data, graph, tmp_path / "set", progress=False)
    manifest = json.loads((tmp_path / "set" / "manifest.json").read_text())
    (name,) = built.graphs
    rel = next(r for r in manifest["extra_files"] if r.startswith("lexical/"))
    assert (
        status == "built"
        and rel.endswith(f"/{index_key()}.safetensors")
        and manifest["extra_files"][rel] in manifest["files"]
    )
    gs = GraphSet.load(tmp_path / "set")
    g = gs.graphs[name]
    assert isinstance(g.indexes.get(index_key()), BM25Index) and g.indexes[index_key()]._mark is not None
    query = gs.questions[0].text
    assert bm25_for(g).top_k([query], 12)[1].tolist() == BM25Index.build(g.texts).top_k([query], 12)[1].tolist()
    path = gs.files[rel]
    data_bytes = bytearray(path.read_bytes())
    data_bytes[len(data_bytes) // 2] ^= 0xFF
    path.write_bytes(bytes(data_bytes))
    with pytest.raises(GraphSetError) as err:
        GraphSet.load(tmp_path / "set")
    assert path.name in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("query", ["zebra", "zebra common", "common"])
def test_ranking_reads_sparse_and_dense_postings_alike(query):
    texts = [f"common filler {i}" for i in range(97)] + ["zebra one", "zebra zebra two", "zebra common"]
    index = BM25Index.build(texts)
    every = index.scores(query, torch.arange(len(texts))).double()
    want = sorted((r for r in range(len(texts)) if every[r] > 0), key=lambda r: (-every[r].item(), r))
    rows, scores = index.rank(query)
    assert rows.tolist() == want and scores.tolist() == pytest.approx(every[want].tolist(), rel=1e-6)
    assert index.rank(query, 2)[0].tolist() == want[:2]
    assert index.top_k([query], 3)[1][0].tolist() == (want + [-1, -1, -1])[:3]


def test_top_k_ties_at_the_cut_go_by_row():
    index = BM25Index.build(["red apple"] * 3 + ["red"])
    assert index.top_k(["red apple"], 2)[1].tolist() == [[0, 1]]
