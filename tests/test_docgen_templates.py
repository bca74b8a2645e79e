"""The page templates of scripts/docgen/templates/: each block is used by its renderer, and ``fill``
refuses a field without a value and a value without a field."""

from __future__ import annotations

import importlib
import re
import string
from pathlib import Path

import pytest
from docgen.sources import TEMPLATES, TemplateError, blocks, fill

DOCGEN = Path(TEMPLATES).parent


def _fields(text: str) -> set[str]:
    return set(string.Template(text).get_identifiers())


def test_every_template_block_is_filled_by_its_renderer():
    templates = sorted(TEMPLATES.glob("*.md"))
    assert templates
    for path in templates:
        source = (DOCGEN / f"{path.stem}.py").read_text(encoding="utf-8")
        for name in blocks(path.stem):
            assert re.search(rf'fill\(\s*PAGE,\s*"{name}"', source), f"{path.name}: block {name!r} is not used"


def test_fill_refuses_a_field_without_a_value_and_a_value_without_a_field():
    text = blocks("policy_gradients")["cost_lead"]
    fields = _fields(text)
    assert "fixed" in fields
    values = dict.fromkeys(fields, 1)
    assert "`1` there" in fill("policy_gradients", "cost_lead", **values)
    del values["fixed"]
    with pytest.raises(TemplateError, match=r"cost_lead.*without a value \['fixed'\]"):
        fill("policy_gradients", "cost_lead", **values)
    with pytest.raises(TemplateError, match=r"without a field \['stray'\]"):
        fill("policy_gradients", "intro", stray=1)
    with pytest.raises(TemplateError, match="no such block"):
        fill("policy_gradients", "absent")


@pytest.mark.parametrize("page", sorted(p.stem for p in TEMPLATES.glob("*.md")))
def test_a_page_renders_its_missing_file_blocks_from_an_empty_results_folder(page: str, tmp_path: Path):
    module = importlib.import_module(f"docgen.{page}")
    text = module.render(tmp_path) if hasattr(module, "render") else module.render_headline(tmp_path)
    assert text.startswith("# " if hasattr(module, "render") else "No headline results yet")
