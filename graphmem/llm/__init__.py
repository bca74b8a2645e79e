"""LLM access for graphmem: one client (litellm), a local offline model, and LLM-backed components.

Importing this package does not import litellm or transformers; both load on first use, so
training and evaluation from saved graphs run where they are not installed.

* :class:`LLMClient` / :class:`LLMConfig` (``client``): retries, cache, concurrency, accounting.
* ``local``: SmolLM2-135M-Instruct registered as the litellm custom provider ``local/``.
* ``prompts`` / ``prompt_templates``: per-role templates and nonce-delimited memory blocks.
* ``schemas``: pydantic output models and the lenient parser.
* ``extractors``: :class:`LLMEntityExtractor` (entity extractor ``"llm"``), :class:`LLMCausalJudge`.
* ``retriever``: :class:`LLMEntryRetriever` (entry selector ``"llm"``, GraphMemory B.2).
"""

from __future__ import annotations

from importlib import import_module

from graphmem.llm.client import Completion, LLMCallError, LLMClient, LLMConfig
from graphmem.llm.local import LOCAL_MODEL

_LAZY = {
    "LLMEntityExtractor": "graphmem.llm.extractors",
    "LLMCausalJudge": "graphmem.llm.extractors",
    "LLMEntryRetriever": "graphmem.llm.retriever",
}

__all__ = ["LOCAL_MODEL", "Completion", "LLMCallError", "LLMClient", "LLMConfig", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'graphmem.llm' has no attribute {name!r}")
