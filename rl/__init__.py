"""Trainers: the learned walk (:mod:`rl.walk`), the GNN reader (:mod:`rl.gnn`), the writer (:mod:`rl.writer`)
and what they share (:mod:`rl.common`)."""
