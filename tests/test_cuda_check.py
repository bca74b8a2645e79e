"""The prepared CUDA check script, as far as it runs without a GPU: its plan, its refusal, its comparer."""

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from script_loader import load_script  # noqa: E402

cuda_check = load_script("benchmarks/cuda_check")


def test_dry_run_plans_every_stage(tmp_path):
    graphs = tmp_path / "graphs"
    for name in ("locomo", "hotpotqa"):
        (graphs / name).mkdir(parents=True)
        (graphs / name / "manifest.json").write_text("{}")
    (tmp_path / "out" / "hage_full" / "fold0" / "router").mkdir(parents=True)
    (tmp_path / "out" / "hage_full" / "fold0" / "router" / "best.pt").write_bytes(b"")
    report = cuda_check.main(["--dry-run", "--out", str(tmp_path / "out"), "--graphs", str(graphs)])
    saved = json.loads((tmp_path / "out" / "cuda_check.json").read_text())
    assert saved == report and list(saved["stages"]) == list(cuda_check.STAGES)
    stages = saved["stages"]
    assert "tests/test_device.py" in stages["tests"]["commands"][0]
    assert "compare_devices=[cuda]" in stages["benchmark"]["commands"][0]
    assert (
        "+experiment=hage_full" in stages["hage_full"]["commands"][0]
        and "trainer.run.device=cuda" in (stages["hage_full"]["commands"][0])
    )
    parity = stages["parity"]["commands"]
    assert len(parity) == 4 and sum("device=cuda" in c for c in parity) == 2
    assert all("router" in c and "best.pt" in c for c in parity)  # the trained router is compared too
    assert all(s["returncodes"] == [] for s in stages.values())  # nothing ran


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where CUDA is missing")
def test_refuses_cuda_where_there_is_none(tmp_path):
    with pytest.raises(SystemExit, match="CUDA is not available"):
        cuda_check.main(["--out", str(tmp_path), "--stages", "tests"])


def _eval_dir(path: Path, loaded: list[list[str]], recall: float) -> Path:
    path.mkdir(parents=True)
    summary = {"overall": {"evidence_recall": recall, "hops": 1.5, "latency_ms_p50": 3.0}}
    (path / "results.json").write_text(json.dumps({"policies": {"beta_bfs": {"summary": summary}}}))
    rows = [json.dumps({"qid": f"q{i}", "loaded": ids}) for i, ids in enumerate(loaded)]
    (path / "questions_beta_bfs.jsonl").write_text("\n".join(rows) + "\n")
    return path


def test_compare_runs_names_the_questions_and_metrics_that_differ(tmp_path):
    a = _eval_dir(tmp_path / "a", [["n1", "n2"], ["n3"]], 0.5)
    same = _eval_dir(tmp_path / "b", [["n1", "n2"], ["n3"]], 0.5 + 1e-9)
    other = _eval_dir(tmp_path / "c", [["n2", "n1"], ["n3"]], 0.6)
    assert cuda_check.compare_runs(a, same, 1e-6)["beta_bfs"]["equal"]
    res = cuda_check.compare_runs(a, other, 1e-6)["beta_bfs"]
    assert not res["equal"] and res["loaded_lists_differ"] == ["q0"] and res["n_differ"] == 1
    assert res["metrics_differ"] == {"overall/evidence_recall": [0.5, 0.6]}
