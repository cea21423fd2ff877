"""Your own test collection: pools of several systems' results, judged on the web page, and
the judgements as qrels that ``dotcat eval``, ``experiment`` and ``train`` read.

- :mod:`.config`: :class:`PoolConfig` (depth, systems, runs, order), :class:`QrelsConfig`,
  the grade scale :data:`GRADES`.
- :mod:`.topics`: the queries (a file, or a server's query log).
- :mod:`.pool`: :func:`build_pool`, depth-k pooling as TREC does it, with provenance;
  :mod:`.priority`: the judging order.
- :mod:`.store`: :class:`JudgmentStore`, the SQLite file of topics, pools and judgements.
- :mod:`.agreement`: Cohen's kappa between assessors.
- :mod:`.export`: qrels (TREC, BEIR) and a whole BEIR directory; :mod:`.imports`: qrels in.

>>> store = JudgmentStore("my-index.judgments.sqlite", "my-index", create=True)
>>> build_pool(SearchPipeline("my-index"), store, read_topics("questions.tsv"))
>>> write_qrels(judged_qrels(store), "my-qrels.txt")
"""

from dotcat.exports import lazy_exports

_EXPORTS = {
    "Agreement": "dotcat.judging.agreement",
    "assessor_agreement": "dotcat.judging.agreement",
    "cohen_kappa": "dotcat.judging.agreement",
    "GRADES": "dotcat.judging.config",
    "PoolConfig": "dotcat.judging.config",
    "QrelsConfig": "dotcat.judging.config",
    "default_store": "dotcat.judging.config",
    "export_beir": "dotcat.judging.export",
    "judged_qrels": "dotcat.judging.export",
    "write_qrels": "dotcat.judging.export",
    "assess_pool": "dotcat.judging.imports",
    "import_qrels": "dotcat.judging.imports",
    "PoolSummary": "dotcat.judging.pool",
    "build_pool": "dotcat.judging.pool",
    "pool_entries": "dotcat.judging.pool",
    "Judgment": "dotcat.judging.store",
    "JudgmentStore": "dotcat.judging.store",
    "PoolEntry": "dotcat.judging.store",
    "Topic": "dotcat.judging.store",
    "read_query_log": "dotcat.judging.topics",
    "read_topics": "dotcat.judging.topics",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
