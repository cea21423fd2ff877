"""Settings chosen on dev: argmax against the paired one-standard-error rule, judged on test.

dotcat chooses three settings on dev queries: an index's hybrid fusion, a re-ranker's
interpolation weight (``train cat``) and the weight ``dotcat calibrate`` gives a re-ranker on
pseudo-queries. This study scores every grid point once per query (``tables.py``), then, for
several dev-split seeds, lets argmax and :func:`dotcat.evaluation.choice.choose` choose on dev
and reports the test nDCG@10 of what each chose, with paired t-tests on the test queries.

What a seed changes (test never moves):

- SciFact, zero-shot: the dev split is carved again from ``train`` (10 %, as ``dotcat train``
  and ``dotcat index`` carve it) with that seed; seed 42 is the split dotcat uses.
- SciFact, ``train dot`` models: the model (``train dot --seed S``); the dev split stays the
  held-out one (seed 42): carving another would put the model's training queries in dev.
- pylib, faq, pydoc, debian, man (a fixed ``qrels/dev.tsv``, no train): a bootstrap resample of
  the dev queries (same size, with replacement) drawn with that seed; ``file`` is the file.
- the re-ranker's weight: a bootstrap resample of SciFact's held-out dev lists.
- calibration: ``dotcat calibrate --seed`` (other documents cut, other pseudo-queries drawn).

    python eval/studies/choices/choices.py fusion --models zero-shot=default,dot=runs/dot
    python eval/studies/choices/choices.py rerank --cat runs/cat --index INDEX
    python eval/studies/choices/choices.py calibrate --cat runs/cat --collections pydoc,debian,man
    python eval/studies/choices/choices.py report --output eval/studies/choices/choices.md
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import tables  # noqa: E402

import common  # noqa: E402
from dotcat.search.fusion import Fusion  # noqa: E402

logger = logging.getLogger("choices")


def _pairs(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


def main() -> None:
    parser = common.parser(__doc__, work="runs/choices")
    parser.add_argument("stage", choices=("fusion", "rerank", "calibrate", "report"))
    parser.add_argument("--collections", default=",".join(tables.COLLECTIONS))
    parser.add_argument(
        "--models", default="zero-shot=default", help="TAG=MODEL,... (fusion: encoders)"
    )
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--cat", type=Path, help="rerank, calibrate: the BERT_CAT")
    parser.add_argument("--index", type=Path, help="rerank: SciFact's index of the dot model")
    parser.add_argument(
        "--fusions", default="", help="rerank, calibrate: NAME=rrf|linear:W,... test first stages"
    )
    parser.add_argument("--seeds", default="0,1,2", help="calibrate: calibration seeds")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "choices.md")
    args = parser.parse_args()
    common.setup_logging()
    collections = [c for c in args.collections.split(",") if c]
    fusions = {
        name: Fusion("rrf") if spec == "rrf" else Fusion("linear", float(spec.split(":")[1]))
        for name, spec in _pairs(args.fusions).items()
    }
    if args.stage == "fusion":
        for tag, model in _pairs(args.models).items():
            for name in collections:
                tables.fusion_table(name, tag, model, args.work, args.precision)
    elif args.stage == "rerank":
        tables.rerank_table(args.work, args.index, args.cat, fusions)
    elif args.stage == "calibrate":
        seeds = [int(s) for s in args.seeds.split(",")]
        for name in collections:
            index = args.work / "indexes" / f"{name}-zero-shot"
            fusion = fusions.get(name) or Fusion("rrf")
            tables.calibrate_table(args.work, name, index, args.cat, fusion, seeds)
    else:
        import report

        common.write(args.output, report.build(args.work))


if __name__ == "__main__":
    logging.getLogger("choices").setLevel(logging.INFO)
    main()
