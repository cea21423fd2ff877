"""A mixed folder: short notes beside mid-length and long documents, queries graded by construction.

    python eval/studies/length_bias/mixed_folder.py [--out runs/length_bias/data/mixed]

Documents (1,800): the short entries of ``faq`` (295 answers, median 156 tokens) and ``pydoc``
(1,188 docstrings, median 99) and the long pages of ``pylib`` (317 reference pages, median
2,317 tokens), ids prefixed by their collection (``faq/``, ``pydoc/``, ``pylib/``), as one
folder of a person's notes, manuals and reports would mix them: 19% of the documents are more
than two windows long (512 tokens), so ``dotcat index`` decides document by document. Queries
(one relevant document each, known by construction; all in the ``test`` split, no ``dev``: a
folder has none, so the fusion stays the default as ``dotcat index`` leaves it):

- ``middle`` and ``end``: for every document more than two windows long (any collection), a
  sentence of its text (8 to 40 words, found in no other document, starting beyond its first
  300 tokens) from its middle (the one nearest half its tokens) and from its end (the last
  one): the query is that sentence, the answer that document;
- ``docstring``: pylib's own queries (dev and test; the first sentence of an object's
  docstring in the sources, the page that documents it relevant, every answer beyond the
  first window, none verbatim);
- ``short``: faq's and pydoc's test queries (their answers mostly short documents): what the
  length bias costs, if anything.

``kinds.json`` gives each query's kind, its document's length in tokens and windows of 256,
and (sentences) the token where the sentence starts. Deterministic for the same collections.
"""

from __future__ import annotations

import bisect
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

SOURCES = ("faq", "pydoc", "pylib")
WINDOW = 256
#: A sentence query starts beyond this token (the first window, its title and a margin).
BEYOND = 300
WORDS = (10, 40)
SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")


def read(name: str) -> list[dict]:
    path = common.COLLECTIONS[name] / "corpus.jsonl"
    return [json.loads(line) for line in path.open(encoding="utf-8")]


def queries_of(name: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """A collection's queries and its qrels by split."""
    root = common.COLLECTIONS[name]
    queries = {}
    for line in (root / "queries.jsonl").open(encoding="utf-8"):
        q = json.loads(line)
        queries[q["_id"]] = q["text"]
    qrels = {}
    for split in ("dev", "test"):
        rows = (root / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]
        qrels[split] = {r.split("\t")[0]: r.split("\t")[1] for r in rows}
    return queries, qrels


def sentences(text: str) -> list[tuple[int, str]]:
    """``(start character, sentence)`` of the prose sentences of ``text``."""
    out = []
    for m in SENTENCE.finditer(text):
        s = m.group().strip()
        words = s.split()
        alpha = sum(w.strip(",;:()\"'").isalpha() for w in words)
        prose = alpha >= 0.7 * len(words) and not s.endswith(":")
        if WORDS[0] <= len(words) <= WORDS[1] and prose:
            out.append((m.start() + (len(m.group()) - len(m.group().lstrip())), s))
    return out


def build(out: Path) -> None:
    from dotcat.index.docstore import document_text
    from dotcat.models import BiEncoder, EncoderConfig

    tokenizer = BiEncoder.load(EncoderConfig(model="default")).tokenizer
    docs = [dict(d, _id=f"{name}/{d['_id']}") for name in SOURCES for d in read(name)]
    found = {d["_id"]: sentences(d["text"]) for d in docs}
    seen = Counter(s for found_in in found.values() for s in set(x for _, x in found_in))
    queries: dict[str, str] = {}
    qrels: dict[str, str] = {}
    kinds: dict[str, dict] = {}
    lengths = {}
    for d in docs:
        whole = document_text(d["title"], d["text"])
        encoded = tokenizer(whole, return_offsets_mapping=True, verbose=False)
        lengths[d["_id"]] = len(encoded["input_ids"])
        if lengths[d["_id"]] <= 2 * WINDOW:
            continue
        shift = len(whole) - len(d["text"])  # the title and its separator come first
        starts = [a for a, b in encoded["offset_mapping"] if b > a]
        usable = [(bisect.bisect_left(starts, c + shift) + 1, s) for c, s in found[d["_id"]]
                  if seen[s] == 1]  # fmt: skip
        usable = [(t, s) for t, s in usable if t >= BEYOND]
        if not usable:
            continue
        middle = min(usable, key=lambda x: abs(x[0] - lengths[d["_id"]] / 2))
        for where, (token, text) in (("middle", middle), ("end", usable[-1])):
            if where == "end" and token == middle[0]:
                continue
            qid = f"{where}-{len(queries)}"
            queries[qid], qrels[qid] = text, d["_id"]
            kinds[qid] = {"kind": where, "token": token}
    for name in ("pylib", "faq", "pydoc"):
        texts, by_split = queries_of(name)
        for split, rels in by_split.items():
            if name != "pylib" and split != "test":
                continue
            for q, doc in rels.items():
                qid = f"{name}-{split}-{q}"
                queries[qid], qrels[qid] = texts[q], f"{name}/{doc}"
                kinds[qid] = {"kind": "docstring" if name == "pylib" else "short"}
    for qid, info in kinds.items():
        info["tokens"] = lengths[qrels[qid]]
        info["windows"] = round(lengths[qrels[qid]] / WINDOW, 2)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"_id": d["_id"], "title": d["title"], "text": d["text"]}) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    rows = ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t1" for q, d in qrels.items())]
    (out / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")
    (out / "kinds.json").write_text(json.dumps(kinds, indent=0) + "\n")
    counts = Counter(k["kind"] for k in kinds.values())
    print(f"{len(docs)} documents, {len(queries)} queries: {dict(counts)}")


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--out", type=Path, default=common.ROOT / "runs/length_bias/data/mixed")
    build(p.parse_args().out)


if __name__ == "__main__":
    main()
