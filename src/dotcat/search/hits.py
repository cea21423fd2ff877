"""The result type every query path returns (CLI, pipeline, server, client): light on purpose."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hit:
    """One ranked result."""

    rank: int
    doc_id: str
    score: float
    title: str
    text: str
