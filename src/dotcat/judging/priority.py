"""Which pooled documents to judge first: a priority from the ranks the systems gave them.

A depth-k pool (the union of each system's top k, as TREC builds it: Harman, "Overview of the
first TREC conference", 1993) is judged whole in the end, but a person may stop early, and the
documents whose grades move the compared systems' figures most should be judged first. We
follow the metric-driven ordering of Moffat, Webber and Zobel ("Strategic system comparisons
via targeted relevance judgments", SIGIR 2007), who judge documents by the total weight the
evaluation measure gives them over the systems compared, with nDCG's discount in place of
their rank-biased precision (nDCG@10 is what ``dotcat eval`` reports first):

    priority(d) = sum over pooled systems s that rank d of  1 / log2(1 + rank_s(d))

A document ranked first by three systems comes before one ranked first by one, which comes
before one ranked tenth by two. Ties: the best rank, then the document id. The adaptive
alternative, Move-to-Front pooling (Cormack, Palmer and Clarke, SIGIR 1998), reorders as
grades arrive; a fixed order keeps "previous" and "next" meaning the same thing all along.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


def rank_weight(rank: int) -> float:
    """nDCG's discount of a (1-based) rank: ``1 / log2(1 + rank)``."""
    return 1.0 / math.log2(1 + rank)


def priority(ranks: Mapping[str, int]) -> float:
    """A pooled document's priority: its discounts summed over the systems that rank it."""
    return sum(rank_weight(r) for r in ranks.values())
