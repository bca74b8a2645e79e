"""The live memory served over HTTP: :func:`make_app` (FastAPI; ``scripts/serve.py`` runs it under uvicorn) and
:class:`MemoryClient`, a small client with :class:`graphmem.Memory`'s methods (``docs/serving_memory.md``).

The client needs only the standard library; the app is imported on first use (FastAPI is part of the ``full``
install).
"""

from graphmem.serve.client import MemoryClient, MemoryServerError

__all__ = ["MemoryClient", "MemoryServerError", "ServeLimits", "make_app"]


def __getattr__(name: str):
    if name in ("make_app", "ServeLimits"):
        from graphmem.serve import app  # lazily: FastAPI is part of the full install

        return getattr(app, name)
    raise AttributeError(f"module 'graphmem.serve' has no attribute {name!r}")
