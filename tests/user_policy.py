"""A user's own policy, outside ``graphmem`` and never registered: it plugs in by its dotted path,
``policy._target_=tests.user_policy.EntriesOnly`` (``test_user_policy.py``)."""

import torch
from torch import Tensor

from graphmem.core import Budget, RetrievalBatch
from graphmem.core.device import resolve_device
from graphmem.policies import Scope, TraversalPolicy, make_entry_selector
from graphmem.policies.batched import greedy_admit
from graphmem.policies.tables import token_counts


class EntriesOnly(TraversalPolicy):
    """Loads its entries, in the selector's order, under the budget, and walks no edge: the
    entry selector's own recall (the floor every traversal adds to)."""

    def __init__(
        self, entry_selector: str = "embedding", device: str = "cpu", max_entries: int | None = None, **_replaced
    ):
        # ``_replaced``: the keys of the option it is swapped in for (Beta BFS's ranking, ucb_c, seed)
        self.device = resolve_device(device)
        self.entry_selector = make_entry_selector(entry_selector)
        self.max_entries = max_entries

    def traverse(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        if self.max_entries is not None:
            entries = entries[:, : self.max_entries]
        zero = torch.zeros(entries.shape[0], dtype=torch.long, device=scope.device)
        valid = entries >= 0
        tokens = token_counts(scope.graph, scope.device)[entries.clamp(min=0)]
        admit, used, _ = greedy_admit(tokens, valid, zero, zero, budget)
        query, cols = admit.nonzero(as_tuple=True)
        return RetrievalBatch(entries, used, query, entries[query, cols])
