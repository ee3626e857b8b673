#!/usr/bin/env bash
# The main job on a fresh machine: install the runtime (no test tools, no Ray; a few minutes the
# first time, nothing after), index sample videos, serve search on port 8000.
# Uses the real Qwen3-VL-Embedding weights when QASLR_MODEL (a hub id or a local directory) can be
# loaded; otherwise the shapes-world backbone that ships with the project (see the README).
# --help / -h prints the demo's options without installing anything.
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  if [ "$arg" = "--help" ] || [ "$arg" = "-h" ]; then
    # `COLUMNS=100 qaslr demo --help`, kept here so that help needs no install
    # (tests/test_first_hour.py fails when the two disagree)
    cat <<'HELP'
usage: qaslr demo [-h] [--workdir WORKDIR] [--model MODEL] [--head HEAD] [--videos VIDEOS]
                  [--host HOST] [--port PORT] [--no-serve]

The main job in one command: sample videos, index them, serve search. Steps (each is skipped when
its output already exists, so a second run starts in seconds): 1. backbone: QASLR_MODEL / --model
(default Qwen/Qwen3-VL-Embedding-2B) when it can be loaded from a local directory or the Hugging
Face cache/hub; otherwise the shapes-world backbone (``tiny-world``, trained weights that ship
with the project) is written under the work directory. It sees the shapes world: its rankings of
the sample videos are real, but it knows nothing of real video; 2. sample videos: shapes-world
videos of 1-2 minutes, each a grey haystack with one brief coloured-shape event ("a red square
appears"), all events distinct, plus a mirror pair (two events, in either order) and a once /
twice pair for queries about order and count (the shapes-world checkpoint's time head answers
them), and a JSONL manifest; 3. `indexer build` over the manifest (one-shot embeddings, or QASLR
with --head/QASLR_HEAD); 4. `qaslr serve` on --host/--port (default 127.0.0.1:8000); the page at
/, docs at /docs. No Redis and no GPU needed (REDIS_URL unset = in-process frame cache).

options:
  -h, --help         show this help message and exit
  --workdir WORKDIR  where videos, checkpoint and index go (default data/demo)
  --model MODEL      backbone hub id or directory (QASLR_MODEL; default the 2B hub id)
  --head HEAD        trained streaming head directory (QASLR_HEAD); default one-shot
  --videos VIDEOS    number of sample videos, 1-32 (default 8)
  --host HOST        bind address (QASLR_HOST, default 127.0.0.1)
  --port PORT        port (QASLR_PORT, default 8000)
  --no-serve         stop after building the index
HELP
    exit 0
  fi
done
bash scripts/setup.sh runtime
exec .venv/bin/qaslr demo "$@"
