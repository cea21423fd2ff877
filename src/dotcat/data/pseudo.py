"""Pseudo-queries a corpus provides without labels: titles, or sentences cut from the text.

Two weak supervision signals used to pre-train retrievers:

- **title -> body**: a document's title is a short description of its text (used by
  Chang et al., ICLR 2020, "Pre-training Tasks for Embedding-based Large-scale Retrieval");
- **inverse cloze task** (Lee et al., ACL 2019, "Latent Retrieval for Weakly Supervised Open
  Domain Question Answering"): a sentence taken out of a passage is a query whose answer is
  the rest of the passage.

Each pseudo-query is paired with its source document, which holds neither its title nor the
cut sentence (a query copied verbatim into its positive teaches nothing but string matching).
Every document of the pseudo corpus loses its title, so that a positive (no title) and its
negatives look alike; a model trained on them would otherwise learn "no title = relevant".

:func:`write_pseudo_dataset` writes them as a BEIR directory (``corpus.jsonl``,
``queries.jsonl``, ``qrels/train.tsv``) that ``dotcat train`` reads like any other.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dotcat.data._io import jsonl_lines
from dotcat.data.corpus import Document
from dotcat.data.qrels import qrels_lines
from dotcat.data.splits import unit_hash
from dotcat.files import write_text

logger = logging.getLogger(__name__)

#: A title shorter than this (in words) says too little to be a query.
MIN_TITLE_WORDS = 3
#: A cut sentence's length bounds, in words: shorter is not a question, longer is a passage.
MIN_SENTENCE_WORDS, MAX_SENTENCE_WORDS = 5, 40
#: What must remain of a document once its sentence is cut, in words.
MIN_REST_WORDS = 20

# Sentence ends: ., ! or ? then space and an upper-case letter or digit (abbreviations such as
# "e.g. the" stay whole; "Fig. 2" splits, which only shortens a candidate sentence).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")


@dataclass
class PseudoQueries:
    """Pseudo-queries and the corpus they point into.

    Attributes:
        queries: ``(query id, text, document id)`` triples.
        documents: the pseudo corpus, every document of the source, titles removed and each
            cut sentence removed from its own document.
        from_titles, from_sentences: how many queries each signal gave.
        too_short: documents with no usable title and too little text to cut a sentence from.
        duplicates: queries dropped because another document gave the same text.
    """

    queries: list[tuple[str, str, str]] = field(default_factory=list)
    documents: list[Document] = field(default_factory=list)
    from_titles: int = 0
    from_sentences: int = 0
    too_short: int = 0
    duplicates: int = 0

    def summary(self) -> dict[str, int]:
        return {
            "queries": len(self.queries),
            "documents": len(self.documents),
            "from_titles": self.from_titles,
            "from_sentences": self.from_sentences,
            "too_short": self.too_short,
            "duplicates": self.duplicates,
        }


def split_sentences(text: str) -> list[str]:
    """``text`` cut at sentence ends (see ``_SENTENCE_END``), blank pieces dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _normalise(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def cut_sentence(doc: Document, seed: int) -> tuple[str, str] | None:
    """One sentence of ``doc.text`` as a query and the text without it, or None.

    The sentence is drawn among those of a usable length with a hash of the document id and
    the seed, so the same corpus and seed give the same queries on every machine.
    """
    sentences = split_sentences(doc.text)
    counts = Counter(_normalise(s) for s in sentences)
    usable = [
        i
        for i, s in enumerate(sentences)
        if MIN_SENTENCE_WORDS <= len(s.split()) <= MAX_SENTENCE_WORDS
        and counts[_normalise(s)] == 1  # a repeated sentence would stay in its positive
    ]
    if len(sentences) < 2 or not usable:
        return None
    pick = usable[int(unit_hash(seed, doc.id) * len(usable))]
    rest = " ".join(s for i, s in enumerate(sentences) if i != pick)
    return (sentences[pick], rest) if len(rest.split()) >= MIN_REST_WORDS else None


#: Which signal a document's pseudo-query comes from first: its title, or a cut sentence.
PREFER = ("title", "sentence")


def pseudo_queries(
    documents: Iterable[Document],
    max_queries: int | None = None,
    seed: int = 0,
    prefer: str = "title",
) -> PseudoQueries:
    """A pseudo-query for each document that has one: its title or a cut sentence.

    Args:
        documents: the corpus, e.g. :func:`dotcat.data.corpus.iter_corpus`.
        max_queries: keep at most this many queries, drawn by a hash of the document id and
            the seed (so a larger cap keeps every query a smaller one kept); None keeps all.
        seed: changes the cut sentences and the drawn queries.
        prefer: ``title`` (the title where it is usable, else a cut sentence) or ``sentence``
            (a cut sentence where the text has one, else the title).
    """
    if prefer not in PREFER:
        raise ValueError(f"prefer must be one of {PREFER}, got {prefer!r}")
    out = PseudoQueries()
    candidates: list[tuple[str, str, str]] = []
    for doc in documents:
        text, query = doc.text, None
        titled = len(doc.title.split()) >= MIN_TITLE_WORDS
        cut = cut_sentence(doc, seed) if prefer == "sentence" or not titled else None
        if titled and cut is None and len(doc.text.split()) >= MIN_REST_WORDS:
            query = doc.title
            out.from_titles += 1
        elif cut is not None:
            query, text = cut
            out.from_sentences += 1
        else:
            out.too_short += 1
        out.documents.append(Document(doc.id, "", text))
        if query is not None:
            candidates.append((f"pq-{doc.id}", " ".join(query.split()), doc.id))
    # The same text from several documents has no single right answer: drop every copy.
    counts = Counter(_normalise(q[1]) for q in candidates)
    out.queries = [q for q in candidates if counts[_normalise(q[1])] == 1]
    out.duplicates = len(candidates) - len(out.queries)
    if max_queries is not None and len(out.queries) > max_queries:
        out.queries.sort(key=lambda q: unit_hash(seed, "draw", q[2]))
        out.queries = sorted(out.queries[:max_queries], key=lambda q: q[0])
    logger.info("pseudo-queries: %s", out.summary())
    return out


def write_pseudo_dataset(data: PseudoQueries, out_dir: str | Path) -> Path:
    """Write ``data`` as a BEIR directory with a ``train`` split; returns the directory."""
    out = Path(out_dir)
    documents = ({"_id": d.id, "title": "", "text": d.text} for d in data.documents)
    write_text(out / "corpus.jsonl", jsonl_lines(documents))
    queries = ({"_id": qid, "text": text} for qid, text, _ in data.queries)
    write_text(out / "queries.jsonl", jsonl_lines(queries))
    qrels = {qid: {doc_id: 1} for qid, _, doc_id in data.queries}
    write_text(out / "qrels" / "train.tsv", qrels_lines(qrels, "beir"))
    (out / "pseudo.json").write_text(json.dumps(data.summary(), indent=2) + "\n", encoding="utf-8")
    return out
