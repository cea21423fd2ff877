"""dotcat's ONNX exports loaded by sentence-transformers: same vectors and logits as dotcat.

sentence-transformers loads ONNX files through Optimum, and optimum-onnx pins
``transformers<4.58``, so it cannot share dotcat's environment (transformers 5). The check
runs in two environments:

    # 1. dotcat's environment: export, and record dotcat's own outputs
    python eval/benchmarks/st_onnx_compat.py reference --out runs/st-compat [--cat runs/cat-def]
    # 2. an environment with sentence-transformers + optimum-onnx + onnxruntime (no dotcat)
    python eval/benchmarks/st_onnx_compat.py check runs/st-compat \\
        [--record eval/benchmarks/results/st_onnx_compat.md]

``reference`` copies the packaged all-MiniLM-L6-v2 (and the given BERT_CAT, else a small
random one) into ``--out``, runs ``dotcat export`` at fp32 and int8 on the copies, and saves
dotcat's vectors and logits at both precisions. ``check`` loads each export with
``SentenceTransformer(..., backend="onnx")`` / ``CrossEncoder(..., backend="onnx")`` and
compares (ONNX Runtime's session set as dotcat's, ``onnx_backend.DISABLED_OPTIMIZERS``):
fp32 within 1e-4; int8 exactly at batch size 1 (dotcat runs one text per call, see
``OnnxRunner.one_by_one``) and, for the record, the difference at batch size 32 (dynamic int8
quantises a whole padded batch with one range). Exit status 1 on a mismatch. CI runs both
steps (``.ci/run``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

import common

TEXTS = [
    "0-dimensional biomaterials show inductive properties.",
    "Vitamin D deficiency is associated with an increased risk of fractures in older adults.",
    "ATP",
    "The mitochondria produce ATP through oxidative phosphorylation in eukaryotic cells, "
    "a process that depends on the electron transport chain and a proton gradient. " * 3,
    "Insulin regulates blood glucose.",
    "Vaccines train the immune system against viruses and bacteria.",
]
QUERY = "which cells make ATP"
FILES = {"fp32": "onnx/model.onnx", "int8": None}  # int8: the record names the file


def reference(out: Path, cat: Path | None) -> None:
    from dotcat.models import BiEncoder, EncoderConfig
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
    from dotcat.models.onnx_backend import DISABLED_OPTIMIZERS, export_name
    from dotcat.models.resolve import resolve_model

    out.mkdir(parents=True, exist_ok=True)
    encoder_dir, cat_dir = out / "encoder", out / "cat"
    for target in (encoder_dir, cat_dir):
        shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(resolve_model("default"), encoder_dir)
    if cat is not None:
        shutil.copytree(cat, cat_dir)
    else:
        _small_cross_encoder(encoder_dir, cat_dir)
    for model in (encoder_dir, cat_dir):
        # ONNX Runtime's exports (fp32 is always its; a cross-encoder's int8 defaults to
        # OpenVINO's, and --backend applies only to int8).
        common.dotcat("export", str(model), "--precision", "fp32")
        common.dotcat("export", str(model), "--precision", "int8", "--backend", "onnxruntime")
    outputs = {}
    for precision in ("fp32", "int8"):
        # ONNX Runtime's int8, the file sentence-transformers loads (``auto`` picks OpenVINO);
        # fp32 is PyTorch (a backend applies only to int8).
        backend = {"backend": "onnxruntime"} if precision == "int8" else {}
        encoder = BiEncoder.load(
            EncoderConfig(model=str(encoder_dir), precision=precision, **backend)
        )
        config = CrossEncoderConfig(model=str(cat_dir), precision=precision, **backend)
        cross = CrossEncoder.load(config)
        # The export beside the weights, not one of the cache.
        assert precision == "fp32" or encoder.onnx.path.parent == (encoder_dir / "onnx").resolve()
        outputs[f"encoder_{precision}"] = encoder.encode_documents(TEXTS).tolist()
        outputs[f"cat_{precision}"] = cross.score_query(QUERY, TEXTS).tolist()
        outputs["max_length"] = encoder.max_length
        outputs["cat_max_length"] = cross.max_length
    outputs["int8_file"] = f"onnx/{export_name('int8')}"
    outputs["session_config"] = list(DISABLED_OPTIMIZERS)  # what dotcat's sessions set
    (out / "reference.json").write_text(json.dumps(outputs))
    print(f"wrote {out / 'reference.json'}")


def _small_cross_encoder(tokenizer_dir: Path, out: Path) -> None:
    """A 2-layer random BERT cross-encoder with the real tokenizer (no trained one given)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        num_labels=1,
        initializer_range=0.2,
    )
    BertForSequenceClassification(config).eval().save_pretrained(out)
    tokenizer.model_max_length = 256
    tokenizer.save_pretrained(out)


def check(root: Path, record: Path | None) -> int:
    import onnxruntime as ort
    import sentence_transformers
    import torch
    from sentence_transformers import CrossEncoder, SentenceTransformer

    ref = json.loads((root / "reference.json").read_text())
    options = ort.SessionOptions()  # ONNX Runtime's fusions as dotcat leaves them
    options.add_session_config_entry(*ref["session_config"])
    rows, failed = [], False
    for precision in ("fp32", "int8"):
        file_name = FILES[precision] or ref["int8_file"]
        model_kwargs = {"file_name": file_name, "session_options": options}
        kwargs = {"backend": "onnx", "device": "cpu", "model_kwargs": model_kwargs}
        st = SentenceTransformer(str(root / "encoder"), **kwargs)
        st.max_seq_length = ref["max_length"]
        ce = CrossEncoder(str(root / "cat"), max_length=ref["cat_max_length"], **kwargs)
        ours = np.asarray(ref[f"encoder_{precision}"])
        ours_cat = np.asarray(ref[f"cat_{precision}"])
        pairs = [(QUERY, t) for t in TEXTS]
        for batch in (1, 32):
            vectors = st.encode(TEXTS, batch_size=batch)
            logits = ce.predict(pairs, batch_size=batch, activation_fn=torch.nn.Identity())
            diff = float(np.abs(vectors - ours).max())
            cat_diff = float(np.abs(np.ravel(logits) - ours_cat).max())
            tolerance = 1e-4 if precision == "fp32" else (1e-5 if batch == 1 else None)
            ok = tolerance is None or (diff <= tolerance and cat_diff <= tolerance)
            failed |= not ok
            bound = f"<= {tolerance:g}" if tolerance else "recorded only"
            rows.append(
                f"| {precision} | `{file_name}` | {batch} | {diff:.2e} | {cat_diff:.2e} "
                f"| {bound} | {'ok' if ok else 'MISMATCH'} |"
            )
    import platform
    from importlib.metadata import version

    import optimum.onnxruntime  # noqa: F401  (the versions below)

    lines = [
        "# dotcat's ONNX exports in sentence-transformers",
        "",
        f"Command: `{common.command()}` (exports and dotcat's outputs from `reference`, in "
        "dotcat's environment).",
        f"Date: {common.now()}. Machine: {platform.machine()}, Python "
        f"{platform.python_version()} (an environment without dotcat).",
        "",
        "sentence-transformers "
        f"{sentence_transformers.__version__}, optimum-onnx {version('optimum-onnx')}, "
        f"transformers {version('transformers')}, onnxruntime {version('onnxruntime')}.",
        "",
        "| precision | file | ST batch size | max abs diff, vectors | max abs diff, logits "
        "| tolerance | |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
        *rows,
    ]
    print("\n".join(lines))
    if record is not None:
        common.write(record, lines)
    return 1 if failed else 0


def main() -> None:
    parser = common.parser(__doc__)
    sub = parser.add_subparsers(dest="step", required=True)
    ref = sub.add_parser("reference")
    ref.add_argument("--out", type=Path, required=True)
    ref.add_argument("--cat", type=Path, default=None)
    chk = sub.add_parser("check")
    chk.add_argument("root", type=Path)
    chk.add_argument("--record", type=Path, default=None)
    args = parser.parse_args()
    if args.step == "reference":
        reference(args.out, args.cat)
    else:
        sys.exit(check(args.root, args.record))


if __name__ == "__main__":
    main()
