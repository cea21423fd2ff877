"""How long are each collection's documents, and what does the default choose to do with them?

    python eval/studies/passages/lengths.py

For SciFact and the four collections built as ``eval/experiments/collections.toml`` says, the
evenly spaced sample of up to 1,000 documents that ``dotcat index`` draws
(:data:`dotcat.index.passages.AUTO_SAMPLE`) is tokenized by the default encoder (title, text
and special tokens, as it encodes them): the median length, the share longer than the
encoder's max length (what a build that does not split cuts), longer than twice it, and the
share of the sample's tokens that a cut drops. The last column is the decision of
:meth:`dotcat.index.passages.Splitter.splits`, the code a build runs. With the dev figures of
``when_to_split.md`` it shows which length statistic separates the collections where splitting
paid from those where it did not.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

DATA = {"scifact": "data/scifact"} | {
    name: f"runs/collections/{name}" for name in ("pylib", "faq", "pydoc", "debian")
}


def lengths(path: str, encoder) -> dict:
    """The sample's token lengths and the default's choice for one collection."""
    from dotcat.data.corpus import load_corpus
    from dotcat.index.build import split_sample
    from dotcat.index.docstore import document_text
    from dotcat.index.passages import PassageConfig, Splitter

    dataset = load_corpus(path)
    n = len(dataset)
    rows = split_sample(dataset)
    docs = list(zip(rows["title"], rows["text"], strict=True))
    texts = [encoder.document_prefix + document_text(title, text) for title, text in docs]
    tokens = np.array([len(ids) for ids in encoder.tokenizer(texts, verbose=False)["input_ids"]])
    split, _ = Splitter.for_encoder(encoder, PassageConfig()).splits(docs)
    window = encoder.max_length
    return {
        "documents": n,
        "sample": len(docs),
        "median": int(np.median(tokens)),
        "longer": float(np.mean(tokens > window)),
        "twice": float(np.mean(tokens > 2 * window)),
        "dropped": float(np.clip(tokens - window, 0, None).sum() / tokens.sum()),
        "split": split,
        "window": window,
    }


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "lengths.md")
    args = parser.parse_args()
    from dotcat.models import BiEncoder

    encoder = BiEncoder.load("default", device="cpu")
    rows = {name: lengths(path, encoder) for name, path in DATA.items()}
    window = next(iter(rows.values()))["window"]
    lines = common.header(
        "Document lengths and the default's choice to split",
        f"Encoder: the default (all-MiniLM-L6-v2), max length {window} tokens; lengths in its "
        "tokens, title and special tokens included.",
    )
    lines += [
        "| collection | documents | sampled | median tokens | longer than "
        f"{window} | longer than {2 * window} | tokens a cut drops | the default |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['documents']} | {r['sample']} | {r['median']} | {r['longer']:.0%} | "
            f"{r['twice']:.0%} | {r['dropped']:.0%} | {'split' if r['split'] else 'cut'} |"
        )
    lines.append("")
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
