"""docs/reliability_cases.md renders every reliability_*.json results file as one table each."""

import json

from docgen.reliability_cases import render


def test_every_results_file_becomes_a_section_with_its_rows(tmp_path):
    for topic, case in (("sets", "a | piped case"), ("runs", "out_dir is a file")):
        rows = [{"case": case, "command": "python scripts/x.py", "exit_code": 2, "outcome": "error: boom"}]
        (tmp_path / f"reliability_{topic}.json").write_text(json.dumps({"command": f"make {topic}", "cases": rows}))
    (tmp_path / "other.json").write_text("{}")
    page = render(tmp_path)
    assert page.index("## Run folders and run configs") < page.index("## Sets, caches and checkpoints")
    assert "| a \\| piped case | `python scripts/x.py` | 2 | error: boom |" in page
    assert "Made by `make runs`" in page and page.count("| case | command | exit | outcome |") == 2
