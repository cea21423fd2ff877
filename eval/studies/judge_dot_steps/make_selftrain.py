"""Self-training data for the judge loop's small-data study: the judged queries' own qrels plus,
for every other query of a split (text only, as a query log would give them), the zero-shot
hybrid's top-ranked document as a positive (grade 1). Queries of a held-out dev folder are left
out, so dev stays unseen. Test queries are not read.

    python make_selftrain.py JUDGED RUN QUERIES DEV OUT
    # JUDGED: the loop's `dotcat judge export` folder (qrels/train.tsv, corpus.jsonl)
    # RUN: `dotcat search LOOP/index --queries DATA --split train --output RUN`
    # QUERIES: the collection's queries file; DEV: make_dev.py's folder; OUT: the new folder
"""

import csv
import gzip
import json
import sys
from pathlib import Path


def tsv(path):
    """A qrels file's rows as dicts."""
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def top1(run):
    """Each query's first document in a TREC run."""
    first = {}
    with open(run, encoding="utf-8") as f:
        for line in f:
            qid, _, doc, rank, *_ = line.split()
            if int(rank) == 1:
                first[qid] = doc
    return first


def main(judged, run, queries, dev, out):
    judged, out = Path(judged), Path(out)
    rows = tsv(judged / "qrels" / "train.tsv")
    held = {r["query-id"] for r in tsv(Path(dev) / "qrels" / "dev.tsv")}
    have = {r["query-id"] for r in rows}
    pseudo = {q: d for q, d in top1(run).items() if q not in have and q not in held}
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "qrels" / "train.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{r['query-id']}\t{r['corpus-id']}\t{r['score']}\n" for r in rows)
        f.writelines(f"{q}\t{d}\t1\n" for q, d in pseudo.items())
    keep = have | set(pseudo)
    opener = gzip.open if str(queries).endswith(".gz") else open
    with opener(queries, "rt", encoding="utf-8") as f, open(out / "queries.jsonl", "w") as g:
        g.writelines(line for line in f if json.loads(line)["_id"] in keep)
    corpus = out / "corpus.jsonl"
    if not corpus.exists():
        corpus.symlink_to((judged / "corpus.jsonl").resolve())
    print(out, len(have), "judged queries,", len(pseudo), "pseudo-labelled")


if __name__ == "__main__":
    main(*sys.argv[1:6])
