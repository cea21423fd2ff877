"""What a training run is: one settings dataclass per recipe, checked without torch.

:class:`TrainConfig` holds what every recipe shares (data, output, optimiser, schedule,
checkpoints) and its checks; :class:`DotConfig` (``train dot``), :class:`CatConfig`
(``train cat``) and :class:`DistillConfig` (``train distill``, a :class:`DotConfig` with a
teacher) add their own. :class:`AdaptConfig` (``dotcat adapt``) is the settings of a whole
adaptation, whose training step builds a :class:`DotConfig` or :class:`DistillConfig`.

This module imports nothing heavy, so a command line builds a config and calls
:meth:`~TrainConfig.validate` before torch loads: a wrong value is refused in milliseconds.
Every field carries its help text (``field.metadata["help"]``), and the choices a config
checks are the tuples below, so a command line can be generated from them.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dotcat.data import find_corpus_file, find_qrels_file, find_queries_file
from dotcat.data.index_source import is_index_dir
from dotcat.errors import DotcatError, SettingError
from dotcat.files import check_can_create_in
from dotcat.models.resolve import check_model
from dotcat.options import (
    DEVICE_HELP,
    POOLINGS,
    PRECISION_HELP,
    PRECISIONS,
    RERANK_DEPTH,
    SIMILARITIES,
    Applies,
    Check,
    Settings,
    _jsonable,
    at_least,
    auto_float,
    device_checks,
    first_failure,
    int_or_word,
    negative_is_none,
    one_of,
    precision_checks,
    setting,
    within,
    zero_is_none,
)

#: ``bf16``: autocast where the hardware has native bf16 (``auto``), always, or never.
BF16_SETTINGS = ("auto", "on", "off")
BF16_HELP = "bf16 autocast: auto (where native), on or off."
TEMPERATURE_HELP = "InfoNCE temperature (default: 0.05 for cos, 1 for dot similarity)."
#: The losses of each recipe (the names :data:`dotcat.losses.registry.LOSSES` holds).
DOT_LOSSES = ("contrastive", "triplet")
CAT_LOSSES = ("lce", "bce")
DISTILL_LOSSES = ("margin-mse", "kl")
#: Where ``train dot`` mines its hard negatives.
NEGATIVE_SOURCES = ("bm25", "dense", "none")
#: ``train dot``'s dev evaluation: exact retrieval over the dev corpus, or none.
DEV_EVALS = ("full", "none")
#: The default rank window ``[start, end)`` of mined negatives.
DEFAULT_WINDOW = (10, 100)
#: ``teacher`` naming the lexical teacher: BM25 in the cross-encoder's place.
LEXICAL_TEACHER = "bm25"
#: The lexical teacher's BM25 share when none is given: BM25 and the dense score at equal
#: weight once brought to one spread (fixed, not tuned: no labels choose it in ``adapt``).
LEXICAL_ALPHA = 0.5
#: ``pretrain_queries``: decide from the corpus (see :mod:`dotcat.training.recipes.cat_pretrain`).
AUTO = "auto"
#: ``adapt``: where a document's pseudo-query comes from first.
PSEUDO_QUERY_SOURCES = ("title", "sentence")
#: Fewer training queries than this: the held-out check is k-fold over them, and every one of
#: them trains (no dev split); this many or more: the check is the run's dev split.
KFOLD_BELOW = 100
#: ``adapt``: the fewest pseudo-queries worth a training run.
MIN_ADAPT_QUERIES = 64
#: ``adapt`` with a teacher: negatives per pseudo-query, GPL's (query, positive, negative)
#: triples with one margin each; the budget buys more pseudo-queries instead of more negatives.
DISTILL_NEGATIVES = 1


def auto_setting(help: str) -> Any:
    """A number that is None (``auto`` on the command line) until given."""
    return setting(None, help=help, cli_type=str, cli_default="auto", parse=auto_float)


def window_setting(default: tuple[int, int]) -> Any:
    """The rank window ``(start, end)`` negatives are mined from."""
    return setting(
        default,
        help="Rank window (start, end): negatives mined from rank start up to (excluding) end.",
        parts=("--window-start", "--window-end"),
        part_help=("Mine negatives from this rank", "...up to (excluding) this rank."),
    )


def cache_chunk_setting(default: int | None) -> Any:
    """GradCache's chunk size (0 on the command line: off)."""
    return setting(
        default, help="GradCache chunk size (0: off).", flags=("--cache-chunk",), parse=zero_is_none
    )


def above_zero(name: str, value: float | None) -> Check:
    """``value > 0`` (None passes: "decide for me")."""
    return (value is None or value > 0, name, f"{name} must be > 0, got {value}")


def is_lexical(teacher: object) -> bool:
    """Whether ``teacher`` names the lexical teacher rather than a cross-encoder."""
    return str(teacher) == LEXICAL_TEACHER


def check_inputs(data: str | Path, out_dir: str | Path, model: str) -> None:
    """A run's data (a BEIR dir or corpus file), its output folder (creatable, not a file, and
    neither the starting model's folder nor one holding it: the run writes its model there)
    and its starting model (a model directory), checked without loading any of them."""
    find_corpus_file(data)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise DotcatError(f"{out_dir}: exists and is not a directory")
    check_can_create_in(out_dir)
    start = check_model(model).resolve()
    if out_dir.resolve() in (start, *start.parents):
        raise DotcatError(
            f"{out_dir}: OUT_DIR is (or holds) the folder of the model training starts from "
            f"({model}): training would overwrite it; give another OUT_DIR"
        )


def check_labels(
    data: str | Path, split: str, queries: str | Path | None, qrels: str | Path | None
) -> None:
    """The queries and qrels a run trains on, found (not read): a BEIR directory's own
    (``qrels/<split>.tsv``), or the files given, which a corpus file needs. A missing split is
    refused here, before the output folder is made and torch is imported."""
    data = Path(data)
    beir = data.is_dir() and not is_index_dir(data)
    if not beir and (queries is None or qrels is None):
        what = "a dotcat index" if data.is_dir() else "not a BEIR directory"
        raise DotcatError(f"{data}: {what}; give the queries and qrels files as well")
    find_queries_file(queries if queries is not None else data)
    find_qrels_file(qrels if qrels is not None else data, split)


def type_checks(config: Any) -> list[Check]:
    """A number where a field holds one (whole for an ``int``), a list where it holds a tuple: a
    Python caller's ``"8"``, ``1.5`` epochs or ``"bm25"`` as first stages is refused in one line,
    not a TypeError deep in the run (checked first: the other checks compare numbers)."""
    out = []
    for f in dataclasses.fields(config):
        value, kind = getattr(config, f.name), str(f.type).removesuffix(" | None")
        wanted = {"int": numbers.Integral, "float": numbers.Real}.get(kind)
        wanted = tuple | list if kind.startswith("tuple") else wanted
        if wanted is not None and (value is not None or kind == f.type):
            ok = isinstance(value, wanted) and not isinstance(value, bool)
            what = {"int": "a whole number", "float": "a number"}.get(kind, "a list or tuple")
            out.append((ok, f.name, f"{f.name} must be {what}, got {value!r}"))
    return out


def check_window(window: Sequence[int]) -> tuple[int, int]:
    """A rank window ``(start, end)``: two integers with ``0 <= start < end``."""
    try:
        start, end = window
    except (TypeError, ValueError):
        raise SettingError("window", f"rank window must be (start, end), got {window!r}") from None
    if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in window):
        raise SettingError("window", f"rank window must be two integers, got {window!r}")
    if not 0 <= start < end:
        raise SettingError(
            "window", f"rank window must satisfy 0 <= start < end, got [{start}, {end})"
        )
    return int(start), int(end)


@dataclass(repr=False)
class TrainConfig(Settings):
    """What every training run shares (recorded in the run's ``dotcat_training.json``).

    The optimiser is AdamW (no weight decay on biases and LayerNorm weights) with a linear
    warm-up over ``warmup_ratio`` of the steps, then a linear decay to 0 at the last step. The
    dev split is carved from the training queries with :data:`dotcat.data.splits.DEV_SEED`, not
    ``seed``: every stage (train dot/cat/distill, calibrate, an index's fusion weight) holds out
    the same queries, whatever seed a run takes.
    """

    #: The recipe this config runs (``dot``, ``cat``, ``distill``) and the losses it offers.
    recipe: ClassVar[str] = ""
    losses: ClassVar[tuple[str, ...]] = ()

    data: str | Path = setting(
        help="BEIR dir (or a corpus file or index dir with --queries/--qrels).", argument=True
    )
    out_dir: str | Path = setting(help="Where the trained model directory goes.", argument=True)
    split: str = setting("train", help="Qrels split to train on.")
    queries: str | Path | None = setting(None, help="Queries file (with a corpus file).")
    qrels: str | Path | None = setting(None, help="Qrels file (with a corpus file).")
    base: str = setting("default", help="Base model: local dir, hub name, 'default'.")
    loss: str = setting("", help="The training loss.")
    negatives_file: str | Path | None = setting(None, help="Reuse saved negatives.")
    n_negatives: int = setting(1, help="Hard negatives per query.")
    epochs: int = setting(2, help="Training epochs.")
    batch_size: int = setting(32, help="Queries per batch.")
    grad_accum_steps: int = setting(1, help="Gradient accumulation steps.", flags=("--grad-accum",))
    # 1e-4, chosen on SciFact dev over 5e-5 (train dot); for train cat from a bi-encoder base,
    # 3e-5 and 5e-5 left the loss at chance for the first hundred steps, 1e-4 learned.
    lr: float = setting(1e-4, help="Peak learning rate (AdamW).")
    warmup_ratio: float = setting(0.1, help="Share of steps warming up.")
    weight_decay: float = setting(
        0.01, help="AdamW weight decay (none on biases and LayerNorm weights)."
    )
    max_grad_norm: float = setting(1.0, help="Clip the gradients' global L2 norm (0: no clipping).")
    max_length: int | None = setting(256, help="Max document tokens.")
    dev_fraction: float = setting(
        0.1, help="Share of train queries held out (0: no dev split, the last epoch is kept)."
    )
    min_dev_queries: int = setting(
        3, help="Hold out a dev split only when dev_fraction makes this many queries or more."
    )
    min_relevance: int = setting(
        1, help="Smallest grade of a positive; documents graded 0 are negatives too."
    )
    seed: int = setting(42, help="Random seed.")
    bf16: str = setting("auto", help=BF16_HELP, choices=BF16_SETTINGS)
    device: str = setting("auto", help=DEVICE_HELP)
    checkpoint_every: int = setting(0, help="Checkpoint every N steps (0: off).")
    keep_checkpoints: int = setting(2, help="Newest checkpoints kept (0: all).")
    resume: bool = setting(False, help="Continue from the last checkpoint.")
    overwrite: bool = setting(False, help="Replace an earlier run in OUT_DIR.")
    stop_after_steps: int | None = setting(
        None,
        help="Stop after this many optimizer steps with a checkpoint, as an interrupted run "
        "would (the schedule still spans all epochs); resume later.",
    )
    show_progress: bool = setting(True, help="Progress bars (rank 0 only).", cli=False)
    check: bool = setting(
        True,
        help="Check the trained model on held-out judged queries (k-fold under 100 queries or no "
        "dev split, else the dev split); where no gain shows, the first stage stays the default.",
        flags=("--check/--no-check",),
    )
    check_folds: int = setting(5, help="Folds of the held-out check (k-fold).")
    held_out: tuple[str, ...] = setting(
        (), help="Queries this run must not train on (a fold of the held-out check).", cli=False
    )

    def kfold(self, n_queries: int) -> bool:
        """Whether the held-out check of a run on ``n_queries`` is k-fold (then every query
        trains: no dev split) rather than the dev split: under ``KFOLD_BELOW`` queries, or
        where ``dev_fraction`` holds out no dev split (0, or under ``min_dev_queries``)."""
        few = n_queries < KFOLD_BELOW or n_queries * self.dev_fraction < self.min_dev_queries
        return self.check and few

    def validate(self) -> None:
        first_failure(type_checks(self))
        super().validate()

    def checks(self) -> list[Check]:
        """Every shared setting's check; subclasses add theirs."""
        return [
            one_of("loss", self.loss, self.losses, self.recipe),
            *device_checks("device", str(self.device)),
            at_least("epochs", self.epochs, 1),
            at_least("batch_size", self.batch_size, 1),
            at_least("grad_accum_steps", self.grad_accum_steps, 1),
            at_least("n_negatives", self.n_negatives, 0),
            (self.lr > 0, "lr", f"lr (the learning rate) must be > 0, got {self.lr}"),
            within("warmup_ratio", self.warmup_ratio, 0, 1, open_high=True),
            at_least("weight_decay", self.weight_decay, 0),
            at_least("max_grad_norm", self.max_grad_norm, 0),
            within("dev_fraction", self.dev_fraction, 0, 1, open_high=True),
            at_least("min_dev_queries", self.min_dev_queries, 1),
            at_least("min_relevance", self.min_relevance, 1),
            at_least("checkpoint_every", self.checkpoint_every, 0),
            at_least("keep_checkpoints", self.keep_checkpoints, 0),
            at_least("stop_after_steps", self.stop_after_steps, 1),
            at_least("check_folds", self.check_folds, 2),
        ]

    def check_files(self) -> None:
        """The data, the output folder and the models the run names, checked without
        loading them (no torch): a missing file is refused before any work."""
        check_inputs(self.data, self.out_dir, self.base)
        check_labels(self.data, self.split, self.queries, self.qrels)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (paths as strings, tuples as lists)."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(repr=False)
class DotConfig(TrainConfig):
    """A BERT_DOT training run (``dotcat train dot``; :mod:`dotcat.training.recipes.dot`).

    The loss is InfoNCE over in-batch and hard negatives with a temperature (DPR, Karpukhin et al.
    2020) or the triplet margin loss of Sentence-BERT on cosines. ``batch_size`` counts the examples
    of all processes (the global batch): the pool of in-batch negatives. ``grad_accum_steps`` sums
    gradients over batches but the contrastive loss still sees one batch at a time; to enlarge the
    in-batch pool in little memory, raise ``batch_size`` and set ``cache_chunk_size`` (GradCache,
    Gao et al. 2021). The default temperature follows the similarity: 0.05 for cosines in [-1, 1], 1
    for inner products, whose unnormalised scores divided by 0.05 would saturate the softmax.
    """

    recipe: ClassVar[str] = "dot"
    losses: ClassVar[tuple[str, ...]] = DOT_LOSSES

    loss: str = setting("contrastive", help="contrastive (InfoNCE) or triplet.")
    pooling: str | None = setting(
        None,
        help="cls or mean (default: the base model's own, which its weights are tuned for).",
        choices=POOLINGS,
    )
    similarity: str | None = setting(
        None, help="dot or cos (default: the base model's own).", choices=SIMILARITIES
    )
    negatives: str = setting(
        "bm25", help="Hard negatives: bm25, dense or none.", choices=NEGATIVE_SOURCES
    )
    window: tuple[int, int] = window_setting(DEFAULT_WINDOW)
    remine_each_epoch: bool = setting(
        False, help="Re-mine dense negatives each epoch.", flags=("--remine/--no-remine",)
    )
    cache_chunk_size: int | None = cache_chunk_setting(None)
    temperature: float | None = setting(None, help=TEMPERATURE_HELP)
    margin: float = setting(0.1, help="Triplet margin gamma (in cosine units).")
    query_max_length: int = setting(64, help="Max query tokens.")
    dev_eval: str = setting(
        "full",
        help="full: dev nDCG@10 by exact retrieval over the corpus encoded with the current "
        "model; none: no dev evaluation (the last epoch is kept).",
        choices=DEV_EVALS,
    )
    dev_max_docs: int = setting(
        50_000,
        help="Corpus sample for dev evaluation (the dev queries' judged documents plus a "
        "seeded sample of others).",
    )

    def checks(self) -> list[Check]:
        hard = self.n_negatives >= 1 and (self.negatives != "none" or bool(self.negatives_file))
        return [
            *super().checks(),
            at_least("cache_chunk_size", self.cache_chunk_size or None, 1),
            above_zero("temperature", self.temperature),
            above_zero("margin", self.margin),
            (self.max_length is not None, "max_length", "max_length must be a number of tokens"),
            at_least("max_length", self.max_length, 2),
            at_least("query_max_length", self.query_max_length, 2),
            at_least("dev_max_docs", self.dev_max_docs, 1),
            (
                self.loss != "triplet" or hard,
                "negatives",
                "the triplet loss needs hard negatives: use negatives bm25 or dense and "
                "n_negatives >= 1",
            ),
            (
                self.batch_size >= 2 or hard,
                "batch_size",
                "batch_size must be >= 2 without hard negatives (in-batch negatives are then "
                f"the only ones), got {self.batch_size}",
            ),
            (
                not (self.remine_each_epoch and self.negatives == "none"),
                "remine_each_epoch",
                "remine_each_epoch needs hard negatives (negatives bm25 or dense)",
            ),
        ]

    def applies(self) -> list[Applies]:
        triplet = self.loss == "triplet"
        return [(("margin",), triplet, "applies only with loss triplet"),
                (("temperature",), not triplet, "does not apply with loss triplet")]  # fmt: skip

    def validate(self) -> None:
        super().validate()
        check_window(self.window)


@dataclass(repr=False)
class CatConfig(TrainConfig):
    """A BERT_CAT training run (``dotcat train cat``; :mod:`dotcat.training.recipes.cat`).

    A query's negative pool is the top ``depth`` of every first stage minus the documents
    judged relevant; each positive is grouped with ``n_negatives`` of them per epoch. The new
    classification head learns at ``lr * head_lr_scale``: Adam moves each weight by about the
    learning rate per step, so at a fine-tuning rate a freshly initialised head (weights ~0.02)
    barely moves in a few hundred steps and the loss stays at chance. ``attention_dropout`` is
    0 by default: PyTorch's fused CPU attention has no dropout, so any makes every layer fall
    back to the unfused attention (about 1.4x slower), while the hidden-state dropout, the main
    regulariser, stays. With ``teacher_weight`` w > 0 the LCE target mixes the label with the
    first stages' own view of the group (softmax at ``teacher_temperature``).
    """

    recipe: ClassVar[str] = "cat"
    losses: ClassVar[tuple[str, ...]] = CAT_LOSSES

    out_dir: str | Path = setting(help="Where the trained cross-encoder goes.", argument=True)
    base: str = setting("default", help="BERT checkpoint or cross-encoder to start from.")
    loss: str = setting("lce", help="lce (listwise softmax) or bce (pointwise).")
    n_negatives: int = setting(7, help="Negatives per positive.")
    batch_size: int = setting(4, help="Queries (groups) per batch.")
    max_length: int | None = setting(
        None, help="Max tokens per pair (default: the base's record, else 256)."
    )
    first_stages: tuple[str, ...] = setting(
        ("bm25",),
        help="Negatives from: bm25, an index dir, or a TREC run; repeat to mix.",
        flags=("--first-stage",),
    )
    depth: int = setting(100, help="Negatives from each first stage's top DEPTH.")
    pairs_per_forward: int = setting(16, help="Pairs per forward chunk (0: the whole batch).")
    head_lr_scale: float = setting(20.0, help="The new head's learning rate is lr times this.")
    attention_dropout: float | None = setting(
        0.0,
        help="Attention-probability dropout in training (None, -1 on the command line: the "
        "model's own).",
        parse=negative_is_none,
    )
    teacher_weight: float = setting(
        0.0, help="Weight of the first stages' fused scores in the LCE target (0: off)."
    )
    teacher_temperature: float = setting(0.1, help="Softmax temperature of the teacher's scores.")
    dev_depth: int = setting(
        RERANK_DEPTH,
        help="Re-ranking depth of the dev check: search's, whose interpolation weight it chooses.",
    )
    pretrain_queries: int | str = setting(
        AUTO,
        help="First pre-train on this many label-free corpus pseudo-pairs (titles or "
        "sentences as queries): auto (1600 where the corpus gives 200 or more, else "
        "off), a number, or 0 (off).",
        cli_type=str,
        parse=int_or_word,
    )

    def checks(self) -> list[Check]:
        pretrain = self.pretrain_queries
        return [
            *super().checks(),
            (
                bool(self.first_stages) or self.negatives_file is not None,
                "first_stages",
                "first_stages: give at least one first stage (or a negatives_file)",
            ),
            at_least("depth", self.depth, 1),
            at_least("dev_depth", self.dev_depth, 1),
            at_least("n_negatives", self.n_negatives, 1),
            at_least("pairs_per_forward", self.pairs_per_forward, 0),
            at_least("max_length", self.max_length, 8),
            above_zero("head_lr_scale", self.head_lr_scale),
            within("attention_dropout", self.attention_dropout, 0, 1, open_high=True),
            within("teacher_weight", self.teacher_weight, 0, 1),
            above_zero("teacher_temperature", self.teacher_temperature),
            (
                self.teacher_weight == 0 or self.loss == "lce",
                "teacher_weight",
                "a teacher (teacher_weight > 0) needs the lce loss",
            ),
            (
                pretrain == AUTO or isinstance(pretrain, int),
                "pretrain_queries",
                f"pretrain_queries must be 'auto' or a number >= 0, got {pretrain!r}",
            ),
            at_least("pretrain_queries", pretrain if isinstance(pretrain, int) else None, 0),
        ]


@dataclass(repr=False)
class DistillConfig(DotConfig):
    """A distillation run (``dotcat train distill``; :mod:`dotcat.training.recipes.distill`):
    a :class:`DotConfig` (``base`` is the student) plus the teacher.

    The defaults differ from ``train dot``'s where distillation measured better: negatives
    from the student's own top 30, the documents it confuses most, which a teacher can grade
    without calling a false negative irrelevant (SciFact dev nDCG@10 0.7992 against 0.7898
    for BM25's ranks 10-100); GradCache by default (the same gradients in 3.9 GiB of RAM
    instead of 17.5 at batch 32 with 4 negatives of 256 tokens, at the same step time); and
    InfoNCE added at weight 1 (dev 0.8032 against 0.7930 without).
    """

    recipe: ClassVar[str] = "distill"

    out_dir: str | Path = setting(help="Where the distilled BERT_DOT goes.", argument=True)
    check: bool = setting(False, help="No held-out check (its dev split chooses).", cli=False)
    check_folds: int = setting(5, help="Not used.", cli=False)
    base: str = setting(
        "default", help="BERT_DOT to start from: dir, hub name, 'default'.", flags=("--student",)
    )
    n_negatives: int = setting(4, help="Hard negatives (margins) per query.")
    negatives: str = setting(
        "dense", help="Hard negatives: dense (the student's own) or bm25.", choices=NEGATIVE_SOURCES
    )
    window: tuple[int, int] = window_setting((0, 30))
    cache_chunk_size: int | None = cache_chunk_setting(16)
    teacher: str | Path = setting(
        "", help="The BERT_CAT teacher (a train cat output); bm25: BM25 + dense.", cli_type=str
    )
    distill_loss: str = setting(
        "margin-mse", help="margin-mse (Hofstätter et al.) or kl.", flags=("--loss",)
    )
    contrastive_weight: float = setting(
        1.0, help="Weight of in-batch InfoNCE on the labels (0: none)."
    )
    kl_temperature: float = setting(1.0, help="Temperature of the kl loss.")
    teacher_alpha: float | None = auto_setting(
        "Cross-encoder share of the teacher score; None: its dev weight (1 when it "
        "records none); 0: the dense model alone teaches."
    )
    teacher_dense: str | None = setting(
        None, help="BERT_DOT mixed into the teacher (default: the student)."
    )
    teacher_precision: str = setting("auto", help=PRECISION_HELP, choices=PRECISIONS)
    teacher_scale: float | None = auto_setting(
        "Factor on the teacher's scores; None: to the student's spread; 1: raw."
    )

    def check_files(self) -> None:
        super().check_files()
        if not is_lexical(self.teacher):
            check_model(self.teacher, cross_encoder=True)
        if self.teacher_dense is not None:
            check_model(self.teacher_dense)

    def checks(self) -> list[Check]:
        return [
            *super().checks(),
            (
                bool(str(self.teacher)),
                "teacher",
                "distillation needs a teacher cross-encoder (teacher)",
            ),
            one_of("distill_loss", self.distill_loss, DISTILL_LOSSES, self.recipe),
            (
                self.n_negatives >= 1,
                "n_negatives",
                "distillation needs n_negatives >= 1 (a margin each)",
            ),
            (
                self.negatives != "none" or self.negatives_file is not None,
                "negatives",
                "distillation needs hard negatives (negatives dense or bm25)",
            ),
            at_least("contrastive_weight", self.contrastive_weight, 0),
            above_zero("kl_temperature", self.kl_temperature),
            within("teacher_alpha", self.teacher_alpha, 0, 1),
            (
                self.teacher_scale is None or 0 < self.teacher_scale < math.inf,
                "teacher_scale",
                f"teacher_scale must be a finite number > 0, got {self.teacher_scale}",
            ),
            *precision_checks("teacher_precision", self.teacher_precision, str(self.device)),
            (
                self.loss == "contrastive",
                "loss",
                f"the loss added to distillation is contrastive, got {self.loss!r}",
            ),
        ]

    def applies(self) -> list[Applies]:
        kl = self.distill_loss == "kl"
        return [(("margin",), False, "does not apply to distillation (its losses have none)"),
                (("kl_temperature",), kl, "applies only with distill_loss kl")]  # fmt: skip


@dataclass(frozen=True, repr=False)
class AdaptConfig(Settings):
    """What ``dotcat adapt`` does (:mod:`dotcat.training.adapt`).

    Not a :class:`TrainConfig`: it names the corpus and the model to adapt, and a time budget,
    and its training step derives the :class:`DotConfig` (or, with a teacher,
    :class:`DistillConfig`) of one epoch on the planned pseudo-queries. Its fields are recorded
    in ``dotcat_adapt.json`` and must match on resume.
    """

    corpus: Path = setting(help="Your corpus: BEIR dir, JSONL or TSV.", argument=True)
    out_dir: Path = setting(help="Where the adapted BERT_DOT goes.", argument=True)
    model: str = setting("default", help="BERT_DOT to adapt: dir, hub name, 'default'.")
    budget_minutes: float = setting(
        45.0, help="Wall-clock budget; sets how many pseudo-queries are used."
    )
    max_queries: int | None = setting(None, help="At most this many.")
    prefer: str = setting(
        "title",
        help="Pseudo-queries from titles first (title) or sentences first.",
        choices=PSEUDO_QUERY_SOURCES,
    )
    dense_negatives: bool = setting(
        True, help="Also mine negatives with the model (when the budget allows)."
    )
    teacher: str | None = setting(
        None,
        help="A BERT_CAT whose scores label the pseudo pairs (Margin-MSE, GPL), or bm25 "
        "(BM25 + the model's score); default: contrastive on the pseudo pairs.",
    )
    teacher_alpha: float | None = auto_setting(
        "Cross-encoder share of the teacher score; None: its record."
    )
    teacher_precision: str = setting("auto", help=PRECISION_HELP, choices=PRECISIONS)
    n_negatives: int = setting(
        DISTILL_NEGATIVES, help="With a teacher: negatives per pseudo-query (a margin each)."
    )
    # GPL's loss, Margin-MSE alone; the InfoNCE train distill adds was chosen on labels.
    contrastive_weight: float = setting(
        0.0, help="With a teacher: weight of in-batch InfoNCE added to it."
    )
    batch_size: int = setting(32, help="Queries per batch.")
    # GPL's rate, not train dot's 1e-4: on SciFact dev, 3 seeds each, 0.6976 against 0.6886.
    lr: float = setting(2e-5, help="Peak learning rate (AdamW).")
    cache_chunk: int | None = setting(16, help="GradCache chunk size (0: off).", parse=zero_is_none)
    max_length: int = setting(256, help="Max document tokens.")
    query_max_length: int = setting(64, help="Max query tokens.")
    temperature: float | None = setting(None, help=TEMPERATURE_HELP)
    seed: int = setting(42, help="Random seed.")
    bf16: str = setting("auto", help=BF16_HELP, choices=BF16_SETTINGS)
    device: str = setting("auto", help=DEVICE_HELP)
    resume: bool = setting(False, help="Continue an interrupted run.")
    overwrite: bool = setting(False, help="Replace an earlier run in OUT_DIR.")
    show_progress: bool = setting(True, help="Progress bars.", cli=False)

    def check_files(self) -> None:
        """The corpus, the output folder and the models, checked without loading them."""
        check_inputs(self.corpus, self.out_dir, self.model)
        if self.teacher is not None and not is_lexical(self.teacher):
            check_model(self.teacher, cross_encoder=True)

    def checks(self) -> list[Check]:
        return [
            above_zero("budget_minutes", self.budget_minutes),
            at_least("max_queries", self.max_queries, MIN_ADAPT_QUERIES),
            within("teacher_alpha", self.teacher_alpha, 0, 1),
            (
                self.batch_size >= 2,
                "batch_size",
                f"batch_size must be >= 2 (in-batch negatives), got {self.batch_size}",
            ),
            at_least("n_negatives", self.n_negatives, 1),
            at_least("contrastive_weight", self.contrastive_weight, 0),
            at_least("max_length", self.max_length, 2),
            at_least("query_max_length", self.query_max_length, 2),
            at_least("cache_chunk", self.cache_chunk or None, 1),
            *device_checks("device", str(self.device)),
            *precision_checks("teacher_precision", self.teacher_precision, str(self.device)),
        ]
