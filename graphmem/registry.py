"""Name -> factory registries (policies, entry selectors, entity extractors) behind Hydra names."""

from __future__ import annotations

import importlib
from typing import Any, Callable


class Registry(dict):
    """A dict of factories filled by the :meth:`register` class decorator.

    Args:
        kind: what is registered, used in error messages (e.g. ``"policy"``).
        lazy: names whose module is imported on first use, ``{name: module}`` (default: none).
    """

    def __init__(self, kind: str, lazy: dict[str, str] | None = None):
        super().__init__()
        self.kind, self.lazy = kind, dict(lazy or {})

    def register(self, name: str) -> Callable[[type], type]:
        """Class decorator: make the class selectable as ``name`` (and set ``cls.name``)."""

        def wrap(cls: type) -> type:
            cls.name = name
            self[name] = cls
            return cls

        return wrap

    def make(self, name: str, **kwargs: Any) -> Any:
        """Instantiate ``name``; an unknown name raises ``ValueError`` listing the registered ones."""
        if name not in self and name in self.lazy:
            importlib.import_module(self.lazy[name])
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {sorted(self)}")
        return self[name](**kwargs)
