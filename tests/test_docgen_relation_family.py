"""docs/relation_family.md renders the results file's tables and words each variant's comparison from its CI."""

import json
from statistics import stdev

import pytest
from docgen.sources import ResultsFileError

from tests.script_loader import load_study

relation_family = load_study("relation_family", "page")


def comparison(other, first, second, lo, hi, n=400):
    return {
        "policy": "full",
        "reference": other,
        "n": n,
        "mean": first,
        "reference_mean": second,
        "mean_diff": first - second,
        "ci_low": lo,
        "ci_high": hi,
        "p_value": 0.5 if lo < 0 < hi else 1e-6,
    }


def results():
    return {
        "command": "python scripts/studies/relation_family/run.py 'seeds=[0,1]'",
        "family": {"num_graphs": 20, "events": 24, "questions_per_graph": 10, "dim": 32, "intent_strength": 0.5},
        "seeds": [0, 1],
        "budget": {"max_entries": 1, "top_k_neighbors": 1, "max_hops": 1, "max_nodes": 2},
        "variants": {"full": {}, "no_intent": {"model": {"intent": "uniform"}}},
        "reference": "full",
        "per_seed": {"full": [0.9, 0.8], "no_intent": [0.85, 0.75], "bm25": [0.05, 0.07]},
        "summary": {
            "full": {"mean": 0.85, "std": stdev([0.9, 0.8]), "folds": 2},
            "no_intent": {"mean": 0.8, "std": stdev([0.85, 0.75]), "folds": 2},
            "bm25": {"mean": 0.06, "std": stdev([0.05, 0.07]), "folds": 2},
        },
        "by_kind": {"full": {"next": 0.9, "cause": 0.8}, "no_intent": {"next": 0.7, "cause": 0.9}, "bm25": {}},
        "kind_questions": {"next": 30, "cause": 10},
        "questions": {"full": 400, "no_intent": 400, "bm25": 400},
        "paired": [comparison("no_intent", 0.85, 0.8, -0.01, 0.11), comparison("bm25", 0.85, 0.06, 0.7, 0.85)],
        "splits": [{"seed": s, "train": 12, "val": 4, "test": 4} | {"train_questions": 120, "val_questions": 40,
                   "test_questions": 40} for s in (0, 1)],
        "neighbour_cosine": [
            {"seed": 0, "gold_mean": 0.41, "gold_std": 0.1, "other_mean": 0.42, "other_std": 0.1, "gold_n": 40,
             "other_n": 160}
        ],
        "intent_readout": [{"seed": 0, "kind_accuracy": 0.9, "relation_accuracy": 0.95, "n": 40}],
        "wall_s": 12.0,
    }  # fmt: skip


def test_render_tables_and_verdicts(tmp_path):
    (tmp_path / "relation_family.json").write_text(json.dumps(results()))
    page = relation_family.render(tmp_path)
    assert "python scripts/studies/relation_family/run.py 'seeds=[0,1]'" in page
    assert "| **full** | 0.900 | 0.800 | 0.850 ± 0.071 | 400 |" in page
    assert "| bm25 | 0.050 | 0.070 | 0.060 ± 0.014 | 400 |" in page
    assert "| full − no_intent | 0.850 | 0.800 | +0.050 | [-0.010, +0.110] | 0.5000 | 400 |" in page
    assert "| full − bm25 | 0.850 | 0.060 | +0.790 | [+0.700, +0.850] | <1e-4 | 400 |" in page
    assert "| policy | next (30) | cause (10) |" in page and "| bm25 | — | — |" in page
    assert "`full` against `no_intent`: Δ = +0.050 [-0.010, +0.110], n = 400: no difference resolved" in page
    assert "`full` against `bm25`" not in page  # verdict lines are for the variants only
    assert "gold neighbour 0.410 ± 0.100 (n = 40)" in page
    assert "for 0.900 of the test questions" in page and "between 0.800 and 0.900 per kind" in page
    assert "**Learned edge features" not in page  # no such variant in this file


def test_render_the_untyped_section_when_its_file_exists(tmp_path):
    (tmp_path / "relation_family.json").write_text(json.dumps(results()))
    assert "## Untyped links" not in relation_family.render(tmp_path)
    untyped = results() | {"command": "python scripts/studies/relation_family/run.py family.typed=false"}
    untyped["family"] = {**untyped["family"], "typed": False, "link_strength": 2.5}
    untyped["per_seed"] = {**untyped["per_seed"], "full": [0.6, 0.7]}
    untyped["summary"] = {**untyped["summary"], "full": {"mean": 0.65, "std": stdev([0.6, 0.7]), "folds": 2}}
    (tmp_path / "relation_family_untyped.json").write_text(json.dumps(untyped))
    page = relation_family.render(tmp_path)
    section = page[page.index("## Untyped links") :]
    assert "python scripts/studies/relation_family/run.py family.typed=false" in section
    assert (
        "The link strength (2.5)" in section
        and "### Evidence recall on the test conversations" in section
        and "| **full** | 0.600 | 0.700 |" in section
    )


def test_render_without_results_and_with_a_missing_field(tmp_path):
    assert "Not measured yet" in relation_family.render(tmp_path)
    broken = results()
    del broken["per_seed"]
    (tmp_path / "relation_family.json").write_text(json.dumps(broken))
    with pytest.raises(ResultsFileError, match="per_seed"):
        relation_family.render(tmp_path)
