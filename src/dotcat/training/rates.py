"""How fast this machine trains and encodes: the rates ``dotcat adapt`` plans its budget with.

A training step here is what ``dotcat train dot`` does per batch
(:func:`dotcat.training.recipes.dot.backward_batch`: the queries, their positives and hard
negatives, forward and backward, GradCache when a chunk is set), plus the AdamW update, at the
batch size the run will train with. The first batch, of that size too, is not timed: it
creates the kernels and buffers of the run's shapes, and a smaller warm-up leaves that cost in
the timed batches (the rate then under-estimates the run's). Documents/s is the model encoding
the sampled examples' documents, the work of dense mining; pairs/s, a teacher cross-encoder
scoring pairs, the work of distillation's teacher.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch

from dotcat.index import document_text
from dotcat.losses import LossConfig
from dotcat.models import resolve_model
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.models.runtime import resolve_device
from dotcat.training.data.examples import TrainingExample
from dotcat.training.model import TrainableBiEncoder
from dotcat.training.recipe import param_groups, resolve_bf16
from dotcat.training.recipes.dot import backward_batch

logger = logging.getLogger(__name__)

#: Timed training batches (after one untimed warm-up batch).
TIMED_BATCHES = 2
#: Documents encoded to time encoding.
ENCODE_SAMPLE = 64


def measure_rates(
    data_dir: Path,
    model: str,
    *,
    batch_size: int = 16,
    chunk_size: int | None = 16,
    max_length: int = 256,
    query_max_length: int = 64,
    bf16: str = "auto",
    device: str = "auto",
    negatives: int = 1,
    warmup: int | None = None,
) -> dict[str, float]:
    """``examples_per_second`` of training and ``documents_per_second`` of encoding.

    Args:
        batch_size: the run's batch size (examples per optimizer step).
        data_dir: a BEIR dir with a ``train`` split (the pseudo dataset).
        model: the BERT_DOT to train (directory or hub name).
        negatives: hard negatives per example, as the training will have them (each is one
            more document forward and backward).
        warmup: examples in the untimed first batch; None: a whole batch.
    """
    first = batch_size if warmup is None else max(1, warmup)
    examples, docs = _sample_examples(data_dir, first + TIMED_BATCHES * batch_size, negatives)
    target = resolve_device(device)
    encoder = TrainableBiEncoder.from_pretrained(resolve_model(model), max_length=max_length)
    encoder.to(target)
    encoder.freeze_unused_parameters()
    encoder.train()
    use_bf16 = resolve_bf16(bf16, target)
    loss = LossConfig.for_model("contrastive", encoder.similarity, None, 0.1)
    optimizer = torch.optim.AdamW(param_groups(encoder, 0.01), lr=1e-12)  # timing only

    def step(batch) -> None:
        _backward(encoder, batch, docs, loss, chunk_size, query_max_length, use_bf16)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    rest = examples[first:]
    batches = [examples[:first]] + [
        rest[i : i + batch_size] for i in range(0, len(rest), batch_size)
    ]
    step(batches[0])  # warm-up, untimed
    timed = batches[1:] or batches  # a sample smaller than two batches: time the first again
    started = time.perf_counter()
    for batch in timed:
        step(batch)
    examples_per_second = sum(map(len, timed)) / (time.perf_counter() - started)

    sample = list(docs.values())[:ENCODE_SAMPLE]
    started = time.perf_counter()
    encoder.encode(encoder.document_texts(sample), bf16=use_bf16)
    documents_per_second = len(sample) / (time.perf_counter() - started)
    rates = {
        "examples_per_second": round(examples_per_second, 3),
        "documents_per_second": round(documents_per_second, 3),
        "batch_size": batch_size,
        "bf16": use_bf16,
        "negatives": negatives,
    }
    logger.info("calibration: %s", rates)
    return rates


def _backward(encoder, batch, docs, loss, chunk_size, query_max_length, bf16) -> None:
    backward_batch(lambda texts, n: encoder(encoder.tokenize(texts, n)), batch, docs, loss,
                   query_max_length=query_max_length, max_length=encoder.max_length,
                   chunk_size=chunk_size, bf16=bf16, device_type=encoder.device.type)  # fmt: skip


def _sample_examples(data_dir: Path, n: int, negatives: int = 1):
    """``n`` training examples of ``data_dir`` (each with the next ``negatives`` examples'
    positives as its hard negatives) and the texts of their documents."""
    data_dir = Path(data_dir)
    queries = {}
    with open(data_dir / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            queries[row["_id"]] = row["text"]
            if len(queries) >= n:
                break
    pairs = []
    with open(data_dir / "qrels" / "train.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, doc_id, _ = line.rstrip("\n").split("\t")
            if qid in queries:
                pairs.append((qid, doc_id))
    wanted = {doc for _, doc in pairs}
    docs = {}
    with open(data_dir / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row["_id"] in wanted:
                docs[row["_id"]] = document_text(row.get("title", ""), row["text"])
    examples = [
        TrainingExample(
            qid,
            queries[qid],
            doc,
            tuple(pairs[(i + j) % len(pairs)][1] for j in range(1, negatives + 1)),
        )
        for i, (qid, doc) in enumerate(pairs)
    ]
    return examples, docs


#: Pairs scored to time a teacher cross-encoder (after an untimed warm-up of a few).
TEACHER_SAMPLE = 48


def measure_teacher_rate(
    data_dir: Path, teacher: str, *, precision: str = "auto", device: str = "auto"
) -> float:
    """Pairs/s of a teacher cross-encoder scoring (query, document) pairs of ``data_dir``, at
    the precision distillation scores with (an int8 export, if it is made here, is untimed)."""
    examples, docs = _sample_examples(data_dir, TEACHER_SAMPLE + 4)
    queries = [e.query for e in examples]
    texts = [docs[e.negative_ids[0]] for e in examples]  # a mix of right and wrong pairs
    ce = CrossEncoder.load(CrossEncoderConfig(model=teacher, device=device, precision=precision))
    ce.score(queries[:4], texts[:4])  # warm-up, untimed
    sample = slice(4, 4 + TEACHER_SAMPLE)
    started = time.perf_counter()
    ce.score(queries[sample], texts[sample])
    rate = len(queries[sample]) / (time.perf_counter() - started)
    logger.info("calibration: teacher %s scores %.1f pairs/s (%s)", teacher, rate, ce.precision)
    return rate
