#!/usr/bin/env bash
# Create a virtualenv and install dotcat into it, with the right torch and faiss for this machine.
#
#   scripts/bootstrap.sh [VENV_DIR]      (default: .venv)
#
# Without a GPU, torch is installed first as the CPU build (torch==$DOTCAT_CPU_TORCH); a bare
# `torch` requirement would otherwise pull a multi-GB CUDA build. pip finds the CPU wheel in
# its find-links/index settings (set PIP_EXTRA_INDEX_URL to PyTorch's CPU wheel index on a
# machine that has none locally). With an NVIDIA GPU, the regular (CUDA) torch and faiss-gpu
# are installed instead. An existing torch is always kept: dotcat only needs torch>=2.4. On CPU
# machines the `openvino` extra is installed too (the cross-encoder's int8 path); the `html`
# extra (HTML files in a folder corpus) everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${DOTCAT_VENV:-.venv}}"
python="${PYTHON:-python3}"
cpu_torch="${DOTCAT_CPU_TORCH:-2.13.0}"

if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating virtualenv $venv"
  "$python" -m venv "$venv"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"

has_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  has_gpu=1
fi

if ! python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"; then
  if [ "$has_gpu" = 1 ]; then
    echo "bootstrap: NVIDIA GPU found, installing the CUDA build of torch"
    pip install --quiet "torch>=2.4"
  else
    echo "bootstrap: no GPU, installing the CPU build of torch ($cpu_torch)"
    pip install --quiet "torch==$cpu_torch"
  fi
fi

extras="dev,openvino,html"
[ "$has_gpu" = 1 ] && extras="dev,gpu,html"
if python scripts/requirements_met.py ${extras//,/ } 2>/dev/null; then
  # Every requirement is installed at a version pyproject.toml allows: no resolver run (it took
  # minutes of `make scifact`'s set-up), only dotcat's own metadata (entry points) renewed.
  echo "bootstrap: requirements already met; dotcat re-linked (pip install --no-deps)"
  pip install --quiet --no-deps --no-build-isolation -e .
elif [ "$has_gpu" = 1 ]; then
  pip install --quiet -e ".[dev,gpu,html]"
  # faiss-cpu and faiss-gpu-cu12 ship the same `faiss` module: keep only the GPU one.
  pip uninstall --quiet -y faiss-cpu
  pip install --quiet --force-reinstall --no-deps "faiss-gpu-cu12>=1.8"
else
  # OpenVINO runs the cross-encoder's int8 path on CPUs (not used with a GPU).
  pip install --quiet -e ".[$extras]"
fi
python -c "import torch, faiss, dotcat; print('bootstrap: dotcat', dotcat.__version__, '| torch', torch.__version__, '| faiss', faiss.__version__, '| cuda', torch.cuda.is_available())"
