"""Experiment tracking: one small interface, a W&B backend and a local JSONL backend.

:func:`make_tracker` picks the backend from a logger config (``configs/logger/*.yaml``):

* ``backend: wandb`` — Weights & Biases, imported lazily, **offline by default** (mode from the
  config, else ``$WANDB_MODE``, else ``offline``). When wandb is not installed (e.g. the GPU
  machine) or the mode is ``disabled``, it falls back to the JSONL backend so nothing is lost.
* ``backend: jsonl`` — ``metrics.jsonl``, ``tables/<name>.json`` and ``artifacts.jsonl`` under
  the run directory.
* ``backend: none`` — a no-op.

The run config handed to a backend goes through :func:`config_for_logging` first: keys that
name credentials and values that come from environment variables are dropped.
"""

from __future__ import annotations

import json
import os
import re
import time
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

SECRET_NAME_PARTS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials"})
_ENV_INTERPOLATION = re.compile(r"\$\{\s*(oc\.env|env)\s*:")
_MIN_ENV_VALUE_LEN = 6


def is_secret_name(name: str) -> bool:
    """True when a config key names a credential.

    The name is split into word parts (``_``, ``-``, ``.``, spaces and camelCase boundaries) and
    matched against :data:`SECRET_NAME_PARTS`, so ``api_key``, ``hfToken``, ``WANDB_API_KEY`` and
    ``db-password`` are secret while a budget field such as ``max_tokens`` is not.
    """
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", str(name))
    parts = [p.lower() for p in re.split(r"[\s_\-.]+", spaced) if p]
    return any(p in SECRET_NAME_PARTS for p in parts) or "apikey" in str(name).lower()


def _env_values() -> set[str]:
    return {v for v in os.environ.values() if len(v) >= _MIN_ENV_VALUE_LEN}


def _secret_env_values() -> set[str]:
    return {v for k, v in os.environ.items() if is_secret_name(k) and len(v) >= 4}


def config_for_logging(config: Any) -> Any:
    """A plain copy of ``config`` that is safe to log.

    Drops (recursively) every key whose name is a credential (:func:`is_secret_name`), every value
    interpolated from the environment (``${oc.env:...}``, when given an OmegaConf config), every
    string equal to the value of an environment variable, and every string containing the value
    of a credential-named environment variable.
    """
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf is a core dependency
        DictConfig = ListConfig = ()  # type: ignore[assignment]
    if DictConfig and isinstance(config, (DictConfig, ListConfig)):
        raw = OmegaConf.to_container(config, resolve=False)
        resolved = OmegaConf.to_container(config, resolve=True, throw_on_missing=False)
        return _clean(_mask_env(raw, resolved), _env_values(), _secret_env_values())
    return _clean(config, _env_values(), _secret_env_values())


_DROP = object()


def _mask_env(raw: Any, resolved: Any) -> Any:
    """``resolved`` with every entry whose raw form reads an env var replaced by a drop marker."""
    if isinstance(raw, str) and _ENV_INTERPOLATION.search(raw):
        return _DROP
    if isinstance(raw, dict) and isinstance(resolved, dict):
        return {k: _mask_env(raw.get(k), v) for k, v in resolved.items()}
    if isinstance(raw, list) and isinstance(resolved, list):
        return [_mask_env(r, v) for r, v in zip(raw, resolved)]
    return resolved


def _clean(value: Any, env_values: set[str], secret_values: set[str]) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if is_secret_name(str(k)):
                continue
            v = _clean(v, env_values, secret_values)
            if v is not _DROP:
                out[str(k)] = v
        return out
    if isinstance(value, (list, tuple)):
        return [c for c in (_clean(v, env_values, secret_values) for v in value) if c is not _DROP]
    if value is _DROP:
        return _DROP
    if isinstance(value, str) and (value in env_values or any(s in value for s in secret_values)):
        return _DROP
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class Tracker:
    """Tracking interface; this base class is the no-op backend (``backend: none``)."""

    backend = "none"

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record scalar metrics at ``step``."""

    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Record a table of ``rows`` (each aligned with ``columns``)."""

    def log_artifact(self, path: str | Path, type: str, name: str | None = None) -> None:
        """Attach a file or directory as an artifact of kind ``type``."""

    def finish(self) -> None:
        """Flush and close the run."""

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()


class JsonlTracker(Tracker):
    """Local tracking under ``dir``: ``config.json``, ``metrics.jsonl``, ``tables/``, ``artifacts.jsonl``."""

    backend = "jsonl"

    def __init__(self, dir: str | Path, config: Any = None, name: str | None = None):
        self.dir = Path(dir)
        (self.dir / "tables").mkdir(parents=True, exist_ok=True)
        self.name = name
        safe = config_for_logging(config or {})
        (self.dir / "config.json").write_text(json.dumps({"name": name, "config": safe}, indent=2, default=str))

    def _append(self, file: str, record: dict) -> None:
        with open(self.dir / file, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")

    def log(self, metrics, step=None):
        self._append("metrics.jsonl", {"step": step, "time": time.time(), **dict(metrics)})

    def log_table(self, name, columns, rows):
        safe = re.sub(r"[^\w.-]+", "_", name)
        payload = {"name": name, "columns": list(columns), "rows": [list(r) for r in rows]}
        (self.dir / "tables" / f"{safe}.json").write_text(json.dumps(payload, default=str))

    def log_artifact(self, path, type, name=None):
        self._append(
            "artifacts.jsonl", {"path": str(Path(path).resolve()), "type": type, "name": name or Path(path).name}
        )


class WandbTracker(Tracker):
    """A W&B run (``wandb`` is imported here, never at module import)."""

    backend = "wandb"

    def __init__(
        self,
        project: str,
        config: Any = None,
        entity: str | None = None,
        mode: str = "offline",
        dir: str | Path | None = None,
        name: str | None = None,
        group: str | None = None,
        tags: Sequence[str] = (),
        job_type: str | None = None,
    ):
        import wandb

        self._wandb = wandb
        if dir is not None:
            Path(dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project,
            entity=entity,
            mode=mode,
            dir=str(dir) if dir else None,
            name=name,
            group=group,
            tags=list(tags) or None,
            job_type=job_type,
            config=config_for_logging(config or {}),
            reinit="finish_previous",
        )

    def log(self, metrics, step=None):
        self.run.log(dict(metrics), step=step)

    def log_table(self, name, columns, rows):
        self.run.log({name: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows])})

    def log_artifact(self, path, type, name=None):
        path = Path(path)
        artifact = self._wandb.Artifact(re.sub(r"[^\w.-]+", "_", name or path.name), type=type)
        if path.is_dir():
            artifact.add_dir(str(path))
        else:
            artifact.add_file(str(path))
        self.run.log_artifact(artifact)

    def finish(self):
        if self.run is not None:
            self.run.finish()
            self.run = None


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    value = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    return default if value is None else value


def make_tracker(
    logger_cfg: Any, run_config: Any = None, out_dir: str | Path = ".", name: str | None = None
) -> Tracker:
    """Build the tracker that ``logger_cfg`` asks for (see module docstring).

    Args:
        logger_cfg: mapping with ``backend`` (wandb | jsonl | none), and for W&B ``project``,
            ``entity``, ``mode``, ``dir``, ``group``, ``tags``, ``job_type``.
        run_config: the run's full config; sanitized by :func:`config_for_logging` before logging.
        out_dir: run directory; default home of the W&B ``dir`` and of the JSONL files.
        name: run name.
    """
    backend = str(_get(logger_cfg, "backend", "none")).lower()
    out_dir = Path(out_dir)
    if backend == "none":
        return Tracker()
    if backend == "jsonl":
        return JsonlTracker(out_dir / "tracking", run_config, name)
    if backend != "wandb":
        raise ValueError(f"logger.backend {backend!r} is unknown; use wandb, jsonl or none")
    mode = str(_get(logger_cfg, "mode", os.environ.get("WANDB_MODE") or "offline")).lower()
    if mode not in ("offline", "online", "disabled"):
        raise ValueError(f"logger.mode {mode!r} is unknown; use offline, online or disabled")
    if mode == "disabled":
        return JsonlTracker(out_dir / "tracking", run_config, name)
    try:
        import wandb  # noqa: F401
    except ImportError:
        warnings.warn("wandb is not installed; tracking to JSONL files under the run directory instead", stacklevel=2)
        return JsonlTracker(out_dir / "tracking", run_config, name)
    return WandbTracker(
        project=_get(logger_cfg, "project", "graphmem"),
        entity=_get(logger_cfg, "entity"),
        mode=mode,
        dir=_get(logger_cfg, "dir", out_dir),
        name=name or _get(logger_cfg, "name"),
        group=_get(logger_cfg, "group"),
        tags=list(_get(logger_cfg, "tags", [])),
        job_type=_get(logger_cfg, "job_type"),
        config=run_config,
    )
