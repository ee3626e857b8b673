#!/usr/bin/env bash
# Creates .venv (if missing) and installs the project at the versions pinned in requirements.lock (a
# pip constraints file; scripts/lock.sh refreshes it from pyproject.toml's ranges). Idempotent: a
# stamp of pyproject.toml, the lock and the profile skips an install that is already done.
#   bash scripts/setup.sh           what the tests need: .[cpu,dev,ray] (CPU FAISS, test tools; the Ray extra, whose
#                                   build backend's test runs a real local Ray cluster)
#   bash scripts/setup.sh runtime   what the demo runs: .[cpu], the project and its runtime dependencies
# torch/torchvision are pinned in pyproject.toml to the pair that installs and imports together
# here; pip takes them from the local wheel store where one exists.
# CUDA libraries (~3.2 GB of the ~6.5 GB venv) are installed on CPU-only machines too: the pinned
# torch 2.14.1 is a CUDA 13 build whose libtorch_cuda.so (loaded by `import torch`) links cudart,
# cuBLAS, cuDNN, cuFFT, cuRAND, cuSPARSE(Lt), cuFile, NCCL and NVRTC, so without the nvidia-*
# wheels `import torch` fails (libcudnn.so.9 not found; tried with every other locked package
# installed). The CPU-only torch wheel in the local store (2.13.0+cpu) has no torchvision to pair
# with, and the processor path needs torchvision. A CPU-only install needs a +cpu torch/torchvision
# pair in the wheel store first. What can go is triton (~0.9 GB): torch's GPU kernel compiler, not
# linked by libtorch and used only by torch.compile on CUDA, which nothing here calls. Without an
# NVIDIA GPU (no nvidia-smi, no /dev/nvidia0; QASLR_CUDA=1 or 0 overrides) the install resolves the
# locked set, then installs it without triton (pip check will name it; a later unconstrained pip
# install may bring it back, which is harmless).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-dev}
case "$profile" in
  dev) spec='.[cpu,dev,ray]' ;;
  runtime) spec='.[cpu]' ;;
  *) echo "usage: bash scripts/setup.sh [dev|runtime]" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
cuda=${QASLR_CUDA:-auto}
if [ "$cuda" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 || [ -e /dev/nvidia0 ]; then cuda=1; else cuda=0; fi
fi
inputs=$( (cat pyproject.toml requirements.lock; echo "cuda=$cuda") | sha256sum | cut -c1-16)
stamp=.venv/.installed-$profile-$inputs
# a venv set up for the tests has everything the demo runs
if [ -f "$stamp" ] || { [ "$profile" = runtime ] && [ -f ".venv/.installed-dev-$inputs" ]; }; then
  exit 0
fi
quiet() {  # pip, without the local wheel store's "Location ... is ignored" notes
  "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
}
quiet .venv/bin/python -m pip install --quiet -c requirements.lock --upgrade pip
pip=(.venv/bin/python -m pip install --quiet --progress-bar off -c requirements.lock)
if [ "$cuda" = 1 ]; then
  quiet "${pip[@]}" -e "$spec"
else
  report=$(mktemp)
  trap 'rm -f "$report"' EXIT
  quiet "${pip[@]}" --dry-run --ignore-installed --report "$report" -e "$spec"
  .venv/bin/python - "$report" > .venv/requirements-cpu.txt <<'PY'
import json, sys

for item in json.load(open(sys.argv[1]))["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if name.lower() not in ("triton", "qaslr-search"):
        print(f"{name}=={version}")
PY
  quiet "${pip[@]}" --no-deps -r .venv/requirements-cpu.txt
  quiet "${pip[@]}" --no-deps -e "$spec"
fi
rm -f .venv/.installed-*
touch "$stamp"
