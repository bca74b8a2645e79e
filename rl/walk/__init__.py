"""Training of the learned walk (the ``router`` policy): the trainer, its objectives, the per-graph
training tables, its throughput benchmark and its test-time learning (:mod:`rl.walk.online`). Importing it
types the ``trainer`` config group."""

from graphmem.config.schemas import add_schema
from rl.walk.trainer import TrainConfig

add_schema("trainer", TrainConfig)
