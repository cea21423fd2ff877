"""An index directory read as a corpus: the documents its store holds, in index order."""

from __future__ import annotations

import pytest

from dotcat.data import find_corpus_file, iter_corpus, load_corpus
from dotcat.data.sources import open_source
from dotcat.errors import DataFormatError, DotcatError


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_bert_dir):
    from tests.conftest import TINY_DOCS
    from tests.judging.conftest import write_corpus

    from dotcat.index import IndexConfig, build_index
    from dotcat.models import EncoderConfig

    root = tmp_path_factory.mktemp("index_source")
    corpus = write_corpus(root / "corpus.jsonl.gz", TINY_DOCS)
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(corpus, root / "index", encoder, IndexConfig(bm25=False), show_progress=False)
    return corpus, root / "index"


def test_an_index_gives_back_the_documents_it_indexed(built):
    corpus, index = built
    assert open_source(index).kind == "index"
    assert find_corpus_file(index) == index / "docstore.sqlite"
    assert list(iter_corpus(index)) == list(iter_corpus(corpus))
    loaded = load_corpus(index)
    assert loaded["id"] == [d.id for d in iter_corpus(corpus)]


def test_an_index_takes_no_folder_options_and_a_broken_store_is_one_line(built, tmp_path):
    import shutil

    from dotcat.data import CorpusOptions

    _, index = built
    with pytest.raises(DotcatError, match="--include selects files in a folder; .* is a dotcat"):
        open_source(index, CorpusOptions(include=("*.md",)))
    broken = tmp_path / "broken"
    shutil.copytree(index, broken)
    (broken / "docstore.sqlite").write_bytes(b"garbage" * 1000)
    with pytest.raises(DataFormatError, match="cannot read the document store"):
        list(iter_corpus(broken))
