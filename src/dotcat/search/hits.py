"""The result type every query path returns (CLI, pipeline, server, client): light on purpose."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hit:
    """One ranked result: a document, and the passage of it that matched.

    Attributes:
        rank: 1 for the best.
        doc_id, title, text: the document (its whole text).
        score: the ranking score.
        start, stop: the characters of ``text`` the matched passage spans (an index with
            passages, :mod:`dotcat.index.passages`); None: the document matched whole (an
            index without passages).
    """

    rank: int
    doc_id: str
    score: float
    title: str
    text: str
    start: int | None = None
    stop: int | None = None

    @property
    def passage(self) -> str:
        """The text of the passage that matched (the whole text without one)."""
        if self.start is None or self.stop is None:
            return self.text
        return self.text[self.start : self.stop]
