"""No gold answer or category can reach an answer prompt; the judge never sees the category.

Every message sent through litellm is captured (a patched ``litellm.completion`` that forwards to
the real one with ``mock_response``) and compared across runs whose gold fields are scrambled.
"""

import dataclasses
import random

import litellm
import pytest
import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.datasets.types import LoadReport, Question
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.qa.answer import Answerer, AnswerRequest, IntentPredictor, make_intent_predictor
from graphmem.qa.judge import Judge
from graphmem.qa.run import QASettings, evaluate_qa, make_components
from graphmem.store.graphset import GraphSet

GOLD_MARK = "QZXGOLD"


class FakeEncoder:
    """Deterministic 16-d unit vectors per text (stands in for MiniLM in the prototype intent)."""

    name, dim = "fake", 16

    def encode(self, texts):
        rows = [torch.randn(16, generator=torch.Generator().manual_seed(sum(map(ord, t)))) for t in texts]
        return torch.nn.functional.normalize(torch.stack(rows), dim=1)


def graphset(answers, categories, evidence_seed=0):
    graphs, questions = {}, []
    rng = random.Random(evidence_seed)
    for g in range(2):
        graph = make_synthetic_graph(20, avg_degree=3.0, dim=16, seed=g)
        graphs[f"conv-{g}"] = graph
        for i in range(5):
            k = 5 * g + i
            questions.append(
                Question(
                    f"conv-{g}#{i}",
                    f"conv-{g}",
                    f"what about item {k}?",
                    answers[k],
                    (rng.choice(graph.node_ids),),
                    categories[k],
                )
            )
    emb = torch.nn.functional.normalize(torch.randn(10, 16, generator=torch.Generator().manual_seed(7)), dim=1)
    return GraphSet("locomo", graphs, questions, emb, LoadReport("synthetic"))


@pytest.fixture
def captured(monkeypatch):
    calls = []
    real = litellm.completion

    def recording(*args, **kwargs):
        calls.append(
            {"model": kwargs.get("model"), "messages": kwargs["messages"], "mock": kwargs.get("mock_response")}
        )
        return real(*args, **kwargs)

    monkeypatch.setattr(litellm, "completion", recording)
    return calls


def settings(**judge):
    return QASettings.from_mapping(
        {
            "max_questions": None,
            "answer": {"intent": "prototype", "llm": {"model": "gpt-4o-mini", "mock_response": "an answer"}},
            "judge": {"llm": {"model": "gpt-4o-judge", "mock_response": '{"score": 0.5, "reason": "r"}', **judge}},
        }
    )


def run_once(gs, calls):
    cfg = settings()
    intents = make_intent_predictor("prototype", encoder=FakeEncoder())
    loaded = {q.qid: list(gs.graphs[q.graph].node_ids[:4]) for q in gs.questions}
    start = len(calls)
    result = evaluate_qa(cfg, gs, loaded, components=make_components(cfg, intents=intents))
    mine = calls[start:]
    answer_msgs = [c["messages"] for c in mine if c["model"] == "gpt-4o-mini"]
    judge_msgs = [c["messages"] for c in mine if c["model"] == "gpt-4o-judge"]
    return result, answer_msgs, judge_msgs


def test_answer_prompts_identical_when_gold_answer_and_category_are_scrambled(captured):
    answers = [f"{GOLD_MARK}{k} gold" for k in range(10)]
    cats = [1, 2, 3, 4, 5, 4, 3, 2, 1, 4]
    _, a1, j1 = run_once(graphset(answers, cats, 0), captured)
    scrambled = [f"other {k}" for k in range(10)]
    rotated = cats[3:] + cats[:3]
    _, a2, _ = run_once(graphset(scrambled, rotated, 1), captured)
    assert len(a1) == 10 and a1 == a2
    text = repr(a1)
    assert GOLD_MARK not in text and "gold" not in text.lower()


def test_judge_sees_the_gold_answer_but_never_the_category(captured):
    answers = [f"{GOLD_MARK}{k}" for k in range(10)]
    cats = [1, 2, 3, 4, 1, 4, 3, 2, 1, 4]  # no abstention-rule question: every question is judged
    _, _, j1 = run_once(graphset(answers, cats, 0), captured)
    other = [2, 4, 4, 2, 4, 2, 2, 4, 4, 2]  # token_f1 categories only, so the scored gold is unchanged
    _, _, j2 = run_once(graphset(answers, other, 3), captured)
    assert len(j1) == 10 and j1 == j2
    assert all(GOLD_MARK in m[1]["content"] for m in j1)
    joined = repr(j1).lower()
    for name in ("multi-hop", "open-domain", "single-hop", "adversarial", "category"):
        assert name not in joined


def test_types_on_the_answer_path_hold_no_gold_fields():
    gold = {"answer", "category", "evidence", "support_titles", "dangling_evidence"}
    assert not gold & {f.name for f in dataclasses.fields(AnswerRequest)}
    from graphmem.core import Query

    assert not gold & {f.name for f in dataclasses.fields(Query)}


def test_intent_comes_from_the_query_embedding_only():
    intents = make_intent_predictor("prototype", encoder=FakeEncoder(), min_weight=0.0)
    gs = graphset([str(k) for k in range(10)], [1] * 10)
    labels = intents(gs.queries())
    gs2 = graphset([str(k) for k in range(10)], [5] * 10)
    assert labels == intents(gs2.queries())
    assert all(len(w) == 4 and abs(sum(w) - 1) < 1e-3 for _, w in labels)
    assert IntentPredictor(None)(gs.queries()) == [("general", ())] * 10


def test_one_answer_call_per_question(captured):
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="Paris"))
    reqs = [AnswerRequest(f"q{i}", f"question {i}?", (("n1", "text"),)) for i in range(3)]
    out = Answerer(client).answer_many(reqs)
    assert [a.text for a in out] == ["Paris"] * 3 and len(captured) == 3
    assert Judge(LLMClient(LLMConfig(model="j", mock_response='{"score": 1}'))).judge_many([]) == []
