"""kill -9 during a long LLM loop, then rerun: finished calls come from the cache and are not repeated."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOOP = textwrap.dedent("""
    import json, sys, time
    import litellm
    from graphmem.llm.client import LLMClient, LLMConfig

    real = litellm.completion
    def slow_completion(**kwargs):  # a slow provider: every real request is logged, then answered
        with open(sys.argv[2], "a") as log:
            log.write(kwargs["messages"][-1]["content"] + "\\n")
        time.sleep(0.05)
        return real(**kwargs)
    litellm.completion = slow_completion

    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="ok", cache_dir=sys.argv[1], max_concurrency=1))
    for i in range(60):
        reply = client.complete("generator", [{"role": "user", "content": f"question {i}"}])
        print(i, reply.cached, flush=True)
    print(json.dumps(client.usage_report()["roles"]["generator"]), flush=True)
""")


def _env():
    return {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}


def test_rerun_after_kill_repeats_no_finished_call(tmp_path):
    cache, log = tmp_path / "cache", tmp_path / "requests.log"
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP, str(cache), str(log)], env=_env(), stdout=subprocess.PIPE, text=True
    )
    done = 0
    while done < 15:  # let a quarter of the loop finish, then kill it mid-request
        line = proc.stdout.readline()
        assert line, "the loop ended early"
        done += 1
    time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = log.read_text().split("\n")[:-1]
    assert 15 <= len(first) < 60

    rerun = subprocess.run(
        [sys.executable, "-c", LOOP, str(cache), str(log)], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    requests = log.read_text().split("\n")[:-1]
    second = requests[len(first) :]
    # every question is answered once overall, except at most the one in flight when killed
    assert len(set(first) & set(second)) <= 1
    assert set(first) | set(second) == {f"question {i}" for i in range(60)}
    usage = json.loads(rerun.stdout.strip().split("\n")[-1])
    assert usage["cache_hits"] >= len(first) - 1 and usage["requests"] == len(second)
