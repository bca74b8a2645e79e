"""Training loggers: what a trainer calls once per epoch with one flat row of metrics.

* :class:`PrintLogger` — selected keys through the ``logging`` module (so Hydra's job log has them);
* :class:`ProgressLogger` — a tqdm bar over the epochs, the latest figures in its postfix;
* :class:`TrackerLogger` — rows to a :class:`graphmem.tracking.Tracker` as an epoch curve;
* :class:`MultiLogger` — fans out to several.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Protocol, Sequence

log = logging.getLogger("rl.train")

VALIDATION_KEYS = {"val_recall": "val/recall", "val_return": "val/return"}
"""Trainer row keys that are validation figures, and their tracked names (the rest go under ``train/``)."""


class Logger(Protocol):
    """Receives one flat dict of metrics per call."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None: ...


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class PrintLogger:
    """Logs selected keys (``logging``, INFO, logger ``rl.train``) every ``every`` steps (default: every step)."""

    def __init__(
        self,
        keys: Sequence[str] = ("epoch", "return", "success", "loss", "val_recall", "val_return"),
        every: int = 1,
        prefix: str = "",
    ):
        self.keys, self.every, self.prefix = tuple(keys), every, prefix

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if step % self.every == 0:
            log.info("%s%s", self.prefix, " ".join(f"{k}={_fmt(metrics[k])}" for k in self.keys if k in metrics))


class ProgressLogger:
    """A tqdm bar of ``total`` epochs; each row advances it and shows ``keys`` in the postfix.

    Args:
        total: epochs the bar counts to.
        desc: bar label (default: ``train``).
        keys: row keys shown (default: return and validation recall).
        disable: no bar (default: ``False``).
    """

    def __init__(
        self,
        total: int,
        desc: str = "train",
        keys: Sequence[str] = ("return", "val_recall", "val_return"),
        disable: bool = False,
    ):
        from tqdm.auto import tqdm

        self.keys = tuple(keys)
        self.bar = tqdm(total=total, desc=desc, unit="epoch", disable=disable, leave=False)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self.bar.set_postfix({k: _fmt(metrics[k]) for k in self.keys if k in metrics}, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


class TrackerLogger:
    """Trainer rows as epoch curves of one tracked run.

    Declares ``epoch`` as the step metric of ``train/*`` and ``val/*`` (the run summary keeps
    the best ``val/*``), then logs each row as ``{"epoch": e, "train/<key>": ..., "val/recall": ...}``
    with ``e`` the trainer's ``step`` (epochs counted across phases: the walk trainer's imitation and
    policy-gradient epochs make one curve); numeric values only, and NaN validation entries of
    epochs without a validation are left out.
    """

    def __init__(self, tracker):
        self.tracker = tracker
        tracker.define_metric("epoch")
        tracker.define_metric("train/*", step_metric="epoch")
        tracker.define_metric("val/*", step_metric="epoch", summary="max")

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        row: dict[str, Any] = {"epoch": step}
        for key, value in metrics.items():
            if key == "epoch" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if key in VALIDATION_KEYS:
                if not math.isnan(value):
                    row[VALIDATION_KEYS[key]] = value
            else:
                row[f"train/{key}"] = value
        self.tracker.log(row)


class MultiLogger:
    """Forwards to several loggers."""

    def __init__(self, *loggers: Logger):
        self.loggers = [lg for lg in loggers if lg is not None]

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for lg in self.loggers:
            lg.log(metrics, step)
