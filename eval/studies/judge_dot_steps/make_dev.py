"""Dev folders for the judge loop's small-data study: queries of a split that the loop did not
judge (SciFact: ``train`` less the 50 judged; pylib: ``dev`` less the 50 judged), at most
``n`` (seeded), as a BEIR folder whose ``qrels/dev.tsv`` names them. Test queries are not read.

    python make_dev.py   # paths as on the machine the study ran on
"""

import csv
import random
from pathlib import Path


def rows(path):
    """A TSV file's rows (a qrels file's header is the first)."""
    with open(path, encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t"))


def make(name, qrels, judged, queries, corpus, n):
    """Folder ``name``: up to ``n`` queries of ``qrels`` not in the ``judged`` TSV."""
    out = Path(name)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    skip = {r[0] for r in rows(judged)}
    rs = [r for r in rows(qrels)[1:] if r[0] not in skip]
    qids = sorted({r[0] for r in rs})
    random.Random(7).shuffle(qids)
    keep = set(qids[:n])
    with open(out / "qrels" / "dev.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for r in rs:
            if r[0] in keep:
                f.write("\t".join(r) + "\n")
    for src in (queries, corpus):
        dst = out / Path(src).name
        if not dst.exists():
            dst.symlink_to(Path(src).resolve())
    print(name, len(keep), "dev queries")


make(
    "scifact-dev",
    "/work/main/data/scifact/qrels/train.tsv",
    "/work/wt/judge/runs/judge-loop/scifact/train-queries.tsv",
    "/work/main/data/scifact/queries.jsonl.gz",
    "/work/main/data/scifact/corpus.jsonl.gz",
    200,
)
make(
    "pylib-dev",
    "/work/main/runs/collections/pylib/qrels/dev.tsv",
    "/work/wt/judge/runs/judge-loop/pylib/train-queries.tsv",
    "/work/main/runs/collections/pylib/queries.jsonl",
    "/work/main/runs/collections/pylib/corpus.jsonl",
    200,
)
