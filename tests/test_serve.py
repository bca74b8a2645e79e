"""The memory server (graphmem.serve, scripts/serve.py): a real uvicorn on 127.0.0.1 and real HTTP requests. Records
are added, retrieved, rated, read and forgotten; a request without the token, into another namespace, over the
size limits, under a path-like name or with bad input is refused with one JSON line and its status."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
import uvicorn  # noqa: E402

from graphmem import Memory  # noqa: E402
from graphmem.serve import MemoryClient, MemoryServerError, ServeLimits, make_app  # noqa: E402
from tests import script_runner  # noqa: E402
from tests.one_line_errors import error_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "test-token-0123456789"
TURNS = [
    dict(text="I adopted a greyhound called Pixel last May.", speaker="Alice", session=1, id="a1", time=1000.0),
    dict(text="What a lovely name! Does Pixel like the beach?", speaker="Bob", session=1, id="b1", time=1001.0),
    dict(text="Yes, because the sand is soft, Pixel runs for hours.", speaker="Alice", session=1, id="a2", time=1002.0),
    dict(text="My sister Carmen lives in Lisbon.", speaker="Bob", session=2, id="b2", time=9000.0),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A uvicorn server over memories under a fresh root, on a free port of 127.0.0.1, in a thread."""
    root = tmp_path_factory.mktemp("memories")
    limits = ServeLimits(max_body_bytes=16_384, max_records=20, max_memories=8)
    app = make_app(root, token=TOKEN, graph={"encoder": "hashing"}, limits=limits)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", root
    uv.should_exit = True
    thread.join(30)
    for folder in (p for p in root.iterdir() if p.is_dir()):  # every memory was closed: its writer lock is free
        Memory.open(folder, encoder="hashing").close()


def client(server, memory: str, token: str | None = TOKEN) -> MemoryClient:
    return MemoryClient(server[0], token=token, memory=memory)


def raw(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None, token=TOKEN):
    """One request as sent (no client-side quoting or JSON): ``(status, the JSON answer)``."""
    port = int(server[0].rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    head = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    chunked = body is not None and not isinstance(body, bytes)
    conn.request(method, path, body=body, headers={**head, **(headers or {})}, encode_chunked=chunked)
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    return response.status, answer


def assert_error(status_answer, status: int, message: str) -> None:
    got, answer = status_answer
    assert got == status and set(answer) == {"error"}, (got, answer)
    assert message in answer["error"] and "\n" not in answer["error"] and "Traceback" not in answer["error"]


def test_add_retrieve_feedback_get_revise_and_forget_over_http(server):
    mem = client(server, "alice")
    assert mem.add(**TURNS[0]) == "a1" and mem.add_many(TURNS[1:]) == ["b1", "a2", "b2"]
    r = mem.retrieve("Where does Carmen live?")
    first = r["results"][0]
    assert (first["id"], first["text"]) == ("b2", "Bob: My sister Carmen lives in Lisbon.")
    assert isinstance(first["score"], float) and r["policy"] == "hybrid" and r["trace"]["loaded"]
    assert len(mem.retrieve("Where does Carmen live?", limit=2)["results"]) == 2
    walk = mem.retrieve("Does Pixel like the beach?", policy="beta_bfs", budget={"max_entries": 1})
    assert walk["trace"]["traversed"] and len(walk["trace"]["entries"]) == 1
    assert walk["trace"]["edges_considered"] >= len(walk["trace"]["traversed"]) and r["trace"]["edges_considered"] == 0
    src, dst, _ = walk["trace"]["traversed"][0]
    entry = mem.feedback(walk, helpful=[dst])
    assert entry["edges_updated"] >= 1 and mem.feedback(walk["id"], reward=0.5)["seq"] == entry["seq"] + 1
    assert mem.feedback(walk, labels=[(src, dst, "harmful", 0.5)])["edges_updated"] >= 1
    stats = mem.stats()
    assert stats["records"] == 4 and stats["feedback"] == 3 and stats["name"] == "alice"
    assert mem.get("a1")["text"] == "Alice: I adopted a greyhound called Pixel last May."
    assert mem.revise("a1", "I adopted a whippet called Comet.")["text"] == "Alice: I adopted a whippet called Comet."
    assert mem.get(mem.add("Alice's dog is fast.", key="dog speed"))["key"] == "dog speed"
    assert mem.forget("b2") == 1
    with pytest.raises(MemoryServerError) as err:
        mem.get("b2")
    assert err.value.status == 404
    assert "b2" not in [x["id"] for x in mem.retrieve("Where does Carmen live?")["results"]]
    assert mem.health()["status"] == "ok"


def test_a_record_id_with_slashes_and_hashes_round_trips(server):
    mem = client(server, "ids")
    rid = "conv-26/D1:3#x y"
    assert mem.add("An id with a slash, a hash and a space.", id=rid) == rid
    assert mem.get(rid)["id"] == rid and mem.forget(rid) == 1


ROUTES = [
    ("GET", "/v1/health", None),
    ("POST", "/v1/memories/alice/records", b'{"text": "sneaked in"}'),
    ("POST", "/v1/memories/alice/retrieve", b'{"query": "Carmen"}'),
    ("POST", "/v1/memories/alice/feedback", b'{"retrieval_id": "x", "reward": 1.0}'),
    ("GET", "/v1/memories/alice", None),
    ("GET", "/v1/memories/alice/records/a1", None),
    ("DELETE", "/v1/memories/alice/records/a1", None),
    ("POST", "/v1/memories/newcomer/records", b'{"text": "sneaked in"}'),
]


@pytest.mark.parametrize("method, path, body", ROUTES)
def test_every_route_needs_the_token(server, method, path, body):
    assert_error(raw(server, method, path, body, token=None), 401, "missing bearer token")
    assert_error(raw(server, method, path, body, token="wrong-token"), 401, "invalid bearer token")
    scheme = raw(server, method, path, body, token=None, headers={"Authorization": f"Basic {TOKEN}"})
    assert_error(scheme, 401, "invalid bearer token")
    assert not (server[1] / "newcomer").exists()


def test_one_namespace_never_reads_another(server):
    alice, bob = client(server, "secrets"), client(server, "bob")
    alice.add("The vault code is walrus tango.", id="code")
    bob.add("Bob keeps a diary of his walks.", id="diary")
    r = bob.retrieve("What is the vault code?")
    assert [x["id"] for x in r["results"]] == ["diary"] and "walrus" not in json.dumps(r)
    for call, status in [
        (lambda: bob.get("code"), 404),
        (lambda: bob.forget("code"), 404),
        (lambda: bob.feedback(alice.retrieve("vault code"), reward=1.0), 404),  # a retrieval id of another memory
        (lambda: client(server, "carol").stats(), 404),
        (lambda: client(server, "carol").retrieve("vault code"), 404),
    ]:
        with pytest.raises(MemoryServerError) as err:
            call()
        assert err.value.status == status
    assert alice.get("code")["text"] == "The vault code is walrus tango." and not (server[1] / "carol").exists()


def test_an_oversized_body_or_batch_is_413_and_adds_nothing(server):
    big = json.dumps({"text": "x" * 20_000}).encode()
    assert_error(raw(server, "POST", "/v1/memories/sizes/records", big), 413, "over max_body_bytes (16,384 bytes)")
    chunks = iter([big[:8000], big[8000:]])  # no Content-Length: counted as it arrives
    status = raw(server, "POST", "/v1/memories/sizes/records", chunks, headers={"Transfer-Encoding": "chunked"})
    assert_error(status, 413, "over max_body_bytes")
    batch = json.dumps({"records": [{"text": f"turn {i}"} for i in range(21)]}).encode()
    assert_error(raw(server, "POST", "/v1/memories/sizes/records", batch), 413, "21 records in one request")
    assert not (server[1] / "sizes").exists()


@pytest.mark.parametrize(
    "name", ["..", "..%2F..%2Fescaped", "%2E%2E", ".hidden", "a%2Fb", "x" * 121, "%2Fabs", "-dash", "sp%20ace"]
)
def test_a_path_like_or_unsafe_name_is_400(server, name):
    assert_error(raw(server, "POST", f"/v1/memories/{name}/records", b'{"text": "x"}'), 400, "memory name=")
    assert_error(raw(server, "GET", f"/v1/memories/{name}"), 400, "cannot be used")
    assert not (server[1].parent / "escaped").exists() and not (server[1] / "escaped").exists()


BAD = [
    ("POST", "records", {"text": ""}, 400, "field 'text' must be a non-empty string"),
    ("POST", "records", {"text": "hi", "colour": "red"}, 400, "field 'colour': Extra inputs are not permitted"),
    ("POST", "records", {"text": "hi", "time": "noon"}, 400, "field 'time': Input should be a valid number"),
    ("POST", "records", {"records": []}, 400, "field 'records': List should have at least 1 item"),
    ("POST", "records", {"speaker": "Al"}, 400, "give a record's 'text', or 'records'"),
    ("POST", "records", {"text": "hi", "id": "k1"}, 409, "id 'k1' is already in the memory"),
    ("POST", "records", [1, 2], 400, "request body: Input should be a valid dictionary"),
    ("POST", "retrieve", {"query": "  "}, 400, "field 'query' must be a non-empty string"),
    ("POST", "retrieve", {"query": "q", "policy": "os.path"}, 400, "'os.path' is not a registered policy"),
    ("POST", "retrieve", {"query": "q", "budget": {"max_nodes": 0}}, 400, "field 'budget.max_nodes'"),
    ("POST", "feedback", {"retrieval_id": "gone", "reward": 1.0}, 404, "retrieval 'gone' is unknown"),
    ("GET", "records/nope", None, 404, "id 'nope' is not a record of memory 'bad'"),
    ("DELETE", "records/nope", None, 404, "id 'nope' is not a record"),
    ("PATCH", "records/k1", {"text": "x"}, 405, "Method Not Allowed"),
]


@pytest.mark.parametrize("method, route, body, status, message", BAD)
def test_bad_input_is_one_json_line_with_its_status(server, method, route, body, status, message):
    _seed(server)
    data = None if body is None else json.dumps(body).encode()
    assert_error(raw(server, method, f"/v1/memories/bad/{route}", data), status, message)


def _seed(server) -> None:
    """Memory ``bad`` with its one record ``k1``."""
    try:
        client(server, "bad").add("the one record of this memory", id="k1")
    except MemoryServerError as err:
        assert err.status == 409


def test_feedback_input_and_broken_json_are_one_line(server):
    _seed(server)
    r = client(server, "bad").retrieve("the record")
    for body, message in [
        ({"retrieval_id": r["id"], "reward": 2.0}, "field 'reward' must be a number in [0, 1]"),
        ({"retrieval_id": r["id"]}, "exactly one of 'reward'"),
        ({"retrieval_id": r["id"], "reward": 1.0, "helpful": ["k1"]}, "exactly one of 'reward'"),
        ({"retrieval_id": r["id"], "labels": [["k1", "k1", "great", 1.0]]}, "label 'great' is not one of"),
        ({"retrieval_id": r["id"], "labels": [["k1", "k1"]]}, "labels[0] must be (source, target, label, confidence)"),
    ]:
        assert_error(raw(server, "POST", "/v1/memories/bad/feedback", json.dumps(body).encode()), 400, message)
    assert_error(raw(server, "POST", "/v1/memories/bad/records", b'{"text": '), 400, "request body is not valid JSON")
    assert_error(raw(server, "POST", "/v1/memories/bad/records"), 400, "request body is missing")
    assert_error(raw(server, "GET", "/v2/nothing"), 404, "Not Found: GET /v2/nothing")


def test_a_memory_another_process_writes_is_409(server):
    with Memory.open(server[1] / "taken", encoder="hashing"):
        with pytest.raises(MemoryServerError) as err:
            client(server, "taken").add("the server cannot take the writer")
    assert err.value.status == 409 and "has a writer already" in err.value.message


def _script(*overrides: str, tmp_path: Path, token: str | None = TOKEN):
    env = {k: v for k, v in os.environ.items() if k != "GRAPHMEM_TOKEN"}
    env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **({"GRAPHMEM_TOKEN": token} if token else {})})
    cmd = [sys.executable, "scripts/serve.py", f"hydra.run.dir={tmp_path / 'hydra'}", "graph.encoder=hashing"]
    return cmd + list(overrides), env


@pytest.mark.parametrize(
    "overrides, token, message",
    [
        ([], None, "auth=token needs the bearer token in $GRAPHMEM_TOKEN"),
        (["auth=none", "host=0.0.0.0"], None, "auth=none is allowed only with host=127.0.0.1"),
        (["port=70000"], TOKEN, "port=70000: must be an integer in [0, 65535]"),
    ],
)
def test_the_script_refuses_to_start_without_a_token_in_one_line(tmp_path, overrides, token, message):
    cmd, env = _script(f"memory_root={tmp_path / 'm'}", *overrides, tmp_path=tmp_path, token=token)
    assert message in error_line(script_runner.run(cmd, cwd=ROOT, env=env, timeout=120))
    assert not (tmp_path / "m").exists()


def test_the_script_serves_and_closes_its_memories_when_stopped(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd, env = _script(f"memory_root={tmp_path / 'm'}", f"port={port}", tmp_path=tmp_path)
    proc = script_runner.ScriptProcess(cmd, cwd=ROOT, env=env)
    mem, deadline = MemoryClient(f"http://127.0.0.1:{port}", token=TOKEN, memory="agent"), time.monotonic() + 60
    try:
        while True:
            try:
                assert mem.health()["status"] == "ok"
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        assert mem.add("Served by scripts/serve.py.", id="s1") == "s1"
    finally:
        mem.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(60)
    assert proc.returncode == 0 and "Application shutdown complete" in err and "Traceback" not in err, err[-2000:]
    with Memory.open(tmp_path / "m" / "agent", encoder="hashing") as again:  # closed: the writer lock is free
        assert again.graph.node_ids == ["s1"]
