"""The QA evaluation loop: answer every question from a policy's retrieval, then score and judge.

Two phases, in this order, so that gold fields cannot reach a prompt:

1. **Answering** — from each question only ``Query`` fields (id, text, embedding) and the loaded
   node ids are used: the predicted intent, the context and the prompt are built by
   :mod:`graphmem.qa.answer`, one call per question.
2. **Scoring** — only after every answer has returned are the gold answer and category read:
   the category picks the scoring rule (:mod:`graphmem.qa.scoring`), and the judge
   (:mod:`graphmem.qa.judge`) compares the answer with the gold answer. Questions scored by the
   ``abstention`` rule (no answer exists in memory) are not sent to the judge: their score is
   whether the model abstained.

Per question: answer, rule, F1, EM, judge score, intent, and answer + judge tokens, cost and
latency, written as JSONL. A question whose answer call failed (after the client's retries) is
marked ``answer_failed``: it has no F1, EM or judge score and is left out of every mean, so a
failure never reads as a wrong answer. Summary groups (:func:`summarize_qa`): ``overall`` (every
question whose rule is not ``abstention``), one group per category, ``unanswerable``
(abstention-rule questions, reported apart) and ``all``. Each group: ``n`` questions, of which
``answered`` and ``answer_failures``; means **over answered questions** of ``f1``, ``em``,
``abstention_rate`` and ``latency_s`` (and its p95), ``judge`` (mean over judged answered
questions) with ``judged`` and ``judge_failures``; summed ``tokens`` and ``cost_usd``. A run in
which every answer call, or every judge call, failed measured nothing (:func:`qa_failure`): the
scripts stop with a non-zero exit status instead of reporting it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from graphmem.core import Query
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.eval.harness import write_jsonl
from graphmem.eval.metrics import category_name, percentile
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.qa.answer import Answerer, AnswerRequest, IntentPredictor, build_requests, make_intent_predictor
from graphmem.qa.judge import Judge, JudgeItem, Verdict, check_judge_config
from graphmem.qa.scoring import ABSTENTION_PHRASES, conventions_for, rule_for, score_answer

OVERALL, UNANSWERABLE, ALL = "overall", "unanswerable", "all"


@dataclass
class QASettings:
    """The ``qa`` config node (``configs/qa/default.yaml``), checked.

    Args:
        answer_llm: the answer model's :class:`LLMConfig`.
        judge_llm: the judge model's :class:`LLMConfig`, or ``None`` for no judge.
        max_questions: questions answered per policy, a seeded sample; ``None`` for all (default: 50).
        seed: seed of the question sample (default: 0).
        answer_max_tokens / judge_max_tokens: completion limits (default: 48 / 96).
        intent: intent source, ``prototype`` / ``checkpoint`` / ``uniform`` (default: ``prototype``).
        intent_checkpoint: router checkpoint for ``intent=checkpoint``.
        intent_min_weight: top weight needed to use a relation's guidance (default: 0.4).
        context_fields: node metadata shown before each record (default: ``date_time``, ``title``).
        allow_same_model: permit the judge to be the answer model (default: ``False``).
        abstention_phrases: phrases that mark an abstention.
        conventions: category -> scoring rule override; ``None`` = the dataset's built-in map.
    """

    answer_llm: LLMConfig
    judge_llm: LLMConfig | None
    max_questions: int | None = 50
    seed: int = 0
    answer_max_tokens: int = 48
    judge_max_tokens: int = 96
    intent: str = "prototype"
    intent_checkpoint: str | None = None
    intent_min_weight: float = 0.4
    context_fields: tuple[str, ...] = ("date_time", "title")
    allow_same_model: bool = False
    abstention_phrases: tuple[str, ...] = ABSTENTION_PHRASES
    conventions: dict | None = None

    def __post_init__(self) -> None:
        if self.max_questions is not None and self.max_questions < 1:
            raise ValueError("qa.max_questions must be >= 1 or null")
        if self.intent not in ("prototype", "checkpoint", "uniform"):
            raise ValueError(f"qa.answer.intent {self.intent!r} is not prototype, checkpoint or uniform")
        if self.judge_llm is not None:
            check_judge_config(self.answer_llm, self.judge_llm, self.allow_same_model)

    @property
    def self_judged(self) -> bool:
        return self.judge_llm is not None and self.judge_llm.model == self.answer_llm.model

    @classmethod
    def from_mapping(cls, qa: Mapping[str, Any]) -> QASettings:
        """From the plain ``qa`` mapping (``enabled`` is read by the caller)."""
        answer, judge, scoring = (
            dict(qa.get("answer") or {}),
            dict(qa.get("judge") or {}),
            dict(qa.get("scoring") or {}),
        )
        judge_llm = dict(judge.get("llm") or {})
        use_judge = judge.get("enabled", True) and judge_llm.get("model")
        return cls(
            answer_llm=LLMConfig.from_dict(answer.get("llm") or {}),
            judge_llm=LLMConfig.from_dict(judge_llm) if use_judge else None,
            max_questions=qa.get("max_questions", 50),
            seed=int(qa.get("seed", 0)),
            answer_max_tokens=int(answer.get("max_tokens", 48)),
            judge_max_tokens=int(judge.get("max_tokens", 96)),
            intent=answer.get("intent", "prototype"),
            intent_checkpoint=answer.get("intent_checkpoint"),
            intent_min_weight=float(answer.get("intent_min_weight", 0.4)),
            context_fields=tuple(answer.get("context_fields") or ()),
            allow_same_model=bool(judge.get("allow_same_model", False)),
            abstention_phrases=tuple(scoring.get("abstention_phrases") or ABSTENTION_PHRASES),
            conventions=scoring.get("conventions"),
        )


@dataclass
class QAResult:
    """Rows, grouped summary and LLM accounting of one QA run."""

    policy: str
    dataset: str
    rows: list[dict[str, Any]]
    summary: dict[str, dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)


def select_questions(questions: Sequence[Question], n: int | None, seed: int) -> list[Question]:
    """A seeded sample of ``n`` questions in their original order (all when ``n`` is ``None`` or larger)."""
    if n is None or n >= len(questions):
        return list(questions)
    keep = set(random.Random(seed).sample(range(len(questions)), n))
    return [q for i, q in enumerate(questions) if i in keep]


def _answer_phase(answerer: Answerer, requests: Sequence[AnswerRequest], progress: bool):
    """Phase 1: nothing but the requests (queries, loaded nodes' text, no gold) is in scope."""
    from tqdm.auto import tqdm

    with tqdm(total=len(requests), desc="answering", disable=not progress, leave=False) as bar:
        return answerer.answer_many(requests, on_done=bar.update)


def run_qa(
    questions: Sequence[Question],
    queries: Sequence[Query],
    loaded: Sequence[Sequence[str]],
    graphs: dict[str, MemoryGraph],
    answerer: Answerer,
    judge: Judge | None,
    intents: IntentPredictor,
    conventions: Mapping[int | str, str],
    *,
    policy: str = "",
    dataset: str = "",
    context_fields: Sequence[str] = ("date_time", "title"),
    abstention_phrases: Sequence[str] = ABSTENTION_PHRASES,
    progress: bool = False,
) -> QAResult:
    """Answer, score and judge ``questions`` (aligned with ``queries`` and the ``loaded`` node ids)."""
    if not (len(questions) == len(queries) == len(loaded)):
        raise ValueError(f"{len(questions)} questions, {len(queries)} queries, {len(loaded)} retrievals")
    if any(q.qid != x.qid for q, x in zip(questions, queries)):
        raise ValueError("questions and queries are not aligned by qid")
    graph_of = [q.graph for q in questions]  # routing only: which graph a query is asked over
    requests = build_requests(queries, graph_of, loaded, graphs, intents, context_fields)
    answers = _answer_phase(answerer, requests, progress)

    # ---- gold joins here, after every answer has returned
    rules = [rule_for(q.category, conventions) for q in questions]
    scores = [score_answer(a.text, q.answer, r, abstention_phrases) for a, q, r in zip(answers, questions, rules)]
    verdicts: dict[str, Verdict] = {}
    if judge is not None:
        items = [
            JudgeItem(q.qid, q.text, s.scored_gold or "", a.text)
            for q, a, s, r in zip(questions, answers, scores, rules)
            if r != "abstention" and a.text is not None and s.scored_gold
        ]
        verdicts = {v.qid: v for v in judge.judge_many(items)}
    rows = []
    for q, a, s, ids in zip(questions, answers, scores, loaded):
        v = verdicts.get(q.qid)
        failed = a.text is None  # the answer call failed: no score at all, not a score of 0
        rows.append(
            {
                "qid": q.qid,
                "graph": q.graph,
                "category": q.category,
                "category_name": category_name(q.category),
                "question": q.text,
                "gold_answer": q.answer,
                "loaded": list(ids),
                "answer": a.to_json(),
                "score": s.to_json(),
                "answer_failed": failed,
                "f1": None if failed else s.f1,
                "em": None if failed else s.em,
                "judge": None if failed or v is None else v.score,
                "judge_detail": v.to_json() if v else None,
                "tokens": a.prompt_tokens + a.completion_tokens + (v.prompt_tokens + v.completion_tokens if v else 0),
                "cost_usd": (a.cost_usd or 0.0) + ((v.cost_usd or 0.0) if v else 0.0),
                "latency_s": a.latency_s + (v.latency_s if v else 0.0),
            }
        )
    info = {"questions": len(rows), "judged": judge is not None}
    return QAResult(policy=policy, dataset=dataset, rows=rows, summary=summarize_qa(rows), info=info)


def _aggregate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One summary group; means are over the answered questions only (``None`` when none was answered)."""
    if not rows:
        return {"n": 0}
    answered = [r for r in rows if not r["answer_failed"]]
    judged = [r["judge"] for r in answered if r["judge"] is not None]
    judge_failures = sum(1 for r in rows if r["judge_detail"] is not None and r["judge_detail"]["score"] is None)
    latencies = [r["latency_s"] for r in answered]
    mean = lambda values: sum(values) / len(values) if values else None  # noqa: E731
    return {
        "n": len(rows),
        "answered": len(answered),
        "answer_failures": len(rows) - len(answered),
        "f1": mean([r["f1"] for r in answered]),
        "em": mean([r["em"] for r in answered]),
        "judge": mean(judged),
        "judged": len(judged),
        "judge_failures": judge_failures,
        "abstention_rate": mean([r["answer"]["abstained"] for r in answered]),
        "tokens": sum(r["tokens"] for r in rows),
        "cost_usd": sum(r["cost_usd"] for r in rows),
        "latency_s": mean(latencies),
        "latency_p95_s": percentile(latencies, 95) if latencies else None,
    }


def summarize_qa(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Groups of the module docstring, categories in their first-seen order after sorting."""
    answerable = [r for r in rows if r["score"]["rule"] != "abstention"]
    unanswerable = [r for r in rows if r["score"]["rule"] == "abstention"]
    out = {OVERALL: _aggregate(answerable)}
    for cat in sorted(
        {r["category"] for r in rows}, key=lambda c: (isinstance(c, str), str(c) if isinstance(c, str) else c)
    ):
        out[category_name(cat)] = _aggregate([r for r in rows if r["category"] == cat])
    if unanswerable:
        out[UNANSWERABLE] = _aggregate(unanswerable)
        out[ALL] = _aggregate(list(rows))
    return out


def make_components(
    settings: QASettings, encoder=None, intents: IntentPredictor | None = None
) -> tuple[Answerer, Judge | None, IntentPredictor, LLMClient, LLMClient | None]:
    """Fresh clients (usage is accounted per run), answerer, judge and — unless given — the intent source."""
    answer_client = LLMClient(settings.answer_llm)
    judge_client = LLMClient(settings.judge_llm) if settings.judge_llm is not None else None
    answerer = Answerer(answer_client, settings.answer_max_tokens, settings.abstention_phrases)
    judge = Judge(judge_client, settings.judge_max_tokens) if judge_client is not None else None
    intents = intents or make_intent_predictor(
        settings.intent, encoder=encoder, checkpoint=settings.intent_checkpoint, min_weight=settings.intent_min_weight
    )
    return answerer, judge, intents, answer_client, judge_client


def evaluate_qa(
    settings: QASettings,
    graphset,
    loaded_by_qid: Mapping[str, Sequence[str]],
    *,
    policy: str = "",
    components=None,
    progress: bool = False,
) -> QAResult:
    """QA over a seeded sample of ``graphset``'s questions, using each question's loaded node ids.

    ``loaded_by_qid`` maps a qid to the ids the policy loaded (e.g. from an evaluation's rows).
    """
    answerer, judge, intents, answer_client, judge_client = components or make_components(settings)
    questions = select_questions(
        [q for q in graphset.questions if q.qid in loaded_by_qid], settings.max_questions, settings.seed
    )
    by_qid = {x.qid: x for x in graphset.queries()}
    result = run_qa(
        questions,
        [by_qid[q.qid] for q in questions],
        [loaded_by_qid[q.qid] for q in questions],
        graphset.graphs,
        answerer,
        judge,
        intents,
        conventions_for(graphset.dataset, settings.conventions),
        policy=policy,
        dataset=graphset.dataset,
        context_fields=settings.context_fields,
        abstention_phrases=settings.abstention_phrases,
        progress=progress,
    )
    result.info.update(
        {
            "answer_model": settings.answer_llm.model,
            "answer_local_substitute": answer_client.is_local_substitute,
            "judge_model": settings.judge_llm.model if settings.judge_llm else None,
            "self_judged": settings.self_judged,
            "intent": settings.intent,
            "seed": settings.seed,
            "usage": {
                "answer": answer_client.usage_report(),
                "judge": judge_client.usage_report() if judge_client else None,
            },
            "failures": {
                "answer": answer_client.failure_summary(),
                "judge": judge_client.failure_summary() if judge_client else None,
            },
        }
    )
    return result


def qa_failure(result: QAResult) -> str | None:
    """Why ``result`` measured nothing: every answer call failed, or every judge call did; else ``None``."""
    rows = result.rows
    if rows and all(r["answer_failed"] for r in rows):
        return f"all {len(rows)} answer calls failed ({result.info.get('answer_model')})"
    judged = [r["judge_detail"] for r in rows if r["judge_detail"] is not None]
    if judged and all(v["score"] is None for v in judged):
        return f"all {len(judged)} judge calls failed ({result.info.get('judge_model')})"
    return None


def answered_groups(result: QAResult) -> Iterator[tuple[str, dict[str, str]]]:
    """Each group of the summary that holds questions, with its figures as the reports print them: means to three
    decimals (``-`` for none), the cost to four, counts as they are."""
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for group, s in result.summary.items():
        if s.get("n"):
            counts = {k: str(s[key]) for k, key in COUNTS.items()}
            means = {k: fmt(s[key]) for k, key in MEANS.items()}
            yield group, {**counts, **means, "cost": f"{s['cost_usd']:.4f}"}


COUNTS = {"n": "n", "answered": "answered", "failed": "answer_failures", "judged": "judged"}
COUNTS |= {"judge_failures": "judge_failures", "tokens": "tokens"}
MEANS = {"f1": "f1", "em": "em", "judge": "judge", "abstain": "abstention_rate", "latency": "latency_s"}


def summary_lines(result: QAResult) -> list[str]:
    """A printable summary: one line per group, then models and failures."""
    lines = [
        f"QA [{result.policy}] {result.dataset}: answer={result.info.get('answer_model')} "
        f"judge={result.info.get('judge_model')}{' (self-judged)' if result.info.get('self_judged') else ''}"
        f"{' [local substitute]' if result.info.get('answer_local_substitute') else ''}"
    ]
    lines.append("  means over answered questions; failed answer calls are counted, not scored")
    for group, c in answered_groups(result):
        lines.append(
            f"  {group:<14} n={c['n']:<4} answered={c['answered']:<4} failed={c['failed']:<3} "
            f"F1={c['f1']} EM={c['em']} judge={c['judge']} (judged {c['judged']}, fail {c['judge_failures']}) "
            f"abstain={c['abstain']} tokens={c['tokens']} cost=${c['cost']} latency={c['latency']}s/q"
        )
    fails = result.info.get("failures", {})
    lines.append(
        f"  failures: answer={(fails.get('answer') or {}).get('failures', 0)} "
        f"judge={(fails.get('judge') or {}).get('failures', 0)}"
    )
    return lines


def write_rows(result: QAResult, path: str | Path) -> Path:
    return write_jsonl(result.rows, path)
