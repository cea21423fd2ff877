"""What a table of means leaves out: how much of each run the judgements cover, and how far
each mean could move on other queries.

``dotcat eval`` prints both under its table: judged@10 per run, with a warning under 80%
(:mod:`dotcat.evaluation.judged`), and the bootstrap interval of each run's means
(:mod:`dotcat.evaluation.intervals`; the differences to a baseline carry their own, from their test:
:mod:`dotcat.evaluation.significance`). Judged@10 is shown for qrels that judge documents not
relevant too (grade 0: a judged pool, TREC's qrels); qrels that only list relevant documents (most
BEIR sets) leave every other document unjudged by construction, and say nothing of coverage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dotcat.evaluation.intervals import Interval, format_intervals, intervals
from dotcat.evaluation.judged import JUDGED_DEPTH, judged_notes
from dotcat.evaluation.metrics import EvalReport
from dotcat.evaluation.significance import ComparisonConfig
from dotcat.types import Qrels, RunLike


@dataclass
class Uncertainty:
    """Each run's judged@10 and the warnings it gives (``pooled``: the qrels judge documents not
    relevant too, so judged@10 means something); the bootstrap intervals of the means, at
    1 - alpha (empty with ``bootstrap`` 0)."""

    judged: dict[str, float]
    notes: list[str]
    pooled: bool = True
    intervals: dict[str, dict[str, Interval]] = field(default_factory=dict)
    config: ComparisonConfig = field(default_factory=ComparisonConfig)

    def to_json(self, name: str) -> dict[str, Any]:
        """One run's entries of ``dotcat eval --json``."""
        out: dict[str, Any] = {f"judged@{JUDGED_DEPTH}": self.judged.get(name)}
        if name in self.intervals:
            out["intervals"] = {
                "confidence": 1.0 - self.config.alpha,
                "bootstrap": self.config.bootstrap,
                "seed": self.config.seed,
                "measures": {m: i.to_json() for m, i in self.intervals[name].items()},
            }
        return out

    def text(self) -> str:
        """The lines printed under the table."""
        shares = ", ".join(f"{name} {share:.3f}" for name, share in self.judged.items())
        lines = [f"judged@{JUDGED_DEPTH}: {shares}"] if self.pooled else []
        lines += [f"warning: {note}" for note in self.notes]
        if self.intervals:
            c = self.config
            lines.append(format_intervals(self.intervals, c.bootstrap, 1.0 - c.alpha, c.seed))
        return "\n".join(lines)


def uncertainty(
    runs: Mapping[str, RunLike],
    qrels: Qrels,
    reports: Mapping[str, EvalReport],
    config: ComparisonConfig,
) -> Uncertainty:
    """Judged@10 of every run (against the qrels evaluated: unknown queries left out; warned
    of only for qrels with judged non-relevant documents) and, unless ``config.bootstrap`` is
    0, the intervals of every report's means at ``1 - config.alpha``."""
    evaluated = {q: qrels[q] for q in next(iter(reports.values())).per_query} if reports else {}
    shares, notes = judged_notes(runs, evaluated or qrels)
    pooled = any(grade <= 0 for docs in qrels.values() for grade in docs.values())
    notes = notes if pooled else []
    found = {}
    if config.bootstrap > 0 and reports:
        found = intervals(reports, config.bootstrap, 1.0 - config.alpha, config.seed)
    return Uncertainty(shares, notes, pooled, found, config)
