"""Judgements out (qrels, a BEIR directory) and in (a qrels file), and `dotcat eval` on them."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.data import load_corpus, load_qrels, load_queries, write_run
from dotcat.errors import DataFormatError, DotcatError
from dotcat.judging import (
    JudgmentStore,
    QrelsConfig,
    assess_pool,
    export_beir,
    import_qrels,
    judged_qrels,
    write_qrels,
)
from dotcat.judging.config import ExportConfig

runner = CliRunner()


def _judge_some(store) -> dict[str, dict[str, int]]:
    """ann grades every pooled document of q1 and q2 by position; bob differs on two."""
    for qid in ("q1", "q2"):
        for i, entry in enumerate(store.pooled(qid)):
            store.judge(qid, entry.doc_id, "ann", i % 4)
            if i < 2:
                store.judge(qid, entry.doc_id, "bob", 3 - i % 4)
    return judged_qrels(store, QrelsConfig(assessor="ann"))


def test_qrels_in_both_layouts_read_back_the_same(pooled_store, tmp_path):
    qrels = _judge_some(pooled_store)
    assert list(qrels) == ["q1", "q2"] and qrels["q1"][pooled_store.pooled("q1")[1].doc_id] == 1
    assert write_qrels(qrels, tmp_path / "a.txt") == "trec"
    assert write_qrels(qrels, tmp_path / "a.tsv") == "beir"
    assert (tmp_path / "a.tsv").read_text().startswith("query-id\tcorpus-id\tscore\n")
    assert load_qrels(tmp_path / "a.txt") == load_qrels(tmp_path / "a.tsv") == qrels


def test_several_assessors_combine_as_asked(pooled_store):
    _judge_some(pooled_store)
    first = pooled_store.pooled("q1")[0].doc_id  # ann 0, bob 3
    assert judged_qrels(pooled_store)["q1"][first] == 0  # median of two: the lower
    assert judged_qrels(pooled_store, QrelsConfig(combine="max"))["q1"][first] == 3
    assert judged_qrels(pooled_store, QrelsConfig(assessor="bob"))["q1"] == {
        e.doc_id: 3 - i for i, e in enumerate(pooled_store.pooled("q1")[:2])
    }
    with pytest.raises(DotcatError, match="no judgements by assessor 'eve'"):
        judged_qrels(pooled_store, QrelsConfig(assessor="eve"))


def test_a_beir_export_holds_the_index_documents_and_the_judged_queries(
    pooled_store, judge_index, tmp_path
):
    qrels = _judge_some(pooled_store)
    done = export_beir(pooled_store, judge_index, tmp_path / "mine", QrelsConfig(assessor="ann"))
    assert (done.documents, done.queries) == (30, 2)
    corpus = load_corpus(tmp_path / "mine")
    assert list(corpus["id"]) == list(load_corpus(judge_index)["id"])
    assert load_queries(tmp_path / "mine", split="test") == {
        t.qid: t.text for t in pooled_store.topics() if t.qid in ("q1", "q2")
    }
    assert load_qrels(tmp_path / "mine", "test") == qrels
    record = json.loads((tmp_path / "mine" / "dotcat_judgments.json").read_text())
    assert record["assessors"] == ["ann", "bob"] and record["pools"][0]["depth"] == 5
    assert record["agreement"][0]["documents"] == 4
    with pytest.raises(DotcatError, match="exists"):
        export_beir(pooled_store, judge_index, tmp_path / "mine")


def test_an_export_overwrites_only_an_earlier_export_or_an_empty_folder(
    pooled_store, judge_index, tmp_path
):
    _judge_some(pooled_store)
    index = tmp_path / "index"
    shutil.copytree(judge_index, index)
    again = ExportConfig(overwrite=True)
    for out in (tmp_path / "mine", tmp_path / "mine", tmp_path / "empty"):
        out.mkdir(exist_ok=True)
        assert export_beir(pooled_store, index, out, export=again).documents == 30
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("precious")
    (tmp_path / "afile").write_text("hi")
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    refused = {
        index: "is or lies inside the dotcat index",
        index / "sub": "is or lies inside the dotcat index",
        tmp_path / "notes": "exists, is not empty and is not a dotcat export; refusing to touch",
        tmp_path / "afile": "is a file or a link, not a folder",
        tmp_path / "link": "is a file or a link, not a folder",
    }
    for out, message in refused.items():
        with pytest.raises(DotcatError, match=message):
            export_beir(pooled_store, index, out, export=again)
    assert (index / "manifest.json").is_file() and not (index / "sub").exists()
    assert (tmp_path / "notes" / "notes.txt").read_text() == "precious"
    assert (tmp_path / "link").is_symlink() and (tmp_path / "afile").read_text() == "hi"


def test_a_qrels_or_run_output_never_overwrites_a_judgements_file_or_an_index_file(
    pooled_store, judge_index, tmp_path
):
    _judge_some(pooled_store)
    index = tmp_path / "index"
    shutil.copytree(judge_index, index)
    before = pooled_store.path.read_bytes()
    common = ["--judgments", str(pooled_store.path)]
    for out, message in (
        (pooled_store.path, "is a SQLite database (judgements?); refusing to overwrite it"),
        (index / "docstore.sqlite", "lies inside the dotcat index"),
    ):
        result = runner.invoke(app, ["judge", "qrels", str(index), str(out), *common])
        assert result.exit_code == 2 and message in result.output, result.output
    assert pooled_store.path.read_bytes() == before
    (tmp_path / "q.tsv").write_text("q1\tdogs\n")
    for out in ("index.faiss", "new.trec"):
        args = ["search", str(index), "--queries", str(tmp_path / "q.tsv"), "--output"]
        result = runner.invoke(app, [*args, str(index / out)])
        assert result.exit_code == 2 and "lies inside the dotcat index" in result.output
    assert not (index / "new.trec").exists()
    assert runner.invoke(app, ["search", str(index), "dogs"]).exit_code == 0


def test_eval_on_an_export_equals_eval_on_the_index_and_files(
    pooled_store, judge_index, judge_pipeline, tmp_path
):
    _judge_some(pooled_store)
    export_beir(pooled_store, judge_index, tmp_path / "mine")
    write_qrels(judged_qrels(pooled_store), tmp_path / "qrels.txt")
    topics = {t.qid: t.text for t in pooled_store.topics()}
    (tmp_path / "queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in topics.items()))
    for stage in ("bm25", "dense"):
        write_run(judge_pipeline.run(topics, 20, first_stage=stage), tmp_path / f"{stage}.trec")
    runs = [str(tmp_path / "bm25.trec"), str(tmp_path / "dense.trec")]
    common = ["eval", *runs, "--json", "--baseline", "bm25.trec", "-m", "nDCG@10", "-m", "Bpref"]
    exported = runner.invoke(app, [*common, str(tmp_path / "mine")])
    own = runner.invoke(app, [*common, str(tmp_path / "qrels.txt"), "--corpus", str(judge_index),
                              "--queries", str(tmp_path / "queries.tsv")])  # fmt: skip
    assert exported.exit_code == own.exit_code == 0, exported.output + own.output
    a, b = json.loads(exported.stdout), json.loads(own.stdout)
    assert a == b
    vs = a["dense.trec"]["vs_baseline"]["measures"]["nDCG@10"]
    assert vs["diff"] == pytest.approx(
        a["dense.trec"]["aggregate"]["nDCG@10"] - a["bm25.trec"]["aggregate"]["nDCG@10"]
    )
    assert vs["significant"] == (not vs["low"] <= 0 <= vs["high"])
    assert 0 <= a["bm25.trec"]["judged@10"] <= 1


def test_judgements_of_documents_deleted_since_are_left_out_in_one_line(
    pooled_store, judge_index, tmp_path, caplog
):
    from dotcat.index.updates import delete_documents

    _judge_some(pooled_store)
    index = tmp_path / "index"
    shutil.copytree(judge_index, index)
    gone = pooled_store.pooled("q1")[1].doc_id
    delete_documents(index, [gone])
    with caplog.at_level(logging.WARNING):
        qrels = judged_qrels(pooled_store, known_docs=load_corpus(index)["id"])
    assert gone not in qrels["q1"]
    lines = [r.getMessage() for r in caplog.records if "no longer in the index" in r.getMessage()]
    assert len(lines) == 1 and f"'{gone}'" in lines[0] and lines[0].count("\n") == 0
    result = runner.invoke(app, ["judge", "export", str(index), str(tmp_path / "out"),
                                 "--judgments", str(pooled_store.path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert gone not in load_qrels(tmp_path / "out", "test")["q1"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("q9 0 d1 1", "qrels.txt:2: query-id: unknown query id 'q9'"),
        ("q1 0 d1 7", "qrels.txt:2: relevance: grade 7 is outside the scale 0-3"),
        ("q1 0 gone 1", "qrels.txt:2: docid: document 'gone' is not in the index"),
    ],
)
def test_importing_bad_qrels_names_the_line_and_saves_nothing(
    pooled_store, judge_index, tmp_path, line, message
):
    (tmp_path / "qrels.txt").write_text(f"q1 0 d2 1\n{line}\n")
    ids = load_corpus(judge_index)["id"]
    with pytest.raises(DataFormatError) as error:
        import_qrels(pooled_store, tmp_path / "qrels.txt", "ann", ids)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert pooled_store.log() == []
    result = runner.invoke(
        app,
        [
            "judge",
            "import",
            str(judge_index),
            str(tmp_path / "qrels.txt"),
            "--assessor",
            "ann",
            "--judgments",
            str(pooled_store.path),
        ],
    )
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_qrels_file_and_a_run_given_the_wrong_way_round_are_said_so(tmp_path):
    qrels, run = tmp_path / "qrels.txt", tmp_path / "run.trec"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 0\n")
    write_run({"q1": [("d1", 2.0), ("d2", 1.0)]}, run)
    for args, message in (
        (
            [qrels, qrels],
            "qrels.txt:1: expected 6 fields (qid Q0 docid rank score tag), found 4: "
            "this is a qrels file (judgements), not a run; give it last",
        ),
        (
            [run, run],
            "run.trec:1: expected 3 fields (query-id, corpus-id, score) or 4 (TREC: "
            "qid, iteration, docid, relevance), found 6: this is a TREC run (qid Q0 docid rank "
            "score tag), not qrels; the qrels go last",
        ),
        ([qrels, run], "this is a TREC run"),
    ):
        result = runner.invoke(app, ["eval", *map(str, args)])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output


def test_a_simulated_assessor_grades_the_whole_pool(pooled_store):
    first = pooled_store.pooled("q3")[0].doc_id
    count = assess_pool(pooled_store, {"q3": {first: 5}}, "qrels")
    assert count == sum(len(pooled_store.pooled(q)) for q in ("q1", "q2", "q3"))
    qrels = judged_qrels(pooled_store)
    assert qrels["q3"][first] == 3  # clipped to the scale
    assert set(qrels["q1"].values()) == {0}


@pytest.mark.kernels
def test_the_judge_commands_pool_status_and_write_qrels(judge_index, topics_file, tmp_path):
    store = tmp_path / "j.sqlite"
    result = runner.invoke(app, ["judge", "pool", str(judge_index), "--queries", str(topics_file),
                                 "--judgments", str(store), "--pool-depth", "3", "--system", "bm25",
                                 "--device", "cpu", "--precision", "fp32"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "pooled 3 queries (3 new) at depth 3 over bm25" in result.output
    # the command it says to run next judges this file, not the index's own
    assert f"dotcat serve {judge_index} --judge --judgments {store}, then" in result.output
    with JudgmentStore(store) as opened:
        doc = opened.pooled("q1")[0].doc_id
        opened.judge("q1", doc, "ann", 2)
    status = runner.invoke(app, ["judge", "status", str(judge_index), "--judgments", str(store)])
    assert "ann judged 1 of" in status.output and "q1: 1/" in status.output
    out = tmp_path / "qrels.txt"
    written = runner.invoke(app, ["judge", "qrels", str(judge_index), str(out),
                                  "--judgments", str(store)])  # fmt: skip
    assert written.exit_code == 0 and out.read_text() == f"q1 0 {doc} 2\n"


def _bm25_experiment(tmp_path, name: str, dataset: str) -> dict:
    config = tmp_path / f"{name}.toml"
    config.write_text(
        f'name = "{name}"\noutput = "{tmp_path / name}"\nbaseline = "BM25"\nk = 10\n'
        f'device = "cpu"\n\n[dataset]\n{dataset}\n\n'
        '[[systems]]\nname = "BM25"\nfirst_stage = "bm25"\n\n'
        '[[systems]]\nname = "BM25 k1 1.5"\nfirst_stage = "bm25"\nk1 = 1.5\n'
    )
    result = runner.invoke(app, ["-q", "experiment", str(config)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / name / "results.json").read_text())


@pytest.mark.kernels
def test_an_experiment_on_the_index_and_files_equals_one_on_the_export(
    pooled_store, judge_index, tmp_path
):
    _judge_some(pooled_store)
    export_beir(pooled_store, judge_index, tmp_path / "mine")
    write_qrels(judged_qrels(pooled_store), tmp_path / "qrels.txt")
    topics = {t.qid: t.text for t in pooled_store.topics()}
    (tmp_path / "queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in topics.items()))
    own = _bm25_experiment(
        tmp_path, "own", f'path = "{judge_index}"\nqueries = "{tmp_path / "queries.tsv"}"\n'
        f'qrels = "{tmp_path / "qrels.txt"}"'
    )  # fmt: skip
    exported = _bm25_experiment(tmp_path, "exported", f'path = "{tmp_path / "mine"}"')

    def figures(results: dict) -> dict:
        return {name: s["aggregate"] for name, s in results["systems"].items()}

    assert figures(own) == figures(exported) and len(figures(own)) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text(f'output = "{tmp_path}/x"\nbaseline = "b"\n[dataset]\npath = "{judge_index}"\n'
                   f'queries = "{tmp_path / "queries.tsv"}"\n[[systems]]\nname = "b"\n'
                   'first_stage = "bm25"\n')  # fmt: skip
    result = runner.invoke(app, ["experiment", str(bad)])
    assert result.exit_code == 2 and "give `queries` and `qrels` together" in result.output


def test_rerank_reads_the_documents_from_an_index(judge_index, judge_pipeline, tiny_cat_dir,
                                                  topics_file, tmp_path):  # fmt: skip
    from dotcat.data import read_run

    topics = {"q1": "which animals were domesticated from wolves", "q2": "how do cells make energy"}
    write_run(judge_pipeline.run(topics, 10, first_stage="bm25"), tmp_path / "bm25.trec")
    result = runner.invoke(app, ["rerank", str(tmp_path / "bm25.trec"), str(judge_index),
                                 str(tiny_cat_dir), "--queries", str(topics_file), "--depth", "5",
                                 "--output", str(tmp_path / "out.trec"), "--device", "cpu",
                                 "--precision", "fp32"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = read_run(tmp_path / "out.trec")
    assert set(out) == {"q1", "q2"} and all(len(d) == 10 for d in out.values())


def test_a_model_trained_on_an_export_is_known_to_fit_the_index_it_came_from(
    pooled_store, judge_index, tmp_path, caplog
):
    """The exported corpus.jsonl hashes otherwise than the index's source; the export records
    the index's corpus, training records it, and re-ranking that index does not advise
    `dotcat calibrate` as if the model had been trained on another corpus."""
    from types import SimpleNamespace

    from dotcat.data.index_source import source_corpus_sha256
    from dotcat.index.manifest import Manifest
    from dotcat.search.reranker import advise_calibration
    from dotcat.training.config import TrainConfig
    from dotcat.training.recipe import data_record

    _judge_some(pooled_store)
    export_beir(pooled_store, judge_index, tmp_path / "mine", QrelsConfig(assessor="ann"))
    manifest = Manifest.read(judge_index)
    index_sha = manifest.corpus["sha256"]
    assert source_corpus_sha256(judge_index) == index_sha
    assert source_corpus_sha256(tmp_path / "mine") == index_sha
    assert source_corpus_sha256(tmp_path) is None  # a plain folder stands for itself

    config = TrainConfig(data=tmp_path / "mine", out_dir=tmp_path / "out", split="test")
    record = data_record(config, 30)
    assert record["sha256"]["corpus"] != index_sha  # the exported file's own hash
    assert record["source_corpus_sha256"] == index_sha
    model = tmp_path / "cat"
    model.mkdir()

    def advice(data: dict) -> list[str]:
        (model / "dotcat_training.json").write_text(json.dumps({"data": data}))
        reranker = SimpleNamespace(
            alpha_source="dev-chosen", alpha=0.5, cross_encoder=SimpleNamespace(path=str(model))
        )
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dotcat.search.reranker"):
            advise_calibration(reranker, manifest, judge_index, "hybrid")
        return [r.getMessage() for r in caplog.records]

    assert advice(record) == []
    (message,) = advice({**record, "source_corpus_sha256": None})  # as before this record
    assert "trained on another corpus" in message and f"dotcat calibrate {judge_index}" in message


def test_an_index_rebuilt_from_an_index_stands_for_the_first_ones_corpus(
    pooled_store, judge_index, tiny_bert_dir, tmp_path, caplog
):
    """The judge loop's way: export the judged index, train, then `dotcat index OLD NEW --model
    M`. NEW reads OLD's document store, whose hash is not the corpus file's; its manifest keeps
    the first corpus's sha256, so a BERT_CAT trained on the export is not said to come from
    another corpus when it re-ranks NEW (nor is NEW's export another corpus)."""
    from types import SimpleNamespace

    from dotcat.data.index_source import corpus_shas, source_corpus_sha256
    from dotcat.index import IndexConfig, build_index
    from dotcat.index.manifest import Manifest
    from dotcat.models import EncoderConfig
    from dotcat.search.reranker import advise_calibration
    from dotcat.training.config import TrainConfig
    from dotcat.training.recipe import data_record

    _judge_some(pooled_store)
    export_beir(pooled_store, judge_index, tmp_path / "mine", QrelsConfig(assessor="ann"))
    first = Manifest.read(judge_index).corpus["sha256"]
    rebuilt, again = tmp_path / "rebuilt", tmp_path / "again"
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(judge_index, rebuilt, encoder, IndexConfig(bm25=True), show_progress=False)
    build_index(rebuilt, again, encoder, IndexConfig(bm25=True), show_progress=False)
    manifest = Manifest.read(rebuilt)
    assert manifest.corpus["kind"] == "index" and manifest.corpus["sha256"] != first
    assert corpus_shas(manifest.corpus) == [manifest.corpus["sha256"], first]
    assert source_corpus_sha256(rebuilt) == source_corpus_sha256(again) == first  # a chain too
    assert "source_sha256" not in Manifest.read(judge_index).corpus  # a file stands for itself

    model = tmp_path / "cat"
    model.mkdir()
    trained = data_record(TrainConfig(data=tmp_path / "mine", out_dir=model, split="test"), 30)
    (model / "dotcat_training.json").write_text(json.dumps({"data": trained}))
    reranker = SimpleNamespace(
        alpha_source="dev-chosen", alpha=0.5, cross_encoder=SimpleNamespace(path=str(model))
    )
    with caplog.at_level(logging.WARNING, logger="dotcat.search.reranker"):
        advise_calibration(reranker, manifest, rebuilt, "hybrid")
        assert caplog.records == []
        other = {**trained, "sha256": {"corpus": "0" * 64}, "source_corpus_sha256": "1" * 64}
        (model / "dotcat_training.json").write_text(json.dumps({"data": other}))
        advise_calibration(reranker, manifest, rebuilt, "hybrid")
    assert "trained on another corpus" in caplog.records[0].getMessage()
