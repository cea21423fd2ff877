"""The filter language: parsed once, checked against an index's fields, run as SQL over the
doc store's field table; every error one line naming the column and the token."""

from __future__ import annotations

import unicodedata

import pytest

from dotcat.index.docstore import DocStore
from dotcat.index.fields import field_rows
from dotcat.search.filters import Both, Comparison, Either, FilterError, Not, parse_filter

DOCS = {
    "t1": {
        "product": "billing",
        "updated": "2025-02-03",
        "size": 120,
        "tags": ["hr", "pay"],
        "path": "tickets.csv",
    },
    "t2": {
        "product": "accounts",
        "updated": "2024-11-20T10:00:00Z",
        "size": 80,
        "path": "tickets.csv",
    },
    "t3": {
        "product": "billing",
        "updated": "2024-12-01",
        "size": 300,
        "tags": ["pay"],
        "path": "projects/alpha/plan.md",
    },
    "n1": {"tags": "hr", "path": "projects/beta/notes.md", "Product line": "x"},
    "n2": {"path": "notes/other.md"},
}


def _store(path, docs: dict) -> DocStore:
    writer = DocStore(path, readonly=False)
    writer.add((pos, doc_id, "", "text") for pos, doc_id in enumerate(docs))
    writer.add_fields(
        row for pos, fields in enumerate(docs.values()) for row in field_rows(pos, fields)
    )
    writer.finish_fields()
    writer.commit()
    writer.close()
    return DocStore(path)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    reader = _store(tmp_path_factory.mktemp("filters") / "docstore.sqlite", DOCS)
    yield reader
    reader.close()


def test_text_beyond_ascii_is_compared_composed_and_contains_ignores_its_case(tmp_path):
    nfd = unicodedata.normalize("NFD", "Köln")  # as macOS writes a file name
    docs = {"c1": {"city": "Köln", "tags": [nfd]}, "c2": {"city": nfd}, "c3": {"city": "МОСКВА"}}
    store = _store(tmp_path / "docstore.sqlite", docs)
    for typed in ("Köln", nfd):
        assert admitted(store, f'city = "{typed}"') == ["c1", "c2"]
        assert admitted(store, f'city startswith "{typed[: len(typed) - 2]}"') == ["c1", "c2"]
        assert admitted(store, f'tags contains "{typed}"') == ["c1"]
    assert admitted(store, 'city contains "KÖLN"') == ["c1", "c2"]
    assert admitted(store, 'city contains "москва"') == ["c3"]


def admitted(store: DocStore, text: str) -> list[str]:
    sql, params = parse_filter(text).sql(store.field_kinds())
    ids = store.ids(store.select(sql, params).tolist())
    return sorted(ids.values())


def test_each_field_has_the_kind_of_all_its_values(store):
    kinds = {name: info.kind for name, info in store.field_kinds().items()}
    assert kinds == {
        "product": "string",
        "updated": "date",
        "size": "number",
        "tags": "list",
        "path": "string",
        "Product line": "string",
    }
    assert store.fields_of([0])[0] == DOCS["t1"]
    assert store.fields_of([3])[3]["tags"] == ["hr"]  # a list field's lone string: a list


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('product = "billing"', ["t1", "t3"]),
        ('product == "billing" and updated >= 2025-01-01', ["t1"]),
        ('product != "billing"', ["n1", "n2", "t2"]),  # no product: not equal
        ('tags contains "hr"', ["n1", "t1"]),
        ('tags = "pay"', ["t1", "t3"]),
        ('path startswith "projects/"', ["n1", "t3"]),
        ('product contains "ILL"', ["t1", "t3"]),  # text: a piece, ignoring case
        ('product in ["accounts", "none"]', ["t2"]),
        ('product not in ("accounts")', ["n1", "n2", "t1", "t3"]),
        ("size > 100 and size <= 300", ["t1", "t3"]),
        ("size in [80, 300]", ["t2", "t3"]),
        ("updated = 2024-11-20", ["t2"]),  # a date is its whole day
        ("updated <= 2024-12-01", ["t2", "t3"]),
        ("updated > 2024-12-01", ["t1"]),
        ("updated < 2024-11-20T10:00:01Z", ["t2"]),  # a date-time is its instant
        ('updated >= "2025-01-01"', ["t1"]),  # a date in quotes
        ('not tags contains "hr" and path startswith "projects/"', ["t3"]),
        ('product = "accounts" or tags contains "hr" and size > 100', ["t1", "t2"]),
        ('(product = "accounts" or tags contains "hr") and size > 100', ["t1"]),
        ('`Product line` = "x"', ["n1"]),
        ('PRODUCT = "x" OR product = "accounts"', ["t2"]),
    ],
)
def test_a_filter_admits_exactly_what_it_says(store, text, expected):
    if text.startswith("PRODUCT"):  # keywords in any case; field names as written
        with pytest.raises(FilterError, match="no field 'PRODUCT'"):
            admitted(store, text)
        return
    assert admitted(store, text) == expected


def test_and_binds_tighter_than_or_and_not_tighter_than_both():
    tree = parse_filter('a = "1" or not b = "2" and c = "3"').tree
    assert isinstance(tree, Either) and isinstance(tree.right, Both)
    assert isinstance(tree.right.left, Not) and isinstance(tree.left, Comparison)


@pytest.mark.parametrize(
    ("text", "column", "token", "words"),
    [
        ('updated >= "soon"', 12, '"soon"', "holds dates"),
        ('prodcut = "billing"', 1, "prodcut", "did you mean 'product'"),
        ("product = billing", 11, "billing", 'quote text: "billing"'),
        ('product = "billing" and (', 26, "", "expected a field name"),
        ('product = "billing" tags', 21, "tags", "expected and, or"),
        ('size > "big"', 8, '"big"', "holds numbers"),
        ("tags contains 3", 15, "3", "quote the value"),
        ('size contains "1"', 15, '"1"', "compares text"),
        ('product @ "x"', 9, "@", "unexpected character"),
        ('product = "open', 11, '"open', "closing quote"),
        ('product in "x"', 12, '"x"', "expected a list"),
        ('(product = "x"', 15, "", "')' to close"),
        ("updated > 2025-02-30", 11, "2025-02-30", "not a date"),
    ],
)
def test_every_error_is_one_line_pointing_at_the_token(store, text, column, token, words):
    with pytest.raises(FilterError) as error:
        admitted(store, text)
    e = error.value
    assert (e.column, e.token) == (column, token)
    assert words in str(e) and "\n" not in str(e)
    assert str(e).startswith(f"filter, column {column} ")


def test_a_store_without_fields_says_to_rebuild(tmp_path):
    path = tmp_path / "docstore.sqlite"
    writer = DocStore(path, readonly=False)
    writer.add([(0, "d", "", "t")])
    writer.commit()
    writer.close()
    import sqlite3

    with sqlite3.connect(path) as db:  # as an index written before fields were kept
        db.execute("DROP TABLE fields")
        db.execute("DROP TABLE field_kinds")
    old = DocStore(path)
    assert old.field_kinds() == {} and old.fields_of([0]) == {0: {}}
    with pytest.raises(FilterError, match="keeps no fields.*rebuild"):
        parse_filter('a = "b"').check(old.field_kinds())
    old.close()


def test_parsing_is_cached_and_bounded():
    assert parse_filter('a = "b"') is parse_filter('a = "b"')
    with pytest.raises(FilterError, match="empty"):
        parse_filter("  ")
    with pytest.raises(FilterError, match="more than 200 conditions"):
        parse_filter(" or ".join(['a = "b"'] * 201))


def test_a_filter_of_many_conditions_runs_and_a_deep_one_is_refused_in_one_line(store):
    sizes = [" or ".join(f"size = {n}" for n in range(80, 279)), "size = 300"]
    assert admitted(store, " or ".join(sizes)) == ["t1", "t2", "t3"]  # 200: SQLite once failed
    assert admitted(store, " and ".join(f"not size = {n}" for n in range(81, 280))) == [
        "n1", "n2", "t2", "t3"]  # fmt: skip
    deep = "(" * 40 + "size = 80" + ")" * 40
    with pytest.raises(FilterError, match="nested more than 32 deep") as error:
        admitted(store, deep)
    assert error.value.column == 33
    assert admitted(store, "not " * 31 + "size = 80") == ["n1", "n2", "t1", "t3"]


def test_integers_past_two_to_the_53_are_told_apart_and_shown_as_they_were(tmp_path):
    path = tmp_path / "docstore.sqlite"
    writer = DocStore(path, readonly=False)  # ids a double cannot hold: ...567 -> ...568
    writer.add([(0, "a", "", "t"), (1, "b", "", "t"), (2, "c", "", "t")])
    values = {0: 12345678901234567, 1: 12345678901234568, 2: 5.0}
    writer.add_fields(row for pos, v in values.items() for row in field_rows(pos, {"id": v}))
    writer.finish_fields()
    writer.commit()
    writer.close()
    store = DocStore(path)
    assert admitted(store, "id = 12345678901234567") == ["a"]
    assert admitted(store, "id in [12345678901234568, 7]") == ["b"]
    assert admitted(store, "id = 5 or id = 12345678901234568") == ["b", "c"]
    assert store.fields_of([0, 2]) == {0: {"id": 12345678901234567}, 2: {"id": 5}}
    store.close()
