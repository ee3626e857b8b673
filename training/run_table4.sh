#!/usr/bin/env bash
# Table 4 style end-to-end comparison through the search service, after training/run_tables.sh.
# Usage: training/run_table4.sh WORKDIR [SEED]   (uses WORKDIR/runs/qaslr-sSEED/head)
set -euo pipefail
W=${1:?usage: run_table4.sh WORKDIR [SEED]}; S=${2:-0}
export OMP_NUM_THREADS=1
HEAD="$W/runs/qaslr-s$S/head"
IDX="--model $W/ckpt --frames 32 --clip-len 4 --max-evidence 64 --no-progress --log-level WARNING"
[ -d "$W/idx-oneshot" ] || indexer build "$W/syn/test_videos.jsonl" --index "$W/idx-oneshot" --embedder oneshot $IDX
[ -d "$W/idx-qaslr-s$S" ] || indexer build "$W/syn/test_videos.jsonl" --index "$W/idx-qaslr-s$S" --head "$HEAD" $IDX
qaslr --log-level WARNING eval-search --data "$W/syn/test.jsonl" --model "$W/ckpt" --shortlist 10 --frames 32 \
  --device cpu --index "single-round=$W/idx-oneshot" --index "QASLR=$W/idx-qaslr-s$S:$HEAD" \
  --json "$W/table4-s$S.json" | tee "$W/table4-s$S.md"
