"""Precision paths (fp32, bf16, int8) judged by speed against sentence-transformers and by
ranking quality against fp32, on one machine in one run.

    python eval/benchmarks/bench_precision.py --data data/scifact --trained runs/dot \\
        --cat runs/cat-teacher

Speed (same texts, max length 256, batch size 32, the paths interleaved over ``--rounds``):
document encoding docs/s against ``SentenceTransformer.encode`` fp32; re-ranking pairs/s
against ``CrossEncoder.predict`` fp32; one warm query (encode + exact search + re-rank at depth
20), in process, p50/p95 ms.

Quality, on the dev queries (the 10% of train that ``dotcat train`` holds out) and the test
queries: nDCG@10 and R@100 of zero-shot all-MiniLM-L6-v2 and of the trained BERT_DOT (the
whole corpus encoded at that precision, exact inner-product search, queries at the same
precision), and of the trained BERT_DOT's top ``--depth`` re-ranked by the BERT_CAT at that
precision (its recorded interpolation weight); retention = figure / fp32's figure. Rows
"index X, queries int8" measure mixing, which decides what the manifest allows.

Paths: ``fp32`` and ``bf16`` (PyTorch autocast; bf16 is emulated and slow on CPUs without
native bf16), ``int8`` (ONNX Runtime, per-channel int8 weights, this CPU's kernels),
``int8-ffn`` (the FFN output projections kept in fp32), ``int8-avx2`` (the 7-bit weights of
the AVX2 export, measured here for its quality; its speed is this CPU's), ``int8-ov`` (the
encoder as ``int8``; the re-ranker on OpenVINO: int8 weights, activations quantised per token
group of ``GROUP_SIZE`` features, bf16 elsewhere where native; needs ``pip install
'dotcat[openvino]'``), ``int8-ov64`` and ``int8-ov384`` (groups of 64 and 384 features, the
candidates ``GROUP_SIZE`` was chosen from on dev). The ``int8`` path's re-ranker is ONNX
Runtime's.

Document vectors are cached under ``--work`` (delete it to start over).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np

import common

ALL_PATHS = ("fp32", "bf16", "int8", "int8-ffn", "int8-avx2", "int8-ov", "int8-ov64", "int8-ov384")
#: Paths whose encoder is another path's (their dense rows would repeat that path's).
SAME_ENCODER = {p: "int8" for p in ALL_PATHS if p.startswith("int8-ov")}
MEASURES = ("nDCG@10", "R@100")


def main() -> None:
    parser = common.parser(
        __doc__, output="precision.md", data=common.REQUIRED, work="runs/precision"
    )
    parser.add_argument("--trained", type=Path, required=True, help="a trained BERT_DOT")
    parser.add_argument("--cat", type=Path, required=True, help="a trained BERT_CAT")
    parser.add_argument("--paths", default=",".join(ALL_PATHS))
    parser.add_argument("--speed-docs", type=int, default=600)
    parser.add_argument("--speed-queries", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument(
        "--combos",
        default="",
        help="re-ranked rows with another CE path over a first stage, e.g. int8:int8-avx2",
    )
    parser.add_argument("--skip-speed", action="store_true", help="quality (and combos) only")
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    for path in paths:
        if path not in ALL_PATHS:
            parser.error(f"unknown path {path!r} ({', '.join(ALL_PATHS)})")
    if paths[0] != "fp32":
        parser.error("--paths must start with fp32 (the reference of retention)")
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {common.describe()}", flush=True)
    data = Data(args.data)
    speed = None if args.skip_speed else measure_speed(args, data, paths)
    quality = None if args.skip_quality else measure_quality(args, data, paths)
    if args.combos:
        quality = (quality or {}) | measure_combos(args, data, args.combos.split(","))
    write_report(args, paths, speed, quality)


# -- data and models --------------------------------------------------------------------------


class Data:
    """The corpus texts, the test and dev queries with their qrels."""

    def __init__(self, root: Path) -> None:
        from dotcat.data import load_corpus, load_qrels, load_queries
        from dotcat.data.splits import find_dev_split

        corpus = load_corpus(root)
        self.doc_ids = list(corpus["id"])
        titles, texts = corpus["title"], corpus["text"]
        self.texts = [f"{t} {x}".strip() for t, x in zip(titles, texts, strict=True)]
        test_qrels = load_qrels(root, split="test")
        queries = load_queries(root)
        dev = find_dev_split(root)
        self.splits = {
            "dev": (dev.queries, dev.qrels),
            "test": ({q: queries[q] for q in test_qrels if q in queries}, test_qrels),
        }
        self.dev_source = dev.source


def load_encoder(model: str, path: str, work: Path):
    """A BiEncoder on one precision path (int8 variants from their own export folder)."""
    from dotcat.models.bi_encoder import BiEncoder, EncoderConfig

    path = SAME_ENCODER.get(path, path)
    precision = "int8" if path.startswith("int8") else path
    encoder = BiEncoder.load(EncoderConfig(model=model, precision=precision))
    if path in ("int8-ffn", "int8-avx2"):
        encoder.onnx = _variant_runner(encoder.path, "encoder", encoder.fingerprint, path, work)
    return encoder


def load_cat(model: Path, path: str, work: Path):
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    precision = "int8" if path.startswith("int8") else path
    backend = "openvino" if path.startswith("int8-ov") else "onnxruntime"
    config = CrossEncoderConfig(model=str(model), precision=precision, backend=backend)
    cat = CrossEncoder.load(config)
    if path in ("int8-ov64", "int8-ov384"):  # the activation group sizes GROUP_SIZE was chosen from
        from dotcat.models.openvino_backend import OpenVinoRunner

        cat.onnx = OpenVinoRunner(cat.onnx.path, cat.onnx.workers, group_size=int(path[7:]))
    if path in ("int8-ffn", "int8-avx2"):
        cat.onnx = _variant_runner(cat.path, "cross-encoder", cat.fingerprint, path, work)
    return cat


def _variant_runner(weights: Path, kind: str, fingerprint: str, path: str, work: Path):
    from dotcat.models.onnx_backend import OnnxRunner, export
    from dotcat.models.st_config import read_st_settings

    if kind == "encoder":
        weights = read_st_settings(weights).transformer_dir
    keep = "ffn_output" if path == "int8-ffn" else "none"
    variant = "avx2" if path == "int8-avx2" else None
    home = work / "exports" / f"{fingerprint[:16]}-{path}"
    return OnnxRunner(
        export(weights, kind, "int8", home, fingerprint, keep_fp32=keep, variant=variant)
    )


# -- speed ------------------------------------------------------------------------------------


def measure_speed(args, data: Data, paths: list[str]) -> dict:
    """docs/s and pairs/s per path and for sentence-transformers (rounds interleaved)."""
    from sentence_transformers import CrossEncoder as STCrossEncoder
    from sentence_transformers import SentenceTransformer

    from dotcat.models.resolve import resolve_model

    texts = data.texts[: args.speed_docs]
    queries = list(data.splits["test"][0].values())
    pairs = [
        (queries[i % len(queries)], data.texts[(i * 37) % len(data.texts)])
        for i in range(args.speed_docs)
    ]
    st_model = SentenceTransformer(str(resolve_model("default")), device="cpu")
    st_model.max_seq_length = 256
    st_cat = STCrossEncoder(str(args.cat), device="cpu", max_length=256)
    encoders = {p: load_encoder("default", p, args.work) for p in paths}
    cats = {p: load_cat(args.cat, p, args.work) for p in paths}

    seconds: dict[str, float] = {}
    vectors: dict[str, np.ndarray] = {}
    logits: dict[str, np.ndarray] = {}
    for round_ in range(args.rounds):
        print(f"speed round {round_ + 1}/{args.rounds}", flush=True)
        start = time.perf_counter()
        vectors["st"] = st_model.encode(texts, batch_size=32, normalize_embeddings=True)
        _add(seconds, "encode st", time.perf_counter() - start)
        for p, encoder in encoders.items():
            start = time.perf_counter()
            vectors[p] = encoder.encode_documents(texts)
            _add(seconds, f"encode {p}", time.perf_counter() - start)
        start = time.perf_counter()
        logits["st"] = st_cat.predict(pairs, batch_size=32, activation_fn=None)
        _add(seconds, "rerank st", time.perf_counter() - start)
        for p, cat in cats.items():
            start = time.perf_counter()
            logits[p] = cat.score([q for q, _ in pairs], [d for _, d in pairs])
            _add(seconds, f"rerank {p}", time.perf_counter() - start)
    from scipy.stats import spearmanr

    n = len(texts) * args.rounds
    result = {"docs": len(texts), "pairs": len(pairs), "rounds": args.rounds, "rows": []}
    st_docs, st_pairs = n / seconds["encode st"], n / seconds["rerank st"]
    result["st"] = {"docs_per_s": st_docs, "pairs_per_s": st_pairs}
    for p in paths:
        cos = (vectors[p] * vectors["st"]).sum(1)
        docs = n / seconds[f"encode {p}"]
        pairs_s = len(pairs) * args.rounds / seconds[f"rerank {p}"]
        result["rows"].append(
            {
                "path": p,
                "docs_per_s": docs,
                "encode_ratio": docs / st_docs,
                "cos_mean": float(cos.mean()),
                "cos_min": float(cos.min()),
                "pairs_per_s": pairs_s,
                "rerank_ratio": pairs_s / st_pairs,
                "spearman": float(spearmanr(logits[p], logits["st"])[0]),
            }
        )
    result["latency"] = measure_latency(args, data, paths, encoders, cats)
    return result


def measure_latency(args, data, paths, encoders, cats) -> dict:
    """One warm query at a time: encode, exact search over the corpus, re-rank the top 20."""
    from dotcat.models.bi_encoder import BiEncoder, EncoderConfig

    trained = BiEncoder.load(EncoderConfig(model=str(args.trained), precision="fp32"))
    matrix = trained.encode_documents(data.texts[:2000])  # search cost is not what varies
    queries = list(data.splits["test"][0].values())[: args.speed_queries]
    out = {}
    for p in paths:
        encoder = load_encoder(str(args.trained), p, args.work)
        times = []
        for i, q in enumerate([queries[0], *queries]):
            start = time.perf_counter()
            top = np.argsort(-(matrix @ encoder.encode_queries([q])[0]))[:20]
            cats[p].score_query(q, [data.texts[j] for j in top])
            if i:  # the first call warms up
                times.append((time.perf_counter() - start) * 1000)
        out[p] = {"p50": statistics.median(times), "p95": float(np.percentile(times, 95))}
        print(f"latency {p}: p50 {out[p]['p50']:.0f} ms", flush=True)
    return out


def _add(seconds: dict, key: str, value: float) -> None:
    seconds[key] = seconds.get(key, 0.0) + value


# -- quality ----------------------------------------------------------------------------------


def measure_quality(args, data: Data, paths: list[str]) -> dict:
    """Figures per (model, path, split), re-ranked figures per (path, split), mixed rows."""
    from dotcat.evaluation import evaluate

    figures: dict = {}
    matrices: dict = {}
    for label, model in (("zero-shot", "default"), ("trained", str(args.trained))):
        for p in paths:
            if SAME_ENCODER.get(p) in paths:
                continue
            encoder = load_encoder(model, p, args.work)
            matrices[label, p] = _doc_matrix(encoder, data, args.work / f"{label}-{p}.npy")
            for split, (queries, qrels) in data.splits.items():
                q = encoder.encode_queries(list(queries.values()))
                run = _search(matrices[label, p], q, list(queries), data.doc_ids)
                figures[label, p, split] = _figures(evaluate(run, qrels, list(MEASURES)))
                print(f"{label} {p} {split}: {figures[label, p, split]}", flush=True)
                if label == "trained":
                    figures["runs", p, split] = run
            del encoder
        for index_path in paths:  # mixing: an index at one path, int8 queries
            if index_path.startswith("int8") or "int8" not in paths:
                continue
            encoder = load_encoder(model, "int8", args.work)
            for split, (queries, qrels) in data.splits.items():
                q = encoder.encode_queries(list(queries.values()))
                run = _search(matrices[label, index_path], q, list(queries), data.doc_ids)
                figures[label, f"{index_path}+q-int8", split] = _figures(
                    evaluate(run, qrels, list(MEASURES))
                )
    for p in paths:  # a path with another's encoder re-ranks that path's first stage
        if SAME_ENCODER.get(p) in paths:
            for split in data.splits:
                figures["runs", p, split] = figures["runs", SAME_ENCODER[p], split]
    text = dict(zip(data.doc_ids, data.texts, strict=True))
    for p in paths:
        cat = load_cat(args.cat, p, args.work)
        for split, (queries, qrels) in data.splits.items():
            run = _rerank(cat, figures["runs", p, split], queries, text, args.depth)
            figures["reranked", p, split] = _figures(evaluate(run, qrels, list(MEASURES)))
            print(f"reranked {p} {split}: {figures['reranked', p, split]}", flush=True)
    for key in [k for k in figures if k[0] == "runs"]:
        del figures[key]
    return figures


def measure_combos(args, data: Data, combos: list[str]) -> dict:
    """Re-ranked figures of ``first:cat`` combinations: the trained BERT_DOT at path ``first``
    (index and queries), re-ranked by the BERT_CAT at path ``cat``; fp32:fp32 as reference."""
    from dotcat.evaluation import evaluate

    text = dict(zip(data.doc_ids, data.texts, strict=True))
    figures: dict = {}
    for combo in ["fp32:fp32", *combos]:
        first, cat_path = combo.split(":")
        encoder = load_encoder(str(args.trained), first, args.work)
        matrix = _doc_matrix(encoder, data, args.work / f"trained-{first}.npy")
        cat = load_cat(args.cat, cat_path, args.work)
        for split, (queries, qrels) in data.splits.items():
            q = encoder.encode_queries(list(queries.values()))
            run = _search(matrix, q, list(queries), data.doc_ids)
            run = _rerank(cat, run, queries, text, args.depth)
            name = "fp32" if combo == "fp32:fp32" else f"dense {first} + CE {cat_path}"
            figures["reranked", name, split] = _figures(evaluate(run, qrels, list(MEASURES)))
            print(f"reranked {combo} {split}: {figures['reranked', name, split]}", flush=True)
    return figures


def _doc_matrix(encoder, data: Data, cache: Path) -> np.ndarray:
    if cache.exists():
        return np.load(cache)
    start = time.perf_counter()
    matrix = encoder.encode_documents(data.texts, show_progress_bar=True)
    print(f"encoded {cache.name} in {time.perf_counter() - start:.0f} s", flush=True)
    np.save(cache, matrix)
    return matrix


def _search(
    matrix: np.ndarray, queries: np.ndarray, qids: list[str], doc_ids: list[str], k: int = 100
) -> dict:
    scores = queries @ matrix.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return {qid: [(doc_ids[j], float(scores[i, j])) for j in top[i]] for i, qid in enumerate(qids)}


def _rerank(cat, run: dict, queries: dict, text: dict, depth: int) -> dict:
    from dotcat.search.reranker import Candidates, fuse

    candidates = {}
    for qid, ranking in run.items():
        docs = [d for d, _ in ranking]
        first = np.array([s for _, s in ranking], dtype=np.float64)
        logits = cat.score_query(queries[qid], [text[d] for d in docs[:depth]])
        candidates[qid] = Candidates(docs, first, logits)
    return fuse(candidates, cat.interpolation_alpha or 1.0)


def _figures(report) -> dict:
    return {m: float(report.aggregate[m]) for m in MEASURES}


# -- report -----------------------------------------------------------------------------------


def write_report(args, paths, speed: dict, quality: dict | None) -> None:
    if speed is None:
        lines = common.header("Precision paths: quality against fp32")
        _write(args.output, lines + _quality_lines(args, paths, quality or {}))
        return
    st = speed["st"]
    lines = [
        *common.header(
            "Precision paths: speed against sentence-transformers, quality against fp32"
        ),
        f"## Speed ({speed['docs']} SciFact documents, {speed['pairs']} query-document pairs, "
        f"max length 256, batch size 32, {speed['rounds']} rounds interleaved)",
        "",
        f"Baselines, same run: `SentenceTransformer.encode` fp32 {st['docs_per_s']:.1f} docs/s; "
        f"`CrossEncoder.predict` fp32 {st['pairs_per_s']:.1f} pairs/s (model {args.cat}).",
        "",
        "| path | docs/s | x ST encode | cos vs ST mean / min | pairs/s | x ST predict "
        "| Spearman vs ST logits | warm query + re-rank@20 p50 / p95 ms |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for row in speed["rows"]:
        lat = speed["latency"][row["path"]]
        lines.append(
            f"| {row['path']} | {row['docs_per_s']:.1f} | {row['encode_ratio']:.2f} "
            f"| {row['cos_mean']:.5f} / {row['cos_min']:.5f} | {row['pairs_per_s']:.1f} "
            f"| {row['rerank_ratio']:.2f} | {row['spearman']:.4f} "
            f"| {lat['p50']:.0f} / {lat['p95']:.0f} |"
        )
    if quality:
        lines += _quality_lines(args, paths, quality)
    _write(args.output, lines)
    (args.work / "figures.json").write_text(
        json.dumps(
            {"speed": speed, "quality": {" | ".join(k): v for k, v in (quality or {}).items()}},
            indent=2,
        )
    )


BEGIN, END = "<!-- bench_precision:begin -->", "<!-- bench_precision:end -->"


def _write(output: Path, lines: list[str]) -> None:
    """The run's section; in an existing file only what lies between the markers is replaced
    (the reading written below them stays)."""
    section = "\n".join([BEGIN, *lines, END])
    old = output.read_text(encoding="utf-8") if output.exists() else ""
    if BEGIN in old and END in old:
        text = old[: old.index(BEGIN)] + section + old[old.index(END) + len(END) :]
    else:
        text = section + "\n"
    common.write(output, text.splitlines())


def _quality_lines(args, paths, quality: dict) -> list[str]:
    lines = [
        "",
        f"## Quality (retention = figure / fp32's; re-ranked: trained BERT_DOT top "
        f"{args.depth}, BERT_CAT with its recorded interpolation weight)",
        "",
        "| system | path | dev nDCG@10 | dev R@100 | test nDCG@10 | test R@100 "
        "| retention nDCG@10 dev / test | retention R@100 dev / test |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    systems = ("zero-shot", "trained", "reranked")
    keys = [(s, p) for s in systems for p in quality_paths(quality, s, paths)]
    for system, path in keys:
        f = {split: quality[system, path, split] for split in ("dev", "test")}
        ref = {split: quality[system, "fp32", split] for split in ("dev", "test")}
        ret = {
            m: " / ".join(f"{f[s][m] / ref[s][m]:.2%}" for s in ("dev", "test")) for m in MEASURES
        }
        lines.append(
            f"| {system} | {path} | {f['dev']['nDCG@10']:.4f} | {f['dev']['R@100']:.4f} "
            f"| {f['test']['nDCG@10']:.4f} | {f['test']['R@100']:.4f} | {ret['nDCG@10']} "
            f"| {ret['R@100']} |"
        )
    return lines


def quality_paths(quality: dict, system: str, paths: list[str]) -> list[str]:
    extra = sorted({k[1] for k in quality if k[0] == system and k[1] not in paths})
    return [p for p in paths if (system, p, "dev") in quality] + extra


if __name__ == "__main__":
    main()
