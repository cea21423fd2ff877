"""Index building: contents, exact search, atomicity, refusal to clobber, manifest checks."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.index import DenseIndex, IndexConfig, Manifest, build_index, check_encoder, faiss_index
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.search.pipeline import PipelineConfig, SearchPipeline

pytestmark = pytest.mark.kernels  # its results can depend on the CPU (Makefile: test-kernels)


@pytest.fixture(scope="module")
def tiny_encoder(tiny_bert_dir):
    return BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), similarity="cos", pooling="mean"))


def test_build_writes_complete_index(tiny_docs, tiny_beir_dir, tiny_encoder, tmp_path):
    out = tmp_path / "idx"
    manifest = build_index(tiny_beir_dir, out, tiny_encoder, show_progress=False)
    assert sorted(p.name for p in out.iterdir()) == [
        "bm25",  # built by default, as `dotcat index` does
        "docstore.sqlite",
        "index.faiss",
        "manifest.json",
    ]
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk["documents"]["count"] == len(tiny_docs) == manifest.documents["count"]
    assert on_disk["encoder"]["fingerprint"] == tiny_encoder.fingerprint
    assert on_disk["encoder"]["pooling"] == "mean" and on_disk["encoder"]["similarity"] == "cos"
    assert on_disk["encoder"]["dim"] == 32
    assert len(on_disk["corpus"]["sha256"]) == 64
    # no build folder and no lock file left beside the index
    beside = sorted(p.name for p in out.parent.iterdir() if p.name != "tiny_beir")
    assert beside == ["idx"]  # the lock file goes when the lock is released


def test_every_document_finds_itself_first(
    tiny_docs, tiny_beir_dir, tiny_encoder, tmp_path, caplog
):
    out = tmp_path / "idx"
    build_index(tiny_beir_dir, out, tiny_encoder, show_progress=False)
    index = DenseIndex(out, device="cpu", search_params={"nprobe": 8})
    assert "nprobe does nothing on a FAISS Flat index" in caplog.text  # not silently ignored
    texts = [f"{d['title']} {d['text']}" for d in tiny_docs]
    scores, positions = index.search(tiny_encoder.encode_documents(texts), k=3)
    ids = index.doc_ids(positions[:, 0])
    assert [ids[p] for p in positions[:, 0]] == [d["_id"] for d in tiny_docs]
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-4)  # cosine of a vector with itself
    stored = index.documents([int(positions[2, 0])])[int(positions[2, 0])]
    assert stored.title == tiny_docs[2]["title"] and stored.text == tiny_docs[2]["text"]


def test_an_interrupted_build_keeps_the_old_index_and_resumes_without_encoding_again(
    tiny_docs, tiny_beir_dir, tiny_encoder, tmp_path, monkeypatch
):
    out = tmp_path / "idx"
    build_index(tiny_beir_dir, out, tiny_encoder, show_progress=False)
    before = (out / "manifest.json").read_bytes()
    straight = faiss_index_vectors(out)

    real_add = faiss_index.add_vectors

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # the user presses Ctrl-C after the encoding

    monkeypatch.setattr(faiss_index, "add_vectors", crash)
    with pytest.raises(KeyboardInterrupt):
        build_index(tiny_beir_dir, out, tiny_encoder, overwrite=True, show_progress=False)
    assert (out / "manifest.json").read_bytes() == before  # the old index is untouched
    assert len(DenseIndex(out, device="cpu")) == len(tiny_docs)
    assert (tmp_path / ".idx.building" / "chunks.jsonl").is_file()  # kept for the resume

    monkeypatch.setattr(faiss_index, "add_vectors", real_add)
    calls = []
    encode = tiny_encoder.encode_documents
    monkeypatch.setattr(
        tiny_encoder, "encode_documents", lambda *a, **k: calls.append(1) or encode(*a, **k)
    )
    build_index(tiny_beir_dir, out, tiny_encoder, overwrite=True, show_progress=False)
    assert calls == []  # every chunk was on disk already
    np.testing.assert_array_equal(faiss_index_vectors(out), straight)
    folders = sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and p.name != "tiny_beir")
    assert folders == ["idx"]


def faiss_index_vectors(index_dir) -> np.ndarray:
    import faiss

    index = faiss.read_index(str(index_dir / "index.faiss"))
    return index.reconstruct_n(0, index.ntotal)


def test_refuses_to_clobber(tiny_beir_dir, tiny_encoder, tmp_path):
    out = tmp_path / "idx"
    build_index(tiny_beir_dir, out, tiny_encoder, show_progress=False)
    with pytest.raises(DotcatError, match="pass overwrite=True"):
        build_index(tiny_beir_dir, out, tiny_encoder, show_progress=False)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(DotcatError, match="not a dotcat index"):
        build_index(tiny_beir_dir, precious, tiny_encoder, overwrite=True, show_progress=False)
    assert (precious / "thesis.tex").read_text() == "years of work"


def test_half_written_directory_does_not_load(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "index.faiss").write_bytes(b"partial")
    with pytest.raises(DotcatError, match="not a dotcat index"):
        DenseIndex(broken)
    with pytest.raises(DotcatError, match="no such index"):
        DenseIndex(tmp_path / "missing")


def test_manifest_version_and_files_checked(tiny_beir_dir, tiny_encoder, tmp_path):
    out = tmp_path / "idx"
    build_index(tiny_beir_dir, out, tiny_encoder, show_progress=False)
    raw = json.loads((out / "manifest.json").read_text())
    raw["format_version"] = 99
    (out / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(DotcatError, match="format version 99"):
        Manifest.read(out)
    raw["format_version"] = 1
    (out / "manifest.json").write_text(json.dumps(raw))
    (out / "docstore.sqlite").unlink()
    with pytest.raises(DotcatError, match="docstore"):
        Manifest.read(out)


def test_check_encoder_names_both_models(tiny_beir_dir, tiny_encoder, tmp_path):
    manifest = build_index(tiny_beir_dir, tmp_path / "idx", tiny_encoder, show_progress=False)
    other = dict(tiny_encoder.manifest_entry(), name="other-model", fingerprint="f" * 64)
    with pytest.raises(DotcatError) as err:
        check_encoder(manifest, other, tmp_path / "idx")
    message = str(err.value)
    assert tiny_encoder.manifest_entry()["name"] in message and "other-model" in message
    assert "fingerprint" in message
    check_encoder(manifest, tiny_encoder.manifest_entry(), tmp_path / "idx")  # same: accepted


def test_an_index_refuses_queries_lower_cased_otherwise(tiny_beir_dir, tiny_bert_dir, tmp_path):
    def cased(name: str, lower: bool) -> BiEncoder:
        """The tiny BERT with a cased tokenizer, lower-cased by sentence-transformers' setting."""
        out = shutil.copytree(tiny_bert_dir, tmp_path / name)
        for file, edit in (("tokenizer.json", ("normalizer", "lowercase")),
                           ("tokenizer_config.json", ("do_lower_case",))):  # fmt: skip
            data = json.loads((out / file).read_text())
            (data[edit[0]] if len(edit) == 2 else data)[edit[-1]] = False
            (out / file).write_text(json.dumps(data))
        (out / "sentence_bert_config.json").write_text(json.dumps({"do_lower_case": lower}))
        module = {"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"}
        (out / "modules.json").write_text(json.dumps([module]))
        return BiEncoder.load(EncoderConfig(model=str(out)))

    manifest = build_index(
        tiny_beir_dir, tmp_path / "idx", cased("lower", True), show_progress=False
    )
    assert manifest.encoder["do_lower_case"] is True
    given = cased("cased", False).manifest_entry()
    with pytest.raises(DotcatError, match="do_lower_case: index True vs given False"):
        check_encoder(manifest, given, tmp_path / "idx")
    del manifest.encoder["do_lower_case"]  # an index written before: not checked
    check_encoder(manifest, given, tmp_path / "idx")


@pytest.mark.parametrize("spec", ["IVF4,Flat", "HNSW16"])
def test_factory_specs_build_and_search(tiny_docs, tiny_beir_dir, tiny_encoder, tmp_path, spec):
    out = tmp_path / "idx"
    config = IndexConfig(faiss_spec=spec, device="cpu")
    manifest = build_index(tiny_beir_dir, out, tiny_encoder, config, show_progress=False)
    assert manifest.faiss["spec"] == spec
    index = DenseIndex(out, device="cpu")
    vec = tiny_encoder.encode_documents([f"{tiny_docs[0]['title']} {tiny_docs[0]['text']}"])
    _, positions = index.search(vec, k=2)
    assert index.doc_ids(positions[0])[positions[0][0]] == "d1"


def test_too_few_vectors_for_ivf_is_a_clear_error(tiny_beir_dir, tiny_encoder, tmp_path):
    config = IndexConfig(faiss_spec="IVF4096,Flat", device="cpu")
    with pytest.raises(DotcatError, match="IVF4096 .*needs at least 4096 training vectors, the"):
        build_index(tiny_beir_dir, tmp_path / "idx", tiny_encoder, config, show_progress=False)
    assert not (tmp_path / "idx").exists()


def test_bad_faiss_spec(tiny_beir_dir, tiny_encoder, tmp_path):
    config = IndexConfig(faiss_spec="IVFbanana", device="cpu")
    with pytest.raises(DotcatError, match="invalid FAISS spec 'IVFbanana'"):
        build_index(tiny_beir_dir, tmp_path / "idx", tiny_encoder, config, show_progress=False)


def test_prefixes_are_recorded_and_restored_at_search(tiny_beir_dir, tiny_bert_dir, tmp_path):
    from dotcat.search.dense import DenseRetriever

    config = EncoderConfig(
        model=str(tiny_bert_dir), query_prefix="query: ", document_prefix="passage: "
    )
    manifest = build_index(tiny_beir_dir, tmp_path / "idx", config, show_progress=False)
    assert manifest.encoder["query_prefix"] == "query: "
    retriever = DenseRetriever(tmp_path / "idx", device="cpu")
    assert retriever.encoder.manifest_entry()["query_prefix"] == "query: "
    assert retriever.encoder.manifest_entry()["document_prefix"] == "passage: "


def test_thin_ivf_lists_warn_once_in_our_words(tiny_encoder, tmp_path, caplog, capfd):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": f"text {i}"}) + "\n" for i in range(200))
    )
    config = IndexConfig(faiss_spec="IVF8,Flat", device="cpu")  # 200 < 39 * 8
    with caplog.at_level("WARNING", logger="dotcat.index.faiss_index"):
        build_index(corpus, tmp_path / "idx", tiny_encoder, config, show_progress=False)
    warnings = [r.getMessage() for r in caplog.records if "is thin" in r.getMessage()]
    assert len(warnings) == 1 and "IVF5 (one list per 39 vectors) would suit" in warnings[0]
    assert "WARNING clustering" not in capfd.readouterr().err  # FAISS's own C++ line


def test_text_in_a_script_the_encoder_does_not_read_is_said(tiny_bert_dir, tmp_path, caplog):
    import shutil

    model = shutil.copytree(tiny_bert_dir, tmp_path / "english")
    (model / "README.md").write_text("---\nlanguage: en\nlicense: mit\n---\n# A model\n")
    japanese = [{"_id": f"j{i}", "text": f"東京は日本の首都です。文書{i}番。"} for i in range(4)]
    english = [{"_id": f"e{i}", "text": f"Tokyo is the capital of Japan ({i})."} for i in range(4)]
    config = IndexConfig()
    for name, docs in (("ja", japanese), ("en", english), ("en-card-missing", japanese)):
        if name == "en-card-missing":
            (model / "README.md").unlink()  # no model card: nothing known, nothing said
        caplog.clear()
        build_index(docs, tmp_path / name, EncoderConfig(model=str(model)), config,
                    show_progress=False)  # fmt: skip
        said = "in scripts other than Latin, and the encoder" in caplog.text
        assert said == (name == "ja"), name
        # Without dev queries, a hybrid search weighs the unread dense side 0.3, not 0.5.
        fusion = SearchPipeline(tmp_path / name, PipelineConfig()).fusion
        assert (fusion.method, fusion.weight) == ("linear", 0.3 if name == "ja" else 0.5), name
