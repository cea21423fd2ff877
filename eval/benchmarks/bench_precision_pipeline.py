"""Precision paths judged on the default pipeline, on every collection; speed against
sentence-transformers fp32 in the same run.

    python eval/benchmarks/bench_precision_pipeline.py                       # quality + speed
    python eval/benchmarks/bench_precision_pipeline.py --skip-speed          # quality only
    python eval/benchmarks/bench_precision_pipeline.py --skip-quality        # speed only
    python eval/benchmarks/bench_precision_pipeline.py --paths fp32,int8-ort --collections faq

A *path* says how the documents are encoded (at index time) and how the queries are (at search
time): ``fp32`` and ``bf16`` (PyTorch), ``int8-ort`` (ONNX Runtime: per-channel int8 weights,
activations quantised per call, one text per call), ``int8-ov`` (OpenVINO: per-channel int8
weights, activations quantised per group of 128 features of each token, bf16 elsewhere where
native), candidates (``--list`` prints them all with what they are), and mixed ones such as
``ov+q-fp32`` (documents int8 OpenVINO, queries fp32). ``auto`` is what ``--precision auto``
chooses on this CPU, run through the product's own options.

Quality, per collection (``runs/collections/NAME``, built by ``ood_collections.py``; ``scifact``
is ``data/scifact``): the index is built as ``dotcat index`` builds it (``dotcat.index.
build_index``: BM25 beside, passages where the documents are long), the hybrid fusion chosen
on the collection's dev queries with the path's query encoder (as ``dotcat index`` does), then
the test queries searched as ``dotcat search`` does, hybrid (the default) and dense alone, 100
results. Reported: nDCG@10 and R@100 on test, retention (the figure over fp32's), the mean
share of fp32's top 10 a query keeps (overlap), and dev nDCG@10 of the hybrid (what choices
are made on). Each (collection, path) is cached as JSON under ``--work``; delete it to redo.

Speed (``--skip-quality`` runs it alone): documents encoded per second (``--speed-docs``
SciFact documents, max length 256) against ``SentenceTransformer.encode`` fp32 (batch 32), and
re-ranking pairs per second (query, document pairs) against ``CrossEncoder.predict`` fp32, each
path and its baseline timed in the same rounds, interleaved, order alternating; the load
average is recorded before every round. The re-ranker is ``--cat`` (default: the default
model with a new one-logit head, seeded: speed does not depend on its training).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import common

COLLECTIONS = ("scifact", "pylib", "faq", "pydoc", "debian", "man")
MEASURES = ("nDCG@10", "R@100")
DEPTH = 100


@dataclass(frozen=True)
class Side:
    """How one side (documents or queries) is encoded: a precision, its runtime, and for
    candidates a variant of the runtime's recipe (see :data:`VARIANTS`)."""

    precision: str
    backend: str = "torch"
    variant: str = ""

    @property
    def key(self) -> str:
        name = self.precision if self.backend == "torch" else f"{self.precision}-{self.backend}"
        return f"{name}-{self.variant}" if self.variant else name


FP32, BF16, ORT_FP32 = Side("fp32"), Side("bf16"), Side("fp32", "onnxruntime")
ORT, OV = Side("int8", "onnxruntime"), Side("int8", "openvino")

#: Variants of an int8 runtime's recipe, measured as candidates (not options of the product).
VARIANTS = {
    "g64": "OpenVINO, activation groups of 64 features (the default 128)",
    "g32": "OpenVINO, activation groups of 32 features",
    "ffn": "ONNX Runtime, the FFN output projections kept in fp32 (Bondarenko et al. 2021)",
    # ONNX Runtime's weight/activation types: on AVX2 without VNNI its u8 x s8 kernels
    # (vpmaddubsw) can saturate; 7-bit weights (reduce_range, the product's AVX2 export) or
    # u8 x u8 avoid it (onnxruntime.ai/docs/performance/model-optimizations/quantization.html).
    "u8s8": "ONNX Runtime, u8 activations x s8 weights, 8 bits (the VNNI export)",
    "rr": "ONNX Runtime, u8 x s8 with 7-bit weights (reduce_range: the AVX2 export)",
    "u8u8": "ONNX Runtime, u8 activations x u8 weights, 8 bits",
    "fused": "ONNX Runtime fp32, the graph fused by onnxruntime.transformers (Attention, "
    "SkipLayerNormalization, BiasGelu, EmbedLayerNormalization)",
    "skipln": "ONNX Runtime int8 with its SkipLayerNormalization fusion on (dotcat's runner "
    "before it turned the fusion off)",
}

#: name -> (documents, queries, what it is)
PATHS: dict[str, tuple[Side, Side, str]] = {
    "fp32": (FP32, FP32, "PyTorch fp32 (the reference)"),
    "bf16": (BF16, BF16, "PyTorch bf16 autocast (native here)"),
    "int8-ort": (ORT, ORT, "int8 ONNX Runtime, documents and queries"),
    "int8-ov": (OV, OV, "int8 OpenVINO, documents and queries"),
    "ort+q-fp32": (ORT, FP32, "documents int8 ONNX Runtime, queries fp32"),
    "ov+q-fp32": (OV, FP32, "documents int8 OpenVINO, queries fp32"),
    "ov+q-bf16": (OV, BF16, "documents int8 OpenVINO, queries bf16"),
    "ov-g64": (Side("int8", "openvino", "g64"),) * 2 + (VARIANTS["g64"],),
    "ov-g32": (Side("int8", "openvino", "g32"),) * 2 + (VARIANTS["g32"],),
    "ov-g64+q-fp32": (Side("int8", "openvino", "g64"), FP32, "g64 documents, queries fp32"),
    "ort-ffn": (Side("int8", "onnxruntime", "ffn"),) * 2 + (VARIANTS["ffn"],),
    "ort-u8s8": (Side("int8", "onnxruntime", "u8s8"),) * 2 + (VARIANTS["u8s8"],),
    "ort-rr": (Side("int8", "onnxruntime", "rr"),) * 2 + (VARIANTS["rr"],),
    "ort-u8u8": (Side("int8", "onnxruntime", "u8u8"),) * 2 + (VARIANTS["u8u8"],),
    "ort-fp32": (ORT_FP32, ORT_FP32, "fp32 run by ONNX Runtime (its default graph optimisations)"),
    "ort-fp32-fused": (Side("fp32", "onnxruntime", "fused"),) * 2 + (VARIANTS["fused"],),
    "ort-skipln": (Side("int8", "onnxruntime", "skipln"),) * 2 + (VARIANTS["skipln"],),
}
DEFAULT_PATHS = ("fp32", "bf16", "int8-ort", "int8-ov", "ov+q-fp32", "ov+q-bf16")


def main() -> None:
    parser = common.parser(__doc__, output="precision_pipeline.md", work="runs/precision_pipeline")
    parser.add_argument("--paths", default=",".join(DEFAULT_PATHS), help="fp32 first")
    parser.add_argument("--collections", default=",".join(COLLECTIONS))
    parser.add_argument("--collections-root", type=Path, default=Path("runs/collections"))
    parser.add_argument("--skip-quality", action="store_true", help="speed only")
    parser.add_argument("--skip-speed", action="store_true", help="quality only")
    parser.add_argument("--speed-docs", type=int, default=400)
    parser.add_argument("--speed-pairs", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cat", type=Path, help="a cross-encoder for the re-ranking speed")
    parser.add_argument("--cat-paths", default="fp32,bf16,int8-ort,int8-ov",
                        help=f"re-ranker paths timed, of {', '.join(CAT_PATHS)}")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="print the paths and exit")
    parser.add_argument(
        "--report-only", action="store_true", help="write the report of what --work holds"
    )
    args = parser.parse_args()
    if args.list:
        for name, (docs, queries, what) in PATHS.items():
            print(f"{name:16} documents {docs.key:22} queries {queries.key:22} {what}")
        return
    paths = [p for p in args.paths.split(",") if p]
    unknown = [p for p in paths if p not in PATHS and p != "auto"]
    if unknown or paths[0] != "fp32":
        parser.error(f"--paths: fp32 first, then of {', '.join(PATHS)}, auto ({unknown})")
    args.work.mkdir(parents=True, exist_ok=True)
    common.setup_logging(logging.WARNING)  # the script prints its own progress
    print(f"machine: {common.describe(torch=True)}", flush=True)
    quality = None
    if not args.skip_quality:
        quality = {}
        for name in args.collections.split(","):
            quality[name] = measure_collection(args, name, paths)
        quality = {name: figures for name, figures in quality.items() if figures}
    speed = None if args.skip_speed else measure_speed(args, paths)
    write_report(args, paths, quality, speed)


# -- encoders --------------------------------------------------------------------------------


def path_sides(name: str) -> tuple[Side, Side]:
    """The (documents, queries) sides of a path; ``auto``: what the product chooses here."""
    if name == "auto":
        return Side("auto", "auto"), Side("auto", "auto")
    docs, queries, _ = PATHS[name]
    return docs, queries


def load_encoder(side: Side, work: Path):
    """A BiEncoder (the default model) encoding as ``side`` says."""
    from dotcat.models import EncoderConfig
    from dotcat.models.bi_encoder import BiEncoder

    if side.precision == "auto":
        return BiEncoder.load(EncoderConfig())
    if side.precision == "fp32" and side.backend == "onnxruntime":
        return exported_fp32(side, work)
    backend = side.backend if side.precision == "int8" else "auto"
    encoder = BiEncoder.load(EncoderConfig(precision=side.precision, backend=backend))
    if side.variant:
        encoder.onnx = variant_runner(encoder, side, work)
    return encoder


def variant_runner(encoder, side: Side, work: Path):
    """The int8 runner of a candidate recipe (:data:`VARIANTS`)."""
    if side.variant in ("g64", "g32"):
        from dotcat.models.openvino_backend import OpenVinoRunner

        return OpenVinoRunner(encoder.onnx.path, encoder.onnx.workers, int(side.variant[1:]))
    if side.variant == "skipln":
        return skipln_runner(encoder.onnx.path)
    from dotcat.models.onnx_backend import OnnxRunner, export, export_name
    from dotcat.models.st_config import read_st_settings

    home = work / "exports" / f"{encoder.fingerprint[:16]}-ort-{side.variant}"
    weights = read_st_settings(encoder.path).transformer_dir
    if side.variant in ("ffn", "u8s8", "rr"):
        keep = "ffn_output" if side.variant == "ffn" else "none"
        variant = "avx2" if side.variant == "rr" else "avx512_vnni"
        made = home / export_name("int8", variant)
        if not made.exists():  # made once (slow under an emulator), then reused
            made = export(weights, "encoder", "int8", home, encoder.fingerprint, keep_fp32=keep,
                          variant=variant)  # fmt: skip
        return OnnxRunner(made)
    if side.variant == "u8u8":
        fp32 = home / export_name("fp32")
        if not fp32.exists():
            fp32 = export(weights, "encoder", "fp32", home, encoder.fingerprint)
        return OnnxRunner(_u8u8(fp32))
    raise SystemExit(f"unknown variant {side.variant!r}")


def exported_fp32(side: Side, work: Path):
    """The default model's fp32 ONNX export run by ONNX Runtime (fused where ``side`` says)."""
    from tokenizers import Tokenizer

    from dotcat.models import EncoderConfig, onnx_backend
    from dotcat.models.exported_encoder import ExportedEncoder
    from dotcat.models.resolve import resolve_model, weights_fingerprint
    from dotcat.models.st_config import read_st_settings

    path = resolve_model("default")
    st, fingerprint = read_st_settings(path), weights_fingerprint(path)
    model = onnx_backend.find_or_export(st.transformer_dir, "encoder", "fp32", fingerprint)
    if side.variant == "fused":
        model = fused(model, work / "exports" / f"{fingerprint[:16]}-encoder-fused",
                      st.transformer_dir)  # fmt: skip
    config = EncoderConfig(max_length=256, precision="fp32")
    tokenizer = Tokenizer.from_file(str(st.transformer_dir / "tokenizer.json"))
    runner = onnx_backend.OnnxRunner(model, per_text=False)
    return ExportedEncoder(config, path, runner, tokenizer, st, dim=384, fingerprint=fingerprint)


def fused(fp32: Path, home: Path, model_dir: Path) -> Path:
    """``fp32`` with onnxruntime.transformers' BERT fusions (:data:`VARIANTS`), made once."""
    out = home / "model_fused.onnx"
    if not out.exists():
        from onnxruntime.transformers.optimizer import optimize_model

        home.mkdir(parents=True, exist_ok=True)
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        # Its own fusions only (opt_level 0): ONNX Runtime applies its optimisations at load.
        model = optimize_model(str(fp32), model_type="bert", opt_level=0,
                               num_heads=config["num_attention_heads"],
                               hidden_size=config["hidden_size"])  # fmt: skip
        print(f"fused {fp32}: {model.get_fused_operator_statistics()}", flush=True)
        model.save_model_to_file(str(out), use_external_data_format=True)
    return out


def _u8u8(fp32: Path) -> Path:
    """``fp32`` quantised with u8 weights (per channel) and u8 activations, 8 bits each."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = fp32.with_name("model_quint8_u8u8.onnx")
    if not out.exists():
        quantize_dynamic(str(fp32), str(out), per_channel=True, reduce_range=False,
                         weight_type=QuantType.QUInt8)  # fmt: skip
    return out


# -- quality ---------------------------------------------------------------------------------


def data_dir(name: str, root: Path) -> Path:
    if name == "scifact":
        return common.SCIFACT
    path = root / name
    if not (path / "corpus.jsonl").exists():
        raise SystemExit(f"{path}: missing; build it: python eval/benchmarks/ood_collections.py "
                         f"{name} {path}")  # fmt: skip
    return path


def measure_collection(args, name: str, paths: list[str]) -> dict:
    """Per path, the figures of one collection (cached as JSON per path)."""
    data = data_dir(name, args.collections_root)
    out = {}
    for path in paths:
        cache = args.work / name / f"{path}.json"
        if not cache.exists() and args.report_only:
            continue  # not measured (yet): left out of this report
        if not cache.exists():
            figures = run_path(args, name, data, path)
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(figures), encoding="utf-8")
        out[path] = json.loads(cache.read_text(encoding="utf-8"))
    if "fp32" not in out:
        return {}
    ref = out["fp32"]
    for path, figures in out.items():
        if "hybrid@fp32-fusion top10" not in figures:  # fp32 itself
            figures["hybrid@fp32-fusion nDCG@10"] = figures["hybrid nDCG@10"]
            figures["hybrid@fp32-fusion top10"] = figures["hybrid top10"]
        for system in ("dense", "hybrid", "hybrid@fp32-fusion"):
            figures[f"{system} overlap"] = overlap(
                figures[f"{system} top10"], ref[f"{system} top10"]
            )
        print(f"{name} {path}: " + ", ".join(
            f"{k} {v:.4f}" for k, v in figures.items() if isinstance(v, float)
        ), flush=True)  # fmt: skip
    return out


def build(args, name: str, data: Path, docs: Side) -> Path:
    """The index of ``data`` with documents encoded as ``docs`` (built once, reused)."""
    from dotcat.errors import DotcatError
    from dotcat.index import build_index
    from dotcat.index.config import IndexConfig

    index = args.work / name / f"index-{docs.key}"
    while not (index / "manifest.json").exists():
        encoder = load_encoder(docs, args.work)
        start = time.perf_counter()
        print(f"{name}: building {index} ({encoder.precision}, {encoder.backend})", flush=True)
        try:
            build_index(data, index, encoder, IndexConfig(), overwrite=True)
        except DotcatError as e:  # another run of this script builds it: wait for that one
            print(f"{name}: {e}; waiting", flush=True)
            time.sleep(60)
            continue
        print(f"{name}: built in {time.perf_counter() - start:.0f} s", flush=True)
    return index


def run_path(args, name: str, data: Path, path: str) -> dict:
    """One path on one collection: the fusion chosen on dev with the path's query encoder (as
    ``dotcat index`` chooses it), then the test queries hybrid and dense, and hybrid with
    fp32's fusion (the encoder's effect without the dev choice's)."""
    from dotcat import PipelineConfig, SearchPipeline, load_qrels, load_queries
    from dotcat.data.splits import find_dev_split
    from dotcat.options import FUSION_DEPTH
    from dotcat.search.fusion import Fusion, choose_fusion

    docs, queries_side = path_sides(path)
    index = build(args, name, data, docs)
    pipeline = SearchPipeline(index, PipelineConfig())
    if queries_side.precision != "auto":  # the dense stage's encoder, shared with the hybrid
        pipeline.stage("dense").retriever.encoder = load_encoder(queries_side, args.work)
    encoder = pipeline.encoder
    dev = find_dev_split(data)
    dense_dev = pipeline.run(dev.queries, FUSION_DEPTH, first_stage="dense")
    bm25_dev = pipeline.run(dev.queries, FUSION_DEPTH, first_stage="bm25")
    fusion = choose_fusion(dense_dev, bm25_dev, dev.qrels, dev.source)
    qrels = load_qrels(data, split="test")
    queries = {q: t for q, t in load_queries(data, split="test").items() if q in qrels}
    figures: dict = {
        "documents": f"{docs.key}",
        "queries": f"{encoder.precision}-{encoder.backend}",
        "fusion": fusion.describe(),
        "fusion json": {k: v for k, v in fusion.to_json().items() if k != "dev"},
    }
    figures |= scored("hybrid dev", hybrid_run(pipeline, fusion, dev.queries), dev.qrels)
    figures |= scored("hybrid", hybrid_run(pipeline, fusion, queries), qrels)
    figures |= scored("dense", pipeline.run(queries, DEPTH, first_stage="dense"), qrels)
    reference = args.work / name / "fp32.json"
    if path != "fp32" and reference.exists():
        fusion = Fusion.from_json(json.loads(reference.read_text(encoding="utf-8"))["fusion json"])
        figures |= scored("hybrid@fp32-fusion", hybrid_run(pipeline, fusion, queries), qrels)
    return figures


def hybrid_run(pipeline, fusion, queries: dict) -> dict:
    """The pipeline's hybrid stage with ``fusion`` (the one ``dotcat index`` would record):
    its dense and BM25 stages fused, ``DEPTH`` documents a query."""
    from dotcat.search.aggregation import to_run
    from dotcat.search.hybrid import HybridStage

    dense, bm25 = pipeline.stage("dense"), pipeline.stage("bm25")
    stage = HybridStage(dense, bm25, fusion, pipeline.config.fusion_depth)
    return to_run({q: found[:DEPTH] for q, found in stage.search(queries, DEPTH).items()})


def scored(system: str, run: dict, qrels: dict) -> dict:
    """nDCG@10 and R@100 of a run, its per-query nDCG@10 and top 10s, keyed by ``system``."""
    from dotcat import evaluate

    report = evaluate(run, qrels, list(MEASURES))
    figures = {f"{system} {m}": float(report.aggregate[m]) for m in MEASURES}
    figures[f"{system} per-query nDCG@10"] = {
        q: float(v["nDCG@10"]) for q, v in report.per_query.items()
    }
    figures[f"{system} top10"] = {q: [d for d, _ in docs[:10]] for q, docs in run.items()}
    return figures


def overlap(top: dict, ref: dict) -> float:
    """Mean share of the reference's top 10 found in ``top``'s top 10, over queries."""
    shares = [len(set(top.get(q, [])) & set(docs)) / max(len(docs), 1) for q, docs in ref.items()]
    return statistics.mean(shares) if shares else float("nan")


# -- speed -----------------------------------------------------------------------------------


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def measure_speed(args, paths: list[str]) -> dict:
    """Documents/s and pairs/s per path against sentence-transformers fp32, interleaved; one
    query's encoding time per query side."""
    texts, queries = speed_texts(args.speed_docs)
    doc_sides = {path_sides(p)[0].key: path_sides(p)[0] for p in paths}
    query_sides = {path_sides(p)[1].key: path_sides(p)[1] for p in paths}
    docs = time_encoders(args, texts, doc_sides)
    pairs = time_rerankers(args, texts, queries)
    latency = time_queries(args, queries, query_sides)
    return {"documents": docs, "pairs": pairs, "query ms": latency, "texts": len(texts)}


def speed_texts(n: int) -> tuple[list[str], list[str]]:
    """The first ``n`` SciFact documents (title and text) and its test queries."""
    from dotcat import load_queries
    from dotcat.data import load_corpus

    corpus = load_corpus(common.SCIFACT)
    texts = [
        f"{t} {x}".strip() for t, x in zip(corpus["title"][:n], corpus["text"][:n], strict=True)
    ]
    return texts, list(load_queries(common.SCIFACT, split="test").values())


def interleaved(rounds: int, runners: dict, baseline: str) -> tuple[dict, list[str]]:
    """Seconds per runner over ``rounds``, the baseline first in even rounds and last in odd
    ones (a loaded machine's drift then weighs on both); the load average before each round."""
    seconds = dict.fromkeys(runners, 0.0)
    loads = []
    for round_ in range(rounds):
        loads.append(load())
        order = [k for k in runners if k != baseline]
        order = [baseline, *order] if round_ % 2 == 0 else [*order, baseline]
        for key in order:
            start = time.perf_counter()
            runners[key]()
            seconds[key] += time.perf_counter() - start
        print(f"speed round {round_ + 1}/{rounds} (load {loads[-1]})", flush=True)
    return seconds, loads


def time_encoders(args, texts: list[str], sides: dict) -> dict:
    from sentence_transformers import SentenceTransformer

    from dotcat.models.resolve import resolve_model

    st = SentenceTransformer(str(resolve_model("default")), device="cpu")
    st.max_seq_length = 256
    encoders = {key: load_encoder(side, args.work) for key, side in sides.items()}
    for encoder in encoders.values():
        encoder.encode_documents(texts[:32])  # warm-up: exports, compilation
    st.encode(texts[:32], batch_size=32)
    runners = {"st": lambda: st.encode(texts, batch_size=32, normalize_embeddings=True)}
    runners |= {key: (lambda e=e: e.encode_documents(texts)) for key, e in encoders.items()}
    seconds, loads = interleaved(args.rounds, runners, "st")
    n = len(texts) * args.rounds
    rate = {key: n / s for key, s in seconds.items()}
    return {"per_s": rate, "ratio": {k: v / rate["st"] for k, v in rate.items()}, "loads": loads}


def make_cat(work: Path) -> Path:
    """A cross-encoder for timing: the default model with a new one-logit head (seed 0)."""
    out = work / "cat-untrained"
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from dotcat.models.resolve import resolve_model
    from dotcat.models.st_config import read_st_settings

    weights = read_st_settings(resolve_model("default")).transformer_dir
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(weights, num_labels=1)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(weights).save_pretrained(out)
    return out


#: Re-ranker paths timed: precision and int8 runtime.
CAT_PATHS = {
    "fp32": ("fp32", "auto"),
    "bf16": ("bf16", "auto"),
    "int8-ort": ("int8", "onnxruntime"),
    "int8-ov": ("int8", "openvino"),
    "fp32-ort": ("fp32", "onnxruntime"),  # (not options of the product: candidates)
    "fp32-ort-fused": ("fp32", "onnxruntime-fused"),
    "int8-ort-skipln": ("int8", "onnxruntime-skipln"),
}


#: Tokens per (query, document) pair, for sentence-transformers and dotcat alike (what `train
#: cat` records). The timing model's tokenizer records 512, its passage length, which dotcat
#: would otherwise read as the pair length: twice sentence-transformers' work.
PAIR_TOKENS = 256


def time_rerankers(args, texts: list[str], queries: list[str], depth: int = 20) -> dict:
    """Pairs/s re-ranking each query's ``depth`` documents, one query at a time, every
    re-ranker cutting pairs at :data:`PAIR_TOKENS`."""
    from sentence_transformers import CrossEncoder as StCrossEncoder

    model = args.cat or make_cat(args.work)
    groups = [
        (queries[i % len(queries)], texts[i * depth : (i + 1) * depth])
        for i in range(max(1, args.speed_pairs // depth))
    ]
    groups = [(q, docs) for q, docs in groups if docs]
    st = StCrossEncoder(str(model), device="cpu", max_length=PAIR_TOKENS)
    cats = {key: load_cat(model, *CAT_PATHS[key], args.work) for key in args.cat_paths.split(",")}
    for cat in cats.values():
        cat.score_query(*groups[0])  # warm-up
    runners = {"st": lambda: [st.predict([(q, d) for d in docs], batch_size=32,
                                         activation_fn=None) for q, docs in groups]}  # fmt: skip
    runners |= {k: (lambda c=c: [c.score_query(q, docs) for q, docs in groups])
                for k, c in cats.items()}  # fmt: skip
    seconds, loads = interleaved(args.rounds, runners, "st")
    n = sum(len(docs) for _, docs in groups) * args.rounds
    rate = {key: n / s for key, s in seconds.items()}
    return {"per_s": rate, "ratio": {k: v / rate["st"] for k, v in rate.items()}, "loads": loads,
            "model": str(model)}  # fmt: skip


def load_cat(model: Path, precision: str, backend: str, work: Path):
    """dotcat's CrossEncoder at ``precision`` on ``backend`` (fp32 on ONNX Runtime: its fp32
    export, fused for ``onnxruntime-fused``, run in the int8 runner's place)."""
    from dotcat.models import onnx_backend
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
    from dotcat.models.resolve import weights_fingerprint

    ort_fp32 = precision == "fp32" and backend.startswith("onnxruntime")
    config = CrossEncoderConfig(model=str(model), precision=precision, max_length=PAIR_TOKENS,
                                backend="auto" if ort_fp32 else backend.split("-")[0])  # fmt: skip
    cat = CrossEncoder.load(config)
    if backend.endswith("skipln"):
        cat.onnx = skipln_runner(cat.onnx.path)
    if ort_fp32:
        fingerprint = weights_fingerprint(model)
        path = onnx_backend.find_or_export(model, "cross-encoder", "fp32", fingerprint)
        if backend.endswith("fused"):
            path = fused(path, work / "exports" / f"{fingerprint[:16]}-cat-fused", model)
        cat.onnx = onnx_backend.OnnxRunner(path, per_text=False)
    return cat


def skipln_runner(path: Path):
    """An int8 runner as dotcat's was before it turned ONNX Runtime's SkipLayerNormalization
    fusion off (``onnx_backend.DISABLED_OPTIMIZERS``)."""
    from dotcat.models import onnx_backend

    kept = onnx_backend.DISABLED_OPTIMIZERS
    onnx_backend.DISABLED_OPTIMIZERS = (kept[0], "")
    try:
        return onnx_backend.OnnxRunner(path)
    finally:
        onnx_backend.DISABLED_OPTIMIZERS = kept


def time_queries(args, queries: list[str], sides: dict, n: int = 100) -> dict:
    """Median ms to encode one query (``encode_queries([q])``), per query side."""
    encoders = {key: load_encoder(side, args.work) for key, side in sides.items()}
    times: dict[str, list[float]] = {key: [] for key in encoders}
    for i, query in enumerate(queries[: n + 5]):
        for key, encoder in encoders.items():
            start = time.perf_counter()
            encoder.encode_queries([query])
            if i >= 5:  # warm-up
                times[key].append((time.perf_counter() - start) * 1000)
    return {key: statistics.median(t) for key, t in times.items()}


# -- report ----------------------------------------------------------------------------------


#: The tables of the quality section: the figure, and what it is.
TABLES = (
    ("hybrid nDCG@10", "Default pipeline (hybrid, fusion chosen on dev with its queries): nDCG@10"),
    ("hybrid@fp32-fusion nDCG@10", "Hybrid at fp32's fusion (the encoder alone): nDCG@10"),
    ("dense nDCG@10", "Dense alone: nDCG@10"),
    ("hybrid R@100", "Default pipeline: R@100"),
    ("dense R@100", "Dense alone: R@100"),
    ("hybrid dev nDCG@10", "Default pipeline on dev (its fusion chosen there): nDCG@10"),
)
#: The bar ``auto`` is chosen by (issue 66): of fp32's default-pipeline test nDCG@10, the share
#: kept on the mean of the collections and the floor on each one; and no collection
#: significantly below fp32 (paired t-test over its queries, p < BAR_P).
BAR_MEAN, BAR_EACH, BAR_P = 0.998, 0.985, 0.05


def cpu_line() -> str:
    """What this process's CPUID says (under an emulator, not /proc/cpuinfo's host)."""
    import torch

    from dotcat.models.runtime import cpu_flags, cpu_kind

    seen = " ".join(sorted(f for f in cpu_flags() if f in common.RELEVANT_FLAGS))
    return (
        f"CPUID as this process sees it: {seen} (PyTorch kernels "
        f"{torch.backends.cpu.get_cpu_capability()}; dotcat's CPU kind: {cpu_kind()})."
    )


def write_report(args, paths, quality, speed) -> None:
    lines = common.header(
        "Precision paths on the default pipeline, every collection", cpu_line(), torch=True
    )
    lines += ["", "Paths (documents / queries):", ""]
    for path in paths:
        docs, queries = path_sides(path)
        what = PATHS[path][2] if path in PATHS else "what `--precision auto` chooses here"
        lines.append(f"- `{path}`: {docs.key} / {queries.key}: {what}")
    if quality:
        (args.work / "quality.json").write_text(json.dumps(summary(quality, paths), indent=1))
        lines += quality_lines(paths, quality)
    if speed:
        (args.work / "speed.json").write_text(json.dumps(speed, indent=1))
        lines += speed_lines(speed)
    common.write(args.output, lines)


def measured(quality: dict, path: str) -> list[str]:
    """The collections where ``path`` was measured."""
    return [c for c in quality if path in quality[c]]


def retention(quality: dict, path: str, key: str) -> list[float]:
    """Per collection where ``path`` was measured, its ``key`` over fp32's."""
    return [quality[c][path][key] / quality[c]["fp32"][key] for c in measured(quality, path)]


def mean_retention(quality: dict, path: str, key: str) -> float:
    """The mean of ``key`` over the collections where ``path`` was measured, over fp32's mean
    there."""
    names = measured(quality, path)
    mean = statistics.mean(quality[c][path][key] for c in names)
    return mean / statistics.mean(quality[c]["fp32"][key] for c in names)


def passes(quality: dict, path: str) -> bool:
    """Whether ``path`` meets the bar (:data:`BAR_MEAN`) on every collection (a path measured
    on fewer is not judged)."""
    key = "hybrid nDCG@10"
    significantly_below = [
        c for c in quality
        if quality[c][path][key] < quality[c]["fp32"][key] and wins(quality, c, path)[2] < BAR_P
    ] if len(measured(quality, path)) == len(quality) else ["?"]  # fmt: skip
    return (
        not significantly_below
        and mean_retention(quality, path, key) >= BAR_MEAN
        and min(retention(quality, path, key)) >= BAR_EACH
    )


def summary(quality: dict, paths: list[str]) -> dict:
    """The figures without per-query rows, for a JSON beside the report."""
    return {
        c: {p: {k: v for k, v in quality[c][p].items() if isinstance(v, (float, str))}
            for p in paths if p in quality[c]}
        for c in quality
    }  # fmt: skip


def wins(quality: dict, name: str, path: str, system: str = "hybrid") -> tuple[int, int, float]:
    """Queries whose nDCG@10 rose and fell against fp32's, and the paired t-test's p."""
    from scipy.stats import ttest_rel

    a = quality[name][path][f"{system} per-query nDCG@10"]
    b = quality[name]["fp32"][f"{system} per-query nDCG@10"]
    qs = sorted(b)
    x, y = [a.get(q, 0.0) for q in qs], [b[q] for q in qs]
    up, down = (
        sum(i > j for i, j in zip(x, y, strict=True)),
        sum(i < j for i, j in zip(x, y, strict=True)),
    )
    p = float(ttest_rel(x, y).pvalue) if up + down else 1.0
    return up, down, p


def table(quality: dict, paths: list[str], key: str, title: str) -> list[str]:
    """One row a path: per collection the figure and its retention; over the collections where
    the path was measured, the mean, the retention of the mean and the lowest retention."""
    names = list(quality)
    lines = ["", f"### {title}", ""]
    lines += ["| path | " + " | ".join(names) + " | mean | kept of the mean | lowest kept |"]
    lines += ["| --- |" + " ---: |" * (len(names) + 3)]
    for path in paths:
        if not measured(quality, path):
            continue
        cells = [cell(quality, c, path, key) for c in names]
        mean = statistics.mean(quality[c][path][key] for c in measured(quality, path))
        of = (
            ""
            if len(measured(quality, path)) == len(names)
            else f" ({len(measured(quality, path))} collections)"
        )
        lines.append(
            f"| {path} | " + " | ".join(cells) + f" | {mean:.4f}{of} | "
            f"{mean_retention(quality, path, key):.2%} | {min(retention(quality, path, key)):.2%} |"
        )
    return lines


def cell(quality: dict, name: str, path: str, key: str) -> str:
    if path not in quality[name]:
        return "not measured"
    figure = quality[name][path][key]
    return f"{figure:.4f} ({figure / quality[name]['fp32'][key]:.2%})"


def quality_lines(paths: list[str], quality: dict) -> list[str]:
    names = list(quality)
    passing = [p for p in paths if passes(quality, p)]
    lines = [
        "",
        "## Quality",
        "",
        f"Collections: {', '.join(names)}; test queries, 100 results a query. Retention: the "
        "figure over fp32's (the same collection, the same pipeline). The bar of `auto`: "
        f">= {BAR_MEAN:.1%} of fp32's default-pipeline nDCG@10 on the mean of the collections, "
        f">= {BAR_EACH:.1%} on each, none significantly below fp32 (paired t-test p < "
        f"{BAR_P}). Paths that pass: "
        f"{', '.join(f'`{p}`' for p in passing) or 'none'}.",
    ]
    for key, title in TABLES:
        lines += table(quality, paths, key, title)
    lines += ["", "### Top-10 overlap with fp32 (mean share of fp32's top 10 a query keeps)", ""]
    lines += ["| path | " + " | ".join(f"{c} dense / hybrid" for c in names) + " |"]
    lines += ["| --- |" + " ---: |" * len(names)]
    for path in paths:
        cells = [f"{quality[c][path]['dense overlap']:.3f} / "
                 f"{quality[c][path]['hybrid overlap']:.3f}" if path in quality[c]
                 else "not measured" for c in names]  # fmt: skip
        lines.append(f"| {path} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "### Default pipeline against fp32, query by query: nDCG@10 up / down, paired t-test p",
        "",
    ]
    lines += ["| path | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    for path in paths[1:]:
        cells = []
        for c in names:
            if path not in quality[c]:
                cells.append("not measured")
                continue
            up, down, p = wins(quality, c, path)
            cells.append(f"{up} / {down}, p {p:.2f}")
        lines.append(f"| {path} | " + " | ".join(cells) + " |")
    lines += ["", "Fusion chosen on dev per path:", ""]
    lines += ["| path | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for path in paths:
        fusions = [quality[c][path]["fusion"] if path in quality[c] else "" for c in names]
        lines.append(f"| {path} | " + " | ".join(fusions) + " |")
    return lines


def speed_lines(speed: dict) -> list[str]:
    docs, pairs = speed["documents"], speed["pairs"]
    lines = [
        "",
        "## Speed",
        "",
        f"{speed['texts']} SciFact documents (title and text, max length 256), encoded by "
        "`SentenceTransformer.encode` fp32 (batch 32) and by each documents' path, the same "
        "rounds, interleaved; re-ranking: each query's 20 documents scored by "
        "`CrossEncoder.predict` fp32 and by dotcat's `CrossEncoder.score_query` "
        f"({pairs['model']}), both cutting pairs at {PAIR_TOKENS} tokens. "
        f"Load average (1, 5, 15 min) before each round: encoding {'; '.join(docs['loads'])}; "
        f"re-ranking {'; '.join(pairs['loads'])}.",
        "",
        "| documents' path | docs/s | x sentence-transformers fp32 |",
        "| --- | ---: | ---: |",
    ]
    for key, rate in docs["per_s"].items():
        name = "sentence-transformers fp32 (baseline)" if key == "st" else key
        lines.append(f"| {name} | {rate:.1f} | {docs['ratio'][key]:.2f} |")
    lines += [
        "",
        "| re-ranker path | pairs/s | x sentence-transformers fp32 |",
        "| --- | ---: | ---: |",
    ]
    for key, rate in pairs["per_s"].items():
        name = "sentence-transformers fp32 (baseline)" if key == "st" else key
        lines.append(f"| {name} | {rate:.1f} | {pairs['ratio'][key]:.2f} |")
    lines += ["", "| queries' path | one query encoded, median ms |", "| --- | ---: |"]
    lines += [f"| {key} | {ms:.1f} |" for key, ms in speed["query ms"].items()]
    return lines


if __name__ == "__main__":
    main()
