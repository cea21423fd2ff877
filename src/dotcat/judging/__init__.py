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

from dotcat.judging.agreement import Agreement, agreement, cohen_kappa
from dotcat.judging.config import GRADES, PoolConfig, QrelsConfig, default_store
from dotcat.judging.export import export_beir, judged_qrels, write_qrels
from dotcat.judging.imports import assess_pool, import_qrels
from dotcat.judging.pool import PoolSummary, build_pool, pool_entries
from dotcat.judging.store import Judgment, JudgmentStore, PoolEntry, Topic
from dotcat.judging.topics import read_query_log, read_topics

__all__ = [
    "GRADES",
    "Agreement",
    "Judgment",
    "JudgmentStore",
    "PoolConfig",
    "PoolEntry",
    "PoolSummary",
    "QrelsConfig",
    "Topic",
    "agreement",
    "assess_pool",
    "build_pool",
    "cohen_kappa",
    "default_store",
    "export_beir",
    "import_qrels",
    "judged_qrels",
    "pool_entries",
    "read_query_log",
    "read_topics",
    "write_qrels",
]
