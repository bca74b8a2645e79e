"""The walk's per-graph tables grown after appends (the pair table, the edge CSR, the unit embeddings and the
scorer's static tensors) are, bit for bit, the tables made from scratch; any other change makes them anew."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F

from graphmem import Memory
from graphmem.builders.synthetic import make_synthetic_graph, make_text_graph
from graphmem.core.csr import ROOM, grow_rows, insert_rows
from graphmem.core.graph import out_csr
from graphmem.core.retrieval import Query
from graphmem.index.embed import HashingEncoder
from graphmem.policies import make_policy
from graphmem.policies.rank_features import NUM_RANK_FEATURES
from graphmem.policies.router import LAST_STATIC
from graphmem.policies.tables import node_id_rank, unit_embeddings
from graphmem.policies.walk import graph_walk_tables
from models.edge_encoder import PairTable, build_pair_table, edge_pairs, pair_growth, pair_table
from models.rank_head import RankHead, RankHeadConfig
from models.walk_scorer import ScorerConfig, WalkScorer


def same_pairs(graph, read_edge_pairs: bool = True) -> None:
    """The graph's kept pair table is the one made from scratch, field by field; every edge's pair read from it (made
    then when a growth did not keep it) unless ``read_edge_pairs`` is false."""
    same_table(graph, pair_table(graph), build_pair_table(graph), read_edge_pairs)


def same_table(graph, kept: PairTable, made: PairTable, read_edge_pairs: bool = True) -> None:
    for name in kept.__dataclass_fields__:
        if name != "edge_pair":
            assert torch.equal(getattr(kept, name), getattr(made, name)), name
        elif read_edge_pairs:
            assert torch.equal(edge_pairs(graph, kept), made.edge_pair), name


def same_csr(graph) -> None:
    rowptr, perm = out_csr(graph)
    src, dst = graph.edge_index
    assert torch.equal(perm, torch.argsort(src * graph.num_nodes + dst, stable=True))
    assert torch.equal(rowptr[1:], torch.cumsum(torch.bincount(src, minlength=graph.num_nodes), 0))
    assert torch.equal(unit_embeddings(graph), F.normalize(graph.embeddings.float(), dim=1))
    order = sorted(range(graph.num_nodes), key=graph.node_ids.__getitem__)
    assert node_id_rank(graph)[order].tolist() == list(range(graph.num_nodes))


@pytest.mark.parametrize("read_edge_pairs", [True, False])
def test_a_graph_grown_by_appends_keeps_the_tables_a_fresh_build_makes(read_edge_pairs):
    """Every edge's pair is kept by the growths once read, and not kept (made when read) while nothing reads it."""
    g = make_synthetic_graph(300, dim=16, seed=2)
    gen = torch.Generator().manual_seed(3)
    same_pairs(g, read_edge_pairs), same_csr(g)
    for step in range(6):
        n = g.num_nodes
        ids = [f"{'0anz'[(step + i) % 4]}{step}-{i}" for i in range(step + 1)]  # before, among and after the others
        g.add_nodes(ids, ["t"] * (step + 1), torch.randn(step + 1, 16, generator=gen))
        new = torch.arange(n, g.num_nodes).repeat_interleave(4)  # each new node to 4 earlier ones, both ways
        old = torch.randint(0, n, (new.numel(),), generator=gen)  # (a repeat: parallel edges of one new pair)
        g.add_edges(torch.cat([new, old]), torch.cat([old, new]), "semantic")
        same_pairs(g, read_edge_pairs), same_csr(g)
        assert pair_growth(g) is not None and (pair_table(g).edge_pair is not None) == read_edge_pairs
    same_pairs(g)
    g.remove_edges([0, 5])  # not an append: made anew
    same_pairs(g), same_csr(g)
    assert pair_growth(g) is None


def spare(t: torch.Tensor) -> torch.Tensor:
    """``t`` in a buffer with as many spare rows again (as a grown layout holds it), held by nothing else."""
    return insert_rows(t, torch.empty(0, dtype=torch.long), t[:0], room=1.0)


def test_rows_grown_in_their_own_buffer_are_the_rows_a_copy_gives():
    gen = torch.Generator().manual_seed(0)
    moved = 0
    for trial in range(120):
        n, k = int(torch.randint(1, 40, (1,), generator=gen)), int(torch.randint(0, 9, (1,), generator=gen))
        at = torch.sort(torch.randint(0, n + 1, (k,), generator=gen)).values  # repeats, the start and the end
        shape = (n, 3) if trial % 2 else (n,)
        old = torch.randint(-99, 99, shape, generator=gen).to(torch.float32 if trial % 3 else torch.long)
        new = torch.randint(-99, 99, (k, *shape[1:]), generator=gen).to(old.dtype)
        held = {"rows": spare(old)}
        buffer = held["rows"].data_ptr()
        out = grow_rows(held, "rows", at, new)
        assert "rows" not in held and torch.equal(out, insert_rows(old, at, new)), trial
        moved += out.data_ptr() == buffer
        assert out.data_ptr() == buffer or 2 * n < n + k  # in place whenever the spare rows suffice
    assert moved > 100


def test_rows_someone_else_reads_are_copied_not_moved():
    old, at, new = torch.arange(10.0), torch.tensor([0, 4, 10]), torch.tensor([-1.0, -2.0, -3.0])
    want = insert_rows(old, at, new)
    for hold in ("a second name", "a view", "an array"):
        rows = spare(old)
        other = {"a second name": rows, "a view": rows[2:], "an array": rows.numpy()}[hold]
        before = torch.as_tensor(other).clone()
        held = {"rows": rows}
        del rows
        out = grow_rows(held, "rows", at, new)
        assert torch.equal(out, want) and torch.equal(torch.as_tensor(other), before), hold
        assert out.data_ptr() != torch.as_tensor(other).data_ptr(), hold
    full = {"rows": old.clone()}  # no spare rows: copied into a buffer with ROOM of them
    out = grow_rows(full, "rows", at, new)
    assert torch.equal(out, want) and out.untyped_storage().nbytes() == (13 + int(13 * ROOM)) * 4


def test_the_pairs_into_a_node_that_gained_out_pairs_are_its_reverse_pairs_unless_one_has_none(monkeypatch):
    """A growth finds the pairs into a node that gained out-pairs (their degree columns change) as the reverses of
    its out-pairs when they are all the pairs into it, else by a scan; both give the table made from scratch."""
    import models.edge_encoder as edge_encoder

    found, real = [], edge_encoder._reverse_pairs
    monkeypatch.setattr(edge_encoder, "_reverse_pairs", lambda *a: found.append(real(*a)) or found[-1])
    g = make_synthetic_graph(40, dim=16, seed=4)
    g.remove_edges(list(range(g.num_edges)))
    chain = torch.arange(39)
    g.add_edges(torch.cat([chain, chain + 1]), torch.cat([chain + 1, chain]), "temporal")  # both ways
    pair_table(g)

    def add(node: int, to: int, both_ways: bool) -> None:
        g.add_nodes([f"x{node}"], ["t"], torch.randn(1, 16))
        src, dst = ([node, to], [to, node]) if both_ways else ([node], [to])
        g.add_edges(torch.tensor(src), torch.tensor(dst), "semantic")
        same_pairs(g)
        assert pair_growth(g) is not None

    add(40, 3, both_ways=True)  # node 3's pairs in: 2 -> 3, 4 -> 3, 40 -> 3, each the reverse of one out
    assert found[-1] is not None and found[-1].numel() == 3
    add(41, 5, both_ways=False)  # 41 -> 5 only: node 5 gains a pair in, none out
    add(42, 5, both_ways=True)  # node 5 gained a pair out; 41 -> 5 reverses none of its pairs out: a scan
    assert found[-1] is None


def test_a_growing_pair_table_keeps_its_buffers_and_a_held_one_is_left_alone():
    g = make_synthetic_graph(300, dim=16, seed=2)
    gen = torch.Generator().manual_seed(3)
    edge_pairs(g, pair_table(g))  # read: the growths keep every edge's pair, in its own buffer too
    fields = ("src", "dst", "edge", "edge_pair", "raw", "in_degree")

    def grow() -> None:
        n = g.num_nodes
        g.add_nodes([f"g{n}"], ["t"], torch.randn(1, 16, generator=gen))
        new, old = torch.full((4,), n), torch.randint(0, n, (4,), generator=gen)
        g.add_edges(torch.cat([new, old]), torch.cat([old, new]), "semantic")

    buffers = {name: getattr(pair_table(g), name).data_ptr() for name in fields}
    for step in range(4):  # a built table has spare rows: every growth moves its rows in place
        grow()
        table = pair_table(g)
        assert {name: getattr(table, name).data_ptr() for name in fields} == buffers, step
        table = None
        same_pairs(g)
    held = pair_table(g)
    before = {name: getattr(held, name).clone() for name in fields}
    grow()
    same_pairs(g)
    assert pair_growth(g) is not None
    for name in fields:
        assert torch.equal(getattr(held, name), before[name]), name
        assert getattr(pair_table(g), name).data_ptr() != getattr(held, name).data_ptr(), name


def test_an_embedding_edited_in_place_is_normalised_again():
    g = make_synthetic_graph(200, dim=16, seed=4)
    unit_embeddings(g)
    g.embeddings.mul_(-2.0)  # no append, no log event
    g.invalidate()
    assert torch.equal(unit_embeddings(g), F.normalize(g.embeddings, dim=1))


def walk(dim: int):
    scorer = WalkScorer(ScorerConfig(dim=dim))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in scorer.parameters():  # every weight away from its zero init, so every product counts
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    head = RankHead(RankHeadConfig(NUM_RANK_FEATURES))
    return make_policy("router", scorer=scorer, rank_head=head, entry_selector="hybrid", device="cpu")


def test_a_live_memory_grows_the_walk_tables_and_answers_as_a_fresh_graph(tmp_path):
    texts = make_text_graph(200, dim=16, seed=5, validate=False).texts
    emb = HashingEncoder(384).encode(texts)
    router = walk(384)
    recs = [
        dict(text=texts[i], id=f"n{i}", session=i // 9, time=1e9 + 30.0 * i, speaker=("ann", "bo")[i % 2])
        for i in range(len(texts))
    ]
    with Memory.open(tmp_path / "memory", encoder="hashing") as mem:
        mem.add_many(recs[:150], emb[:150])
        queries = [" ".join(texts[i].split()[:4]) for i in range(0, 150, 15)]
        mem.retrieve(queries[0], policy=router)
        grown = 0
        for k, i in enumerate(range(150, 190, 4)):
            mem.add_many(recs[i : i + 1 + k % 3], emb[i : i + 1 + k % 3])
            got = mem.retrieve(queries[k % len(queries)], policy=router)
            g = mem.graph
            grown += pair_growth(g) is not None
            same_pairs(g), same_csr(g)
            with torch.no_grad():
                made = router.scorer.static(graph_walk_tables(g))
            kept = g.grown[LAST_STATIC][3]
            assert all(torch.equal(kept[key], made[key]) for key in ("xb", "px", "pair_e")), k
            fresh = mem.graph.copy()  # no kept state
            q = Query(qid="q", text=got.query, embedding=HashingEncoder(384).encode([got.query])[0])
            again = router.retrieve_batch(fresh, [q], mem.budget)[0]
            assert got.ranked_ids() == [fresh.node_ids[i] for i in again.ranked] and got.scores == [
                float(s) for s in again.scores
            ]
        assert grown == 10
        ids = mem.graph.node_ids
        for edit in (
            lambda: mem.link(ids[3], ids[4], "semantic"),  # may join a pair the table holds
            lambda: mem.unlink(ids[3], ids[4]),
            lambda: mem.revise(ids[7], "a revised note about the harbour"),
            lambda: mem.forget(ids[9]),
        ):
            edit()
            mem.retrieve(queries[1], policy=router)
            same_pairs(mem.graph), same_csr(mem.graph)


def test_reads_after_writes_grow_the_walk_tables_in_their_own_buffers(tmp_path):
    texts = make_text_graph(140, dim=16, seed=7, validate=False).texts
    emb = HashingEncoder(384).encode(texts)
    router = walk(384)

    def buffers(g) -> dict[str, int]:
        static, pairs = g.grown[LAST_STATIC][3], pair_table(g)
        return {
            **{key: static[key].data_ptr() for key in ("xb", "px", "pair_e")},
            **{name: getattr(pairs, name).data_ptr() for name in ("src", "dst", "edge", "raw", "in_degree")},
            "perm": out_csr(g)[1].data_ptr(),
        }

    with Memory.open(tmp_path / "memory", encoder="hashing") as mem:
        mem.add_many([dict(text=t, id=f"n{i}", session=i // 9) for i, t in enumerate(texts[:120])], emb[:120])
        seen = []
        for i in range(120, 126):  # the first read makes the tables with spare rows, the next ones grow them there
            mem.add(texts[i], id=f"n{i}", session=i // 9, embedding=emb[i])
            mem.retrieve(" ".join(texts[i - 60].split()[:4]), policy=router)
            seen.append(buffers(mem.graph))
        assert seen == [seen[0]] * 6
        same_pairs(mem.graph), same_csr(mem.graph)
        with torch.no_grad():
            made = router.scorer.static(graph_walk_tables(mem.graph))
        kept = mem.graph.grown[LAST_STATIC][3]
        assert all(torch.equal(kept[key], made[key]) for key in ("xb", "px", "pair_e"))


def test_a_read_after_a_write_lets_the_earlier_tables_go_without_the_cyclic_collector(tmp_path):
    texts = make_text_graph(120, dim=16, seed=6, validate=False).texts
    emb = HashingEncoder(384).encode(texts)
    router = walk(384)
    with Memory.open(tmp_path / "memory", encoder="hashing") as mem:
        mem.add_many([dict(text=t, id=f"n{i}", session=i // 9) for i, t in enumerate(texts[:100])], emb[:100])
        gc.collect()
        gc.disable()
        try:
            for i in range(100, 110):
                mem.add(texts[i], id=f"n{i}", session=i // 9, embedding=emb[i])
                mem.retrieve(" ".join(texts[i - 50].split()[:4]), policy=router)
            alive = {id(o.src) for o in gc.get_objects() if type(o) is PairTable}
        finally:
            gc.enable()
        assert len(alive) == 1  # the last table (and its copies, which share its tensors) only


def test_a_writer_saves_the_walks_pair_table_and_an_open_at_its_version_reads_it_when_the_walk_needs_it(
    tmp_path, monkeypatch
):
    """The pair table a writer's walk made is saved at close; an open at the same version takes it (and the speaker
    and sequence codes) instead of making it, as it is or grown by the adds since; a write without the walk since
    leaves no stale file. Every table and answer equals one made from the records (a copy of the graph)."""
    import contextlib

    import pytest

    from graphmem.store.memory_state import pairs_path

    texts = make_text_graph(150, dim=16, seed=6, validate=False).texts
    emb = HashingEncoder(384).encode(texts)
    router, folder = walk(384), tmp_path / "memory"
    recs = [
        dict(text=texts[i], id=f"n{i}", session=i // 9, time=1e9 + 30.0 * i, speaker=("ann", "bo")[i % 2])
        for i in range(len(texts))
    ]
    queries = [" ".join(texts[i].split()[:4]) for i in range(0, 120, 20)]

    def answers(mem) -> list:
        return [mem.retrieve(q, policy=router).ranked_ids() for q in queries]

    def fresh_answers(mem) -> list:
        g = mem.graph.copy()  # no kept or saved state: every table made from the records
        enc = HashingEncoder(384).encode(queries)
        found = [
            router.retrieve_batch(g, [Query(qid="q", text=q, embedding=x)], mem.budget)[0] for q, x in zip(queries, enc)
        ]
        return [[g.node_ids[v] for v in r.ranked] for r in found]

    @contextlib.contextmanager
    def not_made():
        with monkeypatch.context() as patch:
            patch.setattr("models.edge_encoder.build_pair_table", lambda g: pytest.fail("the pair table was made"))
            yield

    def same_made(mem) -> None:
        same_table(mem.graph, pair_table(mem.graph), build_pair_table(mem.graph.copy()))

    with Memory.open(folder, encoder="hashing") as mem:
        mem.add_many(recs[:120], emb[:120])
        first = answers(mem)
    assert pairs_path(folder).is_file()
    with Memory.open(folder, encoder="hashing", readonly=True) as mem:
        with not_made():
            assert answers(mem) == first
        assert first == fresh_answers(mem)
        same_made(mem)
    with Memory.open(folder, encoder="hashing") as mem:  # the saved table grown by the adds since
        mem.add_many(recs[120:135], emb[120:135])
        with not_made():
            grown = answers(mem)
        assert pair_growth(mem.graph) is not None and grown == fresh_answers(mem)
        same_made(mem)
    with Memory.open(folder, encoder="hashing", readonly=True) as mem, not_made():
        assert answers(mem) == grown
    with Memory.open(folder, encoder="hashing") as mem:  # the walk's table, then adds: grown at close and saved
        with not_made():
            answers(mem)
        mem.add_many(recs[135:140], emb[135:140])
    with Memory.open(folder, encoder="hashing", readonly=True) as mem:
        with not_made():
            again = answers(mem)
        assert again == fresh_answers(mem)
        same_made(mem)
    with Memory.open(folder, encoder="hashing") as mem:  # no walk: the file of the version before is removed
        mem.add_many(recs[140:], emb[140:])
    assert not pairs_path(folder).exists()


def test_a_damaged_saved_pair_table_is_made_again_and_answers_as_one_made(tmp_path, caplog):
    from graphmem.store.memory_state import pairs_path

    texts = make_text_graph(80, dim=16, seed=8, validate=False).texts
    router, folder = walk(384), tmp_path / "memory"
    with Memory.open(folder, encoder="hashing") as mem:
        mem.add_many([dict(text=t, id=f"n{i}", session=i // 9, time=1e9 + i) for i, t in enumerate(texts)])
        want = mem.retrieve(texts[3], policy=router).ranked_ids()
    data = bytearray(pairs_path(folder).read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the table's arrays: the per-node codes are read whole at open
    pairs_path(folder).write_bytes(bytes(data))
    with Memory.open(folder, encoder="hashing", readonly=True) as mem:
        assert mem.retrieve(texts[3], policy=router).ranked_ids() == want
        same_pairs(mem.graph)
    assert "not a usable pair table" in caplog.text


def test_feedback_alone_leaves_the_saved_pair_table_in_use(tmp_path, monkeypatch):
    """Feedback writes Beta counters, which no pair feature reads: a writer that only gives feedback (with the walk,
    or without it) neither removes nor writes again the saved pair table, and the next open still reads it."""
    import pytest

    from graphmem.store.memory_state import pairs_path

    texts = make_text_graph(90, dim=16, seed=9, validate=False).texts
    router, folder = walk(384), tmp_path / "memory"
    with Memory.open(folder, encoder="hashing") as mem:
        mem.add_many([dict(text=t, id=f"n{i}", session=i // 9, time=1e9 + i) for i, t in enumerate(texts)])
        mem.retrieve(texts[3], policy=router)
    written = pairs_path(folder).stat().st_mtime_ns
    monkeypatch.setattr("models.edge_encoder.build_pair_table", lambda g: pytest.fail("the pair table was made"))
    monkeypatch.setattr("graphmem.memory.save_pairs", lambda *a: pytest.fail("the pair table was written again"))
    for with_walk in (False, True):
        with Memory.open(folder, encoder="hashing") as mem:
            r = mem.retrieve(texts[5], policy=router if with_walk else mem.policy)
            before = mem.store.version()
            mem.feedback(r, labels=[("n0", "n1", "helpful", 1.0)])  # a temporal edge: counters written
            assert mem.store.version()["changes"] > before["changes"]
        assert pairs_path(folder).stat().st_mtime_ns == written
    with Memory.open(folder, encoder="hashing", readonly=True) as mem:
        mem.retrieve(texts[3], policy=router)
        same_table(mem.graph, pair_table(mem.graph), build_pair_table(mem.graph.copy()))


def test_the_walks_static_tensors_are_saved_with_the_pair_table_and_read_by_the_same_scorer(tmp_path, monkeypatch):
    """A writer that walked saves the scorer's static tensors of its pair table (grown to the adds made since the walk)
    with their scorer's digest. A reopen walked by that scorer (another instance of the same weights) reads them
    instead of computing them, as they are or grown by later adds, and answers as a graph that made everything;
    another scorer computes its own."""
    import contextlib

    import pytest

    from graphmem.policies.router import SAVED_STATIC

    texts = make_text_graph(120, dim=16, seed=11, validate=False).texts
    folder = tmp_path / "memory"
    recs = [dict(text=t, id=f"n{i}", session=i // 9, time=1e9 + 30.0 * i) for i, t in enumerate(texts)]
    queries = [" ".join(texts[i].split()[:4]) for i in range(0, 100, 25)]

    def answers(mem, router) -> list:
        return [mem.retrieve(q, policy=router).ranked_ids() for q in queries]

    def fresh_answers(mem, router) -> list:
        g, enc = mem.graph.copy(), HashingEncoder(384).encode(queries)
        found = [
            router.retrieve_batch(g, [Query(qid="q", text=q, embedding=x)], mem.budget)[0] for q, x in zip(queries, enc)
        ]
        return [[g.node_ids[v] for v in r.ranked] for r in found]

    with Memory.open(folder, encoder="hashing") as mem:
        mem.add_many(recs[:90])
        router = walk(384)  # held to the close: its tensors are grown and saved then
        answers(mem, router)
        mem.add_many(recs[90:100])  # after the walk: the tensors are grown to these at close

    @contextlib.contextmanager
    def not_computed():
        with monkeypatch.context() as patch:
            patch.setattr(WalkScorer, "static", lambda *a: pytest.fail("the static tensors were computed"))
            yield

    with Memory.open(folder, encoder="hashing", readonly=True) as mem:
        router = walk(384)
        with not_computed():
            got = answers(mem, router)
        assert got == fresh_answers(mem, router)
    with Memory.open(folder, encoder="hashing") as mem:
        mem.add_many(recs[100:])  # before the first walk: the saved tensors are grown
        router = walk(384)
        with not_computed():
            got = answers(mem, router)
        assert got == fresh_answers(mem, router) and SAVED_STATIC not in mem.graph.grown
    other = WalkScorer(ScorerConfig(dim=384))
    with Memory.open(folder, encoder="hashing", readonly=True) as mem:
        router = make_policy("router", scorer=other, entry_selector="hybrid", device="cpu")
        assert answers(mem, router) == fresh_answers(mem, router)
        assert SAVED_STATIC in mem.graph.grown  # left for the scorer it is of


def test_a_pair_table_saved_without_the_walks_static_tensors_gains_them_from_a_walk_without_writes(tmp_path):
    """A file saved while no walk's tensors were held (the scorer let go of before the close) is written again, with
    them, by the close of a session that walked with no write; the next reader reads them."""
    import zipfile

    import pytest

    from graphmem.store.memory_state import pairs_path

    texts = make_text_graph(80, dim=16, seed=12, validate=False).texts
    folder = tmp_path / "memory"
    with Memory.open(folder, encoder="hashing") as mem:
        mem.add_many([dict(text=t, id=f"n{i}", session=i // 9, time=1e9 + i) for i, t in enumerate(texts)])
        mem.retrieve(texts[3], policy=walk(384))  # its scorer is let go of at once
        gc.collect()
    assert "static.npy" not in zipfile.ZipFile(pairs_path(folder)).namelist()
    router = walk(384)
    with Memory.open(folder, encoder="hashing") as mem:
        want = mem.retrieve(texts[3], policy=router).ranked_ids()
    assert "static.npy" in zipfile.ZipFile(pairs_path(folder)).namelist()
    with Memory.open(folder, encoder="hashing", readonly=True) as mem:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(WalkScorer, "static", lambda *a: pytest.fail("the static tensors were computed"))
            assert mem.retrieve(texts[3], policy=walk(384)).ranked_ids() == want


@pytest.mark.parametrize("way", ["read", "made", "made in blocks"])
def test_the_tables_of_an_open_memory_grow_within_their_first_buffers(tmp_path, monkeypatch, way):
    """The pair table and the walk's static tensors (read from the saved file, or made at the first walk when there
    is none, in one block of pairs or several) and the unit embeddings have spare rows: the first read after an add
    grows them where they are (no copy of every pair), and they equal the tables made from scratch."""
    import shutil

    if way == "made in blocks":
        monkeypatch.setattr("models.walk_scorer.STATIC_PAIR_BLOCK", 128)

    texts = make_text_graph(120, dim=16, seed=13, validate=False).texts
    folder, router = tmp_path / "memory", walk(384)
    recs = [dict(text=t, id=f"n{i}", session=i // 9, time=1e9 + 30.0 * i) for i, t in enumerate(texts)]
    with Memory.open(folder, encoder="hashing") as mem:
        mem.add_many(recs[:100])
        mem.retrieve(texts[3], policy=router)  # the table and the tensors are saved at close
    if way != "read":
        shutil.rmtree(folder / "indexes")
    fields = ("src", "dst", "edge", "raw", "in_degree")

    def buffers(mem) -> dict[str, int]:
        table, static = pair_table(mem.graph), mem.graph.grown[LAST_STATIC][3]
        held = {name: getattr(table, name).data_ptr() for name in fields}
        held |= {name: static[name].data_ptr() for name in ("xb", "px", "pair_e")}
        return held | {"unit": unit_embeddings(mem.graph).data_ptr()}

    with Memory.open(folder, encoder="hashing") as mem:
        mem.retrieve(texts[5], policy=router)
        assert mem.state_loaded == (way == "read") and pair_growth(mem.graph) is None  # not grown yet
        before = buffers(mem)
        for i, rec in enumerate(recs[100:103]):
            mem.add(**rec)
            mem.retrieve(texts[7], policy=router)
            assert pair_growth(mem.graph) is not None
            assert buffers(mem) == before, i
        same_table(mem.graph, pair_table(mem.graph), build_pair_table(mem.graph.copy()))
        made = router.scorer.static(graph_walk_tables(mem.graph.copy()))
        kept = mem.graph.grown[LAST_STATIC][3]
        assert all(torch.equal(kept[name], made[name]) for name in ("xb", "px", "pair_e"))
