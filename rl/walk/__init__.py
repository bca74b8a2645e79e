"""Training of the learned walk (the ``router`` policy): the trainer, its objectives, the per-graph
training tables and its throughput benchmark."""
