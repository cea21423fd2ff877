"""Self-training data for the judge loop's small-data study: the judged queries' own qrels plus,
for every other query of a split (text only, as a query log would give them), the zero-shot
hybrid's top-ranked document as a positive (grade 1). Queries of a held-out dev folder are left
out, so dev stays unseen. Test queries are not read.

    python make_selftrain.py JUDGED RUN QUERIES DEV OUT
    # JUDGED: the loop's `dotcat judge export` folder (qrels/train.tsv, corpus.jsonl)
    # RUN: `dotcat search LOOP/index --queries DATA --split train --output RUN`
    # QUERIES: the collection's queries file; DEV: make_dev.py's folder; OUT: the new folder
"""

import json
import sys
from pathlib import Path

from dotcat.data import load_qrels, load_queries, read_run
from dotcat.data.runs import ranked
from dotcat.judging.export import write_qrels


def main(judged, run, queries, dev, out):
    judged, out = Path(judged), Path(out)
    qrels = load_qrels(judged, split="train")
    held = set(load_qrels(dev, split="dev"))
    pseudo = {
        qid: docs[0][0]
        for qid, docs in ranked(read_run(run)).items()
        if docs and qid not in qrels and qid not in held
    }
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    labels = {**qrels, **{qid: {doc: 1} for qid, doc in pseudo.items()}}
    write_qrels(labels, out / "qrels" / "train.tsv")
    texts = load_queries(queries)
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": texts[q]}) + "\n" for q in [*qrels, *pseudo])
    corpus = out / "corpus.jsonl"
    if not corpus.exists():
        corpus.symlink_to((judged / "corpus.jsonl").resolve())
    print(out, len(qrels), "judged queries,", len(pseudo), "pseudo-labelled")


if __name__ == "__main__":
    main(*sys.argv[1:6])
