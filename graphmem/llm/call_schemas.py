"""Per-call JSON Schemas: the output model of a role, narrowed to what this call can accept.

The pydantic models of :mod:`graphmem.llm.schemas` say what a *well-typed* reply is; validation
then drops ids that are not loaded, transitions not in the trace and so on. For one call those
sets are known before the call, so the schema sent with it (litellm ``response_format``, and
the grammar of the local constrained decoder) names them:

* retriever (GraphMemory B.2): ``sections`` from the index's section names, ``entry_ids`` from its
  node ids, at most ``max_sections`` / ``max_entries`` of each;
* generator (eq. 20): the ``trace`` lists two to six loaded node ids (fewer when fewer are
  loaded): the trace is the only signal the Reflector can label;
* reflector (eq. 21): the ``k``-th transition is the ``k``-th listed ``(source, target)`` pair
  (``prefixItems`` of ``const`` pairs), with a label of the three and ``0 <= confidence <= 1``;
* curator: ``remove_edge`` names loaded nodes; ``add_edge`` names loaded nodes or ``new:k`` for the
  ``k``-th node added in the same reply, with a relation of the graph; ``revise_node`` names a
  loaded lesson node or ``new:k``.

Every schema here accepts a subset of what its pydantic model accepts (the tests check the
decoder's output against the model), and all strings and lists are bounded so a reply can be
closed within its token budget.
"""

from __future__ import annotations

from typing import Any, Sequence

from graphmem.llm.schemas import MAX_CHARS

LABELS = ["helpful", "harmful", "neutral"]


def _string(max_chars: int = MAX_CHARS, min_chars: int = 0) -> dict[str, Any]:
    return {"type": "string", "minLength": min_chars, "maxLength": max_chars}


def _one_of(values: Sequence[str], max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """A string from ``values`` (any bounded non-empty string when there is none to name)."""
    values = list(dict.fromkeys(values))
    return {"type": "string", "enum": values} if values else _string(max_chars, 1)


def _array(items: dict[str, Any], max_items: int) -> dict[str, Any]:
    return {"type": "array", "items": items, "maxItems": max(0, int(max_items))}


def _object(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def entry_selection_schema(
    sections: Sequence[str], node_ids: Sequence[str], max_sections: int, max_entries: int
) -> dict[str, Any]:
    """Retriever reply (``EntrySelection``) naming only sections and ids of the compact index."""
    return _object(
        {
            "sections": _array(_one_of(sections), max_sections if sections else 0),
            "entry_ids": _array(_one_of(node_ids), max_entries if node_ids else 0),
        },
        ["sections", "entry_ids"],
    )


def generation_schema(
    loaded_ids: Sequence[str], max_answer_chars: int = 100, min_trace: int = 2, max_trace: int = 6
) -> dict[str, Any]:
    """Generator reply (``Generation``): an answer and a trace of ``min(min_trace, #loaded)`` to
    ``max_trace`` loaded ids (eq. 20's trace is the only signal the Reflector can label)."""
    loaded = list(dict.fromkeys(loaded_ids))
    trace = _array(_one_of(loaded), min(max_trace, len(loaded))) | {"minItems": min(min_trace, len(loaded))}
    return _object({"answer": _string(max_answer_chars), "trace": trace}, ["answer", "trace"])


def reflection_schema(pairs: Sequence[tuple[str, str]], max_critique_chars: int = 120) -> dict[str, Any]:
    """Reflector reply (``Reflection``): labels of the listed transitions only, in the listed
    order, each at most once (item ``k`` is pair ``k``; the reply may stop early)."""
    pairs = list(dict.fromkeys(pairs))
    items = [
        _object(
            {
                "source": {"type": "string", "const": a},
                "target": {"type": "string", "const": b},
                "label": {"type": "string", "enum": LABELS},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            },
            ["source", "target", "label", "confidence"],
        )
        for a, b in pairs
    ]
    transitions = {"type": "array", "prefixItems": items, "items": False, "maxItems": len(items)}
    return _object({"critique": _string(max_critique_chars), "transitions": transitions}, ["critique", "transitions"])


def curation_schema(
    local_ids: Sequence[str],
    relations: Sequence[str],
    lesson_ids: Sequence[str] = (),
    max_operations: int = 2,
    max_key_chars: int = 40,
    max_text_chars: int = 120,
) -> dict[str, Any]:
    """Curator reply (``Curation``): edges among loaded nodes and nodes added by the same reply;
    revisions of loaded lessons (``lesson_ids``) and of nodes added by the same reply."""
    local = list(dict.fromkeys(local_ids))
    new = [f"new:{k}" for k in range(max_operations)]
    ends = local + new
    ops = [
        _object(
            {
                "op": {"type": "string", "const": "add_node"},
                "key": _string(max_key_chars, 1),
                "text": _string(max_text_chars, 1),
            },
            ["op", "key", "text"],
        ),
        _object(
            {"op": {"type": "string", "const": "add_edge"}, "source": _one_of(ends), "target": _one_of(ends)}
            | ({"relation": {"type": "string", "enum": list(relations)}} if relations else {}),
            ["op", "source", "target"] + (["relation"] if relations else []),
        ),
    ]
    ops.append(
        _object(
            {
                "op": {"type": "string", "const": "revise_node"},
                "node_id": _one_of(list(lesson_ids) + new),
                "text": _string(max_text_chars, 1),
            },
            ["op", "node_id", "text"],
        )
    )
    if local:
        ops += [
            _object(
                {"op": {"type": "string", "const": "remove_edge"}, "source": _one_of(local), "target": _one_of(local)},
                ["op", "source", "target"],
            ),
        ]
    return _object({"operations": _array({"anyOf": ops}, max_operations)}, ["operations"])
