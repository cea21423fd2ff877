"""Which pair length re-ranks better on dev: a trained BERT_CAT scored at 256 and 512 tokens.

    python eval/studies/cat_max_length/dev_cat_max_length.py [--cat-model runs/cat/lce] \\
        [--lengths 256,512]

The dev split is the one ``dotcat train cat`` held out (same ``dev_fraction`` and seed, read
from the model's ``dotcat_training.json``); its first stage is the first one the model was
trained behind, top ``--depth``. For each length the same model re-ranks those lists; the
script prints and writes dev nDCG@10 and the scoring time. Only dev queries are used: the
test split stays for reporting. Writes ``cat_max_length_dev.md`` beside this script.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "cat_max_length_dev.md")
    parser.add_argument("--cat-model", type=Path, default=Path("runs/cat/lce"))
    parser.add_argument("--lengths", default="256,512")
    parser.add_argument("--depth", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from dotcat.data.splits import split_dev
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
    from dotcat.search.reranker import corpus_texts
    from dotcat.training.data.examples import load_training_data
    from dotcat.training.data.pools import first_stage_run
    from dotcat.training.recipes.cat import dev_candidates, dev_score

    record = json.loads(common.training_record_path(args.cat_model).read_text())
    hp, split = record["hyperparameters"], record["split"]
    trained_length = json.loads((args.cat_model / "dotcat_cross_encoder.json").read_text())[
        "max_length"
    ]
    data = load_training_data(record["data"]["path"], record["data"]["split"])
    _, dev_qids = split_dev(list(data.queries), split["dev_fraction"], split["seed"])
    dev_queries = {q: data.queries[q] for q in dev_qids}
    first_stage = hp["first_stages"][0]
    first = first_stage_run(first_stage, data, dev_queries, args.depth)
    texts = corpus_texts(data.corpus, {d for docs in first.values() for d, _ in docs})

    rows = []
    for length in (int(x) for x in args.lengths.split(",")):
        ce = CrossEncoder.load(
            CrossEncoderConfig(model=str(args.cat_model), max_length=length, device="cpu")
        )
        start = time.perf_counter()
        candidates = dev_candidates(ce, first, dev_queries, texts, args.depth)
        seconds = time.perf_counter() - start
        rows.append((length, dev_score(candidates, data.qrels), seconds))
        print(f"max length {length}: dev nDCG@10 {rows[-1][1]:.4f} ({seconds:.0f} s)", flush=True)

    lines = [
        *common.header("BERT_CAT pair length on dev: 256 vs 512 tokens", torch=True),
        f"Model: `{args.cat_model}` (trained at max length {trained_length}); dev split: "
        f"{len(dev_queries)} train queries held out by `dotcat train cat` (fraction "
        f"{split['dev_fraction']}, seed {split['seed']}); first stage `{first_stage}`, "
        f"top {args.depth} re-ranked.",
        "",
        "| max length | dev nDCG@10 | scoring time |",
        "| ---: | ---: | ---: |",
        *(f"| {length} | {score:.4f} | {sec:.0f} s |" for length, score, sec in rows),
        "",
        "The model was trained at one length; this compares the lengths it can be run at. A model",
        "trained at 512 would cost about twice the training time (attention and feed-forward over",
        "twice the tokens), beyond the 45-minute budget on this CPU.",
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
