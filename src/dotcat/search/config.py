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
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dotcat.errors import DotcatError, SettingError
from dotcat.index.manifest import check_index
from dotcat.models.resolve import check_model
from dotcat.options import (
    AGGREGATE_TOP,
    AGGREGATION,
    AGGREGATION_HELP,
    AGGREGATIONS,
    DEPTH_HELP,
    DEVICE_HELP,
    FUSION_DEPTH,
    FUSIONS,
    INT8_BACKEND_HELP,
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
    Applies,
    Check,
    Settings,
    at_least,
    default_of,
    device_checks,
    int8_runtime_applies,
    not_utf8,
    precision_checks,
    setting,
    within,
)
from dotcat.search.filters import check_filter, parse_filter
from dotcat.search.stages import entry, first_stage_choices

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
#: The settings of the re-ranking stage (they apply only with a cross-encoder), and those
#: ``dotcat rerank`` takes to re-rank a run it is given (no first stage of its own).
RERANK_SETTINGS = ("depth", "interpolate", "rerank_backend", "batch_size", "rerank_passages")
RUN_RERANK_SETTINGS = ("rerank", "depth", "interpolate", "rerank_backend", "batch_size",
                       "device", "precision")  # fmt: skip
#: The settings of RM3 (on the BM25 side) and of Rocchio (on the dense side).
RM3_SETTINGS = ("fb_docs", "fb_terms", "original_query_weight")
ROCCHIO_SETTINGS = ("rocchio_docs", "rocchio_alpha", "rocchio_beta")
FUSION_SETTINGS = ("fusion", "fusion_weight", "fusion_depth")
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


def _parse_check(name: str, parse: Callable[[Any], Any], value: Any) -> Check:
    """The setting ``name`` as ``parse`` reads it (a filter: its syntax; its fields are checked
    against an index by :func:`check_pipeline`)."""
    try:
        if value is not None:
            parse(value)
    except SettingError as e:
        return (False, name, str(e))
    return (True, name, "")


@dataclass(frozen=True, repr=False)
class PipelineConfig(Settings):
    """What a :class:`~dotcat.search.pipeline.SearchPipeline` does; every field has a default
    that follows the index.

    Attributes:
        first_stage: ``auto`` (hybrid where the index has BM25, else dense), ``dense``,
            ``bm25`` or ``hybrid``.
        fusion: ``auto`` (the index's dev-chosen fusion, else linear 0.5), ``rrf`` or ``linear``.
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
            ``openvino``, ``onnxruntime``; see :class:`~dotcat.models.config.CrossEncoderConfig`).
        nprobe, ef_search: FAISS search parameters over the index's recorded ones: IVF lists
            visited, HNSW's candidate list (:attr:`search_params`).
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
        rocchio_docs, rocchio_alpha, rocchio_beta: Rocchio's ``q' = alpha * q + beta * mean(top
            rocchio_docs document vectors)`` (passage vectors, on an index with passages).
        filter: only documents this expression over their fields admits, applied inside
            the first stage (:mod:`dotcat.search.filters`); None or "": every document.
    """

    first_stage: str = setting(
        "auto",
        help="auto (hybrid where the index has BM25, else dense), dense, bm25, hybrid, or "
        "a registered first stage.",
        choices=first_stage_choices,
    )
    fusion: str = setting(
        "auto",
        help="Hybrid fusion: auto (the index's dev choice, else linear 0.5), rrf, linear.",
        choices=FUSIONS,
    )
    fusion_weight: float | None = setting(
        None, help="Linear fusion's dense weight in [0, 1] (with fusion linear)."
    )
    fusion_depth: int = setting(
        FUSION_DEPTH, help="Candidates each first stage gives a hybrid fusion."
    )
    rerank: str | None = setting(
        None, help="Re-rank with this BERT_CAT cross-encoder.", metavar="MODEL"
    )
    depth: int = setting(RERANK_DEPTH, help=DEPTH_HELP)
    interpolate: str | float = setting("auto", help=INTERPOLATE_HELP, cli_type=str)
    model: str | None = setting(None, help="Query encoder, if not the one the index records.")
    device: str = setting("auto", help=DEVICE_HELP)
    precision: str = setting("auto", help=PRECISION_HELP, choices=PRECISIONS)
    rerank_backend: str = setting("auto", help=INT8_BACKEND_HELP, choices=INT8_BACKENDS)
    nprobe: int | None = setting(None, help="IVF lists to visit (FAISS nprobe).")
    ef_search: int | None = setting(None, help="HNSW's candidate list (FAISS efSearch).")
    batch_size: int = setting(32, help="Most (query, document) pairs per cross-encoder pass.")
    aggregation: str = setting(AGGREGATION, help=AGGREGATION_HELP, choices=AGGREGATIONS)
    aggregate_top: int = setting(
        AGGREGATE_TOP, help="With --aggregation sum: passages summed per document."
    )
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
    filter: str | None = setting(
        None,
        help='Only documents whose fields match, e.g. \'product = "billing" and updated >= '
        "2025-01-01', 'tags contains \"hr\"', 'path startswith \"notes/\"' (docs/fields.md).",
        metavar="EXPRESSION",
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
            _parse_check("interpolate", parse_interpolate, self.interpolate),
            at_least("nprobe", self.nprobe, 1),
            at_least("ef_search", self.ef_search, 1),
            _parse_check("filter", parse_filter, self.filter or None),
        ]

    @property
    def search_params(self) -> dict[str, int]:
        """The FAISS search parameters given (their FAISS names), over the index's own."""
        given = {"nprobe": self.nprobe, "efSearch": self.ef_search}
        return {name: value for name, value in given.items() if value is not None}

    def applies(self) -> list[Applies]:
        sides = PRF_SIDES.get(self.prf, ())
        return [
            (RM3_SETTINGS, "bm25" in sides,
             "applies only with prf rm3 or both (RM3, on the BM25 side)"),
            (ROCCHIO_SETTINGS, "dense" in sides,
             "applies only with prf rocchio or both (Rocchio, on the dense side)"),
            (("aggregate_top",), self.aggregation == "sum", "applies only with aggregation sum"),
            (FUSION_SETTINGS, self.first_stage == "auto" or len(entry(self.first_stage).sides) > 1,
             "applies only to a first_stage that fuses (hybrid)"),
            (RERANK_SETTINGS, self.rerank is not None,
             "applies only with a cross-encoder (rerank)"),
            int8_runtime_applies("rerank_backend", self.precision),
        ]  # fmt: skip

    def first_stage_only(self) -> PipelineConfig:
        """These settings without the re-ranker: what a first stage runs."""
        reset = {name: default_of(PipelineConfig, name) for name in RERANK_SETTINGS}
        return replace(self, rerank=None, **reset)

    def first_stage_json(self) -> dict[str, Any]:
        """What a first stage's ranking depends on, JSON-ready: every setting changed from its
        default but the first stage's name, the re-ranker's and where the models run (a run's
        fingerprint takes those apart)."""
        apart = {"first_stage", "rerank", *RERANK_SETTINGS, "device", "precision"}
        return {k: v for k, v in self.to_json().items() if k not in apart}

    def feedback_checks(self) -> list[Check]:
        """Feedback needs the side it rewrites; its parameters their ranges."""
        sides = PRF_SIDES.get(self.prf, ())
        explicit = self.first_stage in first_stage_choices() and self.first_stage != "auto"
        reads = entry(self.first_stage).sides if explicit else sides
        missing = [side for side in sides if side not in reads]
        return [
            (
                not missing,
                "prf",
                f"prf {self.prf!r} rewrites the {' and '.join(missing)} side, and first stage "
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
#: Characters that show nothing (soft hyphen, zero-width spaces and joiners, marks of
#: direction, word joiner, BOM): a query of them and white space is empty.
INVISIBLE_CLASS = r"\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff"
INVISIBLE = re.compile(f"[{INVISIBLE_CLASS}]")


def control_character(text: str) -> str | None:
    """The first control character of ``text`` (:data:`CONTROL`) as ``U+0000``, or None."""
    found = CONTROL.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def check_query(text: object) -> str:
    """A query's text: a str, not blank, UTF-8 (:func:`not_utf8`), no control character
    (:data:`CONTROL`), and not longer than :data:`~dotcat.options.MAX_QUERY_CHARS` (a pasted
    document, not a query: the encoder would read its first few hundred words)."""
    if not isinstance(text, str):
        raise DotcatError(f"a query must be a str, got {type(text).__name__}")
    if not INVISIBLE.sub("", text).strip():
        raise DotcatError("the query is empty; give some words to search for")
    control, bad = control_character(text), not_utf8(text)
    if bad is not None:
        raise DotcatError(f"the query's {bad[1]}")
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
    if config.filter:
        check_filter(index_dir, config.filter)
    if config.model is not None:
        check_model(config.model)
    if config.rerank is not None:
        check_model(config.rerank, cross_encoder=True)
