#!/usr/bin/env bash
# `make demo`: a plain tiny transformer on the toy corpus, then an L0 fine-tune of it with every
# attention type gated; BLEU before and after and the heads left open (~5 min on 2 CPU cores;
# steps done are skipped on a re-run). The recipe: fairseq-heads recipe demo (pipeline/recipes.py).
set -euo pipefail
cd "$(dirname "$0")/.." && W=${WORK:-work/demo} && export OMP_NUM_THREADS=${THREADS:-2}
fairseq-heads recipe demo --scale toy --results "$W" --only bleu_baseline,bleu_all_l0_0.05 "$@"
for m in baseline all_l0_0.05; do grep -h '| valid |' "$W/logs/$m.log" | tail -n 1; done
echo "plain transformer      : $(grep -h '^Generate' "$W/results/baseline/generate.txt" | sed 's/.*: //')"
echo "gated, L0 lambda=0.05  : $(grep -h '^Generate' "$W/results/all_l0_0.05/generate.txt" | sed 's/.*: //')"
fairseq-heads gates "$W/models/all_l0_0.05/checkpoint_last.pt" 2>/dev/null | tail -n 1
