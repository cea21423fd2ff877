"""Split long documents wherever they are: does deciding per document cost any collection?

    python eval/studies/passages/per_document.py --variants before after    # five collections
    python eval/studies/passages/per_document.py --collections faq pydoc \
        --variants before x2 x4 x8 --output eval/studies/passages/per_document_factors.md

The rule before (issue 51): a collection splits every document longer than the window when at
least half of an evenly spaced sample is more than twice the encoder's max length, and
otherwise splits none (a 5,000-word text among short notes was cut at 256 tokens). The rule
after: such a collection still splits every long document; any other splits, document by
document, the documents more than ``SPLIT_FACTOR`` (16) times the max length (4,096 tokens),
in passages of ``LONG_WINDOW`` tokens, and keeps the others whole. Where the rule before
splits a collection, or none of its documents is that long, the rule after builds the index of
before: ``before`` and ``after`` are then not built, the count is reported instead.

For each collection and variant the index is built as ``dotcat index`` builds it
(:func:`dotcat.build_and_tune`: BM25 beside it, the hybrid fusion chosen on the dev queries),
then the default pipeline (the hybrid) and dense alone answer the dev queries (chosen on) and
the test queries (reported): nDCG@10 and R@100, with a paired t-test of each variant against
``before`` on test. The variants, all through the same code path:

- ``before``: the rule before, as the collection-level choice :meth:`Splitter.splits` makes it
  (``passages=True`` where it splits, ``False`` elsewhere; the build is the one the old rule
  made);
- ``after``: the default now (``passages=None``): documents longer than ``SPLIT_FACTOR`` (16)
  times the max length in passages of 256 tokens;
- ``x2``, ``x4``, ``x8``, ``x16``: the same with that factor (``SPLIT_FACTOR`` set here, in
  process);
  ``x2w128``: factor 2, passages of 128 tokens (``passage_window=128``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

DATA = {"scifact": "data/scifact"} | {
    name: f"runs/collections/{name}" for name in ("pylib", "faq", "pydoc", "debian")
}
VARIANTS = ("before", "after", "x2", "x2w128", "x4", "x8", "x16")
HERE = Path(__file__).resolve().parent


def rules(data: str) -> tuple[bool, int, int]:
    """Whether the rule before splits this collection (every long document), and how many of
    its documents (all of them, not a sample) the rule after splits, of how many."""
    from dotcat.data import load_corpus
    from dotcat.index.build import split_sample
    from dotcat.index.passages import PassageConfig, Splitter
    from dotcat.models import BiEncoder, EncoderConfig

    encoder = BiEncoder.load(EncoderConfig(model="default"))
    splitter = Splitter.for_encoder(encoder, PassageConfig())
    corpus = load_corpus(data)
    rows = split_sample(corpus)
    split, _ = splitter.splits(list(zip(rows["title"], rows["text"], strict=True)))
    limit = rule_limit(encoder.max_length)
    over = sum(not splitter.fits(t, x, limit) for t, x in zip(corpus["title"], corpus["text"],
                                                              strict=True))  # fmt: skip
    return split, over, len(corpus)


def rule_limit(max_length: int) -> int:
    """The length in tokens above which the rule after splits a document on its own."""
    from dotcat.index.passages import SPLIT_FACTOR

    return SPLIT_FACTOR * max_length


def build(name: str, variant: str, work: Path, splits: bool) -> dict:
    """Build one variant's index (kept in ``work``: a second run reuses it)."""
    import dotcat
    from dotcat.index import passages as rule
    from dotcat.index.config import IndexConfig
    from dotcat.index.manifest import Manifest
    from dotcat.index.passages import PassageConfig

    out = work / name / variant
    done = out / "manifest.json"
    if not done.is_file():
        passages = {"before": PassageConfig(enabled=splits),
                    "x2w128": PassageConfig(window=128)}.get(variant, PassageConfig())  # fmt: skip
        factor = {"x2": 2, "x2w128": 2, "x4": 4, "x8": 8, "x16": 16}.get(variant, rule.SPLIT_FACTOR)
        shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        default, rule.SPLIT_FACTOR = rule.SPLIT_FACTOR, factor
        try:
            dotcat.build_and_tune(DATA[name], out, config=IndexConfig(passages=passages),
                                  overwrite=True, show_progress=False)  # fmt: skip
        finally:
            rule.SPLIT_FACTOR = default
        (out / "seconds.txt").write_text(f"{time.perf_counter() - start:.1f}\n")
    manifest = Manifest.read(out)
    return {
        "dir": str(out),
        "vectors": manifest.vector_count,
        "documents": manifest.documents["count"],
        "split": split_documents(out),
        "passages": manifest.passages,
        "fusion": manifest.fusion,
        "seconds": float((out / "seconds.txt").read_text()),
    }


def split_documents(index: Path) -> int:
    from dotcat.index.docstore import DocStore

    store = DocStore(index / "docstore.sqlite")
    try:
        return store.split_documents() if store.has_passages() else 0
    finally:
        store.close()


def evaluate_index(index: str, data: str) -> dict:
    """Dev and test nDCG@10 / R@100 of the default pipeline and of dense alone, and the
    per-query reports (for the paired tests)."""
    from dotcat.data import load_qrels, load_queries
    from dotcat.data.splits import find_dev_split
    from dotcat.evaluation import evaluate
    from dotcat.search.pipeline import SearchPipeline

    pipeline = SearchPipeline(index)
    dev = find_dev_split(data)
    splits = {"dev": (dev.queries, dev.qrels), "test": (load_queries(data, split="test"),
                                                       load_qrels(data, split="test"))}  # fmt: skip
    out = {}
    for split, (queries, qrels) in splits.items():
        for system, stage in (("hybrid", None), ("dense", "dense")):
            run = pipeline.run(queries, 100, first_stage=stage)
            report = evaluate(run, qrels, measures=["nDCG@10", "R@100"])
            out[f"{split} {system}"] = report
    return out


def paired_p(before, after) -> float:
    from dotcat.evaluation.significance import paired_ttest

    return paired_ttest(before, after, "nDCG@10").pvalue


def table(results: dict, variants: list[str]) -> list[str]:
    lines = [
        "| collection | variant | split documents | vectors | build s | dev hybrid | test hybrid "
        "| test - before | p | test R@100 | dev dense | test dense |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, found in results.items():
        base = found.get("before")
        for variant in variants:
            row = found.get(variant)
            if row is None:
                continue
            r = row["reports"]

            def nd(key: str, r=r) -> float:
                return float(r[key].aggregate["nDCG@10"])

            delta = p = ""
            if base is not None and variant != "before":
                delta = f"{nd('test hybrid') - nd_of(base, 'test hybrid'):+.4f}"
                p = f"{paired_p(base['reports']['test hybrid'], r['test hybrid']):.2g}"
            lines.append(
                f"| {name} | {variant} | {row['split']} | {row['vectors']} | {row['seconds']:.0f} "
                f"| {nd('dev hybrid'):.4f} | {nd('test hybrid'):.4f} | {delta} | {p} "
                f"| {float(r['test hybrid'].aggregate['R@100']):.4f} | {nd('dev dense'):.4f} "
                f"| {nd('test dense'):.4f} |"
            )
    return lines


def nd_of(row: dict, key: str) -> float:
    return float(row["reports"][key].aggregate["nDCG@10"])


def main() -> None:
    p = common.parser(__doc__, output=HERE / "per_document.md", work="runs/per_document")
    p.add_argument("--collections", nargs="+", default=list(DATA), choices=list(DATA))
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    args: argparse.Namespace = p.parse_args()
    common.setup_logging()
    import os

    load = os.getloadavg()[0]
    results: dict[str, dict] = {}
    split_before, same = {}, []
    for name in args.collections:
        splits, over, count = rules(DATA[name])
        split_before[name] = splits
        variants = args.variants
        if splits or over == 0:  # the rule after builds the index of before: nothing to measure
            same.append(f"{name} ({'the rule before splits it' if splits else 'none'}; "
                        f"{over} of {count} documents over the length)")  # fmt: skip
            variants = [v for v in variants if v != "after"]
            if variants == ["before"]:  # nothing to compare it with
                variants = []
        results[name] = {}
        for variant in variants:
            row = build(name, variant, args.work, splits)
            row["reports"] = evaluate_index(row["dir"], DATA[name])
            results[name][variant] = row
            print(name, variant, {k: round(float(v.aggregate["nDCG@10"]), 4)
                                  for k, v in row["reports"].items()}, flush=True)  # fmt: skip
    lines = common.header(
        "Long documents wherever they are: per-document splitting against the rule before",
        f"Load average {load:.1f} when it started (a shared machine: times are indicative).",
        torch=True,
    )
    lines += [
        "Rule before: split every long document only where at least half are more than twice "
        "the window, else none. After: the same where that holds; elsewhere the documents "
        "longer than 16 times the max length (4,096 tokens) are split into passages of 256 "
        "tokens (`after`, the default; `x2`, `x4`, `x8`: 2, 4 and 8 times; `x2w128`: 2 times, "
        "passages of 128 tokens), the others kept whole, BM25 reading documents whole. "
        "`dotcat.build_and_tune` builds each index (fusion chosen on dev); the default "
        "pipeline (hybrid) and dense answer dev (chosen on) and test "
        "(reported) queries; p: paired t-test of test nDCG@10 against `before`.",
        "",
        "Collections the rule before split: "
        + (", ".join(n for n, s in split_before.items() if s) or "none")
        + ".",
        "",
        "Where the rule before splits a collection, or none of its documents is longer than "
        "the rule after's length, the rule after builds the very index of before (the same "
        "code path: no passages, or every long document split as before), so `before` and "
        "`after` are not built there: " + (", ".join(same) or "none") + ".",
        "",
        *table(results, args.variants),
    ]
    common.write(args.output, lines)
    raw = {n: {v: {k: x for k, x in row.items() if k != "reports"} | {
        "ndcg": {k: float(r.aggregate["nDCG@10"]) for k, r in row["reports"].items()}}
        for v, row in found.items()} for n, found in results.items()}  # fmt: skip
    (args.output.with_suffix(".json")).write_text(json.dumps(raw, indent=1) + "\n")


if __name__ == "__main__":
    main()
