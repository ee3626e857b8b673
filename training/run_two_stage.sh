#!/usr/bin/env bash
# The two-stage recipe on the shapes world, end to end (CPU, the shipped tiny-world backbone):
# long-video retrieval data, one two-stage rerank head per query-conditioning choice (with an
# early-exit gate each), then the quality benchmark through the service's searcher.
# Usage: training/run_two_stage.sh WORKDIR [SEEDS...]   (benchmark corpus seeds, default 0 1 2)
# Environment: VARIANTS (default "head-q plain": the query text stays out of the backbone prompt, as
# the serving default; add text-after, text-before, text-before+head-q for the full comparison),
# EPOCHS (default 60).
set -euo pipefail
W=${1:?usage: run_two_stage.sh WORKDIR [SEEDS...]}; shift || true
SEEDS=${*:-0 1 2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# stage 2 serves K' = 32 query-selected frames in 8 clips of 4 (K = 128, L = 16 plan), M = 256
FEAT="--max-frames 32 --clip-len 4 --evidence-tokens 256"
TRAIN="$FEAT --recipe two-stage --epochs ${EPOCHS:-60} --batch-size 16 --lr 3e-4 --gate-epochs 200 --no-progress"
mkdir -p "$W/runs"
[ -d "$W/ckpt" ] || qaslr make-checkpoint "$W/ckpt" --preset tiny-world
[ -f "$W/ret/test.jsonl" ] || qaslr make-synthetic "$W/ret" --kind retrieval --seed 0
VARIANTS=${VARIANTS:-head-q plain}
# name | text in the backbone prompt | the head takes q
ALL=("head-q|none|--query-conditioning" "plain|none|--no-query-conditioning"
     "text-after|after|--no-query-conditioning" "text-before|before|--no-query-conditioning"
     "text-before+head-q|before|--query-conditioning")
for v in "${ALL[@]}"; do
  IFS='|' read -r name cond qc <<< "$v"
  [[ " $VARIANTS " == *" $name "* ]] || continue
  # one head per choice (seed 0); the benchmark's seeds vary the test corpora
  qaslr --log-level WARNING train --data "$W/ret/train.jsonl" --val "$W/ret/val.jsonl" --model "$W/ckpt" \
    $TRAIN --text-conditioning "$cond" $qc --seed 0 --out "$W/runs/$name-s0" > "$W/runs/$name-s0.log" 2>&1
done
heads=(); for v in $VARIANTS; do heads+=(--rerank-head "$v=$W/runs/$v-s0"); done
python "$(dirname "$0")/../benchmarks/bench_quality.py" --model "$W/ckpt" --seeds $SEEDS \
  --workdir "$W/bench" --conditioning none "${heads[@]}" --exit-threshold 0.9 0.7 --json "$W/quality.json" | tee "$W/quality.md"
