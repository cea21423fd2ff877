"""SciFact test: BM25 and trained BERT_DOT first stages, each re-ranked by a trained BERT_CAT.

    python eval/benchmarks/bench_rerank.py --cat-model runs/cat/lce \\
        --dense-index indexes/scifact-dot-contrastive [--depths 20,50,100] [--latency-queries 20]

The cross-encoder is one trained by ``dotcat train cat`` (its ``dotcat_training.json`` gives the
training time and settings reported here); the dense index is one of a trained BERT_DOT
(``eval/benchmarks/bench_train_dot.py`` builds ``indexes/scifact-dot-contrastive``).

For every test query the script takes BM25's and the dense index's top ``max(depths)``, scores
every distinct (query, document) pair of those heads once with
:meth:`dotcat.models.cross_encoder.CrossEncoder.score` (a document in both lists is scored
once), then builds the re-ranked run of each first stage at each depth from those scores with
:func:`dotcat.search.reranker.fuse` (a depth-20 re-ranking is the top 20 re-ordered, the rest
below in first-stage order) and evaluates it with ir-measures (nDCG@10, RR@10, R@100). A row
with the interpolation weight chosen on the dev split (recorded in the model directory) is
added for the dense first stage.

Latency: for ``--latency-queries`` test queries, one query at a time as ``dotcat search``
runs it, (a) the cross-encoder alone on the query's top ``depth`` at each depth and (b) the
whole ``search --rerank --depth 20`` path in-process (query encoding, FAISS, document store,
re-ranking). p50/p95 in milliseconds. Writes ``eval/benchmarks/results/rerank.md``.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np

import common

MEASURES = ("nDCG@10", "RR@10", "R@100")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def union_pairs(runs: dict[str, dict], depths: dict[str, int]) -> list[tuple[str, str]]:
    """Every (qid, doc) in the top ``depths[name]`` of each run, once, sorted."""
    return sorted(
        {
            (q, d)
            for name, run in runs.items()
            for q, docs in run.items()
            for d, _ in docs[: depths[name]]
        }
    )


def score_pairs(ce, pairs: list[tuple[str, str]], queries: dict, texts: dict) -> dict:
    """(qid, doc) -> logit, all pairs in one scoring call (sorted by length inside)."""
    logits = ce.score(
        [queries[q] for q, _ in pairs], [texts[d] for _, d in pairs], show_progress=True
    )
    return dict(zip(pairs, logits.tolist(), strict=True))


def reranked(run: dict, cache: dict, depth: int, alpha: float = 1.0) -> dict:
    from dotcat.search.reranker import Candidates, fuse

    candidates = {
        q: Candidates(
            docs=[d for d, _ in docs],
            first=np.asarray([s for _, s in docs], dtype=np.float64),
            cat=np.asarray([cache[(q, d)] for d, _ in docs[:depth]], dtype=np.float64),
        )
        for q, docs in run.items()
    }
    return fuse(candidates, alpha)


def main() -> None:
    parser = common.parser(__doc__, output="rerank.md", data=common.SCIFACT)
    parser.add_argument("--cat-model", type=Path, default=Path("runs/cat/lce"))
    parser.add_argument("--dense-index", type=Path, default=Path("indexes/scifact-dot-contrastive"))
    parser.add_argument("--depths", default="20,50,100", help="for the dense first stage")
    parser.add_argument("--bm25-depths", default=None, help="for BM25 (default: --depths)")
    parser.add_argument("--latency-queries", type=int, default=20)
    parser.add_argument("--latency-depths", default="20")
    parser.add_argument("--max-queries", type=int, default=None, help="smoke tests only")
    args = parser.parse_args()
    depths = {
        "BERT_DOT (trained)": sorted(int(d) for d in args.depths.split(",")),
        "BM25": sorted(int(d) for d in (args.bm25_depths or args.depths).split(",")),
    }
    latency_depths = sorted(int(d) for d in args.latency_depths.split(","))
    common.setup_logging()

    from dotcat.data import load_corpus, load_qrels, load_queries
    from dotcat.evaluation import evaluate
    from dotcat.index import document_text
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
    from dotcat.search.dense import DenseRetriever
    from dotcat.search.lexical import bm25_search
    from dotcat.search.reranker import corpus_texts, rerank

    queries = load_queries(args.data, split="test")
    qrels = load_qrels(args.data, "test")
    if args.max_queries:
        queries = dict(list(queries.items())[: args.max_queries])
        qrels = {q: qrels[q] for q in queries}
    corpus = load_corpus(args.data)
    retriever = DenseRetriever(args.dense_index, device="cpu")
    runs = {
        "BM25": bm25_search(corpus, queries, k=100),
        "BERT_DOT (trained)": retriever.batch_search(queries, k=100),
    }
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(args.cat_model), device="cpu"))
    ce.require_trained()
    pairs = union_pairs(runs, {name: max(ds) for name, ds in depths.items()})
    texts = corpus_texts(corpus, {d for _, d in pairs})
    start = time.perf_counter()
    cache = score_pairs(ce, pairs, queries, texts)
    batch_seconds = time.perf_counter() - start
    print(f"scored {len(cache)} pairs in {batch_seconds:.0f} s", flush=True)

    record_path = args.cat_model / "dotcat_cross_encoder.json"
    alpha = json.loads(record_path.read_text()).get("interpolation_alpha")
    rows = []
    for name, run in runs.items():
        rows.append((name, "-", evaluate(run, qrels, measures=MEASURES).aggregate))
        for depth in depths[name]:
            report = evaluate(reranked(run, cache, depth), qrels, measures=MEASURES)
            rows.append((f"{name} -> BERT_CAT", str(depth), report.aggregate))
            print(rows[-1], flush=True)
    if alpha is not None and alpha != 1.0:
        name = "BERT_DOT (trained)"
        for depth in depths[name]:
            report = evaluate(reranked(runs[name], cache, depth, alpha), qrels, measures=MEASURES)
            rows.append((f"{name} -> BERT_CAT, interpolated (alpha {alpha} from dev)", str(depth),
                         report.aggregate))  # fmt: skip

    # Latency, one query at a time.
    sample = list(queries)[: args.latency_queries]
    cat_ms: dict[int, list[float]] = {d: [] for d in latency_depths}
    for qid in sample:
        docs = runs["BERT_DOT (trained)"][qid]
        for depth in latency_depths:
            head = [texts[d] for d, _ in docs[:depth]]
            t0 = time.perf_counter()
            ce.score_query(queries[qid], head)
            cat_ms[depth].append((time.perf_counter() - t0) * 1000)
    pipeline_ms = []
    retriever.search(queries[sample[0]], k=20)  # warm-up
    for qid in sample:
        t0 = time.perf_counter()
        hits = retriever.search(queries[qid], k=20)
        hit_texts = {h.doc_id: document_text(h.title, h.text) for h in hits}
        rerank({qid: [(h.doc_id, h.score) for h in hits]}, {qid: queries[qid]}, hit_texts, ce, 20)
        pipeline_ms.append((time.perf_counter() - t0) * 1000)

    training = json.loads(common.training_record_path(args.cat_model).read_text())
    hp, timing = training["hyperparameters"], training["timings"]
    lines = [
        *common.header(
            "SciFact test: first stages re-ranked by dotcat's trained BERT_CAT", torch=True
        ),
        f"Test split: {len(queries)} queries, measures by ir-measures. First stages: BM25 "
        f"(bm25s, k1=0.9, b=0.4) and `{args.dense_index}` (exact search), top 100 each; "
        "re-ranked at the depths in the table (scores of a pair are shared between depths).",
        f"Cross-encoder: `{args.cat_model}` (max length {ce.max_length}), trained by "
        f"`dotcat train cat`: loss {hp['loss']}, {hp['n_negatives']} negatives per positive "
        f"from {hp['first_stages']} top {hp['depth']}, {hp['epochs']} epoch(s), batch "
        f"{hp['batch_size']} groups, lr {hp['lr']}, base {hp['base']}; "
        f"{timing['train_seconds'] / 60:.1f} min training + {timing['eval_seconds'] / 60:.1f} "
        f"min dev evaluation + {timing['mining_seconds'] / 60:.1f} min first stages "
        f"({timing['total_seconds'] / 60:.1f} min in all), {training['pairs_per_second']:.2f} "
        f"training pairs/s, best epoch {training['best_epoch']}.",
        "",
        "| system | depth | " + " | ".join(MEASURES) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in MEASURES) + " |",
    ]
    for name, depth, scores in rows:
        lines.append(
            f"| {name} | {depth} | " + " | ".join(f"{scores[m]:.4f}" for m in MEASURES) + " |"
        )
    lines += [
        "",
        f"Batch re-ranking: {len(cache)} distinct pairs scored in {batch_seconds:.0f} s "
        f"({len(cache) / batch_seconds:.1f} pairs/s).",
        "",
        f"Latency per query ({len(sample)} test queries, one at a time, dense first stage):",
        "",
        "| what | p50 ms | p95 ms |",
        "| --- | ---: | ---: |",
    ]
    for depth in latency_depths:
        lines.append(
            f"| BERT_CAT scoring, depth {depth} | {statistics.median(cat_ms[depth]):.0f} | "
            f"{percentile(cat_ms[depth], 95):.0f} |"
        )
    lines.append(
        f"| whole `search --rerank --depth 20` (encode, FAISS, doc store, re-rank) | "
        f"{statistics.median(pipeline_ms):.0f} | {percentile(pipeline_ms, 95):.0f} |"
    )
    dev = ", ".join(
        f"{e['epoch']}: {e['dev_nDCG@10']:.4f}"
        for e in training["epochs"]
        if e.get("dev_nDCG@10") is not None
    )
    lines += ["", f"Dev nDCG@10 per epoch (epoch 0 = the first stage alone): {dev}."]
    if training.get("interpolation"):
        scores = training["interpolation"]["dev_scores"]
        lines.append(
            "Dev nDCG@10 by interpolation weight alpha (1 = plain cross-encoder): "
            + ", ".join(f"{a}: {s:.4f}" for a, s in scores.items())
            + "."
        )
    print("\n".join(lines))
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
