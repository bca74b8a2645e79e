"""Answer quality: answering from retrieved context, token F1 / EM scoring and an LLM judge.

* ``answer``: intent-guided answering from a policy's loaded nodes (HAGE Appendix C.2), one
  answer per question, with abstention.
* ``scoring``: normalised multiset token F1 and EM with explicit per-category conventions.
* ``judge``: LLM-as-a-judge with HAGE's Appendix C.3 rubric (continuous 0-1, temperature 0).
* ``run``: the evaluation loop — answers first, gold joined afterwards — with per-question
  tokens, cost and latency, JSONL rows and per-category summaries.

Gold answers and categories are read only by ``scoring``, ``judge`` and the scoring phase of
``run``; nothing that builds an answer prompt receives them.
"""

from graphmem.qa.scoring import exact_match, multi_answer_f1, normalize, score_answer, token_f1

__all__ = ["exact_match", "multi_answer_f1", "normalize", "score_answer", "token_f1"]
