"""Which collections the index build's unread-script check flags (``preflight.unread_script``).

    python eval/studies/bm25_words/unread.py

For each collection: the share of letters outside Latin in the build's sample of the corpus,
and whether the check fires for the default (English) encoder, which gives a hybrid search
without dev queries the dense weight ``UNREAD_FUSION_WEIGHT`` instead of ``FUSION_WEIGHT``.
Writes ``unread.md`` beside this script.
"""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

HERE = Path(__file__).resolve().parent
OTHER = ("man-ja", "man-zh", "man-ru")
DATA = {**common.COLLECTIONS, **{n: common.ROOT / "runs/collections" / n for n in OTHER}}


def main() -> None:
    from dotcat.data import load_corpus
    from dotcat.index.build import split_sample
    from dotcat.index.preflight import unread_script

    p = common.parser(__doc__, output=HERE / "unread.md")
    args = p.parse_args()
    lines = common.header("The unread-script check of the index build, per collection", "")
    lines += ["| collection | documents | letters outside Latin | check fires |",
              "| --- | ---: | ---: | --- |"]  # fmt: skip
    for name, path in DATA.items():
        texts = split_sample(load_corpus(path))["text"]
        letters = [c for text in texts for c in text[:2000] if c.isalpha()]
        other = sum(not unicodedata.name(c, "").startswith("LATIN") for c in letters)
        fires = unread_script(texts, "default") is not None
        lines.append(f"| {name} | {len(load_corpus(path))} | {100 * other / len(letters):.1f}% | "
                     f"{'yes' if fires else 'no'} |")  # fmt: skip
        print(lines[-1], flush=True)
    common.write(args.output, lines + [""])


if __name__ == "__main__":
    main()
