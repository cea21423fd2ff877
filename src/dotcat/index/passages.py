"""Long documents as passages: the settings, and where a document's passages lie in its text.

An encoder reads at most ``max_length`` tokens; a longer document cut there would be invisible
past its first ~200 words to dense search and to re-ranking. At index time such a document is
split into overlapping passages instead (:class:`Splitter`), each encoded on its own with the
document's title in front, exactly as a whole document is encoded (:func:`document_text`), and
each kept in the doc store with its document's position and its character offsets into the
document's text. A document that fits the window stays one passage, its whole text: an index of
short passages (SciFact) is the index it was before.

Splitting (:func:`token_spans`): windows of ``window`` tokens (title and special tokens
included, so a passage is never cut by the encoder), consecutive windows sharing ``stride``
tokens (Hugging Face's ``stride`` of overflowing tokens); with ``sentence_aware``, a cut that
falls inside a sentence moves back to the last sentence end (or line break) in the window's
last :data:`SENTENCE_SLACK` of tokens, when there is one.

Whether to split (``enabled``): by default (None, "auto") a build splits every document longer
than the window when at least :data:`AUTO_LONG_SHARE` of the documents (an evenly spaced sample
of up to :data:`AUTO_SAMPLE`) are longer than :data:`AUTO_LENGTH_FACTOR` times the encoder's
max length (the median document would lose more than half its text to the cut); otherwise it
decides document by document: a document longer than ``split_over`` (:data:`SPLIT_FACTOR`)
times the max length is split (into passages of :data:`LONG_WINDOW` tokens, or the window
given), wherever it is, and the others are kept whole, one vector each, cut at the max length
as before (an index where no document is that long has no passages at all). Splitting pays
where documents are several windows long (pylib, median 2,317 tokens: dev nDCG@10 of the
hybrid +0.088); where a few long documents compete with many short ones, a document's best of
many passages outscores short documents by chance (MaxP's length bias: faq -0.016, pydoc
-0.015 when every document longer than the window is split). ``split_over=2`` splits every
document past two windows and ranks them by ``lead`` (:mod:`dotcat.search.aggregation`): in a
folder of notes with mid-length documents, a passage anywhere in them is found; on collections
answered by a document's first window it cost up to 0.008 (eval/studies/length_bias), which
is why sixteen stays the default. ``True`` and ``False`` force the choice.

At search time documents are ranked by their passages' scores (:data:`AGGREGATIONS`; Dai and
Callan, "Deeper Text Understanding for IR with Contextual Neural Language Modeling", SIGIR
2019): ``maxp``, a document's best passage; ``firstp``, its first passage only (what
truncation ranks by); ``lead``, its first passage or a later one less a margin; ``sum``, the sum
of its best ``aggregate_top`` passages; ``auto`` (the default), ``lead`` where documents past
fewer than :data:`SPLIT_FACTOR` windows were split one by one, else ``maxp``.

Documents of any size: whether a document fits a window is counted on a head of its text only
as long as the answer needs (:func:`dotcat.models.tokens.count_upto`), never on the whole of a
50 MB file; a long document is split from its tokens' offsets, tokenized a piece at a time
(:func:`dotcat.models.tokens.pieces`: Ctrl-C is honoured between pieces, and a bar shows the
progress through a document of millions of characters).

Nothing here imports torch or transformers: the tokenizer is handed in, so the command line
can check these settings before any model loads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dotcat.errors import DotcatError, SettingError
from dotcat.index.docstore import DocStore, document_text
from dotcat.models.tokens import count_upto, pieces
from dotcat.options import AGGREGATIONS, Applies, Check, Settings, at_least, setting
from dotcat.progress import progress_bar

__all__ = ["AGGREGATIONS", "PassageConfig", "Splitter", "token_spans"]

#: A sentence-aware cut looks this far back from the window's end (a share of the window).
SENTENCE_SLACK = 0.2
#: Where a sentence ends: . ! ? (closing quotes or brackets may follow) then white space, or a
#: line break. The match's end is where the next sentence starts.
SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+|\n\s*")
#: The default window (tokens), or the encoder's max length where shorter. Chosen on dev:
#: 128/32 above 256/64 for dense and the hybrid on both
#: collections where the default splits (SciFact, pylib); all-MiniLM-L6-v2 was trained on
#: 128-token inputs.
DEFAULT_WINDOW = 128
#: The default overlap of consecutive passages, as a share of the window (32 of 128 tokens).
DEFAULT_STRIDE_SHARE = 0.25
#: A cut inside a word moves to the word's start, at most this many tokens away.
WORD_REACH = 16
#: ``enabled=None`` splits when at least this share of the documents is longer than
#: :data:`AUTO_LENGTH_FACTOR` times the encoder's max length.
AUTO_LONG_SHARE = 0.5
AUTO_LENGTH_FACTOR = 2
#: ... counted on an evenly spaced sample of this many documents (all of a smaller corpus).
AUTO_SAMPLE = 1000
#: A document longer (characters) gets its own progress bar while it is tokenized.
LONG_TEXT = 1_000_000
#: The default ``split_over``: elsewhere a document is split on its own when longer than this
#: many times the max length (a cut would drop over nine tenths of it).
SPLIT_FACTOR = 16
#: ... into passages of this many tokens, or the encoder's max length where shorter.
LONG_WINDOW = 256


@dataclass(frozen=True, repr=False)
class PassageConfig(Settings):
    """How an index splits long documents into passages (recorded in its manifest).

    Attributes:
        enabled: split documents longer than the window; False: one vector per document, cut at the
            encoder's ``max_length`` (the layout of indexes built before passages); None: split when
            most documents are more than twice the max length (see the module docstring).
        window: tokens per passage, the title and the encoder's special tokens included;
            None: :data:`DEFAULT_WINDOW`, or the encoder's ``max_length`` where shorter. At
            most ``max_length``.
        stride: tokens shared by consecutive passages of a document (0: none; None:
            :data:`DEFAULT_STRIDE_SHARE` of the window).
        sentence_aware: move a cut back to a sentence end within the window's last 20%.
        split_over: where documents are split one by one (``enabled=None``, most documents
            short), those longer than this many times the max length are split.
    """

    enabled: bool | None = setting(
        None,
        help="Split documents longer than the encoder's window into passages (--no-passages: "
        "one vector per document, cut at the window; default: split when at least half the "
        "documents are more than twice as long as the window).",
        flags=("--passages/--no-passages",),
    )
    window: int | None = setting(
        None,
        help="Tokens per passage, title included (default: 128, or the encoder's max length "
        "if shorter).",
        flags=("--passage-window",),
    )
    stride: int | None = setting(
        None,
        help="Tokens shared by consecutive passages of a document (default: a quarter of the "
        "window).",
        flags=("--passage-stride",),
    )
    sentence_aware: bool = setting(
        True, help="End a passage at a sentence end found in its last 20% of tokens."
    )
    split_over: int = setting(
        SPLIT_FACTOR,
        help="Where most documents are short, split those longer than this many windows (2: "
        "every one past twice the window, its documents then ranked by the lead rule; "
        "docs/passages.md).",
    )

    def __post_init__(self) -> None:
        self.validate()

    def checks(self) -> list[Check]:
        half = self.window is None or self.stride is None or self.stride <= self.window // 2
        return [
            at_least("window", self.window, 8),
            at_least("stride", self.stride, 0),
            at_least("split_over", self.split_over, 1),
            (
                half,
                "stride",
                f"stride {self.stride} must be at most half the window ({self.window})",
            ),
        ]

    def applies(self) -> list[Applies]:
        return [
            (("window", "stride", "sentence_aware"), self.enabled is not False,
             "does not apply without passages (documents cut at the encoder's maximum length)"),
            (("split_over",), self.enabled is None,
             "applies where the build decides (neither --passages nor --no-passages)"),
        ]  # fmt: skip

    def resolved(self, max_length: int) -> PassageConfig:
        """These settings for an encoder of ``max_length`` tokens (the window filled in).

        Raises:
            DotcatError: a window longer than the encoder reads, or a stride over half of it.
        """
        window = self.window or min(DEFAULT_WINDOW, max_length)
        if window > max_length:
            raise SettingError(
                "window", f"window {window} is longer than the encoder's max length {max_length}"
            )
        stride = int(DEFAULT_STRIDE_SHARE * window) if self.stride is None else self.stride
        return PassageConfig(self.enabled, window, stride, self.sentence_aware, self.split_over)

    def to_json(self) -> dict[str, Any]:
        """The manifest's record of the settings (``window``, ``stride``, ``sentence_aware``)."""
        return {k: v for k, v in asdict(self).items() if k not in ("enabled", "split_over")}

    @classmethod
    def from_manifest(cls, entry: dict[str, Any] | None) -> PassageConfig:
        """The settings an index was built with (an index without passages: disabled; its
        per-document rule, if any: :func:`split_longer_than`)."""
        if not entry:
            return cls(enabled=False)
        return cls(True, entry["window"], entry["stride"], entry["sentence_aware"])


def split_longer_than(entry: dict[str, Any] | None) -> int | None:
    """The per-document rule an index's manifest records (None: every document longer than
    the window was split, or none)."""
    return (entry or {}).get("split_longer_than")


def token_spans(
    offsets: Sequence[tuple[int, int]], text: str, budget: int, stride: int, sentence_aware: bool
) -> list[tuple[int, int]]:
    """Split a text's tokens into windows: ``(first token, stop token)`` pairs.

    Args:
        offsets: each token's ``(start, end)`` characters in ``text`` (pairs, or an
            ``(n, 2)`` integer array: what :class:`Splitter` gives).
        budget: tokens per window.
        stride: tokens each window shares with the one before it.
        sentence_aware: a cut inside a sentence moves back to the last sentence end in the
            window's last :data:`SENTENCE_SLACK` of tokens (:data:`SENTENCE_END`), if any.

    Cuts fall between words where one is near (:data:`WORD_REACH` tokens): a word cut into
    sub-word pieces would be read as other tokens. Every token is in at least one window, and
    each window begins after the one before it.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    n = len(offsets)
    if n == 0:
        return [(0, 0)]
    budget = max(1, budget)
    spans: list[tuple[int, int]] = []
    starts = offsets[:, 0]
    first = 0
    while True:
        stop = min(first + budget, n)
        if stop < n and sentence_aware:
            stop = _sentence_cut(text, offsets, starts, first, stop, budget)
        if stop < n:
            stop = _word_start(offsets, stop, first + 1, -1)
        spans.append((first, stop))
        if stop >= n:
            return spans
        first = _word_start(offsets, max(stop - stride, first + 1), stop, +1)


def _word_start(offsets: np.ndarray, at: int, limit: int, step: int) -> int:
    """``at`` moved by ``step`` (-1: back, +1: on, never past ``limit``) to a token that begins
    a word (white space before it), at most :data:`WORD_REACH` tokens; ``at`` if none."""
    i = at
    for _ in range(WORD_REACH):
        if offsets[i][0] > offsets[i - 1][1]:
            return i
        if i == limit:
            break
        i += step
    return at


def _sentence_cut(
    text: str, offsets: np.ndarray, starts: np.ndarray, first: int, stop: int, budget: int
) -> int:
    """The window's stop token moved back to just after the last sentence end in its last
    :data:`SENTENCE_SLACK` of tokens; ``stop`` itself where there is none."""
    low = max(first + 1, stop - math.ceil(SENTENCE_SLACK * budget))
    begin, end = offsets[low][0], starts[stop]  # the next window would start at ``stop``
    ends = [m.end() for m in SENTENCE_END.finditer(text, begin, end + 1) if m.end() <= end]
    if not ends:
        return stop
    cut = int(np.searchsorted(starts[low : stop + 1], ends[-1])) + low
    return cut if first < cut <= stop else stop


class Splitter:
    """Where each document's passages lie, for one encoder (its tokenizer, prefix, length).

    Args:
        tokenizer: the encoder's Hugging Face tokenizer (a fast one: offsets are needed).
        config: the settings, with the window filled in (:meth:`PassageConfig.resolved`).
        prefix: the encoder's document prefix (it takes room in every window).
        lowercase: the encoder lower-cases texts before tokenizing them.
        max_length: the encoder's max length: a document longer is *long* for
            :meth:`splits` (None: the window).
        show_progress: a bar while a document over :data:`LONG_TEXT` characters is tokenized.
    """

    def __init__(
        self,
        tokenizer: Any,
        config: PassageConfig,
        prefix: str = "",
        lowercase: bool = False,
        max_length: int | None = None,
        show_progress: bool = True,
        longer_than: int | None = None,
    ) -> None:
        if config.window is None:
            raise ValueError("resolve the window first (PassageConfig.resolved)")
        if hasattr(tokenizer, "encode_batch"):  # `tokenizers` (an exported encoder's)
            tokenizer = _Offsets(tokenizer)
        if not getattr(tokenizer, "is_fast", False):
            raise DotcatError(
                "splitting documents into passages needs a fast tokenizer (character offsets); "
                "this model's is not one: build the index with passages off"
            )
        self.tokenizer = tokenizer
        self.config = config
        self.prefix = prefix
        self.lowercase = lowercase
        self.max_length = max_length or int(config.window)
        self.show_progress = show_progress
        #: Only documents longer than this many tokens are split (None: every one longer than
        #: the window): the per-document rule of ``enabled=None`` (:meth:`long_documents`).
        self.longer_than = longer_than

    @classmethod
    def for_encoder(
        cls, encoder: Any, config: PassageConfig, longer_than: int | None = None
    ) -> Splitter | None:
        """The splitter of a loaded bi-encoder (None when ``config`` is disabled; with
        ``enabled=None`` the build decides with :meth:`splits`); ``longer_than``: an index's
        per-document rule, as its manifest records it."""
        if config.enabled is False:
            return None
        resolved = config.resolved(encoder.max_length)
        return cls(encoder.tokenizer, resolved, encoder.document_prefix, encoder.lowercase,
                   encoder.max_length, longer_than=longer_than)  # fmt: skip

    def long_documents(self, window: int | None = None) -> Splitter:
        """This splitter deciding document by document: only documents longer than
        ``split_over`` times the max length are split, into passages of ``window``
        tokens (default :data:`LONG_WINDOW`, at most the max length; a window the settings
        gave is kept), a quarter of it shared."""
        size = window or min(LONG_WINDOW, self.max_length)
        stride = self.config.stride if window else int(DEFAULT_STRIDE_SHARE * size)
        config = PassageConfig(None, size, stride, self.config.sentence_aware)
        return Splitter(self.tokenizer, config, self.prefix, self.lowercase, self.max_length,
                        self.show_progress, self.config.split_over * self.max_length)  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The manifest's record: the settings, and the per-document rule where there is one."""
        out = self.config.to_json()
        if self.longer_than is not None:
            out["split_longer_than"] = self.longer_than
        return out

    def spans(self, title: str, text: str) -> list[tuple[int, int]]:
        """The ``(start, stop)`` characters of each passage of ``text``, in order.

        A document that fits the window (title, prefix and special tokens included) is one
        passage, ``(0, len(text))``: it is encoded exactly as it would be whole; so is one no
        longer than :attr:`longer_than` tokens where that is set (the encoder cuts it at its
        max length, as an index without passages does).
        """
        if self.fits(title, text) or (
            self.longer_than is not None and self.fits(title, text, self.longer_than)
        ):
            return [(0, len(text))]
        window = int(self.config.window)
        head = self._count(self.prefix + title, special=True)  # [CLS] prefix title [SEP]
        # A title longer than half the window leaves the text half of it (the encoder then
        # cuts the title's overflow from the end of each passage).
        budget = max(window - head, window // 2)
        offsets = self._offsets(text)
        stride = min(int(self.config.stride or 0), budget // 2)
        found = token_spans(offsets, text, budget, stride, self.config.sentence_aware)
        return [(int(offsets[a][0]), int(offsets[b - 1][1])) for a, b in found]

    def fits(self, title: str, text: str, window: int | None = None) -> bool:
        """Whether a document fits the window (or ``window`` tokens) whole (title, prefix and
        special tokens included)."""
        window = int(window or self.config.window)
        whole = self.prefix + document_text(title, text)
        if len(whole) + 2 <= window and len(whole.encode("utf-8")) + 2 <= window:
            return True  # (a token covers at least one byte)
        return count_upto(lambda head: self._count(head, special=True), whole, window) <= window

    def splits(self, documents: Sequence[tuple[str, str]]) -> tuple[bool, int]:
        """The ``enabled=None`` choice on a sample of ``(title, text)`` documents: whether at
        least :data:`AUTO_LONG_SHARE` of them are longer than :data:`AUTO_LENGTH_FACTOR` times
        the encoder's max length, and how many are longer than the max length (what a build
        that does not split cuts)."""
        twice = AUTO_LENGTH_FACTOR * self.max_length
        long = [(t, x) for t, x in documents if not self.fits(t, x, self.max_length)]
        longer = sum(not self.fits(title, text, twice) for title, text in long)
        return longer >= AUTO_LONG_SHARE * len(documents) and longer > 0, len(long)

    def _count(self, text: str, special: bool) -> int:
        encoded = self.tokenizer(self._cased(text), add_special_tokens=special, verbose=False)
        return len(encoded["input_ids"])

    def _offsets(self, text: str) -> np.ndarray:
        """Each token's ``(start, end)`` characters in ``text``, an ``(n, 2)`` array; a long
        text tokenized a piece at a time (:func:`dotcat.models.tokens.pieces`)."""
        parts = []
        long = len(text) > LONG_TEXT
        with progress_bar(
            total=len(text), desc="tokenizing a long document", unit="char", unit_scale=True,
            leave=False, enabled=self.show_progress and long,
        ) as bar:  # fmt: skip
            for start, piece in pieces(text):
                encoded = self.tokenizer(
                    self._cased(piece),
                    add_special_tokens=False,
                    return_offsets_mapping=True,
                    verbose=False,
                )
                found = np.asarray(encoded["offset_mapping"], dtype=np.int64).reshape(-1, 2)
                # Tokens that cover no character (some tokenizers' markers) cannot be cut at.
                parts.append(found[found[:, 1] > found[:, 0]] + start)
                bar.update(len(piece))
        return np.concatenate(parts) if parts else np.empty((0, 2), dtype=np.int64)

    def _cased(self, text: str) -> str:
        """As the encoder sees it; offsets stay valid only where lower-casing keeps lengths."""
        lower = text.lower() if self.lowercase else text
        return lower if len(lower) == len(text) else text


class _Offsets:
    """A ``tokenizers.Tokenizer`` called as :class:`Splitter` calls transformers' fast tokenizer
    (which runs the same ``tokenizer.json``): the same ids and character offsets."""

    is_fast = True

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __call__(self, text: str, *, add_special_tokens: bool, **_) -> dict[str, list]:
        encoded = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return {"input_ids": encoded.ids, "offset_mapping": encoded.offsets}


def store_passages(
    store: DocStore, splitter: Splitter, positions: Sequence[int], batch: dict, pid: int
) -> int:
    """Split a batch of documents (``title`` and ``text`` lists, at ``positions`` in the doc store)
    into the store's passages table, ids from ``pid`` on, in document order; returns the next id."""
    rows = []
    for pos, title, text in zip(positions, batch["title"], batch["text"], strict=True):
        for part, (begin, end) in enumerate(splitter.spans(title, text)):
            rows.append((pid, pos, part, begin, end))
            pid += 1
    store.add_passages(rows)
    return pid
