"""Type aliases shared by dotcat's stages: rankings, runs and relevance judgements.

The shapes follow the TREC files they are read from and written to (:mod:`dotcat.data.runs`,
:mod:`dotcat.data.qrels`) and what ir-measures takes. Plain ``typing`` only, so any module can
import them without loading anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any

#: One query's results, best first: ``[(doc_id, score), ...]``.
Ranking = Sequence[tuple[str, float]]

#: A run: query id -> its ranking, best first (what every first stage and re-ranker returns).
Run = dict[str, list[tuple[str, float]]]

#: A run in any form a reader accepts: per query a ranking or a ``doc_id -> score`` mapping
#: (the order of a ranking does not matter where the scores decide it).
RunLike = Mapping[str, Mapping[str, float] | Iterable[tuple[str, float]]]

#: Relevance judgements: query id -> document id -> grade (0: judged not relevant).
Qrels = Mapping[str, Mapping[str, int]]


def trec_order(
    ranking: Iterable[Any], doc: Callable[[Any], str] = itemgetter(0), score=itemgetter(1)
) -> list[Any]:
    """``ranking`` (best first) with each run of tied scores by descending document id: the
    order trec_eval ranks a run in (by score, ties by ``docno`` descending), for a run that
    holds no order of its own (a run file read back, an ``id -> score`` mapping evaluated)."""
    return [x for _, tie in groupby(ranking, key=score) for x in sorted(tie, key=doc, reverse=True)]
