"""Live updates of a folder of shards: each document goes to the shard that owns it.

``dotcat add SHARDS CORPUS`` and ``dotcat delete SHARDS ID...`` over a folder of shard
indexes (``dotcat index --shard I/N``) update each shard as
:mod:`dotcat.index.updates` updates one index (encoded with its encoder, atomic, its BM25
side built again), each document in the shard that owns it:

* a document a shard holds is owned by that shard: an upsert replaces it there, a delete
  removes it from there;
* a new document goes to the shard its id hashes to, ``blake2b(id) mod N`` (as
  Elasticsearch routes a document, ``hash(_routing) % number_of_primary_shards``): the same
  shard whoever adds it, whatever the shards hold, and about as many to each.

Each shard's update is atomic; an update of several shards is not one transaction: if it
stops half-way, the shards already updated keep their new documents, and the same ``dotcat
add --upsert`` again completes it. A server over the shards serves what it loaded: restart it
to serve the update (its BM25 statistics are the collection's as loaded).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

from datasets import Dataset

from dotcat.data import CorpusOptions, CorpusStats, load_corpus
from dotcat.data.sources import CorpusSource
from dotcat.errors import DotcatError
from dotcat.index.docstore import DocStore
from dotcat.index.manifest import DOCSTORE_NAME
from dotcat.index.shards import shard_dirs
from dotcat.index.updates import (
    UpdateResult,
    add_dataset,
    delete_documents,
    held_error,
    missing_error,
    recorded_fields,
)

logger = logging.getLogger(__name__)


def home_shard(doc_id: str, shards: int) -> int:
    """The shard a new document goes to: ``blake2b(id) mod shards`` (see the module docstring)."""
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def owners(paths: Sequence[Path], doc_ids: Sequence[str], composed: bool = False) -> dict[str, int]:
    """Which shard holds each of ``doc_ids`` (those no shard holds are left out)."""
    found: dict[str, int] = {}
    for i, path in enumerate(paths):
        with DocStore(path / DOCSTORE_NAME) as store:
            found.update(dict.fromkeys(store.by_ids(list(doc_ids), composed), i))
    return found


def add_to_shards(
    folder: str | Path,
    corpus: CorpusSource,
    *,
    upsert: bool = False,
    corpus_options: CorpusOptions | None = None,
    device: str = "auto",
    precision: str = "auto",
) -> UpdateResult:
    """Add the documents of ``corpus`` to the shards of ``folder``, each to its owner, as
    :func:`~dotcat.index.updates.add_documents` adds them (read once, fields and all).

    Raises:
        DotcatError: an id a shard holds already (unless ``upsert``: replaced there), or any
            problem with the corpus or a shard.
    """
    paths = shard_dirs(Path(folder), required=True)
    stats = CorpusStats()
    options = recorded_fields(paths[0], corpus, corpus_options)
    dataset = load_corpus(corpus, stats=stats, options=options)
    ids = list(dataset["id"])
    held = owners(paths, ids)
    if held and not upsert:
        raise held_error(stats.path, held, folder, "--upsert")
    routed: dict[int, list[int]] = {}
    for row, doc_id in enumerate(ids):
        routed.setdefault(held.get(doc_id, home_shard(doc_id, len(paths))), []).append(row)
    results, runtime = [], {"device": device, "precision": precision}
    for shard, rows in sorted(routed.items()):
        logger.info("%s: %d document(s)", paths[shard].name, len(rows))
        # In memory: a select() of contiguous rows is a view that iter_row_batches reads wrong.
        part = Dataset.from_dict(dataset[rows])
        results.append(add_dataset(paths[shard], part, stats, upsert, runtime))
    return _total(results, paths)


def delete_from_shards(
    folder: str | Path, doc_ids: Sequence[str], *, missing_ok: bool = False
) -> UpdateResult:
    """Delete documents (by id) from the shards of ``folder`` that hold them.

    Raises:
        DotcatError: an id no shard holds (unless ``missing_ok``), or no id given.
    """
    paths = shard_dirs(Path(folder), required=True)
    wanted = sorted(set(doc_ids))
    if not wanted:
        raise DotcatError("delete: no document id given")
    held = owners(paths, wanted, composed=True)
    missing = [i for i in wanted if i not in held]
    if missing and not missing_ok:
        raise missing_error(f"{folder}: no shard holds a document with id", missing, "--missing-ok")
    shards = sorted(set(held.values()))
    results = [delete_documents(paths[n], [i for i, s in held.items() if s == n]) for n in shards]
    return _total(results, paths)


def _total(results: Sequence[UpdateResult], paths: Sequence[Path]) -> UpdateResult:
    """The shards' updates summed; ``documents``: the collection's count afterwards."""
    documents = 0
    for path in paths:
        with DocStore(path / DOCSTORE_NAME) as store:
            documents += len(store)
    return UpdateResult(
        added=sum(r.added for r in results),
        replaced=sum(r.replaced for r in results),
        deleted=sum(r.deleted for r in results),
        documents=documents,
    )
