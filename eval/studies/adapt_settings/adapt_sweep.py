"""`dotcat adapt` settings compared on the dev queries: what the adaptation defaults are chosen on.

    python eval/studies/adapt_settings/adapt_sweep.py --data data/scifact \\
        --work runs/adapt-sweep --setting contrastive: --setting lexical:teacher=bm25 \\
        --setting slow:lr=2e-5 [--model default] [--max-queries 4000] [--output adapt_sweep.md]

Each ``--setting NAME:KEY=VALUE,...`` is one ``dotcat adapt`` run (``AdaptConfig`` fields;
the corpus alone is read, never its queries or qrels), then its dense nDCG@10 and R@100 on the
data's dev queries (its dev split, else the 10% of train ``dotcat train`` holds out), beside
the base model's. The test split is never read. The same number of pseudo-queries for every
setting (``--max-queries``) and a large time budget, so that the settings, not the budget's
arithmetic, differ; each run's training time is recorded beside it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

MEASURES = ("nDCG@10", "R@100")


def parse_setting(text: str) -> tuple[str, dict]:
    """``name:key=value,key=value`` -> (name, {key: value}); values parsed as JSON where
    they can be (numbers, true/false), else kept as strings."""
    name, _, rest = text.partition(":")
    fields = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            fields[key] = json.loads(value)
        except json.JSONDecodeError:
            fields[key] = value
    return name, fields


def dev_figures(model: str, data: Path, device: str) -> dict[str, float]:
    """Exact dense retrieval of the dev queries over the whole corpus (title + text)."""
    import numpy as np

    from dotcat.data import load_corpus
    from dotcat.data.splits import find_dev_split
    from dotcat.evaluation import evaluate
    from dotcat.index import document_text
    from dotcat.models import BiEncoder, EncoderConfig

    dev = find_dev_split(data)
    corpus = load_corpus(data)
    encoder = BiEncoder.load(EncoderConfig(model=model, device=device))
    docs = encoder.encode_documents(
        [document_text(t, x) for t, x in zip(corpus["title"], corpus["text"], strict=True)]
    )
    qids = list(dev.queries)
    queries = encoder.encode_queries([dev.queries[q] for q in qids])
    scores = queries @ docs.T
    top = np.argsort(-scores, axis=1)[:, :100]
    ids = corpus["id"]
    run = {q: [(ids[j], float(scores[i, j])) for j in top[i]] for i, q in enumerate(qids)}
    report = evaluate(run, dev.qrels, list(MEASURES))
    return {m: round(report.aggregate[m], 4) for m in MEASURES} | {"queries": len(qids)}


def main() -> None:
    parser = common.parser(__doc__, data=common.REQUIRED)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--model", default="default")
    parser.add_argument("--setting", action="append", default=[], required=True)
    parser.add_argument("--max-queries", type=int, default=4000)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--output", type=Path, help="a results file (default: print only)")
    args = parser.parse_args()
    from dotcat.files import read_json_or_none
    from dotcat.training.adapt import adapt
    from dotcat.training.config import AdaptConfig

    rows = [("base model (zero-shot)", {}, dev_figures(args.model, args.data, args.device), 0)]
    print(json.dumps({"setting": rows[0][0], **rows[0][2]}), flush=True)
    for text in args.setting:
        name, fields = parse_setting(text)
        out = args.work / name
        started = time.perf_counter()
        if (read_json_or_none(out / "dotcat_adapt.json") or {}).get("status") != "finished":
            adapt(
                AdaptConfig(
                    corpus=args.data,
                    out_dir=out,
                    model=args.model,
                    budget_minutes=600,
                    max_queries=args.max_queries,
                    device=args.device,
                    overwrite=True,
                    show_progress=False,
                    **fields,
                )
            )
        seconds = time.perf_counter() - started
        figures = dev_figures(str(out), args.data, args.device)
        rows.append((name, fields, figures, seconds))
        print(
            json.dumps({"setting": name, **fields, **figures, "seconds": round(seconds)}),
            flush=True,
        )
    if args.output:
        write(args, rows)


def write(args, rows) -> None:
    lines = [
        *common.header("`dotcat adapt` settings on the dev queries"),
        "Dense retrieval, exact search over the whole corpus (title + text); "
        f"dev: {rows[0][2]['queries']} queries. Every setting trains on the same "
        f"{args.max_queries} pseudo-queries (titles first) of the corpus alone.",
        "",
        "| setting | fields | nDCG@10 | R@100 | seconds |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name, fields, figures, seconds in rows:
        shown = ", ".join(f"{k}={v}" for k, v in fields.items()) or "-"
        lines.append(
            f"| {name} | {shown} | {figures['nDCG@10']:.4f} | {figures['R@100']:.4f} | "
            f"{seconds:.0f} |"
        )
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
