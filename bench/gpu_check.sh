#!/usr/bin/env bash
# The prepared GPU check of the torch backend (see bench/gpu_check/):
#   bash bench/gpu_check.sh OUT_DIR [--gpu cuda:0] [--size full|small] [--skip SECTION,...]
# Needs only PyTorch, transformers and accelerate (no Ray, OpenVINO or W&B); runs from the
# repository's root without installing it. Writes OUT_DIR/gpu_check.json and .md.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bash bench/gpu_check.sh OUT_DIR [--gpu cuda:0] [--size full|small]}"
shift
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# a capped GPU runs close to its cap: growable segments keep freed memory reusable
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"
exec python3 -m bench.gpu_check "$out" "$@"
