#!/bin/bash
# for each run: enc-dec confidence on valid (2,000 sentences) at updates 100/200/300; valid loss;
# BLEU (beam 5) on a quarter of valid (shard 0 of 4: ~500 sentences) at update 300
cd "$(git rev-parse --show-toplevel)"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
for RUN in ${@:-post_d64 pre_d64}; do
  [ -s work/rehearsal/eval/$RUN.generate.txt ] && continue
  C=work/rehearsal/runs/$RUN/ckpt
  for U in 100 200 300; do
    nice -n 5 .venv/bin/fairseq-heads stats work/rehearsal/prep/bin --path $C/checkpoint_1_$U.pt --cpu --autocast bf16 \
      --metrics confidence --bootstrap-replicates 20 --out-dir work/rehearsal/eval/$RUN/stats_$U -s en -t it \
      > work/rehearsal/eval/$RUN.stats_$U.log 2>&1
  done
  nice -n 5 .venv/bin/fairseq-validate work/rehearsal/prep/bin --path $C/checkpoint_1_300.pt --cpu --user-dir fairseq_heads --task translation_heads \
      -s en -t it --max-tokens 8192 > work/rehearsal/eval/$RUN.validate.log 2>&1
  nice -n 5 .venv/bin/fairseq-generate work/rehearsal/prep/bin --path $C/checkpoint_1_300.pt --cpu --user-dir fairseq_heads --task translation_heads -s en -t it \
      --gen-subset valid --num-shards 4 --shard-id 0 --beam 5 --max-tokens 8192 --post-process sentencepiece \
      --scoring sacrebleu > work/rehearsal/eval/$RUN.generate.txt 2>work/rehearsal/eval/$RUN.generate.err
done
[ $# -eq 0 ] && echo done > work/rehearsal/eval/eval.done
