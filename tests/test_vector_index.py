"""The FAISS vector index: exact agreement, incremental updates through graph mutations, files, the ANN selector."""

from pathlib import Path

import pytest
import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.index.vector_index import IndexSpec, VectorIndex, VectorIndexError, index_for
from graphmem.policies import make_entry_selector, make_policy
from graphmem.policies.selectors import EmbeddingEntrySelector
from graphmem.store.indexes import attach_indexes, index_file, index_files, load_vector_index, save_vector_index

BUDGET = Budget()


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # FAISS follows torch's thread count: single-threaded builds are deterministic
    yield
    torch.set_num_threads(threads)


def near(graph: MemoryGraph, n: int = 40, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, graph.num_nodes, (n,), generator=gen)
    return graph.embeddings[rows] + 0.3 * torch.randn(n, graph.dim, generator=gen) / graph.dim**0.5


def exact_rows(graph: MemoryGraph, q: torch.Tensor, k: int = 6) -> list[list[int]]:
    queries = [Query(f"q{i}", "", q[i]) for i in range(len(q))]
    return EmbeddingEntrySelector().select(graph, queries, Budget(max_entries=k))


def recall(got: torch.Tensor, ref: list[list[int]]) -> float:
    return sum(len(set(g) & set(r)) for g, r in zip(got.tolist(), ref)) / sum(len(r) for r in ref)


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_search_matches_exact_selection(kind):
    g = make_synthetic_graph(3000, dim=32, seed=2)
    q = near(g)
    got = VectorIndex.build(g, IndexSpec(kind=kind)).search(g, q, 6)
    ref = exact_rows(g, q)
    assert got.shape == (40, 6) and recall(got, ref) >= 0.99
    # rows are re-scored exactly: where the candidate sets agree, the order is the exact selector's
    same = [r for r, e in zip(got.tolist(), ref) if set(r) == set(e)]
    assert len(same) >= 35 and all(r == e for r, e in zip(got.tolist(), ref) if set(r) == set(e))


def test_mutations_followed_by_search():
    g = make_synthetic_graph(2000, dim=16, seed=3)
    index = VectorIndex.build(g)
    new = torch.nn.functional.normalize(torch.randn(3, 16, generator=torch.Generator().manual_seed(9)), dim=1)
    g.add_nodes(["new-a", "new-b", "new-c"], ["a", "b", "c"], new)
    assert [g.node_ids[r] for r in index.search(g, new, 1)[:, 0].tolist()] == ["new-a", "new-b", "new-c"]
    g.revise_node("new-a", embedding=-new[0])
    assert g.node_ids[int(index.search(g, -new[:1], 1)[0, 0])] == "new-a"
    assert g.node_ids[int(index.search(g, new[:1], 1)[0, 0])] != "new-a"  # the old vector is gone
    gone = [g.node_ids[7], "new-b", g.node_ids[1500]]
    g.remove_nodes(gone)
    q = torch.cat([near(g), new])
    got = index.search(g, q, 6)
    assert not set(gone) & {g.node_ids[r] for r in got.flatten().tolist()}
    assert recall(got, exact_rows(g, q)) >= 0.99  # rows renumbered after the removal
    assert index.num_dead == 4 and index.num_slots == 2004 and index.builds == 1  # 1 revised + 3 removed; replayed


def test_several_events_between_searches_replay_in_order():
    g = make_synthetic_graph(1500, dim=16, seed=4)
    index = VectorIndex.build(g)
    gen = torch.Generator().manual_seed(5)
    g.add_nodes([f"x{i}" for i in range(10)], ["t"] * 10, torch.randn(10, 16, generator=gen))
    g.remove_nodes([g.node_ids[i] for i in (0, 3, 1505)])
    g.revise_node(g.node_ids[100], embedding=torch.randn(16, generator=gen))
    g.add_nodes(["y"], ["t"], torch.randn(1, 16, generator=gen))
    q = torch.cat([near(g), g.embeddings[-12:]])
    assert recall(index.search(g, q, 6), exact_rows(g, q)) >= 0.99 and index.builds == 1


def test_appended_rows_after_tombstones_take_fresh_live_slots_without_a_replay_of_every_slot(monkeypatch):
    """Rows appended after a removal are live at once (the selector's bitmap grows with them), found by search,
    and replayed without the general path (which walks every slot)."""
    g = make_synthetic_graph(1000, dim=16, seed=13)
    index = VectorIndex.build(g)
    g.remove_nodes(g.node_ids[:5])
    index.search(g, near(g, 4), 6)  # replayed: 5 dead slots, a live bitmap made
    monkeypatch.setattr(VectorIndex, "_replay", lambda *a: pytest.fail("an append walked every slot"))
    gen = torch.Generator().manual_seed(14)
    for i in range(20):  # one row at a time, as a live memory adds them
        x = torch.nn.functional.normalize(torch.randn(1, 16, generator=gen), dim=1)
        g.add_nodes([f"late{i}"], ["t"], x)
        assert g.node_ids[int(index.search(g, x, 1)[0, 0])] == f"late{i}"
    assert (index.builds, index.num_dead, index.num_slots) == (1, 5, 1020)
    assert index.slot_row[-20:].tolist() == list(range(995, 1015))


def test_nearest_gives_the_exact_neighbours_among_the_rows_before_a_row_in_row_order_of_ties():
    """``nearest`` answers as the exact search over the first ``before`` rows: the k best by cosine (float64
    products rounded to float32), equal cosines to the lower row, never a row at or after ``before``."""
    g = make_synthetic_graph(600, dim=16, seed=15)
    g.add_nodes(["twin-a", "twin-b"], ["t", "t"], g.embeddings[[10, 10]])  # rows 600, 601: ties with row 10
    index = VectorIndex.build(g)
    for before, x in ((600, g.embeddings[10]), (601, g.embeddings[10]), (602, g.embeddings[42]), (300, near(g)[0])):
        rows, cos = index.nearest(g, x, 5, before)
        exact = (g.embeddings[:before].double() @ x.double()).float()
        ref = sorted(range(before), key=lambda r: (-float(exact[r]), r))[:5]
        assert rows == ref and cos == [float(exact[r]) for r in ref]
    assert index.nearest(g, g.embeddings[10], 5, 602)[0][:3] == [10, 600, 601]


def test_unlogged_change_and_many_tombstones_rebuild():
    g = make_synthetic_graph(1000, dim=16, seed=6)
    index = VectorIndex.build(g, IndexSpec(rebuild_fraction=0.1))
    g.embeddings = torch.flip(g.embeddings, [0]).contiguous()  # direct assignment: no log event
    q = near(g)
    assert recall(index.search(g, q, 6), exact_rows(g, q)) >= 0.99 and index.builds == 2
    g.embeddings.mul_(-1.0)  # in-place edit of the same tensor
    assert recall(index.search(g, q, 6), exact_rows(g, q)) >= 0.99 and index.builds == 3
    g.remove_nodes(g.node_ids[:150])  # 15% dead > rebuild_fraction
    assert recall(index.search(g, q, 6), exact_rows(g, q)) >= 0.99
    assert index.builds == 4 and index.num_dead == 0 and index.num_slots == g.num_nodes


def test_save_load_without_pickle_and_refusals(tmp_path):
    g = make_synthetic_graph(1200, dim=16, seed=7)
    index = VectorIndex.build(g)
    g.add_nodes(["late"], ["t"], torch.randn(1, 16))
    path = save_vector_index(index, tmp_path / "index.safetensors", g)
    from safetensors.numpy import load_file

    stored = load_file(str(path))  # a plain safetensors file: FAISS's own bytes and the slot table
    assert set(stored) == {"faiss", "slot_row"} and stored["faiss"].dtype.name == "uint8"
    loaded = load_vector_index(path, g)
    q = near(g)
    assert torch.equal(loaded.search(g, q, 6), index.search(g, q, 6))
    other = make_synthetic_graph(1201, dim=16, seed=8)
    with pytest.raises(VectorIndexError, match="another graph"):
        load_vector_index(path, other)
    blob = bytearray(path.read_bytes())
    blob[-5] ^= 0xFF
    (tmp_path / "bad.safetensors").write_bytes(bytes(blob))
    with pytest.raises(VectorIndexError, match="bad.safetensors: checksum mismatch"):
        load_vector_index(tmp_path / "bad.safetensors", g)
    (tmp_path / "junk.safetensors").write_bytes(b"not an index")
    with pytest.raises(VectorIndexError, match="junk.safetensors"):
        load_vector_index(tmp_path / "junk.safetensors", g)


def test_spec_validation():
    with pytest.raises(VectorIndexError, match="kind"):
        IndexSpec(kind="lsh")
    with pytest.raises(VectorIndexError, match="ef_search"):
        IndexSpec(ef_search=0)
    with pytest.raises(VectorIndexError, match="unknown keys"):
        IndexSpec.from_mapping({"efsearch": 3})


def test_an_index_size_no_machine_holds_is_one_line_before_any_work(tmp_path):
    import sys

    from tests import script_runner
    from tests.one_line_errors import ROOT, error_line

    with pytest.raises(VectorIndexError, match=r"IndexSpec.m=100000000: must be an integer in \[1, 1,024\]"):
        IndexSpec(m=100_000_000)
    cmd = [sys.executable, "scripts/build_index.py", f"graphset={tmp_path / 'missing'}", "index.m=100000000"]
    proc = script_runner.run([*cmd, f"hydra.run.dir={tmp_path / 'hydra'}"], cwd=ROOT, timeout=300)
    assert error_line(proc) == "error: IndexSpec.m=100000000: must be an integer in [1, 1,024]"


def test_ann_selector_below_min_nodes_is_exact_and_builds_no_index():
    g = make_synthetic_graph(500, dim=16, seed=9)
    queries = [Query(f"q{i}", "", e) for i, e in enumerate(near(g))]
    sel = make_entry_selector({"name": "ann", "min_nodes": 1000})
    assert sel.select(g, queries, BUDGET) == EmbeddingEntrySelector().select(g, queries, BUDGET) and not g.indexes
    forced = make_entry_selector({"name": "ann", "min_nodes": 0, "index": {"kind": "hnsw", "ef_search": 32}})
    got = forced.select(g, queries, BUDGET)
    assert list(g.indexes) == [IndexSpec(ef_search=32).key] and all(len(r) == 6 for r in got)
    with pytest.raises(ValueError, match="no 'name'"):
        make_entry_selector({"min_nodes": 0})


@pytest.mark.parametrize("policy,key", [("beta_bfs", "entry_selector"), ("router", "entry_selector")])
def test_policy_with_ann_entries_finds_a_node_added_after_the_index(policy, key):
    g = make_synthetic_graph(1500, dim=16, seed=10)
    kwargs = {key: {"name": "ann", "min_nodes": 0}}
    if policy == "router":
        from models.walk_scorer import ScorerConfig, WalkScorer

        torch.manual_seed(0)
        kwargs["scorer"] = WalkScorer(ScorerConfig(dim=16))
        kwargs["device"] = "cpu"
    p = make_policy(policy, **kwargs)
    q = Query("q", "where did I put the keys", torch.nn.functional.normalize(torch.randn(16), dim=0))
    p.retrieve_batch(g, [q], BUDGET)  # builds the index
    assert index_for(g).builds == 1
    g.add_nodes(["keys"], ["the keys are under the mat"], q.embedding[None, :])
    g.add_edge("keys", g.node_ids[0], "semantic")
    r = p.retrieve_batch(g, [q], BUDGET)[0]
    assert g.node_ids[r.entries[0]] == "keys" and r.loaded_ids(g)[0] == "keys"
    assert index_for(g).builds == 1  # found through an incremental add


def test_index_files_for_a_graph_set_and_attaching_them_back(tmp_path):
    graphs = {"conv-1": make_synthetic_graph(300, dim=8, seed=11), "conv/2": make_synthetic_graph(200, dim=8, seed=12)}
    files = {}
    for rel, write in index_files(graphs, IndexSpec(m=8)).items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
        files[rel] = path
    assert all(rel.startswith("indexes/") and rel.endswith("/hnsw-m8-efc80.safetensors") for rel in files)
    fresh = {name: g.copy() for name, g in graphs.items()}  # a copy has no index of its own
    assert not any(g.indexes for g in fresh.values())
    assert attach_indexes(fresh, {**files, "notes.txt": tmp_path / "notes.txt"}) == 2
    q = near(graphs["conv-1"])
    got = fresh["conv-1"].indexes["hnsw-m8-efc80"].search(fresh["conv-1"], q, 6)
    assert torch.equal(got, graphs["conv-1"].indexes["hnsw-m8-efc80"].search(graphs["conv-1"], q, 6))
    swapped = {"conv-1": fresh["conv/2"], "conv/2": fresh["conv-1"]}
    with pytest.raises(VectorIndexError, match="another graph"):
        attach_indexes(swapped, files)


@pytest.mark.parametrize("policy", ["beta_bfs", "uniform_bfs", "ppr"])
def test_ann_entries_over_a_graph_batch_are_each_graphs_own(policy):
    graphs = [make_synthetic_graph(n, dim=16, seed=20 + n) for n in (400, 700, 250)]
    queries = [[Query(f"g{c}q{i}", "", e) for i, e in enumerate(near(g, 5, seed=c))] for c, g in enumerate(graphs)]
    ann = make_policy(policy, entry_selector={"name": "ann", "min_nodes": 0, "index": {"m": 16}})
    exact = make_policy(policy)
    together = ann.retrieve_graphs(graphs, queries, BUDGET)
    for g, qs, got in zip(graphs, queries, together):
        alone = ann.retrieve_batch(g, qs, BUDGET)
        assert [r.loaded for r in got] == [r.loaded for r in alone]  # the union changes nothing
        assert all(0 <= v < g.num_nodes for r in got for v in r.entries)
        # on graphs this small the HNSW search (efSearch 128) finds the exact entries, so the retrieval is exact's
        assert [r.loaded for r in got] == [r.loaded for r in exact.retrieve_batch(g, qs, BUDGET)]


def test_indexes_saved_with_a_graph_set_are_checksummed_and_attached_on_load(tmp_path, monkeypatch):
    import json

    from graphmem.store.graphset import GraphSet
    from graphmem.store.setstore import GraphSetError, add_files
    from tests.small_sets import saved_locomo_set

    saved = saved_locomo_set(tmp_path, limit=2)
    gs = GraphSet.load(saved)
    assert not any(g.indexes for g in gs.graphs.values())
    spec = IndexSpec(m=8)
    stored = add_files(saved, index_files(gs.graphs, spec))
    manifest = json.loads((saved / "manifest.json").read_text())
    assert set(manifest["extra_files"]) == set(stored) and len(stored) == len(gs.graphs)
    assert all(manifest["files"][path]["sha256"] for path in stored.values())  # checksummed like the graphs
    back = GraphSet.load(saved)
    assert all(list(g.indexes) == [spec.key] for g in back.graphs.values())
    # the ANN selector searches the loaded index: no build, and the entries of the index that was saved
    monkeypatch.setattr(VectorIndex, "build", lambda *a, **k: pytest.fail("the saved index was rebuilt"))
    selector = make_entry_selector({"name": "ann", "min_nodes": 0, "index": {"m": 8}})
    queries = back.queries()[:20]
    name = back.questions[0].graph
    mine = [q for q, question in zip(queries, back.questions) if question.graph == name]
    assert selector.select(back.graphs[name], mine, BUDGET) == selector.select(gs.graphs[name], mine, BUDGET)
    # a damaged index file refuses the set, naming the file
    path = saved / stored[next(iter(stored))]
    path.write_bytes(path.read_bytes()[:-8] + b"damaged!")
    with pytest.raises(GraphSetError, match="safetensors"):
        GraphSet.load(saved)


def test_build_index_script_adds_the_indexes_to_a_saved_set(tmp_path, capsys):
    from omegaconf import OmegaConf

    from graphmem.store.graphset import GraphSet
    from tests.script_loader import load_script
    from tests.small_sets import saved_locomo_set

    saved = saved_locomo_set(tmp_path, limit=1)
    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "configs" / "build_index.yaml")
    cfg.graphset, cfg.threads, cfg.index.m = str(saved), 1, 8
    stored = load_script("build_index").build(cfg)
    assert "1 hnsw-m8-efc80 indexes" in capsys.readouterr().out
    (graph,) = GraphSet.load(saved).graphs.values()
    assert list(stored) == [index_file(graph.name, IndexSpec(m=8))] and list(graph.indexes) == ["hnsw-m8-efc80"]
    cfg.index.kind = "lsh"
    with pytest.raises(VectorIndexError, match="kind"):
        load_script("build_index").build(cfg)
