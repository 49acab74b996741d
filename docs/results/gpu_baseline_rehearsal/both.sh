#!/bin/bash
# a1's setting (post-norm) then the fix (pre-norm), one at a time; d=64, 6+6 layers, 8 heads,
# 4,096-token batches, lr 1e-3 inverse sqrt, 120 warm-up updates, 300 updates
cd "$(git rev-parse --show-toplevel)"  # paths below: the repository root
mkdir -p work/rehearsal/runs
for NORM in post pre; do
  docs/results/gpu_baseline_rehearsal/train.sh ${NORM}_d64 64 256 300 120 $NORM --max-tokens 4096 --save-interval-updates 100 --keep-interval-updates -1 \
     > work/rehearsal/runs/${NORM}_d64.log 2>&1
done
echo done > work/rehearsal/runs/both.done
