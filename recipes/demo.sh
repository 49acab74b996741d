#!/usr/bin/env bash
# The demo pipeline (behind `make demo`), on the built-in synthetic corpus:
#   toy corpus -> sentencepiece -> fairseq-preprocess -> train a plain tiny `transformer`
#   -> fine-tune `gated_transformer_tiny` from it with the L0 penalty -> fairseq-generate + sacreBLEU
#   -> BLEU before/after and the heads left open per attention type.
# Finished steps are skipped on a re-run (delete $WORK to start over). ~5 minutes on 2 CPU cores.
# Environment: WORK (default work/demo), L0_LAMBDA (default 0.05), EPOCHS (default 12),
#              FINETUNE_UPDATES (default 400), THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-work/demo}
L0_LAMBDA=${L0_LAMBDA:-0.05}
EPOCHS=${EPOCHS:-12}
FINETUNE_UPDATES=${FINETUNE_UPDATES:-400}
export OMP_NUM_THREADS=${THREADS:-2}
USER_DIR=$(fairseq-heads user-dir)
DATA=$WORK/data/bin
SIZES="--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 64 --decoder-embed-dim 64
  --encoder-ffn-embed-dim 128 --decoder-ffn-embed-dim 128
  --encoder-attention-heads 4 --decoder-attention-heads 4"   # = gated_transformer_tiny
COMMON="--user-dir $USER_DIR --task translation_heads -s src -t tgt --cpu --num-workers 0 --seed 1"
TRAIN="--share-all-embeddings --dropout 0.1 --label-smoothing 0.1 --max-tokens 2048
  --adam-betas (0.9,0.98) --no-epoch-checkpoints --log-format simple
  --log-interval 50 --no-progress-bar"
step() { printf '\n=== %s\n' "$*"; }

step "1/5 toy corpus -> sentencepiece -> fairseq-preprocess ($WORK/data)"
fairseq-heads prepare --synthetic --work-dir "$WORK/data" --src src --tgt tgt --workers 2

step "2/5 train a plain tiny transformer ($EPOCHS epochs)"
if [ ! -f "$WORK/plain/checkpoint_best.pt" ]; then
  fairseq-train "$DATA" $COMMON $TRAIN --arch transformer $SIZES \
    --criterion label_smoothed_cross_entropy --optimizer adam --lr 5e-3 \
    --lr-scheduler inverse_sqrt --warmup-updates 150 --max-epoch "$EPOCHS" \
    --save-dir "$WORK/plain.tmp" 2>&1 | grep --line-buffered -E "\| (train|valid) \|"
  mv "$WORK/plain.tmp" "$WORK/plain"
else echo "done already: $WORK/plain/checkpoint_best.pt"; fi

step "3/5 fine-tune gated_transformer_tiny from it, all attention types gated, L0 lambda=$L0_LAMBDA"
if [ ! -f "$WORK/gated/checkpoint_last.pt" ]; then
  rm -rf "$WORK/gated.tmp"
  fairseq-train "$DATA" $COMMON $TRAIN --arch gated_transformer_tiny \
    --gated-attention enc-self,dec-self,enc-dec --finetune-from-model "$WORK/plain/checkpoint_best.pt" \
    --criterion label_smoothed_cross_entropy_l0 --l0-lambda "$L0_LAMBDA" \
    --optimizer gate_adam --lr 5e-4 --gate-lr-scale 40 --lr-scheduler fixed \
    --max-update "$FINETUNE_UPDATES" --save-interval-updates "$FINETUNE_UPDATES" \
    --gate-trace "$WORK/gated.tmp/gate_trace.jsonl" --gate-trace-interval 20 \
    --save-dir "$WORK/gated.tmp" 2>&1 | grep --line-buffered -E "\| (train|valid) \|"
  mv "$WORK/gated.tmp" "$WORK/gated"
else echo "done already: $WORK/gated/checkpoint_last.pt"; fi

step "4/5 fairseq-generate + sacreBLEU on test (beam 5)"
bleu() {  # $1 checkpoint, $2 output file
  if [ ! -s "$2" ]; then
    fairseq-generate "$DATA" --path "$1" $COMMON --gen-subset test --beam 5 --batch-size 128 \
      --remove-bpe sentencepiece --scoring sacrebleu > "$2.tmp" 2>/dev/null
    mv "$2.tmp" "$2"
  fi
  grep -E "^Generate test with beam" "$2" | sed 's/.*: //'
}
BEFORE=$(bleu "$WORK/plain/checkpoint_best.pt" "$WORK/generate_plain.txt")
AFTER=$(bleu "$WORK/gated/checkpoint_last.pt" "$WORK/generate_gated.txt")

step "5/5 result"
echo "plain transformer       : $BEFORE"
echo "gated, L0 lambda=$L0_LAMBDA: $AFTER"
fairseq-heads gates "$WORK/gated/checkpoint_last.pt" 2>/dev/null | tail -n 1
