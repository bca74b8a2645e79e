"""Training of the learned walk (the ``router`` policy): the trainer, its objectives, the per-graph
training tables and its throughput benchmark. Importing it types the ``trainer`` config group."""

from graphmem.config.schemas import add_schema
from rl.walk.trainer import TrainConfig

add_schema("trainer", TrainConfig)
