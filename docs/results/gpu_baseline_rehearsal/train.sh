#!/bin/bash
# usage: train.sh NAME DIM FFN MAX_UPDATE WARMUP NORM(post|pre) [extra fairseq options...]
NAME=$1 DIM=$2 FFN=$3 MAXUP=$4 WARMUP=$5 NORM=$6; shift 6
cd "$(git rev-parse --show-toplevel)"  # paths below: the repository root
OUT=work/rehearsal/runs/$NAME
mkdir -p $OUT
NORMOPT=""
[ "$NORM" = pre ] && NORMOPT="--encoder-normalize-before --decoder-normalize-before"
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 exec nice -n 5 .venv/bin/fairseq-train work/rehearsal/prep/bin \
  --user-dir fairseq_heads --task translation_heads -s en -t it --num-workers 0 --cpu --autocast bf16 \
  --arch transformer --encoder-layers 6 --decoder-layers 6 --encoder-embed-dim $DIM --decoder-embed-dim $DIM \
  --encoder-ffn-embed-dim $FFN --decoder-ffn-embed-dim $FFN --encoder-attention-heads 8 --decoder-attention-heads 8 \
  --share-all-embeddings $NORMOPT --dropout 0.1 --label-smoothing 0.1 --criterion label_smoothed_cross_entropy \
  --max-tokens 16384 --adam-betas '(0.9,0.98)' --seed 1 --max-source-positions 256 --max-target-positions 256 \
  --skip-invalid-size-inputs-valid-test --optimizer adam --lr 0.001 --lr-scheduler inverse_sqrt \
  --warmup-updates $WARMUP --max-update $MAXUP --save-dir $OUT/ckpt --no-epoch-checkpoints --no-last-checkpoints \
  --validate-interval-updates 1000000 --validate-interval 1000000 --disable-validation \
  --log-format json --log-interval 10 --no-progress-bar "$@"
