"""What a query pipeline does, checked before any model or index loads.

:class:`PipelineConfig` (:class:`dotcat.search.pipeline.SearchPipeline`: ``dotcat search``,
``serve``, ``rerank``, ``calibrate``) and :class:`CalibrationConfig` (``dotcat calibrate``);
:func:`results_per_query` and :func:`check_query` for what a call asks. Each field carries its
help text and, for a closed list, its choices (:mod:`dotcat.options`).
:func:`check_pipeline` checks the index and the models a pipeline names, without loading them
(no torch, no FAISS).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dotcat.errors import DotcatError, SettingError
from dotcat.index.manifest import check_index
from dotcat.models.resolve import check_model
from dotcat.options import (
    AGGREGATION_HELP,
    AGGREGATIONS,
    DEPTH_HELP,
    DEVICE_HELP,
    FIRST_STAGES,
    FUSION_DEPTH,
    FUSIONS,
    INT8_BACKENDS,
    MAX_QUERY_CHARS,
    PRECISION_HELP,
    PRECISIONS,
    PRF,
    PRF_METHODS,
    RERANK_DEPTH,
    RM3_FB_DOCS,
    RM3_FB_TERMS,
    RM3_ORIGINAL_WEIGHT,
    ROCCHIO_ALPHA,
    ROCCHIO_BETA,
    ROCCHIO_DOCS,
    RUN_K,
    SHOWN_K,
    Check,
    Settings,
    at_least,
    device_checks,
    precision_checks,
    setting,
    within,
)

INTERPOLATE_HELP = (
    "Mix first-stage and cross-encoder scores (min-max normalised): 'auto' uses the weight "
    "`dotcat calibrate` chose for the model on this index's corpus, else the one `train cat` "
    "chose on dev, else the plain cross-encoder score; a number in [0, 1] is the "
    "cross-encoder's weight (1: the plain logit)."
)


PRF_HELP = (
    "Pseudo-relevance feedback: rm3 (BM25 side), rocchio (dense side), both (each side its "
    "own; a hybrid fuses the two), none."
)
#: Which sides each feedback method rewrites.
PRF_SIDES = {"none": (), "rm3": ("bm25",), "rocchio": ("dense",), "both": ("bm25", "dense")}


def parse_interpolate(value: str | float | None) -> float | None:
    """``auto``/None -> None (follow the model's record); else a weight in [0, 1]."""
    if value is None or value == "auto":
        return None
    try:
        alpha = float(value)
    except (TypeError, ValueError):
        raise SettingError(
            "interpolate", f"interpolate must be 'auto' or a number in [0, 1], got {value!r}"
        ) from None
    if not 0.0 <= alpha <= 1.0:
        raise SettingError("interpolate", f"interpolate must be in [0, 1], got {alpha}")
    return alpha


@dataclass(frozen=True, repr=False)
class PipelineConfig(Settings):
    """What a :class:`~dotcat.search.pipeline.SearchPipeline` does; every field has a default
    that follows the index.

    Attributes:
        first_stage: ``auto`` (hybrid where the index has BM25, else dense), ``dense``,
            ``bm25`` or ``hybrid``.
        fusion: ``auto`` (the index's dev-chosen fusion, else RRF), ``rrf`` or ``linear``.
        fusion_weight: linear fusion's dense weight (None: the recorded one, else 0.5).
        fusion_depth: candidates per first stage before fusing.
        rerank: a BERT_CAT cross-encoder (directory or hub name) to re-rank with; None: no.
        depth: how many first-stage results are re-ranked.
        interpolate: ``auto`` (the weight recorded for this model in the index by ``dotcat
            calibrate``, else the one recorded by ``train cat``, else 1), or a number in
            [0, 1] (1: the plain cross-encoder logit).
        model: the query encoder, when not the one the index records (checked against it).
        device, precision: where and at what precision the models run.
        rerank_backend: the re-ranker's int8 runtime (``auto``: OpenVINO where installed,
            ``openvino``, ``onnxruntime``; see :class:`~dotcat.models.CrossEncoderConfig`).
        search_params: FAISS search parameters (``nprobe``, ``efSearch``).
        batch_size: most cross-encoder pairs per forward pass.
        aggregation: how documents are ranked from their passages' scores (one of
            :data:`~dotcat.options.AGGREGATIONS`: ``maxp``, ``firstp``, ``sum``); an index
            without passages has one per document, so all three rank alike there.
        aggregate_top: ``sum``: how many of a document's best passages are summed.
        rerank_passages: passages of each document the cross-encoder reads (its first
            stage's best first); the document's logit is their highest.
        prf: pseudo-relevance feedback (:mod:`dotcat.search.feedback`): ``rm3`` on the BM25
            side, ``rocchio`` on the dense side, ``both``, or ``none``.
        fb_docs, fb_terms, original_query_weight: RM3's feedback documents (passages, on an
            index with passages), expansion terms and the original query's weight.
        rocchio_docs, rocchio_alpha, rocchio_beta: Rocchio's ``q' = alpha * q + beta *
            mean(top rocchio_docs document vectors)`` (passage vectors, on an index with
            passages).
    """

    first_stage: str = setting(
        "auto",
        help="auto (hybrid where the index has BM25, else dense), dense, bm25, hybrid.",
        choices=FIRST_STAGES,
    )
    fusion: str = setting(
        "auto",
        help="Hybrid fusion: auto (the index's dev choice, else rrf), rrf, linear.",
        choices=FUSIONS,
    )
    fusion_weight: float | None = setting(
        None, help="Linear fusion's dense weight in [0, 1] (with fusion linear)."
    )
    fusion_depth: int = setting(
        FUSION_DEPTH, help="Candidates each first stage gives a hybrid fusion."
    )
    rerank: str | None = setting(None, help="Re-rank with this BERT_CAT cross-encoder.")
    depth: int = setting(RERANK_DEPTH, help=DEPTH_HELP)
    interpolate: str | float = setting("auto", help=INTERPOLATE_HELP)
    model: str | None = setting(None, help="Query encoder, if not the one the index records.")
    device: str = setting("auto", help=DEVICE_HELP)
    precision: str = setting("auto", help=PRECISION_HELP, choices=PRECISIONS)
    rerank_backend: str = setting(
        "auto",
        help="The re-ranker's int8 runtime: auto (openvino where installed), openvino or "
        "onnxruntime.",
        choices=INT8_BACKENDS,
    )
    search_params: Mapping[str, float] | None = setting(
        None, help="FAISS search parameters (nprobe, efSearch)."
    )
    batch_size: int = setting(32, help="Most (query, document) pairs per cross-encoder pass.")
    aggregation: str = setting("maxp", help=AGGREGATION_HELP, choices=AGGREGATIONS)
    aggregate_top: int = setting(2, help="With --aggregation sum: passages summed per document.")
    rerank_passages: int = setting(
        1, help="With a cross-encoder: best passages of each document it reads (their max)."
    )
    prf: str = setting(PRF, help=PRF_HELP, choices=PRF_METHODS)
    fb_docs: int = setting(
        RM3_FB_DOCS, help="RM3: feedback documents (BM25's top; passages in a passage index)."
    )
    fb_terms: int = setting(RM3_FB_TERMS, help="RM3: expansion terms added to the query.")
    original_query_weight: float = setting(
        RM3_ORIGINAL_WEIGHT, help="RM3: the original query's weight in [0, 1]."
    )
    rocchio_docs: int = setting(
        ROCCHIO_DOCS, help="Rocchio: feedback documents (FAISS's top; passages in a passage index)."
    )
    rocchio_alpha: float = setting(
        ROCCHIO_ALPHA, help="Rocchio: the query vector's weight in [0, 1]."
    )
    rocchio_beta: float = setting(
        ROCCHIO_BETA, help="Rocchio: the feedback documents' mean vector's weight in [0, 1]."
    )

    def __post_init__(self) -> None:
        self.validate()

    def checks(self) -> list[Check]:
        linear = self.fusion == "linear"
        return [
            (
                self.fusion_weight is None or linear,
                "fusion_weight",
                f"fusion_weight is the linear fusion's weight; with fusion {self.fusion!r} it "
                "would be ignored (set fusion to linear)",
            ),
            within("fusion_weight", self.fusion_weight, 0, 1),
            at_least("fusion_depth", self.fusion_depth, 1),
            at_least("depth", self.depth, 1),
            at_least("batch_size", self.batch_size, 1),
            at_least("aggregate_top", self.aggregate_top, 1),
            at_least("rerank_passages", self.rerank_passages, 1),
            *self.feedback_checks(),
            *device_checks("device", self.device),
            *precision_checks("precision", self.precision, self.device),
            *(at_least(name, value, 1) for name, value in (self.search_params or {}).items()),
        ]

    def feedback_checks(self) -> list[Check]:
        """Feedback needs the side it rewrites; its parameters their ranges."""
        sides = PRF_SIDES.get(self.prf, ())
        stage = {"dense": ("dense",), "bm25": ("bm25",)}.get(self.first_stage)
        return [
            (
                stage is None or any(side in stage for side in sides) or not sides,
                "prf",
                f"prf {self.prf!r} rewrites the {' and '.join(sides)} side, and first stage "
                f"{self.first_stage!r} has none",
            ),
            at_least("fb_docs", self.fb_docs, 1),
            at_least("fb_terms", self.fb_terms, 1),
            within("original_query_weight", self.original_query_weight, 0, 1),
            at_least("rocchio_docs", self.rocchio_docs, 1),
            # Only alpha : beta changes a ranking (q' is a weighted sum): [0, 1] spans them all.
            within("rocchio_alpha", self.rocchio_alpha, 0, 1),
            within("rocchio_beta", self.rocchio_beta, 0, 1),
            (
                self.rocchio_alpha > 0 or self.rocchio_beta > 0,
                "rocchio_alpha",
                "rocchio_alpha and rocchio_beta are both 0: the query vector would be 0 and "
                "every document score 0; give one of them a weight",
            ),
        ]

    def validate(self) -> None:
        super().validate()
        parse_interpolate(self.interpolate)


@dataclass(frozen=True, repr=False)
class CalibrationConfig(Settings):
    """How ``dotcat calibrate`` asks the corpus (:func:`.calibrate.calibrate_reranker`)."""

    queries: int = setting(200, help="Pseudo-queries to ask.")
    documents: int = setting(10_000, help="Most documents sampled from the index to ask them on.")
    seed: int = setting(0, help="Changes the sample and the pseudo-queries.")
    record: bool = setting(
        True, help="Record the weight in the index (--no-record: only print it)."
    )

    def checks(self) -> list[Check]:
        return [at_least("queries", self.queries, 1), at_least("documents", self.documents, 1)]


def results_per_query(k: int | None, *, run: bool) -> int:
    """``k`` checked, or the default: :data:`~dotcat.options.SHOWN_K` results shown for one
    query, :data:`~dotcat.options.RUN_K` written into a run (what R@100 needs)."""
    if k is None:
        return RUN_K if run else SHOWN_K
    if k < 1:
        raise SettingError("k", f"k must be >= 1, got {k}")
    return k


#: Control characters (C0 but tab, line feed and carriage return; DEL; C1), as a regular
#: expression's class: no word holds one, and a query made of them would be answered with
#: arbitrary documents.
CONTROL_CLASS = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
CONTROL = re.compile(f"[{CONTROL_CLASS}]")


def control_character(text: str) -> str | None:
    """The first control character of ``text`` (:data:`CONTROL`) as ``U+0000``, or None."""
    found = CONTROL.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def check_query(text: str) -> str:
    """A query's text: not blank, no control character (:data:`CONTROL`), and not longer
    than :data:`~dotcat.options.MAX_QUERY_CHARS` (a pasted document, not a query: the
    encoder would read its first few hundred words)."""
    if not text.strip():
        raise DotcatError("the query is empty; give some words to search for")
    control = control_character(text)
    if control is not None:
        raise DotcatError(f"the query holds a control character ({control}); give words")
    if len(text) > MAX_QUERY_CHARS:
        raise DotcatError(
            f"the query is {len(text):,} characters long; at most {MAX_QUERY_CHARS:,} are "
            "accepted (an encoder reads a few hundred words of it)"
        )
    return text


def check_pipeline(index_dir: str | Path, config: PipelineConfig) -> None:
    """What a pipeline over ``index_dir`` needs, checked without loading it: the settings, the
    index's manifest, the query encoder and cross-encoder directories."""
    config.validate()
    check_index(index_dir)
    if config.model is not None:
        check_model(config.model)
    if config.rerank is not None:
        check_model(config.rerank, cross_encoder=True)
