"""LLM-backed graph-building components: an entity extractor and a causal-link judge.

* :class:`LLMEntityExtractor` runs HAGE's structured event extraction (Appendix C.1) on each
  text (entities, topics, relationships, facts, temporal cues, attributed summary) and returns
  the lower-cased entity set per text, the input the entity-edge builder needs. The full
  extraction is available from :meth:`LLMEntityExtractor.extract_events`.
* :class:`LLMCausalJudge` scores, for each ``(earlier, later)`` pair of turns, the confidence
  that the later one is caused by, or responds causally to, the earlier one.

Both validate replies with pydantic; invalid items are discarded and counted by the client, and
a failed call yields an empty set / confidence 0 while the run continues.
"""

from __future__ import annotations

from typing import Any, Sequence

from graphmem.builders.entities import register_entity_extractor
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.llm.prompts import block, make_nonce, render
from graphmem.llm.schemas import CausalJudgement, EventExtraction


def make_client(client: LLMClient | None = None, config: LLMConfig | dict[str, Any] | str | None = None) -> LLMClient:
    """An :class:`LLMClient` from an instance, a config, a mapping or a YAML path (default: local model)."""
    if client is not None:
        return client
    if isinstance(config, LLMConfig):
        return LLMClient(config)
    if isinstance(config, dict):
        return LLMClient(LLMConfig.from_dict(config))
    if isinstance(config, str):
        return LLMClient(LLMConfig.from_yaml(config))
    return LLMClient()


@register_entity_extractor("llm")
class LLMEntityExtractor:
    """Entity sets from HAGE C.1 structured event extraction.

    Args:
        client: the LLM client (default: built from ``config``).
        config: an :class:`LLMConfig`, a mapping or a YAML path (default: the local model).
        max_tokens: completion limit per turn (default: 256).
        min_length: shortest entity string kept, in characters (default: 2).
    """

    name = "llm"
    role = "extractor"

    def __init__(
        self,
        client: LLMClient | None = None,
        config: LLMConfig | dict | str | None = None,
        max_tokens: int = 256,
        min_length: int = 2,
    ) -> None:
        self.client = make_client(client, config)
        self.max_tokens = max_tokens
        self.min_length = min_length

    def messages(self, text: str, speaker: str | None = None, context: str | None = None) -> list[dict[str, str]]:
        """The extraction prompt of one turn (speaker and prior summary are optional)."""
        turn = f"{speaker}: {text}" if speaker else text
        nonce = make_nonce([turn, context or ""])
        context_block = block("context", context, nonce) if context else "(no prior summary)"
        return render(self.role, nonce, turn_block=block("turn", turn, nonce), context_block=context_block)

    def extract_events(
        self,
        texts: Sequence[str],
        speakers: Sequence[str | None] | None = None,
        contexts: Sequence[str | None] | None = None,
    ) -> list[EventExtraction | None]:
        """One validated extraction per text (``None`` where the call failed)."""
        speakers = list(speakers) if speakers is not None else [None] * len(texts)
        contexts = list(contexts) if contexts is not None else [None] * len(texts)
        batch = [self.messages(t, s, c) for t, s, c in zip(texts, speakers, contexts)]
        results = self.client.structured_many(self.role, batch, EventExtraction, max_tokens=self.max_tokens)
        return [r.value for r in results]

    def extract(self, texts: Sequence[str]) -> list[set[str]]:
        """Lower-cased, whitespace-normalised entity strings per text (empty where extraction failed)."""
        out = []
        for event in self.extract_events(texts):
            names = event.entities if event is not None else []
            found = {" ".join(e.split()).lower() for e in names}
            out.append({e for e in found if len(e) >= self.min_length})
        return out


class LLMCausalJudge:
    """Confidence in ``[0, 1]`` that the second turn of a pair is causally linked to the first.

    Args:
        client: the LLM client (default: built from ``config``).
        config: an :class:`LLMConfig`, a mapping or a YAML path (default: the local model).
        max_tokens: completion limit per pair (default: 96).
    """

    role = "causal_judge"

    def __init__(
        self, client: LLMClient | None = None, config: LLMConfig | dict | str | None = None, max_tokens: int = 96
    ) -> None:
        self.client = make_client(client, config)
        self.max_tokens = max_tokens

    def messages(self, first: str, second: str) -> list[dict[str, str]]:
        nonce = make_nonce([first, second])
        return render(
            self.role, nonce, first_block=block("turn", first, nonce), second_block=block("turn", second, nonce)
        )

    def judge(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """One confidence per pair; 0.0 where the call failed or the reply was invalid."""
        batch = [self.messages(a, b) for a, b in pairs]
        results = self.client.structured_many(self.role, batch, CausalJudgement, max_tokens=self.max_tokens)
        return [float(r.value.confidence) if r.value is not None else 0.0 for r in results]
