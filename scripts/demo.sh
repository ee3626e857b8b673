#!/usr/bin/env bash
# The main job on a fresh machine: install the runtime (no test tools, no Ray; a few minutes the
# first time, nothing after), index sample videos, serve search on port 8000.
# Uses the real Qwen3-VL-Embedding weights when QASLR_MODEL (a hub id or a local directory) can be
# loaded; otherwise the shapes-world backbone that ships with the project (see the README).
# --help / -h prints the demo's options without installing anything.
set -euo pipefail
cd "$(dirname "$0")/.."
HELP_TEXT=$(cat <<'HELP'
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
them) and a reversal pair (one shape moving, and the same played backwards) for a query about
motion (its rerank head answers it), and a JSONL manifest; 3. `indexer build` over the manifest
(one-shot embeddings, or QASLR with --head/QASLR_HEAD); 4. `qaslr serve` on --host/--port (default
127.0.0.1:8000); the page at /, docs at /docs. No Redis and no GPU needed (REDIS_URL unset = in-
process frame cache).

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
)
# `COLUMNS=100 qaslr demo --help`, kept here so that help (and refusing an unknown option) needs no
# install (tests/test_first_hour.py fails when the two disagree)
usage_error() {  # like argparse: the usage lines, the problem, exit status 2
  printf '%s\n' "$HELP_TEXT" | sed -n '1,/^$/p' | sed '$d' >&2
  echo "demo.sh: error: $1" >&2
  exit 2
}
expect_value=""
for arg in "$@"; do
  if [ -n "$expect_value" ]; then expect_value=""; continue; fi
  case "$arg" in
    --help|-h) printf '%s\n' "$HELP_TEXT"; exit 0 ;;
    --workdir|--model|--head|--videos|--host|--port) expect_value="$arg" ;;
    --workdir=*|--model=*|--head=*|--videos=*|--host=*|--port=*|--no-serve) ;;
    *) usage_error "unrecognized arguments: $arg" ;;
  esac
done
[ -z "$expect_value" ] || usage_error "argument $expect_value: expected one argument"
# a quiet first screen: no pip banners, no weight-loading bars (the demo's own progress stays)
export PIP_QUIET=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1
export TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1
bash scripts/setup.sh runtime
exec .venv/bin/qaslr demo "$@"
