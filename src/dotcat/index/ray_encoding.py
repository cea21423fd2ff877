"""Distributed document encoding on Ray (``dotcat index --ray``), with Ray Data actors.

The driver (the ``dotcat index`` process) lists the chunks of the build that are not on disk
yet (:meth:`dotcat.index.chunks.ChunkStore.finished`, so an interrupted build resumes) and
makes a Ray Dataset of small descriptors, one per chunk: ``{"chunk", "start", "stop"}`` in
corpus positions. :meth:`ray.data.Dataset.map_batches` runs them through a callable class on
a fixed-size pool of actors (:class:`ray.data.ActorPoolStrategy`; one GPU or one CPU each):
each actor loads the corpus (:func:`dotcat.data.corpus.load_corpus`, cached on disk) and a
:class:`dotcat.models.bi_encoder.BiEncoder` once, then encodes one chunk per call and returns its
vectors. The driver consumes the results as they stream in and alone writes them, chunk by
chunk, to the build's :class:`~dotcat.index.chunks.ChunkStore`; a chunk is durable once its
write returns, whatever happens to the cluster afterwards.

An index with passages (:mod:`dotcat.index.passages`) is encoded the same way, its chunks
being passages: the driver has split the documents already (its doc store says where each
passage lies), so a chunk's descriptor also carries each passage's document row and character
offsets, and the actor cuts the passages out of the documents it reads. Passages never depend
on which actor encodes them.

Every node must see the corpus and the model at the paths the driver uses (a shared file
system, or the same copies), and have dotcat installed.

References: Ray Data ``map_batches`` with a callable class and ``ActorPoolStrategy``
(https://docs.ray.io/en/latest/data/api/doc/ray.data.Dataset.map_batches.html,
https://docs.ray.io/en/latest/data/api/doc/ray.data.ActorPoolStrategy.html) and the batch
inference guide (https://docs.ray.io/en/latest/data/batch_inference.html).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dotcat.data import default_cache_dir, load_corpus
from dotcat.data.corpus import iter_row_batches
from dotcat.errors import DotcatError, first_line
from dotcat.index.chunks import ChunkStore
from dotcat.index.docstore import document_text
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.progress import progress_bar

logger = logging.getLogger(__name__)

#: Seconds to wait for a TCP answer from a cluster address before giving up on it.
CONNECT_TIMEOUT = 5.0
INSTALL_HINT = "pip install 'dotcat[ray]'"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours Ray puts into worker tracebacks
_ERROR_LINE = re.compile(r"^(?!ray\.)[A-Za-z_][\w.]*(?:Error|Exception|Interrupt): .*$", re.M)


def encode_chunks_on_ray(
    corpus: Any,
    rows: tuple[int, int],
    encoder_config: EncoderConfig,
    store: ChunkStore,
    address: str,
    workers: int | None,
    show_progress: bool,
    options: Any = None,
    spans: Callable[[int, int], list[tuple[int, int, int]]] | None = None,
) -> None:
    """Encode the chunks of ``store`` not yet on disk on a Ray cluster, and write them.

    Args:
        corpus: the corpus source as given to ``build_index`` (a path, made absolute for the
            actors; documents given in Python travel to them pickled).
        rows: ``(start, stop)``: the corpus positions the build indexes; chunk ``c`` covers
            positions ``start + lo .. start + hi`` for ``(lo, hi) = store.chunk_range(c)``.
        encoder_config: the encoder each actor loads (the device is set per actor).
        store: the build's chunk store; only this process writes to it.
        address: ``"local"`` (start a Ray on this machine), or a cluster address for
            ``ray.init`` (``"auto"``, ``"host:6379"``, ``"ray://host:10001"``). A Ray
            already initialised in this process is used as it is, whatever the address.
        workers: encoder actors; None: one per GPU of the cluster, else one per CPU.
        options: how the corpus is read (:class:`dotcat.data.sources.CorpusOptions`); the actors
            read it the same way, so their rows are the driver's.
        spans: with passages, ``spans(first, stop)`` gives ``(document position, start,
            stop)`` of the passages with ids ``[first, stop)`` (the store's rows); None: the
            store's rows are the documents.

    Raises:
        DotcatError: Ray is not installed, the cluster cannot be reached or lacks what was
            asked for, or encoding failed on it.
    """
    ray = _import_ray()
    started = _connect(ray, address)
    try:
        path = isinstance(corpus, (str, os.PathLike))  # made absolute: actors run elsewhere
        given = str(Path(corpus).resolve()) if path else corpus
        job = _Job(given, options, rows, encoder_config, workers, spans)
        _encode(ray, job, store, show_progress)
    finally:
        if started:
            ray.shutdown()


def _import_ray() -> Any:
    """The ``ray`` module with Ray Data, or a DotcatError saying how to install it."""
    try:  # an optional extra (dotcat[ray])
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise DotcatError(f"--ray needs Ray Data, which is not installed: {INSTALL_HINT}") from exc
    return ray


def _connect(ray: Any, address: str) -> bool:
    """Join (or start) the cluster; True when this call started Ray (and must shut it down)."""
    if ray.is_initialized():
        logger.info("reusing the Ray runtime already initialised in this process")
        return False
    check_reachable(address)  # (not "local", which has no port)
    try:
        # "local" always starts a Ray on this machine, even if RAY_ADDRESS is set
        ray.init(address=address, include_dashboard=False)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
        raise DotcatError(f"cannot connect to Ray at {address!r}: {first_line(exc)}") from exc
    logger.info("connected to Ray at %s: %s", address, ray.cluster_resources())
    return True


def check_reachable(address: str) -> None:
    """Fail fast on a ``host:port`` nobody answers at (``ray.init`` retries for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" and the like: Ray resolves them itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as exc:
        raise DotcatError(
            f"cannot reach a Ray cluster at {address!r} ({exc.strerror or exc}); "
            "is it running, and is the address host:port (or ray://host:port)?"
        ) from exc


@dataclasses.dataclass(frozen=True)
class _Job:
    """What the actors encode (:func:`encode_chunks_on_ray`'s arguments): the corpus as each
    reads it, its rows, the encoder, the pool's size; and where the passages lie (the
    driver's, read into each chunk's descriptor)."""

    corpus: Any
    options: Any
    rows: tuple[int, int]
    encoder_config: EncoderConfig
    workers: int | None
    spans: Callable[[int, int], list[tuple[int, int, int]]] | None = None


def _encode(ray: Any, job: _Job, store: ChunkStore, show_progress: bool) -> None:
    """Stream the pending chunks through the actor pool and write each result as it comes."""
    done = store.finished(verify=True)
    pending = [c for c in range(store.n_chunks) if c not in done]
    if done:
        logger.warning("%d of %d chunks already encoded and verified", len(done), store.n_chunks)
    initial = sum(store.rows(c) for c in done)
    with progress_bar(
        total=store.n,
        initial=initial,
        desc="encoding documents (Ray)",
        unit="doc",
        enabled=show_progress,
    ) as bar:
        if not pending:
            return
        for chunk, vectors in _run_pool(ray, job, store, pending):
            store.write(chunk, vectors)
            bar.update(len(vectors))


def _run_pool(
    ray: Any, job: _Job, store: ChunkStore, pending: list[int]
) -> Iterator[tuple[int, np.ndarray]]:
    """``(chunk, vectors)`` for every pending chunk, in the order the actors finish them."""
    context = ray.data.DataContext.get_current()  # a dataset copies it when made
    bars, context.enable_progress_bars = context.enable_progress_bars, False  # ours is enough
    try:
        dataset = _pipeline(ray, job, store, pending)
        for row in dataset.iter_rows():
            chunk = int(row["chunk"])
            yield chunk, _checked(row["vectors"], chunk, store)
    except ray.exceptions.RayError as exc:
        # The error behind Ray's wrappers: the last ``module.Type: message`` line of the worker
        # traceback that Ray puts into its exception's text and that is not Ray's own.
        found = _ERROR_LINE.findall(_ANSI.sub("", str(exc)))
        cause = found[-1].strip() if found else first_line(exc)
        raise DotcatError(f"encoding on Ray failed: {cause}") from exc
    finally:
        context.enable_progress_bars = bars


def _pipeline(ray: Any, job: _Job, store: ChunkStore, pending: list[int]) -> Any:
    """The lazy Ray Dataset: chunk descriptors mapped by a fixed pool of encoder actors."""
    use_gpu = _use_gpu(ray, job.encoder_config)
    size = min(_worker_count(ray, job.workers, use_gpu), len(pending))
    kind = "GPU" if use_gpu else "CPU"
    logger.info("encoding %d chunks on Ray with %d %s actors", len(pending), size, kind)
    items = [_descriptor(store, job.rows[0], c, job.spans) for c in pending]
    return _from_items(ray, items).map_batches(
        _ChunkEncoder,
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=size),
        fn_constructor_kwargs={
            "corpus": job.corpus,
            "encoder_config": _actor_config(job.encoder_config, use_gpu),
            # this process's cache where DOTCAT_CACHE sets it (actors here reuse its Arrow
            # copy), else each node's own default
            "cache_dir": str(default_cache_dir()) if os.environ.get("DOTCAT_CACHE") else None,
            "options": job.options,
        },
        **({"num_gpus": 1} if use_gpu else {"num_cpus": 1}),
    )


def _descriptor(
    store: ChunkStore,
    start: int,
    chunk: int,
    spans: Callable[[int, int], list[tuple[int, int, int]]] | None,
) -> dict[str, Any]:
    """A chunk: its corpus rows ``[start, stop)``; with passages, its passages' corpus rows
    and character offsets (and ``start``, ``stop`` the rows they come from)."""
    lo, hi = store.chunk_range(chunk)
    if spans is None:
        return {"chunk": chunk, "start": start + lo, "stop": start + hi}
    found = spans(lo, hi)
    if len(found) != hi - lo:
        raise DotcatError(f"chunk {chunk}: {len(found)} passages found for ids {lo}..{hi}")
    rows = [start + pos for pos, _, _ in found]
    return {
        "chunk": chunk,
        "start": min(rows),
        "stop": max(rows) + 1,
        "rows": rows,
        "begins": [a for _, a, _ in found],
        "ends": [b for _, _, b in found],
    }


def _from_items(ray: Any, items: list[dict[str, int]]) -> Any:
    """One block per chunk, so that every actor of the pool gets chunks of its own."""
    try:
        return ray.data.from_items(items, override_num_blocks=len(items))
    except TypeError:  # Ray < 2.10 named it parallelism
        return ray.data.from_items(items, parallelism=len(items))


def _use_gpu(ray: Any, config: EncoderConfig) -> bool:
    """GPU actors when the cluster has GPUs, unless the encoder was asked to run on CPU."""
    gpus = ray.cluster_resources().get("GPU", 0)
    if config.device.startswith("cuda") and gpus < 1:
        raise DotcatError(f"--device {config.device}: the Ray cluster has no GPU")
    return gpus >= 1 and config.device != "cpu"


def _worker_count(ray: Any, workers: int | None, use_gpu: bool) -> int:
    """The actor pool's size: ``workers``, else one per GPU (or per CPU) of the cluster."""
    kind = "GPU" if use_gpu else "CPU"
    have = int(ray.cluster_resources().get(kind, 0))
    if workers is None:
        if have < 1:
            raise DotcatError(f"the Ray cluster has no {kind} to run encoders on")
        return have
    if workers < 1:
        raise DotcatError(f"--ray-workers {workers}: expected at least 1")
    if workers > have:
        logger.warning(
            "%d Ray workers asked for, the cluster has %d %ss: the others start when some are free",
            workers, have, kind,
        )  # fmt: skip
    return workers


def _actor_config(config: EncoderConfig, use_gpu: bool) -> EncoderConfig:
    """The encoder config an actor loads: its device; on CPU, one thread (one core each)."""
    model = config.model
    if Path(model).expanduser().exists():  # a local path: absolute, for actors elsewhere
        model = str(Path(model).expanduser().resolve())
    if use_gpu:
        return dataclasses.replace(config, model=model, device="cuda")
    return dataclasses.replace(config, model=model, device="cpu", num_threads=1, cpu_workers=1)


def _checked(vectors: Any, chunk: int, store: ChunkStore) -> np.ndarray:
    """An actor's result as float32 ``(rows of chunk, dim)``, or a DotcatError naming it."""
    array = np.asarray(vectors)
    expected = (store.rows(chunk), store.dim)
    if array.shape != expected or array.dtype != np.float32:
        raise DotcatError(
            f"chunk {chunk}: a Ray worker returned {array.dtype} {array.shape}, expected "
            f"float32 {expected} (is the same model at the same path on every node?)"
        )
    return array


class _ChunkEncoder:
    """A Ray Data actor: the corpus and an encoder, loaded once; one chunk per call.

    Args:
        corpus: the corpus source (a path made absolute), read with
            :func:`dotcat.data.corpus.load_corpus`.
        encoder_config: the encoder to load (device and threads already set for this actor).
        cache_dir: the corpus cache root, or None for the default.
        options: how to read the corpus (:class:`dotcat.data.sources.CorpusOptions`), or None.
    """

    def __init__(
        self, corpus: Any, encoder_config: EncoderConfig, cache_dir: str | None, options: Any = None
    ) -> None:
        self.dataset = load_corpus(corpus, cache_dir=cache_dir, options=options)
        self.encoder = BiEncoder.load(encoder_config)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``{"chunk": [c], "vectors": [float32 (rows, dim)]}`` for a batch of one chunk."""
        if len(batch["chunk"]) != 1:
            raise ValueError(f"expected one chunk per call, got {len(batch['chunk'])}")
        start, stop = int(batch["start"][0]), int(batch["stop"][0])
        if "rows" in batch:
            spans = zip(batch["rows"][0], batch["begins"][0], batch["ends"][0], strict=True)
            texts = self.passage_texts(start, stop, spans)
        else:
            texts = self.texts(start, stop)
        vectors = self.encoder.encode_documents(texts)
        return {
            "chunk": np.asarray(batch["chunk"], dtype=np.int64),
            "vectors": np.asarray(vectors, dtype=np.float32)[None],
        }

    def passage_texts(self, start: int, stop: int, spans) -> list[str]:
        """The texts of passages ``(corpus row, start, stop)`` whose documents are corpus rows
        ``[start, stop)``: each the document's title and the passage's characters."""
        titles: list[str] = []
        bodies: list[str] = []
        for _, batch in iter_row_batches(self.dataset, start, stop, batch_size=stop - start):
            titles += batch["title"]
            bodies += batch["text"]
        return [
            document_text(titles[int(row) - start], bodies[int(row) - start][int(a) : int(b)])
            for row, a, b in spans
        ]

    def texts(self, start: int, stop: int) -> list[str]:
        """The texts of corpus rows ``[start, stop)``, streamed as the local build reads them."""
        texts: list[str] = []
        for _, batch in iter_row_batches(self.dataset, start, stop, batch_size=stop - start):
            texts += map(document_text, batch["title"], batch["text"])
        return texts
