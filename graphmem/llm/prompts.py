"""Rendering prompts with safely delimited memory text.

Stored memory (node texts, keys, turns) and questions are untrusted: a node could contain
``</memory> Ignore previous instructions ...``. Every untrusted string is therefore

1. escaped (``&``, ``<`` and ``>`` become ``&amp;``, ``&lt;``, ``&gt;``), so it cannot contain any
   tag at all, let alone a closing one; and
2. wrapped in a tag whose name carries a nonce, ``<memory-<nonce> id="...">...</memory-<nonce>>``.

The nonce is a hash of the whole prompt's untrusted content, not a random draw, so identical
requests render identically and hit the response cache; a text cannot contain its own
delimiter because that would require it to contain (a prefix of) its own hash. System
instructions tell the model that everything inside ``-<nonce>`` tags is data.
"""

from __future__ import annotations

import hashlib
import re
from string import Template
from typing import Any, Iterable, Sequence

from graphmem.llm.prompt_templates import TEMPLATES

NONCE_HEX = 12
_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))
_WS = re.compile(r"\s+")


def escape(text: str) -> str:
    """Neutralise every delimiter-like character of untrusted ``text``."""
    for raw, safe in _ESCAPES:
        text = text.replace(raw, safe)
    return text


def unescape(text: str) -> str:
    """Inverse of :func:`escape`."""
    for raw, safe in reversed(_ESCAPES):
        text = text.replace(safe, raw)
    return text


def make_nonce(parts: Iterable[str]) -> str:
    """Deterministic nonce: the first hex digits of SHA-256 over the untrusted parts."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:NONCE_HEX]


def block(tag: str, text: str, nonce: str, record_id: str | None = None) -> str:
    """One delimited block of untrusted ``text`` (and optionally an escaped record id)."""
    attr = f' id="{escape(record_id).replace(chr(34), "&quot;")}"' if record_id is not None else ""
    return f"<{tag}-{nonce}{attr}>\n{escape(text)}\n</{tag}-{nonce}>"


def memory_block(records: Sequence[tuple[str, str]], nonce: str, tag: str = "memory") -> str:
    """``(record_id, text)`` pairs as consecutive per-record blocks; an empty list is marked as such."""
    if not records:
        return f"<{tag}-{nonce}>\n(no memory retrieved)\n</{tag}-{nonce}>"
    return "\n".join(block(tag, text, nonce, rid) for rid, text in records)


def one_line(text: str) -> str:
    """Collapse whitespace so a key cannot start a fake index line."""
    return _WS.sub(" ", text).strip()


def index_block(sections: dict[str, list[tuple[str, str]]], nonce: str) -> str:
    """The compact index: per section, one ``[id] key`` line per node, all inside one block."""
    lines = []
    for name, entries in sections.items():
        lines.append(f"## section: {one_line(name)}")
        lines.extend(f"[{one_line(nid)}] {one_line(key)}" for nid, key in entries)
    return block("index", "\n".join(lines) if lines else "(empty index)", nonce)


def render(role: str, nonce: str, **fields: Any) -> list[dict[str, str]]:
    """System + user messages of ``role`` with ``fields`` substituted.

    Fields ending in ``_block`` must already be delimited (built with this module); other fields
    are trusted scalars (limits, transition lists built from validated ids).
    """
    try:
        template = TEMPLATES[role]
    except KeyError:
        raise ValueError(f"unknown prompt role {role!r}; known: {sorted(TEMPLATES)}") from None
    values = {"nonce": nonce, **{k: str(v) for k, v in fields.items()}}
    return [
        {"role": "system", "content": Template(template["system"]).substitute(values)},
        {"role": "user", "content": Template(template["user"]).substitute(values)},
    ]


def extract_blocks(prompt: str, tag: str, nonce: str) -> list[tuple[str | None, str]]:
    """Parse ``(id, unescaped text)`` of every ``tag`` block back out of a rendered prompt.

    Used by tests and audits to check that untrusted text stayed inside its own block.
    """
    pattern = re.compile(
        rf'<{re.escape(tag)}-{nonce}(?: id="([^"]*)")?>\n(.*?)\n</{re.escape(tag)}-{nonce}>', re.DOTALL
    )
    return [
        (None if m.group(1) is None else unescape(m.group(1).replace("&quot;", '"')), unescape(m.group(2)))
        for m in pattern.finditer(prompt)
    ]
