"""The ``hybrid`` first stage: two first stages' rankings fused into one.

With a filter, each stage ranks within the admitted documents and the two filtered rankings
are fused: the fusion of what each side would return from the admitted documents alone.

Both stages fetch their top ``depth`` documents (``k`` where more are asked) for every query, and
:class:`~dotcat.search.fusion.Fusion` merges the two document rankings (reciprocal rank fusion, or a
linear mix of min-max normalised scores with the first stage's weight). A fusion reads the whole
lists it is given (min-max's floor, RRF's ranks), so the top ``depth`` are fused first and deeper
documents below them (:func:`fuse_tiers`): asking for more results does not reorder the first
``depth``. The built-in ``hybrid`` fuses the dense and the BM25 stages (each with its own feedback,
where the settings ask for it) with the fusion the index recorded on its dev queries, else linear
0.5 (:func:`~dotcat.search.fusion.default_fusion`); any two stages fuse the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dotcat.index.docstore import PassageRef
from dotcat.options import FUSION_WEIGHT
from dotcat.search.aggregation import Match
from dotcat.search.fusion import Fusion, default_fusion

__all__ = ["HybridStage", "fuse_matches", "fuse_tiers", "index_fusion"]


def index_fusion(recorded: Mapping[str, Any] | None, config: Any) -> Fusion:
    """The fusion a pipeline runs: its ``fusion`` setting, ``auto`` meaning the one the index
    recorded (``recorded``: its manifest's entry) else :func:`default_fusion` (linear 0.5); a
    linear fusion without a weight takes the recorded linear weight, else
    :data:`~dotcat.options.FUSION_WEIGHT`."""
    chosen = Fusion.from_json(recorded) if recorded else None
    method = config.fusion
    if method == "auto":
        return chosen or default_fusion()
    weight = config.fusion_weight
    if weight is None:
        weight = chosen.weight if chosen and chosen.method == method else FUSION_WEIGHT
    return Fusion(method, weight)


@dataclass(frozen=True)
class HybridStage:
    """Two first stages fused (the fusion's weight is the first stage's share).

    Attributes:
        first, second: the stages (the built-in hybrid: dense, then BM25).
        fusion: how their rankings are fused.
        depth: candidates each stage gives the fusion (more for a larger ``k``, fused below).
    """

    first: Any
    second: Any
    fusion: Fusion
    depth: int
    name: str = "hybrid"

    @classmethod
    def create(cls, context) -> HybridStage:
        """Dense and BM25 over a :class:`~dotcat.search.stages.StageContext`'s index, fused as
        the index recorded on dev (:func:`index_fusion`)."""
        fusion = index_fusion(context.manifest.fusion, context.config)
        return cls(
            context.stage("dense"), context.stage("bm25"), fusion, context.config.fusion_depth
        )

    @property
    def score_kind(self) -> str:
        return "rrf" if self.fusion.method == "rrf" else "fused"

    def search(
        self,
        queries: Mapping[str, str],
        k: int,
        *,
        show_progress: bool = False,
        admitted: Any = None,
    ) -> dict[str, list[Match]]:
        """Each query's top ``k`` of the fused ranking (progress shown for the first stage); with
        ``admitted``, the fusion of the two stages' rankings within a filter's documents."""
        n = max(k, self.depth)
        within = {} if admitted is None else {"admitted": admitted}
        first = self.first.search(queries, n, show_progress=show_progress, **within)
        second = self.second.search(queries, n, **within)
        return {
            q: fuse_tiers(self.fusion, first.get(q, []), second.get(q, []), self.depth)[:k]
            for q in {**first, **second}
        }


def fuse_tiers(fusion: Fusion, first: Sequence[Match], second: Sequence[Match], depth: int):
    """:func:`fuse_matches` of each side's top ``depth`` (as the dev choice fused them), then of
    the whole lists for the documents only deeper ranks hold, below them (scaled under the
    last): a fusion reads the whole lists it is given, so this keeps the head from moving."""
    head = fuse_matches(fusion, first[:depth], second[:depth])
    if max(len(first), len(second)) <= depth:  # the usual search: nothing deeper to fuse again
        return head
    rest = fuse_matches(fusion, first, second, {m.doc_id for m in head})
    scale = min(1.0, head[-1].score / rest[0].score * (1 - 1e-9)) if rest else 1.0
    return head + [Match(m.doc_id, m.score * scale, m.passages) for m in rest]


def fuse_matches(fusion: Fusion, first: Sequence[Match], second: Sequence[Match], skip=()):
    """One query's fused ranking of documents (:meth:`Fusion.fuse` of their scores), each with
    its passages found: first those of the side that gave it the larger share of its fused
    score (:meth:`Fusion.shares`), then the other side's; a whole document last; the documents
    in ``skip`` left out."""
    first_run = [(m.doc_id, m.score) for m in first]
    second_run = [(m.doc_id, m.score) for m in second]
    shares = fusion.shares(first_run, second_run)
    by_first, by_second = {m.doc_id: m for m in first}, {m.doc_id: m for m in second}
    out = []
    for doc, score in fusion.fuse(first_run, second_run):
        if doc in skip:
            continue
        a, b = shares[doc]
        sides = (by_first.get(doc), by_second.get(doc))
        passages: dict[tuple, tuple[PassageRef, float]] = {}
        for side in sides if a >= b else sides[::-1]:
            for ref, value in side.passages if side else ():
                passages.setdefault((ref.start, ref.stop), (ref, value))
        # A passage before the whole document (a side that ranks documents whole, e.g. BM25
        # of an index without passages): it says where the document matched.
        ordered = sorted(passages.values(), key=lambda p: p[0].stop is None)
        out.append(Match(doc, score, tuple(ordered)))
    return out
