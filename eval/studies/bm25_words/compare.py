"""BM25's words before and after the Unicode-aware splitter, on the default pipeline.

    python eval/studies/bm25_words/compare.py [--collections ...]

``before``: an index whose BM25 side was built by the splitter before (format 1, bm25s'
``\\b\\w\\w+\\b``: marks split words, CJK runs one term), searched as such an index is searched
now (:func:`dotcat.index.bm25.words_1`). ``after``: the same index with its BM25 side built
again from its doc store by :func:`dotcat.index.bm25.words` (format 2: NFKC, case folding,
marks kept in words, CJK unigrams and bigrams). Both share the dense side (links to the same
files); each has its hybrid fusion chosen again on the dev queries
(:func:`dotcat.tuning.tune_fusion`), as ``dotcat index`` chooses it. Both are
``SearchPipeline(index).run(...)``, the default hybrid, top 100, and the BM25 first stage
alone; nDCG@10 on the **test** queries with a paired t-test, and how many queries' top 10
changed at all.

The indexes are the issue-68 study's ``x16`` ones (``eval/studies/length_bias/indexes.py``:
today's passage rule), plus any collection given as a BEIR folder with ``--data NAME=PATH``
(built here with :func:`dotcat.build_and_tune` at ``auto`` precision).

Writes ``compare.md`` and ``compare.json`` beside this script.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

HERE = Path(__file__).resolve().parent
K = 100
STUDY = common.ROOT / "runs" / "length_bias"


def built(name: str, data: Path, work: Path) -> Path:
    """The collection's index with a BM25 side of format 1 (the study's, or one built here)."""
    import dotcat
    from dotcat.index.manifest import Manifest

    study = STUDY / name / "x16"
    if (study / "manifest.json").is_file():
        return study
    out = work / name / "built"
    if not (out / "manifest.json").is_file():
        dotcat.build_and_tune(data, out, overwrite=True, show_progress=False)
    side = json.loads((out / Manifest.read(out).bm25["dir"] / "dotcat_bm25.json").read_text())
    if side["format_version"] != 1:
        _rebuild_bm25(out, old=True)
    return out


def _rebuild_bm25(index: Path, old: bool) -> None:
    """The index's BM25 side built again from its doc store, with the words of format 1
    (``old``) or of this checkout."""
    from dotcat.index import bm25
    from dotcat.index.config import BM25Config
    from dotcat.index.layout import DOCSTORE_NAME
    from dotcat.index.manifest import Manifest

    entry = Manifest.read(index).bm25
    made = bm25.make_tokenizer
    if old:
        bm25.make_tokenizer = lambda config, splitter=None: made(config, bm25.words_1)
    try:
        side = bm25.build_from_docstore(index / DOCSTORE_NAME, BM25Config(**entry["config"]),
                                        False, passages="passages" in entry)  # fmt: skip
    finally:
        bm25.make_tokenizer = made
    target = index / entry["dir"]
    shutil.rmtree(target, ignore_errors=True)
    side.save(target)


def variant(index: Path, data: Path, out: Path, rebuild: bool) -> Path:
    """A copy of ``index`` (links to its files, its own manifest and BM25 side; with
    ``rebuild``, that side in this checkout's words), its fusion chosen again on dev."""
    from dotcat.tuning import tune_fusion

    if not (out / "manifest.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for path in index.iterdir():
            if path.name == "manifest.json":
                shutil.copy(path, out / path.name)
            elif path.is_dir():  # (BM25's folder: a folder linked cannot be changed)
                shutil.copytree(path, out / path.name)
            elif path.name != "seconds.txt":
                (out / path.name).symlink_to(path.resolve())
        if rebuild:
            _rebuild_bm25(out, old=False)
        tune_fusion(out, data)
    return out


def compare(name: str, data: Path, work: Path) -> dict:
    """Test nDCG@10 of the default pipeline and of BM25 alone, before and after."""
    from dotcat.data import load_qrels, load_queries
    from dotcat.evaluation import evaluate
    from dotcat.evaluation.significance import paired_ttest
    from dotcat.search.pipeline import SearchPipeline

    index = built(name, data, work)
    sides = {"before": variant(index, data, work / name / "before", rebuild=False),
             "after": variant(index, data, work / name / "after", rebuild=True)}  # fmt: skip
    queries, qrels = load_queries(data, split="test"), load_qrels(data, "test")
    out: dict = {"queries": len(queries)}
    for stage in ("hybrid", "bm25"):
        reports, runs = {}, {}
        for side, path in sides.items():
            pipeline = SearchPipeline(path)
            runs[side] = pipeline.run(queries, K, first_stage=stage, show_progress=False)
            reports[side] = evaluate(runs[side], qrels, measures=["nDCG@10"])
            out[f"{stage} {side}"] = float(reports[side].aggregate["nDCG@10"])
            if stage == "hybrid":
                out[f"fusion {side}"] = pipeline.fusion.describe()
        test = paired_ttest(reports["before"], reports["after"], "nDCG@10")
        out[f"{stage} p"] = float(test.pvalue)
        top = {s: {q: [d for d, _ in r[q][:10]] for q in r} for s, r in runs.items()}
        out[f"{stage} changed"] = sum(top["before"].get(q) != top["after"].get(q)
                                      for q in queries)  # fmt: skip
    return out


def main() -> None:
    p = common.parser(__doc__, output=HERE / "compare.md", work="runs/bm25_words")
    names = [n for n in common.COLLECTIONS]
    p.add_argument("--collections", nargs="+", default=names)
    p.add_argument("--data", nargs="*", default=[], help="more collections: NAME=BEIR_DIR")
    args = p.parse_args()
    common.setup_logging()
    data = {n: common.COLLECTIONS[n] for n in args.collections}
    data.update({n: Path(d) for n, d in (x.split("=", 1) for x in args.data)})
    rows = {}
    for name, path in data.items():
        rows[name] = compare(name, path, args.work)
        print(name, json.dumps(rows[name]), flush=True)
    lines = common.header(
        "BM25's words before (format 1) and after (Unicode-aware, CJK bigrams): test nDCG@10",
        "Encoder: the default (all-MiniLM-L6-v2) at `auto` precision, the same dense side for "
        "both; each side's fusion chosen again on dev. `changed`: test queries whose top 10 "
        "differs at all.",
        torch=True,
    )
    lines += [
        "| collection | queries | hybrid before | after | after - before | p | changed "
        "| BM25 before | after | after - before | p | changed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in rows.items():
        cells = [f"{r['queries']}"]
        for stage in ("hybrid", "bm25"):
            b, a = r[f"{stage} before"], r[f"{stage} after"]
            cells += [f"{b:.4f}", f"{a:.4f}", f"{a - b:+.4f}", f"{r[f'{stage} p']:.2g}",
                      str(r[f"{stage} changed"])]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Fusion chosen (before / after): "
        + "; ".join(f"{n} {r['fusion before']} / {r['fusion after']}" for n, r in rows.items())
        + ".",
    ]
    common.write(args.output, lines + [""])
    args.output.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
