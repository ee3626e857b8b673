#!/usr/bin/env bash
# Creates .venv (if missing) and installs the project with CPU FAISS, its test tools and the Ray extra (the
# Ray build backend's test runs a real local Ray cluster). Idempotent.
# torch/torchvision are pinned in pyproject.toml to the pair that installs and imports together
# here; pip takes them from the local wheel store where one exists.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
  .venv/bin/python -m pip install --quiet --progress-bar off -e '.[cpu,dev,ray]'
  touch "$stamp"
fi
