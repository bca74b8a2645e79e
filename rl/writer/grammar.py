"""Grammar-constrained sampling of the writer's triples (llguidance), for GRPO rollouts and greedy rewrites.

A small LM asked for triples over passages tends to copy its prompt (``[F1] The House on the Dune ...``), and a
rollout that is not a triple earns no task reward, so GRPO learns format instead of content. Under the grammar
of :func:`triple_regex` every completion is a sequence of lines

    (head | relation | tail) [Fi]        i in 1 .. k

joined by newlines, then the end-of-sequence token; at step ``t`` the processor masks the logits of every token
outside the set ``A_t`` that keeps the text a prefix of such a sequence (``logits_t[v] = -inf`` for ``v`` not in
``A_t``), so greedy decoding takes ``argmax_{v in A_t}`` and sampling draws from the softmax renormalised over
``A_t``. What the writer chooses — which entities, which relation, which fragment — stays the model's; only the
syntax is fixed. A completion can still be cut by the token limit inside a line (:mod:`rl.writer.format`).

llguidance is the engine already used for the JSON replies of :mod:`graphmem.llm.constrained`.
"""

from __future__ import annotations

import functools

import torch

from graphmem.llm.constrained import allowed_tokens

SLOT_CHARS = 32
"""most characters of a head, relation or tail under the grammar"""


LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""the characters ``str.splitlines`` breaks at: no slot may hold one, or its line would split in two"""


def triple_regex(k: int, slot_chars: int = SLOT_CHARS) -> str:
    """The regex of one or more anchored triple lines citing ``F1 .. Fk`` (module docstring).

    A slot starts with a character that is not whitespace, ``|`` or ``( ) [ ]``, as
    :data:`rl.writer.format.TRIPLE_RE` requires, holds no line break (:data:`LINE_BREAKS`) and at most
    ``slot_chars`` characters."""
    if k < 1:
        raise ValueError(f"a window needs at least one fragment, got k = {k}")
    slot = rf"[^|()\[\]\s{LINE_BREAKS}][^|()\[\]{LINE_BREAKS}]{{0,{slot_chars - 1}}}"
    label = "F(" + "|".join(str(i) for i in range(k, 0, -1)) + ")"
    line = rf"\({slot} \| {slot} \| {slot}\) \[{label}\]"
    return rf"{line}(\n{line})*"


class TripleGrammar:
    """A transformers logits processor: the rows of one ``generate`` call decode under :func:`triple_regex`.

    It is stateful over one ``generate`` call: :meth:`reset` before each (as :func:`constrain_generate` does), then
    its first step opens one matcher per row and every later step feeds each row's last token to its matcher. A
    row whose matcher has stopped (its text complete and the end token taken) or failed is left unmasked, as
    ``generate`` pads finished rows whatever their scores.

    Args:
        tokenizer: the writer's fast tokenizer.
        vocab_size: columns of the model's logits.
        k: fragments per window (labels ``F1 .. Fk``).
        rows_k: the fragments of each row's window when they differ (a graph's last window is shorter); used
            by a call with that many rows, else every row cites ``F1 .. Fk``. It may be reset between calls, so
            one processor (one llguidance tokenizer) serves every batch.
    """

    def __init__(
        self, tokenizer, vocab_size: int, k: int, slot_chars: int = SLOT_CHARS, rows_k: list[int] | None = None
    ) -> None:
        import llguidance
        import llguidance.hf

        self.ll = llguidance
        self.vocab_size = int(vocab_size)
        self.lltok = llguidance.hf.from_tokenizer(
            tokenizer, n_vocab=self.vocab_size, eos_token=int(tokenizer.eos_token_id)
        )
        self.k, self.slot_chars, self.rows_k = k, slot_chars, rows_k
        self._grammars: dict[int, str] = {}
        self.matchers: list | None = None

    def reset(self) -> None:
        """Forget the matchers: the next step starts a new ``generate`` call."""
        self.matchers = None

    def _open(self, rows: int) -> None:
        ks = self.rows_k if self.rows_k is not None and len(self.rows_k) == rows else [self.k] * rows
        self.matchers = []
        for k in ks:
            if k not in self._grammars:
                self._grammars[k] = self.ll.LLMatcher.grammar_from_regex(triple_regex(k, self.slot_chars))
            self.matchers.append(self.ll.LLMatcher(self.lltok, self._grammars[k], log_level=0))
            if self.matchers[-1].is_error():
                raise ValueError(f"triple grammar rejected by llguidance: {self.matchers[-1].get_error()}")

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows = int(input_ids.shape[0])
        if self.matchers is None or len(self.matchers) != rows:
            self._open(rows)
        else:
            for row, matcher in enumerate(self.matchers):
                if not (matcher.is_stopped() or matcher.is_error()):
                    matcher.consume_token(int(input_ids[row, -1]))
        live = [r for r, m in enumerate(self.matchers) if not (m.is_stopped() or m.is_error())]
        if live:
            width = min(scores.shape[1], self.vocab_size)
            blocked = torch.ones(len(live), scores.shape[1], dtype=torch.bool)
            blocked[:, :width] = ~torch.stack([allowed_tokens(self.matchers[r], self.vocab_size)[:width] for r in live])
            scores[live] = scores[live].masked_fill(blocked, float("-inf"))
        return scores


def make_grammar(model, tokenizer, k: int, rows_k: list[int] | None = None) -> TripleGrammar:
    """:class:`TripleGrammar` for ``model``'s vocabulary and windows of ``k`` fragments (``rows_k``: per row)."""
    return TripleGrammar(tokenizer, int(model.get_output_embeddings().weight.shape[0]), k, rows_k=rows_k)


def constrain_generate(model, grammar: TripleGrammar):
    """Make every ``model.generate`` call (as GRPO's trainer makes them) decode under ``grammar``, reset before
    each call; returns a function that restores the plain ``generate``."""
    from transformers import LogitsProcessorList

    plain = functools.partial(type(model).generate, model)

    def generate(*args, **kwargs):
        grammar.reset()
        return plain(*args, logits_processor=LogitsProcessorList([grammar]), **kwargs)

    model.generate = generate

    def restore() -> None:
        del model.generate

    return restore
