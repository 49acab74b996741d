#!/usr/bin/env bash
# The paper-size model on one GPU: a Transformer-base (6+6 layers, d=512,
# 8 heads of 64, ffn 2048) trained on Multi30k en->de in fp16 with fp32 master weights,
# `fairseq-heads stats` on PUD en->de with the gold English parses, an encoder-only L0 sweep
# (3 lambdas, the quick protocol) with BLEU, the heuristic-pruning curve and the report; the
# committed subset of the results then goes to docs/results/multi30k_en_de_base_gpu/
# (recipes/publish_results.sh). Measured on an H200 (stop 26, docs/results/multi30k_en_de_base_gpu):
# ~8.7 min up to the curve with BASELINE_MINUTES=2.5, which trains only 942 updates (BLEU 17.1).
# Not bf16: fairseq 0.12's command line ties --bf16 to TPUs
# (fairseq/options.py sets --tpu with it).
#
#   recipes/multi30k_en_de/gpu.sh             # on a CUDA machine with this repo installed
#   SCALE=toy recipes/multi30k_en_de/gpu.sh   # the same steps on the toy corpus on CPU, in fp32
#                                             # (tests/recipes/test_gpu_recipe.py)
#
# Environment: RESULTS (default work/recipes/multi30k_en_de_base_gpu[_toy]), DOCS (where the
# committed subset goes; default docs/results/multi30k_en_de_base_gpu, toy: $RESULTS/docs), DATA
# (default ../shared/data), LAMBDAS_ENC, BASELINE_UPDATES, BASELINE_MINUTES (a cap on the
# baseline's wall time), FINETUNE_UPDATES, CURVE_STEPS. Every step is resumable-by-rerun as in
# run.sh (recipes/lib.sh); the times are written to $DOCS/run_info.json.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
[ ! -d "$REPO/.venv/bin" ] || export PATH="$REPO/.venv/bin:$PATH"
SCALE=${SCALE:-gpu}
PYTHON=${PYTHON:-python}
DATA=${DATA:-$REPO/../shared/data}
# the quick protocol: a fixed number of L0 updates per lambda, no from-scratch models
DEFAULT_PROTOCOL=quick
PROTOCOL=quick
# fp16 with fp32 master weights and loss scaling, unflattened: gate_adam must see the gates
# apart from the weights (fairseq_heads/optim/gate_adam.py). On Hopper fp16 and bf16 tensor
# cores are equally fast.
MIXED_PRECISION="--fp16 --fp16-no-flatten-grads"
LAMBDAS_ALL=""
SCRATCH_LAMBDAS=""

case $SCALE in
toy)
  RESULTS=$(readlink -m "${RESULTS:-$REPO/work/recipes/multi30k_en_de_base_gpu_toy}")
  DOCS=$(readlink -m "${DOCS:-$RESULTS/docs}")
  export OMP_NUM_THREADS=${THREADS:-2}
  LAMBDAS_ENC=${LAMBDAS_ENC-0.002 0.05}
  source "$HERE/../toy_scale.sh"
  # fp32: fp16 on CPU was ~40x slower here. gate_adam under fairseq's fp16 optimizer is tested
  # in tests/core/test_gate_optimizer.py.
  ;;
gpu)
  RESULTS=$(readlink -m "${RESULTS:-$REPO/work/recipes/multi30k_en_de_base_gpu}")
  DOCS=$(readlink -m "${DOCS:-$REPO/docs/results/multi30k_en_de_base_gpu}")
  SRC=en TGT=de
  M=$DATA/multi30k_en_de
  for file in "$M"/{train,val,test_2016_flickr}.{en,de}.gz "$DATA"/ud_pud/{pud.en.txt.gz,pud.de.txt.gz,en_pud-ud-test.conllu.gz}; do
    [ -f "$file" ] || { echo "gpu.sh: missing $file (set DATA)" >&2; exit 2; }
  done
  DATA_BIN=""
  DATA_WORKERS=8
  source "$HERE/multi30k_data.sh"
  BASELINE_CHECKPOINT=""
  SIZE_ARGS="--encoder-layers 6 --decoder-layers 6 --encoder-embed-dim 512 --decoder-embed-dim 512
    --encoder-ffn-embed-dim 2048 --decoder-ffn-embed-dim 2048
    --encoder-attention-heads 8 --decoder-attention-heads 8"
  # Multi30k is small: dropout 0.3, as fairseq's IWSLT recipe.
  TRAIN_ARGS="--share-all-embeddings --dropout 0.3 --label-smoothing 0.1 --max-tokens 8192
    --adam-betas (0.9,0.98) $MIXED_PRECISION"
  # ~60 updates per epoch: BASELINE_UPDATES or BASELINE_MINUTES, whichever comes first; a
  # checkpoint every 5 epochs (and at the end) keeps the saving of a 50M-parameter model cheap.
  BASELINE_TRAIN_ARGS="--optimizer adam --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 500
    --max-update ${BASELINE_UPDATES:-1500}
    --stop-time-hours $(awk "BEGIN { print ${BASELINE_MINUTES:-3} / 60 }") --save-interval 5"
  DEFAULT_GATE_LR_SCALE=1000
  GATE_LR_SCALE=${GATE_LR_SCALE:-$DEFAULT_GATE_LR_SCALE}
  FINETUNE_OPTIMIZER_ARGS="--optimizer gate_adam --lr 1e-4 --gate-lr-scale $GATE_LR_SCALE --lr-scheduler fixed"
  FINETUNE_ARGS="$FINETUNE_OPTIMIZER_ARGS
    --max-update ${FINETUNE_UPDATES:-300} --save-interval 1000"
  LAMBDAS_ENC=${LAMBDAS_ENC-0.005 0.01 0.02}
  GATE_TRACE_INTERVAL=25
  GEN_SUBSET=test
  GEN_ARGS="--beam 5 --batch-size 256"
  SPM_MODEL=$RESULTS/data/spm.model
  PUD_SRC=$DATA/ud_pud/pud.en.txt.gz
  PUD_TGT=$DATA/ud_pud/pud.de.txt.gz
  PUD_CONLLU=$DATA/ud_pud/en_pud-ud-test.conllu.gz
  STATS_SUBSET=test
  STATS_CONLLU=""
  STATS_ARGS=""
  CURVE_METRIC=grad
  CURVE_STEPS=${CURVE_STEPS:-0,24,40,46}
  CURVE_ARGS="--beam 5 --batch-size 256"
  DEVICE_ARGS=""
  ;;
*) echo "SCALE must be gpu or toy, got $SCALE" >&2; exit 2 ;;
esac

ANALYSIS=yes
source "$HERE/../paper_tables.sh"
"$HERE/../publish_results.sh" "$RESULTS" "$DOCS"
"$PYTHON" - "$DOCS/run_info.json" "$SECONDS" "$SCALE" <<'EOF'
import json, platform, sys

import torch

from fairseq_heads.files import write_text_atomic

path, seconds, scale = sys.argv[1], int(sys.argv[2]), sys.argv[3]
device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu"
info = {"scale": scale, "wall_seconds": seconds, "device": device, "torch": torch.__version__}
write_text_atomic(path, json.dumps(info, indent=1) + "\n")
EOF
echo "gpu.sh: done in $SECONDS s; results: $RESULTS, committed subset: $DOCS"
