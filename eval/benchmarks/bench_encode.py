"""Document-encoding throughput: dotcat's BiEncoder against sentence-transformers, same run.

    python eval/benchmarks/bench_encode.py [--n-docs 2000] [--max-length 256] [--batch-size 32]
                                           [--rounds 3] [--chunk 200] [--variant dotcat ...]

Both load the same model directory (default: the packaged all-MiniLM-L6-v2), encode the same
SciFact documents (``title + " " + text``) truncated to the same max length, and are warmed up
first. The machine is shared, so the runs are interleaved finely: each round walks the
documents in chunks and, per chunk, times ``SentenceTransformer.encode(chunk, batch_size)`` and
each dotcat variant back to back (in a rotating order), so a burst of load from elsewhere hits
them alike. Reported: docs/s of each over all rounds, the ratio to sentence-transformers
(total time, and the median of the per-chunk ratios), and the cosine between each variant's
vectors and sentence-transformers' fp32 vectors. The figures go to
``eval/benchmarks/results/encode_throughput.md`` between the ``bench_encode`` markers (the rest
of that file, the notes on what was tried, is left as it is).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import common

BEGIN, END = "<!-- bench_encode:begin -->", "<!-- bench_encode:end -->"

#: Named dotcat configurations (EncoderConfig overrides) a run can compare.
VARIANTS: dict[str, dict] = {
    "dotcat": {},
    "dotcat-plain": {"fast": False},
    "dotcat-1worker": {"cpu_workers": 1},
    "dotcat-1worker-bs32": {"cpu_workers": 1, "max_batch_tokens": 0},
    "dotcat-tokens1024": {"max_batch_tokens": 1024},
    "dotcat-tokens4096": {"max_batch_tokens": 4096},
    "dotcat-notokencap": {"max_batch_tokens": 0},
    "dotcat-bf16": {"precision": "bf16"},
    "dotcat-fp32": {"precision": "fp32"},
    "dotcat-default-batch": {"batch_size": None},
}


def _relative(path: str) -> str:
    """A path as a reader can use it: under the repository relative, in site-packages from
    the package's directory (results files carry no machine's absolute paths)."""
    shown = common.shown(path)
    parts = Path(shown).parts
    if "site-packages" in parts:
        return "/".join(("site-packages", *parts[parts.index("site-packages") + 1 :]))
    return shown


def read_texts(corpus: Path, n: int) -> list[str]:
    """The first ``n`` documents of a BEIR corpus.jsonl (or .jsonl.gz) as title + " " + text."""
    import gzip

    opener = gzip.open if corpus.suffix == ".gz" else open
    texts = []
    with opener(corpus, "rt", encoding="utf-8") as f:
        for line in f:
            if len(texts) >= n:
                break
            doc = json.loads(line)
            title, text = doc.get("title") or "", doc.get("text") or ""
            texts.append(f"{title} {text}".strip())
    return texts


def machine() -> str:
    import sentence_transformers
    import transformers

    from dotcat.models.runtime import available_cpus, cpu_flags, cpu_has_native_bf16, cpu_model

    simd = [
        f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if f in cpu_flags()
    ]
    gpu = f"GPU {torch.cuda.get_device_name(0)}, " if torch.cuda.is_available() else ""
    return (
        f"{gpu}{cpu_model()}, {available_cpus()} cores ({', '.join(simd) or 'no x86 SIMD flags'}; "
        f"native bf16: {'yes' if cpu_has_native_bf16() else 'no'}), torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}, Python "
        f"{platform.python_version()}"
    )


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def main(argv: list[str] | None = None) -> int:
    parser = common.parser(__doc__, output="encode_throughput.md")
    parser.add_argument("--n-docs", type=int, default=2000)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=200, help="docs per timed call; 0: all")
    parser.add_argument("--model", default="default")
    parser.add_argument("--corpus", type=Path, default=common.SCIFACT / "corpus.jsonl.gz")
    parser.add_argument(
        "--variant", action="append", choices=sorted(VARIANTS), help="dotcat configs to time"
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda, for both sides")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    variants = args.variant or ["dotcat"]

    from sentence_transformers import SentenceTransformer

    from dotcat.models import BiEncoder, EncoderConfig

    corpus = args.corpus
    texts = read_texts(corpus, args.n_docs)
    n = len(texts)
    print(f"{n} documents from {corpus}", flush=True)

    encoders = {}
    for name in variants:
        settings = dict(max_length=args.max_length, batch_size=args.batch_size)
        config = EncoderConfig(
            model=args.model, device=args.device, **{**settings, **VARIANTS[name]}
        )
        encoders[name] = BiEncoder.load(config)
    path = str(next(iter(encoders.values())).path)
    st = SentenceTransformer(path, device=args.device)
    st.max_seq_length = args.max_length
    print(machine(), flush=True)

    runners: dict[str, Callable[[list[str]], np.ndarray]] = {
        "sentence-transformers": lambda chunk: st.encode(
            chunk, batch_size=args.batch_size, convert_to_numpy=True
        ),
    }
    for name, encoder in encoders.items():
        runners[name] = lambda chunk, e=encoder: e.encode_documents(chunk)

    warm = texts[: min(n, 2 * args.batch_size)]
    for run in runners.values():
        run(warm)

    chunk = args.chunk or n
    load_before = os.getloadavg()[0]
    starts = list(range(0, n, chunk))
    total = dict.fromkeys(runners, 0.0)
    chunk_ratios: dict[str, list[float]] = {name: [] for name in encoders}
    vectors: dict[str, np.ndarray] = {}
    names = list(runners)
    for r in range(args.rounds):
        outs: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for i, s in enumerate(starts):
            part = texts[s : s + chunk]
            shift = (r * len(starts) + i) % len(names)
            seconds = {}
            for name in names[shift:] + names[:shift]:
                t0 = time.perf_counter()
                outs[name].append(runners[name](part))
                seconds[name] = time.perf_counter() - t0
                total[name] += seconds[name]
            for name in encoders:
                chunk_ratios[name].append(seconds["sentence-transformers"] / seconds[name])
        vectors = {name: np.concatenate(parts) for name, parts in outs.items()}
        print(
            f"round {r + 1}: "
            + ", ".join(f"{k} {n * (r + 1) / total[k]:.2f} docs/s" for k in names),
            flush=True,
        )

    st_rate = n * args.rounds / total["sentence-transformers"]
    rows = [
        "| encoder | docs/s | ratio vs ST (total time) | median per-chunk ratio "
        "| mean cos vs ST | min cos vs ST |",
        "|---|---:|---:|---:|---:|---:|",
        f"| sentence-transformers `encode(batch_size={args.batch_size})` | {st_rate:.2f} "
        "| 1.00 | 1.00 | 1 | 1 |",
    ]
    for name in encoders:
        rate = n * args.rounds / total[name]
        cos = cosines(vectors[name], vectors["sentence-transformers"])
        rows.append(
            f"| {name} `{json.dumps(VARIANTS[name]) if VARIANTS[name] else 'defaults'}` "
            f"| {rate:.2f} | {rate / st_rate:.2f} | {statistics.median(chunk_ratios[name]):.2f} "
            f"| {cos.mean():.6f} | {cos.min():.6f} |"
        )
    table = "\n".join(rows)
    print(table)

    if args.no_write:
        return 0
    section = "\n".join(
        [
            BEGIN,
            f"Latest run ({common.now()}): `{common.command()}`",
            "",
            f"Machine: {machine()}. Model: `{args.model}` ({_relative(path)}); {n} SciFact "
            "documents, "
            f"max length {args.max_length}, batch size {args.batch_size}, {args.rounds} rounds "
            f"interleaved in chunks of {chunk} documents; load average before/after "
            f"{load_before:.2f}/{os.getloadavg()[0]:.2f} (other jobs share the cores)"
            + (
                f"; OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
                if os.environ.get("OMP_NUM_THREADS")
                else ""
            )
            + ".",
            "",
            table,
            END,
        ]
    )
    old = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
    if BEGIN in old and END in old:
        new = old[: old.index(BEGIN)] + section + old[old.index(END) + len(END) :]
    else:
        new = (old.rstrip() + "\n\n" if old else "# Encoding throughput\n\n") + section + "\n"
    common.write(args.output, new.splitlines())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
