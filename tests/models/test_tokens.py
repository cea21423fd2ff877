"""Documents of any size tokenized only as far as the question needs (dotcat.models.tokens):
heads give the whole text's first tokens, counting and truncating never read a 2 MB text whole,
and a text tokenized piece by piece has the whole text's offsets."""

from __future__ import annotations

import numpy as np
import pytest

from dotcat.index.passages import PassageConfig, Splitter
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.models.tokens import count_upto, head, pieces, truncated

#: Texts of every shape a head must not change the first tokens of: prose, long rare words
#: (several WordPiece pieces each), one word over the tokenizer's word cap, accents and CJK
#: (a token per character), white space of every kind.
TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 60,
    " ".join(f"antidisestablishmentarianism{i}zyx" for i in range(300)),
    "x" * 5000 + " tail words here",
    "Café naïve résumé " * 200 + "東京大学の研究者が" * 200,
    "tabs\tand\nnew\r\nlines  and   spaces " * 200,
]
LONG = "lorem ipsum dolor sit amet consectetur " * 55_000  # ~2.1 MB


class Recording:
    """A tokenizer that records the longest text it was asked to tokenize."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.longest = 0

    def __call__(self, text, *args, **kwargs):
        texts = [text] if isinstance(text, str) else list(text)
        self.longest = max([self.longest, *(len(t) for t in texts)])
        return self.tokenizer(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert_dir)


def test_a_head_is_cut_at_white_space_and_its_tokens_begin_the_whole_text(tokenizer):
    for text in TEXTS:
        for chars in (50, 333, 1000):
            cut = head(text, chars)
            assert len(cut) <= chars and text.startswith(cut)
            whole = tokenizer(text, add_special_tokens=False)["input_ids"]
            part = tokenizer(cut, add_special_tokens=False)["input_ids"]
            if len(cut) < len(text) and text[len(cut)].isspace():
                assert whole[: len(part)] == part


def test_truncated_gives_what_truncating_the_whole_text_gives(tokenizer):
    def tokenize(batch):
        return tokenizer(batch, truncation=True, max_length=64)["input_ids"]

    assert truncated(tokenize, TEXTS, 64) == tokenize(TEXTS)


def test_count_upto_is_exact_below_the_limit_and_over_it_above(tokenizer):
    def count(text):
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    for text in TEXTS:
        n = count(text)
        assert count_upto(count, text, n) == n
        assert count_upto(count, text, n - 1) > n - 1
        assert count_upto(count, text, 100_000) == n


def test_pieces_cover_the_text_and_give_its_offsets(tokenizer):
    """(Pieces longer than any word: one word longer than a piece is cut where it is.)"""
    text = " ".join(t for t in TEXTS if "x" * 5000 not in t) * 3
    parts = list(pieces(text, 997))
    assert "".join(p for _, p in parts) == text
    assert all(start == sum(len(p) for _, p in parts[:i]) for i, (start, _) in enumerate(parts))
    whole = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    got = [
        (a + start, b + start)
        for start, piece in parts
        for a, b in tokenizer(piece, add_special_tokens=False, return_offsets_mapping=True)[
            "offset_mapping"
        ]
    ]
    assert got == [tuple(o) for o in whole["offset_mapping"]]


def test_deciding_whether_to_split_reads_a_head_of_a_2_mb_document(tokenizer):
    recorder = Recording(tokenizer)
    splitter = Splitter(recorder, PassageConfig(window=128).resolved(512), max_length=512)
    split, long = splitter.splits([("Long", LONG), ("Short", "a short note")])
    assert (split, long) == (True, 1)  # one of two is over twice the window: half, split
    assert recorder.longest < 50_000, recorder.longest  # (it read all 2.1 MB, twice)


def test_splitting_a_2_mb_document_tokenizes_it_a_piece_at_a_time(tokenizer):
    recorder = Recording(tokenizer)
    splitter = Splitter(recorder, PassageConfig(window=128).resolved(512), max_length=512)
    spans = splitter.spans("Long", LONG)
    assert recorder.longest <= 200_000, recorder.longest
    assert spans[0][0] == 0 and spans[-1][1] == len(LONG.rstrip())
    assert all(b > a for a, b in spans) and len(spans) > len(LONG) // 2000


def test_an_encoder_reads_the_head_of_a_2_mb_document_and_encodes_it_as_whole(tiny_bert_dir):
    config = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    encoder = BiEncoder.load(config)
    recorder = Recording(encoder.tokenizer)
    encoder.tokenizer = recorder
    vectors = encoder.encode_documents([LONG, "a short note"])
    assert recorder.longest < 50_000, recorder.longest
    encoder.tokenizer = recorder.tokenizer
    first = encoder.encode_documents([LONG[:20_000]])  # the same first 512 tokens
    np.testing.assert_allclose(vectors[0], first[0], atol=1e-5)
