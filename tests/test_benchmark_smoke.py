"""Smoke runs of scripts/benchmark.py with tiny settings."""

import json
import os
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from script_loader import load_script  # noqa: E402

from tests import script_runner  # noqa: E402

TINY = [
    "sizes=[200,400]",
    "num_queries=4",
    "loop_queries=2",
    "ppr_queries=2",
    "gnn_queries=2",
    "dim=8",
    "avg_degree=4",
    "locomo.enabled=false",
    "datasets=[]",
    "compare_devices=[cpu]",
    "train.nodes=200",
    "train.dim=8",
    "train.batch=32",
    "train.single=4",
    "train.repeats=1",
]


def test_run_in_process_writes_json_and_plot(tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="benchmark", overrides=TINY + [f"out_dir={tmp_path}"])
    report = load_script("benchmark").run(cfg)
    saved = json.loads((tmp_path / "benchmark.json").read_text())
    assert saved["growth"] == report["growth"] and (tmp_path / "benchmark.png").stat().st_size > 0
    assert set(saved["sizes"]) == {"200", "400"}
    for entry in saved["sizes"].values():
        assert set(entry["policies"]) == {"beta_bfs", "dense_topk", "ppr", "uniform_bfs", "router", "gnn"}
        for res in entry["policies"].values():
            assert res["loop_qps"] > 0 and res["batched_qps"] > 0 and res["mean_loaded"] <= 12
            assert res["batched_over_single"] > 0 and res["single_batch_ms_per_query"] > 0
            assert res["device"] == "cpu" and res["batched_peak_mb"] >= 0 and res["single_peak_mb"] >= 0
            assert res["on"]["cpu"]["batched_ms_per_query"] > 0 and res["on"]["cpu"]["speedup_over_main_device"] > 0
        for name in ("beta_bfs", "router"):
            assert (
                entry["policies"][name]["traversal_ms_per_query"] > 0
                and entry["policies"][name]["traversal_warm_ms_per_query"] > 0
            )
    assert {"beta_bfs_traversal_flat_within_2x", "router_traversal_warm_flat_within_2x"} <= set(saved["growth"])
    train = saved["train"]["cpu"]
    assert train["batch1_episodes_per_s"] > 0 and train["batched_episodes_per_s"] > 0 and train["batch"] == 32
    assert train["speedup"] == train["batched_episodes_per_s"] / train["batch1_episodes_per_s"]


def test_hydra_entry_point(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    out = tmp_path / "bench"
    proc = script_runner.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "benchmark.py"),
            "sizes=[100]",
            "num_queries=2",
            "ppr_queries=1",
            "gnn_queries=1",
            "loop_queries=1",
            "dim=4",
            "plot=false",
            "locomo.enabled=false",
            "datasets=[]",
            "train.enabled=false",
            f"out_dir={out}",
        ],
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "benchmark.json").read_text())["sizes"]["100"]["nodes"] == 100


def test_dataset_section_times_every_question_three_ways(tmp_path):
    """A saved HotpotQA set (one graph per question): reference loop, one call per graph, and the
    harness's batched path over the union, each with its ratio."""
    from graphmem.builders import DataConfig, GraphConfig, build_graphset

    data = DataConfig(name="hotpotqa", file="hotpotqa/hotpot_dev_distractor_200.jsonl", limit=6)
    build_graphset(data, GraphConfig(encoder="hashing", cache_dir=str(tmp_path / "c")), progress=False).save(
        tmp_path / "hp"
    )
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            config_name="benchmark",
            overrides=[
                "sizes=[]",
                "locomo.enabled=false",
                "train.enabled=false",
                f"datasets=['{tmp_path / 'hp'}']",
                "dataset_loop_queries=3",
                "compare_devices=[cpu]",
                f"out_dir={tmp_path / 'out'}",
                "plot=false",
            ],
        )
    report = load_script("benchmark").run(cfg)
    res = report["datasets"]["hp"]
    assert res["graphs"] == 6 and res["questions"] == 6
    assert set(res["policies"]) == {"beta_bfs", "dense_topk", "ppr", "uniform_bfs", "router", "gnn"}
    for r in res["policies"].values():
        assert r["loop_queries"] == 3 and r["batched_ms_per_query"] > 0
        assert r["batched_over_loop"] == pytest.approx(r["loop_ms_per_query"] / r["batched_ms_per_query"], rel=1e-9)
        assert r["batched_over_per_graph"] == pytest.approx(
            r["per_graph_ms_per_query"] / r["batched_ms_per_query"], rel=1e-9
        )
        assert r["on"]["cpu"]["speedup_over_main_device"] > 0


def test_peak_memory_sees_a_large_temporary():
    import torch

    from graphmem.tracking.peak_memory import PeakMemory

    with PeakMemory("cpu") as small:
        torch.ones(1000).sum()
    with PeakMemory("cpu") as big:
        x = torch.ones(64 * 2**20 // 4 * 4)  # 256 MiB, every page written
        time.sleep(0.01)
        del x
    assert big.peak_mb > 200 and small.peak_mb < 50


def test_training_throughput_benchmark(tmp_path):
    out = tmp_path / "train.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    proc = script_runner.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "benchmarks" / "bench_train.py"),
            "--nodes",
            "200",
            "--dim",
            "8",
            "--batch",
            "32",
            "--single",
            "4",
            "--device",
            "cpu,cpu",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = json.loads(out.read_text())["devices"]
    for run in (first, second):
        assert (
            run["batch1_episodes_per_s"] > 0 and run["batched_episodes_per_s"] > 0 and run["batched_step_peak_mb"] >= 0
        )
        assert run["speedup"] == run["batched_episodes_per_s"] / run["batch1_episodes_per_s"]
    assert second["batched_over_cpu"] > 0


def test_serving_benchmark_records_its_threads_and_refuses_a_bad_count(tmp_path):
    from tests.small_sets import saved_locomo_set

    saved, out = saved_locomo_set(tmp_path, limit=1), tmp_path / "serve.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    script = ROOT / "scripts" / "benchmarks" / "bench_serve.py"
    args = [sys.executable, str(script), "--graphset", str(saved), "--out", str(out)]
    proc = script_runner.run([*args, "--threads", "0", "--note", "smoke"], cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["threads"] == report["torch_threads"] == 1 and report["code"] == "smoke"
    assert "--note" not in report["command"] and report["questions"] > 0
    assert (
        report["router_loads_what_router_batched_loads"] == f"{report['questions']} of {report['questions']} questions"
    )
    bad = script_runner.run([*args, "--threads", "-2"], cwd=ROOT, env=env, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: threads: expected a positive number of threads, got -2"
    ]


def test_memory_benchmark_reports_the_median_of_its_measuring_processes(tmp_path):
    out = tmp_path / "memory_scale.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    script = ROOT / "scripts" / "benchmarks" / "bench_memory.py"
    tiny = ["--adds", "4", "--queries", "3", "--forgets", "1", "--after-adds", "1", "--ingest", "0"]
    args = [sys.executable, str(script), "--sizes", "30", "60", *tiny, "--repeats", "2", "--out", str(out)]
    proc = script_runner.run(args, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = json.loads(out.read_text())["sizes"]
    for size, row in ((30, first), (60, second)):
        assert row["records"] == size + 1 + 4  # after the first add and the timed ones
        for key in ("add", "retrieve_router", "retrieve_hybrid"):
            p50s = [run[key] for run in row["runs"]]
            assert len(p50s) == 2 and row[key]["p50_ms"] == (p50s[0] + p50s[1]) / 2
    assert second["add_p50_over_first"] == second["add"]["p50_ms"] / first["add"]["p50_ms"]
    bad = script_runner.run([*args[:-4], "--repeats", "0"], cwd=ROOT, env=env, timeout=300)
    assert bad.returncode != 0 and "--repeats must be positive" in bad.stderr


def test_reopen_benchmark_times_each_way_and_reopens_a_copy_of_a_given_memory(tmp_path):
    """Each round opens the way it names (the benchmark refuses a round whose open loaded the saved state or not
    against its way), and ``--memory`` reopens a copy, leaving the given memory as it was."""
    from graphmem import Memory

    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    script = ROOT / "scripts" / "benchmarks" / "bench_reopen.py"
    out = tmp_path / "reopen.json"
    proc = script_runner.run(
        [sys.executable, str(script), "--records", "120", "--rounds", "2", "--out", str(out)],
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert list(r["rounds"]) == ["built", "rows", "loaded"] and r["records"] == 120
    assert [row["records"] for row in r["rounds"]["loaded"]] == [125, 126]  # one add a round, 4 rounds before
    assert r["open_s_rows_over_loaded"] == r["rows_open_s_median"] / r["loaded_open_s_median"]
    with Memory.open(tmp_path / "kept", encoder="hashing") as m:
        m.add_many([{"text": f"a note about Lisbon {i}", "id": f"n{i}"} for i in range(40)])
    before = (tmp_path / "kept" / "memory.sqlite3").read_bytes()
    args = ["--memory", str(tmp_path / "kept"), "--ways", "rows", "loaded", "--rounds", "1", "--walk"]
    args += ["--out", str(out)]
    proc = script_runner.run([sys.executable, str(script), *args], cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert list(r["rounds"]) == ["rows", "loaded"] and r["records"] == 40 and r["memory"] == str(tmp_path / "kept")
    assert all(row["first_walk_s"] > 0 for rows in r["rounds"].values() for row in rows)
    assert r["loaded_first_walk_s_median"] == r["rounds"]["loaded"][0]["first_walk_s"]
    assert (tmp_path / "kept" / "memory.sqlite3").read_bytes() == before
