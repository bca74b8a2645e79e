"""Run the scripts the way a careless or unlucky user would and record what each run answered.

    python scripts/reliability/runs.py                      # writes docs/results/reliability_runs.json
    python scripts/reliability/runs.py --out /tmp/runs.json

Each case is one real command line (``python scripts/<script>.py ...``) against a small LoCoMo
graph set built into a temporary folder (two conversations, hashing encoder); the record keeps
the command (temporary paths shown as ``<set>`` and ``<tmp>``), its exit status and its outcome:
the first ``error:`` line of stderr, or for a run that succeeds the line saying what it did with
an earlier run's files. Cases: an API key given as ``api_key_env``, folders shared with an earlier
or a live run, LLM endpoints whose every call fails, empty policy lists and bad sweep jobs,
impossible values.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from case_runs import out_arguments, save_locomo_set, write_cases

from graphmem.config.entry import command
from graphmem.store.lockfile import FileLock

ROOT = Path(__file__).resolve().parents[2]

HEX_KEY = "deadbeef" + "0123456789abcdef" * 2  # a fake key in lower-case hex
EVAL = ["logger=none", "progress=false", "sweep_tokens=[]", "latency=batch", "stats.reference=null"]
KEY_VIA_ENV = "llm.api_key_env=${oc.env:HIDDEN_KEY}"  # HIDDEN_KEY holds the key in upper case
FAILING_LLM = ["llm=offline", "llm.mock_response=litellm.RateLimitError", "llm.max_retries=0"]
FAILING_QA = [
    "qa.enabled=true",
    "qa.answer.intent=uniform",
    "qa.answer.llm.model=gpt-4o-mini",
    "qa.answer.llm.cache_dir=null",
    "qa.answer.llm.mock_response=litellm.RateLimitError",
    "qa.answer.llm.max_retries=0",
    "qa.max_questions=3",
]


def cases(tmp: Path) -> list[tuple[str, str, list[str]]]:
    """``(case, script, arguments)`` in the order they run (some use what an earlier one left)."""
    s, out, file = f"graphset={tmp / 'set'}", tmp / "out", tmp / "a-file"
    sweep = ["-m", s, *EVAL, f"hydra.sweep.dir={out}/sweep"]
    loop = [s, *FAILING_LLM, "encoder=hashing", "n_questions=2", "max_consecutive_failures=5", "logger=none"]
    return [
        (
            "api_key_env given a lower-case hex key",
            "evaluate",
            [s, "qa.enabled=true", f"qa.answer.llm.api_key_env={HEX_KEY}"],
        ),
        (
            "api_key_env given an upper-case hex key through an interpolation",
            "studies/memory_loop/run",
            [s, KEY_VIA_ENV],
        ),
        ("first evaluation into a folder", "evaluate", [s, *EVAL, "policies=[beta_bfs]", f"out_dir={out}/eval"]),
        (
            "second evaluation, other policies, same folder",
            "evaluate",
            [s, *EVAL, "policies=[ppr]", f"out_dir={out}/eval"],
        ),
        ("evaluation into a folder a live run holds", "evaluate", [s, *EVAL, f"out_dir={out}/held"]),
        (
            "memory loop into a folder a live run holds",
            "studies/memory_loop/run",
            [s, *FAILING_LLM, f"out_dir={out}/held"],
        ),
        (
            "memory loop: every example failed, fewer than the streak limit",
            "studies/memory_loop/run",
            [*loop, f"out_dir={out}/loop"],
        ),
        (
            "QA mode: every answer call failed",
            "evaluate",
            [s, *EVAL, "policies=[beta_bfs]", *FAILING_QA, f"out_dir={out}/qa"],
        ),
        ("policies=[]", "evaluate", [s, *EVAL, "policies=[]", f"out_dir={out}/empty"]),
        ("multirun whose third job lists no policy", "evaluate", [*sweep, "policies=[beta_bfs],[ppr],[]"]),
        ("multirun whose second job has a negative budget", "evaluate", [*sweep, "budget.max_nodes=40,-1"]),
        (
            "multirun, two jobs into one out_dir",
            "evaluate",
            [*sweep, "policies=[beta_bfs],[ppr]", f"out_dir={out}/one"],
        ),
        ("out_dir an existing file", "evaluate", [s, *EVAL, f"out_dir={file}"]),
        ("out_dir under an existing file", "train", [s, f"out_dir={file}/sub"]),
        ("variants.router=null", "train", [s, "variants.router=null", f"out_dir={out}/train"]),
        ("budget.max_nodes=abc", "evaluate", [s, "budget.max_nodes=abc", f"out_dir={out}/bad"]),
        ("cv.k=three", "train", [s, "cv.k=three", f"out_dir={out}/bad"]),
        ("an unknown key", "evaluate", [s, "budget.no_such_key=1", f"out_dir={out}/bad"]),
    ]


def outcome(stderr: str, stdout: str) -> str:
    """The first ``error:`` line, else the line about an earlier run's files, else the last line; run ids,
    pids, hosts and times (which differ from run to run) replaced by placeholders."""
    lines = stderr.splitlines() + stdout.splitlines()
    found = next((x for x in lines if x.startswith("error: ")), None)
    found = found or next((x for x in lines if "an earlier run's files moved" in x), None)
    found = (found or next((x for x in reversed(lines) if x.strip()), "")).split("] - ", 1)[-1]
    found = re.sub(r"\(pid \d+ on [^,]+, since [^)]*\)", "(pid <pid> on <host>, since <time>)", found)
    return re.sub(r"replaced-\d{8}-\d{6}-[0-9a-f]{6}", "replaced-<run id>", found)


def work(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="reliability-runs-") as name:
        tmp = Path(name)
        save_locomo_set(tmp, 2)
        (tmp / "a-file").write_text("not a folder")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HIDDEN_KEY": HEX_KEY.upper(), "CUDA_VISIBLE_DEVICES": ""}
        held = FileLock(tmp / "out" / "held" / ".run.lock", {"run_id": "a-live-run"}).acquire()
        records = []
        try:
            for case, script, argv in cases(tmp):
                hydra_dir = [] if "-m" in argv else [f"hydra.run.dir={tmp / 'hydra' / str(len(records))}"]
                cmd = [sys.executable, f"scripts/{script}.py", *argv, *hydra_dir]
                proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
                shown = " ".join(["python", f"scripts/{script}.py", *argv])
                written = [p for p in tmp.rglob("*") if p.is_file() and HEX_KEY.encode() in p.read_bytes().lower()]
                if written or HEX_KEY in (proc.stdout + proc.stderr).lower():
                    raise SystemExit(f"error: {case}: the key was written ({written[:3]}) or printed")
                text = outcome(proc.stderr, proc.stdout)
                for path, label in ((tmp / "set", "<set>"), (tmp, "<tmp>")):
                    shown, text = shown.replace(str(path), label), text.replace(str(path), label)
                records.append({"case": case, "command": shown, "exit_code": proc.returncode, "outcome": text})
                print(f"{proc.returncode}  {case}: {text}", flush=True)
        finally:
            held.release()
    write_cases(args.out, "runs.py", records)


def main(argv: list[str] | None = None) -> int:
    return command(out_arguments(__doc__.splitlines()[0], "reliability_runs"), work, argv)


if __name__ == "__main__":
    sys.exit(main())
