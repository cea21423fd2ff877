"""Aggregations against MaxP's length bias, screened on dev from every passage's exact score.

    python eval/studies/length_bias/indexes.py       # the indexes (cached)
    python eval/studies/length_bias/candidates.py [--collections ...]

For each collection, the ``x2`` index of ``indexes.py`` (documents longer than two windows
split, each on its own, into passages of 256 tokens; pylib: every long document, as today) is
read whole: every passage vector (FAISS ``reconstruct``), its document and its number in it.
Every query's score against every passage is then exact (no FAISS depth), and each candidate
aggregation ranks documents from them; dense alone and the hybrid (dense documents fused with
the index's own BM25 documents, the fusion chosen on the dev queries by
:func:`dotcat.search.fusion.choose_fusion` for each candidate, as ``dotcat index`` chooses it)
are scored by nDCG@10 on the **dev** queries (``--split test``: the test queries, for a rule
chosen here on dev, its fusion still chosen on dev). ``today`` is the ``x16`` index (the rule before
issue 68) with MaxP, the pipeline's own runs. Candidates (``s_1..s_n`` a document's passage
scores, ``s_1`` its first):

- ``maxp``: max s_i (Dai and Callan 2019);
- ``firstp``: s_1 (Dai and Callan 2019);
- ``first+max``: (s_1 + max s_i) / 2 (FirstP and MaxP combined; Zhang, Yates and Lin,
  "Comparing Score Aggregation Approaches for Document Retrieval with Pretrained Transformers",
  ECIR 2021, compare such rules);
- ``top2 mean``: the mean of the best min(2, n) (a flat weighted sum of the top passages,
  PARADE's simplest, Li et al. 2020, normalised so one passage is its own score);
- ``emax``: max s_i - (E[max of n] - E[max of 1]), the expectations over the query's own
  passage-score distribution (every passage of the collection; Gumbel 1958's expected
  maximum of n draws, the order statistics of the empirical distribution);
- ``emax sample``: the same over an evenly spaced sample of :data:`SAMPLE` passages;
- ``gauss``: max s_i - sd_q * c_n, ``c_n`` the expected maximum of n standard normal draws;
- ``fitted``: max s_i - a_q * c_n, ``a_q`` the slope of the documents' best scores on
  ``c_n`` over the query's whole collection (the length bias the query's own scores show,
  correlated passages included), least squares;
- ``floor ...``: max(s_1, max_{i>1} s_i - delta(n - 1)), ``delta`` that of ``emax`` or
  ``fitted``: a document scores at least its first window, and a later passage counts beyond
  it only by what it beats the expected best of as many irrelevant passages by;
- ``soft z``: max(s_1, max_{i>1} s_i - z * sd_q): a later passage counts by what it beats
  its document's first window by, less z standard deviations of the query's passage scores;
- ``hard z``: max_{i>1} s_i where it beats s_1 by more than z * sd_q, else s_1;
- ``trunc RULE``: RULE with each split document's first passage scored by the vector of the
  document cut at the window (the ``x16`` index's, as the default encodes it);
- ``distinct Q``: max(s_1, max s_i over the later passages that are distinct from their
  document's opening: cos(v_i, v_1) below the collection's Q-quantile of each opening's
  similarity to its nearest other document's opening (a later passage as far from its own
  opening as another document is, counts as one; one like its opening is spoken for by it);
  ``distinct doc``: below the document's own nearest neighbour's similarity. Label-free, set
  at indexing time from the vectors alone;
- ``peak z``: max(s_1, the best later passage where it beats the median of its document's
  passage scores by more than z * sd_q): a later passage counts where it stands out of its
  own document (a chapter that answers), not where the whole document is near the query
  (many near draws, MaxP's length bias);
- ``prior c``: ``soft z`` with ``z = max(1, c * ln(D / (P - D)))``, ``D`` documents and ``P``
  passages of the index: the margin grows with the log prior odds that an answer lies in a
  document's opening rather than in a later passage (the Bayes threshold's shift under
  equal-variance scores), never below ``lead``'s 1;
- ``meanp``: a split document (2-16 windows with ``keep16``) scores the cosine with the
  normalised mean of its passage vectors (one vector per document, its tail's content inside:
  no maximum over n draws, so no length bias by construction; AvgP among Zhang, Yates and Lin's
  aggregations); ``first|meanp``: max(s_1, that);
- ``anchor RULE``: RULE, with the dense list's min-max floor (the score linear fusion maps to 0)
  anchored at the ``K``-th score of the same list without lifts (``keep16 firstp``): a later
  passage moves its own document up, not every other document's fused score (by pushing the
  list's last entry up);
- ``query z``: per query, MaxP where the best later passage of the collection beats the best
  first window by more than z * sd_q (a query aimed past a document's opening), else FirstP
  (``query z RULE``: else that candidate): both maxima lie in a search's top passages.

The mixed folder (``mixed_folder.py``) has no dev queries: half of its queries (those whose
document is at an even position in the corpus) are judged here, the other half only by
``pipeline.py``; its fusion is the default (linear 0.5), as a folder's is.

Writes ``candidates.md`` and ``candidates.json`` beside this script.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
from indexes import DATA, index_dir

import common

HERE = Path(__file__).resolve().parent
K = 100
SAMPLE = 2048
CANDIDATES = (
    "maxp", "firstp", "first+max", "top2 mean", "emax", "emax sample", "gauss", "fitted",
    "floor emax", "floor fitted", "soft 0.5", "soft 1", "soft 1.5", "soft 2", "soft 3",
    "hard 1", "hard 1.5", "hard 2", "hard 3", "keep16 soft 1", "keep16 hard 2",
    "query 0", "query 0.5", "query 1", "query 0 soft 1", "query 0.5 soft 1", "query 1 soft 1",
    "distinct 0.1", "distinct 0.5", "distinct doc", "keep16 distinct doc",
    "trunc keep16 distinct 0.5", "trunc keep16 distinct doc",
    "peak 1", "peak 2", "trunc keep16 peak 1", "trunc keep16 peak 2",
)  # fmt: skip
#: ``keep16 ...``: MaxP for a document of more passages than one of 16 windows (4,096 tokens)
#: splits into (windows of 256 tokens, stride 64), the rule after it for the others.
KEEP16 = (16 * 256 - 64) // (256 - 64)
#: The mixed folder's queries judged here: those whose document is at an even position in
#: its corpus (``choice``); the others are ``pipeline.py``'s.
MIXED = "mixed"
#: The queries reported: ``dev`` (the screen), or ``test`` (``--split test``, for a rule
#: chosen on dev; the fusion still chosen on dev).
SPLIT = "dev"
#: ``anchor``'s floor entry (no document has this id).
FLOOR = "\x00floor"


def layout(index: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Each vector's document position and part (by FAISS id), and each position's id."""
    uri = f"file:{(index / 'docstore.sqlite').resolve()}?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        ids = dict(db.execute("SELECT pos, id FROM docs"))
        has = db.execute("SELECT name FROM sqlite_master WHERE name = 'passages'").fetchone()
        if has:
            rows = db.execute("SELECT pid, pos, part FROM passages ORDER BY pid").fetchall()
        else:
            rows = [(p, p, 0) for p in sorted(ids)]
    pids = np.array([r[0] for r in rows])
    assert (pids == np.arange(len(rows))).all(), "vector ids are not 0..n-1"
    doc_ids = [ids[p] for p in range(max(ids) + 1)]
    return np.array([r[1] for r in rows]), np.array([r[2] for r in rows]), doc_ids


def normal_max(n: np.ndarray) -> np.ndarray:
    """E[max of n standard normal draws], by numerical integration (c_1 = 0)."""
    from scipy.stats import norm

    x = np.linspace(-8, 8, 4001)
    cdf, pdf = norm.cdf(x), norm.pdf(x)
    out = [np.trapezoid(x * m * cdf ** (m - 1) * pdf, x) for m in n]
    return np.array(out)


def expected_max(sorted_scores: np.ndarray, n: np.ndarray) -> np.ndarray:
    """E[max of n draws] from each row's empirical distribution: ``(queries, len(n))``."""
    m = sorted_scores.shape[1]
    q = np.arange(m + 1) / m
    weights = np.diff(q[None, :] ** n[:, None], axis=1)  # (len(n), m)
    return sorted_scores @ weights.T


def doc_scores(
    scores: np.ndarray, doc_of: np.ndarray, part: np.ndarray, ndocs: int, name: str, gate=None
):
    """Every document's aggregated score for each query: ``(queries, ndocs)``; ``gate``:
    :func:`distinctness` of the vectors scored (``distinct`` candidates)."""
    counts = np.bincount(doc_of, minlength=ndocs)
    order = np.lexsort((part, doc_of))  # by document, then part
    starts = np.r_[0, np.cumsum(counts)][:-1]
    s = scores[:, order]
    best = np.maximum.reduceat(s, starts, axis=1)
    first = s[:, starts]
    if name == "maxp":
        return best
    if name.startswith("keep16"):
        inner = doc_scores(scores, doc_of, part, ndocs, name.removeprefix("keep16 "), gate)
        return np.where(counts > KEEP16, best, inner)
    if name == "firstp":
        return first
    if name == "first+max":
        return (first + best) / 2
    if name == "top2 mean":
        out = best.copy()
        for d in np.flatnonzero(counts > 1):
            block = np.sort(s[:, starts[d] : starts[d] + counts[d]], axis=1)
            out[:, d] = block[:, -2:].mean(axis=1)
        return out
    if name.startswith("distinct"):
        own, nn = gate
        at = name.split()[1]
        limit = nn[doc_of] if at == "doc" else np.full(len(own), np.quantile(nn, float(at)))
        counted = np.where((part > 0) & (own < limit), scores, -np.inf)[:, order]
        return np.maximum(first, np.maximum.reduceat(counted, starts, axis=1))
    if name.startswith("peak"):
        margin = float(name.split()[1]) * scores.std(axis=1)
        out = first.copy()
        for d in np.flatnonzero(counts > 1):
            block = s[:, starts[d] : starts[d] + counts[d]]
            peak = block[:, 1:].max(axis=1)
            stands = peak - np.median(block, axis=1) > margin
            out[:, d] = np.where(stands, np.maximum(first[:, d], peak), first[:, d])
        return out
    rest = np.full_like(best, -np.inf)
    if name.startswith("query"):  # query z [rule]: the query's kind decides the rule
        for d in np.flatnonzero(counts > 1):
            rest[:, d] = s[:, starts[d] + 1 : starts[d] + counts[d]].max(axis=1)
        _, z, *other = name.split(maxsplit=2)
        tail = rest.max(axis=1) - first.max(axis=1) > float(z) * scores.std(axis=1)
        other = doc_scores(scores, doc_of, part, ndocs, (other or ["firstp"])[0])
        return np.where(tail[:, None], best, other)
    if name in ("meanp", "first|meanp"):  # gate: each document's mean vector's length
        pooled = np.where(counts > 1, np.add.reduceat(s, starts, axis=1) / counts / gate, first)
        return pooled if name == "meanp" else np.maximum(first, pooled)
    if name.startswith("prior"):  # prior c: soft z, z from the index's passage counts
        z = max(1.0, float(name.split()[1]) * np.log(ndocs / (len(doc_of) - ndocs)))
        return doc_scores(scores, doc_of, part, ndocs, f"soft {z}")
    if name.startswith(("soft", "hard")):
        for d in np.flatnonzero(counts > 1):
            rest[:, d] = s[:, starts[d] + 1 : starts[d] + counts[d]].max(axis=1)
        margin = float(name.split()[1]) * scores.std(axis=1, keepdims=True)
        if name.startswith("soft"):
            return np.maximum(first, rest - margin)
        return np.where(rest - first > margin, rest, first)
    many = np.flatnonzero(counts > 1)
    for d in many:
        rest[:, d] = s[:, starts[d] + 1 : starts[d] + counts[d]].max(axis=1)
    values = np.unique(counts)
    needed = np.unique(np.r_[values, np.maximum(values - 1, 1)])
    col = {int(v): i for i, v in enumerate(needed)}
    if name in ("emax", "emax sample", "floor emax"):
        pool = scores if name != "emax sample" else scores[:, _sample(scores.shape[1])]
        emax = expected_max(np.sort(pool, axis=1), needed)  # (queries, len(needed))
        delta = emax - emax[:, [col[1]]]
    else:
        c = normal_max(needed)
        if name == "gauss":
            slope = scores.std(axis=1, keepdims=True)
        else:  # fitted: documents' best scores regressed on c_n
            x = c[[col[int(v)] for v in counts]]
            xc = x - x.mean()
            slope = ((best - best.mean(axis=1, keepdims=True)) @ xc / (xc @ xc))[:, None]
        delta = slope * c[None, :]
    at = np.array([col[int(v)] for v in counts])
    if name.startswith("floor"):
        before = np.array([col[max(int(v) - 1, 1)] for v in counts])
        return np.maximum(first, rest - delta[:, before])
    return best - delta[:, at]


def distinctness(vectors: np.ndarray, doc_of: np.ndarray, part: np.ndarray, ndocs: int):
    """Each passage's cosine with its document's opening, and each opening's cosine with its
    nearest other document's opening (vectors normalised, as the default model's are)."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    opening = np.empty((ndocs, unit.shape[1]), dtype=unit.dtype)
    opening[doc_of[part == 0]] = unit[part == 0]
    own = np.einsum("ij,ij->i", unit, opening[doc_of])
    nn = np.empty(ndocs, dtype=np.float32)
    for start in range(0, ndocs, 1024):
        block = opening[start : start + 1024] @ opening.T
        block[np.arange(len(block)), np.arange(start, start + len(block))] = -np.inf
        nn[start : start + 1024] = block.max(axis=1)
    return own, nn


def mean_lengths(vectors: np.ndarray, doc_of: np.ndarray, ndocs: int) -> np.ndarray:
    """The length of each document's mean passage vector (``meanp``: a query's cosine with the
    normalised mean is its mean passage score over that length)."""
    sums = np.zeros((ndocs, vectors.shape[1]))
    np.add.at(sums, doc_of, vectors)
    return np.linalg.norm(sums / np.bincount(doc_of, minlength=ndocs)[:, None], axis=1)


def _truncated_firsts(work: Path, name: str, vectors, doc_of, part, doc_ids) -> np.ndarray:
    """``vectors`` with each split document's first passage replaced by its ``x16`` vector
    where ``x16`` kept it whole (the document cut at the window, as the default encodes it)."""
    whole_of, _, whole_ids = layout(index_dir(work, name, "x16"))
    whole = _whole_vectors(index_dir(work, name, "x16"), len(whole_of))
    once = np.bincount(whole_of, minlength=len(whole_ids)) == 1
    row = {whole_ids[d]: i for i, d in enumerate(whole_of) if once[d]}
    out = vectors.copy()
    for pid in np.flatnonzero(part == 0):
        if doc_ids[doc_of[pid]] in row:
            out[pid] = whole[row[doc_ids[doc_of[pid]]]]
    return out


def _whole_vectors(index: Path, n: int) -> np.ndarray:
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    return SearchPipeline(index, PipelineConfig(first_stage="dense")).index.vectors(np.arange(n))


def _sample(n: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, SAMPLE)).astype(int))


def mixed_half(data: Path, half: int):
    """Half the mixed folder's queries as a :class:`~dotcat.data.splits.DevSplit`: those whose
    document is at an even (``half`` 0) or odd (1) position in the corpus."""
    from dotcat.data import load_qrels, load_queries
    from dotcat.data.splits import DevSplit

    order = {}
    for i, line in enumerate((data / "corpus.jsonl").open(encoding="utf-8")):
        order[json.loads(line)["_id"]] = i
    qrels = {q: r for q, r in load_qrels(data, split="test").items()
             if order[next(iter(r))] % 2 == half}  # fmt: skip
    queries = {q: t for q, t in load_queries(data, split="test").items() if q in qrels}
    return DevSplit(queries, qrels, f"half {half} of qrels/test.tsv")


def run_of(values: np.ndarray, qids: list[str], doc_ids: list[str]) -> dict:
    top = np.argsort(-values, axis=1, kind="stable")[:, :K]
    return {q: [(doc_ids[d], float(values[i, d])) for d in top[i]] for i, q in enumerate(qids)}


def anchor(run: dict, plain: np.ndarray, qids: list[str]) -> None:
    """``anchor RULE``: each query's list gets the floor of the same list without lifts (the
    ``K``-th score of ``plain``) as its last entry, a document no qrels name, so min-max maps
    that floor to 0 however many documents a later passage lifted into the list."""
    floors = -np.partition(-plain, K - 1, axis=1)[:, K - 1]
    for i, q in enumerate(qids):
        if floors[i] < run[q][-1][1]:
            run[q].append((FLOOR, float(floors[i])))


def study(name: str, work: Path) -> dict:
    """Dev and test nDCG@10 of every candidate (dense and hybrid) on one collection."""
    from dotcat.data.splits import find_dev_split
    from dotcat.evaluation import evaluate
    from dotcat.search.fusion import choose_fusion
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    data = DATA[name]
    dev = find_dev_split(data) if name != MIXED else mixed_half(data, 0)
    splits = {"dev": (dev.queries, dev.qrels)}
    if SPLIT == "test":  # ``--split test``: a rule fixed on dev, scored on test
        from dotcat.data import load_qrels, load_queries

        held = mixed_half(data, 1) if name == MIXED else None
        splits["test"] = ((held.queries, held.qrels) if held else
                          (load_queries(data, split="test"), load_qrels(data, "test")))  # fmt: skip
    out: dict = {"reports": {}}
    index = index_dir(work, name, "x2")
    maxp = PipelineConfig(first_stage="dense", aggregation="maxp")  # today's rule
    pipeline = SearchPipeline(index, maxp)
    doc_of, part, doc_ids = layout(index)
    vectors = pipeline.index.vectors(np.arange(len(doc_of)))
    counts = np.bincount(doc_of, minlength=len(doc_ids))
    out["split"] = int((counts > 1).sum())
    out["vectors"] = len(doc_of)
    bm25 = {s: pipeline.run(q, K, first_stage="bm25") for s, (q, _) in splits.items()}
    today = SearchPipeline(index_dir(work, name, "x16"), maxp)
    runs = {}
    trunc = any(cand.removeprefix("anchor ").startswith("trunc") for cand in CANDIDATES)
    truncated = _truncated_firsts(work, name, vectors, doc_of, part, doc_ids) if trunc else None
    gates = {"": None, "trunc ": None}  # only where a ``distinct`` candidate reads them
    if any("meanp" in cand for cand in CANDIDATES):  # (not with ``distinct``: one gate each)
        sides = (("", vectors), ("trunc ", truncated))
        gates = {side: mean_lengths(v, doc_of, len(doc_ids)) for side, v in sides if v is not None}
    if any("distinct" in cand for cand in CANDIDATES):
        gates[""] = distinctness(vectors, doc_of, part, len(doc_ids))
        if trunc:
            gates["trunc "] = distinctness(truncated, doc_of, part, len(doc_ids))
    for split, (queries, _) in splits.items():
        qids = list(queries)
        encoded = np.asarray(pipeline.encoder.encode_queries([queries[q] for q in qids]))
        scores = {"": encoded.astype(np.float32) @ vectors.T}
        if trunc:
            scores["trunc "] = encoded.astype(np.float32) @ truncated.T
        for cand in CANDIDATES:
            rule = cand.removeprefix("anchor ")
            side = "trunc " if rule.startswith("trunc ") else ""
            values = doc_scores(scores[side], doc_of, part, len(doc_ids), rule.removeprefix(side),
                                gates[side])  # fmt: skip
            runs[cand, split] = run_of(values, qids, doc_ids)
            if rule != cand:
                plain = doc_scores(scores[side], doc_of, part, len(doc_ids), "keep16 firstp")
                anchor(runs[cand, split], plain, qids)
        runs["today", split] = today.run(queries, K, first_stage="dense")
        runs["today bm25", split] = today.run(queries, K, first_stage="bm25")
    check = evaluate(pipeline.run(splits["dev"][0], K, first_stage="dense"), dev.qrels,
                     measures=["nDCG@10"]).aggregate["nDCG@10"]  # fmt: skip
    out["pipeline maxp dev dense"] = float(check)
    for cand in ("today", *CANDIDATES):
        side = "today bm25" if cand == "today" else None
        sparse = {s: runs[side, s] if side else bm25[s] for s in splits}
        if name == MIXED:
            fusion = pipeline.fusion  # a folder's: the default
        else:
            fusion = choose_fusion(runs[cand, "dev"], sparse["dev"], dev.qrels, dev.source)
        for split, (_, qrels) in splits.items():
            dense = evaluate(runs[cand, split], qrels, measures=["nDCG@10", "R@10"])
            hybrid = evaluate(fusion.fuse_runs(runs[cand, split], sparse[split]), qrels,
                              measures=["nDCG@10"])  # fmt: skip
            out["reports"][cand, split] = (dense, hybrid)
        out.setdefault("fusion", {})[cand] = fusion.describe()
    return out


GROUPS = {
    "middle 2-16": ("middle", 2, 16), "end 2-16": ("end", 2, 16),
    "docstring 2-16": ("docstring", 2, 16), "middle >16": ("middle", 16, 1e9),
    "end >16": ("end", 16, 1e9), "docstring >16": ("docstring", 16, 1e9),
}  # fmt: skip


def by_kind(report, measure: str, kinds: dict, group: tuple) -> tuple[float, int]:
    """The mean of ``measure`` over the queries of one kind whose document is within the
    group's windows, and how many there are."""
    kind, low, high = group
    values = [v[measure] for q, v in report.per_query.items()
              if kinds[q]["kind"] == kind and low < kinds[q]["windows"] <= high]  # fmt: skip
    return (float(np.mean(values)) if values else float("nan")), len(values)


def mixed_table(reports: dict, split: str = "dev") -> list[str]:
    """Dense recall@10 of the mixed folder's tail queries by kind and length (windows of 256
    tokens), and the hybrid's nDCG@10 on its short documents' queries."""
    kinds = json.loads((DATA[MIXED] / "kinds.json").read_text())
    counts = {g: by_kind(reports["today", split][0], "R@10", kinds, GROUPS[g])[1] for g in GROUPS}
    head = " | ".join(f"{g} ({counts[g]})" for g in GROUPS)
    lines = [
        "Mixed folder (half its queries): dense recall@10 by kind and length in windows; the "
        "short documents' queries: hybrid nDCG@10.",
        "",
        f"| candidate | {head} | short: hybrid nDCG@10 |",
        "| --- | " + " | ".join("---:" for _ in GROUPS) + " | ---: |",
    ]
    for cand in ("today", *CANDIDATES):
        dense, hybrid = reports[cand, split]
        cells = " | ".join(f"{by_kind(dense, 'R@10', kinds, GROUPS[g])[0]:.3f}" for g in GROUPS)
        short = by_kind(hybrid, "nDCG@10", kinds, ("short", 0, 1e9))[0]
        lines.append(f"| {cand} | {cells} | {short:.4f} |")
    return lines


def pooled(raw: dict) -> list[str]:
    """Each candidate's mean hybrid nDCG@10 difference to ``today`` over the queries of
    every collection, with its standard error: the choice is the most conservative candidate
    (the largest margin) within one standard error of the best
    (:mod:`dotcat.evaluation.choice`'s rule), over all the queries."""
    lines = ["", f"Pooled {SPLIT} queries: hybrid nDCG@10 minus today's (standard error).", "",
             "| candidate | without the mixed folder | all |", "| --- | ---: | ---: |"]  # fmt: skip
    for cand in ("today", *CANDIDATES):
        cells = []
        for names in ([n for n in raw if n != MIXED], list(raw)):
            d = np.array([raw[n][cand]["per query"][q] - v for n in names
                          for q, v in raw[n]["today"]["per query"].items()])  # fmt: skip
            cells.append(f"{d.mean():+.4f} ({d.std(ddof=1) / np.sqrt(len(d)):.4f}, n {len(d)})")
        lines.append(f"| {cand} | {cells[0]} | {cells[1]} |")
    return lines


def main() -> None:
    global CANDIDATES, SPLIT
    p = common.parser(__doc__, output=HERE / "candidates.md", work="runs/length_bias")
    p.add_argument("--collections", nargs="+", default=list(DATA), choices=list(DATA))
    p.add_argument("--candidates", nargs="+", default=list(CANDIDATES), metavar="NAME")
    p.add_argument("--split", choices=("dev", "test"), default=SPLIT)
    args = p.parse_args()
    CANDIDATES, SPLIT = tuple(args.candidates), args.split
    common.setup_logging()
    from dotcat.evaluation.significance import paired_ttest

    rows = {}
    for name in args.collections:
        rows[name] = study(name, args.work)
        print(name, {f"{c} {s}": round(float(v[1].aggregate["nDCG@10"]), 4)
                     for (c, s), v in rows[name]["reports"].items()}, flush=True)  # fmt: skip
    lines = common.header(
        "Aggregations against MaxP's length bias: nDCG@10 from every passage's exact score",
        "Encoder: the default (all-MiniLM-L6-v2) at `auto` precision.",
        torch=True,
    )
    lines += [
        "Index: `x2` (documents longer than 512 tokens split into passages of 256, each on its "
        "own; pylib split whole as today); `today`: the `x16` index (4,096 tokens) with MaxP, "
        f"the pipeline's runs. Queries: {SPLIT} (the mixed folder: half {int(SPLIT == 'test')}); "
        "each hybrid's fusion chosen on the dev queries for its candidate. p: paired t-test of "
        "the hybrid against `today`.",
        "",
        f"| collection | split docs | candidate | {SPLIT} dense | {SPLIT} hybrid | hybrid - today "
        "| p | fusion |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    raw = {}
    for name, row in rows.items():
        rep = row["reports"]
        base = rep["today", SPLIT][1]
        for cand in ("today", *CANDIDATES):
            dense, hybrid = rep[cand, SPLIT]
            dd, dh = (float(r.aggregate["nDCG@10"]) for r in (dense, hybrid))
            diff = dh - float(base.aggregate["nDCG@10"])
            p = paired_ttest(base, hybrid, "nDCG@10").pvalue if cand != "today" else 1.0
            lines.append(
                f"| {name} | {row['split']} | {cand} | {dd:.4f} | {dh:.4f} | {diff:+.4f} "
                f"| {p:.2g} | {row['fusion'][cand]} |"
            )
            raw.setdefault(name, {})[cand] = {
                "dense": dd, "hybrid": dh,
                "per query": {q: v["nDCG@10"] for q, v in hybrid.per_query.items()},
            }  # fmt: skip
        raw[name]["pipeline maxp dev dense"] = row["pipeline maxp dev dense"]
    if MIXED in rows:
        lines += ["", *mixed_table(rows[MIXED]["reports"], SPLIT)]
    common.write(args.output, lines + pooled(raw) + [""])
    args.output.with_suffix(".json").write_text(json.dumps(raw) + "\n")


if __name__ == "__main__":
    main()
