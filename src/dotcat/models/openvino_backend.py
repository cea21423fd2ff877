"""The cross-encoder's int8 path: OpenVINO, int8 weights, int8 activations per token group.

Why (measured on SciFact): ONNX Runtime's dynamic int8 takes one range per activation tensor, and a
re-ranker run that way kept 99.1-99.4% of fp32's nDCG@10 after re-ranking, below the 99.5% bar.
OpenVINO's CPU plugin quantises the activations of an int8-weight linear layer *per group of*
:data:`GROUP_SIZE` *input features of each token*, on the fly (``DYNAMIC_QUANTIZATION_GROUP_SIZE``):
the range follows each token's own values, so an outlier feature (the FFN-output outliers of
Bondarenko et al., EMNLP 2021) spoils one group of one token, not the whole batch; and a pair's
logit does not depend on its neighbours in a batch. The int8 dot products use VNNI; everything else
(attention, softmax, LayerNorm) runs in bf16 where the CPU has it natively, fp32 elsewhere.

Weights are int8 symmetric per output channel (``nncf.compress_weights``, no calibration data:
nothing fitted to one corpus). The classifier and pooler stay in full precision: they are tiny,
and with the one-output classifier compressed OpenVINO 2026.4 returned logits unrelated to
fp32's (seen in a check by hand, not a recorded benchmark).

Files, beside the ONNX exports and where sentence-transformers' OpenVINO backend looks
(``openvino/``; its ``file_name`` argument picks the file)::

    openvino/openvino_model_qint8_weights.xml (+ .bin)   int8 weights, made from onnx/model.onnx
    openvino/dotcat_export.json                          the weights' fingerprint, the recipe

As with :mod:`dotcat.models.onnx_backend`, an export is never silently stale, ``dotcat export``
writes beside the weights and a first use exports into ``$DOTCAT_CACHE/openvino/<fingerprint>/``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from dotcat.errors import DotcatError, first_line
from dotcat.files import writing
from dotcat.models import export_files, onnx_backend, runtime
from dotcat.progress import quiet_logger

logger = logging.getLogger(__name__)

OPENVINO_DIR = "openvino"
INT8_NAME = "openvino_model_qint8_weights.xml"
#: Input features per dynamically quantised activation group (a divisor of MiniLM's 384 and 1536).
#: Smaller groups are closer to fp32 and slower; chosen on SciFact dev as the fastest of 64, 128,
#: 384 that keeps >= 99.5% of fp32's re-ranked nDCG@10.
GROUP_SIZE = 128
#: Linear layers left uncompressed (regexes on OpenVINO node names; see the module docstring).
UNCOMPRESSED = (r".*classifier.*", r".*pooler.*")


def cache_home(fingerprint: str) -> Path:
    """Where exports made on first use are cached: ``$DOTCAT_CACHE/openvino/<fingerprint>``."""
    return export_files.cache_home(OPENVINO_DIR, fingerprint)


def find_or_export(weights_dir: Path, kind: str, fingerprint: str) -> Path:
    """The current int8 OpenVINO export of the model in ``weights_dir``, made first if missing
    or stale (looked for beside the weights, then in the cache; made in the cache)."""
    homes = [weights_dir / OPENVINO_DIR, cache_home(fingerprint)]
    found = export_files.current_export(homes, INT8_NAME, _recipe(kind, fingerprint), ".bin")
    return found if found is not None else export(weights_dir, kind, homes[1], fingerprint)


def export(weights_dir: Path, kind: str, home: Path, fingerprint: str) -> Path:
    """Compress the fp32 ONNX export of ``weights_dir`` (the one ONNX Runtime uses, made first
    if needed) to int8 weights, saved as ``home/`` :data:`INT8_NAME`.

    The .bin and .xml are written in a temporary directory and renamed into place, the
    record last: a crash leaves either the old export or one whose record does not match.
    """
    ov = _openvino()
    nncf = _openvino("nncf")  # ~4 s to import

    fp32 = onnx_backend.find_or_export(weights_dir, kind, "fp32", fingerprint)
    home.mkdir(parents=True, exist_ok=True)
    target = home / INT8_NAME
    logger.info("compressing %s to int8 weights for OpenVINO: %s", fp32, target)
    with export_files.quiet_export(), _quiet_nncf():
        model = ov.Core().read_model(fp32)
        compressed = nncf.compress_weights(
            model,
            mode=nncf.CompressWeightsMode.INT8_SYM,
            ignored_scope=nncf.IgnoredScope(patterns=list(UNCOMPRESSED), validate=False),
        )
    with writing(target), tempfile.TemporaryDirectory(prefix=".export-", dir=home) as tmp:
        ov.save_model(compressed, Path(tmp) / INT8_NAME, compress_to_fp16=False)
        os.replace(Path(tmp) / target.with_suffix(".bin").name, target.with_suffix(".bin"))
        os.replace(Path(tmp) / INT8_NAME, target)
    export_files.record(home, INT8_NAME, _recipe(kind, fingerprint), ".bin")
    return target


def int8_runner(weights_dir: Path, kind: str, fingerprint: str, workers: int) -> OpenVinoRunner:
    """The :class:`OpenVinoRunner` of a model's int8 export (made first if missing or stale)."""
    return OpenVinoRunner(find_or_export(weights_dir, kind, fingerprint), workers)


class OpenVinoRunner:
    """One compiled OpenVINO model on CPU, called like a model: feeds -> first output.

    One stream of ``workers`` threads, called from dotcat's ``workers`` batch threads: calls
    take turns on one infer request (a request is not thread-safe; one stream runs one request
    at a time anyway), while the callers tokenise and pool around them. Taking turns in Python,
    not inside OpenVINO, also keeps two requests from ever waiting on each other there: a
    process holding four compiled re-rankers hung once in ``infer`` with two requests in flight
    (seen once in five runs by hand, not reproduced since). Pinning is off: the cores are shared
    with tokenisation and, when serving, the event loop.

    Why one stream and not one per worker: OpenVINO 2026.4's CPU plugin, with int8 weights, a bf16
    inference precision and two streams, returned logits unrelated to fp32's (off by 8-74 times
    their whole spread, and not the same twice) for models whose hidden size is not a multiple of 64
    (32, 100, 312 -- TinyBERT's; 384 was right), on an Intel Xeon with AMX (flags avx512_bf16
    amx_bf16 amx_int8). One stream of two threads was right for all of them, at 0.88x the two
    streams' pairs/s. ``tests/models/test_openvino_backend.py`` checks hidden sizes of both kinds.
    """

    #: The runtime's name (``CrossEncoder.backend``).
    backend = "openvino"
    #: Calls take turns on the one request (its ``workers`` threads split each call): cutting
    #: a call in parts for dotcat's batch threads only adds calls.
    concurrent = False

    def __init__(self, path: Path, workers: int = 1, group_size: int = GROUP_SIZE) -> None:
        ov = _openvino()
        workers = max(1, int(workers))
        config = {
            # The hardware decides, not DOTCAT_NATIVE_BF16: OpenVINO has no bf16 emulation.
            "INFERENCE_PRECISION_HINT": "bf16" if runtime.detect_native_bf16() else "f32",
            "DYNAMIC_QUANTIZATION_GROUP_SIZE": str(group_size),
            "NUM_STREAMS": "1",  # see the class docstring: several streams can be wrong
            "INFERENCE_NUM_THREADS": str(workers),
            "ENABLE_CPU_PINNING": "NO",
        }
        try:
            self.compiled = ov.Core().compile_model(str(path), "CPU", config)
        except RuntimeError as e:
            raise DotcatError(f"{path}: OpenVINO cannot load it ({first_line(e)}); remove "
                              f"{path.parent} to export it again") from None  # fmt: skip
        self.path = path
        self.workers = workers
        self.input_names = [port.get_any_name() for port in self.compiled.inputs]
        self._output = self.compiled.outputs[0]
        self._request = self.compiled.create_infer_request()
        self._lock = threading.Lock()

    def calls(self, batch: Mapping[str, object]) -> list[dict[str, np.ndarray]]:
        """The feeds to run for a right-padded batch: the whole batch, in one call (the
        per-token activation groups make a pair's logit independent of its neighbours, tested;
        ONNX Runtime's per-tensor ranges do not)."""
        return [{k: np.asarray(v) for k, v in batch.items()}]

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        """Run on ``feeds`` (see :func:`dotcat.models.onnx_backend.model_inputs`)."""
        inputs = onnx_backend.model_inputs(self.input_names, feeds)
        with self._lock:  # one stream runs one request at a time anyway; see the class docstring
            result = self._request.infer(inputs)
            return np.array(result[self._output], dtype=np.float32)  # a copy: the request reuses it


def _openvino(module: str = "openvino"):
    """``openvino`` (or ``nncf``: an optional extra), telemetry off: unless ~/intel opts out, its
    import sends an event to Google Analytics from a process forked by a thread (exit waits up
    to 3 s). A search must not call out, nor fork beside OpenVINO's threads (a search's sender
    dumped core in getaddrinfo). Without ``openvino_telemetry`` both libraries use stubs. Not
    installed, or failing to import: one DotcatError line, not a traceback."""
    if not runtime.openvino_installed():
        raise DotcatError("OpenVINO int8 needs openvino and nncf: pip install 'dotcat[openvino]'")
    sys.modules.setdefault("openvino_telemetry", None)
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise DotcatError(f"{module} is installed but does not import ({first_line(e)}): "
                          "reinstall it, or use backend=onnxruntime") from None  # fmt: skip


def _recipe(kind: str, fingerprint: str) -> dict:
    return {
        "kind": kind,
        "precision": "int8",
        "backend": "openvino",
        "weights": "int8 symmetric per output channel (nncf.compress_weights INT8_SYM)",
        "uncompressed": list(UNCOMPRESSED),
        "weights_sha256": fingerprint,
        "opset": onnx_backend.OPSET,
    }


@contextlib.contextmanager
def _quiet_nncf() -> Iterator[None]:
    """NNCF prints a table of bit widths through its own logger and draws its own progress
    bar ("Applying Weight Compression", rich, on standard output); one log line says enough."""
    with quiet_logger("nncf"), contextlib.redirect_stdout(io.StringIO()):
        yield
