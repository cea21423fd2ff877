"""A BEIR directory made from separate files: a corpus, a queries file and a qrels file.

What reads a benchmark as one directory (``dotcat experiment``) reads one's own data through
:func:`beir_view`: the corpus (any source: a dotcat index, a corpus file, a folder of files),
the queries and the qrels written once as ``corpus.jsonl``, ``queries.jsonl`` and
``qrels/<split>.tsv`` in dotcat's cache (``views/``), keyed by what they were made from, and
reused while none of the three changes. Like any cache entry, it can be deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from dotcat.cache import cache_root
from dotcat.data._io import jsonl_lines
from dotcat.data.corpus import iter_corpus
from dotcat.data.qrels import find_qrels_file, load_qrels, qrels_lines
from dotcat.data.queries import find_queries_file, load_queries
from dotcat.data.sources import open_source
from dotcat.files import atomic_dir, write_text

logger = logging.getLogger(__name__)
_MARKER = "view.json"


def _stat(path: Path) -> list:
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


def beir_view(
    corpus: str | Path, queries: str | Path, qrels: str | Path, split: str = "test"
) -> Path:
    """The cached BEIR directory of ``corpus`` with ``queries`` and ``qrels`` as ``split``
    (module docstring), written now unless an up-to-date one is there.

    Raises:
        DataFormatError: as the readers of the three.
    """
    root = cache_root() / "views"
    name = Path(str(corpus)).name or "corpus"
    # What the view depends on: the corpus's identity (a folder's listing, a file's size and
    # time), the queries and qrels files' sizes and times, the split's name.
    identity = open_source(corpus).identity()
    parts = [identity, _stat(find_queries_file(queries)), _stat(find_qrels_file(qrels)), split]
    key = hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]
    target = root / f"{name}-{key}"
    if (target / _MARKER).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    judged = load_qrels(qrels)  # read first: a bad file fails before the corpus is copied
    topics = load_queries(queries)

    def fill(work: Path) -> None:
        documents = ({"_id": d.id, "title": d.title, "text": d.text} for d in iter_corpus(corpus))
        write_text(work / "corpus.jsonl", jsonl_lines(documents))
        asked = ({"_id": qid, "text": text} for qid, text in topics.items())
        write_text(work / "queries.jsonl", jsonl_lines(asked))
        write_text(work / "qrels" / f"{split}.tsv", qrels_lines(judged, "beir"))
        made_from = {"corpus": str(corpus), "queries": str(queries), "qrels": str(qrels),
                     "split": split}  # fmt: skip
        (work / _MARKER).write_text(json.dumps(made_from, indent=1), encoding="utf-8")

    atomic_dir(target, fill, unique=True)  # (two processes may make one view at once)
    logger.info("%s: a BEIR directory of %s, %s and %s", target, corpus, queries, qrels)
    return target
