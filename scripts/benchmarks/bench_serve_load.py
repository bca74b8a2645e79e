"""Load on the memory server: concurrent clients adding and retrieving against a real ``scripts/serve.py``.

Starts ``scripts/serve.py`` on a free port of 127.0.0.1 (a process of its own, a token of its own, a fresh
``memory_root``), seeds each memory with ``--seed-records`` records, then runs ``--clients`` client threads for
``--seconds`` seconds. Each client (its own keep-alive connection, :class:`graphmem.serve.MemoryClient`) draws
every request at random: an add of one new turn (``--add-share``), a feedback with a random reward on its last
retrieval (``--feedback-share``), else a retrieve. Every request is bounded (``--timeout`` seconds) and the run
stops at its deadline.

Reported: requests/s (all, and per route), p50 / p95 / p99 per route (client side: HTTP and JSON included),
errors by route and status, and the check that no acknowledged write was lost: after the clients stop, the
server's record count, and after the server stops (gracefully, SIGTERM), the memory reopened from its folder
must hold every id an add was acknowledged with (and pass its integrity check). The load average before and
after is recorded: on a shared machine the clients and the server compete with other work for the cores.

    OMP_NUM_THREADS=1 python scripts/benchmarks/bench_serve_load.py --clients 8 --seconds 60 \\
        --out docs/results/serve_load.json --note "shared 2-core machine"
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from graphmem import Memory
from graphmem.config.entry import command
from graphmem.eval.latency import latency_summary
from graphmem.serve import MemoryClient, MemoryServerError
from graphmem.store.io import write_json

ROOT = Path(__file__).resolve().parents[2]
WORDS = (
    "Alice Bob Carmen Lisbon Paris greyhound Pixel beach sand garden piano concert recipe lasagna bicycle "
    "marathon library novel painting sister brother holiday mountain river train museum coffee birthday "
    "promotion interview guitar festival camping kayak violin yoga"
).split()


def start_server(root: Path, encoder: str, token: str) -> tuple[subprocess.Popen, str]:
    """``scripts/serve.py`` on a free port of 127.0.0.1; its process and URL once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [sys.executable, str(ROOT / "scripts" / "serve.py"), f"memory_root={root / 'memories'}", f"port={port}"]
    cmd += [f"graph.encoder={encoder}", "log_level=warning", f"hydra.run.dir={root / 'hydra'}"]
    env = {**os.environ, "GRAPHMEM_TOKEN": token, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 180
    with MemoryClient(url, token) as probe_client:
        while True:
            try:
                probe_client.health()
                return server, url
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    server.kill()
                    raise SystemExit(f"the server did not start:\n{server.communicate()[0][-3000:]}") from None
                time.sleep(0.2)


def turn(rng: random.Random, client: int, k: int) -> dict:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18)))
    speaker = rng.choice(["Alice", "Bob"])
    return {"text": f"{words}.", "speaker": speaker, "session": client, "time": 1e6 + 60.0 * k}


class Load:
    """What the clients did: per-route latencies, errors, acknowledged ids (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, Counter] = defaultdict(Counter)
        self.acknowledged: dict[str, list[str]] = defaultdict(list)

    def record(self, route: str, seconds: float, error: str | None) -> None:
        with self.lock:
            if error is None:
                self.seconds[route].append(seconds)
            else:
                self.errors[route][error] += 1


def draw_route(rng: random.Random, args, last: str | None) -> str:
    """``add``, ``feedback`` (only after a retrieval) or ``retrieve``, in the shares the arguments give."""
    x = rng.random()
    if x < args.add_share:
        return "add"
    return "feedback" if x < args.add_share + args.feedback_share and last is not None else "retrieve"


def client_loop(args, url: str, token: str, number: int, deadline: float, load: Load) -> None:
    """One client until ``deadline``: adds, retrieves and feedback drawn at random (module docstring)."""
    rng = random.Random(number)
    memory = f"load{number % args.memories}"
    last, k = None, 0
    with MemoryClient(url, token, memory, timeout=args.timeout) as mem:
        while time.monotonic() < deadline:
            route, t0, error = draw_route(rng, args, last), time.perf_counter(), None
            try:
                if route == "add":
                    k += 1
                    rid = mem.add(**turn(rng, number, k))
                    with load.lock:
                        load.acknowledged[memory].append(rid)
                elif route == "retrieve":
                    query = " ".join(rng.choice(WORDS) for _ in range(4)) + "?"
                    last = mem.retrieve(query)["id"]
                else:
                    mem.feedback(last, reward=round(rng.random(), 3))
            except MemoryServerError as err:
                error = str(err.status)
            except OSError as err:
                error = type(err).__name__
            load.record(route, time.perf_counter() - t0, error)


def run_load(args, url: str, token: str) -> tuple[Load, float]:
    """Seed the memories, then run the clients for ``args.seconds``; what they did and the seconds it took."""
    rng = random.Random(-1)
    for m in range(args.memories):
        with MemoryClient(url, token, f"load{m}") as mem:
            for start in range(0, args.seed_records, 500):
                batch = [turn(rng, -1, k) for k in range(start, min(start + 500, args.seed_records))]
                mem.add_many(batch)
    load = Load()
    start = time.monotonic()
    deadline = start + args.seconds
    threads = [
        threading.Thread(target=client_loop, args=(args, url, token, n, deadline, load), daemon=True)
        for n in range(args.clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(args.seconds + args.timeout + 30)
    return load, time.monotonic() - start


def verify_writes(args, url: str, token: str, server: subprocess.Popen, root: Path, load: Load) -> dict:
    """Every acknowledged id in the server's count while it runs, and in each memory reopened after it stopped."""
    served = {}
    for m in range(args.memories):
        with MemoryClient(url, token, f"load{m}") as mem:
            served[f"load{m}"] = mem.stats()["records"]
    server.send_signal(signal.SIGTERM)
    log = server.communicate(timeout=120)[0]
    out = {"server_exit": server.returncode, "memories": {}}
    for name, ids in load.acknowledged.items():
        with Memory.open(root / "memories" / name, encoder=args.encoder, readonly=True) as mem:
            held = set(mem.graph.node_ids)
            out["memories"][name] = {
                "acknowledged_adds": len(ids),
                "records_expected": len(ids) + args.seed_records,
                "records_served": served[name],
                "records_reopened": len(mem),
                "acknowledged_ids_missing": len(set(ids) - held),
                "integrity_problems": mem.integrity(),
            }
    out["writes_acknowledged"] = sum(len(ids) for ids in load.acknowledged.values())
    out["writes_lost"] = sum(m["acknowledged_ids_missing"] for m in out["memories"].values())
    if server.returncode != 0:
        out["server_log_tail"] = log[-2000:]
    return out


def report(args, load: Load, elapsed: float, writes: dict, load_start) -> dict:
    n = sum(len(v) for v in load.seconds.values()) + sum(sum(c.values()) for c in load.errors.values())
    routes = {}
    for route in sorted(set(load.seconds) | set(load.errors)):
        done = load.seconds.get(route, [])
        routes[route] = {"requests_per_s": len(done) / elapsed, **latency_summary(done)}
    return {
        "command": shlex.join(["python", "scripts/benchmarks/bench_serve_load.py", *sys.argv[1:]]),
        "note": args.note,
        "machine": {"cpus": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")},
        "settings": {
            k: getattr(args, k)
            for k in ("clients", "seconds", "memories", "encoder", "add_share", "feedback_share", "seed_records")
        },
        "load_average_at_start": load_start,
        "load_average_at_end": os.getloadavg(),
        "elapsed_s": elapsed,
        "requests": n,
        "requests_per_s": n / elapsed,
        "routes": routes,
        "errors": {route: dict(c) for route, c in load.errors.items()},
        **writes,
    }


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (threads, one connection each)")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the clients run (at most 600)")
    ap.add_argument("--memories", type=int, default=1, help="memories the clients share (client i uses i mod n)")
    ap.add_argument("--encoder", default="hashing", help="graph.encoder of the server (hashing or minilm)")
    ap.add_argument("--add-share", type=float, default=0.5, help="share of requests that add one turn")
    ap.add_argument("--feedback-share", type=float, default=0.1, help="share that rate the client's last retrieval")
    ap.add_argument("--seed-records", type=int, default=200, help="records in each memory before the clock starts")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds one request may take")
    ap.add_argument("--note", default="", help="what else ran on the machine (kept in the report)")
    ap.add_argument("--out", default=None, help="the JSON report (e.g. docs/results/serve_load.json)")
    return ap


def work(args: argparse.Namespace) -> int:
    """Serve, load, verify the writes and report; 1 when a write was lost or a memory fails its integrity check."""
    if not (1 <= args.clients <= 256 and 0 < args.seconds <= 600 and 1 <= args.memories <= args.clients):
        raise ValueError("--clients in [1, 256], --seconds in (0, 600], --memories in [1, clients]")
    token, load_start = secrets.token_urlsafe(24), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        server, url = start_server(Path(tmp), args.encoder, token)
        try:
            load, elapsed = run_load(args, url, token)
            writes = verify_writes(args, url, token, server, Path(tmp), load)
        finally:
            if server.poll() is None:
                server.kill()
        result = report(args, load, elapsed, writes, load_start)
    for route, row in result["routes"].items():
        rate, p50, p99 = row["requests_per_s"], row["p50_ms"], row["p99_ms"]
        print(f"{route:<9} {rate:8.1f} req/s  p50 {p50:7.2f} ms  p99 {p99:7.2f} ms")
    print(f"all       {result['requests_per_s']:8.1f} req/s  errors {result['errors'] or 'none'}")
    print(f"writes acknowledged {result['writes_acknowledged']}, lost {result['writes_lost']}")
    if args.out:
        print(f"written to {write_json(args.out, result)}")
    return int(bool(result["writes_lost"] or any(m["integrity_problems"] for m in result["memories"].values())))


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
