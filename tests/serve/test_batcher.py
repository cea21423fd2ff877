"""The micro-batcher's policy: a steady crowd shares whole batches, a lone client never waits."""

from __future__ import annotations

import asyncio
import threading
import time

from tests.timing import within

from dotcat.serve.batcher import Job, MicroBatcher


class _Recorder:
    """Stands in for the pipeline: answers each query with itself, records batch sizes."""

    def __init__(self, delay: float) -> None:
        self.delay, self.sizes = delay, []
        self.lock = threading.Lock()

    def search_many(self, queries, k, **options):
        with self.lock:
            self.sizes.append(len(queries))
        time.sleep(self.delay)
        return [[f"answer to {q}"] for q in queries]


async def _closed_loop(
    batcher: MicroBatcher, clients: int, rounds: int, pause: float = 0.0
) -> list[tuple]:
    """Each client asks ``rounds`` queries, the next ``pause * c`` seconds after the last is
    answered (client ``c``: as answers travel back over HTTP, the crowd returns staggered)."""

    async def client(c: int) -> list[tuple]:
        answers = []
        for r in range(rounds):
            query = f"client {c} round {r}"
            (hits,) = await batcher.submit(Job([query], k=10))
            answers.append((query, hits))
            await asyncio.sleep(pause * c)
        return answers

    await batcher.start()
    try:
        results = await asyncio.gather(*(client(c) for c in range(clients)))
    finally:
        await batcher.stop()
    return [a for answers in results for a in answers]


def test_a_steady_crowd_is_served_in_whole_batches():
    # Without gathering, 8 clients split into halves that alternate (one runs while the other
    # queues). With it, every batch after the first two holds the whole crowd.
    recorder = _Recorder(delay=0.03)
    batcher = MicroBatcher(recorder, max_batch=64, queue_size=64, window=0.5)
    answers = asyncio.run(_closed_loop(batcher, clients=8, rounds=6, pause=0.004))
    assert all(hits == [f"answer to {query}"] for query, hits in answers)  # nobody else's
    assert len(answers) == 48 and sum(recorder.sizes) == 48
    assert recorder.sizes[2:] and all(size == 8 for size in recorder.sizes[2:])


def test_without_a_window_the_staggered_crowd_splits():
    # The failure the window fixes, shown with the same crowd: more, smaller model calls.
    recorder = _Recorder(delay=0.03)
    batcher = MicroBatcher(recorder, max_batch=64, queue_size=64, window=0.0)
    asyncio.run(_closed_loop(batcher, clients=8, rounds=6, pause=0.004))
    assert sum(recorder.sizes) == 48 and len(recorder.sizes) > 6


def test_a_lone_client_never_waits_for_the_window():
    recorder = _Recorder(delay=0.0)
    batcher = MicroBatcher(recorder, window=10.0)  # a wait would take 10 s per request
    started = time.perf_counter()
    answers = asyncio.run(_closed_loop(batcher, clients=1, rounds=5))
    assert len(answers) == 5 and recorder.sizes == [1] * 5
    assert time.perf_counter() - started < within(5.0)


def test_a_thinning_crowd_costs_one_window_at_most():
    recorder = _Recorder(delay=0.01)
    batcher = MicroBatcher(recorder, window=0.3)

    async def scenario() -> float:
        await batcher.start()
        try:
            await asyncio.gather(*(batcher.submit(Job([f"q{i}"], k=1)) for i in range(6)))
            began = time.perf_counter()
            for i in range(4):  # now alone: the first waits for the crowd of 6, no later one
                await batcher.submit(Job([f"alone {i}"], k=1))
            return time.perf_counter() - began
        finally:
            await batcher.stop()

    seconds = asyncio.run(scenario())
    assert recorder.sizes[-4:] == [1, 1, 1, 1]
    assert 0.3 <= seconds < 0.3 + within(0.6)  # one window, not four
