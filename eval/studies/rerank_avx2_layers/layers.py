"""The re-ranker's int8 on AVX2: which linear layers to keep in fp32 so that ONNX Runtime's
7-bit recipe keeps the bar, and what share of the work that leaves in fp32.

    python eval/studies/rerank_avx2_layers/layers.py --cat runs/jl-scifact809/scifact/cat \\
        [--work runs/rerank_avx2] [--collections scifact,pylib,faq,pydoc,debian,man] \\
        [--dev-queries 8] [--queries 100] [--keep 1,2,4,6,8] [--order-from SENSITIVITY.json]

The recipe is dotcat's AVX2 export (``onnx_backend._quantize`` with ``reduce_range``: per-channel
7-bit weights, activations quantised per call). Its int32 sums are exactly what an AVX2-only CPU
computes (docs/precision.md), so its quality is measured natively on any x86 CPU; its speed on
AVX2 is not (this script times nothing).

1. **Sensitivity, label-free, on dev queries** (Bondarenko et al. 2021's per-layer analysis):
   each quantisable linear layer alone is quantised (every other one left in fp32), and the
   pairs of ``--dev-queries`` dev queries of each collection with a dev split (their first
   stage's top ``--depth``) are scored. A layer's sensitivity is the mean over queries of its
   logits' absolute change from fp32's, over the spread (sd) of that query's fp32 logits; the
   share of discordant document pairs in each query's order is reported beside it.
2. **Candidates on test**: ``rr`` (every layer int8: the export ``auto`` would use),
   ``rr-emb`` (the embedding tables kept in fp32: ``quantize_dynamic`` also quantises their
   Gathers, per tensor, which saves no arithmetic), ``rr-keepK`` (the K most sensitive units
   kept in fp32), ``rr-ffn`` (every FFN output
   projection kept, ``keep_fp32="ffn_output"``), each re-ranking the same first stage (``--queries``
   test queries drawn with a fixed seed, ``dotcat search INDEX``'s hybrid run) at weight 1 (the
   cross-encoder's order alone: the most sensitive to its precision), against PyTorch fp32.
   Reported: each candidate's agreement with fp32 on the dev pairs (as in 1; far less noisy
   than nDCG@10 over 100 queries), nDCG@10, retention (the path's / fp32's), a paired t-test
   against fp32, and the
   share of the linear layers' multiply-adds each candidate leaves in fp32 (a count from the
   weights' shapes, not a timing). The bar ``auto`` keeps (docs/precision.md): the mean >= 99.8%
   of fp32's, none significantly below it (p < 0.05), none under 98.5%.

``--speed N`` also times the candidates on N SciFact pairs against sentence-transformers'
``CrossEncoder`` fp32 (``--rounds``, interleaved): on an AVX2-only CPU, the speed this study
cannot measure elsewhere. ``--speed-only`` (with ``--order-from``) times them and nothing else.

Indexes: ``WORK/NAME/index`` (built with ``dotcat index`` where missing). Every run and export
is cached under ``--work``.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import common  # noqa: E402

BAR = {"mean": 0.998, "floor": 0.985, "p": 0.05}


def first_stage(name: str, split: str, n: int, work: Path) -> Path:
    """``dotcat search WORK/NAME/index`` of the collection's ``split`` queries, ``n`` of them
    (:func:`bench_rerank_precision.first_stage`)."""
    from bench_rerank_precision import first_stage as searched

    folder = work / name
    return searched(name, common.COLLECTIONS[name], folder / "index", folder, n, split)


def pairs_of(name: str, split: str, run: Path, depth: int):
    """(first-stage run, query texts, document texts) of one collection's split."""
    from dotcat import load_queries
    from dotcat.data import load_corpus
    from dotcat.data.runs import ranked, read_run
    from dotcat.search.reranker import corpus_texts

    data = common.COLLECTIONS[name]
    first = ranked(read_run(run))
    needed = {doc for docs in first.values() for doc, _ in docs[:depth]}
    return first, load_queries(data, split=split), corpus_texts(load_corpus(data), needed)


def units(fp32_onnx: Path) -> dict[str, tuple[list[str], int]]:
    """What ``quantize_dynamic`` quantises, as units kept or quantised together: each linear
    layer (a MatMul or Gemm with a weight initialiser; its multiply-adds per token, in x out)
    and the embedding tables (their Gathers, one unit; no multiply-adds)."""
    import onnx

    graph = onnx.load(str(fp32_onnx), load_external_data=False).graph
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    found = {
        node.name: ([node.name], int(np.prod(shapes[node.input[1]])))
        for node in graph.node
        if node.op_type in ("MatMul", "Gemm") and node.input[1] in shapes
    }
    gathers = [n.name for n in graph.node if n.op_type == "Gather" and n.input[0] in shapes]
    return {"embeddings": (gathers, 0), **found}


def quantised(fp32_onnx: Path, out: Path, kept: list[str]) -> Path:
    """The 7-bit AVX2 export with the nodes ``kept`` left in fp32 (cached). A fused graph's
    fused ops have no inferred types: float is given (``DefaultTensorType``)."""
    if not out.exists():
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        from dotcat.models.export_files import quiet_export

        tmp = out.with_suffix(".part")
        with quiet_export():
            float32 = {"DefaultTensorType": onnx.TensorProto.FLOAT}
            quantize_dynamic(str(fp32_onnx), str(tmp), per_channel=True, reduce_range=True,
                             weight_type=QuantType.QInt8, nodes_to_exclude=kept,
                             extra_options=float32)  # fmt: skip
        tmp.rename(out)
    return out


def dev_logits(reranker, runs: list, depth: int) -> list[np.ndarray]:
    """Each dev query's logits over its first stage's top ``depth``, with the model as set."""
    out = []
    for first, queries, texts in runs:
        for qid, docs in first.items():
            ids = [d for d, _ in docs[:depth]]
            out.append(
                reranker.cross_encoder.score([queries[qid]] * len(ids), [texts[d] for d in ids])
            )
    return out


def discordant(a: np.ndarray, b: np.ndarray) -> float:
    """Share of document pairs ordered differently by ``a`` and ``b`` ((1 - Kendall tau) / 2)."""
    i, j = np.triu_indices(len(a), 1)
    return float(np.mean(np.sign(a[i] - a[j]) != np.sign(b[i] - b[j])))


class DevPairs:
    """The dev pairs (``--dev-queries`` dev queries of each collection with a dev split, their
    first stage's top ``--depth``) and fp32's logits over them."""

    def __init__(self, args, reranker) -> None:
        self.collections = [
            n for n in args.collections if (common.COLLECTIONS[n] / "qrels" / "dev.tsv").exists()
        ]
        self.runs = [
            pairs_of(n, "dev", first_stage(n, "dev", args.dev_queries, args.work), args.depth)
            for n in self.collections
        ]
        self.reranker, self.depth = reranker, args.depth
        reranker.cross_encoder.onnx = None
        self.ref = dev_logits(reranker, self.runs, args.depth)

    def agreement(self, model: Path) -> dict[str, float]:
        """The model's mean |logit change| / sd of the query's fp32 logits, and its share of
        discordant document pairs, against fp32's, averaged over the dev queries."""
        from dotcat.models.onnx_backend import OnnxRunner

        self.reranker.cross_encoder.onnx = OnnxRunner(model)
        got = dev_logits(self.reranker, self.runs, self.depth)
        self.reranker.cross_encoder.onnx = None
        pairs = list(zip(got, self.ref, strict=True))
        return {
            "change": float(
                np.mean([np.mean(np.abs(g - r)) / max(np.std(r), 1e-6) for g, r in pairs])
            ),
            "discordant": float(np.mean([discordant(g, r) for g, r in pairs])),
        }


def sensitivity(args, dev, fp32_onnx: Path, parts: dict) -> dict:
    """Each unit's sensitivity, quantised alone, on the dev pairs (cached as JSON); ``dev``
    gives the :class:`DevPairs`, made only where the cache is missing."""
    cache = args.work / "sensitivity.json"
    if cache.exists():
        return json.loads(cache.read_text())
    rows, dev = [], dev()
    for k, node in enumerate(parts, 1):
        others = [n for unit, (names, _) in parts.items() if unit != node for n in names]
        model = quantised(fp32_onnx, args.work / "onnx" / f"only-{k}.onnx", others)
        rows.append({"node": node, "macs": parts[node][1], **dev.agreement(model)})
        print(f"{k}/{len(parts)}: {rows[-1]}", flush=True)
        model.unlink()  # one file per layer would take GBs; the figures are kept
    cache.write_text(json.dumps({"collections": dev.collections, "rows": rows}, indent=1))
    return json.loads(cache.read_text())


def test_figures(args, reranker, candidates: dict[str, Path | None]) -> list[dict]:
    """Each candidate's test nDCG@10 per collection against fp32's (runs cached)."""
    from dotcat.data import load_qrels
    from dotcat.data.runs import read_run, write_run
    from dotcat.evaluation import evaluate
    from dotcat.evaluation.significance import paired_ttest
    from dotcat.models.onnx_backend import OnnxRunner

    rows = []
    for name in args.collections:
        first = first_stage(name, "test", args.queries, args.work)
        qrels = load_qrels(common.COLLECTIONS[name], split="test")
        reports = {}
        for label, model in candidates.items():
            out = args.work / name / f"{label}.trec"
            if not out.exists():
                run, queries, texts = pairs_of(name, "test", first, args.depth)
                reranker.cross_encoder.onnx = OnnxRunner(model) if model else None
                write_run(reranker.rerank(run, queries, texts), out, tag=label)
            found = read_run(out)
            reports[label] = evaluate(found, qrels, ["nDCG@10"], known_queries=found)
        base = reports["fp32"]
        for label, r in reports.items():
            ndcg = r.aggregate["nDCG@10"]
            p = 1.0 if r.per_query == base.per_query else paired_ttest(base, r, "nDCG@10").pvalue
            rows.append({"collection": name, "path": label, "queries": len(r.per_query),
                         "ndcg": ndcg, "retention": ndcg / base.aggregate["nDCG@10"],
                         "p": p})  # fmt: skip
        print(
            f"{name}: "
            + ", ".join(f"{r['path']} {r['retention']:.2%}" for r in rows[-len(reports) :]),
            flush=True,
        )
    reranker.cross_encoder.onnx = None
    return rows


def speed(args, reranker, candidates: dict[str, Path | None]) -> list[str]:
    """Pairs/s of each candidate against sentence-transformers' ``CrossEncoder`` at fp32, timed
    as ``bench_precision_pipeline.py`` times re-rankers (SciFact, 20 documents a query, pairs
    cut at 256 tokens, rounds interleaved)."""
    from sentence_transformers import CrossEncoder

    from bench_precision_pipeline import PAIR_TOKENS, interleaved, speed_texts
    from dotcat.models.onnx_backend import OnnxRunner

    texts, queries = speed_texts(args.speed)
    groups = [(queries[i], texts[i * 20 : (i + 1) * 20]) for i in range(len(texts) // 20)]
    st = CrossEncoder(str(args.cat), device="cpu", max_length=PAIR_TOKENS)
    cat = reranker.cross_encoder
    cat.max_length = PAIR_TOKENS  # an untrained head's tokenizer says 512: twice ST's work
    sessions = {label: OnnxRunner(model) if model else None for label, model in candidates.items()}

    def scored(label: str) -> None:
        cat.onnx = sessions[label]
        for query, docs in groups:
            cat.score_query(query, docs)

    runners = {"st": lambda: [st.predict([(q, d) for d in docs], batch_size=32,
                                         activation_fn=None) for q, docs in groups]}  # fmt: skip
    runners |= {label: (lambda label=label: scored(label)) for label in candidates}
    for run in runners.values():
        run()  # warm-up
    seconds, loads = interleaved(args.rounds, runners, "st")
    cat.onnx = None
    n = len(groups) * 20 * args.rounds
    lines = ["", f"## Speed: pairs/s ({n // args.rounds} pairs, {args.rounds} rounds, interleaved; "
             f"load before each round {loads})", "", "| path | pairs/s | x sentence-transformers |",
             "| --- | ---: | ---: |"]  # fmt: skip
    for label, s in seconds.items():
        lines.append(f"| {label} | {n / s:.1f} | {seconds['st'] / s:.2f}x |")
    return lines


def report(args, sens: dict, shares: dict, agree: dict, rows: list[dict]) -> list[str]:
    lines = common.header(
        "The re-ranker's 7-bit int8 (the AVX2 export) with its most sensitive layers in fp32",
        f"Re-ranker: `{common.shown(args.cat)}`, depth {args.depth}, weight 1 (its order "
        f"alone); first stage: `{common.shown(args.work)}/NAME/index`, hybrid, as `dotcat search` "
        f"runs it. Sensitivity on {args.dev_queries} dev queries of each of "
        f"{', '.join(sens['collections'])}; test: {args.queries} queries a collection.",
    )
    lines += ["## Sensitivity: each linear layer quantised alone (dev)", "",
              f"Measured on the re-ranker of `{sens['from']}`.\n" if "from" in sens else "",
              "| rank | layer | change / sd | discordant pairs | multiply-adds |",
              "| ---: | --- | ---: | ---: | ---: |"]  # fmt: skip
    ranked_rows = sorted(sens["rows"], key=lambda r: -r["change"])
    for i, r in enumerate(ranked_rows, 1):
        lines.append(
            f"| {i} | `{r['node']}` | {r['change']:.4f} | {r['discordant']:.4f} | {r['macs']:,} |"
        )
    return lines + test_table(shares, agree, rows)


def test_table(shares: dict, agree: dict, rows: list[dict]) -> list[str]:
    """Each candidate's dev agreement and test retention per collection, against the bar."""
    names = list(dict.fromkeys(r["collection"] for r in rows))
    head = " | ".join(names)
    lines = ["", "## Test: nDCG@10 kept of fp32's (paired t-test p)", "",
              f"| path | fp32 share of linear work | dev change / sd | dev discordant | {head} "
              "| mean | lowest | meets the bar |",
              "| --- |" + " ---: |" * (len(names) + 5) + " --- |"]  # fmt: skip
    for path in dict.fromkeys(r["path"] for r in rows):
        mine = {r["collection"]: r for r in rows if r["path"] == path}
        mean = np.mean([r["retention"] for r in mine.values()])
        low = min(r["retention"] for r in mine.values())
        ok = (
            mean >= BAR["mean"]
            and low >= BAR["floor"]
            and all(r["p"] >= BAR["p"] or r["retention"] >= 1 for r in mine.values())
        )
        cells = " | ".join(f"{mine[n]['retention']:.2%} ({mine[n]['p']:.2g})" for n in names)
        dev = agree.get(path, {"change": 0.0, "discordant": 0.0})
        lines.append(f"| {path} | {shares.get(path, 1.0):.1%} | {dev['change']:.4f} | "
                     f"{dev['discordant']:.4f} | {cells} | {mean:.2%} | {low:.2%} | "
                     f"{'yes' if ok else 'no'} |")  # fmt: skip
    lines += [
        "",
        "fp32's nDCG@10: "
        + ", ".join(f"{r['collection']} {r['ndcg']:.4f}" for r in rows if r["path"] == "fp32"),
    ]
    return lines


def main() -> None:
    parser = common.parser(
        __doc__, output=Path(__file__).with_suffix(".md"), work="runs/rerank_avx2"
    )
    parser.add_argument("--cat", type=Path, required=True, help="a trained BERT_CAT")
    parser.add_argument("--collections", default="scifact,pylib,faq,pydoc,debian,man")
    parser.add_argument("--dev-queries", type=int, default=8)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--order-from", type=Path,
                        help="another run's sensitivity.json: its order")  # fmt: skip
    parser.add_argument("--speed", type=int, help="also time the candidates on this many pairs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--speed-only",
        action="store_true",
        help="time the candidates only (needs --order-from; no collections)",
    )
    parser.add_argument("--keep", default="1,2,4,6,8", help="how many of the most sensitive layers")
    args = parser.parse_args()
    args.collections = args.collections.split(",")
    from dotcat.models.onnx_backend import KEEP_FP32, export
    from dotcat.search.reranker import Reranker

    reranker = Reranker.load(str(args.cat), args.depth, 1.0, precision="fp32")
    home = args.work / "onnx"
    fp32_onnx = export(args.cat, "cross-encoder", "fp32", home, reranker.cross_encoder.fingerprint)
    parts = units(fp32_onnx)
    dev = functools.cache(lambda: DevPairs(args, reranker))  # only where a figure is missing
    if args.order_from:  # a recipe chosen on one re-ranker, checked on another
        sens = json.loads(args.order_from.read_text()) | {"from": common.shown(args.order_from)}
    else:
        sens = sensitivity(args, dev, fp32_onnx, parts)
    order = [r["node"] for r in sorted(sens["rows"], key=lambda r: -r["change"])]
    import re

    ffn = [n for n in parts if any(re.search(p, n) for p in KEEP_FP32["ffn_output"])]
    kept = {
        "rr": [],
        "rr-emb": ["embeddings"],
        **{f"rr-keep{k}": order[: int(k)] for k in args.keep.split(",")},
        "rr-ffn": ffn,
    }
    total = sum(macs for _, macs in parts.values())
    shares = {label: sum(parts[u][1] for u in k) / total for label, k in kept.items()}
    candidates = {"fp32": None, **{label: quantised(fp32_onnx, home / f"{label}.onnx",
                                             [n for u in k for n in parts[u][0]])
                                   for label, k in kept.items()}}  # fmt: skip
    if args.speed_only:  # an AVX2 CPU's speed: the recipes' quality is measured natively
        title = "The re-ranker's 7-bit int8 (the AVX2 export) with its most sensitive units in fp32"
        lines = common.header(title, f"Re-ranker: `{common.shown(args.cat)}`; units kept in "
                              f"the order of `{common.shown(args.order_from)}`.")  # fmt: skip
        lines += [f"- {label}: {share:.1%} of the linear work in fp32" for label, share in
                  shares.items()]  # fmt: skip
        return common.write(args.output, lines + speed(args, reranker, candidates))
    cache = args.work / "agreement.json"
    agree = json.loads(cache.read_text()) if cache.exists() else {}
    for label, model in candidates.items():
        if model and label not in agree:
            agree[label] = dev().agreement(model)
            cache.write_text(json.dumps(agree, indent=1))
    rows = test_figures(args, reranker, candidates)
    (args.work / "layers.json").write_text(json.dumps({"kept": kept, "rows": rows}, indent=1))
    lines = report(args, sens, shares, agree, rows)
    common.write(args.output, lines + (speed(args, reranker, candidates) if args.speed else []))


if __name__ == "__main__":
    main()
