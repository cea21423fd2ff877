"""Tokenizing documents of any size only as far as the question needs.

A fast tokenizer asked to truncate at 256 tokens still tokenizes the whole text first (and
holds every token's id, offsets and masks): a 50 MB document costs tens of seconds and
gigabytes to give its first 256 tokens, and the Python signal handlers (Ctrl-C, SIGTERM) wait
until the call returns. So a long text is tokenized by its *head*: its first characters, cut
at white space. Tokenizers split words at white space before anything else (BERT's WordPiece,
SentencePiece's metaspace, byte-level BPE), so a head cut there tokenizes into exactly the
text's first tokens; a head too short for the question (or with no white space to cut at) is
grown until it answers it, the whole text at worst.

- :func:`head`: the first characters of a text, cut at white space.
- :func:`count_upto`: a text's token count when it is at most a limit, else some count past
  the limit, tokenizing only a head that holds the answer.
- :func:`truncated`: what a tokenizer that truncates at ``max_tokens`` gives, each long text
  tokenized only as far as its first ``max_tokens`` tokens need.
- :class:`PairTemplate`: where a tokenizer puts its special tokens around a (query, doc) pair.
- :func:`pieces`: a long text's successive heads, for tokenizing a whole document a piece at a
  time (offsets shifted by the piece's start), with Ctrl-C and progress between pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dotcat.errors import DotcatError

#: Characters a head starts with per token wanted: a token of English WordPiece spans ~4-5
#: characters, a rare word's pieces fewer; a head too short is grown (x4) until it answers.
CHARS_PER_TOKEN = 8
#: What a head is cut before: white space, ASCII and the common Unicode spaces.
SPACES = " \t\n\r\f\v\u00a0\u2028\u2029\u3000"
#: Characters of one piece of a whole document tokenized piece by piece (about 0.1-0.5 s of
#: tokenizing: Ctrl-C is honoured between two).
PIECE_CHARS = 200_000


def head(text: str, chars: int) -> str:
    """``text`` itself if it has at most ``chars`` characters, else its first ``chars`` or
    fewer, cut just before white space (:data:`SPACES`) so that no word is cut; ``""`` when
    its first ``chars`` characters hold no white space (one word)."""
    if len(text) <= chars:
        return text
    return text[: max(0, max(text.rfind(space, 0, chars + 1) for space in SPACES))]


def count_upto(count: Callable[[str], int], text: str, limit: int) -> int:
    """``count(text)`` when that is at most ``limit``, else a number over ``limit``; only a
    head of ``text`` is counted (at least ``CHARS_PER_TOKEN`` characters a token, grown x4
    until it holds more than ``limit`` tokens or is the whole text).

    ``count`` is a tokenizer's token count of a string (special tokens included or not, as
    the caller decides): a head's count is never more than the whole text's.
    """
    chars = max(64, CHARS_PER_TOKEN * (limit + 1))
    while True:
        piece = head(text, chars)
        n = count(piece) if piece else 0
        if n > limit or len(piece) == len(text):
            return n
        chars *= 4


def truncated(
    tokenize: Callable[[list[str]], Sequence[Sequence[int]]], texts: Sequence[str], max_tokens: int
) -> list[Sequence[int]]:
    """``tokenize(texts)`` as a tokenizer that truncates at ``max_tokens`` gives it, long
    texts tokenized by their heads: a head that gave fewer than ``max_tokens`` (fewer
    characters a token than :data:`CHARS_PER_TOKEN`) is grown x4 and tokenized again.

    ``tokenize`` takes a list of strings and returns each one's token ids, truncated at
    ``max_tokens`` (special tokens included, or not, as its caller decides).
    """
    chars = max(64, CHARS_PER_TOKEN * max_tokens)
    heads = [head(t, chars) for t in texts]
    ids = list(tokenize(heads))
    short = [
        i for i, h in enumerate(heads)
        if len(h) < len(texts[i]) and (not h or len(ids[i]) < max_tokens)
    ]  # fmt: skip
    while short:
        chars *= 4
        again = [head(texts[i], chars) for i in short]
        for i, got in zip(short, tokenize(again), strict=True):
            ids[i] = got
        short = [
            i for i, h in zip(short, again, strict=True)
            if len(h) < len(texts[i]) and (not h or len(ids[i]) < max_tokens)
        ]  # fmt: skip
    return ids


def pieces(text: str, chars: int = PIECE_CHARS) -> Iterator[tuple[int, str]]:
    """``(start, piece)``: ``text`` in consecutive pieces of at most ``chars`` characters,
    each cut before white space (:func:`head`), so that the pieces' tokens, offsets shifted
    by ``start``, are the whole text's."""
    start = 0
    while start < len(text):
        piece = head(text[start : start + chars + 1], chars)
        if not piece:  # one word longer than a piece (or white space only at its start)
            piece = text[start : start + chars]
        yield start, piece
        start += len(piece)


class PairTemplate:
    """Where a tokenizer puts its special tokens and segment ids around a (query, doc) pair.

    Learnt once by encoding a probe pair, so BERT (``[CLS] q [SEP] d [SEP]``, segments 0/1)
    and RoBERTa-style (``<s> q </s></s> d </s>``) tokenizers both work from token id lists.
    """

    def __init__(self, tokenizer: Any) -> None:
        first = _single_token(tokenizer, "a")
        second = _single_token(tokenizer, "b")
        encoded = tokenizer("a", "b", add_special_tokens=True, return_token_type_ids=True)
        ids = list(encoded["input_ids"])
        types = list(encoded.get("token_type_ids") or [0] * len(ids))
        try:
            i = ids.index(first)
            j = ids.index(second, i + 1)
        except ValueError as e:
            raise DotcatError(f"cannot find the pair layout of tokenizer {tokenizer!r}") from e
        self.prefix, self.middle, self.suffix = ids[:i], ids[i + 1 : j], ids[j + 1 :]
        self.prefix_types, self.middle_types = types[:i], types[i + 1 : j]
        self.suffix_types = types[j + 1 :]
        self.query_type, self.doc_type = types[i], types[j]
        self.n_special = len(self.prefix) + len(self.middle) + len(self.suffix)

    def build(self, query: list[int], doc: list[int]) -> tuple[list[int], list[int]]:
        """``(input_ids, token_type_ids)`` of one pair, special tokens included."""
        ids = self.prefix + query + self.middle + doc + self.suffix
        types = self.prefix_types + [self.query_type] * len(query) + self.middle_types
        types += [self.doc_type] * len(doc) + self.suffix_types
        return ids, types


def _single_token(tokenizer: Any, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise DotcatError(f"tokenizer {tokenizer!r} splits the probe {text!r}; unsupported")
    return int(ids[0])
