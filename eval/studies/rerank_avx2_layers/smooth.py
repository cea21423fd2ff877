"""SmoothQuant for the re-ranker's 7-bit int8 on AVX2: every linear layer int8, its input's
outlier channels moved into its weights first.

    python eval/studies/rerank_avx2_layers/smooth.py --cat runs/cat-avx2 \\
        [--work runs/rerank_smooth] [--collections scifact,faq,pydoc,man] \\
        [--alphas 0.5,0.65,0.8] [--dev-queries 16] [--queries 100] [--speed 200] \\
        [--calibrate-on scifact|random|docstrings] [--smooth-inputs all|ln]

Why: ONNX Runtime's dynamic int8 quantises a MatMul's input with one scale per call. A few
input channels of BERT's hidden states are far larger than the rest (outlier dimensions,
Bondarenko et al. 2021), so they set that scale and leave the other channels few of the 127
levels; ``layers.md`` found the first three layers' FFNs hold most of the error. SmoothQuant
(Xiao et al. 2023, eq. 4) divides input channel j by ``s_j = max|X_j|^a / max|W_j|^(1-a)``
and multiplies row j of the weight by it: ``(X diag(s)^-1) (diag(s) W) = X W`` exactly, the
input's range flattens and the weight, quantised per output channel, takes the rest. In
post-LN BERT a linear layer's input also feeds a residual, so ``s`` cannot be folded into the
LayerNorm before it: a ``Mul`` before each MatMul carries it (element-wise, per token).

The maxima ``max|X_j|`` come from calibration pairs, label-free: ``--calibration`` SciFact
train queries (no judgement read) with their first stage's top ``--depth``. Compared, as
``layers.py`` compares its candidates (agreement with fp32 on the dev pairs of each collection
with a dev split; test nDCG@10 at weight 1 against PyTorch fp32, with the bar): ``rr`` (the
7-bit recipe on every unit), ``rr-keep7`` (what ``auto`` runs on AVX2: layers 0-2's FFNs and
the embedding tables in fp32) and ``rr-smooth-A`` (every linear layer int8 after smoothing
with ``a = A``; the embedding tables in fp32, which costs no arithmetic); of the ``--alphas``,
the one with the fewest discordant dev pairs goes to test. ``--calibrate-on random`` or
``docstrings`` draws the calibration pairs from text every machine has instead of SciFact;
``--smooth-inputs ln`` smooths only the inputs a LayerNorm makes (Q/K/V and the FFN's first
projection) and leaves the attention context and the GELU output as ``rr`` has them.
``--speed N`` times them as ``layers.py --speed`` does, against sentence-transformers fp32;
``--speed-only`` times the ``--alphas`` given and measures nothing else (exports and calibration
cached under ``--work``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import layers  # noqa: E402
from layers import common  # noqa: E402


def maxima(fp32_onnx: Path, feeds: list[dict]) -> dict[str, np.ndarray]:
    """``max|X_j|`` of every linear layer's input X, per channel j, over ``feeds`` (one pair
    each, no padding), by :func:`dotcat.models.smoothquant.maxima`."""
    import onnx

    from dotcat.models import smoothquant

    model = onnx.load(str(fp32_onnx))
    return smoothquant.maxima(model, list(smoothquant.linear_inputs(model.graph, False)), feeds)


def smoothed(fp32_onnx: Path, out: Path, found: dict[str, np.ndarray], alpha: float,
             ln_only: bool = False) -> Path:  # fmt: skip
    """The fp32 graph with each linear layer's input (``ln_only``: each a LayerNorm makes)
    smoothed by :func:`dotcat.models.smoothquant.smooth`."""
    import onnx

    from dotcat.models import smoothquant

    model = onnx.load(str(fp32_onnx))
    smoothquant.smooth(model.graph, smoothquant.linear_inputs(model.graph, ln_only), found, alpha)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    return out


def text_feeds(cat, pairs: list[tuple[str, str]], input_names: list[str]) -> list[dict]:
    """One feed per (query, document) text pair, cut and laid out as the re-ranker does."""
    return [{k: v.numpy() for k, v in cat.features([q], [d]).items() if k in input_names}
            for q, d in pairs]  # fmt: skip


def calibration(args, cat, input_names: list[str]) -> list[dict]:
    """One feed per pair of ``--calibration`` SciFact train queries (drawn with a fixed seed;
    no judgement read) and their first stage's top ``--depth``."""
    run = layers.first_stage("scifact", "train", args.calibration, args.work)
    first, queries, texts = layers.pairs_of("scifact", "train", run, args.depth)
    pairs = [(queries[q], texts[d]) for q, docs in first.items() for d, _ in docs[: args.depth]]
    return text_feeds(cat, pairs, input_names)


def random_pairs(args, cat, input_names: list[str]) -> list[dict]:
    """As many feeds as :func:`calibration` makes (at most), of random tokens: a 10-token query,
    a 230-token document, ids drawn uniformly past BERT's special and unused ones."""
    rng, n = np.random.default_rng(0), args.calibration * args.depth
    draw = [(rng.integers(1000, len(cat.tokenizer), k).tolist() for k in (10, 230))
            for _ in range(n)]  # fmt: skip
    pairs = [cat.template.build(q, d) for q, d in draw]
    return [{k: v.numpy() for k, v in cat.collate([p]).items() if k in input_names} for p in pairs]


def docstring_pairs(args, cat, input_names: list[str]) -> list[dict]:
    """As many feeds as :func:`calibration` makes, from text every Python has: the standard
    library's docstrings (those not in the pydoc collection), each summary paired with its
    own body and ``--depth - 1`` others, drawn with a fixed seed."""
    import json
    import random
    import sysconfig

    import ood_sources as src

    root = Path(sysconfig.get_paths()["stdlib"])
    pydoc = common.COLLECTIONS["pydoc"] / "corpus.jsonl"
    taken = {json.loads(line)["_id"] for line in pydoc.read_text().splitlines()}
    split = [(name, src.split_docstring(doc)) for path in src.stdlib_files(root)
             for name, doc in src.docstrings(path, root) if name not in taken]  # fmt: skip
    found = sorted((name, parts) for name, parts in split if parts)
    rng = random.Random(0)
    chosen = rng.sample(found, args.calibration)
    bodies = [body for _, (_, body) in found]
    pairs = [(summary, d) for _, (summary, body) in chosen
             for d in [body, *rng.sample(bodies, args.depth - 1)]]  # fmt: skip
    return text_feeds(cat, pairs, input_names)


def main() -> None:
    parser = common.parser(__doc__, output=Path(__file__).with_suffix(".md"),
                           work="runs/rerank_smooth")  # fmt: skip
    parser.add_argument("--cat", type=Path, required=True, help="a trained BERT_CAT")
    parser.add_argument("--collections", default="scifact,faq,pydoc,man")
    parser.add_argument("--alphas", default="0.5,0.65,0.8")
    parser.add_argument("--calibration", type=int, default=40)
    parser.add_argument("--dev-queries", type=int, default=16)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--speed", type=int, help="also time them on this many pairs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--speed-only", action="store_true", help="time them, nothing else")
    parser.add_argument("--calibrate-on", choices=("scifact", "random", "docstrings"),
                        default="scifact", help="the calibration pairs' text")  # fmt: skip
    parser.add_argument("--smooth-inputs", choices=("all", "ln"), default="all",
                        help="every linear input, or only those a LayerNorm makes")  # fmt: skip
    args = parser.parse_args()
    args.collections = args.collections.split(",")
    import functools
    import re

    from dotcat.models.onnx_backend import KEEP_FP32, OnnxRunner, export
    from dotcat.search.reranker import Reranker

    reranker = Reranker.load(str(args.cat), args.depth, 1.0, precision="fp32")
    home = args.work / "onnx"
    fp32_onnx = export(args.cat, "cross-encoder", "fp32", home, reranker.cross_encoder.fingerprint)
    parts = layers.units(fp32_onnx)
    first_ffns = [n for names, _ in parts.values() for n in names
                  if any(re.search(p, n) for p in KEEP_FP32["first_ffns"])]  # fmt: skip
    kept = {"rr": [], "rr-keep7": first_ffns}
    candidates = {"fp32": None} | {
        label: layers.quantised(fp32_onnx, home / f"{label}.onnx", k) for label, k in kept.items()
    }
    names = OnnxRunner(fp32_onnx).input_names
    pairs = {"scifact": calibration, "random": random_pairs, "docstrings": docstring_pairs}
    found = functools.cache(
        lambda: maxima(fp32_onnx, pairs[args.calibrate_on](args, reranker.cross_encoder, names))
    )
    source = "" if args.calibrate_on == "scifact" else f"{args.calibrate_on}-"
    source += "" if args.smooth_inputs == "all" else "ln-"
    for a in args.alphas.split(","):
        label = f"rr-smooth-{source}{a}"
        kept[label] = parts["embeddings"][0]
        fp32_s = home / f"{label[3:]}-fp32.onnx"
        if not fp32_s.exists():
            smoothed(fp32_onnx, fp32_s, found(), float(a), args.smooth_inputs == "ln")
        candidates[label] = layers.quantised(fp32_s, home / f"{label}.onnx", kept[label])
    title = "SmoothQuant for the re-ranker's 7-bit int8 (the AVX2 export)"
    if args.speed_only:  # an AVX2 CPU's speed
        lines = common.header(title, f"Re-ranker: `{common.shown(args.cat)}`.")
        return common.write(args.output, lines + layers.speed(args, reranker, candidates))
    dev = layers.DevPairs(args, reranker)
    agree = {label: dev.agreement(model) for label, model in candidates.items() if model}
    smooth = [label for label in agree if label.startswith("rr-smooth")]
    best = min(smooth, key=lambda label: agree[label]["discordant"])  # chosen on dev
    candidates = {k: v for k, v in candidates.items() if k not in smooth or k == best}
    rows = layers.test_figures(args, reranker, candidates)
    total = sum(macs for _, macs in parts.values())
    shares = {label: sum(macs for names, macs in parts.values() if set(names) <= set(k)) / total
              for label, k in kept.items()}  # fmt: skip
    lines = common.header(
        title,
        f"Re-ranker: `{common.shown(args.cat)}`, depth {args.depth}, weight 1; calibration: "
        + (
            f"the top {args.depth} of {args.calibration} SciFact train queries"
            if args.calibrate_on == "scifact"
            else f"{args.calibration * args.depth} pairs of {args.calibrate_on}"
        )
        + f" text; smoothed inputs: {args.smooth_inputs}; dev: {args.dev_queries} queries of "
        f"each of {', '.join(dev.collections)}; test: {args.queries} queries a collection. "
        f"First stage: `{common.shown(args.work)}/NAME/"
        "index`, hybrid.",
    )
    lines += ["## Dev: agreement with fp32", "", "| path | change / sd | discordant pairs |",
              "| --- | ---: | ---: |"]  # fmt: skip
    lines += [f"| {k} | {v['change']:.4f} | {v['discordant']:.4f} |" for k, v in agree.items()]
    lines += ["", f"Chosen on dev (fewest discordant pairs): `{best}`."]
    lines += layers.test_table(shares, agree, rows)
    if args.speed:
        lines += layers.speed(args, reranker, candidates)
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
