"""Micro-batching: concurrent requests share one encoder call, one FAISS search, one re-ranking.

Requests go into a bounded queue. One loop takes whatever is waiting (up to ``max_batch`` queries),
groups it by the options that change the work (first stage, re-ranking, depth, k), and runs each
group as one :meth:`dotcat.search.pipeline.SearchPipeline.search_many` call in a worker thread.
While that call runs, new requests queue up and form the next batch: with one client a request is
answered at once, with many the batches grow and throughput grows with them (the model's cost per
query falls with batch size, and only one call at a time uses the cores).

Taking only what is waiting splits a steady crowd in two: while a batch of half the clients runs,
the other half queues up and becomes the next batch, whose clients come back while the first half's
batch runs, and so on; every call serves half the crowd at the price of nearly the whole. So when a
batch is done the loop counts the crowd, the requests it just answered (their clients are likely to
ask again) plus those that queued up meanwhile, and while fewer are waiting it gives the missing
ones up to ``window`` seconds to arrive. A lone client is never kept waiting (its crowd is itself);
a crowd that thins out costs one window at most, after which the count drops.

A full queue refuses at once (:class:`QueueFull`, the server's 503 with ``Retry-After``);
a request whose caller gave up (time limit) is dropped before its batch runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """The request queue is at its bound: the client should retry later."""


@dataclass
class Job:
    """One request: its queries, how many results, the options that change the work (``fetch``
    results are searched for: more than ``k`` where facets are counted over them)."""

    queries: list[str]
    k: int
    first_stage: str | None = None
    rerank: bool | None = None
    depth: int | None = None
    filter: str | None = None
    fetch: int = 0
    future: asyncio.Future = field(default=None, repr=False)  # type: ignore[assignment]
    batch_queries: int = 0  # queries in the model call that served it (for the access log)

    @property
    def key(self) -> tuple:
        # k too: a hybrid first stage fetches max(k, fusion depth) candidates per side, so a
        # deeper request could reorder a shallower one's top; one call per k keeps every
        # answer identical to the same query asked alone.
        return (self.first_stage, self.rerank, self.depth, max(self.k, self.fetch), self.filter)


class MicroBatcher:
    """Runs :class:`Job` s through a pipeline in batches (see the module docstring).

    Args:
        pipeline: a :class:`dotcat.search.pipeline.SearchPipeline`.
        max_batch: most queries per model call.
        queue_size: most requests waiting; one more raises :class:`QueueFull`.
        window: the longest wait, after a batch's first request, for as many requests as the
            last batch served (see the module docstring; 0: take what is waiting and go).
    """

    def __init__(
        self, pipeline: Any, max_batch: int = 64, queue_size: int = 64, window: float = 0.005
    ) -> None:
        self.pipeline = pipeline
        self.max_batch = max_batch
        self.window = window
        self._queue: asyncio.Queue[Job] = asyncio.Queue(maxsize=queue_size)
        # One worker: the model work of a batch already uses every core.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dotcat-batch")
        self._task: asyncio.Task | None = None
        self.batches = 0
        self.queries = 0
        self._expected = 1  # the crowd counted after the last batch: how many to wait for

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="dotcat-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=True, cancel_futures=True)

    def submit(self, job: Job) -> asyncio.Future:
        """Queue a job; its future resolves to one list of hits per query.

        Raises:
            QueueFull: the queue is at its bound.
        """
        job.future = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            raise QueueFull from None
        return job.future

    async def _loop(self) -> None:
        while True:
            batch = await self._next_batch()
            groups: dict[tuple, list[Job]] = defaultdict(list)
            for job in batch:
                groups[job.key].append(job)
            for jobs in groups.values():
                await self._run_group(jobs)
            # The crowd: the clients just answered (they are likely to ask again) and those
            # who queued up meanwhile.
            self._expected = max(1, len(batch) + self._queue.qsize())

    async def _next_batch(self) -> list[Job]:
        """The waiting jobs (at least one), up to ``max_batch`` queries, and while fewer than
        the crowd counted after the last batch have come, those arriving within ``window``;
        cancelled ones dropped."""
        batch = [await self._queue.get()]
        size = len(batch[0].queries)
        deadline = time.perf_counter() + self.window
        while size < self.max_batch:
            try:
                job = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - time.perf_counter()
                if remaining <= 0 or len(batch) >= self._expected:
                    break
                try:
                    job = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            batch.append(job)
            size += len(job.queries)
        return [job for job in batch if not job.future.done()]

    async def _run_group(self, jobs: list[Job]) -> None:
        first = jobs[0]  # (a group holds a job at least)
        texts = [q for job in jobs for q in job.queries]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self._executor, lambda: self.pipeline.search_many(
                texts, max(first.k, first.fetch), first_stage=first.first_stage,
                rerank=first.rerank, depth=first.depth, filter=first.filter))  # fmt: skip
        except Exception as e:  # noqa: BLE001 - every waiting request gets the error
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(e)
            return
        self.batches += 1
        self.queries += len(texts)
        start = 0
        for job in jobs:
            hits = results[start : start + len(job.queries)]
            start += len(job.queries)
            job.batch_queries = len(texts)
            if not job.future.done():
                job.future.set_result(hits)
