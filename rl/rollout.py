"""Rollouts of the router policy in the traversal MDP: batched (the hot path) and batch-1 (reference).

Policy at a step: over the legal out-edges ``a = (v_t -> u)`` of an episode,

    π(a | s_t) = softmax_a( s_{v_t u}(q) / T )

with ``s`` the :class:`models.router.QueryRouter` score and temperature ``T``. The batched form
gathers every episode's candidate edges from the union CSR into one ragged vector, scores them
in one router call, normalises per episode with ``torch_geometric.utils.softmax`` and samples
by the Gumbel-max trick per episode segment. :func:`rollout_reference` walks one episode at a
time with plain ``torch.softmax``; both give the same log-probabilities for the same actions.

The Gumbel noise comes either from a ``torch.Generator`` (one stream shared by the batch) or,
given per-episode ``keys``, from a counter-based hash of (episode key, hop, edge id)
(:func:`keyed_uniform`). Keyed noise does not depend on which other episodes share the batch,
so splitting a batch across processes (:mod:`rl.common.distributed`) samples exactly the same actions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from graphmem.graph_batch import GraphBatch
from models.router import QueryRouter, edge_similarities
from rl.mdp import MDPConfig, TraversalMDP, union_tensors

DENSE_SIM_LIMIT = 1 << 24  # episodes x union nodes up to which cosines come from one matmul


@dataclass
class Episodes:
    """One row per episode: query row, start node, the question's entries (visited at start), gold (reward only)."""

    query: Tensor
    start: Tensor
    entries: Tensor
    gold: Tensor

    def __len__(self) -> int:
        return int(self.query.numel())

    def take(self, index: Tensor) -> Episodes:
        """The episodes at rows ``index``."""
        return Episodes(self.query[index], self.start[index], self.entries[index], self.gold[index])


_MASK32 = 0xFFFFFFFF


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer finaliser (xorshift-multiply) on int64 tensors holding values in ``[0, 2^32)``.

    Both multipliers are below ``2^31``, so products stay below ``2^63``: no signed overflow.
    """
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def _combine(h: Tensor, v: Tensor | int) -> Tensor:
    return _mix32(h ^ ((torch.as_tensor(v, device=h.device) & _MASK32) + 0x9E3779B9 + (h << 6) + (h >> 2)) & _MASK32)


def episode_keys(
    seed: int, epoch: int, step: int, first: int, count: int, device: str | torch.device = "cpu"
) -> Tensor:
    """``[count]`` int64 keys of episodes ``first .. first+count-1`` of optimizer step ``(epoch, step)``."""
    h = _mix32(torch.tensor(seed & _MASK32, dtype=torch.long, device=device))
    h = _combine(_combine(h, epoch), step)
    return _combine(h.expand(count), torch.arange(first, first + count, device=device))


def keyed_uniform(keys: Tensor, hop: int, edges: Tensor) -> Tensor:
    """Uniforms in ``(0, 1)`` (float64) as a pure function of (episode key, hop, global edge id)."""
    h = _combine(_combine(keys, hop), edges)
    return (h.double() + 0.5) / 2.0**32


def make_episodes(query: Tensor, entries: Tensor, gold: Tensor, starts_per_question: int) -> Episodes:
    """Expand questions into episodes starting at each of their first ``starts_per_question`` entries.

    Args:
        query: ``[Q]`` query rows.
        entries: ``[Q, L]`` global entry nodes in selector order (-1 padded).
        gold: ``[Q, G]`` global gold nodes (-1 padded).
        starts_per_question: episodes per question (default entries beyond the count are skipped).
    """
    k = min(starts_per_question, entries.shape[1])
    starts = entries[:, :k]
    qi, col = (starts >= 0).nonzero(as_tuple=True)
    return Episodes(query[qi], starts[qi, col], entries[qi], gold[qi])


@dataclass
class Trajectory:
    """``[T, B]`` per-step tensors; ``acted`` marks steps where the episode took an action."""

    logp: Tensor
    entropy: Tensor
    reward: Tensor
    acted: Tensor
    edge: Tensor
    success: Tensor

    def returns(self, gamma: float) -> Tensor:
        """``G_t = Σ_k γ^k r_{t+k}`` ``[T, B]`` (zero after an episode ends)."""
        g = torch.zeros_like(self.reward)
        running = torch.zeros_like(self.reward[0]) if self.reward.numel() else self.reward.new_zeros(0)
        for t in range(self.reward.shape[0] - 1, -1, -1):
            running = self.reward[t] + gamma * running
            g[t] = running
        return g * self.acted


def _segment_choice(key: Tensor, seg: Tensor, num: int) -> tuple[Tensor, Tensor]:
    """Per segment, the position of the largest ``key`` (first on ties): ``(has [num], pos [num])``."""
    best = scatter(key, seg, 0, dim_size=num, reduce="max")
    pos = torch.arange(key.numel(), device=key.device)
    pos = torch.where(key == best[seg], pos, key.numel())
    first = scatter(pos, seg, 0, dim_size=num, reduce="min")
    has = torch.bincount(seg, minlength=num) > 0
    return has, first.clamp(max=max(key.numel() - 1, 0))


def rollout(
    router: QueryRouter,
    q: Tensor,
    intent: Tensor,
    edge_attr: Tensor,
    batch: GraphBatch,
    episodes: Episodes,
    config: MDPConfig = MDPConfig(),
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    forced: Tensor | None = None,
    keys: Tensor | None = None,
) -> Trajectory:
    """Run all ``episodes`` (global node ids of ``batch``'s union) together.

    Args:
        q: ``[B, D]`` query embedding of each episode; ``intent``: ``[B, R]``.
        edge_attr: ``[E, 4]`` edge features of the union (gradients flow through).
        greedy: take the best-scored edge instead of sampling (default: ``False``).
        generator: random source for sampling (default: global).
        forced: ``[T, B]`` global edge ids to take instead of choosing (-1: none) (default: ``None``).
        keys: ``[B]`` per-episode keys (:func:`episode_keys`); sampling then uses :func:`keyed_uniform`
            instead of ``generator`` (default: ``None``).
    """
    b = len(episodes)
    mdp = TraversalMDP(batch, episodes.gold, config)
    union = union_tensors(batch, q.device, q.dtype)
    state = mdp.reset(episodes.start, episodes.entries)
    m = router.modulation(q, intent)
    qn = torch.nn.functional.normalize(q, dim=-1)
    # cos(q, x_u) needs no gradient: one [B, N] matmul when small, else a gather per candidate
    sim = qn @ union.x.T if b * union.x.shape[0] <= DENSE_SIM_LIMIT else None
    out = {k: [] for k in ("logp", "entropy", "reward", "acted", "edge")}
    for t in range(config.max_hops):
        if bool(state.done.all()):
            break
        ep, edges, target = mdp.actions(state)
        cos = sim[ep, target] if sim is not None else (qn[ep] * union.x[target]).sum(-1)
        sims = None
        if router.similarities:
            src = union.edge_index[0, edges]
            cos_src = sim[ep, src] if sim is not None else (qn[ep] * union.x[src]).sum(-1)
            sims = torch.stack([cos_src, cos, (union.x[src] * union.x[target]).sum(-1)], -1)
        s = router.score(m, edge_attr[edges], union.edge_type[edges], ep, cos, sims) / temperature
        p = softmax(s, ep, num_nodes=b)
        logp_all = torch.log(p.clamp_min(1e-30))
        if forced is not None:
            key = (edges == forced[t][ep]).float()
        elif greedy:
            key = s.detach()
        elif keys is not None:
            key = s.detach() - torch.log(-torch.log(keyed_uniform(keys[ep], t, edges))).to(s.dtype)
        else:
            u = torch.rand(s.shape, generator=generator, device=s.device).clamp_min(1e-20)
            key = s.detach() - torch.log(-torch.log(u))
        has, pos = _segment_choice(key, ep, b)
        if forced is not None:
            has = has & (forced[t] >= 0)
        acted = has & ~state.done
        chosen_t = torch.where(acted, target[pos] if target.numel() else pos, -1)
        logp = torch.where(acted, logp_all[pos] if s.numel() else s.new_zeros(b), s.new_zeros(b))
        ent = scatter(-(p * logp_all), ep, 0, dim_size=b, reduce="sum")
        reward, state = mdp.step(state, chosen_t)
        out["logp"].append(logp)
        out["entropy"].append(ent)
        out["reward"].append(reward)
        out["acted"].append(acted)
        out["edge"].append(torch.where(acted, edges[pos] if edges.numel() else pos, -1))
    if not out["logp"]:
        z = q.new_zeros(0, b)
        return Trajectory(z, z, z, z.bool(), z.long(), mdp.success(state))
    st = {k: torch.stack(v) for k, v in out.items()}
    return Trajectory(st["logp"], st["entropy"], st["reward"], st["acted"], st["edge"], mdp.success(state))


def rollout_reference(
    router: QueryRouter,
    q: Tensor,
    intent: Tensor,
    edge_attr: Tensor,
    batch: GraphBatch,
    episodes: Episodes,
    config: MDPConfig = MDPConfig(),
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    forced: Tensor | None = None,
) -> Trajectory:
    """Batch-1 reference: each episode alone, on its own graph's CSR, Python sets and ``torch.softmax``.

    Same arguments and output layout as :func:`rollout` (``[T, B]``, ``T = config.max_hops``).
    """
    b, horizon = len(episodes), config.max_hops
    logp, ent, rew = (q.new_zeros(horizon, b) for _ in range(3))
    acted = torch.zeros(horizon, b, dtype=torch.bool)
    edge_out = torch.full((horizon, b), -1, dtype=torch.long)
    success = torch.zeros(b, dtype=torch.bool)
    node_off = batch.node_ptr
    unit = [torch.nn.functional.normalize(g.embeddings.float(), dim=1).to(q.device) for g in batch.graphs]
    for i in range(b):
        g = int(torch.searchsorted(node_off, episodes.start[i].cpu(), right=True)) - 1
        graph, n0, e0 = batch.graphs[g], int(node_off[g]), int(batch.edge_ptr[g])
        x = unit[g]
        gold = {int(v) for v in episodes.gold[i].tolist() if v >= 0}
        cur = int(episodes.start[i])
        visited = {cur} | {int(v) for v in episodes.entries[i].tolist() if v >= 0}
        reached = gold & visited
        if gold and reached == gold:
            success[i] = True
            continue
        m = router.modulation(q[i : i + 1], intent[i : i + 1])
        frontier = [cur] + [int(v) for v in episodes.entries[i].tolist() if v >= 0 and int(v) != cur]
        for t in range(horizon):
            sources = frontier if config.action_space == "frontier" else [cur]
            out = torch.cat([graph.out_edges(v - n0) for v in sources])
            out = out[torch.tensor([int(v) + n0 not in visited for v in graph.edge_index[1, out]], dtype=torch.bool)]
            if out.numel() == 0:
                break
            tgt = graph.edge_index[1, out].to(q.device)
            gid = out.to(q.device) + e0
            qn = torch.nn.functional.normalize(q[i : i + 1], dim=-1).expand(out.numel(), -1)
            xs = x[graph.edge_index[0, out].to(q.device)]
            s = (
                router.score(
                    m,
                    edge_attr[gid],
                    graph.edge_type[out].to(q.device),
                    torch.zeros(out.numel(), dtype=torch.long, device=q.device),
                    (qn * x[tgt]).sum(-1),
                    edge_similarities(qn, xs, x[tgt]) if router.similarities else None,
                )
                / temperature
            )
            p = torch.softmax(s, 0)
            if forced is not None:
                if int(forced[t, i]) < 0:
                    break
                k = int((gid == forced[t, i]).nonzero()[0])
            elif greedy:
                k = int(torch.argmax(s))
            else:
                k = int(torch.multinomial(p.detach(), 1, generator=generator))
            logp[t, i] = torch.log(p[k].clamp_min(1e-30))
            ent[t, i] = -(p * torch.log(p.clamp_min(1e-30))).sum()
            acted[t, i], edge_out[t, i] = True, int(gid[k])
            cur = int(tgt[k]) + n0
            visited.add(cur)
            frontier.append(cur)
            hit = cur in gold and cur not in reached
            reached = reached | ({cur} if hit else set())
            rew[t, i] = config.hit_reward * hit - config.step_penalty
            if gold and reached == gold:
                success[i] = True
                break
            if t + 1 == horizon:
                rew[t, i] -= config.timeout_penalty
    dev = q.device
    return Trajectory(logp, ent, rew, acted.to(dev), edge_out.to(dev), success.to(dev))
