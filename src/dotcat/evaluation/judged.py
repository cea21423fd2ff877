"""How much of a run the judgements cover: judged@k, and the measures that tolerate gaps.

With pooled judgements (:mod:`dotcat.judging`) only the documents some pooled system ranked
high were judged; a run outside the pool meets unjudged documents, which every usual measure
counts as not relevant. ``Judged@k`` (ir-measures: the share of a query's top k that has a
judgement, averaged over the judged queries) says how far a run's figures can be trusted: below
about 80% at the measure's depth they are biased against that run (Buckley and Voorhees,
"Retrieval evaluation with incomplete information", SIGIR 2004). Two measures that tolerate
unjudged documents, both computed by ir-measures:

- ``Bpref`` (Buckley and Voorhees 2004): how many judged non-relevant documents rank above each
  relevant one; unjudged documents are ignored.
- ``nDCG(judged_only=True)@10``: nDCG of the *condensed list*, the ranking with its unjudged
  documents removed (Sakai, "Alternatives to bpref", SIGIR 2007: more robust than bpref).
"""

from __future__ import annotations

from collections.abc import Mapping

import ir_measures

from dotcat.types import Qrels, RunLike

#: The depth judged@k is reported at: that of the default measures (nDCG@10, RR@10).
JUDGED_DEPTH = 10
#: Below this share of judged documents in the top ``JUDGED_DEPTH``, ``dotcat eval`` warns.
JUDGED_WARNING = 0.8
#: Measures that tolerate unjudged documents (module docstring), as ``-m`` takes them.
ROBUST_MEASURES = ("Bpref", "nDCG(judged_only=True)@10")


def judged_at(run: RunLike, qrels: Qrels, depth: int = JUDGED_DEPTH) -> float:
    """The mean share of each judged query's top ``depth`` that is judged (ir-measures'
    ``Judged@depth``), over the judged queries; one without results counts 0 (it is named
    already by :func:`~.metrics.evaluate`'s report, so nothing is logged here)."""
    return sum(_answered(run, qrels, depth).values()) / len(qrels) if qrels else 0.0


def _answered(run: RunLike, qrels: Qrels, depth: int) -> dict[str, float]:
    """``Judged@depth`` of each judged query the run has results for."""
    measure = ir_measures.parse_measure(f"Judged@{depth}")
    scored = {str(q): docs for q, docs in _as_scores(run).items() if str(q) in qrels and docs}
    values = ir_measures.iter_calc([measure], qrels, scored)
    return {m.query_id: float(m.value) for m in values if m.query_id in scored}


def _as_scores(run: RunLike) -> dict[str, dict[str, float]]:
    out = {}
    for qid, docs in run.items():
        pairs = docs.items() if isinstance(docs, Mapping) else docs
        scores: dict[str, float] = {}
        for doc, score in pairs:
            scores.setdefault(str(doc), float(score))
        out[str(qid)] = scores
    return out


def judged_notes(
    runs: Mapping[str, RunLike], qrels: Qrels, depth: int = JUDGED_DEPTH,
    threshold: float = JUDGED_WARNING,
) -> tuple[dict[str, float], list[str]]:  # fmt: skip
    """Each run's judged@``depth``, and one warning line per run under ``threshold`` saying why:
    judged queries without results, or unjudged documents in the others' top ``depth``, or both."""
    shares, notes = {}, []
    for name, run in runs.items():
        answered = _answered(run, qrels, depth)
        shares[name] = share = sum(answered.values()) / len(qrels) if qrels else 0.0
        why = []
        if missing := len(qrels) - len(answered):
            why.append(
                f"{missing} of {len(qrels)} judged queries have no results in this run (each "
                "counts 0; judging more would not change that)"
            )
        if answered and (judged := sum(answered.values()) / len(answered)) < threshold:
            why.append(
                f"only {judged:.0%} of the top {depth} of the queries it answers is judged: its "
                f"figures count the unjudged as not relevant; judge more (dotcat judge pool --run "
                f"{name}) or read {' / '.join(ROBUST_MEASURES)} (-m), which tolerate them"
            )
        if share < threshold:
            notes.append(f"{name}: judged@{depth} {share:.3f} < {threshold:.0%}: " + "; ".join(why))
    return shares, notes
