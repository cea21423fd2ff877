"""Choose a BERT_CAT recipe by two-fold cross-validation on the training queries.

A dev split of SciFact holds ~85 queries: recipes that differ by 0.01-0.02 nDCG@10 cannot be
told apart on it (dev and test disagreed on the pre-trained recipe, ``cat_pretrain.md``). Here the
training queries outside dev are cut into two folds; each recipe is trained twice, once per
fold (``train cat`` on a BEIR dir whose ``train`` qrels are dev + that fold, so ``train cat``
holds out the same dev queries), and each model re-ranks the queries it did *not* train on.
Every training query is then scored by a model that never saw it: ~8x dev's queries for the
comparison, still without touching test.

    # 1. the folds (BEIR dirs sharing SciFact's corpus and queries)
    python eval/studies/cat_pretrain/bench_cat_folds.py folds --data data/scifact --out runs/folds
    # 2. one training per recipe and fold, e.g. the README default
    dotcat train cat runs/folds/fold0 runs/cat-fold0 --first-stage indexes/scifact-minilm \\
        --first-stage bm25
    dotcat train cat runs/folds/fold1 runs/cat-fold1 ...
    # 3. the comparison
    python eval/studies/cat_pretrain/bench_cat_folds.py compare --data data/scifact \\
        --folds runs/folds --index indexes/scifact-minilm \\
        --recipe default=runs/cat-fold0,runs/cat-fold1 \\
        --recipe pretrained=runs/cat-pt-fold0,runs/cat-pt-fold1 [--depth 20] \\
        [--output eval/studies/cat_pretrain/cat_folds.md]

The first stage is the index's default (hybrid where it has BM25), top ``--depth``; the
cross-encoders run as ``dotcat rerank`` runs them (``precision auto``). Reported per recipe:
nDCG@10 of the plain logit on the held-out folds (``cv``), on the model's own training fold
(``own``: how much it memorised), on dev (mean of the two models), and the min-max
interpolation with the first stage (:func:`dotcat.search.reranker.fuse`) at each weight on the
held-out folds. ``p``: paired t-test over the held-out queries.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common
from bench_cat_pipeline import per_query
from bench_rerank import reranked, score_pairs, union_pairs

FOLDS = 2
WEIGHTS = [round(0.1 * i, 1) for i in range(11)]
FOLD_FILE = "fold_queries.txt"


def fold_assignment(train_qids: list[str], seed: int) -> dict[str, int]:
    """Query -> fold: the train queries (in qrels order) shuffled with ``seed``, dealt in turn."""
    order = list(train_qids)
    random.Random(seed).shuffle(order)
    return {q: i % FOLDS for i, q in enumerate(order)}


def make_folds(data: Path, out: Path, seed: int) -> None:
    """``out/fold{k}``: SciFact's corpus and queries (links), ``qrels/train.tsv`` = dev + fold k."""
    from dotcat.data.splits import split_dev

    with open(data / "qrels" / "train.tsv", encoding="utf-8", newline="") as f:
        header, *rows = list(csv.reader(f, delimiter="\t"))
    train, dev = split_dev(list(dict.fromkeys(r[0] for r in rows)), 0.1, 0)
    fold = fold_assignment(train, seed)
    for k in range(FOLDS):
        target = out / f"fold{k}"
        (target / "qrels").mkdir(parents=True, exist_ok=True)
        for name in ("corpus.jsonl.gz", "queries.jsonl.gz"):
            link = target / name
            if not link.exists():
                link.symlink_to((data / name).resolve())
        keep = set(dev) | {q for q in train if fold[q] == k}
        with open(target / "qrels" / "train.tsv", "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, delimiter="\t")
            writer.writerow(header)
            writer.writerows(r for r in rows if r[0] in keep)
        own = [q for q in train if fold[q] == k]
        (target / FOLD_FILE).write_text("\n".join(own) + "\n", encoding="utf-8")
        print(f"{target}: {len(own)} fold queries + {len(dev)} dev queries")


def read_folds(folds: Path) -> list[set[str]]:
    return [set((folds / f"fold{k}" / FOLD_FILE).read_text().split()) for k in range(FOLDS)]


def logits_of(model: str, run: dict, queries: dict, data: Path, depth: int, work: Path) -> dict:
    """(qid, doc) -> logit of every pair in the run's top ``depth``, cached under ``work``."""
    from dotcat.data import load_corpus
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
    from dotcat.search.reranker import corpus_texts

    ce = CrossEncoder.load(CrossEncoderConfig(model=model))
    cache = work / f"logits-{ce.fingerprint[:12]}-{ce.precision}-{ce.backend}.json"
    pairs = union_pairs({"run": run}, {"run": depth})
    stored = json.loads(cache.read_text()) if cache.exists() else {}
    logits = {tuple(k.split("\t")): v for k, v in stored.get("logits", {}).items()}
    missing = [p for p in pairs if p not in logits]
    if missing:
        texts = corpus_texts(load_corpus(data), {d for _, d in missing})
        started = time.perf_counter()
        logits.update(score_pairs(ce, missing, queries, texts))
        logging.info("%s: %d pairs in %.0f s", model, len(missing), time.perf_counter() - started)
        cache.write_text(json.dumps({"logits": {f"{q}\t{d}": v for (q, d), v in logits.items()}}))
    return logits


def mean_over(scores: dict[str, float], qids) -> float:
    return float(np.mean([scores[q] for q in qids]))


def compare(args: argparse.Namespace) -> None:
    from scipy.stats import ttest_rel

    from dotcat.data import load_qrels, load_queries
    from dotcat.data.splits import split_dev
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    args.work.mkdir(parents=True, exist_ok=True)
    queries, qrels = load_queries(args.data, split="train"), load_qrels(args.data, "train")
    _, dev = split_dev(list(qrels), 0.1, 0)
    folds = read_folds(args.folds)
    pipeline = SearchPipeline(args.index, PipelineConfig())
    run = {q: docs[: args.depth] for q, docs in pipeline.run(queries, args.depth).items()}
    first = per_query(run, qrels)
    held_out = sorted(folds[0] | folds[1])
    base = [first[q] for q in held_out]
    rows, weight_rows, cv_scores = [], [], {}
    for spec in args.recipe:
        name, models = spec.split("=", 1)
        paths = models.split(",")
        if len(paths) != FOLDS:
            raise SystemExit(f"--recipe {spec}: give {FOLDS} models, one per fold")
        fused = {w: {} for w in WEIGHTS}
        own, dev_scores = {}, []
        for k, model in enumerate(paths):
            other = folds[1 - k]  # model k trained on fold k: it re-ranks the other fold
            needed = other | set(dev) | (folds[k] if args.own else set())
            sub = {q: docs for q, docs in run.items() if q in needed}
            logits = logits_of(model, sub, queries, args.data, args.depth, args.work)
            for w in WEIGHTS:
                got = per_query(reranked(sub, logits, args.depth, w), qrels)
                fused[w].update({q: got[q] for q in other})
                if w == 1.0:
                    own.update({q: got[q] for q in folds[k] if q in got})
                    dev_scores.append(mean_over(got, dev))
        plain = fused[1.0]
        cv_scores[name] = plain
        a = [plain[q] for q in held_out]
        rows.append(
            f"| {name} | {np.mean(a):.4f} | {np.mean(a) - np.mean(base):+.4f} | "
            f"{ttest_rel(a, base).pvalue:.3f} | "
            f"{f'{mean_over(own, held_out):.4f}' if args.own else '-'} | "
            f"{np.mean(dev_scores):.4f} |"
        )
        means = {w: mean_over(fused[w], held_out) for w in WEIGHTS}
        best = max(WEIGHTS, key=lambda w: (means[w], w))
        weight_rows.append(
            f"| {name} | {best:g} | {means[best]:.4f} | "
            + " ".join(f"{means[w]:.3f}" for w in WEIGHTS)
            + " |"
        )
    names = list(cv_scores)
    pair_rows = []
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            a = [cv_scores[x][q] for q in held_out]
            b = [cv_scores[y][q] for q in held_out]
            pair_rows.append(
                f"| {x} - {y} | {np.mean(a) - np.mean(b):+.4f} | {ttest_rel(a, b).pvalue:.3f} |"
            )
    lines = [
        *common.header("BERT_CAT recipes, two-fold cross-validation on SciFact train"),
        f"First stage: `{args.index}`, its default ({pipeline.first_stage}), top "
        f"{args.depth}; {len(held_out)} held-out training queries (each re-ranked by the model "
        f"trained on the other fold), {len(dev)} dev queries (held out of both folds). First "
        f"stage alone: held-out {np.mean(base):.4f}, dev {mean_over(first, dev):.4f} nDCG@10.",
        "",
        "## Plain logit (nDCG@10)",
        "",
        "| recipe | held-out | diff vs first stage | p | own training fold | dev |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "## Between recipes (held-out queries, plain logit)",
        "",
        "| recipes | diff | p |",
        "| --- | ---: | ---: |",
        *pair_rows,
        "",
        "## Min-max interpolation with the first stage (held-out queries)",
        "",
        "| recipe | best weight | nDCG@10 | weights 0, 0.1, ..., 1 |",
        "| --- | ---: | ---: | --- |",
        *weight_rows,
    ]
    print("\n".join(lines))
    if args.output:
        common.write(args.output, lines)


def main() -> None:
    parser = common.parser(__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    folds = sub.add_parser("folds", help="write the two fold datasets")
    folds.add_argument("--data", type=Path, default=common.SCIFACT)
    folds.add_argument("--out", type=Path, required=True)
    folds.add_argument("--seed", type=int, default=13)
    comp = sub.add_parser("compare", help="re-rank held-out folds with each recipe's models")
    comp.add_argument("--data", type=Path, default=common.SCIFACT)
    comp.add_argument("--folds", type=Path, required=True)
    comp.add_argument("--index", type=Path, required=True)
    comp.add_argument("--recipe", action="append", required=True, help="NAME=FOLD0,FOLD1")
    comp.add_argument("--depth", type=int, default=20)
    comp.add_argument(
        "--no-own",
        dest="own",
        action="store_false",
        help="skip each model's own training fold (half the scoring; no memorisation column)",
    )
    comp.add_argument("--work", type=Path, default=Path("runs/cat-folds"))
    comp.add_argument("--output", type=Path, help="a results file (default: print only)")
    args = parser.parse_args()
    common.setup_logging()
    if args.command == "folds":
        make_folds(args.data, args.out, args.seed)
    else:
        compare(args)


if __name__ == "__main__":
    main()
