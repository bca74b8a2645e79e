"""Builders are linear in the text: a 1 MB turn builds in seconds, and a field above the maximum is one error line.

Times are CPU seconds (``time.process_time``, and a ``SIGPROF`` timer to stop a run that overruns): on a shared
machine they do not grow while other processes hold the cores, as wall time does. The growth ratios are timed on
this thread with the garbage collector paused, so a full collection of the test process's heap (its size, not the
text's) cannot land in one side of a ratio.
"""

import gc
import json
import random
import re
import signal
import sys
import time
from contextlib import contextmanager

import pytest

from graphmem.builders import DataConfig, GraphConfig, config_hash, reuse_or_build
from graphmem.builders.entities import CueEntityExtractor
from graphmem.builders.passages import strip_parenthetical
from graphmem.builders.registry import load_units
from graphmem.builders.sentences import split_sentences
from graphmem.builders.units import TextSizeError
from graphmem.datasets import data_file, load_locomo
from graphmem.index.embed import HashingEncoder
from tests import script_runner
from tests.one_line_errors import error_line, run_script

MB = 1_000_000


@contextmanager
def deadline(seconds: float):
    """Fail the block once it has used ``seconds`` of CPU (a quadratic builder would otherwise run for minutes)."""

    def stop(signum, frame):
        raise TimeoutError(f"still running after {seconds:.1f} CPU seconds")

    previous = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@pytest.fixture(scope="module")
def dialogue() -> str:
    """The first LoCoMo conversation's turns, joined: real names, capitals, punctuation and numbers."""
    convs, _, _ = load_locomo(data_file("locomo/locomo_dev8.json"))
    return " ".join(t.text for t in convs[0].turns)


def text_of(dialogue: str, chars: int) -> str:
    return ((dialogue + " ") * (chars // len(dialogue) + 1))[:chars]


def locomo_file(tmp_path, turn: str):
    """A LoCoMo file of one conversation whose second turn is ``turn``."""
    record = {
        "sample_id": "big",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bob, how was Paris?"},
                {"speaker": "Bob", "dia_id": "D1:2", "text": turn},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "Sounds great. See you in Rome."},
            ],
        },
        "qa": [{"question": "Where did Bob go?", "answer": "Paris", "evidence": ["D1:2"], "category": 4}],
    }
    path = tmp_path / "locomo_big.json"
    path.write_text(json.dumps([record]))
    return path


def best_of(rounds: int, fn, limit: float) -> tuple[float, object]:
    """This thread's CPU seconds for the fastest of ``rounds`` calls of ``fn()``, each stopped after ``limit``
    process CPU seconds, and its result. The collector is paused while a call runs."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            with deadline(limit):
                t = time.thread_time()
                out = fn()
                best = min(best, time.thread_time() - t)
    finally:
        gc.enable()
    return best, out


def test_a_1mb_turn_builds_in_seconds(tmp_path, dialogue):
    path = locomo_file(tmp_path, text_of(dialogue, MB))
    data, graph = DataConfig(name="locomo", file=str(path)), GraphConfig(encoder="hashing", cache_dir=str(tmp_path))
    start = time.process_time()
    with deadline(10.0):
        graphset, status = reuse_or_build(data, graph, tmp_path / "set", progress=False)
    took = time.process_time() - start
    assert status == "built" and took < 10.0, took
    g = graphset.graphs["big"]
    assert g.num_nodes == 3 and len(g.texts[1]) == len("Bob: ") + MB and g.num_edges > 0


def test_extraction_and_sentence_splitting_grow_linearly(dialogue):
    """10x the text takes well under 30x the time (a quadratic pass takes about 100x)."""
    extract = CueEntityExtractor().extract
    small, big = text_of(dialogue, MB // 10), text_of(dialogue, MB)
    t_small, _ = best_of(3, lambda: extract([small]), 30.0)
    t_big, (entities,) = best_of(2, lambda: extract([big]), 30 * t_small + 5.0)
    assert t_big < 30 * t_small and entities, (t_small, t_big)

    split = split_sentences.__wrapped__  # uncached: each call segments the text
    small, big = text_of(dialogue, 20_000), text_of(dialogue, 200_000)
    t_small, few = best_of(2, lambda: split(small), 30.0)
    t_big, pieces = best_of(1, lambda: split(big), 30 * t_small + 5.0)
    assert t_big < 30 * t_small, (t_small, t_big)
    assert len(pieces) > 9 * len(few) and max(map(len, pieces)) < 2_000


def test_a_long_passage_with_sentence_nodes_builds_in_seconds(tmp_path, dialogue):
    raw = json.loads(data_file("musique/musique_ans_50.json").read_text())[0]
    raw["paragraphs"][0]["paragraph_text"] = text_of(dialogue, 100_000)
    raw["paragraphs"][1]["title"] = "Paris" + " " * 100_000 + "France (city)"  # a long run of spaces
    path = tmp_path / "musique_big.json"
    path.write_text(json.dumps([raw]))
    cfg = GraphConfig(encoder="hashing", sentence_nodes=True)
    with deadline(10.0):
        (unit,), _, _ = load_units("musique", path, cfg)
        g = unit.build(HashingEncoder().encode(unit.texts), cfg, CueEntityExtractor())
    assert g.num_nodes == len(unit.texts) > 100


def test_strip_parenthetical_is_the_regex_it_replaces():
    regex = re.compile(r"\s*\([^)]*\)\s*$")
    rng = random.Random(0)
    alphabet = ["a", "b", " ", "(", ")", "\n", "\t", "\u00a0", "x "]
    for _ in range(50_000):
        title = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert strip_parenthetical(title) == (regex.sub("", title).strip() or title), repr(title)
    assert strip_parenthetical("Up (2009 film)") == "Up" and strip_parenthetical("(film)") == "(film)"
    with deadline(1.0):
        assert strip_parenthetical("a" + " " * MB + "b") == "a" + " " * MB + "b"


def test_a_turn_above_the_maximum_is_one_error_line(tmp_path):
    path = locomo_file(tmp_path, "word " * (MB // 5) + "!")
    proc = run_script(
        "build_graph.py",
        "data=locomo",
        f"data.file={path}",
        "graph.encoder=hashing",
        f"graphset_dir={tmp_path / 'sets'}",
        "plot=false",
        tmp_path=tmp_path,
    )
    line = error_line(proc)
    assert str(path) in line and "record 0 (sample_id 'big')" in line and "dia_id 'D1:2'" in line, line
    assert "field 'text': 1,000,001 characters" in line and "graph.max_text_chars=1,000,000" in line, line
    assert not (tmp_path / "sets").exists() or not any((tmp_path / "sets").rglob("manifest.json"))


def test_passage_fields_above_the_maximum_are_refused(tmp_path):
    cfg = GraphConfig(encoder="hashing", max_text_chars=5_000)
    raw = json.loads(data_file("musique/musique_ans_50.json").read_text())[:2]
    raw[1]["paragraphs"][3]["paragraph_text"] = "x" * 5_001
    path = tmp_path / "musique.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(
        TextSizeError, match=rf"record 1 \(id '{raw[1]['id']}'\): paragraphs\[3\]: field 'paragraph_text'"
    ):
        load_units("musique", path, cfg, pooled=True)
    load_units("musique", path, cfg, limit=1)  # the long passage is not in the first record

    line = data_file("hotpotqa/hotpot_dev_distractor_200.jsonl").read_text().splitlines()[0]
    record = json.loads(line)
    title, sentences = record["context"][2]
    record["context"][2][1] = sentences + ["y" * 5_000]
    path = tmp_path / "hotpot.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(
        TextSizeError, match=re.escape(f"record 0 (_id '{record['_id']}'): context paragraph {title!r}")
    ):
        load_units("hotpotqa", path, cfg)


def test_the_maximum_is_checked_and_not_hashed():
    with pytest.raises(ValueError, match="max_text_chars must be a positive integer"):
        GraphConfig(max_text_chars=0)
    data = DataConfig(name="locomo")
    assert config_hash(data, GraphConfig(max_text_chars=10), "s") == config_hash(data, GraphConfig(), "s")


def test_build_scaling_benchmark_writes_its_results(tmp_path):
    script = "scripts/benchmarks/build_scaling.py"
    out, png = tmp_path / "build_scaling.json", tmp_path / "build_scaling.png"
    proc = script_runner.run([sys.executable, script, "--sizes", "3000", "1000", "--out", str(out), "--plot", str(png)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    for rows in report["series"].values():
        assert [r["chars"] for r in rows] == [1000, 3000] and all(r["build_s"] > 0 and r["nodes"] >= 3 for r in rows)
    assert report["max_text_chars"] == GraphConfig().max_text_chars and png.stat().st_size > 0
    assert error_line(script_runner.run([sys.executable, script, "--sizes", "0", "--out", str(out)])).startswith(
        "error: --sizes must be positive"
    )
