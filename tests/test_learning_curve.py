"""The learning-curve study's smoke configuration: two shares of the conversation walk's training questions, each
run's checkpoint measured on its validation conversations, the curve's statistics, plot and page."""

import pytest
from script_loader import load_script, load_study

from graphmem.core.errors import InputError
from tests.script_loader import compose


def in_process(cmd):
    """Run ``python scripts/train.py <overrides>`` in this process (the study's subprocess, faster)."""
    assert cmd[1].endswith("scripts/train.py")
    module = load_script("train")
    module.run(compose("train", cmd[2:]))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("learning_curve")
    study = load_study("learning_curve", "run")
    over = [
        "experiment=smoke",
        f"out_dir={tmp / 'runs'}",
        f"results={tmp / 'learning_curve.json'}",
        f"plot={tmp / 'learning_curve.png'}",
        f"extra=['graphset_dir={tmp / 'sets'}']",
    ]
    return tmp, study.run(compose("learning_curve", over), runner=in_process)


def test_shares_are_nested_measured_and_fitted(smoke):
    tmp, payload = smoke
    curve = payload["curves"]["smoke"]
    half, full = curve["points"]
    assert half["fraction"] == 0.5 and full["fraction"] == 1.0
    assert 0 < half["train_questions"] < full["train_questions"]
    stats = curve["stats"]["val evidence_recall"]
    assert [s["fraction"] for s in stats["shares"]] == [0.5, 1.0] and stats["questions"] > 0
    assert stats["last_doubling"]["n"] == stats["questions"] and stats["at_the_end"] in ("rising", "flat", "falling")
    assert stats["slope_ci95"][0] <= stats["slope_per_doubling"] <= stats["slope_ci95"][1]
    assert "val passage_recall_5" in curve["stats"] and (tmp / "learning_curve.png").is_file()
    page = load_study("learning_curve", "page").render(tmp)
    assert "smoke" in page and "per doubling" in page and curve["seeds"] == [0]
    assert set(payload["not_run"]) == {"walk_passages", "gnn_passages", "walk_conversations"} and all(
        p["train_wall_s"] > 0 for p in curve["points"]
    )


def test_bad_shares_and_curves_are_refused_before_training(tmp_path):
    study = load_study("learning_curve", "run")
    cases = (
        (["fractions=[0.5,0.25]"], "increasing"),
        (["curves=[nope]"], "not one of curve_defs"),
        (["+curve_defs.walk_passages.seeds=[1,1]"], r"curve_defs.walk_passages.seeds must be distinct"),
    )
    for over, words in cases:
        with pytest.raises(InputError, match=words):
            study.run(compose("learning_curve", [f"out_dir={tmp_path}", *over]), runner=None)
