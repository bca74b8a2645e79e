"""Training loggers: the interface the trainer calls, a console printer and a fan-out.

Any :class:`graphmem.tracking.Tracker` (W&B offline, JSONL, none) is a :class:`Logger` too.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence


class Logger(Protocol):
    """Receives one flat dict of metrics per call."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None: ...


class PrintLogger:
    """Prints selected keys every ``every`` steps (default: every step)."""

    def __init__(self, keys: Sequence[str] = ("epoch", "return", "success", "loss", "val_recall"), every: int = 1):
        self.keys, self.every = tuple(keys), every

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if step % self.every == 0:
            parts = [
                f"{k}={metrics[k]:.4g}" if isinstance(metrics[k], float) else f"{k}={metrics[k]}"
                for k in self.keys
                if k in metrics
            ]
            print(" ".join(parts), flush=True)


class MultiLogger:
    """Forwards to several loggers."""

    def __init__(self, *loggers: Logger):
        self.loggers = [lg for lg in loggers if lg is not None]

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for lg in self.loggers:
            lg.log(metrics, step)
