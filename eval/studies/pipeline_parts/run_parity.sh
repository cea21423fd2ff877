#!/usr/bin/env bash
# Every run of `make scifact`, eval/experiments/collections.toml and passages.toml, made by the
# code of one checkout, into OUT (fresh indexes and a fresh experiment cache):
#
#   bash eval/studies/pipeline_parts/run_parity.sh CHECKOUT OUT
#
# Run it once on the commit before the change and once after, then compare the two folders:
#   python eval/studies/pipeline_parts/compare_runs.py OUT_BEFORE OUT_AFTER
set -euxo pipefail
checkout="$(cd "$1" && pwd)"; out="$(mkdir -p "$2" && cd "$2" && pwd)"
cd "$checkout"
export PYTHONPATH="$checkout/src" HF_HUB_OFFLINE=1
python -c "import dotcat; print(dotcat.__file__)"
dc() { python -c "import sys; from dotcat.cli import app; sys.exit(app())" "$@"; }
mkdir -p "$out/scifact"
dc index data/scifact "$out/scifact/index" --overwrite
dc search "$out/scifact/index" --queries data/scifact --split test --output "$out/scifact/hybrid.trec" -k 100
dc search "$out/scifact/index" --queries data/scifact --split test --output "$out/scifact/dense.trec" -k 100 --first-stage dense
dc bm25 data/scifact --queries data/scifact --split test --output "$out/scifact/bm25.trec" -k 100
sed -e "s#runs/experiments/collections#$out/exp/collections#" eval/experiments/collections.toml > "$out/collections.toml"
sed -e "s#runs/experiments/collections#$out/exp/collections#; s#runs/experiments/passages#$out/exp/passages#" eval/experiments/passages.toml > "$out/passages.toml"
dc experiment "$out/collections.toml"
dc experiment "$out/passages.toml"
