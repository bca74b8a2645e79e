"""Sentence splitting for passages that come without sentences (MuSiQue).

The splitter is pySBD (rule-based sentence boundary disambiguation, Sadvilkar & Neumann 2020),
pinned in ``pyproject.toml``. It loads no model and makes no download. Measured against HotpotQA's
own sentence segmentation (2,986 distinct paragraphs of the two HotpotQA files, 12,675
sentences), its boundaries had precision 0.989 and recall 0.967; syntok 1.4.4 had 0.973 / 0.972
and spaCy 3.8's rule-based ``sentencizer`` 0.963 / 0.970. pySBD makes the fewest false splits,
which would cut a fact in two; it is also the slowest of the three, so splits are cached per text.

pySBD's cost grows faster than the text (it locates every sentence by a search from the start of
the text), so a text longer than :data:`WHOLE_TEXT` characters is split window by window: pySBD
segments the next :data:`WINDOW` characters, every sentence but the window's last (which the
window's end may cut) is kept, and the next window starts where that last sentence starts. The
cost is then linear in the text. A window holding no complete sentence is cut at its last space
(or at its end when it has none). Texts up to :data:`WHOLE_TEXT` characters, every passage of the
datasets, are segmented whole, as before.
"""

from __future__ import annotations

from functools import lru_cache

SPLITTER = "pysbd-0.3.4-en"
WHOLE_TEXT = 10_000
"""Longest text (characters) pySBD segments in one call; longer ones go window by window."""
WINDOW = 2_000
"""Characters pySBD segments at a time in a text longer than :data:`WHOLE_TEXT`."""


@lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    # char_span=True: the same sentences as char_span=False (pySBD returns the spans' texts then), with offsets
    return pysbd.Segmenter(language="en", clean=False, char_span=True)


@lru_cache(maxsize=1 << 16)
def split_sentences(text: str) -> tuple[str, ...]:
    """The sentences of ``text``, stripped, in order; empty pieces are dropped (``()`` for a blank text)."""
    if not text.strip():
        return ()
    pieces = [s.sent for s in _segmenter().segment(text)] if len(text) <= WHOLE_TEXT else _windowed(text)
    return tuple(s.strip() for s in pieces if s.strip())


def _windowed(text: str) -> list[str]:
    """pySBD's sentences of a long ``text``, :data:`WINDOW` characters at a time (module docstring)."""
    out, pos = [], 0
    while pos < len(text):
        window = text[pos : pos + WINDOW]
        spans = _segmenter().segment(window)
        if pos + WINDOW >= len(text):
            out.extend(s.sent for s in spans)
            break
        if len(spans) > 1 and spans[-2].end > 0:
            out.extend(s.sent for s in spans[:-1])
            pos += spans[-2].end
            continue
        cut = window.rfind(" ") + 1 or len(window)  # no complete sentence in the window
        out.append(window[:cut])
        pos += cut
    return out
