"""The experiment cache: artifacts found by fingerprint, a cache another dotcat made; the report
folder's files, written atomically."""

from __future__ import annotations

import json
import logging
import types

import pytest

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


def test_a_report_that_fails_half_written_leaves_the_previous_one_whole(tmp_path):
    # A write that fails once the file is open (here: text UTF-8 cannot encode) must leave the
    # previous report.md as it was, not an emptied or truncated one, and no temporary file.
    from dotcat.experiment.report import REPORT_NAME, write_outputs

    (tmp_path / REPORT_NAME).write_text("the previous report\n", encoding="utf-8")
    result = types.SimpleNamespace(output=tmp_path, files={})
    with pytest.raises(UnicodeEncodeError):
        write_outputs(result, {"systems": {}}, "# new\n" + "x" * 65536 + "\ud800")
    assert (tmp_path / REPORT_NAME).read_text(encoding="utf-8") == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "results.json"]
    write_outputs(result, {"systems": {}}, "# new\n")
    assert (tmp_path / REPORT_NAME).read_text(encoding="utf-8") == "# new\n"
    assert result.files[REPORT_NAME] == tmp_path / REPORT_NAME
