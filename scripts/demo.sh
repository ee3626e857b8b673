#!/usr/bin/env bash
# The main job on a fresh machine: install, index sample videos, serve search on port 8000.
# Uses the real Qwen3-VL-Embedding weights when QASLR_MODEL (a hub id or a local directory) can be
# loaded; otherwise generates a tiny random checkpoint and says plainly that rankings are meaningless.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/qaslr demo "$@"
