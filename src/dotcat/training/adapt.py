"""``dotcat adapt``: a BERT_DOT adapted to a corpus without relevance labels.

GPL (Wang et al., NAACL 2022, "GPL: Generative Pseudo Labeling for Unsupervised Domain
Adaptation of Dense Retrieval") adapts a dense retriever to an unlabeled corpus with generated
queries, mined negatives and a cross-encoder's labels. No query generator can be downloaded
here, but a corpus carries its own weak queries: titles and sentences cut out of the text
(:mod:`dotcat.data.pseudo`: title -> body, Chang et al. ICLR 2020; the inverse cloze task,
Lee et al. ACL 2019). Each is paired with its source document, and ``dotcat train dot``'s loop
trains on them contrastively (InfoNCE over in-batch and mined hard negatives).

The steps, each recorded in ``OUT/dotcat_adapt.json`` with its time, each resumable:

1. **pseudo-queries** from the whole corpus (de-duplicated; documents too short counted);
2. **calibration**: a few training batches and a document-encoding batch timed on this machine;
3. **plan**: how many pseudo-queries the time budget allows (``budget - elapsed - mining``
   at the measured examples/s), drawn deterministically; dense mining is skipped, and said so,
   when encoding the corpus would take more than a third of the budget;
4. **negatives**: BM25 and the base model's own top ranks (window 10-100, as ``train dot``
   mines them), the two lists interleaved so a sampled negative comes from either;
5. **training**: one epoch of ``train dot`` on the planned queries, checkpointed, written to
   ``OUT`` as a sentence-transformers model that ``dotcat index --model OUT`` takes. With a
   ``teacher`` cross-encoder it is GPL's recipe instead: ``train distill`` scores every
   (pseudo-query, document) pair once with the teacher (cached, resumable) and trains on the
   score margins (Margin-MSE, Hofstätter et al. 2020), so a pseudo-query whose mined
   "negative" is in fact relevant teaches a small margin rather than a wrong label; the
   teacher's time per pair is calibrated and planned for like the training's.

The pseudo corpus drops titles (:mod:`dotcat.data.pseudo`), so the model never learns that an
untitled document is the answer; the adapted model indexes the real corpus, titles included.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from dotcat.data import load_corpus, load_qrels, load_queries
from dotcat.data.corpus import iter_corpus
from dotcat.data.pseudo import pseudo_queries, write_pseudo_dataset
from dotcat.data.splits import unit_hash
from dotcat.errors import DotcatError
from dotcat.files import atomic_dir, read_json_or_none, remove_tree, write_json
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.models.resolve import TRAINING_RECORD
from dotcat.training.config import (
    MIN_ADAPT_QUERIES,
    AdaptConfig,
    DistillConfig,
    DotConfig,
    is_lexical,
)
from dotcat.training.data.mining import mine_bm25_negatives, mine_dense_negatives, save_negatives
from dotcat.training.data.pools import interleave_ranks
from dotcat.training.rates import measure_rates, measure_teacher_rate
from dotcat.training.run import train

logger = logging.getLogger(__name__)

ADAPT_DIR = "adapt"  # OUT/adapt: the pseudo dataset, the plan, the negatives
RECORD = "dotcat_adapt.json"
#: Dense mining encodes the whole corpus; beyond this share of the budget, BM25 alone.
MAX_DENSE_MINING_SHARE = 1 / 3
#: Training planned for this share of the time left (model loading, saving, slack).
TRAIN_SHARE = 0.85


def adapt(config: AdaptConfig) -> Path:
    """Adapt ``config.model`` to ``config.corpus``; returns the output directory.

    Raises:
        DotcatError: bad settings, a corpus too small to adapt to, or an output directory
            holding another run (without ``resume`` or ``overwrite``).
    """
    config.validate()
    config.check_files()
    out = Path(config.out_dir)
    aside = out.with_name(f".{out.name}.overwritten")  # an overwritten run, until this one ends
    _put_back(aside, out)  # one kept by an overwrite that never ended
    work = _prepare(out, config, aside)
    try:
        run = _Record(out / RECORD, config)
        pseudo = run.step("pseudo_queries", _pseudo_step, config, work)
        rates = run.step("calibration", _calibrate, config, work)
        plan = run.step("plan", _plan, config, pseudo, rates, run.elapsed())
        run.step("negatives", _negatives_step, config, work, plan)
        run.step("training", _train_step, config, work, plan)
        run.finish()
    except BaseException:  # Ctrl-C too: an overwritten run is put back, not lost
        _put_back(aside, out)
        raise
    remove_tree(aside)
    logger.info("adapted model written to %s (%.1f min)", out, run.elapsed() / 60)
    return out


class _Record:
    """``OUT/dotcat_adapt.json``: each step's result and seconds, written after each step, so
    a resumed run skips what is done and the time budget counts the earlier run's time."""

    def __init__(self, path: Path, config: AdaptConfig) -> None:
        self.path = path
        self.data = read_json_or_none(path) or {"steps": {}}
        self.data["settings"] = _settings(config)
        self.before = float(self.data.get("elapsed_seconds", 0.0))
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds spent by this run and the runs it resumes."""
        return self.before + time.perf_counter() - self.started

    def step(self, name: str, fn, *args):
        done = self.data["steps"].get(name)
        if done is not None and "result" in done:
            logger.info("adapt: %s was done by an earlier run", name)
            return done["result"]
        started = time.perf_counter()
        result = fn(*args)
        self.data["steps"][name] = {
            "seconds": round(time.perf_counter() - started, 3),
            "result": result,
        }
        self._write()
        return result

    def finish(self) -> None:
        self.data["status"] = "finished"
        self._write()

    def _write(self) -> None:
        self.data["elapsed_seconds"] = round(self.elapsed(), 3)
        write_json(self.path, self.data)


# -- the steps ------------------------------------------------------------------------------


def _pseudo_step(config: AdaptConfig, work: Path) -> dict[str, Any]:
    """Every pseudo-query of the corpus, written as a BEIR dir (``work/all``) atomically."""
    data = pseudo_queries(iter_corpus(config.corpus), seed=config.seed, prefer=config.prefer)
    if len(data.queries) < MIN_ADAPT_QUERIES:
        raise DotcatError(
            f"{config.corpus}: only {len(data.queries)} pseudo-queries could be made "
            f"({data.summary()}); adapting needs at least {MIN_ADAPT_QUERIES} (titles of 3+ "
            "words or texts of several sentences)"
        )
    atomic_dir(work / "all", lambda tmp: write_pseudo_dataset(data, tmp))
    return data.summary()


def _calibrate(config: AdaptConfig, work: Path) -> dict[str, float]:
    """Examples/s of a training step and documents/s of encoding, measured here (and the
    teacher's pairs/s, when there is one)."""
    rates = measure_rates(
        work / "all",
        config.model,
        batch_size=config.batch_size,
        chunk_size=config.cache_chunk,
        max_length=config.max_length,
        query_max_length=config.query_max_length,
        bf16=config.bf16,
        device=config.device,
        negatives=config.n_negatives if config.teacher else 1,
    )
    if config.teacher and not is_lexical(config.teacher):
        rate = measure_teacher_rate(
            work / "all", config.teacher, precision=config.teacher_precision, device=config.device
        )
        rates["teacher_pairs_per_second"] = round(rate, 3)
    return rates


def _seconds_per_query(config: AdaptConfig, rates: dict[str, float]) -> float:
    """Training one pseudo-query, and with a teacher scoring its pairs (the positive and
    each negative the distillation samples)."""
    seconds = 1 / rates["examples_per_second"]
    if is_lexical(config.teacher):  # BM25 is near free; the dense half encodes each document
        seconds += (1 + config.n_negatives) / rates["documents_per_second"]
    elif config.teacher:
        seconds += (1 + config.n_negatives) / rates["teacher_pairs_per_second"]
    return seconds


def _plan(
    config: AdaptConfig, pseudo: dict[str, Any], rates: dict[str, float], spent: float
) -> dict[str, Any]:
    """How many pseudo-queries the budget allows, and whether to mine dense negatives."""
    budget = config.budget_minutes * 60
    encode_corpus = pseudo["documents"] / rates["documents_per_second"]
    dense = config.dense_negatives and encode_corpus <= MAX_DENSE_MINING_SHARE * budget
    left = budget - spent - (encode_corpus if dense else 0.0)
    per_query = _seconds_per_query(config, rates)
    affordable = int(TRAIN_SHARE * max(left, 0.0) / per_query)
    n = min(pseudo["queries"], affordable)
    if config.max_queries is not None:
        n = min(n, config.max_queries)
    if n < MIN_ADAPT_QUERIES:
        raise DotcatError(
            f"a budget of {config.budget_minutes:g} min leaves time for {n} pseudo-queries on "
            f"this machine ({per_query:.2f} s per pseudo-query); give more minutes"
        )
    plan = {
        "queries": n,
        "of": pseudo["queries"],
        "dense_negatives": dense,
        "estimated_mining_seconds": round(encode_corpus if dense else 0.0, 1),
        "estimated_training_seconds": round(n * per_query, 1),
    }
    if config.dense_negatives and not dense:
        plan["why_no_dense"] = (
            f"encoding the corpus (~{encode_corpus / 60:.1f} min) would take more than "
            f"{MAX_DENSE_MINING_SHARE:.0%} of the budget"
        )
    logger.info("adapt plan: %s", plan)
    return plan


def _negatives_step(config: AdaptConfig, work: Path, plan: dict[str, Any]) -> dict[str, Any]:
    """The planned queries' BM25 (and dense) negatives, interleaved, saved for training."""
    _write_subset(work, plan["queries"], config.seed)
    data = work / "train"
    corpus, queries = load_corpus(data), load_queries(data)
    qrels = load_qrels(data, split="train")
    lists = [mine_bm25_negatives(corpus, queries, qrels, show_progress=config.show_progress)]
    if plan["dense_negatives"]:
        lists.append(_dense_negatives(config, corpus, queries, qrels))
    negatives = interleave(lists)
    meta = {
        "method": "bm25+dense" if len(lists) == 2 else "bm25",
        "window": [10, 100],
        "n_queries": len(negatives),
        "n_negatives": sum(len(v) for v in negatives.values()),
    }
    save_negatives(work / "negatives.jsonl.gz", negatives, meta)
    return meta


def _dense_negatives(config: AdaptConfig, corpus, queries, qrels) -> dict[str, list[str]]:
    encoder = BiEncoder.load(
        EncoderConfig(model=config.model, device=config.device, max_length=config.max_length)
    )
    return mine_dense_negatives(encoder, corpus, queries, qrels, show_progress=config.show_progress)


def _train_step(config: AdaptConfig, work: Path, plan: dict[str, Any]) -> dict[str, Any]:
    """One epoch of ``train dot`` (``train distill`` with a teacher) on the planned
    pseudo-queries, into ``config.out_dir``."""
    settings = dict(
        data=work / "train",
        out_dir=config.out_dir,
        base=config.model,
        negatives_file=work / "negatives.jsonl.gz",
        epochs=1,
        batch_size=config.batch_size,
        cache_chunk_size=config.cache_chunk or None,
        lr=config.lr,
        temperature=config.temperature,
        max_length=config.max_length,
        query_max_length=config.query_max_length,
        dev_fraction=0.0,  # no labels: nothing to select on
        check=False,  # nor to check on
        seed=config.seed,
        bf16=config.bf16,
        device=config.device,
        checkpoint_every=max(1, plan["queries"] // config.batch_size // 10),
        resume=(Path(config.out_dir) / "checkpoints").exists(),
        show_progress=config.show_progress,
    )
    if config.teacher:
        settings.update(
            teacher=config.teacher,
            teacher_alpha=config.teacher_alpha,
            teacher_precision=config.teacher_precision,
            n_negatives=config.n_negatives,
            contrastive_weight=config.contrastive_weight,
        )
    train(DistillConfig(**settings) if config.teacher else DotConfig(**settings))
    record = read_json_or_none(Path(config.out_dir) / TRAINING_RECORD) or {}
    kept = ("examples_per_second", "steps", "timings", *(("teacher",) if config.teacher else ()))
    return {key: record.get(key) for key in kept}


# -- helpers --------------------------------------------------------------------------------


def interleave(lists: list[dict[str, list[str]]]) -> dict[str, list[str]]:
    """Per query, the lists merged rank by rank (:func:`interleave_ranks`)."""
    return {qid: interleave_ranks([lst.get(qid, []) for lst in lists]) for qid in lists[0]}


def _write_subset(work: Path, n: int, seed: int) -> None:
    """``work/train``: the full pseudo corpus and ``n`` of the pseudo-queries (drawn by hash,
    so a larger ``n`` keeps every query a smaller one kept)."""
    source = work / "all"
    rows = [json.loads(line) for line in (source / "queries.jsonl").open(encoding="utf-8")]
    rows.sort(key=lambda q: unit_hash(seed, "draw", q["_id"]))
    keep = {q["_id"] for q in rows[:n]}

    texts = {q["_id"]: q["text"] for q in rows}

    def write(tmp: Path) -> None:
        (tmp / "qrels").mkdir(parents=True)
        shutil.copyfile(source / "corpus.jsonl", tmp / "corpus.jsonl")
        with open(tmp / "queries.jsonl", "w", encoding="utf-8") as f:
            for q in sorted(keep):
                f.write(json.dumps({"_id": q, "text": texts[q]}, ensure_ascii=False) + "\n")
        lines = (source / "qrels" / "train.tsv").read_text(encoding="utf-8").splitlines()
        kept = [lines[0], *(line for line in lines[1:] if line.split("\t")[0] in keep)]
        (tmp / "qrels" / "train.tsv").write_text("\n".join(kept) + "\n", encoding="utf-8")

    atomic_dir(work / "train", write)


def _put_back(aside: Path, out: Path) -> None:
    """The run an overwrite moved to ``aside`` back in ``out`` (nothing there: nothing to do)."""
    if aside.is_dir():
        remove_tree(out)
        os.replace(aside, out)


def _prepare(out: Path, config: AdaptConfig, aside: Path) -> Path:
    """The work folder in ``out``; refuses to mix with an earlier run, moves an overwritten one."""
    record = out / RECORD
    if out.exists() and not out.is_dir():
        raise DotcatError(f"{out}: exists and is not a directory")
    earlier = record.exists() or (out / TRAINING_RECORD).exists()
    if earlier and not config.resume:
        if not config.overwrite:
            raise DotcatError(
                f"{out}: holds an earlier adaptation; resume it (--resume) or overwrite it "
                "(--overwrite)"
            )
        logger.warning("overwriting the run in %s (kept in %s until this one ends)", out, aside)
        os.replace(out, aside)
    if config.resume and record.exists():
        recorded = (read_json_or_none(record) or {}).get("settings", {})
        if recorded and recorded != (now := _settings(config)):
            diff = ", ".join(f"{k} {recorded.get(k)!r} -> {now.get(k)!r}" for k in sorted(now)
                             if recorded.get(k) != now[k])  # fmt: skip
            raise DotcatError(f"{out}: the earlier run used other settings ({diff}); resume with "
                              "the same ones or --overwrite")  # fmt: skip
    work = out / ADAPT_DIR
    work.mkdir(parents=True, exist_ok=True)
    return work


def _settings(config: AdaptConfig) -> dict[str, Any]:
    """What makes a run this run (progress display and resume/overwrite do not)."""
    out = dataclasses.asdict(config)
    for key in ("resume", "overwrite", "show_progress", "out_dir"):
        out.pop(key)
    out["corpus"] = str(Path(config.corpus).resolve())
    return out
