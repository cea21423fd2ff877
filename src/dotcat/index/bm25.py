"""The BM25 index, with bm25s and PyStemmer: the lexical baseline and first stage.

An index directory holds one beside its FAISS index (``dotcat index --bm25``, in
:data:`dotcat.index.layout.BM25_DIR`) for BM25 and hybrid search;
:func:`dotcat.search.lexical.bm25_search` builds one in memory for a one-off search of a corpus.

Scoring (Robertson and Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond",
Foundations and Trends in IR 3(4), 2009), in the Lucene variant that bm25s calls ``"lucene"``
(Kamphuis et al., "Which BM25 do you mean?", ECIR 2020)::

    score(q, d) = sum_{t in q} idf(t) * tf(t,d) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with tf the term's count in d, ``|d|`` the document's length in (non-stop-word) tokens, avgdl the
mean length, N the number of documents and df the number of documents containing t. A query
term repeated in the query counts once per occurrence, as in Anserini's bag-of-words queries.

Text analysis: lower-cased, split into words by :func:`words` (of two or more characters; CJK
runs as unigrams and bigrams), stop words removed, then stemmed. A document is ``title + " " +
text``, as in Pyserini's BEIR "flat" indexes.

Results: only documents matching at least one query term are returned (as Lucene does), so a
query may get fewer than k results; sorted by score (descending) then document id
(ascending), so equal scores always come out in the same order.

A search reads a saved index without importing bm25s (``load(..., search_only=True)``): the
bm25s package imports SciPy, a third of ``dotcat search``'s start-up (issue 66); a query needs
only the saved vocabulary and score matrix, read by :class:`_QueryTokenizer` and
:class:`_SavedScores` as bm25s reads them. Building, saving and updates use bm25s itself.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import re
import sys
import tempfile
import time
import unicodedata
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import regex
import Stemmer

from dotcat.data.corpus import iter_document_fields
from dotcat.errors import DotcatError, first_line
from dotcat.files import writing
from dotcat.index.config import BM25Config
from dotcat.index.docstore import DocStore
from dotcat.index.layout import BM25_DIR
from dotcat.options import RUN_K
from dotcat.progress import progress_bar
from dotcat.types import Run

if TYPE_CHECKING:
    import bm25s

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2
_MANIFEST = "dotcat_bm25.json"
_DOC_IDS = "doc_ids.json"
_TOKENIZER_VOCAB = "vocab.tokenizer.json"
#: The counts the scores were computed from (optional: an index saved before they were kept
#: has none, and :meth:`BM25Index.count_terms` counts them again from its texts).
_TERM_COUNTS = "counts.tf.npy"
_LENGTHS = "counts.lengths.npy"
#: Scripts written without spaces between words: Han, Hiragana, Katakana (with its long vowel
#: mark ー) and Hangul.
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}ー"
#: Runs of those scripts, and words: letters with their marks (Devanagari's vowel signs,
#: Arabic's harakat), digits and ``_``.
_RUNS = regex.compile(rf"[{_CJK}]+|[^\W{_CJK}]+").findall
#: Whether a word begins in one of them (BM25 reads it as pairs; snippets find it anywhere).
starts_cjk = regex.compile(rf"[{_CJK}]").match
#: The words of an index of format 1 (before :func:`words`): marks split words, CJK unsplit.
_WORDS_1 = re.compile(r"(?u)\b\w\w+\b").findall


def _bm25s():
    """bm25s, imported where it is used (see the module docstring)."""
    import bm25s

    # bm25s sets its own logger to DEBUG when imported, so its debug lines ("Building index
    # from IDs") reach the terminal whatever the application asked for: inherit the app's level.
    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    return bm25s


def words(text: str) -> list[str]:
    """The terms of ``text``: its words of two or more characters, read in Unicode NFKC and
    case-folded ("e" + U+0301 as macOS file names store it, "ﬁ", "Ｓｔｒａßｅ" and "İ" are then
    "é", "fi", "strasse" and "i"), soft hyphens dropped; a run of CJK characters is read as
    each character and each pair of neighbours (the unigrams and bigrams of Lucene's
    ``CJKBigramFilter`` with ``outputUnigrams``), as its words are not spaced apart.
    ASCII text splits as bm25s' own splitter (``\\b\\w\\w+\\b``) splits it."""
    if text.isascii():
        return _WORDS_1(text)
    text = unicodedata.normalize("NFKC", text).casefold().replace("i\u0307", "i")
    out = []
    for run in _RUNS(text.replace("\u00ad", "")):
        if starts_cjk(run):
            out += [*run, *(run[i : i + 2] for i in range(len(run) - 1))]
        elif len(run) > 1:
            out.append(run)
    return out


def words_1(text: str) -> list[str]:
    """The words of a BM25 index of format 1 (:data:`_WORDS_1`, Unicode NFC)."""
    return _WORDS_1(unicodedata.normalize("NFC", text))


@functools.cache
def _say_words_1() -> None:
    logger.warning("this index's BM25 side reads words as dotcat did before 2026-11-30: it finds "
                   "no Chinese, Japanese or Korean word, nor a word with marks (Hindi, Arabic); "
                   "build the index again (--overwrite) to find them")  # fmt: skip


def make_tokenizer(config: BM25Config, splitter=words) -> bm25s.tokenization.Tokenizer:
    """A fresh bm25s tokenizer with ``config``'s stemmer and stop words."""
    stemmer = Stemmer.Stemmer(config.stemmer) if config.stemmer else None
    stopwords = config.to_dict()["stopwords"]  # a list's name, a list of words, or None
    tokenizer = _bm25s().tokenization.Tokenizer
    return tokenizer(lower=True, splitter=splitter, stopwords=stopwords, stemmer=stemmer)


@functools.cache
def bm25s_stopwords(name: str) -> tuple[str, ...]:
    """bm25s' stop-word list ``name`` (``STOPWORDS_EN``, ``STOPWORDS_EN_PLUS``...), read from
    its module without importing the bm25s package (see the module docstring): the module
    holds only the lists."""
    module = sys.modules.get("bm25s.stopwords")
    if module is None:
        package = importlib.util.find_spec("bm25s")  # found, not imported
        path = Path(package.origin).with_name("stopwords.py")
        spec = importlib.util.spec_from_file_location("bm25s_stopwords", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return tuple(getattr(module, name))


class TermCounts:
    """What bm25s computed a score matrix from: each stored score's term count ``tf(t, d)``
    and each document's length ``|d|`` (its tokens, repeats counted; an empty document is one
    empty token, as bm25s counts it).

    ``tf`` is aligned with bm25s' term-major score matrix (the same ``indptr`` and
    ``indices``), so that the matrix can be computed again with other collection statistics
    (:mod:`dotcat.index.bm25_global`: a shard scored as the merged index scores it).
    """

    def __init__(self, tf: np.ndarray, lengths: np.ndarray) -> None:
        self.tf, self.lengths = tf, lengths

    @property
    def tokens(self) -> int:
        """The collection's length in tokens: ``sum_d |d|``."""
        return int(np.sum(self.lengths, dtype=np.int64))

    @classmethod
    def of(cls, token_ids: Sequence[Sequence[int]], scores: Mapping[str, Any]) -> TermCounts | None:
        """The counts of documents given as token ids, laid out as bm25s laid out the score
        matrix ``scores`` it built from them (its own per-document counting and CSC builder,
        fed the same entries in the same order); None, with a warning, where the layout
        differs (a bm25s that builds its matrix otherwise than this code knows)."""
        n_docs, n_vocab = len(token_ids), len(scores["indptr"]) - 1
        bm25s = _bm25s()
        counted = [
            bm25s.scoring._get_counts_from_token_ids(ids, np.float32, np.int32) for ids in token_ids
        ]
        terms = np.concatenate([t for t, _ in counted]) if counted else np.empty(0, np.int32)
        tf = np.concatenate([c for _, c in counted]) if counted else np.empty(0, np.float32)
        docs = np.repeat(np.arange(n_docs, dtype=np.int32), [len(t) for t, _ in counted])
        data, indices, indptr = bm25s.BM25._np_csc(tf, docs, terms, (n_docs, n_vocab))
        same = np.array_equal(indptr, scores["indptr"])
        if not (same and np.array_equal(indices, scores["indices"])):
            logger.warning("bm25s %s lays out its scores in an unknown way: term counts not "
                           "kept (shards of this index cannot be scored together)",
                           bm25s.__version__)  # fmt: skip
            return None
        lengths = np.fromiter((len(ids) for ids in token_ids), np.int32, count=n_docs)
        return cls(np.asarray(data, dtype=np.int32), lengths)

    def save(self, path: Path) -> None:
        np.save(path / _TERM_COUNTS, self.tf, allow_pickle=False)
        np.save(path / _LENGTHS, self.lengths, allow_pickle=False)

    @classmethod
    def load(cls, path: Path, mmap: bool) -> TermCounts | None:
        """The counts saved in ``path``, or None (an index saved before they were kept)."""
        if not (path / _TERM_COUNTS).is_file():
            return None
        mode = "r" if mmap else None
        tf = np.load(path / _TERM_COUNTS, mmap_mode=mode, allow_pickle=False)
        return cls(tf, np.load(path / _LENGTHS, mmap_mode=mode, allow_pickle=False))


class BM25Index:
    """An in-memory BM25 index over a corpus: build (or load) once, search many query batches.

    >>> index = BM25Index.build(corpus)                 # Dataset or iterable of documents
    >>> run = index.search({"q1": "what do cats eat"}, k=100)
    >>> index.save("indexes/scifact-bm25"); BM25Index.load("indexes/scifact-bm25")
    """

    def __init__(
        self,
        retriever: bm25s.BM25,
        tokenizer: bm25s.tokenization.Tokenizer,
        doc_ids: list[str],
        config: BM25Config,
        counts: TermCounts | None = None,
    ) -> None:
        """Internal: use :meth:`build` or :meth:`load`."""
        self._retriever = retriever
        self._tokenizer = tokenizer
        self.doc_ids = doc_ids
        self.config = config
        #: The term counts the scores came from (None: an index saved without them).
        self.counts = counts
        # Each document's position in sorted-id order, the tie-breaker of every ranking.
        order = sorted(range(len(doc_ids)), key=doc_ids.__getitem__)
        self._id_rank = np.empty(len(doc_ids), dtype=np.int64)
        self._id_rank[order] = np.arange(len(doc_ids))

    def __len__(self) -> int:
        return len(self.doc_ids)

    @classmethod
    def build(
        cls, corpus: Iterable[Any], config: BM25Config = BM25Config(), show_progress: bool = True
    ) -> BM25Index:
        """Tokenize the corpus in one streaming pass and build the bm25s index.

        Args:
            corpus: a ``datasets.Dataset`` with columns ``id``, ``title``, ``text`` (read in
                batches), or an iterable of documents: objects with ``id``/``title``/``text``
                attributes (``dotcat.data.Document``) or mappings with ``id`` (or ``_id``),
                ``title`` and ``text``. A missing title or text counts as empty.

        Raises:
            DotcatError: empty corpus, a document without id, or a repeated id.

        Raw texts are not kept: each document's token ids are stored as a compact int32
        array (what bm25s needs to build its sparse score matrix), and its text dropped.
        """
        start = time.perf_counter()
        tokenizer = make_tokenizer(config)
        doc_ids: list[str] = []
        texts = _texts(corpus, doc_ids)
        stream = tokenizer.streaming_tokenize(texts, update_vocab=True, allow_empty=True)
        total = len(corpus) if isinstance(corpus, Sized) else None
        bar = progress_bar(stream, total=total, desc="BM25 tokenize", enabled=show_progress)
        token_ids = [array("i", ids) for ids in bar]
        if not doc_ids:
            raise DotcatError("the corpus has no documents: nothing to index")
        _check_unique(doc_ids)

        retriever = _bm25s().BM25(k1=config.k1, b=config.b, method=config.method)
        retriever.index(
            (token_ids, tokenizer.get_vocab_dict()),
            create_empty_token=True,
            show_progress=False,  # its bars ignore -q; tokenizing (above) is the long part
        )
        counts = TermCounts.of(token_ids, retriever.scores)
        n_tokens = sum(len(t) for t in token_ids)
        del token_ids
        logger.info(
            "BM25 index: %d documents, %d terms, %.1f tokens/document, built in %.1f s",
            len(doc_ids), len(tokenizer.get_vocab_dict()), n_tokens / len(doc_ids),
            time.perf_counter() - start,
        )  # fmt: skip
        return cls(retriever, tokenizer, doc_ids, config, counts)

    def count_terms(self, corpus: Iterable[Any]) -> TermCounts | None:
        """The term counts of this index's rows, from the documents it was built from (as
        :meth:`build` takes them, in row order): for an index saved before :meth:`save` kept
        them.

        Raises:
            DotcatError: the documents do not give this index's vocabulary (other documents).
        """
        tokenizer = make_tokenizer(self.config)
        texts = _texts(corpus, [])
        stream = tokenizer.streaming_tokenize(texts, update_vocab=True, allow_empty=True)
        token_ids = [array("i", ids) for ids in stream]
        if len(token_ids) != len(self) or tokenizer.get_vocab_dict() != self._retriever.vocab_dict:
            raise DotcatError("these texts are not the ones this BM25 index was built from")
        return TermCounts.of(token_ids, self._retriever.scores)

    def search(
        self,
        queries: Mapping[str, str],
        k: int = RUN_K,
        show_progress: bool = True,
        mask: np.ndarray | None = None,
    ) -> Run:
        """Top-k documents per query: qid -> [(docid, score), ...], best first.

        Fewer than k results when fewer documents match; none for a query with no indexed
        term (all stop words or unseen words). Ties: ascending document id. With ``mask`` (a
        boolean per row), only the rows it admits are ranked (a filter's documents: every
        score is the same as without it, the statistics being the whole index's).
        """
        if k < 1:
            raise DotcatError(f"k must be >= 1, got {k}")
        run: Run = {}
        empty = 0
        for qid, text in progress_bar(
            queries.items(), total=len(queries), desc="BM25 search", enabled=show_progress
        ):
            run[str(qid)] = hits = self.search_one(text, k, mask)
            empty += not hits
        if empty:
            logger.warning("%d of %d queries matched no document", empty, len(queries))
        return run

    def search_one(
        self, query: str, k: int = 10, mask: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """Top-k (docid, score) for one query text; see :meth:`search`."""
        ids = self.query_token_ids(query)
        if not ids:
            return []
        scores = self._retriever.get_scores_from_ids(ids)
        return [(self.doc_ids[i], float(scores[i])) for i in self._top_k(scores, k, mask)]

    def pair_scores(self, query: str, doc_ids: Sequence[str]) -> list[float]:
        """BM25 scores of ``query`` against each of ``doc_ids`` (0 where no term matches).

        Raises:
            KeyError: a document id is not in the index.
        """
        rows = [self._positions[d] for d in doc_ids]
        ids = self.query_token_ids(query)
        if not ids:
            return [0.0] * len(rows)
        scores = self._retriever.get_scores_from_ids(ids)
        return [float(scores[r]) for r in rows]

    # -- the statistics query expansion reads (dotcat.search.feedback) ------------------------

    def weighted_scores(self, weights: Mapping[int, float]) -> np.ndarray:
        """Every document's score for a weighted query: ``sum_t w_t * bm25(t, d)``, each
        term's BM25 column read from bm25s' precomputed score matrix (a term weighted by its
        count in the query is plain BM25)."""
        scores = np.zeros(len(self.doc_ids), dtype=np.float64)
        data, indices, indptr = (self._retriever.scores[k] for k in ("data", "indices", "indptr"))
        for term, weight in weights.items():
            lo, hi = indptr[term], indptr[term + 1]
            scores[indices[lo:hi]] += weight * data[lo:hi]  # a column's rows are distinct
        return scores

    def top(
        self, scores: np.ndarray, k: int, mask: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """The k best ``(row, score)`` of a score array, as :meth:`search` ranks them: only
        scores above 0 (of the rows ``mask`` admits), ties by document id."""
        return [(int(i), float(scores[i])) for i in self._top_k(scores, k, mask)]

    @cached_property
    def vocabulary(self) -> list[str]:
        """Each term id's (stemmed) term."""
        terms = [""] * self.document_frequencies.size
        for term, i in self._retriever.vocab_dict.items():
            terms[i] = term
        return terms

    @cached_property
    def document_frequencies(self) -> np.ndarray:
        """df(t) per term id: the number of documents containing it."""
        return np.diff(np.asarray(self._retriever.scores["indptr"])).astype(np.int64)

    def term_frequencies(self, row: int) -> dict[int, float]:
        """A document's terms and their counts ``tf(t, d)``, up to one factor per document.

        bm25s keeps scores, not counts; within one document BM25's length part ``K_d = k1 *
        (1 - b + b * |d| / avgdl)`` is the same for every term, so from a stored score ``s =
        idf(t) * tf / (tf + K_d)`` (ATIRE: times ``k1 + 1``) the ratio ``r = s / idf(t)`` gives
        ``tf = K_d * r / (1 - r)``: proportional to ``r / (1 - r)``, which is returned. With
        ``k1 = 0`` counts leave no trace (``r = 1``): every term counts 1.
        """
        columns, stored = self._by_document[row]
        if self.config.k1 == 0:
            return dict.fromkeys(columns.tolist(), 1.0)
        r = stored / self._idf[columns]
        if self.config.method == "atire":
            r = r / (self.config.k1 + 1)
        r = np.clip(r, 0.0, 1.0 - 1e-12)
        return dict(zip(columns.tolist(), (r / (1.0 - r)).tolist(), strict=True))

    @cached_property
    def _idf(self) -> np.ndarray:
        idf = _bm25s().scoring._select_idf_scorer(self.config.method)
        n = len(self.doc_ids)
        return np.array([idf(int(df), n) for df in self.document_frequencies], dtype=np.float64)

    @cached_property
    def _by_document(self) -> _Rows:
        return _Rows(self._retriever.scores, len(self.doc_ids))

    @cached_property
    def _positions(self) -> dict[str, int]:
        """Each document id's row (built on first use: serving never needs it)."""
        return {d: i for i, d in enumerate(self.doc_ids)}

    def query_token_ids(self, query: str) -> list[int]:
        """The query's term ids in the index vocabulary (unknown terms and stop words dropped)."""
        # update_vocab=False keeps the vocabulary fixed but still maps an unseen word whose
        # stem is indexed ("running" -> "run"); allow_empty=False: no placeholder token.
        if self._tokenizer.splitter is words_1 and not query.isascii():
            _say_words_1()
        stream = self._tokenizer.streaming_tokenize([query], update_vocab=False, allow_empty=False)
        return next(stream)

    def _top_k(self, scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
        candidates = np.flatnonzero(scores > 0 if mask is None else (scores > 0) & mask)
        if candidates.size > k:
            # Keep every document scoring at least the k-th best score, so that ties at the
            # cut are resolved by id below rather than by argpartition's arbitrary order.
            kth = np.partition(scores[candidates], candidates.size - k)[candidates.size - k]
            candidates = candidates[scores[candidates] >= kth]
        order = np.lexsort((self._id_rank[candidates], -scores[candidates]))
        return candidates[order[:k]]

    def save(self, path: str | os.PathLike) -> Path:
        """Save to a new directory (bm25s' own files plus ids, vocabulary and config).

        Written to a temporary sibling directory and renamed into place, so an interrupted
        save leaves no half index. Refuses an existing non-empty directory.

        Raises:
            DiskFullError: no room for it (nothing is left of the save).
        """
        path = Path(path)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise DotcatError(f"{path}: already exists; choose a new directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        with writing(path, remove=[tmp]):  # a failed save leaves nothing, a full disk says so
            self._retriever.save(tmp, show_progress=False)
            self._tokenizer.save_vocab(tmp, _TOKENIZER_VOCAB)
            (tmp / _DOC_IDS).write_text(json.dumps(self.doc_ids, ensure_ascii=False), "utf-8")
            if self.counts is not None:
                self.counts.save(tmp)
            self._write_manifest(tmp)
            if path.exists():
                path.rmdir()  # empty, checked above
            os.replace(tmp, path)
        logger.info("BM25 index saved to %s", path)
        return path

    def _write_manifest(self, path: Path) -> None:
        version = 1 if self._tokenizer.splitter is words_1 else FORMAT_VERSION  # (updated)
        manifest = {"format": "dotcat-bm25", "format_version": version,
                    "bm25s_version": _bm25s().__version__, "n_docs": len(self.doc_ids),
                    "config": self.config.to_dict()}  # fmt: skip
        (path / _MANIFEST).write_text(json.dumps(manifest, indent=2), "utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = False, search_only: bool = False
             ) -> BM25Index:  # fmt: skip
        """Load an index written by :meth:`save`; ``mmap`` memory-maps the score arrays.
        ``search_only``: read what a search needs, without bm25s where the index allows it (stop
        words ``en``, a list or none; each of dotcat's variants keeps all its scores in the saved
        matrix): such an index searches and feeds back as any, and cannot be saved or updated.

        Raises:
            DotcatError: no BM25 index there, another format version, or a damaged file.
        """
        path = Path(path)
        manifest_path = path / _MANIFEST
        if not manifest_path.is_file():
            raise DotcatError(f"{path}: not a dotcat BM25 index (no {_MANIFEST})")
        try:
            manifest = json.loads(manifest_path.read_text("utf-8"))
            version = manifest.get("format_version") if isinstance(manifest, dict) else None
            if version not in (1, FORMAT_VERSION):  # 1: words of :func:`words_1`
                raise DotcatError(
                    f"{path}: BM25 index format {version}, this dotcat reads {FORMAT_VERSION}"
                )
            config = BM25Config(**manifest["config"])
            splitter = words if version == FORMAT_VERSION else words_1
            if manifest.get("n_docs") == 0:
                return EmptyBM25(config)
            stopwords = _QueryTokenizer.stopwords_of(config)
            if search_only and stopwords is not None:
                retriever = _SavedScores(path, mmap)
                tokenizer: Any = _QueryTokenizer(path, config, stopwords, splitter)
            else:
                retriever = _bm25s().BM25.load(path, mmap=mmap, load_corpus=False)
                tokenizer = make_tokenizer(config, splitter)
                tokenizer.load_vocab(path, _TOKENIZER_VOCAB)
            doc_ids = json.loads((path / _DOC_IDS).read_text("utf-8"))
            counts = TermCounts.load(path, mmap)
        except (OSError, ValueError, KeyError, TypeError, EOFError) as e:
            # bm25s reads its arrays and JSON files as they are: a cut or damaged file shows
            # as whatever NumPy or json says, named here (a DotcatError goes on as it is).
            raise DotcatError(
                f"{path}: damaged BM25 index ({first_line(e)}); rebuild the index"
            ) from None
        if len(doc_ids) != manifest["n_docs"]:
            raise DotcatError(f"{path}: {len(doc_ids)} ids for {manifest['n_docs']} documents")
        return cls(retriever, tokenizer, doc_ids, config, counts)


class _SavedScores:
    """bm25s' saved score matrix and vocabulary, read without bm25s: what a search asks of a
    ``bm25s.BM25`` (``scores``, ``vocab_dict``, ``get_scores_from_ids``)."""

    def __init__(self, path: Path, mmap: bool) -> None:
        params = json.loads((path / "params.index.json").read_text("utf-8"))
        mode = "r" if mmap else None
        self.scores: dict[str, Any] = {
            name: np.load(path / f"{name}.csc.index.npy", mmap_mode=mode, allow_pickle=False)
            for name in ("data", "indices", "indptr")
        }
        self.scores["num_docs"] = int(params["num_docs"])
        self.dtype = np.dtype(params["dtype"])
        self._path = path

    @cached_property
    def vocab_dict(self) -> dict[str, int]:
        """term -> column (read on first use: a query does not need it)."""
        return json.loads((self._path / "vocab.index.json").read_text("utf-8"))

    def get_scores_from_ids(self, ids: Sequence[int]) -> np.ndarray:
        """Every document's score for the query's term ids: their columns added term by term
        in the matrix's dtype, as ``bm25s.BM25.get_scores_from_ids`` adds them."""
        data, indices, indptr = (self.scores[k] for k in ("data", "indices", "indptr"))
        ids = np.asarray(ids, dtype=np.int64)
        scores = np.zeros(self.scores["num_docs"], dtype=self.dtype)
        for start, end in zip(indptr[ids], indptr[ids + 1], strict=True):
            np.add.at(scores, indices[start:end], data[start:end])
        return scores


class _QueryTokenizer:
    """bm25s' tokenizer as a search runs it (``streaming_tokenize(update_vocab=False,
    allow_empty=False)``) over a saved vocabulary, without bm25s: lower case, words of two or
    more characters; a word the vocabulary holds is its term, a stop word is dropped, another
    word is stemmed and kept where its stem is a term."""

    def __init__(self, path: Path, config: BM25Config, stopwords: Sequence[str], splitter) -> None:
        vocab = json.loads((path / _TOKENIZER_VOCAB).read_text("utf-8"))
        self.word_to_id, self.stem_to_sid = vocab["word_to_id"], vocab["stem_to_sid"]
        self.stopwords = frozenset(stopwords)
        self.stem = Stemmer.Stemmer(config.stemmer).stemWord if config.stemmer else None
        self.splitter = splitter  # (named as bm25s names its tokenizer's)

    @staticmethod
    def stopwords_of(config: BM25Config) -> tuple[str, ...] | None:
        """The stop words bm25s takes for ``config``'s setting, or None where only bm25s knows
        them (a language other than English)."""
        if config.stopwords is None:
            return ()
        if not isinstance(config.stopwords, str):
            return tuple(config.stopwords)
        return bm25s_stopwords("STOPWORDS_EN") if config.stopwords in ("en", "english") else None

    def streaming_tokenize(self, texts: Iterable[str], **_: Any) -> Iterator[list[int]]:
        """Each text's term ids."""
        for text in texts:
            ids = []
            for word in self.splitter(text.lower()):
                if word in self.word_to_id:
                    ids.append(self.word_to_id[word])
                elif word not in self.stopwords and self.stem is not None:
                    sid = self.stem_to_sid.get(self.stem(word))
                    if sid is not None:
                        ids.append(sid)
            yield ids


class _Rows:
    """bm25s' term-major score matrix turned document-major once (scipy CSR, built on the first
    feedback query: a copy of the matrix in memory, 8 bytes per stored score): a document's
    term ids and stored scores."""

    def __init__(self, matrix: Mapping[str, Any], n_docs: int) -> None:
        from scipy.sparse import csc_matrix

        indptr = np.asarray(matrix["indptr"])
        arrays = (np.asarray(matrix["data"]), np.asarray(matrix["indices"]), indptr)
        self._csr = csc_matrix(arrays, shape=(n_docs, indptr.size - 1)).tocsr()

    def __getitem__(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self._csr.indptr[row], self._csr.indptr[row + 1]
        return self._csr.indices[lo:hi], self._csr.data[lo:hi].astype(np.float64)


class EmptyBM25(BM25Index):
    """The BM25 side of an index whose every document was deleted: it finds nothing (bm25s
    cannot index zero documents); the next ``dotcat add`` builds a real one again."""

    def __init__(self, config: BM25Config) -> None:
        super().__init__(None, make_tokenizer(config), [], config)

    @property
    def vocabulary(self) -> list[str]:
        return []

    @property
    def document_frequencies(self) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)

    def query_token_ids(self, query: str) -> list[int]:
        return []

    def search_one(
        self, query: str, k: int = 10, mask: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        return []

    def weighted_scores(self, weights: Mapping[int, float]) -> np.ndarray:
        return np.zeros(0, dtype=np.float64)

    def save(self, path: str | os.PathLike) -> Path:
        """Its manifest only (``n_docs`` 0): there is nothing else to keep."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with writing(path / _MANIFEST):
            self._write_manifest(path)
        return path


def build_from_docstore(
    docstore: Path, config: BM25Config, show_progress: bool, passages: bool | None = None
) -> BM25Index:
    """A BM25 index over a doc store's rows (:func:`docstore_rows`: its passages unless
    ``passages`` is False, an index splitting document by document reading documents whole).

    BM25's statistics (document frequencies, mean length) are global, so after an update or a merge
    the side index of an index directory is built again from its doc store, never patched or merged.
    """
    with DocStore(docstore) as store:
        if len(store) == 0:  # every document deleted: an index that finds nothing
            return EmptyBM25(config)
        rows = docstore_rows(store, passages)
        return BM25Index.build(rows, config=config, show_progress=show_progress)


def side_entry(n: int, passages: int | None = None) -> dict[str, Any]:
    """The manifest's entry of an index's BM25 side over ``n`` documents; with ``passages``,
    its rows are passages (their ids FAISS ids)."""
    entry: dict[str, Any] = {"dir": BM25_DIR, "config": BM25Config().to_dict(), "documents": n}
    if passages is not None:
        entry["passages"] = passages
    return entry


def docstore_rows(
    store: DocStore, passages: bool | None = None, after: int = -1
) -> Iterator[dict[str, str]]:
    """What BM25 indexes of a doc store: its documents, in position order, or its passages
    (an index built with them, unless ``passages`` is False), in FAISS id order, each row's
    id its FAISS id (as a string) and its text its document's title and the passage's text,
    as the encoder reads it; only those whose position (or FAISS id) is over ``after``."""
    if store.has_passages() if passages is None else passages and store.has_passages():
        for rows in store.iter_passages(after=after):
            for pid, _, title, text in rows:
                yield {"id": str(pid), "title": title, "text": text}
        return
    for rows in store.iter_rows(after=after):
        for _, doc_id, title, text in rows:
            yield {"id": doc_id, "title": title, "text": text}


def _texts(corpus: Iterable[Any], doc_ids: list[str]) -> Iterator[str]:
    """Each document's title and text joined, its id appended to ``doc_ids`` as it goes."""
    for doc_id, title, text in iter_document_fields(corpus):
        doc_ids.append(doc_id)
        yield f"{title} {text}" if title else text


def _check_unique(doc_ids: list[str]) -> None:
    if len(set(doc_ids)) == len(doc_ids):
        return
    seen: set[str] = set()
    repeated: list[str] = []
    for doc_id in doc_ids:
        if doc_id in seen and doc_id not in repeated:
            repeated.append(doc_id)
        seen.add(doc_id)
    raise DotcatError(
        f"corpus has {len(doc_ids) - len(seen)} repeated document ids, first: "
        + ", ".join(repeated[:5])
    )
