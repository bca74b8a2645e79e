"""The live memory (graphmem.memory): grown turn by turn it equals the batch graph; it persists, forgets to the byte,
learns from feedback, and refuses bad input in one line."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import torch

from graphmem import Memory
from graphmem.builders.config import GraphConfig
from graphmem.builders.edges import time_window_pairs
from graphmem.builders.entities import make_entity_extractor
from graphmem.builders.incremental import Record, TimeIndex, records_of
from graphmem.builders.locomo import build_locomo_graph, node_texts, turn_records
from graphmem.core import Budget
from graphmem.core.graph import MemoryGraph, edge_table
from graphmem.core.tokens import node_tokens
from graphmem.datasets.locomo import load_locomo
from graphmem.datasets.paths import data_file
from graphmem.index.embed import HashingEncoder, encoder_fingerprint
from graphmem.memory import MemoryError
from graphmem.store.checkpoint import save_checkpoint
from graphmem.store.memory_state import state_path
from graphmem.store.memory_store import MemoryStoreError
from models.walk_scorer import ScorerConfig, WalkScorer


@pytest.fixture(scope="module")
def conversations():
    convs, _, _ = load_locomo(data_file("locomo/locomo_dev8.json"))
    return convs


def assert_same_graph(a, b) -> None:
    assert a.node_ids == b.node_ids and a.texts == b.texts and a.keys == b.keys and a.metadata == b.metadata
    assert torch.equal(a.embeddings, b.embeddings)
    assert torch.allclose(a.timestamps, b.timestamps, equal_nan=True)
    assert edge_table(a) == edge_table(b)


def test_every_locomo_conversation_grown_turn_by_turn_equals_the_batch_graph(tmp_path, conversations):
    cfg = GraphConfig(encoder="hashing", incremental=True)
    extractor, enc = make_entity_extractor("offline"), HashingEncoder(384)
    for i, conv in enumerate(conversations):
        batch = build_locomo_graph(conv, enc.encode(node_texts(conv)), cfg, extractor)
        with Memory.open(tmp_path / conv.sample_id, encoder="hashing") as mem:
            records = turn_records(conv)
            if i < 2:  # turn by turn, one transaction each
                for r in records:
                    mem.add(r.text, speaker=r.speaker, time=r.time, session=r.session, id=r.id, meta=r.meta)
            else:  # one transaction per session: the same rules, record by record
                for s in sorted({r.session for r in records}):
                    mem.add_many([r for r in records if r.session == s])
            assert_same_graph(batch, mem.graph)
            live = edge_table(mem.graph)
        with Memory.open(tmp_path / conv.sample_id, encoder="hashing", readonly=True) as again:
            assert edge_table(again.graph) == live and again.integrity() == []


def test_a_built_graphs_records_regrow_its_nodes_and_with_the_incremental_rules_its_edges(tmp_path, conversations):
    conv, enc = conversations[1], HashingEncoder(384)
    batch = build_locomo_graph(
        conv,
        enc.encode(node_texts(conv)),
        GraphConfig(encoder="hashing", incremental=True),
        make_entity_extractor("offline"),
    )
    records = records_of(batch)
    # the turns as the memory receives them, with the node's position and key kept
    assert [
        dataclasses.replace(r, meta={**r.meta, "position": p}, key=k)
        for r, p, k in zip(turn_records(conv), [m["position"] for m in batch.metadata], batch.keys)
    ] == records
    with Memory.open(tmp_path / "m", encoder="hashing") as mem:
        mem.add_many(records, embeddings=batch.embeddings)  # the graph's own embeddings: nothing re-encoded
        assert_same_graph(batch, mem.graph)
    g = MemoryGraph.empty(2)  # a speaker without its prefix stays in the metadata; no time is None
    g.add_nodes(["x"], ["no prefix"], torch.eye(2)[:1], metadata=[{"speaker": "Ann", "title": "t"}])
    assert records_of(g) == [Record("x", "no prefix", None, None, None, {"speaker": "Ann", "title": "t"}, g.keys[0])]


def test_the_incremental_rules_differ_from_the_default_batch_rules(conversations):
    """The option is a different rule, not a no-op: neighbours among earlier turns only change the graph."""
    conv, enc, ext = conversations[0], HashingEncoder(384), make_entity_extractor("offline")
    emb = enc.encode(node_texts(conv))
    default = build_locomo_graph(conv, emb, GraphConfig(encoder="hashing"), ext)
    incremental = build_locomo_graph(conv, emb, GraphConfig(encoder="hashing", incremental=True), ext)
    assert edge_table(default) != edge_table(incremental)


def test_the_time_index_takes_records_in_any_time_order():
    """Back-filled and late records (times before the latest, equal times, unknown ones): the window's
    candidates are those of a scan over every key, after a deletion too, and the index made at once equals it."""
    rng, index, keys = random.Random(0), TimeIndex(), []
    for row in range(300):
        t = rng.choice([float(rng.randrange(40)), rng.uniform(0.0, 40.0), math.nan])
        index.add(t, row)
        keys += [(t, row)] if math.isfinite(t) else []
        q, w = rng.choice([float(rng.randrange(-5, 45)), rng.uniform(-5.0, 45.0)]), rng.choice([0.0, 1.0, 7.5])
        assert index.within(q, w) == sorted((abs(ti - q), r) for ti, r in keys if abs(ti - q) <= w)
    times = torch.full((300,), math.nan, dtype=torch.float64)
    times[[r for _, r in keys]] = torch.tensor([t for t, _ in keys], dtype=torch.float64)
    assert TimeIndex.of(times).keys() == index.keys() == sorted(keys)
    gone = set(range(0, 300, 3))
    new_row = {r: r - (r + 2) // 3 for r in range(300) if r not in gone}
    index.remove(gone, new_row)
    assert index.keys() == sorted((t, new_row[r]) for t, r in keys if r not in gone)


def test_records_arriving_out_of_time_order_get_the_batch_rules_temporal_edges(tmp_path):
    """A memory fed records whose times go back and forth links each to its nearest-in-time earlier records as
    the batch rule does (``earlier_only``), and a reopened memory (its time index rebuilt at once) goes on as an
    open one does."""
    rng = random.Random(1)
    times = [float(rng.randrange(0, 4000, 100)) for _ in range(40)]
    cfg = GraphConfig(encoder="hashing")

    def add(m, rows):
        for i in rows:
            m.add(f"note {i} about topic {i % 7}", id=f"r{i}", time=times[i])

    with Memory.open(tmp_path / "reopened", encoder="hashing") as m:
        add(m, range(25))
    with (
        Memory.open(tmp_path / "live", encoder="hashing") as live,
        Memory.open(tmp_path / "reopened", encoder="hashing") as other,
    ):
        add(live, range(40))
        add(other, range(25, 40))
        assert edge_table(live.graph) == edge_table(other.graph)
        g = live.graph
        temporal = g.edge_type == g.relations.index("temporal")
        got = set(map(tuple, g.edge_index[:, temporal].T.tolist()))
        rows, nbr = time_window_pairs(g.timestamps, cfg.temporal_window_s, cfg.temporal_cap, earlier_only=True)
        assert got == {(int(a), int(b)) for a, b in zip(rows, nbr)} | {(int(b), int(a)) for a, b in zip(rows, nbr)}
        assert len(got) > 40


@pytest.fixture
def mem(tmp_path):
    with Memory.open(tmp_path / "m", encoder="hashing") as m:
        m.add("I adopted a greyhound called Pixel last May.", speaker="Alice", session=1, id="a1", time=1000.0)
        m.add("What a lovely name! Does Pixel like the beach?", speaker="Bob", session=1, id="b1", time=1001.0)
        m.add("Yes, because the sand is soft, Pixel runs for hours.", speaker="Alice", session=1, id="a2", time=1002.0)
        m.add("My sister Carmen lives in Lisbon.", speaker="Bob", session=2, id="b2", time=9000.0)
        yield m


def test_add_retrieve_get_and_stats(mem):
    assert len(mem) == 4 and mem.get("a1")["text"] == "Alice: I adopted a greyhound called Pixel last May."
    assert "a1" in mem and "z9" not in mem and 3 not in mem
    r = mem.retrieve("Where does Carmen live?")
    assert r.ranked_ids()[0] == "b2" and r.texts()[0] == "Bob: My sister Carmen lives in Lisbon."
    assert r.policy == "hybrid" and set(r.loaded) == set(r.ranked)
    stats = mem.stats()
    assert stats["records"] == 4 and stats["edges"] == mem.graph.num_edges > 0 and stats["feedback"] == 0
    assert mem.graph.metadata[1] == {"speaker": "Bob", "session": 1, "position": 1}


def test_feedback_updates_the_counters_of_the_traversed_transitions_and_is_logged(mem):
    r = mem.retrieve("Does Pixel like the beach?", policy="beta_bfs", budget=Budget(max_entries=1))
    assert r.traversed, "beta_bfs walks edges from its one entry"
    src, dst, _ = r.traversed[0]
    entry = mem.feedback(r, helpful=[dst])
    u, v = mem._row[src], mem._row[dst]
    edges = mem.graph.edges_between(u, v)
    assert entry["edges_updated"] >= 1 and float(mem.graph.S[edges].min()) == 1.0
    entry = mem.feedback(r.id, reward=0.25)
    assert float(mem.graph.F[edges].min()) == 0.75 and float(mem.graph.S[edges].min()) == 1.25
    log = mem.feedback_log()
    assert [e["helpful"] for e in log] == [[dst], None] and log[1]["reward"] == 0.25
    folder = mem.store.folder
    mem.close()
    with Memory.open(folder, encoder="hashing") as again:  # the counters persist
        assert float(again.graph.S[again.graph.edges_between(u, v)].min()) == 1.25


def test_fractional_feedback_leaves_the_counters_reopening_gives_and_a_failed_write_changes_none(tmp_path):
    lines = ["Alice adopted a greyhound called Pixel.", "Does Pixel like the beach?", "Pixel runs on the beach."]
    with Memory.open(tmp_path / "m", encoder="hashing") as mem:
        for i, text in enumerate(lines):
            mem.add(text, speaker="ab"[i % 2], session=0, id=f"r{i}", time=1000.0 + i)
        r = mem.retrieve("Does Pixel like the beach?", policy="beta_bfs", budget=Budget(max_entries=1))
        assert r.traversed
        for _ in range(30):  # 0.1 and 0.9 have no exact float: float32 and float64 running sums part ways
            mem.feedback(r, reward=0.1)
        live = edge_table(mem.graph)
        assert any(0 < s != round(s, 4) for *_, s, _ in live)
    with Memory.open(tmp_path / "m", encoder="hashing") as mem:
        assert edge_table(mem.graph) == live
        r = mem.retrieve("Does Pixel like the beach?", policy="beta_bfs", budget=Budget(max_entries=1))
        write = mem.store.write

        def failing():  # a transaction that fails at its first counter: rolled back
            ctx = write()
            tx = ctx.__enter__()
            tx.set_counts = lambda *a: (_ for _ in ()).throw(sqlite3.OperationalError("disk I/O error"))
            return _Exiting(ctx, tx)

        mem.store.write = failing
        with pytest.raises(sqlite3.OperationalError):
            mem.feedback(r, reward=0.1)
        mem.store.write = write
        assert edge_table(mem.graph) == live
    for from_store in (False, True):  # the state saved at close, and the rows of the database
        if from_store:
            state_path(tmp_path / "m").unlink()
        with Memory.open(tmp_path / "m", encoder="hashing", readonly=True) as again:
            assert edge_table(again.graph) == live


class _Exiting:
    def __init__(self, ctx, tx):
        self.ctx, self.tx = ctx, tx

    def __enter__(self):
        return self.tx

    def __exit__(self, *exc):
        return self.ctx.__exit__(*exc)


def _bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_forget_removes_the_text_from_every_byte_of_the_store_and_from_retrieval(mem):
    secret = "My sister Carmen lives in Lisbon."
    r = mem.retrieve("Where does Carmen live?", policy="beta_bfs", budget=Budget(max_entries=1))
    mem.feedback(r, reward=1.0)
    assert secret.encode() in _bytes(mem.store.folder)
    assert mem.forget("b2") == 1
    assert secret.encode() not in _bytes(mem.store.folder)
    assert b"Lisbon" not in _bytes(mem.store.folder)
    assert len(mem) == 3 and "b2" not in mem.retrieve("Where does Carmen live?").ranked_ids()
    for e in mem.feedback_log():
        ids = e["retrieval"]["ranked"] + e["retrieval"]["loaded"] + [x for t in e["retrieval"]["traversed"] for x in t]
        assert "b2" not in ids + [x for label in e["labels"] for x in label[:2]]
    assert mem.integrity() == []
    with pytest.raises(MemoryError, match="'b2' is not a record"):
        mem.forget("b2")


@pytest.mark.parametrize("call", ["forget", "revise"])
def test_a_process_dying_right_after_a_forget_or_revise_commits_leaves_no_saved_copy_of_the_old_text(
    tmp_path, monkeypatch, call
):
    """The saved state and indexes hold texts and vectors: they are removed before the write, so a process that
    dies between the commit and its own bookkeeping leaves the old text in no file of the folder."""
    secret = "My sister Carmen lives in Zaragoza."
    with Memory.open(tmp_path / "m", encoder="hashing") as m:
        for i, (who, text) in enumerate([*_LINES, ("Bob", secret)]):
            m.add(text, speaker=who, session=0, id=f"r{i}", time=1000.0 + i)
        m.retrieve("Where does Carmen live?")  # BM25 made: saved at close with the state
    assert b"Zaragoza" in state_path(tmp_path / "m").read_bytes()
    m = Memory.open(tmp_path / "m", encoder="hashing")
    monkeypatch.setattr(Memory, "_forgotten" if call == "forget" else "_revised", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # the process dies here, after the commit
        m.forget("r5") if call == "forget" else m.revise("r5", "My sister Carmen lives in Porto.")
    assert b"Zaragoza" not in _bytes(tmp_path / "m")
    m.store.close()


def test_revise_replaces_the_text_everywhere(mem):
    mem.revise("a1", "I adopted a whippet called Comet in June.")
    assert b"greyhound" not in _bytes(mem.store.folder)
    assert mem.get("a1")["text"] == "Alice: I adopted a whippet called Comet in June."
    assert mem.retrieve("Which dog is called Comet?").ranked_ids()[0] == "a1"
    assert mem.integrity() == []


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: m.add(""), "field 'text' must be a non-empty string"),
        (lambda m: m.add("x" * 1_000_001), "more than max_text_chars"),
        (lambda m: m.add("hello", id="a1"), "id 'a1' is already in the memory"),
        (lambda m: m.forget(["nope"]), "'nope' is not a record"),
        (lambda m: m.revise("nope", "text"), "'nope' is not a record"),
        (lambda m: m.feedback("no-such-retrieval", reward=1.0), "retrieval 'no-such-retrieval' is unknown"),
        (lambda m: m.add_many([{"text": "a", "colour": "red"}]), "unknown fields"),
        (lambda m: m.add("hi", time=float("inf")), "field 'time' must be a finite"),
    ],
)
def test_bad_input_is_one_line(mem, call, message):
    with pytest.raises((MemoryError, ValueError)) as err:
        call(mem)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_memory_reopened_with_another_encoder_or_a_checkpoint_of_another_encoder_is_refused(tmp_path, mem):
    folder = mem.store.folder
    mem.close()
    with pytest.raises(MemoryError, match="created with encoder 'hashing'"):
        Memory.open(folder, encoder=HashingEncoder(128))
    other = tmp_path / "walk.pt"
    scorer = WalkScorer(ScorerConfig(dim=128))
    inputs = {
        "encoder": "hashing-bow-128",
        "encoder_fingerprint": encoder_fingerprint(HashingEncoder(128)),
        "embedding_dim": 128,
        "graphset_config_hash": "x",
        "train_graphs": [],
        "val_graphs": [],
    }
    save_checkpoint(other, "walk", {"scorer": scorer.checkpoint(), "finished": True}, inputs)
    with pytest.raises(MemoryError, match="trained on 128-d embeddings"):
        Memory.open(folder, encoder="hashing", checkpoint=other)


def test_a_second_writer_is_refused_in_one_line_or_waits(tmp_path):
    first = Memory.open(tmp_path / "w", encoder="hashing")
    with pytest.raises(MemoryStoreError, match="has a writer already") as err:
        Memory.open(tmp_path / "w", encoder="hashing")
    assert "\n" not in str(err.value)
    reader = Memory.open(tmp_path / "w", encoder="hashing", readonly=True)  # readers open beside the writer
    got = {}

    def second():
        with Memory.open(tmp_path / "w", encoder="hashing", wait=True) as m:
            got["len"] = len(m)
            m.add("the second writer's turn", id="w2")

    t = threading.Thread(target=second)
    t.start()
    first.add("the first writer's turn", id="w1")
    time.sleep(0.3)
    assert t.is_alive()  # waiting for the lock
    first.close()
    t.join(30)
    assert got["len"] == 1
    reader.close()
    with Memory.open(tmp_path / "w", encoder="hashing") as m:
        assert sorted(m.graph.node_ids) == ["w1", "w2"]


@pytest.mark.parametrize("closed", [True, False])
def test_a_memory_let_go_of_is_freed_at_once_without_the_cyclic_collector(tmp_path, closed):
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        m = Memory.open(tmp_path / "m", encoder="hashing")
        for i in range(12):
            m.add(f"Alice walked the dog Rex around Paris, lap {i}.", speaker="Alice", session=1, time=1e9 + i)
        m.feedback(m.retrieve("dog Rex", policy="beta_bfs"), reward=1.0)
        assert m.retrieve("Where is Paris?").ranked_ids()
        held = [weakref.ref(x) for x in (m, m.graph, m.graph.embeddings, m.builder)]
        if closed:
            m.close()
        del m
        assert [r() is None for r in held] == [True] * 4
    finally:
        gc.enable()


def test_a_reader_opened_while_a_writer_adds_sees_whole_transactions(tmp_path):
    """Records and edges are read in one snapshot: a reader opening between a writer's commits never holds an
    edge to a record it did not read, nor a record without its edges."""
    writer = Memory.open(tmp_path / "w", encoder="hashing")
    words = "lamp river stone cloud maple violin harbor tiger".split()
    for i in range(300):
        writer.add(f"{words[i % 8]} {words[(3 * i) % 8]} and Carmen {i}", session=i % 4, id=f"a{i}", time=10.0 * i)
    done = threading.Event()

    def write():
        i = 300
        while not done.is_set():
            writer.add(f"{words[i % 8]} {words[(5 * i) % 8]} and Carmen {i}", session=i % 4, id=f"a{i}", time=10.0 * i)
            i += 1

    t = threading.Thread(target=write)
    t.start()
    try:
        for _ in range(12):
            with Memory.open(tmp_path / "w", encoder="hashing", readonly=True) as reader:
                reader.graph.validate()
                last = max(reader._seq)  # adds only: the edges among the records read are those committed with them
                among = "SELECT count(*) FROM edges WHERE src <= ? AND dst <= ?"
                assert reader.store.conn.execute(among, (last, last)).fetchone()[0] == reader.graph.num_edges
                assert len(reader) == last + 1
    finally:
        done.set()
        t.join(30)
        writer.close()


def test_the_readme_example_runs(tmp_path, monkeypatch):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## A live memory", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert "Memory.open(" in block and "mem.feedback(" in block
    monkeypatch.chdir(tmp_path)
    code = block.replace(
        'Memory.open("outputs/memories/alice")', 'Memory.open("outputs/memories/alice", encoder="hashing")'
    )
    exec(compile(code, "README.md", "exec"), {})
    with Memory.open(tmp_path / "outputs/memories/alice", encoder="hashing") as mem:
        assert len(mem) == 1 and len(mem.feedback_log()) == 1


def test_a_curator_links_and_unlinks_and_a_reflector_labels_transitions(mem):
    assert mem.link("a1", "b2", "causal") and not mem.link("a1", "b2", "causal")
    e = mem.graph.edges_between(mem._row["a1"], mem._row["b2"])
    assert mem.graph.relations[int(mem.graph.edge_type[e[-1]])] == "causal" and float(mem.graph.S[e].sum()) == 0
    r = mem.retrieve("Pixel", policy="beta_bfs")
    entry = mem.feedback(r, labels=[("a1", "b2", "harmful", 0.5), ("a1", "nope", "helpful", 1.0)])
    assert entry["edges_updated"] == int(e.numel()) and entry["transitions_gone"] == 1
    assert float(mem.graph.F[mem.graph.edges_between(mem._row["a1"], mem._row["b2"])].min()) == 0.5
    with pytest.raises(ValueError, match="label 'great' is not one of"):
        mem.feedback(r, labels=[("a1", "b2", "great", 0.5)])
    assert (
        mem.unlink("a1", "b2") == int(e.numel())
        and mem.graph.edges_between(mem._row["a1"], mem._row["b2"]).numel() == 0
    )
    assert mem.integrity() == []


def test_a_writer_writes_the_entities_of_each_record_as_it_arrives(tmp_path):
    from rl.writer.extractor import WriterExtractor
    from rl.writer.grpo import WriterConfig
    from rl.writer.model import load_writer

    model, tok = load_writer("tiny", seed=0)
    writer = WriterExtractor(model, tok, WriterConfig(max_completion_length=24, grammar=False))
    with Memory.open(tmp_path / "w", encoder="hashing", extractor=writer) as mem:
        mem.add("Alice met Bob in Paris.", id="x")
        mem.add("Bob flew back to Oslo.", id="y")
        assert mem.store.settings()["graph"]["entity_extractor"] == writer.name
        assert len(mem.builder.node_entities) == 2 and mem.integrity() == []
    with pytest.raises(MemoryError, match="entity_extractor"):
        Memory.open(tmp_path / "w", encoder="hashing", graph={"entity_extractor": "offline"})
    with pytest.raises(MemoryError, match="open it with extractor="):
        Memory.open(tmp_path / "w", encoder="hashing")


def test_the_arrival_order_rules_are_refused_for_documents_in_one_line():
    from graphmem.builders import DataConfig, build_graphset
    from graphmem.builders.config import BatchRulesOnly

    with pytest.raises(BatchRulesOnly, match="graph.incremental=true: HotpotQA paragraph graphs"):
        build_graphset(
            DataConfig(name="hotpotqa", limit=2), GraphConfig(encoder="hashing", incremental=True), progress=False
        )


def derived_state(m) -> dict:
    """What a memory derives from its store: the graph, the builder's state, the word counts, a few answers."""
    b = m.builder
    questions = ("Pixel", "Carmen in Lisbon", "Dario in Madrid")
    return {
        "mentions": b.entities.mentions,
        "node_entities": b.node_entities,
        "vocabulary": (b.vocabulary, +m.vocabulary),
        "times_tails": (b.times.keys(), b.tails),
        "answers": [m.retrieve(q, policy=p).ranked_ids() for q in questions for p in ("hybrid", "beta_bfs")],
    }


def test_revise_unlink_and_forget_update_the_memory_in_place_as_reopening_it_would(tmp_path, monkeypatch):
    lines = [
        ("Alice", "I adopted a greyhound called Pixel last May."),
        ("Bob", "Does Pixel like the beach near Lisbon?"),
        ("Alice", "Yes, Pixel runs for hours while Zora watches."),
        ("Bob", "My sister Carmen lives in Lisbon."),
        ("Alice", "Carmen should meet Pixel in Porto."),
    ]
    steps = [
        lambda m: m.revise("r2", "Yes, Pixel runs with Dario in Madrid."),  # Zora leaves the vocabulary
        lambda m: m.unlink(*(m.graph.node_ids[int(v)] for v in m.graph.edge_index[:, 0])),
        lambda m: m.add("Dario and Carmen went to Madrid.", speaker="Bob", session=1, id="r5", time=1010.0),
        lambda m: m.revise("r5", "Zora and Carmen went to Porto."),
        lambda m: m.forget("r1"),  # a middle record: the rows after it move down
        lambda m: m.add("Carmen met Quentin in Lisbon.", speaker="Bob", session=1, id="r6", time=1012.0),
        lambda m: m.add("Then Quentin flew home.", speaker="Carmen", session=2, id="r7", time=1013.0),
        lambda m: m.forget(["r7", "r6"]),  # both of Quentin's records, session 1's last: it goes on from r5
        lambda m: m.add("Dario drove to Porto.", speaker="Alice", session=1, id="r8", time=1014.0),
    ]
    with Memory.open(tmp_path / "m", encoder="hashing") as m:
        for i, (who, text) in enumerate(lines):
            m.add(text, speaker=who, session=1, id=f"r{i}", time=1000.0 + i)
        m.retrieve("Pixel")  # the indexes exist before the writes, and are brought up to date by them
        monkeypatch.setattr(m, "_load", lambda: pytest.fail("revise, unlink and forget must not reload the memory"))
        for step in steps:
            step(m)
            graph, state = m.graph.copy(), derived_state(m)
            with Memory.open(tmp_path / "m", encoder="hashing", readonly=True) as again:
                assert_same_graph(graph, again.graph)
                assert derived_state(again) == state
                assert again.integrity() == []


def neighbour_index(m):
    """The memory's HNSW neighbour index in its graph's indexes, or None."""
    return m.graph.indexes.get(Memory.neighbour_index.key)


def test_forget_and_revise_keep_the_neighbour_index_and_its_rows_in_step(tmp_path):
    """Above the ANN threshold a forget renumbers the HNSW index's rows and a revise gives its row a new slot,
    instead of rebuilding it: the memory then grows as one searched exactly does (HNSW on a few dozen rows finds
    the exact neighbours)."""
    words = "lamp river stone cloud maple violin harbor tiger copper meadow pepper signal".split()
    texts = [" ".join(words[(i * k) % len(words)] for k in (1, 3, 5, 7)) + f" {i}" for i in range(48)]
    graphs = []
    for ann in (4, 10**9):
        with Memory.open(tmp_path / f"m{ann}", encoder="hashing") as m:
            m.ann_min_nodes = ann
            for i, t in enumerate(texts[:30]):
                m.add(t, session=i % 3, id=f"n{i}", time=100.0 * i)
            m.forget(["n3", "n17", "n4"])
            m.revise("n20", texts[47])  # its vector takes a new slot: later records find it by its new text
            for i, t in enumerate(texts[30:], start=30):
                m.add(t, session=i % 3, id=f"n{i}", time=100.0 * i)
            index = neighbour_index(m)
            assert (index is not None) == (ann == 4)
            assert ann != 4 or (index.builds, index.num_dead, index.num_slots) == (1, 4, 49)
            graphs.append(m.graph.copy())
    assert_same_graph(*graphs)


def test_the_neighbour_index_is_the_dense_entry_index_added_to_once_per_record(tmp_path, monkeypatch):
    """One HNSW index serves the semantic neighbours of new records and the ``ann`` entries of retrievals: a
    retrieval after adds searches the index the adds grew (no second index, no rebuild), and each add of a batch
    puts its one vector in (FAISS's add called once per record, the index never built again)."""
    from graphmem.config.cli import policy_config
    from graphmem.index.vector_index import VectorIndex

    monkeypatch.setattr(Memory, "ann_min_nodes", 4)
    hybrid = {**policy_config("hybrid"), "min_nodes": 0}  # the index path at any size
    with Memory.open(tmp_path / "m", encoder="hashing", policy=hybrid) as m:
        m.add_many([{"text": f"river stone {i} lamp", "id": f"n{i}"} for i in range(6)])
        index = neighbour_index(m)
        added = []
        monkeypatch.setattr(index.index, "add", lambda x, add=index.index.add: added.append(len(x)) or add(x))
        monkeypatch.setattr(VectorIndex, "build", classmethod(lambda *a, **k: pytest.fail("built again")))
        m.add_many([{"text": f"maple violin {i}", "id": f"b{i}"} for i in range(5)])
        assert added == [1] * 5 and index.num_slots == 11
        assert m.retrieve("maple violin 3").ranked_ids()[0] == "b3"
        vectors = [i for i in m.graph.indexes.values() if isinstance(i, VectorIndex)]
        assert vectors == [index] and index.builds == 1 and added == [1] * 5


def test_the_first_writes_after_an_open_append_into_the_buffers_the_open_filled(tmp_path):
    """The edges read at open leave spare rows in their buffers: the adds after an open write into them instead of
    copying every edge into buffers twice the size."""
    with Memory.open(tmp_path / "m", encoder="hashing") as m:
        m.add_many([{"text": f"river stone {i} lamp maple", "id": f"n{i}", "session": 0} for i in range(200)])
    with Memory.open(tmp_path / "m", encoder="hashing") as m:
        names = ("edge_index", "edge_type", "S", "F", "attr", "attr_init")
        held = {name: getattr(m.buffers, name).data_ptr() for name in names}
        for i in range(3):
            m.add(f"violin harbor {i} lamp", id=f"late{i}", session=0)
        assert m.graph.num_edges > 0 and {name: getattr(m.buffers, name).data_ptr() for name in names} == held


def test_a_writer_saves_its_neighbour_index_at_close_and_the_next_open_loads_it(tmp_path, monkeypatch):
    """Reopened unchanged, a memory (a reader's too) loads the index it saved and grows as one searched exactly
    does; a reopen after a change the index did not see, or a damaged file, builds it from the records; a forget
    removes the saved file (its slots hold the forgotten vectors) and an index with deleted slots is not saved."""
    from graphmem.index.vector_index import VectorIndex

    words = "lamp river stone cloud maple violin harbor tiger copper meadow pepper signal".split()
    texts = [" ".join(words[(i * k) % len(words)] for k in (1, 3, 5, 7)) + f" {i}" for i in range(34)]

    def grow(m, rows):
        for i in rows:
            m.add(texts[i], session=i % 3, id=f"n{i}", time=100.0 * i)

    monkeypatch.setattr(Memory, "ann_min_nodes", 10**9)
    with Memory.open(tmp_path / "exact", encoder="hashing") as m:
        grow(m, range(30))
        exact = edge_table(m.graph)
    monkeypatch.setattr(Memory, "ann_min_nodes", 4)
    folder = tmp_path / "m"
    saved = folder / "indexes" / f"{Memory.neighbour_index.key}.safetensors"
    with Memory.open(folder, encoder="hashing") as m:
        grow(m, range(20))
    assert saved.is_file()
    with monkeypatch.context() as patch:  # loaded, not built
        patch.setattr(VectorIndex, "build", classmethod(lambda *a, **k: pytest.fail("the saved index was not loaded")))
        with Memory.open(folder, encoder="hashing", readonly=True) as reader:
            assert neighbour_index(reader).num_slots == 20
        with Memory.open(folder, encoder="hashing") as m:
            assert neighbour_index(m).num_slots == 20
            grow(m, range(20, 30))
            assert edge_table(m.graph) == exact
    with sqlite3.connect(folder / "memory.sqlite3") as db:  # a change the saved index did not see
        db.execute("UPDATE nodes SET id = 'renamed' WHERE id = 'n29'")
    with Memory.open(folder, encoder="hashing") as m:  # built from the records
        assert neighbour_index(m) is None
        grow(m, [30])
        assert neighbour_index(m).num_slots == 31
    saved.write_bytes(saved.read_bytes()[:100])
    with Memory.open(folder, encoder="hashing") as m:  # damaged: built from the records
        assert neighbour_index(m) is None
        grow(m, [31])
        m.forget("n3")
        assert not saved.exists()
    assert not saved.exists()  # n3's dead slot is never saved


def test_the_retrieval_indexes_a_writer_saved_are_loaded_by_the_next_open_and_gone_after_a_forget(
    tmp_path, monkeypatch
):
    """BM25 and the dense entry index made by retrievals are saved at close and loaded (not built) by the next
    open, a reader's too, answering as built ones; a forget removes them, with the forgotten words."""
    from graphmem.config.cli import policy_config

    folder, bounded = tmp_path / "m", {**policy_config("hybrid"), "min_nodes": 0}  # the index path at any size
    monkeypatch.setattr(Memory, "open", functools.partial(Memory.open, policy=bounded))
    with Memory.open(folder, encoder="hashing") as m:
        for i, text in enumerate(["Pixel the greyhound runs", "Carmen lives in Zaragoza", "Dario cooks paella"] * 4):
            m.add(text, session=i % 2, id=f"n{i}", time=10.0 * i)
        built = [m.retrieve(q).ranked_ids() for q in ("Where does Carmen live?", "greyhound", "paella")]
    assert b"zaragoza" in _bytes(folder / "indexes")  # the BM25 vocabulary
    with monkeypatch.context() as patch:
        patch.setattr("graphmem.index.vector_index.VectorIndex.build", lambda *a, **k: pytest.fail("not loaded"))
        patch.setattr("graphmem.index.lexical.BM25Index.build", lambda *a, **k: pytest.fail("not loaded"))
        for readonly in (True, False):
            with Memory.open(folder, encoder="hashing", readonly=readonly) as m:
                held = [type(i).__name__ for i in m.graph.indexes.values() if not isinstance(i, tuple)]  # not kept rows
                assert sorted(held) == ["BM25Index", "VectorIndex"]
                assert [m.retrieve(q).ranked_ids() for q in ("Where does Carmen live?", "greyhound", "paella")] == built
    with Memory.open(folder, encoder="hashing") as m:
        m.forget([f"n{i}" for i in range(1, 12, 3)])
        assert not (folder / "indexes").exists()
        m.retrieve("Where does Carmen live?")
    assert b"zaragoza" not in _bytes(folder) and b"Zaragoza" not in _bytes(folder)


def exact_state(m) -> dict:
    """Every field a memory derives from its store, bit for bit (tensors as bytes): :func:`derived_state` with the
    records and tensors."""
    g = m.graph
    tensors = (g.embeddings, g.timestamps, g.edge_index, g.edge_type, g.S, g.F, g.edge_attr, g.edge_attr_init)
    return {
        "records": (
            g.node_ids,
            g.texts,
            g.keys,
            [json.dumps(x, sort_keys=True) for x in g.metadata],
            m._seq,
            m._next_seq,
        ),
        "tensors": [(t.dtype, tuple(t.shape), t.contiguous().numpy().tobytes()) for t in tensors],
        "tokens": node_tokens(g).tolist(),
        "spare": [getattr(m.buffers, k).shape[0] >= n for k, n in (("emb", len(m)), ("S", g.num_edges))],
        **derived_state(m),
    }


def test_a_reopened_memory_loads_the_state_its_writer_saved_and_equals_one_read_from_the_database(
    tmp_path, monkeypatch
):
    """After adds, feedback, a link, an unlink, a revise and a forget, the state a writer saves at close is what an
    open reading every row of the database derives, bit for bit; a reader and a writer load it without reading a
    row, and the writer then grows as one that read the database does."""
    from graphmem.store.memory_store import SQLiteStore

    folder = tmp_path / "m"
    with Memory.open(folder, encoder="hashing") as m:
        for i, (who, text) in enumerate(_LINES):
            m.add(text, speaker=who, session=i % 2, id=f"r{i}", time=1000.0 + i if i != 2 else None, meta={"i": i})
        m.feedback(m.retrieve("Pixel in Lisbon", policy="beta_bfs"), reward=0.3)
        m.link("r0", "r4", "causal")
        m.unlink(*(m.graph.node_ids[int(v)] for v in m.graph.edge_index[:, 0]))
        m.revise("r3", "My sister Carmen moved to Porto.")
        m.forget("r1")
        m.add("Carmen met Quentin in Lisbon.", speaker="Bob", session=1, id="r5", time=1012.0)
    assert state_path(folder).is_file()
    saved = state_path(folder).read_bytes()
    with monkeypatch.context() as patch:  # no row of the database is read
        patch.setattr(SQLiteStore, "nodes", lambda self: pytest.fail("the records were read from the database"))
        patch.setattr(SQLiteStore, "edges", lambda self: pytest.fail("the edges were read from the database"))
        with Memory.open(folder, encoder="hashing", readonly=True) as reader, monkeypatch.context() as counting:
            counting.setattr("graphmem.core.tokens.count_tokens", lambda text: pytest.fail("a text was counted"))
            loaded = exact_state(reader)
        with Memory.open(folder, encoder="hashing") as m:  # a writer that writes nothing leaves the file as it was
            assert exact_state(m) == loaded
        assert state_path(folder).read_bytes() == saved
        with Memory.open(folder, encoder="hashing") as m:
            m.add("Then Quentin flew home to Oslo.", speaker="Carmen", session=0, id="r6", time=1013.0)
            grown = exact_state(m)
    state_path(folder).unlink()
    with Memory.open(folder, encoder="hashing", readonly=True) as from_rows:
        assert exact_state(from_rows) == grown
        assert not state_path(folder).exists()  # a reader saves nothing
    # the same memory read from the database before the last add, then given that add
    with Memory.open(folder, encoder="hashing") as m:
        m.forget("r6")
    state_path(folder).unlink()
    with Memory.open(folder, encoder="hashing") as m:
        m.add("Then Quentin flew home to Oslo.", speaker="Carmen", session=0, id="r6", time=1013.0)
        regrown = exact_state(m)
    assert {k: v for k, v in regrown.items() if k != "records"} == {k: v for k, v in grown.items() if k != "records"}
    assert regrown["records"][:4] == grown["records"][:4]  # the seqs differ: r6 came twice


_LINES = [
    ("Alice", "I adopted a greyhound called Pixel last May."),
    ("Bob", "Does Pixel like the beach near Lisbon?"),
    ("Alice", "Yes, Pixel runs for hours while Zora watches."),
    ("Bob", "My sister Carmen lives in Lisbon."),
    ("Alice", "Carmen should meet Pixel in Porto."),
]


@pytest.mark.parametrize("change", ["another client", "a writer that did not close", "feedback", "damaged", "none"])
def test_the_saved_state_is_loaded_only_at_the_version_it_was_saved_at(tmp_path, monkeypatch, change):
    """Any write the saved state did not see, by this library or by another client of the database, makes the next
    open read the database; so does a damaged file."""
    from graphmem.store.memory_store import SQLiteStore

    folder = tmp_path / "m"
    with Memory.open(folder, encoder="hashing") as m:
        for i, (who, text) in enumerate(_LINES):
            m.add(text, speaker=who, session=0, id=f"r{i}", time=1000.0 + i)
    reads = []
    monkeypatch.setattr(SQLiteStore, "edges", lambda self, edges=SQLiteStore.edges: reads.append(1) or edges(self))
    if change == "another client":
        with sqlite3.connect(folder / "memory.sqlite3") as db:
            db.execute("UPDATE nodes SET text = 'Pixel is a whippet.' WHERE id = 'r0'")
        db.close()
    elif change == "a writer that did not close":
        m = Memory.open(folder, encoder="hashing")
        m.add("Dario drove to Porto.", id="r5", session=0, time=1010.0)
        m.store.conn.close()  # killed: the add is committed, nothing is saved
        m.store._release()
    elif change == "feedback":
        with Memory.open(folder, encoder="hashing") as m:
            before = edge_table(m.graph)
            r = m.retrieve("Does Pixel like the beach?", policy="beta_bfs", budget=Budget(max_entries=1))
            m.feedback(r, reward=1.0)
            counters = edge_table(m.graph)
            assert counters != before
            state_path(folder).rename(tmp_path / "kept")  # the close saves it again: keep the one before
        state_path(folder).unlink()
        (tmp_path / "kept").rename(state_path(folder))
    elif change == "damaged":
        path = state_path(folder)
        path.write_bytes(path.read_bytes()[:-200] + bytes(200))
    reads.clear()
    with Memory.open(folder, encoder="hashing", readonly=True) as m:
        assert reads == ([] if change == "none" else [1])
        assert m.integrity() == []
        if change == "another client":
            assert m.graph.texts[0] == "Pixel is a whippet."
        if change == "a writer that did not close":
            assert "r5" in m and len(m) == 6
        if change == "feedback":
            assert edge_table(m.graph) == counters


def test_another_clients_writes_are_counted_by_the_database(tmp_path):
    """The counts of changes are kept by triggers in the database: a row written by another client counts, and a
    write of Beta counters alone leaves the count of the graph's shape as it was."""
    with Memory.open(tmp_path / "m", encoder="hashing") as m:
        m.add("Pixel runs on the beach.", id="r0", session=0)
        m.add("Pixel swims in the sea.", id="r1", session=0)
        before = m.store.version()
    with sqlite3.connect(tmp_path / "m" / "memory.sqlite3") as db:
        db.execute("UPDATE edges SET S = 2.0")
        db.execute("INSERT INTO vocabulary(word, count) VALUES ('Zora', 1)")
    db.close()
    with Memory.open(tmp_path / "m", encoder="hashing", readonly=True) as m:
        after = m.store.version()
    assert m.graph.num_edges > 0 and after["changes"] == before["changes"] + m.graph.num_edges + 1
    assert after["shape"] == before["shape"] + 1  # the word; not the counters
    counts = ("changes", "shape")
    assert {k: v for k, v in after.items() if k not in counts} == {k: v for k, v in before.items() if k not in counts}


def _as_schema_1(db: Path) -> None:
    """Rewrite a memory's edges as schema 1 stored them (the key ``(src, dst, relation)`` and an index by ``dst``), with
    its count of write transactions in ``meta``."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executescript(
        """BEGIN;
        CREATE TABLE edges_v1(src INTEGER NOT NULL, dst INTEGER NOT NULL, relation INTEGER NOT NULL,
            S REAL NOT NULL, F REAL NOT NULL, attr BLOB NOT NULL, attr_init BLOB NOT NULL, UNIQUE(src, dst, relation));
        INSERT INTO edges_v1(rowid, src, dst, relation, S, F, attr, attr_init)
            SELECT rowid, src, dst, relation, S, F, attr, attr_init FROM edges;
        DROP TABLE edges;
        ALTER TABLE edges_v1 RENAME TO edges;
        CREATE INDEX edges_dst ON edges(dst);
        UPDATE meta SET value = '1' WHERE key = 'schema_version';
        INSERT INTO meta(key, value) VALUES ('writes', '7');
        COMMIT;"""
    )
    conn.close()


def test_a_schema_1_memory_is_upgraded_by_a_writers_open_and_refused_by_a_readers(mem):
    r = mem.retrieve("Does Pixel like the beach?", policy="beta_bfs", budget=Budget(max_entries=1))
    mem.feedback(r, helpful=[r.traversed[0][1]])
    mem.feedback(r.id, reward=0.25)
    folder, live = mem.store.folder, edge_table(mem.graph)
    assert any(s > 0 and f > 0 for *_, s, f in live)  # counters moved by the feedback travel through the upgrade
    mem.close()
    _as_schema_1(folder / "memory.sqlite3")
    with pytest.raises(MemoryStoreError, match=r"schema_version 1 is not 2 \(a read-write open upgrades"):
        Memory.open(folder, encoder="hashing", readonly=True)
    with Memory.open(folder, encoder="hashing") as again:
        assert edge_table(again.graph) == live and again.integrity() == []
        again.add("Carmen moved to Porto in spring.", speaker="Bob", session=2, id="b3", time=9100.0)
        again.forget("a2")
        assert again.integrity() == []
    with Memory.open(folder, encoder="hashing", readonly=True) as reader:
        assert len(reader) == 4 and reader.integrity() == []
        assert "writes" not in reader.store.settings()  # schema 1's unread count of write transactions is gone
        indexes = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'edges'"
        assert [n for (n,) in reader.store.conn.execute(indexes)] == ["edges_key"]


def test_every_write_of_a_stored_edge_finds_it_by_the_key_index(mem):
    """The statements that update or delete one edge search the key index: none scans the edges."""
    from graphmem.store.memory_store import _EDGE_KEY

    key = (3, 3, 1, 0)
    for sql, params in [
        (f"UPDATE edges SET S = ?, F = ? WHERE {_EDGE_KEY}", (1.0, 0.0, *key)),
        (f"UPDATE edges SET attr = ?, attr_init = ? WHERE {_EDGE_KEY}", (b"", b"", *key)),
        (f"DELETE FROM edges WHERE {_EDGE_KEY}", key),
    ]:
        plan = " | ".join(row[-1] for row in mem.store.conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        assert "edges USING INDEX edges_key (hi=? AND src=? AND dst=? AND relation=?)" in plan, plan


def test_a_memory_of_an_unknown_schema_is_refused_and_left_as_it_is(mem):
    folder = mem.store.folder
    mem.close()
    _as_schema_1(folder / "memory.sqlite3")
    with sqlite3.connect(folder / "memory.sqlite3") as conn:
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(MemoryStoreError, match=r"schema_version 3 is not 2$"):
        Memory.open(folder, encoder="hashing")
    with sqlite3.connect(folder / "memory.sqlite3") as conn:
        assert "hi" not in [r[1] for r in conn.execute("PRAGMA table_xinfo(edges)")]
