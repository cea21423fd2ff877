"""The experiment cache: artifacts found by fingerprint, and a cache another dotcat made."""

from __future__ import annotations

import json
import logging

from dotcat import __version__
from dotcat.experiment.artifacts import Cache, digest


def test_a_committed_artifact_is_found_and_carries_the_version(tmp_path):
    cache = Cache(tmp_path)
    run = cache.run_path(digest({"kind": "first_stage", "k": 10}))
    assert cache.lookup("first_stage", run) is None
    run.parent.mkdir(parents=True)
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    cache.commit("first_stage", run, 1.5, {"kind": "first_stage"}, {"queries": 1})
    found = cache.lookup("first_stage", run)
    assert found is not None and found.reused and found.details == {"queries": 1}
    record = json.loads(run.with_name(run.name.split(".")[0] + ".json").read_text())
    assert record["dotcat"] == __version__


def test_a_cache_made_by_another_version_says_so_once(tmp_path, caplog):
    old = tmp_path / "runs" / ("0" * 64 + ".json")
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"kind": "first_stage", "seconds": 1.0}))  # before 0.3: no version
    (tmp_path / "runs" / ("0" * 64 + ".trec.passages.json")).write_text("{}")  # not a record
    cache = Cache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="dotcat.experiment.artifacts"):
        for key in ("a", "b"):
            assert cache.lookup("first_stage", cache.run_path(digest({"kind": key}))) is None
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1
    assert "made by dotcat < 0.3" in notes[0] and "computed again once" in notes[0]


def test_a_cache_of_this_version_says_nothing(tmp_path, caplog):
    cache = Cache(tmp_path)
    run = cache.run_path(digest({"kind": "x"}))
    run.parent.mkdir(parents=True)
    run.write_text("")
    cache.commit("first_stage", run, 0.1, {"kind": "x"})
    with caplog.at_level(logging.WARNING, logger="dotcat.experiment.artifacts"):
        assert cache.lookup("first_stage", cache.run_path(digest({"kind": "y"}))) is None
    assert not caplog.records
