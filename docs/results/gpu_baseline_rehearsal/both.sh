#!/bin/bash
# a1's setting (post-norm) then the fix (pre-norm), one at a time; d=64, 6+6 layers, 8 heads,
# 4,096-token batches, lr 1e-3 inverse sqrt, 120 warm-up updates, 300 updates
cd /tmp/rehearsal
for NORM in post pre; do
  ./train.sh ${NORM}_d64 64 256 300 120 $NORM --max-tokens 4096 --save-interval-updates 100 --keep-interval-updates -1 \
     > runs/${NORM}_d64.log 2>&1
done
echo done > runs/both.done
