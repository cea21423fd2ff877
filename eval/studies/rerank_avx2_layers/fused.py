"""Does ONNX Runtime's BERT fusion (Attention, SkipLayerNormalization, BiasGelu,
EmbedLayerNormalization) speed up the re-ranker's AVX2 export (``first_ffns``, ``rr-keep7``)?

    python eval/studies/rerank_avx2_layers/fused.py   # after layers.py --speed-only

The fp32 export of ``runs/rerank_avx2/cat-untrained`` is fused
(``bench_precision_pipeline.fused``), then quantised as the 7-bit recipe: every unit
(``rr-fused``), or all but the first three layers' FFNs (``keep7-fused``; the embedding lookups
are fused into EmbedLayerNormalization, which the quantiser leaves in fp32). Printed: each path's
agreement with fp32 on 10 queries' 20 pairs, then pairs/s against sentence-transformers fp32
(:func:`layers.speed`); fused_zen3.md holds a run.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import layers  # noqa: E402

from bench_precision_pipeline import fused, speed_texts  # noqa: E402

CAT = Path("runs/rerank_avx2/cat-untrained")
WORK = Path("runs/rerank_avx2")


def main() -> None:
    import onnx

    from dotcat.models.onnx_backend import KEEP_FP32, OnnxRunner
    from dotcat.search.reranker import Reranker

    whole = fused(WORK / "onnx" / "model.onnx", WORK / "fused", CAT)
    patterns = [re.compile(p) for p in KEEP_FP32["first_ffns"]]
    graph = onnx.load(str(whole), load_external_data=False).graph
    kept = [n.name for n in graph.node if any(p.search(n.name) for p in patterns)]
    candidates = {
        "fp32": None,
        "rr-keep7": WORK / "onnx" / "rr-keep7.onnx",
        "rr-fused": layers.quantised(whole, WORK / "fused" / "rr-fused.onnx", []),
        "keep7-fused": layers.quantised(whole, WORK / "fused" / "keep7-fused.onnx", kept),
    }
    reranker = Reranker.load(str(CAT), 20, 1.0, precision="fp32")
    cat = reranker.cross_encoder
    cat.max_length = 256
    texts, queries = speed_texts(200)
    groups = [([queries[i]] * 20, texts[i * 20 : (i + 1) * 20]) for i in range(10)]
    ref = [cat.score(*g) for g in groups]
    for label, model in list(candidates.items())[1:]:
        cat.onnx = OnnxRunner(model)
        got = [cat.score(*g) for g in groups]
        pairs = list(zip(got, ref, strict=True))
        share = np.mean([layers.discordant(a, b) for a, b in pairs])
        largest = max(float(np.abs(a - b).max()) for a, b in pairs)
        print(f"{label}: discordant pairs {share:.4f}, largest |logit change| {largest:.4f}")
    cat.onnx = None
    args = SimpleNamespace(cat=CAT, speed=200, rounds=5)
    print("\n".join(layers.speed(args, reranker, candidates)))


if __name__ == "__main__":
    main()
