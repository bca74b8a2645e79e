"""Name -> class registries (policies, entry selectors, entity extractors) behind Hydra names.

A class is registered with the :meth:`Registry.register` decorator when its module is imported;
that is the one registration mechanism. Where a name is not registered, a dotted path
``package.module.Class`` names a class directly (the form of Hydra's ``_target_``), so a user's
class in their own package plugs in without editing this one. Keyword arguments, e.g. a YAML
config, are checked against the class's constructor signature before it is called.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Mapping


class Registry(dict):
    """A dict of classes filled by the :meth:`register` class decorator.

    Args:
        kind: what is registered, used in error messages (e.g. ``"policy"``).
        lazy: names whose module is imported on first use, ``{name: module}`` (default: none).
        base: a class every class named by a dotted path must derive from (default: any).
    """

    def __init__(self, kind: str, lazy: dict[str, str] | None = None, base: type | None = None):
        super().__init__()
        self.kind, self.lazy, self.base = kind, dict(lazy or {}), base

    def register(self, name: str) -> Callable[[type], type]:
        """Class decorator: make the class selectable as ``name`` (and set ``cls.name``)."""

        def wrap(cls: type) -> type:
            cls.name = name
            self[name] = cls
            return cls

        return wrap

    def resolve(self, name: str) -> type:
        """The class registered as ``name`` (importing a lazy module first), or the class at the
        dotted path ``name``; anything else raises ``ValueError`` listing the registered names."""
        if name not in self and name in self.lazy:
            importlib.import_module(self.lazy[name])
        if name in self:
            return self[name]
        module, _, attr = name.rpartition(".")
        if module:
            try:
                cls = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as err:
                raise ValueError(f"unknown {self.kind} {name!r}: cannot import it ({err})") from None
            if not (isinstance(cls, type) and (self.base is None or issubclass(cls, self.base))):
                raise ValueError(f"{name!r} is not a {self.kind} class")
            return cls
        raise ValueError(f"unknown {self.kind} {name!r}; registered: {sorted(self)}")

    def check(self, name: str, kwargs: Mapping[str, Any]) -> type:
        """The class of ``name``; raises ``ValueError`` naming the first key of ``kwargs`` that its
        constructor does not take, and the parameters it does take."""
        cls = self.resolve(name)
        params = inspect.signature(cls).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return cls
        unknown = [k for k in kwargs if k not in params]
        if unknown:
            raise ValueError(f"{self.kind} {name!r} has no parameter {unknown[0]!r}; its parameters: {list(params)}")
        return cls

    def make(self, name: str, **kwargs: Any) -> Any:
        """Instantiate ``name`` with ``kwargs``, checked first with :meth:`check`."""
        return self.check(name, kwargs)(**kwargs)
