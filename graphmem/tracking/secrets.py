"""Scrubbing run configs before they are logged: no credential, no environment value, ever.

:func:`config_for_logging` drops keys that name credentials and values that come from
environment variables; every tracking backend logs configs through it. :func:`redact` masks
secrets inside free text (LLM replies and error messages) before anything stores or logs it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

SECRET_NAME_PARTS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials"})
_ENV_INTERPOLATION = re.compile(r"\$\{\s*(oc\.env|env)\s*:")
_MIN_ENV_VALUE_LEN = 6
_MIN_REDACTED_LEN = 8  # shorter credential-named values ("true", "1234") would mask ordinary words
REDACTED = "***"


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


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every occurrence of a secret replaced by :data:`REDACTED`.

    The secrets are ``secrets`` (e.g. the value of the variable an ``api_key_env`` names; empty
    and ``None`` entries are skipped) and the value of every credential-named environment variable
    (:func:`is_secret_name`) of at least 8 characters. Longer secrets are replaced first, so a key
    that contains another is masked whole.
    """
    values = {s for s in secrets if s} | {v for v in _secret_env_values() if len(v) >= _MIN_REDACTED_LEN}
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


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
