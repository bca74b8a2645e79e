"""Runs that must stop, inputs that must be bounded, folders that must hold one thing: each case as a user runs it.

    python scripts/reliability/stops.py                    # writes docs/results/reliability_stops.json
    python scripts/reliability/stops.py --out /tmp/stops.json

Builds a small LoCoMo set (three conversations, hashing encoder) and trains a router on it for one
fold, then runs every case as its own process: LLM rewards whose calls all fail, a checkpoint with
flipped bytes, a very long turn, names that would escape their folder, a set folder asked to hold
another source, folders moved aside twice, sizes beyond what the machine holds, an evaluation
into a training run's folder, a key echoed back in a reply, and values that used to give a
traceback or a vague message. Each record keeps the command (temporary paths shown as ``<set>``
and ``<tmp>``), the exit status, the outcome (the first ``error:`` line, else what the case checked
afterwards) and the seconds the process took.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

from case_runs import out_arguments, outcome, save_locomo_set, write_cases

from graphmem.builders import DataConfig
from graphmem.config.entry import command
from graphmem.store.io import write_json

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-" + "echoed0123456789" * 2  # the fake key an endpoint echoes back
QUIET = ["logger=none", "progress=false"]
EVAL = [*QUIET, "sweep_tokens=[]", "latency=batch", "stats.reference=null"]
TRAIN = [*QUIET, "cv.k=3", "cv.folds=[0]", "baselines=[dense_topk]", "stats.n_boot=100", "trainer.run.device=cpu"]
ECHO = (
    "api_base=http://127.0.0.1:<port>/v1",
    "api_key_env=ECHO_KEY",
    "cache_dir=<cache>",
    "max_retries=0",
)
ARGPARSE = ("scripts/make_docs.py",)
SHORT = ["trainer.objective.imitation_epochs=1", "trainer.objective.rl_epochs=1"]


class Echo(BaseHTTPRequestHandler):
    """An OpenAI-style chat endpoint on loopback whose every reply (an answer, or a judge's score and reason)
    repeats the request's Authorization header."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        sent = self.headers.get("Authorization")
        judge = "judge" in str(request.get("model"))
        text = json.dumps({"score": 1, "reason": f"you sent {sent}"}) if judge else f"Paris (you sent {sent})"
        body = {
            "id": "echo",
            "object": "chat.completion",
            "created": 0,
            "model": "echo",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


class Runner:
    """Runs each case as ``python <script> <args>`` and keeps its record."""

    def __init__(self, tmp: Path):
        self.tmp, self.records = tmp, []
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        self.env.update(GRAPHMEM_CACHE_DIR=str(tmp / "cache"), ECHO_KEY=KEY)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def run(self, case: str, script: str, argv: list[str], after: Callable[[], str] | None = None) -> None:
        hydra = [] if "-m" in argv or script in ARGPARSE else [f"hydra.run.dir={self.tmp}/hydra"]
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, script, *argv, *hydra], cwd=ROOT, env=self.env, capture_output=True, text=True
        )
        seconds = time.perf_counter() - t0
        text = outcome((proc.stderr + proc.stdout).splitlines(), after)
        shown = " ".join(["python", script, *argv])
        shown = shown.replace(f"127.0.0.1:{self.port}", "127.0.0.1:<port>")
        for path, label in ((self.tmp / "set", "<set>"), (self.tmp, "<tmp>")):
            shown, text = shown.replace(str(path), label), text.replace(str(path), label)
        text = re.sub(r"\d{8}-\d{6}-[0-9a-f]{6}", "<run id>", text.split("] - ", 1)[-1])
        self.records.append(
            {
                "case": case,
                "command": shown,
                "exit_code": proc.returncode,
                "outcome": text,
                "seconds": round(seconds, 1),
            }
        )
        print(f"{proc.returncode:3d}  {seconds:6.1f}s  {case}: {text[:160]}", flush=True)


def flip_tensor_bytes(path: Path, out: Path) -> int:
    """Copy the checkpoint ``path`` to ``out`` with one byte flipped in each tensor storage; returns how many."""
    flipped = 0
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = bytearray(src.read(info))
            if "/data/" in info.filename and data:
                data[len(data) // 2] ^= 0xFF
                flipped += 1
            dst.writestr(info, bytes(data))
    return flipped


def long_turn_file(source: Path, out: Path, size: int) -> Path:
    """The first LoCoMo conversation of ``source`` with its first turn's text ``size`` characters long."""
    conv = json.loads(source.read_text(encoding="utf-8"))[:1]
    turn = conv[0]["conversation"]["session_1"][0]
    words = "Alice met Bob in Paris on 8 May 2023 and they talked about the Garden Project for hours "
    turn["text"] = (words * (size // len(words) + 1))[:size]
    write_json(out, conv, indent=None)
    return out


def failing_rewards_and_damaged_checkpoint(r: Runner, run: Path) -> None:
    """LLM rewards whose every call fails, and a checkpoint with flipped bytes."""
    tmp, s = r.tmp, f"graphset={r.tmp / 'set'}"
    best = run / "fold0" / "router" / "best.pt"
    judge = ["+trainer.objective.judge.model=gpt-4o-mini", "+trainer.objective.judge.max_retries=0"]
    judge += ["+trainer.objective.judge.cache_dir=null"]
    no_best = lambda d: lambda: f"best.pt written: {(tmp / d / 'fold0' / 'router' / 'best.pt').exists()}"  # noqa: E731
    train = ["scripts/train.py", "trainer.objective.imitation_epochs=0", "trainer.objective.rl_epochs=1"]
    for case, reply, d in (
        ("judge reward, every judge call failed", "litellm.RateLimitError", "judge-dead"),
        ("judge reward, every judge reply unparseable", "'no score here'", "judge-garbage"),
    ):
        argv = [
            s,
            *TRAIN,
            *train[1:],
            "trainer.objective.reward=judge",
            *judge,
            f"+trainer.objective.judge.mock_response={reply}",
            f"out_dir={tmp / d}",
        ]
        r.run(case, train[0], argv, after=no_best(d))

    damaged = tmp / "damaged.pt"
    n = flip_tensor_bytes(best, damaged)
    router = ["policy=router", "policy.device=cpu", *EVAL]
    r.run(
        f"router best.pt with one byte flipped in each of its {n} tensor storages",
        "scripts/evaluate.py",
        [s, *router, f"policy.checkpoint={damaged}", f"out_dir={tmp / 'o-damaged'}"],
    )


def long_turns_names_and_set_folders(r: Runner) -> None:
    """Very long turns, a name that would escape, a set folder asked to hold another source."""
    tmp = r.tmp
    locomo = Path(DataConfig(name="locomo").root or ROOT.parent / "shared" / "data") / "locomo" / "locomo_dev8.json"
    build = ["scripts/build_graph.py", "data=locomo", "graph.encoder=hashing", *QUIET, f"out_dir={tmp / 'b'}"]
    for size, label in ((1_000_000, "1 MB"), (20_000_000, "20 MB")):
        f = long_turn_file(locomo, tmp / f"long-{size}.json", size)
        r.run(
            f"a LoCoMo file with one {label} turn",
            build[0],
            [*build[1:], f"data.file={f}", f"graphset_dir={tmp / 'long'}"],
            after=lambda: "sets built: " + str(len(list((tmp / "long").glob("*/manifest.json")))),
        )

    r.run(
        "benchmark.py suite.out_file=../x.json",
        "scripts/benchmark.py",
        ["+suite=scaling_ann", "suite.sizes=[1000]", "suite.out_file=../x.json", f"out_dir={tmp / 'bench'}"],
        after=lambda: f"written outside out_dir: {(tmp / 'x.json').exists()}",
    )
    mine = tmp / "folders" / "mine"
    first = [*build[1:], "data.limit=1", f"graphset={mine}"]
    subprocess.run([sys.executable, *build[:1], *first], cwd=ROOT, env=r.env, check=True, capture_output=True)
    other = long_turn_file(locomo, tmp / "other.json", 200)
    r.run(
        "a build from another data.file into graphset=<a folder holding a set>",
        build[0],
        [*first, f"data.file={other}"],
    )
    named = [*build[1:], "data.limit=1", f"graphset_dir={tmp / 'folders' / 'named'}"]
    subprocess.run([sys.executable, *build[:1], *named], cwd=ROOT, env=r.env, check=True, capture_output=True)
    r.run(
        "the same, into the default folder name under graphset_dir",
        build[0],
        [*named, f"data.file={other}"],
        after=lambda: "set folders: " + ", ".join(sorted(p.name for p in (tmp / "folders" / "named").iterdir())),
    )


def folders_sizes_and_secrets(r: Runner, run: Path) -> None:
    """Moves aside, sizes beyond the machine, mixed run folders, a key echoed in a reply."""
    tmp, s = r.tmp, f"graphset={r.tmp / 'set'}"
    folder = tmp / "moved"
    for i in range(2):
        folder.mkdir(parents=True, exist_ok=True)
        for p in folder.iterdir():  # leave only what was moved aside: the next run finds unrecorded results
            if not p.name.startswith("replaced-"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        write_json(folder / "results.json", {"run": i}, indent=None)
        r.run(
            f"evaluation into a folder holding an unrecorded run's results ({i + 1} of 2)",
            "scripts/evaluate.py",
            [s, *EVAL, "policies=[beta_bfs]", f"out_dir={folder}"],
            after=lambda: "folders moved aside: " + ", ".join(sorted(p.name for p in folder.glob("replaced-*"))),
        )

    r.run(
        "trainer.objective.group_size=1000000", "scripts/train.py", [s, *TRAIN, "trainer.objective.group_size=1000000"]
    )
    r.run("train_gnn.py train.epochs=-1", "scripts/train_gnn.py", [s, *QUIET, "train.epochs=-1"])
    r.run("an evaluation into a training run's folder", "scripts/evaluate.py", [s, *EVAL, f"out_dir={run}"])

    def key_written() -> str:
        files = [p.read_bytes() for p in tmp.rglob("*") if p.is_file()]
        masked = sum(b"Bearer ***" in data for data in files)
        return (
            f"files holding the key: {sum(KEY.encode() in data for data in files)}; holding the masked reply: {masked}"
        )

    echo = [
        "qa.enabled=true",
        "qa.answer.intent=uniform",
        "qa.max_questions=3",
        *[f"qa.{part}.llm.{k}" for part in ("answer", "judge") for k in ECHO],
        "qa.answer.llm.model=openai/echo-answer",
        "qa.judge.llm.model=openai/echo-judge",
    ]
    echo = [x.replace("<port>", str(r.port)).replace("<cache>", str(tmp / "llm-cache")) for x in echo]
    r.run(
        "an endpoint that echoes the Authorization header (the key) in its reply",
        "scripts/evaluate.py",
        [s, *EVAL, "policies=[beta_bfs]", *echo, f"out_dir={tmp / 'echo'}"],
        after=key_written,
    )


def once_vague_messages(r: Runner, run: Path) -> None:
    """Values that once gave a traceback, a vague message or a check after the work."""
    tmp, s = r.tmp, f"graphset={r.tmp / 'set'}"
    empty = tmp / "empty.txt"
    empty.write_text("")
    r.run("benchmark.py sizes=[abc]", "scripts/benchmark.py", ["sizes=[abc]", f"out_dir={tmp / 'bench2'}"])
    r.run("train.py cv.folds=abc", "scripts/train.py", [s, *TRAIN[:2], "cv.folds=abc", f"out_dir={tmp / 'bad'}"])
    r.run("train_gnn.py split.fold=9", "scripts/train_gnn.py", [s, *QUIET, "split.fold=9"])
    r.run("evaluate.py graphs=<missing file>", "scripts/evaluate.py", [s, *EVAL, f"graphs={tmp / 'nope.json'}"])
    r.run("evaluate.py graphs=<empty file>", "scripts/evaluate.py", [s, *EVAL, f"graphs={empty}"])
    split = tmp / "reader.pt.split.json"
    write_json(split, {"train": [], "val": [], "test": ["conv-26"]}, indent=None)
    r.run(
        "evaluate.py graphs=<split file> graphs_part=bogus",
        "scripts/evaluate.py",
        [s, *EVAL, f"graphs={split}", "graphs_part=bogus"],
    )
    r.run("data=hotpotqa with a saved LoCoMo graphset=", "scripts/evaluate.py", [s, *EVAL, "data=hotpotqa"])
    r.run(
        "policies=beta_bfs (a name, not a list)",
        "scripts/evaluate.py",
        [s, *EVAL, "policies=beta_bfs", f"out_dir={tmp / 'one-policy'}"],
    )
    r.run("seed=abc", "scripts/evaluate.py", [s, *EVAL, "seed=abc"])
    r.run(
        "multirun whose second job has an unknown policy",
        "scripts/evaluate.py",
        ["-m", s, *EVAL, f"hydra.sweep.dir={tmp / 'sweep'}", "policies=[beta_bfs],[no_such_policy]"],
    )


def edited_fold(r: Runner) -> None:
    """``make_docs.py`` over a copy of the results where one fold of the headline was edited by hand."""
    results = r.tmp / "results"
    shutil.copytree(ROOT / "docs" / "results", results)
    path = results / "learned_vs_hybrid_locomo.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    row = next(x for x in data["records"] if x["fold"] == 1 and x["policy"] == "hybrid")
    row["test"]["evidence_recall"] = round(row["test"]["evidence_recall"] + 0.05, 6)
    write_json(path, data, indent=None)
    docs = ["--results", str(results), "--docs", str(r.tmp / "docs"), "--readme", str(r.tmp / "README.md")]
    shutil.copy(ROOT / "README.md", r.tmp / "README.md")
    r.run(f"make_docs.py after hybrid's fold 1 in {path.name} was edited by hand", "scripts/make_docs.py", docs)


def work(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="reliability-stops-") as name:
        tmp = Path(name)
        save_locomo_set(tmp, 3)
        r = Runner(tmp)
        run = tmp / "run"
        argv = [f"graphset={tmp / 'set'}", *TRAIN, *SHORT, f"out_dir={run}", f"hydra.run.dir={tmp}/hydra"]
        subprocess.run(
            [sys.executable, "scripts/train.py", *argv], cwd=ROOT, env=r.env, check=True, capture_output=True
        )
        try:
            failing_rewards_and_damaged_checkpoint(r, run)
            long_turns_names_and_set_folders(r)
            folders_sizes_and_secrets(r, run)
            once_vague_messages(r, run)
            edited_fold(r)
        finally:
            r.server.shutdown()
    write_cases(args.out, "stops.py", r.records)


def main(argv: list[str] | None = None) -> int:
    return command(out_arguments(__doc__.splitlines()[0], "reliability_stops"), work, argv)


if __name__ == "__main__":
    sys.exit(main())
