"""Retrieve-Generate-Reflect-Curate on a live memory: validation of traces, feedback and edits; no gold leakage."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import litellm
import pytest
from hydra import compose, initialize_config_dir

from graphmem import Memory
from graphmem.config.cli import run_or_exit
from graphmem.core import Budget
from graphmem.index.embed import HashingEncoder
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.llm.retriever import LLMEntryRetriever
from graphmem.llm.schemas import parse_structured
from graphmem.policies.beta_bfs import BetaBFS
from graphmem.tracking import read_runs

sys.path.insert(0, str(Path(__file__).parent))
from script_loader import config_folder, load_study  # noqa: E402
from small_sets import saved_locomo_set  # noqa: E402

MemoryLoop = load_study("memory_loop", "memory_loop").MemoryLoop

REAL_COMPLETION = litellm.completion
GOLD = "GOLD-MARKER-5521"

REPLIES = {
    "You select entry points": {"sections": ["session 1"], "entry_ids": ["n0", "ghost"]},
    "You answer a question": {"answer": "Paris", "trace": ["n0", "n9", "n2", "n3", "n3", "n0"]},
    "You review an answer": {
        "critique": "Check the move date.",
        "transitions": [
            {"source": "n0", "target": "n2", "label": "helpful", "confidence": 0.8},
            {"source": "n2", "target": "n3", "label": "harmful", "confidence": 0.5},
            {"source": "n3", "target": "n0", "label": "helpful", "confidence": 1.0},
            {"source": "n0", "target": "n2", "label": "helpful", "confidence": 0.9},
            {"source": "n1", "target": "n0", "label": "helpful", "confidence": 0.9},
            {"source": "n2", "target": "n3", "label": "great", "confidence": 0.5},
            {"source": "n0", "target": "n2", "label": "helpful", "confidence": 1.5},
        ],
    },
    "You maintain a memory graph": {
        "operations": [
            {"op": "add_node", "key": "date check", "text": "Check dates of moves."},
            {"op": "add_edge", "source": "n0", "target": "new:0", "relation": "semantic"},
            {"op": "add_edge", "source": "n0", "target": "n2", "relation": "temporal"},
            {"op": "add_edge", "source": "n1", "target": "n0", "relation": "semantic"},
            {"op": "revise_node", "node_id": "n2", "text": "Alice opened a bakery in Paris."},
            {"op": "revise_node", "node_id": "new:0", "text": "Check the dates of moves."},
            {"op": "remove_edge", "source": "n2", "target": "n3"},
            {"op": "remove_edge", "source": "n0", "target": "n3"},
            {"op": "explode"},
        ]
    },
}


def role_of(kwargs) -> str:
    """The role of a request, by the instruction its prompt carries."""
    text = kwargs["messages"][0]["content"] + kwargs["messages"][1]["content"]
    return next(k for k in REPLIES if k in text)


QUIET = {"semantic_k": 0, "entity_fanout": 0, "temporal_window_s": 0.0}
"""graph settings under which a record gets no arrival-order edge but its session's temporal and causal ones"""


def toy_memory(folder: Path, texts, sessions, edges, graph=QUIET) -> Memory:
    """Records ``n0``, ``n1``, ... (4-d hashing embeddings) whose edges are exactly ``edges`` ``(src, dst, relation)``:
    the ones their arrival made are removed first."""
    mem = Memory.open(folder, encoder=HashingEncoder(4), graph=graph, policy=BetaBFS())
    mem.add_many([{"id": f"n{i}", "text": t, "session": s} for i, (t, s) in enumerate(zip(texts, sessions))])
    ids = mem.graph.node_ids
    for s, d in sorted({(ids[s], ids[d]) for s, d in mem.graph.edge_index.t().tolist()}):
        mem.unlink(s, d)
    for s, d, relation in edges:
        assert mem.link(s, d, relation)
    return mem


def toy(folder: Path) -> Memory:
    """n0..n3 in sessions 1 and 2; edges n0 -> n2 (temporal) and n2 -> n3 (semantic)."""
    texts = ["Alice moved to Paris.", "Bob has a dog.", "Alice started a bakery.", "The bakery sells bread."]
    return toy_memory(folder, texts, [1, 1, 2, 2], [("n0", "n2", "temporal"), ("n2", "n3", "semantic")])


def edge_counters(mem: Memory) -> dict[tuple[str, str, str], tuple[float, float]]:
    """Every edge of the memory as ``(source, target, relation) -> (S, F)``."""
    g, ids = mem.graph, mem.graph.node_ids
    return {
        (ids[s], ids[d], g.relations[r]): (sf, ff)
        for (s, d), r, sf, ff in zip(g.edge_index.t().tolist(), g.edge_type.tolist(), g.S.tolist(), g.F.tolist())
    }


class FirstRows:
    """An entry selector: the memory's first three rows."""

    def select(self, graph, queries, budget):
        return [[0, 1, 2] for _ in queries]


class ScriptedClient:
    """Stands in for :class:`LLMClient`: one fixed reply per role, parsed by the real lenient parser."""

    def __init__(self, replies: dict[str, str]):
        self.replies, self.calls, self.failures = replies, [], 0

    def structured(self, role, messages, schema, json_schema=None, **kwargs):
        self.calls.append(role)
        parsed = parse_structured(self.replies[role], schema)
        self.failures += parsed.value is None
        return parsed

    def failure_summary(self):
        return {"failures": self.failures}

    def usage_report(self):
        return {"total": {"prompt_tokens": 0, "completion_tokens": 0}}


def test_loop_validates_feedback_and_edits_and_keeps_gold_out_of_prediction(monkeypatch, tmp_path):
    prompts: list[tuple[str, str]] = []

    def fake(**kwargs):
        system, user = kwargs["messages"][0]["content"], kwargs["messages"][1]["content"]
        role = role_of(kwargs)
        prompts.append((role, system + user))
        return REAL_COMPLETION(**{**kwargs, "mock_response": json.dumps(REPLIES[role])})

    monkeypatch.setattr(litellm, "completion", fake)
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="unused", max_retries=0, backoff_s=0.0))
    loop = MemoryLoop(client, BetaBFS(entry_selector=LLMEntryRetriever(client=client)))
    mem = toy(tmp_path / "m")
    calls_at_feedback = []

    def feedback(prediction: str) -> str:
        calls_at_feedback.append([r for r, _ in prompts])
        return f"prediction {prediction!r}; gold answer {GOLD}"

    rec = loop.step(mem, "q0", "Where did Alice move?", feedback)

    # no gold leakage: retrieval and generation finished before feedback was requested
    assert calls_at_feedback == [["You select entry points", "You answer a question"]]
    assert all(
        GOLD not in text for role, text in prompts if role in ("You select entry points", "You answer a question")
    )
    assert rec.prediction == "Paris" and rec.loaded == ["n0", "n2", "n3"]
    assert rec.trace == ["n0", "n2", "n3", "n3", "n0"]

    # reflect: eq. 21 on valid transitions only; no edge created for n3 -> n0
    assert rec.applied_transitions == [
        ("n0", "n2", "helpful", 0.8),
        ("n2", "n3", "harmful", 0.5),
        ("n3", "n0", "helpful", 1.0),
    ]
    assert rec.discarded["trace_unloaded_ids"] == 1
    assert rec.discarded["duplicate_pairs"] == 2  # (n3, n3) in the trace, repeated (n0, n2) label
    assert rec.discarded["feedback_outside_trace"] == 1
    assert rec.discarded["invalid_feedback_items"] == 2  # bad label, confidence 1.5
    edges = edge_counters(mem)
    assert not any((s, d) == ("n3", "n0") for s, d, _ in edges)
    assert edges["n0", "n2", "temporal"] == pytest.approx((0.8, 0.0))  # n2 -> n3 (F += 0.5) is curated away below
    (logged,) = mem.feedback_log()  # one feedback call with the valid transitions, logged with its retrieval
    assert [tuple(x) for x in logged["labels"]] == rec.applied_transitions and logged["edges_updated"] == 2

    # curate: add node + edge (S = F = 0), revise, remove; invalid ops counted
    assert rec.applied_ops == [
        "add_node lesson-0",
        "add_edge n0->lesson-0 semantic",
        "revise_node lesson-0",
        "remove_edge n2->n3",
    ]
    # existing edge, unloaded n1, a source record revised, missing edge; unknown op
    assert rec.discarded["invalid_ops"] == 4 + 1
    assert edge_counters(mem) == {
        ("n0", "n2", "temporal"): pytest.approx((0.8, 0.0)),
        ("n0", "lesson-0", "semantic"): (0.0, 0.0),  # the lesson's only edge under QUIET: the curator's
    }
    assert mem.get("n2")["text"] == "Alice started a bakery."  # source records are never rewritten
    lesson = mem.get("lesson-0")
    assert (lesson["text"], lesson["key"], lesson["meta"]) == (
        "Check the dates of moves.",
        "date check",
        {"section": "lessons"},
    )
    assert mem.integrity() == [] and rec.graph_checks == 1 + len(rec.applied_ops)

    # token accounting: retrieved memory vs index vs the rest
    assert rec.tokens["memory"] == rec.retrieval.loaded_tokens > 0 and rec.tokens["index"] > 0
    assert rec.tokens["llm_billed"] > 0 and rec.tokens["rest"] >= 0


def failing_litellm(monkeypatch, fail_roles: set[str]):
    """Answer from REPLIES, except that calls of ``fail_roles`` raise a connection error; returns the roles asked."""
    asked: list[str] = []

    def fake(**kwargs):
        role = role_of(kwargs)
        asked.append(role)
        if role in fail_roles:
            raise litellm.APIConnectionError(message="unreachable", llm_provider="openai", model="gpt-4o-mini")
        return REAL_COMPLETION(**{**kwargs, "mock_response": json.dumps(REPLIES[role])})

    monkeypatch.setattr(litellm, "completion", fake)
    return asked


def llm_loop(client: LLMClient) -> MemoryLoop:
    return MemoryLoop(client, BetaBFS(entry_selector=LLMEntryRetriever(client=client)), budget=Budget())


def test_failed_retrieval_stops_the_example_before_any_other_role(monkeypatch, tmp_path):
    asked = failing_litellm(monkeypatch, {"You select entry points"})
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="x", max_retries=1, backoff_s=0.0))
    mem = toy(tmp_path / "m")
    notes, edges = [], edge_counters(mem)
    rec = llm_loop(client).step(mem, "q", "?", lambda p: notes.append(p) or "wrong")
    assert rec.failed == "retrieval" and rec.prediction is None and rec.applied_ops == []
    assert asked == ["You select entry points"] * 2  # the first try and its one retry; nothing after
    assert notes == [] and edge_counters(mem) == edges and mem.feedback_log() == []
    assert client.failure_summary()["by_role_kind"] == {"retriever/api_error": 1}


def test_failed_generation_stops_before_reflect_and_curate(monkeypatch, tmp_path):
    asked = failing_litellm(monkeypatch, {"You answer a question"})
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="x", max_retries=0, backoff_s=0.0))
    mem = toy(tmp_path / "m")
    rec = llm_loop(client).step(mem, "q", "?", lambda p: "wrong")
    assert rec.failed == "generation" and rec.loaded == ["n0", "n2", "n3"]
    assert asked == ["You select entry points", "You answer a question"]
    assert rec.applied_transitions == [] and rec.applied_ops == [] and len(mem) == 4 and mem.feedback_log() == []


def test_a_lesson_gets_the_memorys_arrival_order_edges(tmp_path):
    """Under the default rules a lesson is linked, both ways, to the records most like it (S = F = 0)."""
    texts = ["Alice moved to Paris in May.", "Bob has a dog.", "Alice started a bakery."]
    mem = toy_memory(tmp_path / "m", texts, [None] * 3, [], graph=None)
    replies = {
        "generator": json.dumps({"answer": "Paris", "trace": ["n0"]}),
        "reflector": json.dumps({"critique": "c", "transitions": []}),
        "curator": json.dumps({"operations": [{"op": "add_node", "key": "moves", "text": "Alice moved to Paris."}]}),
    }
    loop = MemoryLoop(ScriptedClient(replies), BetaBFS(entry_selector=FirstRows()), budget=Budget(max_hops=0))
    rec = loop.step(mem, "q", "Where did Alice move?", lambda p: "feedback")
    assert rec.applied_ops == ["add_node lesson-0"] and rec.graph_checks == 1
    edges = edge_counters(mem)
    assert edges["n0", "lesson-0", "semantic"] == edges["lesson-0", "n0", "semantic"] == (0.0, 0.0)


def test_every_structured_role_sends_its_narrowed_schema(monkeypatch, tmp_path):
    sent: dict[str, dict] = {}

    def fake(**kwargs):
        role = role_of(kwargs)
        sent[role] = kwargs["response_format"]
        return REAL_COMPLETION(**{**kwargs, "mock_response": json.dumps(REPLIES[role])})

    monkeypatch.setattr(litellm, "completion", fake)
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="unused", max_retries=0))
    mem = toy(tmp_path / "m")
    rec = llm_loop(client).step(mem, "q0", "Where did Alice move?", lambda p: "feedback")
    names = {role: fmt["json_schema"]["name"] for role, fmt in sent.items()}
    assert names == {
        "You select entry points": "EntrySelection",
        "You answer a question": "Generation",
        "You review an answer": "Reflection",
        "You maintain a memory graph": "Curation",
    }
    assert all(fmt["type"] == "json_schema" for fmt in sent.values())
    entry = sent["You select entry points"]["json_schema"]["schema"]["properties"]
    assert entry["entry_ids"]["items"]["enum"] == ["n0", "n1", "n2", "n3"] and entry["entry_ids"]["maxItems"] == 6
    trace = sent["You answer a question"]["json_schema"]["schema"]["properties"]["trace"]
    assert trace["items"]["enum"] == rec.loaded
    pairs = sent["You review an answer"]["json_schema"]["schema"]["properties"]["transitions"]["prefixItems"]
    listed = [(p["properties"]["source"]["const"], p["properties"]["target"]["const"]) for p in pairs]
    assert listed == [("n0", "n2"), ("n2", "n3"), ("n3", "n0")]  # adjacent, deduplicated pairs of the valid trace
    ops = sent["You maintain a memory graph"]["json_schema"]["schema"]["properties"]["operations"]["items"]["anyOf"]
    revise = next(o for o in ops if o["properties"]["op"]["const"] == "revise_node")
    assert revise["properties"]["node_id"]["enum"] == ["new:0", "new:1"]  # no lesson loaded: only new ones
    assert rec.graph_checks == 1 + len(rec.applied_ops)  # after the counter updates and after every applied edit


@pytest.fixture(scope="module")
def locomo_set(tmp_path_factory):
    """One LoCoMo conversation, hashing encoder."""
    return saved_locomo_set(tmp_path_factory.mktemp("loop"), limit=1)


def loop_config(*overrides):
    with initialize_config_dir(config_dir=str(config_folder("memory_loop")), version_base="1.3"):
        return compose(config_name="memory_loop", overrides=["progress=false", *overrides])


def test_script_stops_after_consecutive_failures_with_a_nonzero_exit(monkeypatch, tmp_path, capsys, locomo_set):
    asked = []

    def unreachable(**kwargs):
        asked.append(kwargs["messages"][0]["content"][:24])
        raise litellm.APIConnectionError(message="unreachable", llm_provider="openai", model="gpt-4o-mini")

    monkeypatch.setattr(litellm, "completion", unreachable)
    out = tmp_path / "out"
    cfg = loop_config(
        f"graphset={locomo_set}",
        f"out_dir={out}",
        "llm=offline",
        "llm.max_retries=0",
        "entry_selector=llm",
        "encoder=hashing",
        "n_questions=5",
        "max_consecutive_failures=2",
    )
    script = load_study("memory_loop", "run")
    with pytest.raises(SystemExit) as stop:
        script.run(cfg)
    assert stop.value.code == script.EXIT_FAILURES
    summary = json.loads((out / "summary.json").read_text())
    assert summary["examples_run"] == 2 == summary["examples_failed"]
    assert summary["stopped_early"] == "2 consecutive examples failed"
    assert summary["client_failures"] == {"retriever/api_error": 2}
    assert len(asked) == 2 and all(a.startswith("You select entry points") for a in asked)
    err = capsys.readouterr().err
    assert "LLM call failures" in err and "stopped after 2 of 5 examples" in err
    (run,) = read_runs(out / "tracking")  # what was done is tracked, and the run marked failed
    assert run.job_type == "evaluate" and run.state == "failed" and [r["example"] for r in run.history] == [0, 1]
    assert run.summary["examples_failed"] == 2 and len(run.tables["examples"]["rows"]) == 2
    # the memory the run grew from the graph, closed and sound: the graph's records, the set's embeddings
    graph = script.load_graphset(cfg).graphs[summary["graph"]]
    with Memory.open(out / "memory", encoder="hashing", readonly=True) as mem:
        assert mem.graph.node_ids == graph.node_ids and mem.graph.texts == graph.texts
        assert mem.graph.embeddings.equal(graph.embeddings) and mem.integrity() == []
        assert summary["graph_before"] == {"nodes": len(mem), "edges": mem.graph.num_edges}


def test_an_encoder_that_is_not_the_graph_sets_is_refused_in_one_line(tmp_path, capsys, locomo_set):
    out = tmp_path / "out"
    cfg = loop_config(f"graphset={locomo_set}", f"out_dir={out}", "llm=offline", "encoder=minilm", "logger=none")
    with pytest.raises(SystemExit) as stop:
        run_or_exit(load_study("memory_loop", "run").run, cfg)
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert (
        line.startswith("error: encoder=minilm (") and "is not the graph set's encoder (hashing-bow-384, 384-d)" in line
    )
    assert line.endswith("use encoder=hashing") and not (out / "memory").exists()
