"""Batches without false in-batch negatives, resumable, and the loss's false-negative mask.

With in-batch negatives (Karpukhin et al., "Dense Passage Retrieval", EMNLP 2020) every
document of a batch is a negative for every query but its own. If two examples of a batch
share a positive document, or one example's document is relevant to another example's query,
the loss pushes a query away from a relevant document: a false negative (Qu et al.,
"RocketQA", NAACL 2021). :class:`NoDuplicatePositiveBatchSampler` packs batches so that this
does not happen; :func:`batch_false_negatives` masks whatever remains (e.g. the last, small
batches of an epoch, or relevance the sampler was not told about).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from dotcat.errors import DotcatError
from dotcat.losses import false_negative_mask
from dotcat.training.data.examples import TrainingExample, relevant_docs
from dotcat.types import Qrels

logger = logging.getLogger(__name__)


class NoDuplicatePositiveBatchSampler(Sampler[list[int]]):
    """Shuffled batches of example indices with no false in-batch negatives.

    Each epoch the examples are shuffled with ``numpy.random.default_rng([seed, epoch])`` and
    packed greedily: a batch takes the next example (in shuffled order) that does not conflict
    with those already in it; an example that conflicts waits for a later batch, and is tried
    first there. Example ``e`` conflicts with batch ``B`` when

    1. ``e``'s query is already in ``B`` (a query twice in a batch would see its other
       positive as a negative);
    2. a document of ``B`` is relevant to ``e``'s query, or a document of ``e`` is relevant to
       a query of ``B``; in particular two examples never share a positive.

    "Documents" are the positives and, with ``check_negatives=True``, also the hard negatives
    (each example's hard negatives are candidates for every query of the batch in the
    contrastive loss, so one example's positive must not be another's hard negative). This is
    cheap (set look-ups) and rarely delays an example on a real corpus; on a tiny, densely
    judged one, ``check_negatives=False`` packs tighter and leaves those cases to the loss's
    mask (:func:`batch_false_negatives`). "Relevant to a query" means grade > 0 in ``qrels``
    when given, and always includes the query's positives among the examples.

    Every example is in exactly one batch per epoch. All batches are full except possibly the
    last few (when the remaining examples conflict with each other); ``drop_last`` drops every
    batch smaller than ``batch_size``.

    Determinism and resuming: the batches of an epoch depend only on the examples, the seed,
    the epoch and the settings. :meth:`state_dict` records the epoch and how many of its
    batches were handed out; after :meth:`load_state_dict` iteration yields exactly the
    remaining batches. An epoch handed out completely moves on to the next one, and
    :meth:`set_epoch` with a *different* epoch starts that epoch from its first batch (with
    the same epoch it keeps the position, so the usual ``set_epoch(epoch)`` at the top of a
    resumed epoch loop is harmless). Note that a ``DataLoader`` with ``num_workers > 0``
    prefetches batches: the count of batches the *training loop consumed* is then the one to
    store (``state = sampler.state_dict(); state["batches_yielded"] = consumed``).

    Args:
        examples: the training examples (objects with ``qid``, ``positive_id`` and
            ``negative_ids``), indexed as the dataset the ``DataLoader`` reads.
        batch_size: examples per batch (>= 1).
        drop_last: drop batches smaller than ``batch_size``.
        qrels: qid -> docid -> grade, for relevance beyond the examples' own positives.
        check_negatives: also keep hard negatives clear of the batch's relevant documents.

    Use as ``DataLoader(dataset, batch_sampler=sampler, collate_fn=...)``.
    """

    def __init__(
        self,
        examples: Sequence[TrainingExample],
        batch_size: int,
        *,
        seed: int = 0,
        drop_last: bool = False,
        qrels: Qrels | None = None,
        check_negatives: bool = True,
    ) -> None:
        if len(examples) == 0:
            raise DotcatError("no training examples to batch")
        if batch_size < 1:
            raise DotcatError(f"batch size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.check_negatives = bool(check_negatives)
        self._qids = [str(e.qid) for e in examples]
        relevant: dict[str, set[str]] = {}
        for e in examples:
            relevant.setdefault(e.qid, set()).add(e.positive_id)
        if qrels is not None:
            for qid, docs in relevant.items():
                docs |= relevant_docs(qrels.get(qid))
        self._relevant = {qid: frozenset(docs) for qid, docs in relevant.items()}
        self._docs = [
            frozenset((e.positive_id, *e.negative_ids))
            if self.check_negatives
            else frozenset((e.positive_id,))
            for e in examples
        ]
        digest = hashlib.sha256()
        for e in examples:
            digest.update(
                "\x00".join((e.qid, e.positive_id, *e.negative_ids)).encode("utf-8") + b"\x01"
            )
        self._fingerprint = digest.hexdigest()
        self.epoch = 0
        self._yielded = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    # -- packing ---------------------------------------------------------------------------

    def _pack(self, epoch: int) -> list[list[int]]:
        """All batches of ``epoch`` (``drop_last`` applied)."""
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self._qids)).tolist()
        batches: list[list[int]] = []
        deferred: list[int] = []
        pos = 0
        while pos < len(order) or deferred:
            batch = _Batch(self)
            still_deferred: list[int] = []
            for j, i in enumerate(deferred):
                if len(batch.indices) == self.batch_size:
                    still_deferred.extend(deferred[j:])
                    break
                if not batch.try_add(i):
                    still_deferred.append(i)
            deferred = still_deferred
            while len(batch.indices) < self.batch_size and pos < len(order):
                i = order[pos]
                pos += 1
                if not batch.try_add(i):
                    deferred.append(i)
            batches.append(batch.indices)
        if self.drop_last:
            batches = [b for b in batches if len(b) == self.batch_size]
        short = sum(len(b) < self.batch_size for b in batches)
        if short > 1:
            logger.info(
                "epoch %d: %d batches, %d of them smaller than %d (conflicting examples)",
                epoch, len(batches), short, self.batch_size,
            )  # fmt: skip
        self._cache = (epoch, batches)
        return batches

    def batches(self, epoch: int | None = None) -> list[list[int]]:
        """All batches of an epoch (default: the current one), as iteration yields them."""
        return [list(b) for b in self._pack(self.epoch if epoch is None else epoch)]

    # -- Sampler protocol ------------------------------------------------------------------

    def _normalise(self) -> None:
        batches = self._pack(self.epoch)
        if batches and self._yielded >= len(batches):
            self.epoch += 1
            self._yielded = 0

    def __iter__(self) -> Iterator[list[int]]:
        self._normalise()
        batches = self._pack(self.epoch)
        epoch = self.epoch
        while self.epoch == epoch and self._yielded < len(batches):
            batch = batches[self._yielded]
            self._yielded += 1
            yield list(batch)
        if self.epoch == epoch:  # the epoch handed out completely moves on to the next
            self._normalise()

    def __len__(self) -> int:
        """Number of batches in the current epoch (including any already handed out)."""
        self._normalise()
        return len(self._pack(self.epoch))

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch``, from its first batch; a no-op when already in that epoch."""
        if epoch < 0:
            raise DotcatError(f"epoch must be >= 0, got {epoch}")
        if epoch != self.epoch:
            self.epoch = int(epoch)
            self._yielded = 0

    def _settings(self) -> dict[str, Any]:
        """What the batches depend on besides the epoch: a resumed state must match it."""
        return {
            "seed": self.seed,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "check_negatives": self.check_negatives,
            "n_examples": len(self._qids),
            "examples_sha256": self._fingerprint,
        }

    def state_dict(self) -> dict[str, Any]:
        """The position (epoch, batches of it handed out) and what it depends on."""
        self._normalise()
        return {"epoch": self.epoch, "batches_yielded": self._yielded, **self._settings()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict`.

        Raises:
            DotcatError: the state was taken with other examples or settings (the remaining
                batches would not be the same).
        """
        for key, mine in self._settings().items():
            if key in state and state[key] != mine:
                raise DotcatError(
                    f"cannot resume the batch sampler: {key} was {state[key]!r}, now {mine!r} "
                    "(resume with the same examples and settings)"
                )
        epoch, yielded = int(state["epoch"]), int(state["batches_yielded"])
        if epoch < 0 or yielded < 0:
            raise DotcatError(f"invalid sampler state: epoch {epoch}, batches {yielded}")
        self.epoch, self._yielded = epoch, yielded


class _Batch:
    """A batch being packed: its examples, queries, documents and relevant documents."""

    __slots__ = ("docs", "indices", "qids", "relevant", "sampler")

    def __init__(self, sampler: NoDuplicatePositiveBatchSampler) -> None:
        self.sampler = sampler
        self.indices: list[int] = []
        self.qids: set[str] = set()
        self.docs: set[str] = set()
        self.relevant: set[str] = set()

    def try_add(self, i: int) -> bool:
        """Add example ``i`` unless it conflicts with the batch; True if added."""
        s = self.sampler
        q = s._qids[i]
        if q in self.qids or not s._relevant[q].isdisjoint(self.docs):
            return False
        if not s._docs[i].isdisjoint(self.relevant):
            return False
        self.indices.append(i)
        self.qids.add(q)
        self.docs.update(s._docs[i])
        self.relevant.update(s._relevant[q])
        return True


def batch_false_negatives(
    batch_examples: Sequence[TrainingExample], qrels: Qrels | None = None
) -> torch.Tensor:
    """``[B, B + B*n]`` bool mask of the false negatives of a batch, for the contrastive loss:
    :func:`dotcat.losses.contrastive.false_negative_mask` of the documents relevant to each example.

    Columns follow :func:`dotcat.losses.contrastive.contrastive_logits`: the ``B`` positives in
    batch order, then the ``n`` hard negatives of example 0, of example 1, ... Entry
    ``[i, j]`` is True when candidate ``j`` is relevant to query ``i`` (grade > 0 in ``qrels``,
    or a positive of an example of the batch with the same query) but is not query ``i``'s
    target column ``i``; the loss sets those logits to ``-inf`` (Qu et al., RocketQA, 2021).

    Raises:
        ValueError: the examples do not all have the same number of negatives.
    """
    counts = {len(e.negative_ids) for e in batch_examples}
    if len(counts) > 1:
        raise ValueError(
            f"examples of a batch must have equal numbers of negatives, got {sorted(counts)}"
        )
    positives_of: dict[str, set[str]] = {}
    for e in batch_examples:
        positives_of.setdefault(e.qid, set()).add(e.positive_id)
    relevant = [
        positives_of[e.qid] | relevant_docs(qrels.get(e.qid) if qrels else None)
        for e in batch_examples
    ]
    return false_negative_mask(
        relevant,
        [e.positive_id for e in batch_examples],
        [list(e.negative_ids) for e in batch_examples],
    )
