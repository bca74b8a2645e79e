"""The docs generator: pages and the README's headline are written from results files, never by hand.

``scripts/make_docs.py --check`` passes on the committed tree, reports a page whose results file
changed, skips a renderer module without ``render``, and names an unreadable results file.
"""

import json
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from docgen.headline import RESULTS, render_headline
from docgen.sources import ResultsFileError

from graphmem.eval.stats import compare_policies, fold_summary

sys.path.insert(0, str(Path(__file__).parent))
from script_loader import load_script  # noqa: E402

make_docs = load_script("make_docs")
README = "# title\n\nintro\n\n<!-- headline:begin -->\nold table\n<!-- headline:end -->\n\nmore\n"


def fake_package(root: Path, name: str) -> None:
    """A renderers' folder: one page from ``value.json``, one helper module without ``render``, a headline."""
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""Renderers for the test."""\n')
    (pkg / "helper.py").write_text("def fmt(v):\n    return f'{v:.2f}'\n")
    (pkg / "page.py").write_text(
        textwrap.dedent(
            f"""
            import json
            from {name}.helper import fmt

            PAGE = "page"

            def render(results_dir):
                value = json.loads((results_dir / "value.json").read_text())["value"]
                return "# page\\n\\n| value |\\n|---:|\\n| " + fmt(value) + " |\\n"
            """
        )
    )
    (pkg / "headline.py").write_text(
        "def render_headline(results_dir):\n    return 'headline ' + (results_dir / 'value.json').read_text().strip()\n"
    )


def args(tmp_path: Path, package: str) -> list[str]:
    pages = (
        str(tmp_path / package)
        if package != "docgen"
        else str(Path(__file__).resolve().parents[1] / "scripts" / "docgen")
    )
    return ["--pages", pages, "--results", str(tmp_path / "results"), "--docs", str(tmp_path / "docs")] + [
        "--readme",
        str(tmp_path / "README.md"),
        "--studies",
        str(tmp_path / "studies"),
    ]


def test_the_committed_pages_and_readme_are_up_to_date(capsys):
    assert make_docs.main(["--check"]) == 0, capsys.readouterr()


def test_a_page_whose_results_file_changed_is_stale_and_a_module_without_render_is_skipped(
    tmp_path, monkeypatch, capsys
):
    fake_package(tmp_path, "docgen_fake")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "value.json").write_text(json.dumps({"value": 0.5}))
    (tmp_path / "README.md").write_text(README)
    assert list(make_docs.renderers(sorted((tmp_path / "docgen_fake").glob("*.py")))) == [
        "page"
    ]  # the others: no render

    assert make_docs.main(["--check", *args(tmp_path, "docgen_fake")]) == 1  # nothing written yet
    assert not (tmp_path / "docs").exists()
    assert make_docs.main(args(tmp_path, "docgen_fake")) == 0
    assert (tmp_path / "docs" / "page.md").read_text().endswith("| 0.50 |\n")
    assert not (tmp_path / "docs" / "helper.md").exists() and not (tmp_path / "docs" / "headline.md").exists()
    readme = (tmp_path / "README.md").read_text()
    assert 'headline {"value": 0.5}' in readme and "old table" not in readme and readme.endswith("more\n")
    assert make_docs.main(["--check", *args(tmp_path, "docgen_fake")]) == 0
    capsys.readouterr()

    (tmp_path / "results" / "value.json").write_text(json.dumps({"value": 0.75}))
    before = (tmp_path / "docs" / "page.md").read_text()
    assert make_docs.main(["--check", *args(tmp_path, "docgen_fake")]) == 1
    out = capsys.readouterr().out
    assert f"out of date: {tmp_path / 'docs' / 'page.md'}" in out and "README.md" in out
    assert (tmp_path / "docs" / "page.md").read_text() == before  # --check writes nothing


def test_a_study_folders_page_modules_are_pages_named_by_their_page(tmp_path, monkeypatch, capsys):
    fake_package(tmp_path, "docgen_fake_too")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "value.json").write_text(json.dumps({"value": 0.5}))
    (tmp_path / "README.md").write_text(README)
    study = tmp_path / "studies" / "probe"
    study.mkdir(parents=True)
    (study / "page.py").write_text("PAGE = 'probe'\n\ndef render(results_dir):\n    return '# probe'\n")
    (study / "page_other.py").write_text("PAGE = 'other'\n\ndef render(results_dir):\n    return '# other'\n")
    (study / "run.py").write_text("def render(results_dir):\n    return '# not a page'\n")
    assert make_docs.main(args(tmp_path, "docgen_fake_too")) == 0
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["other.md", "page.md", "probe.md"]
    assert (tmp_path / "docs" / "probe.md").read_text() == "# probe\n"
    assert (tmp_path / "docs" / "other.md").read_text() == "# other\n"

    (study / "page_other.py").write_text("PAGE = 'page'\n\ndef render(results_dir):\n    return '# other'\n")
    assert make_docs.main(["--check", *args(tmp_path, "docgen_fake_too")]) == 2  # two renderers of docs/page.md
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'page'" in err and len(err.strip().splitlines()) == 1


def test_an_unreadable_results_file_or_missing_markers_is_one_error_line(tmp_path, capsys):
    shutil.copytree(Path(__file__).resolve().parents[1] / "docs" / "results", tmp_path / "results")  # every page's
    (tmp_path / "results" / RESULTS).write_text('{"summary": ')
    (tmp_path / "README.md").write_text(README)
    assert make_docs.main(["--check", *args(tmp_path, "docgen")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and RESULTS in err and len(err.strip().splitlines()) == 1

    (tmp_path / "results" / RESULTS).unlink()
    (tmp_path / "README.md").write_text("# no markers\n")
    assert make_docs.main(["--check", *args(tmp_path, "docgen")]) == 2
    assert "headline:begin" in capsys.readouterr().err


def train_payload(folds: int = 3) -> dict:
    """A results.json shaped as scripts/train.py writes it, from per-question rows of three policies."""
    rng = np.random.default_rng(0)
    rows, records, per_fold = {"router": [], "dense_topk": [], "gnn": []}, [], []
    for k in range(folds):
        fold = {}
        for policy, shift in (("router", 0.2), ("dense_topk", 0.0), ("gnn", 0.1)):
            recall = np.clip(rng.random(20) * 0.5 + shift, 0, 1)
            rows[policy] += [
                {"qid": f"q{k}-{i}", "category": "1", "metrics": {"evidence_recall": float(r)}}
                for i, r in enumerate(recall)
            ]
            fold[policy] = {"evidence_recall": float(recall.mean())}
            records.append({"fold": k, "policy": policy, "test": fold[policy]})
        records[-3]["trainer"] = {"model": {}}  # the router's record of this fold
        per_fold.append(fold)
    paired = compare_policies(rows, "dense_topk", metrics=("evidence_recall",), n_boot=200)
    paired += compare_policies({p: rows[p] for p in ("router", "gnn")}, "gnn", metrics=("evidence_recall",), n_boot=200)
    return (
        {
            "dataset": "locomo",
            "budget": {"max_entries": 6, "top_k_neighbors": 2, "max_hops": 2, "max_nodes": 12, "max_tokens": 2500},
            "folds": list(range(folds)),
            "summary": fold_summary(per_fold, ["evidence_recall"]),
            "questions": {p: len(r) for p, r in rows.items()},
            "paired": [c.to_json() for c in paired],
            "records": records,
            "command": "python scripts/train.py cv.folds=null",
        },
        per_fold,
        paired,
    )


def test_the_headline_shows_every_fold_the_mean_and_std_and_the_trained_walks_paired_differences(tmp_path):
    assert "scripts/train.py" in render_headline(tmp_path)  # no file: the command that makes it
    payload, per_fold, paired = train_payload()
    (tmp_path / RESULTS).write_text(json.dumps(payload))
    text = render_headline(tmp_path)
    router = [line for line in text.splitlines() if line.startswith("| **router**")]
    values = [f["router"]["evidence_recall"] for f in per_fold]
    cells = [f"{v:.3f}" for v in values] + [f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}", "60"]
    assert router == ["| **router** (trained) | " + " | ".join(cells) + " |"]
    assert text.index("| **router**") < text.index("| gnn |") < text.index("| dense_topk |")  # trained, then by mean
    mine = [c for c in paired if c.policy == "router"]
    assert [c.reference for c in mine] == ["dense_topk", "gnn"]
    for c in mine:
        row = f"| router − {c.reference} | {c.mean_diff:+.3f} | [{c.ci_low:+.3f}, {c.ci_high:+.3f}] |"
        assert row in text and f"| {c.n} |" in text
    assert "| gnn − dense_topk" not in text  # only the trained variants' comparisons
    assert "python scripts/train.py cv.folds=null" in text


def test_a_results_file_missing_a_field_is_refused_naming_the_field(tmp_path):
    payload, _, _ = train_payload(folds=2)
    del payload["records"][1]["fold"]
    (tmp_path / RESULTS).write_text(json.dumps(payload))
    with pytest.raises(ResultsFileError, match=r"learned_vs_hybrid_locomo.json: missing field 'records.1.fold'"):
        render_headline(tmp_path)


def test_a_hand_edited_paired_difference_is_refused_and_the_readme_left_alone(tmp_path, capsys):
    results = shutil.copytree(Path(__file__).resolve().parents[1] / "docs" / "results", tmp_path / "results")
    path = results / RESULTS
    payload = json.loads(path.read_text())
    i, c = next((i, c) for i, c in enumerate(payload["paired"]) if c["metric"] == "evidence_recall")
    c["mean_diff"] += 0.2  # the entry's own means still give the old difference
    path.write_text(json.dumps(payload))
    (tmp_path / "README.md").write_text(README)
    assert make_docs.main(args(tmp_path, "docgen")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: field 'paired[{i}].mean_diff' is ") and err.count("\n") == 1, err
    assert "but the entry's own means give" in err and (tmp_path / "README.md").read_text() == README
    payload["provenance"] = {"finished": True, "runs": [{"finished": True}, {"finished": False}]}
    c["mean_diff"] -= 0.2
    path.write_text(json.dumps(payload))
    assert make_docs.main(args(tmp_path, "docgen")) == 2
    assert "records a run that did not finish (runs [1])" in capsys.readouterr().err
