"""Evaluate a run against qrels with ir-measures, counting every judged query.

All metric maths is done by `ir-measures <https://ir-measur.es>`_ (MacAvaney, Macdonald and
Ounis, ECIR 2022), which dispatches each measure to a provider (pytrec_eval for nDCG, R, AP;
the MS MARCO evaluator for RR@k). This module only decides *which* queries are evaluated and
makes sure none is silently lost:

* A query in the qrels with no results in the run (absent, or an empty ranking) scores 0 on
  every measure and is listed in :attr:`EvalReport.missing_queries`. trec_eval without ``-c``
  (and older ir-measures) average over the queries present in both run and qrels, which
  rewards a system for not answering the hard queries. ir-measures >= 0.3 already scores such
  queries at the measure's ``DEFAULT`` (0); dotcat does not rely on it: it fills any value a
  provider leaves out the same way, and names the queries so that a reader can see them.
* With ``known_queries``, qrels queries outside that set cannot have been searched: they are
  left out of the evaluation and listed in :attr:`EvalReport.unknown_queries`.
* With ``known_docs``, qrels entries naming a document outside the corpus are counted in
  :attr:`EvalReport.unknown_docs`. They stay in the qrels (such a relevant document can never
  be retrieved, and dropping it would inflate recall), so the count tells how much of the
  judged ground is unreachable.
* Run queries that have no qrels are ignored, as trec_eval does, and listed in
  :attr:`EvalReport.unjudged_queries`.

Measures (``nDCG@10`` etc.) follow trec_eval's definitions. nDCG (Järvelin and Kekäläinen,
"Cumulated gain-based evaluation of IR techniques", TOIS 2002), as trec_eval computes it::

    DCG@k  = sum_{i=1..k} rel_i / log2(i + 1)        (gain = the graded relevance label)
    nDCG@k = DCG@k / IDCG@k                           (IDCG: DCG of the ideal ordering)

RR@k is 1/rank of the first relevant document within the top k (0 if none), R@k the share of
relevant documents found in the top k, AP@k the mean over relevant documents of the precision
at each relevant document's rank within the top k, divided by the number of relevant documents.

Ties: a ranked list is scored in its own order, tied scores as listed (a ranking dotcat
shows or writes is what its figures count); an ``id -> score`` mapping, such as a run file read
back, in trec_eval's order: by descending score, tied scores by descending document id
(:func:`dotcat.types.trec_order`; the run files dotcat writes hold no ties,
:func:`dotcat.data.runs.write_run`). Every measure sees that one order: the providers do not
agree on ties (the MS MARCO provider of RR@k puts the smaller id first), so a query's tied
scores are handed to them as ranks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ir_measures
import numpy as np
from ir_measures.measures.base import SumAgg

from dotcat.errors import DotcatError
from dotcat.types import Qrels, RunLike, trec_order

logger = logging.getLogger(__name__)

DEFAULT_MEASURES = ("nDCG@10", "RR@10", "R@100", "AP@100")

_SHOW = 5  # ids quoted in a log message before "..."


@dataclass
class EvalReport:
    """The outcome of :func:`evaluate`.

    Attributes:
        aggregate: measure name -> value over all evaluated (judged) queries; a mean for every
            rank-based measure (ir-measures' own aggregator for the measure is used, so counts
            such as ``NumRel`` are sums).
        per_query: qid -> measure name -> value, for every evaluated query (missing ones as 0).
        n_queries: number of evaluated queries: the qrels queries, less the unknown ones.
        missing_queries: evaluated queries with no results in the run; they score 0.
        unknown_queries: qrels queries outside ``known_queries``; not evaluated.
        unknown_docs: qrels entries naming a document outside ``known_docs``; kept in the qrels.
        unjudged_queries: run queries without qrels; ignored.
        summed: the measures ir-measures sums over the queries (``NumRet``, ``NumRel``...).
    """

    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    missing_queries: list[str] = field(default_factory=list)
    unknown_queries: list[str] = field(default_factory=list)
    unknown_docs: int = 0
    unjudged_queries: list[str] = field(default_factory=list)
    summed: list[str] = field(default_factory=list)

    @property
    def measures(self) -> list[str]:
        """Measure names, in the order they were asked for."""
        return list(self.aggregate)

    def values(self, measure: str, queries: Iterable[str]) -> list[float]:
        """The per-query values of ``measure``, each times the number of queries where it is
        summed: their mean is then its aggregate, as its intervals and differences need."""
        scale = self.n_queries if measure in self.summed else 1
        return [self.per_query[q][measure] * scale for q in queries]

    def __repr__(self) -> str:
        """The query count and each measure's value (``per_query`` holds one row a query)."""
        values = ", ".join(f"{name}={value:.4f}" for name, value in self.aggregate.items())
        missing = f", missing={len(self.missing_queries)}" if self.missing_queries else ""
        return f"EvalReport(queries={self.n_queries}{missing}, {values})"

    def notes(self) -> list[str]:
        """One human-readable line per thing a reader of the figures should know."""
        lines = []
        if self.missing_queries:
            lines.append(
                f"{len(self.missing_queries)} of {self.n_queries} judged queries have no results "
                f"in the run and score 0: {_preview(self.missing_queries)}"
            )
        if self.unknown_queries:
            lines.append(
                f"{len(self.unknown_queries)} qrels queries are not in the query set and were "
                f"not evaluated: {_preview(self.unknown_queries)}"
            )
        if self.unknown_docs:
            lines.append(
                f"{self.unknown_docs} qrels entries name documents that are not in the corpus "
                "(kept: they cannot be retrieved)"
            )
        if self.unjudged_queries:
            lines.append(
                f"{len(self.unjudged_queries)} run queries have no qrels and were ignored: "
                f"{_preview(self.unjudged_queries)}"
            )
        return lines


def qid_sort_key(qid: str) -> tuple[int, int, str]:
    """Sort key putting numeric ids in numeric order (2 < 10), then the others by string."""
    return (0, int(qid), qid) if qid.isdecimal() else (1, 0, qid)


def parse_measures(measures: str | Iterable[Any]) -> list[ir_measures.Measure]:
    """Parse measure names into ir-measures measures, without duplicates, in the given order.

    Accepts ir-measures names (``nDCG@10``, ``RR@10``, ``R@100``, ``AP``, ``P(rel=2)@5``),
    trec_eval names (``ndcg_cut_10``, ``recip_rank``, ``P_5,10``) and Measure objects.

    Raises:
        DotcatError: naming the first name that neither parser knows.
    """
    if isinstance(measures, (str, ir_measures.Measure)):
        measures = [measures]
    parsed = list(dict.fromkeys(m for item in measures for m in _parse_one(item)))
    if not parsed:
        raise DotcatError("no measures given")
    return parsed


def _parse_one(item: Any) -> list[ir_measures.Measure]:
    if isinstance(item, ir_measures.Measure):
        return [item]
    name = str(item).strip()
    try:
        return [ir_measures.parse_measure(name)]
    except (NameError, ValueError, TypeError, AssertionError):
        pass
    try:
        return list(ir_measures.parse_trec_measure(name))
    except (NameError, ValueError, TypeError, AssertionError, KeyError):
        pass
    raise DotcatError(
        f"unknown measure {name!r}: use ir-measures names such as nDCG@10, RR@10, R@100, AP@100 "
        "(or trec_eval names such as ndcg_cut_10)"
    )


def evaluate(
    run: RunLike,
    qrels: Qrels,
    measures: str | Iterable[Any] = DEFAULT_MEASURES,
    known_queries: Iterable[Any] | None = None,
    known_docs: Iterable[Any] | None = None,
) -> EvalReport:
    """Evaluate ``run`` against ``qrels`` with ir-measures; judged queries without results score 0.

    Args:
        run: qid -> {docid: score}, or qid -> sequence of (docid, score) (ranked lists as
            :func:`dotcat.search.lexical.bm25_search` returns), ranked by score, tied scores
            in the list's order (the module docstring on ties). A docid
            repeated within one query's list keeps its first score.
        qrels: qid -> {docid: relevance}; ``relevance > 0`` is relevant for binary measures,
            graded labels are used as gains by nDCG.
        measures: names (ir-measures or trec_eval syntax) or ir-measures Measure objects.
        known_queries: the query set the run was produced from (ids, or a qid -> text mapping);
            qrels queries outside it are reported and not evaluated.
        known_docs: the corpus' document ids (ids, a mapping keyed by id, objects with ``.id``,
            or a ``datasets.Dataset`` with an ``id`` column); qrels entries naming other
            documents are counted.

    Returns:
        An :class:`EvalReport`; measure names are ir-measures' canonical spelling
        (``ndcg_cut_10`` is reported as ``nDCG@10``).

    Raises:
        DotcatError: unknown measure, malformed qrels/run values, or no query to evaluate.
    """
    parsed = parse_measures(measures)
    names = {m: str(m) for m in parsed}
    judged = _normalise_qrels(qrels)
    if not judged:
        raise DotcatError("the qrels are empty: there is nothing to evaluate")
    unknown_docs = _count_unknown_docs(judged, known_docs)
    unknown_queries = _drop_unknown_queries(judged, known_queries)

    ranked = _normalise_run(run)
    left = set(unknown_queries)  # judged, but not of the queries asked: not "no qrels"
    unjudged = sorted((q for q in ranked if q not in judged and q not in left), key=qid_sort_key)
    to_score = {q: docs for q, docs in ranked.items() if q in judged and docs}
    evaluated = sorted(judged, key=qid_sort_key)
    missing = [q for q in evaluated if q not in to_score]
    _log_coverage(len(ranked), evaluated, unjudged, missing, bool(to_score))

    per_query = _per_query_values(names, judged, to_score, evaluated, missing)
    aggregate: dict[str, float] = {}
    for measure, name in names.items():
        agg = measure.aggregator()
        for values in per_query.values():
            agg.add(values[name])
        aggregate[name] = float(agg.result())

    return EvalReport(
        aggregate=aggregate,
        per_query=per_query,
        n_queries=len(evaluated),
        missing_queries=missing,
        unknown_queries=unknown_queries,
        unknown_docs=unknown_docs,
        unjudged_queries=unjudged,
        summed=[name for m, name in names.items() if isinstance(m.aggregator(), SumAgg)],
    )


def evaluate_runs(
    runs: Mapping[str, RunLike],
    qrels: Qrels,
    measures: str | Iterable[Any] = DEFAULT_MEASURES,
    known_queries: Iterable[Any] | None = None,
    known_docs: Iterable[Any] | None = None,
) -> dict[str, EvalReport]:
    """Several runs against the same qrels (``name -> report``, in the runs' order), as
    :func:`evaluate` scores each; what ``dotcat eval`` and ``dotcat experiment`` report.

    A run cut shallower than a measure's cutoff (R@100 over a run of 10 results per query)
    counts the ranks it lacks as misses: that is logged, once per run, as a warning naming
    the cutoff the run should reach.

    Raises:
        DotcatError: as :func:`evaluate`.
    """
    parsed = parse_measures(measures)
    known_queries = _id_set(known_queries) if known_queries is not None else None
    known_docs = _id_set(known_docs) if known_docs is not None else None
    reports = {}
    for name, run in runs.items():
        _warn_if_shallow(name, run, parsed, len(known_docs) if known_docs else None)
        reports[name] = evaluate(run, qrels, parsed, known_queries, known_docs)
    return reports


def _warn_if_shallow(
    name: str, run: RunLike, measures: list[ir_measures.Measure], n_docs: int | None
) -> None:
    """Warn when the run's deepest ranking is shorter than a measure's cutoff (and than the
    corpus, where known: a ranking of the whole corpus is as deep as it gets). Where the
    corpus is not known and every query ranks the same documents, the warning names a small
    index as the likely cause instead of asking for a deeper run."""
    depth = max((len(results) for results in run.values()), default=0)
    cutoffs = [m.params.get("cutoff") for m in measures]
    needed = max((c for c in cutoffs if isinstance(c, int)), default=0)
    if n_docs is not None and depth >= n_docs:
        return
    if 0 < depth < needed:
        pairs = zip(measures, cutoffs, strict=True)
        short = ", ".join(str(m) for m, cutoff in pairs if (cutoff or 0) > depth)
        if n_docs is None and _ranks_everything(run, depth):
            logger.warning(
                "%s: every query ranks the same %d documents, fewer than %s count: the index "
                "(or corpus) holds only %d, so the ranks past %d are missing for any run of it; "
                "asking for more results would not add any", name, depth, short, depth, depth,
            )  # fmt: skip
            return
        logger.warning(
            "%s holds at most %d results per query, fewer than %s count: the missing ranks "
            "score as misses; write %d or more (e.g. search -k %d), unless that is all there is "
            "(BM25 returns only the documents holding a query's words)",
            name, depth, short, needed, needed,
        )  # fmt: skip


def _ranks_everything(run: RunLike, depth: int) -> bool:
    """Whether every query of a run ranks the same ``depth`` documents: a search of an index
    that holds only ``depth`` (a run cannot be deeper than its index)."""
    documents: set[Any] = set()
    for results in run.values():
        if len(results) != depth:
            return False
        documents.update(r[0] if isinstance(r, (tuple, list)) else r for r in results)
        if len(documents) > depth:
            return False
    return len(run) > 1 and len(documents) == depth


def _count_unknown_docs(judged: dict[str, dict[str, int]], known_docs: Iterable[Any] | None) -> int:
    """Qrels entries naming a document outside ``known_docs`` (kept: see the module docstring)."""
    if known_docs is None:
        return 0
    docs = _id_set(known_docs)
    unknown = sum(1 for rels in judged.values() for d in rels if d not in docs)
    if unknown:
        logger.warning("%d qrels entries name documents not in the corpus", unknown)
    return unknown


def _drop_unknown_queries(
    judged: dict[str, dict[str, int]], known_queries: Iterable[Any] | None
) -> list[str]:
    """Remove from ``judged`` the queries outside ``known_queries`` (they cannot have been
    searched) and return them, sorted.

    Raises:
        DotcatError: no judged query is left.
    """
    if known_queries is None:
        return []
    queries = _id_set(known_queries)
    unknown = sorted((q for q in judged if q not in queries), key=qid_sort_key)
    for qid in unknown:
        del judged[qid]
    if unknown:
        logger.warning(
            "%d qrels queries are not in the query set and are not evaluated: %s",
            len(unknown), _preview(unknown),
        )  # fmt: skip
    if not judged:
        raise DotcatError(
            "none of the qrels queries is in the query set: check the queries and the split"
        )
    return unknown


def _log_coverage(
    n_run: int, evaluated: list[str], unjudged: list[str], missing: list[str], any_scored: bool
) -> None:
    """Say which run queries are ignored (no qrels) and which judged ones score 0 (no results)."""
    if unjudged:
        logger.info("%d run queries have no qrels and are ignored", len(unjudged))
    if not any_scored:
        logger.warning(
            "none of the run's %d queries is judged: every one of the %d judged queries "
            "scores 0 (wrong qrels file or split?)",
            n_run, len(evaluated),
        )  # fmt: skip
    elif missing:
        logger.warning(
            "%d of %d judged queries have no results and score 0: %s",
            len(missing), len(evaluated), _preview(missing),
        )  # fmt: skip


def _per_query_values(
    names: Mapping[Any, str],
    judged: dict[str, dict[str, int]],
    to_score: dict[str, dict[str, float]],
    evaluated: list[str],
    missing: list[str],
) -> dict[str, dict[str, float]]:
    """qid -> measure name -> value for every evaluated query, in ``names``' order; a value
    ir-measures leaves out is the measure's default (0 for every rank-based measure)."""
    per_query: dict[str, dict[str, float]] = {q: {} for q in evaluated}
    if to_score:
        for metric in ir_measures.iter_calc(list(names), judged, to_score):
            name = names.get(metric.measure, str(metric.measure))
            if metric.query_id in per_query:
                per_query[metric.query_id][name] = float(metric.value)
    for qid, values in per_query.items():
        for measure, name in names.items():
            if name not in values or qid in missing:
                # An unanswered query is worth the measure's default (0 for every rank-based
                # measure), as ir-measures itself fills it for the queries it is given.
                if qid not in missing:
                    logger.debug("no %s value for query %s: scored as missing", name, qid)
                values[name] = _unanswered(measure, judged[qid])
    return {q: {n: per_query[q][n] for n in names.values()} for q in evaluated}


def _unanswered(measure: ir_measures.Measure, judgements: dict[str, int]) -> float:
    """A judged query without results: the measure's default (0 for every rank-based measure),
    but one query of NumQ and its relevant documents in NumRel, as ``trec_eval -c`` counts."""
    if measure.NAME == "NumQ":
        return 1.0
    if measure.NAME == "NumRel":
        return float(sum(g >= measure.params.get("rel", 1) for g in judgements.values()))
    return float(measure.DEFAULT)


def recall_curve(run: RunLike, qrels: Qrels, depths: Iterable[int]) -> dict[int, float]:
    """Mean recall at each depth, ``depth -> R@depth`` over the judged queries.

    ir-measures' ``R@k`` (trec_eval's ``recall_k``: relevant documents in the top k over all
    relevant documents, relevance > 0), computed by :func:`evaluate`, so judged queries
    without results count as 0 here as in every other figure.
    """
    depths = sorted({int(d) for d in depths})
    if not depths or depths[0] < 1:
        raise DotcatError("recall depths must be >= 1")
    report = evaluate(run, qrels, [f"R@{d}" for d in depths])
    return dict(zip(depths, report.aggregate.values(), strict=True))


def _normalise_qrels(qrels: Qrels) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for qid, rels in qrels.items():
        clean: dict[str, int] = {}
        for did, rel in rels.items():
            try:
                clean[str(did)] = int(rel)
            except (TypeError, ValueError):
                raise DotcatError(
                    f"qrels: query {qid}, document {did}: relevance {rel!r} is not an integer"
                ) from None
        out[str(qid)] = clean
    return out


def _normalise_run(run: RunLike) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    repeated = 0
    for qid, results in run.items():
        pairs = results.items() if isinstance(results, Mapping) else results
        scores: dict[str, float] = {}
        for pair in pairs:
            try:
                did, score = pair
                did, score = str(did), float(score)
            except (TypeError, ValueError):
                raise DotcatError(
                    f"run: query {qid}: expected (docid, score) pairs, got {pair!r}"
                ) from None
            if not math.isfinite(score):
                raise DotcatError(f"run: query {qid}: document {did!r} scores {score}")
            if did in scores:
                repeated += 1
                continue
            scores[did] = score
        single = {did: np.float32(s) for did, s in scores.items()}  # as trec_eval reads them
        if len(set(single.values())) < len(single):  # ties: as listed, else trec_eval's; as ranks
            order = sorted(scores, key=lambda did: -single[did])
            if isinstance(results, Mapping):
                order = trec_order(order, doc=lambda did: did, score=single.get)
            scores = {did: float(len(order) - i) for i, did in enumerate(order)}
        out[str(qid)] = scores
    if repeated:
        logger.warning("run: %d repeated (query, document) pairs; kept the first", repeated)
    return out


def _id_set(ids: Iterable[Any]) -> set[str]:
    column_names = getattr(ids, "column_names", None)
    if column_names is not None and "id" in column_names:  # a datasets.Dataset
        return {str(i) for i in ids["id"]}
    if isinstance(ids, Mapping):
        return {str(i) for i in ids}
    out = set()
    for item in ids:
        if isinstance(item, str):
            out.add(item)
        elif isinstance(item, Mapping):
            out.add(str(item["id"] if "id" in item else item["_id"]))
        elif hasattr(item, "id"):
            out.add(str(item.id))
        else:
            out.add(str(item))
    return out


def _preview(ids: list[str]) -> str:
    shown = ", ".join(ids[:_SHOW])
    return shown + (", ..." if len(ids) > _SHOW else "")
