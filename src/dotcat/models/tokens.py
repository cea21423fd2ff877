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
- :func:`pieces`: a long text's successive heads, for tokenizing a whole document a piece at a
  time (offsets shifted by the piece's start), with Ctrl-C and progress between pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

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
