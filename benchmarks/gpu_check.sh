#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py): a 2B-shaped random checkpoint, a small world corpus, the
# paper's R = 10, K' = 128, L = 16 through the engine in the Table 4 modes; latencies next to the
# paper's H100 ones, indexing throughput, peak GPU memory; one JSON file. Under 8 minutes on a GPU.
#   bash benchmarks/gpu_check.sh [OUT.json]             (default gpu_check.json)
#   GPU_CHECK_TINY=1 bash benchmarks/gpu_check.sh OUT   (a tiny checkpoint: the CPU, in CI)
# PYTHON picks the interpreter (default .venv/bin/python, else python3); GPU_CHECK_WORKDIR keeps the
# checkpoint, corpus and index between runs (default: a temporary directory, removed).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_check.json}
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
args=(--out "$out")
if [ -n "${GPU_CHECK_WORKDIR:-}" ]; then args+=(--workdir "$GPU_CHECK_WORKDIR"); fi
if [ "${GPU_CHECK_TINY:-0}" = "1" ]; then args+=(--tiny); fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec timeout "${GPU_CHECK_TIMEOUT_S:-480}" "$python" benchmarks/gpu_check.py "${args[@]}"
