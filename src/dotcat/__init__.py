"""dotcat: neural search with a BERT_DOT bi-encoder, FAISS, BM25 and a BERT_CAT re-ranker.

The public API, as the command line uses it (same defaults: ``dotcat.build_and_tune`` builds
BM25 beside the dense index and chooses the hybrid fusion on the data's dev queries as
``dotcat index`` does, and a :class:`SearchPipeline` searches hybrid where the index has BM25,
as ``dotcat search`` does)::

    import dotcat

    dotcat.build_and_tune("my-docs/", "my-index")     # a folder, a corpus file, a BEIR dir
    pipeline = dotcat.SearchPipeline("my-index")       # rerank="model" adds a cross-encoder
    for hit in pipeline.search("how do I reset my password", k=5):
        print(hit)

Indexing and search:

- :func:`build_and_tune`: a corpus into an index directory (FAISS + BM25 + documents), with
  the hybrid fusion chosen on the data's dev queries where it has them; returns what it
  built. :func:`build_index` builds the same directory without choosing the fusion (its
  hybrid fuses linearly, dense weight 0.5).
- :class:`SearchPipeline`: queries in, :class:`Hit` lists out (``search``, ``search_many``) or
  a TREC run's content (``run``); first stage dense, BM25 or hybrid, then optional re-ranking.
- :class:`Hit`: one result (rank, id, score and its ``score_kind``, title, text).
- :class:`IndexConfig`, :class:`PipelineConfig`: how to build, how to search;
  :class:`PassageConfig`: how long documents are split into passages (``IndexConfig(passages=
  ...)``; ``PipelineConfig(aggregation=...)`` ranks documents from them).

Models, shaped like sentence-transformers':

- :class:`BiEncoder`: BERT_DOT; ``BiEncoder.load(model).encode(texts)`` (``encode_queries``,
  ``encode_documents`` add the model's prefixes).
- :class:`CrossEncoder`: BERT_CAT; ``CrossEncoder.load(model).rank(query, documents)``,
  ``predict(pairs)``.
- :class:`EncoderConfig`, :class:`CrossEncoderConfig`: their settings.
- :func:`train` with :class:`DotConfig`, :class:`CatConfig` or :class:`DistillConfig`: train a
  bi-encoder or a cross-encoder on your relevance data (``dotcat train``).

Data and evaluation:

- :class:`Document`, :class:`CorpusOptions`: a corpus' documents and how to read a corpus
  (record field names, a folder's files).
- :func:`load_queries`, :func:`load_qrels`, :func:`read_run`, :func:`write_run`: BEIR and TREC
  files.
- :func:`evaluate`: a run and qrels in, ir-measures' measures out (an :class:`EvalReport`).
- :class:`DotcatError`: what every problem with the input raises, with one clear line.

``import dotcat`` loads none of these (PEP 562): torch, FAISS and transformers load when a name
that needs them is first used, so a program that only reads runs starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dotcat.exports import lazy_exports
from dotcat.version import __version__

_EXPORTS = {
    "build_and_tune": "dotcat.tuning",
    "build_index": "dotcat.index.build",
    "SearchPipeline": "dotcat.search.pipeline",
    "Hit": "dotcat.search.hits",
    "IndexConfig": "dotcat.index.config",
    "PassageConfig": "dotcat.index.passages",
    "PipelineConfig": "dotcat.search.config",
    "BiEncoder": "dotcat.models.bi_encoder",
    "CrossEncoder": "dotcat.models.cross_encoder",
    "EncoderConfig": "dotcat.models.config",
    "CrossEncoderConfig": "dotcat.models.config",
    "train": "dotcat.training.run",
    "DotConfig": "dotcat.training.config",
    "CatConfig": "dotcat.training.config",
    "DistillConfig": "dotcat.training.config",
    "Document": "dotcat.data.corpus",
    "CorpusOptions": "dotcat.data.sources",
    "load_queries": "dotcat.data.queries",
    "load_qrels": "dotcat.data.qrels",
    "read_run": "dotcat.data.runs",
    "write_run": "dotcat.data.runs",
    "evaluate": "dotcat.evaluation.metrics",
    "EvalReport": "dotcat.evaluation.metrics",
    "DotcatError": "dotcat.errors",
}
__all__ = ["__version__", *sorted(_EXPORTS)]  # the one list: _EXPORTS
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and editors see (tests/test_api.py keeps it whole)
    from dotcat.data.corpus import Document
    from dotcat.data.qrels import load_qrels
    from dotcat.data.queries import load_queries
    from dotcat.data.runs import read_run, write_run
    from dotcat.data.sources import CorpusOptions
    from dotcat.errors import DotcatError
    from dotcat.evaluation.metrics import EvalReport, evaluate
    from dotcat.index.build import build_index
    from dotcat.index.config import IndexConfig
    from dotcat.index.passages import PassageConfig
    from dotcat.models.bi_encoder import BiEncoder
    from dotcat.models.config import CrossEncoderConfig, EncoderConfig
    from dotcat.models.cross_encoder import CrossEncoder
    from dotcat.search.config import PipelineConfig
    from dotcat.search.hits import Hit
    from dotcat.search.pipeline import SearchPipeline
    from dotcat.training.config import CatConfig, DistillConfig, DotConfig
    from dotcat.training.run import train
    from dotcat.tuning import build_and_tune
