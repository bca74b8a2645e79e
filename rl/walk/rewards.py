"""Rewards of a walk episode, per step (``[T, B]``), from the evidence, the answer or an LLM judge.

``trainer.objective.reward`` chooses one; the costs are added to every kind:

* ``evidence``: ``r_t = 1(v_t ∈ G_b) / |G_b|``, so ``Σ_t r_t`` is the evidence recall of the loaded set.
* ``answer``: the gold answer's tokens ``A_b`` (:func:`graphmem.index.lexical.tokenize`: lowercased words,
  stop words dropped) found in the loaded text. With ``C_t`` the answer tokens present in the
  text of the nodes loaded at steps ``≤ t``,

      r_t = (|C_t| - |C_{t-1}|) / |A_b|,   so   Σ_t r_t = |A_b ∩ tokens(loaded text)| / |A_b|,

  the token recall (containment) of the answer in what the walk loaded. A node offers the reward
  what the reader is shown: its text and its ``date_time`` and ``title`` metadata
  (:func:`graphmem.qa.answer.context_records`), so an answer that is a session date is found in a
  turn of that session. Questions whose answer has no token left are dropped and counted.
* ``judge``: an LLM reads the question, the reference answer and the loaded records and scores in
  ``[0, 1]`` whether the records suffice to give that answer; the score is the reward of the
  walk's last step. Calls go through :class:`graphmem.llm.client.LLMClient` (its response cache,
  ``mock_response`` in tests, the local model offline); a failed call (unreachable, an error, or no
  score in the reply after the client's retries) scores 0 and is counted. The trainer stops the run
  when more than ``objective.max_failed_share`` of the calls, or every one, failed
  (:func:`failed_share_problem`).
* costs: ``- c_node`` per loaded node and ``- c_token · tokens(v_t)`` (``objective.node_cost``,
  ``objective.token_cost``); the stop action costs nothing.

The ``answer`` and ``judge`` rewards read the questions' answers only: no evidence label is used
anywhere in a run that trains from them (:func:`rl.walk.data.walk_data` reads the labels only for
``reward="evidence"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.eval.metrics import evidence_shares
from graphmem.feedback import CONTEXT_FIELDS, MAX_ANSWER_TOKENS, answer_tokens, node_offer  # noqa: F401 (one home)
from graphmem.index.lexical import tokenize
from graphmem.llm.client import LLMClient
from graphmem.policies.walk import WalkEpisodes, WalkTables
from graphmem.qa.judge import SUFFICIENCY_ROLE as JUDGE_ROLE
from graphmem.qa.judge import parse_score, usable_score
from graphmem.qa.judge import sufficiency_messages as judge_messages

REWARDS = ("evidence", "answer", "judge")


def evidence_rewards(ep: WalkEpisodes, gold: Tensor) -> Tensor:
    """``[T, B]`` ``1(v_t ∈ G_b) / |G_b|`` (:func:`graphmem.eval.metrics.evidence_shares`); ``gold`` is ``[B, G]``
    rows, ``-1`` padded."""
    return evidence_shares(ep.loaded.T, gold)


def costs(ep: WalkEpisodes, tables: WalkTables, node_cost: float, token_cost: float) -> Tensor:
    """``[T, B]`` ``c_node · 1(load) + c_token · tokens(v_t)`` of every load (0 for the stop)."""
    loaded = ep.loaded.T
    real = loaded >= 0
    tokens = tables.tokens[loaded.clamp(min=0)].to(torch.float32) * real
    return node_cost * real.float() + token_cost * tokens


@dataclass
class AnswerTargets:
    """Which answer tokens each (question, node) pair holds, as sorted keys and bit masks.

    Attributes:
        keys: ``[K]`` sorted ``question row · N + node row`` of the pairs whose node holds an answer token.
        bits: ``[K]`` int64: bit ``j`` set when the node's offered text holds answer token ``j``.
        counts: ``[Q]`` ``|A_b|``.
        num_nodes: ``N``, the union's rows.
    """

    keys: Tensor
    bits: Tensor
    counts: Tensor
    num_nodes: int

    def to(self, device) -> AnswerTargets:
        return AnswerTargets(self.keys.to(device), self.bits.to(device), self.counts.to(device), self.num_nodes)

    def rewards(self, ep: WalkEpisodes, rows: Tensor) -> Tensor:
        """``[T, B]`` ``(|C_t| - |C_{t-1}|) / |A_b|`` (module docstring) of the walks of question ``rows``."""
        loaded = ep.loaded  # [B, T]
        query = rows[:, None] * self.num_nodes + loaded.clamp(min=0)
        if self.keys.numel():
            pos = torch.searchsorted(self.keys, query.flatten()).clamp(max=self.keys.numel() - 1).view(query.shape)
            mask = torch.where((self.keys[pos] == query) & (loaded >= 0), self.bits[pos], torch.zeros_like(query))
        else:
            mask = torch.zeros_like(query)
        shifts = torch.arange(MAX_ANSWER_TOKENS, device=mask.device)
        has = ((mask[..., None] >> shifts) & 1).bool()  # [B, T, A]
        covered = torch.cummax(has.to(torch.int8), dim=1).values.sum(-1).to(torch.float32)  # |C_t|
        gained = torch.diff(covered, dim=1, prepend=torch.zeros_like(covered[:, :1]))
        return (gained / self.counts[rows].clamp(min=1).to(torch.float32)[:, None]).T


def answer_targets(
    graphs: Sequence[MemoryGraph], node_ptr: Tensor, questions: Sequence[Question], graph_of: Sequence[int]
) -> AnswerTargets:
    """:class:`AnswerTargets` of ``questions`` (row ``b`` asked on union graph ``graph_of[b]``), from one
    inverted index (token -> union rows of the nodes offering it) per graph."""
    index: dict[int, dict[str, list[int]]] = {}
    keys, bits, counts = [], [], []
    n = int(node_ptr[-1])
    for b, (q, c) in enumerate(zip(questions, graph_of)):
        tokens = answer_tokens(q.answer)
        counts.append(len(tokens))
        if c not in index:
            g, off = graphs[c], int(node_ptr[c])
            index[c] = {}
            for v in range(g.num_nodes):
                offered = node_offer(g, v)
                for t in set(tokenize(offered)):
                    index[c].setdefault(t, []).append(off + v)
        masks: dict[int, int] = {}
        for j, t in enumerate(tokens):
            for v in index[c].get(t, ()):
                masks[v] = masks.get(v, 0) | (1 << j)
        keys += [b * n + v for v in masks]
        bits += list(masks.values())
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return AnswerTargets(
        torch.tensor([keys[i] for i in order], dtype=torch.long),
        torch.tensor([bits[i] for i in order], dtype=torch.long),
        torch.tensor(counts, dtype=torch.long),
        n,
    )


# ---------------------------------------------------------------------------- the LLM judge
@dataclass
class JudgeReward:
    """The ``judge`` reward (module docstring) of walks over a union of graphs.

    Args:
        client: the LLM client (cache, mock, local model).
        offers: the union's node texts as offered to a reward (:func:`node_offer`), by row.
        questions: question texts and reference answers, by question row.
    """

    client: LLMClient
    offers: Sequence[str]
    questions: Sequence[tuple[str, str]]
    failures: int = 0
    calls: int = 0
    _scores: dict = field(default_factory=dict)

    def scores(self, ep: WalkEpisodes, rows: Tensor) -> Tensor:
        """``[B]`` the judge's score of each walk's loaded records (0 for a failed call)."""
        batch, todo = [], []
        for b, (r, loaded) in enumerate(zip(rows.tolist(), ep.loaded.tolist())):
            key = (r, tuple(v for v in loaded if v >= 0))
            if key not in self._scores and key not in todo:
                question, reference = self.questions[r]
                todo.append(key)
                batch.append(judge_messages(question, reference, [self.offers[v] for v in key[1]]))
        replies = self.client.complete_many(JUDGE_ROLE, batch, validate=usable_score) if batch else []
        for key, reply in zip(todo, replies):
            score = None if reply is None else parse_score(reply.text)
            self.calls += 1
            self.failures += score is None
            self._scores[key] = 0.0 if score is None else score
        pairs = zip(rows.tolist(), ep.loaded.tolist())
        out = [self._scores[(r, tuple(v for v in loaded if v >= 0))] for r, loaded in pairs]
        return torch.tensor(out, dtype=torch.float32, device=ep.loaded.device)

    def rewards(self, ep: WalkEpisodes, rows: Tensor) -> Tensor:
        """``[T, B]``: the score at each walk's last acted step, 0 elsewhere."""
        out = torch.zeros(ep.action.shape, dtype=torch.float32, device=ep.loaded.device)
        last = (ep.acted.long().cumsum(0).argmax(0)).clamp(min=0)  # the last acted step
        out[last, torch.arange(out.shape[1], device=out.device)] = self.scores(ep, rows)
        return out * ep.acted.float()


def failed_share_problem(reward: str, model: str, calls: int, failures: int, limit: float, where: str) -> str | None:
    """Why an LLM-backed reward's ``calls`` cannot be trained on: every one failed, or more than the
    share ``limit`` did (``failures > limit · calls``); ``None`` when no call was made or the share is within it."""
    if not calls or (failures < calls and failures <= limit * calls):
        return None
    if failures == calls:
        return f"reward {reward} ({model}): all {calls} calls failed {where}"
    share = f"{failures} of {calls} calls ({failures / calls:.0%}) failed {where}"
    return f"reward {reward} ({model}): {share}, more than trainer.objective.max_failed_share={limit}"


def judge_reward(
    client: LLMClient, graphs: Mapping[str, MemoryGraph], names: Sequence[str], questions: Sequence[Question]
) -> JudgeReward:
    """A :class:`JudgeReward` over the union of ``names`` (in order) for ``questions`` (by row)."""
    offers = [node_offer(graphs[n], v) for n in names for v in range(graphs[n].num_nodes)]
    return JudgeReward(client, offers, [(q.text, q.answer or "") for q in questions])
