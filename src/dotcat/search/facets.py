"""Facets: for the fields with few distinct values, how many of a query's results hold each.

A facet is what a search page lists beside its results so that one click narrows them
(``product: billing 12 · accounts 3``): a field whose values are categories, not free text or
measures. A field is one where the index holds at most :data:`FACET_VALUES` distinct values
over at least two of them (:func:`facet_fields`): string and list fields, and numbers with
that few values (a rating); never dates, paths or texts, whose values are as many as the
documents. The counts are taken over the results a query returns (:func:`count_facets`), the
same results its filter already narrowed, as Lucene's facets count the hits of a query.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

#: A field with more distinct values than this (in the whole index) is no facet.
FACET_VALUES = 20
#: The results a search page counts facets over.
FACET_DEPTH = 100
#: A file's fields that are never facets: one value per file, or a detail of how it was read.
NOT_FACETS = frozenset({"path", "size", "mtime", "encoding"})


def facet_fields(kinds: Mapping[str, Any]) -> list[str]:
    """The fields that make facets: string, list or number fields with 2 to
    :data:`FACET_VALUES` distinct values in the index (a file's :data:`NOT_FACETS` left
    out)."""
    return [
        name
        for name, info in kinds.items()
        if info.kind in ("string", "list", "number")
        and 2 <= info.distinct_values <= FACET_VALUES
        and name not in NOT_FACETS
    ]


def count_facets(hits: Iterable[Any], names: Iterable[str]) -> dict[str, list[tuple[str, int]]]:
    """For each field of ``names``, its values among the hits' fields with the number of hits
    holding each, most frequent first (ties by value); fields no hit holds are left out."""
    counters: dict[str, Counter] = {name: Counter() for name in names}
    for hit in hits:
        for name, counter in counters.items():
            value = (hit.fields or {}).get(name)
            if value is None:
                continue
            counter.update({str(v) for v in value} if isinstance(value, list) else [str(value)])
    return {
        name: sorted(counter.items(), key=lambda item: (-item[1], item[0]))
        for name, counter in counters.items()
        if counter
    }
