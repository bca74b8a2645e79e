"""Schema-constrained greedy decoding of a transformers causal LM with llguidance.

A JSON Schema is compiled by llguidance into a grammar over the model's own tokens. At every
step the grammar gives the set ``A_t`` of tokens that keep the output a prefix of some document
the schema accepts (end-of-sequence is in ``A_t`` only once the document is complete), and the
decoder takes

    y_t = argmax_{v in A_t} logits_t[v]

so the reply parses into the schema *whatever the weights*, provided it finishes. Finishing is
what the token limit threatens: a model (a random one certainly) can stay inside a string or a
list until the limit cuts the JSON in half. So the last ``reserve`` tokens of the budget are
spent *closing*: the decoder then takes the first of ``"``, ``}``, ``]``, ``0`` that ``A_t``
admits (close the string, the object, the list; a digit completes a number), and otherwise the
best admitted token (a required key or an enum value being spelled out). Each such step either
ends a value or moves through a finite key/enum spelling, so a document with closed objects
(``additionalProperties: false``) is complete after a few dozen tokens at most; ``close_limit``
extra tokens past ``max_new_tokens`` bound it anyway, and a reply still open then is returned
as it is, for the caller's validation to count.

Tokens the grammar forces (the rest of a key, a ``const``, the only enum value left) are fed in
one forward pass with the sampled token before them, as llguidance's fast-forward allows.

Whitespace between JSON tokens is not allowed (``whitespace_flexible: false``): it costs tokens
and is where greedy small models loop.

Why llguidance (measured by scripts/benchmarks/bench_constrained.py): one 3 MB wheel with no dependencies, a
mask in well under a millisecond per token on a 49k-token vocabulary, every schema feature used here (enum,
const, anyOf/oneOf, maxItems, maxLength, number ranges), and it reads a transformers 5 fast
tokenizer directly.
"""

from __future__ import annotations

import inspect
import json
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

CLOSERS = ('"', "}", "]", "0")
JSON_OPTIONS = {"whitespace_flexible": False, "coerce_one_of": True}


def allowed_tokens(matcher: Any, vocab_size: int) -> torch.Tensor:
    """``[vocab_size]`` bool mask of the tokens an llguidance ``matcher`` admits next (its bitmask unpacked)."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    return torch.from_numpy(bits[:vocab_size].astype(bool))


class SchemaDecoder:
    """Greedy decoding under a JSON Schema for one ``(tokenizer, model)`` pair.

    Args:
        tokenizer: a fast Hugging Face tokenizer (byte-level BPE or similar).
        model: a causal LM whose logits have ``vocab_size`` columns.
        grammar_cache: compiled grammars kept, keyed by the schema (default: 64).
    """

    def __init__(self, tokenizer: Any, model: Any, grammar_cache: int = 64) -> None:
        import llguidance
        import llguidance.hf

        self.ll = llguidance
        self.tokenizer, self.model = tokenizer, model
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.eos_id = int(tokenizer.eos_token_id)
        self.lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=self.vocab_size, eos_token=self.eos_id)
        self.closers = [ids[0] for c in CLOSERS if len(ids := self.lltok.tokenize_str(c)) == 1]
        if len(self.closers) != len(CLOSERS):
            raise ValueError(f"the tokenizer has no single token for each of {CLOSERS}; cannot close JSON replies")
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.2x
        self._grammars: OrderedDict[str, str] = OrderedDict()
        self._grammar_cache = grammar_cache

    # ------------------------------------------------------------------ grammar and masks
    def matcher(self, schema: dict[str, Any]) -> Any:
        """A fresh llguidance matcher for ``schema``; a schema it cannot compile raises ``ValueError``."""
        key = json.dumps(schema, sort_keys=True)
        grammar = self._grammars.pop(key, None)
        if grammar is None:
            grammar = self.ll.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
        self._grammars[key] = grammar
        while len(self._grammars) > self._grammar_cache:
            self._grammars.popitem(last=False)
        matcher = self.ll.LLMatcher(self.lltok, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"JSON schema not supported by the constrained decoder: {matcher.get_error()}")
        return matcher

    def allowed(self, matcher: Any) -> torch.Tensor:
        """``[vocab_size]`` bool mask of the tokens the grammar admits next (:func:`allowed_tokens`)."""
        return allowed_tokens(matcher, self.vocab_size)

    def pick(self, matcher: Any, logits: torch.Tensor, closing: bool) -> int | None:
        """The next token (module docstring); ``None`` when the grammar admits nothing."""
        allowed = self.allowed(matcher)
        if not bool(allowed.any()):
            return None
        if closing:
            for token in self.closers:
                if allowed[token]:
                    return token
        return int(logits[: self.vocab_size].masked_fill(~allowed, float("-inf")).argmax())

    # ------------------------------------------------------------------ decoding
    @torch.inference_mode()
    def decode(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        schema: dict[str, Any] | None = None,
        reserve: int | None = None,
        close_limit: int = 64,
        cache: Any = None,
        cached_len: int = 0,
    ) -> tuple[list[int], Any]:
        """Greedy continuation of ``prompt_ids``: ``(new token ids, KV cache of prompt + reply)``.

        Args:
            prompt_ids: the prompt's token ids.
            max_new_tokens: reply budget; closing starts ``reserve`` tokens before it.
            schema: JSON Schema the reply must satisfy, or ``None`` for free decoding.
            reserve: closing tokens within the budget (default: ``min(24, max_new_tokens // 4)``).
            close_limit: extra tokens past the budget a closing reply may take (default: 64).
            cache: a KV cache whose first ``cached_len`` positions hold ``prompt_ids[:cached_len]``.
            cached_len: how much of the prompt ``cache`` already covers (``< len(prompt_ids)``).
        """
        from transformers import DynamicCache

        matcher = self.matcher(schema) if schema is not None else None
        reserve = min(24, max_new_tokens // 4) if reserve is None else reserve
        limit = max_new_tokens + (close_limit if matcher is not None else 0)
        if cache is None or cached_len <= 0:
            cache, cached_len = DynamicCache(), 0
        elif (extra := cache.get_seq_length() - cached_len) > 0:
            cache.crop(-extra)  # a negative argument removes that many positions (transformers 4.x and 5.x)
        feed = torch.tensor([prompt_ids[cached_len:]], dtype=torch.long)
        new: list[int] = []
        while len(new) < limit:
            logits = self.model(input_ids=feed, **{self.cache_arg: cache}, use_cache=True).logits[0, -1].float()
            if matcher is None:
                token = int(logits.argmax())
            else:
                token = self.pick(matcher, logits, closing=len(new) >= max_new_tokens - reserve)
                if token is None:
                    break
            if token == self.eos_id:
                break
            step = [token]
            if matcher is not None:
                if not matcher.consume_token(token):
                    break
                forced = matcher.compute_ff_tokens()  # tokens the grammar allows no alternative to
                if forced and matcher.consume_tokens(forced):
                    step += forced
            new += step
            if matcher is not None and matcher.is_stopped():
                break
            feed = torch.tensor([step], dtype=torch.long)  # forced tokens share one forward pass
        return new, cache
