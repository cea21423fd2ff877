"""Which passage settings: window, stride, sentence-aware cuts and aggregation, on dev only.

    python eval/studies/passages/sweep.py [--collections pylib faq pydoc debian scifact] \\
        [--configs off 256/0 256/64 256/128 128/0 128/32 256/64-nosent]

For every collection (``--built``: the BEIR folders ``ood_collections.py`` builds; ``scifact``
is ``data/scifact``) and every passage setting, an index is built from Python with the default
encoder at ``auto`` precision (``build_index`` with BM25, as ``dotcat index`` builds it, but
with the setting under test); then on the collection's dev queries (its ``dev`` split, or for
SciFact the 10% of ``train`` that ``dotcat train`` holds out: :func:`find_dev_split`) each
aggregation ranks documents by dense, by BM25 and by the hybrid (the fusion chosen on those dev
queries for that aggregation, as ``dotcat index`` chooses it: so the hybrid's dev figure is
optimistic, alike for every setting), and by ``hybrid-docbm25``: the same dense run fused (on
dev alike) with BM25 over whole documents (the ``off`` index's), to weigh BM25 over passages
against BM25 over documents. Test queries are never read.

A setting is ``WINDOW/STRIDE`` (tokens per passage, title included / tokens shared by
consecutive passages), ``-nosent`` without sentence-aware cuts, ``off`` for one vector per
document cut at 256 tokens (truncation). One encoder encodes every index of a run, and a text
it has encoded once (a short document: the same passage under every setting) is not encoded
again: the indexes differ where the settings differ, and the run takes hours less.

Writes ``sweep.md`` beside this script (nDCG@10 and R@100 per collection, setting, aggregation
and first stage; passages per index), and the runs under ``--work``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

COLLECTIONS = ("pylib", "faq", "pydoc", "debian", "scifact")
CONFIGS = ("off", "256/0", "256/64", "256/128", "128/0", "128/32", "256/64-nosent")
AGGREGATIONS = (("maxp", 2), ("firstp", 2), ("sum", 2), ("sum", 3))
STAGES = ("dense", "bm25", "hybrid", "hybrid-docbm25")
MEASURES = ("nDCG@10", "R@100")
DEPTH = 100


def passage_config(name: str):
    """``off``, ``W/S`` or ``W/S-nosent`` as a :class:`PassageConfig`."""
    from dotcat.index.passages import PassageConfig

    if name == "off":
        return PassageConfig(enabled=False)
    setting, _, flag = name.partition("-")
    window, stride = (int(x) for x in setting.split("/"))
    return PassageConfig(window=window, stride=stride, sentence_aware=flag != "nosent")


def cached_encoder():
    """The default encoder as ``dotcat index`` loads it, remembering every text it encoded."""
    import numpy as np

    from dotcat.models import BiEncoder, EncoderConfig

    encoder = BiEncoder.load(EncoderConfig(device="cpu"))
    plain = encoder.encode_documents
    memory: dict[bytes, np.ndarray] = {}

    def encode_documents(texts, **kwargs):
        keys = [hashlib.sha1(t.encode("utf-8")).digest() for t in texts]
        new = sorted({i for i, key in enumerate(keys) if key not in memory})
        if new:
            wanted = {keys[i]: texts[i] for i in new}
            vectors = plain(list(wanted.values()))
            memory.update(zip(wanted, vectors, strict=True))
        progress = kwargs.get("progress")
        if progress is not None:
            progress.update(len(texts))
        return np.stack([memory[key] for key in keys])

    encoder.encode_documents = encode_documents
    return encoder


def data_dir(name: str, built: Path) -> Path:
    return common.SCIFACT if name == "scifact" else built / name


def sweep_one(name: str, data: Path, config: str, encoder, work: Path, doc_bm25) -> dict:
    """Build one index, rank the dev queries every way; the scores and the index's figures."""
    from dotcat.data.splits import find_dev_split
    from dotcat.evaluation import evaluate
    from dotcat.index import IndexConfig, build_index
    from dotcat.search.fusion import choose_fusion
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    index = work / name / config.replace("/", "-") / "index"
    started = time.perf_counter()
    if not (index / "manifest.json").exists():
        settings = IndexConfig(device="cpu", bm25=True, passages=passage_config(config))
        build_index(data, index, encoder, settings, overwrite=True, show_progress=False)
    built = time.perf_counter() - started
    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    dev = find_dev_split(data)
    out = {"passages": (manifest.get("passages") or manifest["documents"])["count"],
           "documents": manifest["documents"]["count"], "seconds": built, "scores": {}}  # fmt: skip
    for method, top in AGGREGATIONS if config != "off" else AGGREGATIONS[:1]:
        pipeline = SearchPipeline(
            index, PipelineConfig(device="cpu", aggregation=method, aggregate_top=top)
        )
        dense = pipeline.run(dev.queries, DEPTH, first_stage="dense")
        bm25 = pipeline.run(dev.queries, DEPTH, first_stage="bm25")
        if doc_bm25 is None:  # the ``off`` index: its BM25 ranks whole documents
            doc_bm25 = bm25
        fusion = choose_fusion(dense, bm25, dev.qrels, dev.source)
        doc_fusion = choose_fusion(dense, doc_bm25, dev.qrels, dev.source)
        runs = (dense, bm25, fusion.fuse_runs(dense, bm25), doc_fusion.fuse_runs(dense, doc_bm25))
        label = method if method != "sum" else f"sum{top}"
        for stage, run in zip(STAGES, runs, strict=True):
            report = evaluate(run, dev.qrels, measures=list(MEASURES))
            out["scores"][f"{label} {stage}"] = {m: report.aggregate[m] for m in MEASURES}
        out["scores"][f"{label} hybrid"]["fusion"] = fusion.describe()
        out["scores"][f"{label} hybrid-docbm25"]["fusion"] = doc_fusion.describe()
        del pipeline
    logging.getLogger("sweep").warning("%s %s: %s", name, config, json.dumps(out))
    return out


def document_bm25(name: str, data: Path, encoder, work: Path):
    """BM25 over whole documents on the dev queries: the ``off`` index's (built if needed)."""
    from dotcat.data.splits import find_dev_split
    from dotcat.index import IndexConfig, build_index
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    index = work / name / "off" / "index"
    if not (index / "manifest.json").exists():
        settings = IndexConfig(device="cpu", bm25=True, passages=passage_config("off"))
        build_index(data, index, encoder, settings, overwrite=True, show_progress=False)
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu", first_stage="bm25"))
    return pipeline.run(find_dev_split(data).queries, DEPTH, first_stage="bm25")


def table(name: str, results: dict[str, dict]) -> list[str]:
    lines = [f"## {name}", ""]
    lines += [
        "| setting | passages | aggregation | dense | BM25 | hybrid | hybrid, BM25 of documents "
        "| fusions |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for config, found in results.items():
        labels = dict.fromkeys(key.split()[0] for key in found["scores"])
        for label in labels:
            s = found["scores"]
            cells = [
                f"{s[f'{label} {stage}']['nDCG@10']:.4f} / {s[f'{label} {stage}']['R@100']:.4f}"
                for stage in STAGES
            ]
            fusions = f"{s[f'{label} hybrid']['fusion']}; {s[f'{label} hybrid-docbm25']['fusion']}"
            lines.append(
                f"| {config} | {found['passages']} | {label} | {' | '.join(cells)} | {fusions} |"
            )
    return lines + [""]


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "sweep.md", work="runs/passages_sweep")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--built", type=Path, default=Path("runs/collections"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    encoder = cached_encoder()
    record = args.work / "sweep.json"
    results: dict = json.loads(record.read_text()) if record.exists() else {}
    for name in args.collections:
        data = data_dir(name, args.built)
        doc_bm25 = None
        for config in ("off", *(c for c in args.configs if c != "off")):
            if config in results.get(name, {}) and config != "off":
                continue
            if config == "off":
                doc_bm25 = document_bm25(name, data, encoder, args.work)
                if "off" in results.get(name, {}):
                    continue
            found = sweep_one(name, data, config, encoder, args.work, doc_bm25)
            results.setdefault(name, {})[config] = found
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps(results, indent=1))
    lines = common.header(
        "Passage settings on dev: nDCG@10 / R@100 per setting, aggregation and first stage",
        f"Encoder: the default (all-MiniLM-L6-v2) at `auto` precision ({encoder.precision}).",
        torch=True,
    )
    lines += [
        "Settings: `WINDOW/STRIDE` in tokens (title and special tokens included / shared by "
        "consecutive passages), `-nosent` without sentence-aware cuts, `off` one vector per "
        "document cut at 256 tokens. Aggregations: `maxp` (best passage), `firstp` (first "
        "passage), `sumN` (sum of the N best). Dev queries only; the hybrid's fusion is chosen "
        "on them (optimistic, alike for every setting).",
        "",
    ]
    for name in args.collections:
        lines += table(name, results[name])
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
