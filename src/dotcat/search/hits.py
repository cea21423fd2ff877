"""The result type every query path returns (CLI, pipeline, server, client): light on purpose."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dotcat.reprs import short_repr

#: What a score is, by the stage that gave it: a BM25 score; the bi-encoder's cosine or dot
#: product; reciprocal rank fusion's sum (:mod:`dotcat.search.fusion`; about 1/60 per list);
#: the linear fusion's min-max normalised mix (in (0, 1]); the cross-encoder's logit; the
#: cross-encoder's normalised score interpolated with the first stage's (in [0, 1]); ``-sum``
#: after one of the first three: a document's best passages' scores summed (``sum`` aggregation);
#: ``order``: a hit below the re-ranked head, its score only keeping the first stage's order.
SCORE_KINDS = ("bm25", "cosine", "dot", "rrf", "fused", "logit", "interpolated", "order")


@dataclass(frozen=True)
class Hit:
    """One ranked result: a document, and the passage of it that matched.

    ``score_kind`` says which scale ``score`` is on (:data:`SCORE_KINDS`). ``print(hit)``
    shows the rank, id, score and its kind, the title and the text's first words
    (:func:`dotcat.reprs.preview`); ``hit.text`` holds the whole text.

    Attributes:
        rank: 1 for the best.
        doc_id, title, text: the document (its whole text).
        score: the ranking score.
        score_kind: the scale of ``score``.
        start, stop: the characters of ``text`` the matched passage spans (an index with
            passages, :mod:`dotcat.index.passages`); None: the document matched whole (an
            index without passages).
        fields: the document's fields (:mod:`dotcat.data.metadata`: record columns, front
            matter, file fields), as the index keeps them.
    """

    rank: int
    doc_id: str
    score: float
    title: str
    text: str
    score_kind: str = ""
    start: int | None = None
    stop: int | None = None
    fields: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def passage(self) -> str:
        """The text of the passage that matched (the whole text without one)."""
        if self.start is None or self.stop is None:
            return self.text
        return self.text[self.start : self.stop]

    def __repr__(self) -> str:
        fields = {
            "rank": self.rank,
            "doc_id": self.doc_id,
            "score": float(self.score),
            "score_kind": self.score_kind,
            "title": self.title,
            "text": self.text,
        }
        return short_repr("Hit", fields, texts=("title", "text"))
