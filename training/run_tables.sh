#!/usr/bin/env bash
# Reproduce the Table 5 / Table 6 style comparisons on the shapes-world task set (CPU, the shipped
# tiny-world backbone). Usage: training/run_tables.sh WORKDIR [SEEDS...]   (default seeds: 0 1 2)
# Each run takes a few minutes on one core; two runs go in parallel.
set -euo pipefail
W=${1:?usage: run_tables.sh WORKDIR [SEEDS...]}; shift || true
SEEDS=${*:-0 1 2}
export OMP_NUM_THREADS=1
FEAT="--max-frames 32 --clip-len 4 --evidence-tokens 64"
TRAIN="$FEAT --think-tokens 8 --init-temperature 0.05 --lr 3e-4 --epochs 60 --batch-size 32 --no-progress"
mkdir -p "$W"
[ -d "$W/ckpt" ] || qaslr make-checkpoint "$W/ckpt" --preset tiny-world
[ -f "$W/syn/test.jsonl" ] || qaslr make-synthetic "$W/syn" --seed 0
# Build the feature cache once (train + val + test) so that parallel runs only read it.
for f in train val test; do
  qaslr --log-level WARNING train --data "$W/syn/$f.jsonl" --model "$W/ckpt" $FEAT --prepare-only --no-progress
done
jobs_file="$W/jobs.txt"; : > "$jobs_file"
for s in $SEEDS; do
  for v in "qaslr|" "nostep|--no-step-loss" "nodistill|--no-distill-loss" "final|--no-step-loss --no-distill-loss" \
           "mean|--aggregator mean" "gru|--aggregator gru" "transformer|--aggregator transformer"; do
    name=${v%%|*}; extra=${v#*|}
    echo "qaslr --log-level WARNING train --data $W/syn/train.jsonl --val $W/syn/val.jsonl --model $W/ckpt --out $W/runs/$name-s$s $TRAIN --seed $s $extra > $W/runs/$name-s$s.log 2>&1" >> "$jobs_file"
  done
done
mkdir -p "$W/runs"
xargs -P 2 -I{} -d '\n' bash -c '{}' < "$jobs_file"
heads() { local n=$1; local out=""; for s in $SEEDS; do out+="$W/runs/$n-s$s/head,"; done; echo "${out%,}"; }
qaslr --log-level WARNING eval --data "$W/syn/test.jsonl" --model "$W/ckpt" $FEAT --no-progress --seed 0 \
  --head "mean pooling=$(heads mean)" --head "recurrent (GRU)=$(heads gru)" \
  --head "transformer=$(heads transformer)" --head "QASLR=$(heads qaslr)" --controls --recall \
  --json "$W/table5.json" | tee "$W/table5.md"
qaslr --log-level WARNING eval --data "$W/syn/test.jsonl" --model "$W/ckpt" $FEAT --no-progress \
  --head "final only=$(heads final)" --head "+ step=$(heads nodistill)" --head "+ distill=$(heads nostep)" \
  --head "+ step + distill=$(heads qaslr)" --checkpoints --checkpoint-metric retrieval \
  --json "$W/table6.json" | tee "$W/table6.md"
