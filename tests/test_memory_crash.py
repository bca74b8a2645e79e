"""A memory killed with SIGKILL during a stream of adds reopens sound, holding exactly the committed adds, and
answers as a memory that received them without a crash (scripts/reliability/memory_kills.py)."""

from __future__ import annotations

from script_loader import load_script


def test_kill_9_during_adds_loses_no_committed_add_and_answers_as_without_a_crash(tmp_path):
    kills = load_script("reliability/memory_kills")
    reported = kills.stream_and_kill(tmp_path / "m", kills=3, seed=0)
    report = kills.check(tmp_path / "m", reported, kills=3)
    assert report["stored_adds"] > 0 and report["integrity_problems"] == []
    assert report["in_arrival_order"] and report["every_reported_add_stored"]
    assert 0 <= report["committed_not_reported"] <= 3
    assert report["equal_to_an_uncrashed_memory"] and report["same_ranked_lists"] and report["ok"]
