"""The judgements file: each grade saved as it is given, by whom and when; undo; refusals."""

from __future__ import annotations

import sqlite3

import pytest

from dotcat.errors import DotcatError
from dotcat.judging import JudgmentStore, Topic


def test_a_grade_is_on_disk_when_judge_returns(pooled_store):
    store = pooled_store
    doc = store.pooled("q1")[0].doc_id
    saved = store.judge("q1", doc, "ann", 2)
    # Another connection (another process would do the same) reads it at once.
    with sqlite3.connect(store.path) as other:
        rows = other.execute("SELECT qid, doc_id, assessor, grade, time FROM judgments").fetchall()
    assert rows == [("q1", doc, "ann", 2, saved.time)]
    assert saved.time.endswith("Z") and saved.time[:4].isdigit()
    with sqlite3.connect(store.path) as other:
        assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_the_latest_grade_stands_and_undo_withdraws_it(pooled_store):
    store = pooled_store
    a, b = (e.doc_id for e in store.pooled("q1")[:2])
    store.judge("q1", a, "ann", 1)
    store.judge("q1", a, "ann", 3)  # changed her mind
    store.judge("q1", b, "ann", None)  # skipped
    store.judge("q1", a, "bob", 0)
    assert {(j.doc_id, j.assessor, j.grade) for j in store.current()} == {
        (a, "ann", 3), (b, "ann", None), (a, "bob", 0)
    }  # fmt: skip
    progress = store.progress("ann")["q1"]
    assert (progress.judged, progress.skipped, progress.grades) == (1, 1, {3: 1})
    undone = store.undo("ann")
    assert (undone.doc_id, undone.grade) == (b, None)
    undone = store.undo("ann")
    assert (undone.doc_id, undone.grade) == (a, 3)
    assert [(j.doc_id, j.grade) for j in store.current("ann")] == [(a, 1)]  # the earlier one
    assert len(store.log()) == 4  # nothing is deleted
    assert store.undo("nobody") is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s, d: s.judge("q1", d, "ann", 4), "grade 4 is outside the scale 0-3"),
        (lambda s, d: s.judge("q1", d, "ann", -1), "grade -1 is outside the scale 0-3"),
        (lambda s, d: s.judge("q9", d, "ann", 1), "unknown query id 'q9'"),
        (lambda s, d: s.judge("q1", "zzz", "ann", 1), "document 'zzz' is not in the pool"),
        (lambda s, d: s.judge("q1", d, " ", 1), "assessor name"),
    ],
)
def test_bad_judgements_are_refused_in_one_line(pooled_store, call, message):
    doc = pooled_store.pooled("q1")[0].doc_id
    with pytest.raises(DotcatError, match=message) as error:
        call(pooled_store, doc)
    assert "\n" not in str(error.value)
    assert pooled_store.log() == []


def test_a_query_keeps_the_text_it_was_judged_for(pooled_store, tmp_path):
    with pytest.raises(DotcatError, match="already pooled with another text"):
        pooled_store.add_topics([Topic("q1", "something else")])
    assert pooled_store.add_topics([Topic("q1", pooled_store.topic("q1").text)]) == []
    assert pooled_store.new_topic_id() == "page-1"
    with pytest.raises(DotcatError, match="no judgements file"):
        JudgmentStore(tmp_path / "missing.sqlite")
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(DotcatError, match="not a judgements file"):
        JudgmentStore(tmp_path / "junk.sqlite")


def test_a_repeated_or_late_request_never_lands_on_another_document(pooled_store):
    """A page names each request (its client, a rising number): sent again after a lost
    answer it is stored once; overtaken by a newer grade of the same document it changes
    nothing; its number reused for another judgement is refused."""
    store = pooled_store
    a, b = (e.doc_id for e in store.pooled("q1")[:2])
    first = store.judge("q1", a, "ann", 2, client="tab", seq=1)
    assert store.judge("q1", a, "ann", 2, client="tab", seq=1) == first  # the answer was lost
    newer = store.judge("q1", a, "ann", 0, client="tab", seq=3)
    assert store.judge("q1", a, "ann", 3, client="tab", seq=2) == newer  # late: not stored
    assert store.judge("q1", a, "ann", 2, client="tab", seq=1) == newer  # late, and repeated
    store.judge("q1", b, "ann", 1, client="tab", seq=4)
    for doc, grade in ((a, 1), (b, 3)):  # request 4 again, for another judgement
        with pytest.raises(DotcatError, match="request 4 of client 'tab' was saved for another"):
            store.judge("q1", doc, "ann", grade, client="tab", seq=4)
    assert {(j.doc_id, j.grade) for j in store.current("ann")} == {(a, 0), (b, 1)}
    assert [(j.doc_id, j.grade, j.seq) for j in store.log()] == [(a, 2, 1), (a, 0, 3), (b, 1, 4)]
    other = store.judge("q1", a, "ann", 3, client="tab2", seq=1)  # another page load
    assert (other.grade, other.client) == (3, "tab2")
    undone = store.undo("ann", client="tab2", seq=2)
    assert store.undo("ann", client="tab2", seq=2) == undone == other  # withdrew one row only
    assert {(j.doc_id, j.grade) for j in store.current("ann")} == {(a, 0), (b, 1)}
    with pytest.raises(DotcatError, match="client and seq name a request together"):
        store.judge("q1", a, "ann", 1, seq=5)
    with pytest.raises(DotcatError, match="seq -1: a request number is a whole number"):
        store.judge("q1", a, "ann", 1, client="tab", seq=-1)


def test_a_file_from_before_request_numbers_opens_and_keeps_its_judgements(pooled_store):
    store = pooled_store
    doc = store.pooled("q1")[0].doc_id
    store.judge("q1", doc, "ann", 2)
    path = store.path
    store.close()
    with sqlite3.connect(path) as old:  # the judgments table as its first files had it
        old.execute("DROP INDEX judgments_request")
        for column in ("client", "seq", "undone_by"):
            old.execute(f"ALTER TABLE judgments DROP COLUMN {column}")
    with JudgmentStore(path) as reopened:
        assert [(j.doc_id, j.grade, j.client) for j in reopened.current()] == [(doc, 2, None)]
        again = reopened.judge("q1", doc, "ann", 3, client="tab", seq=1)
        assert reopened.judge("q1", doc, "ann", 3, client="tab", seq=1) == again
        assert len(reopened.log()) == 2


def test_a_judgements_file_at_the_file_size_limit_is_one_line_naming_it(pooled_store, tmp_path):
    import resource
    import signal

    from dotcat.errors import DiskFullError

    store, doc = pooled_store, pooled_store.pooled("q1")[0].doc_id
    before = len(store.log())
    files = [store.path.with_name(store.path.name + end) for end in ("", "-wal", "-shm")]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it: EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (max(f.stat().st_size for f in files), hard))
    try:
        with pytest.raises(DiskFullError, match=rf"file too large writing {store.path}"):
            store.judge_many([("q1", doc, f"a{i}", 1) for i in range(5000)], "import")
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, hard))  # a new file's first pages
        with pytest.raises(DiskFullError, match="file too large writing .*new.sqlite"):
            JudgmentStore(tmp_path / "new.sqlite", create=True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)
    assert len(store.log()) == before  # nothing half saved
