#!/usr/bin/env bash
# A tiny gated_llama (RoPE, RMSNorm, SwiGLU, 4 query heads sharing 2 KV heads per layer) through
# the whole head pipeline at CPU scale (docs/llama.md):
#   data (toy grammar; CORPUS=gutenberg for the novels) -> baseline -> perplexity -> stats
#   -> L0 fine-tune with gates per KV group and a head target (gate trace)
#   -> prune --from-gates by KV group, and by query head from LRP scores -> perplexity of each
#   -> curve by KV group -> the Hugging Face round trip (a tiny random LlamaForCausalLM:
#      import-hf, binarise-hf, eval-lm, prune by KV group, export-hf), when transformers is there.
# Each step is skipped when its output exists (delete it to redo). Environment: WORK, CORPUS
# (synthetic | gutenberg), DATA (the corpus folder for gutenberg), UPDATES, FINETUNE_UPDATES.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
[ ! -d "$REPO/.venv/bin" ] || export PATH="$REPO/.venv/bin:$PATH"
export OMP_NUM_THREADS=${THREADS:-1}
WORK=$(readlink -m "${WORK:-$REPO/work/recipes/llama_toy}")
CORPUS=${CORPUS:-synthetic}
UPDATES=${UPDATES:-60}
FINETUNE_UPDATES=${FINETUNE_UPDATES:-30}
USER_DIR=$(fairseq-heads user-dir)
BLOCK="--tokens-per-sample 64 --sample-break-mode none --max-tokens 1024"
COMMON="--user-dir $USER_DIR --cpu --num-workers 0 --no-epoch-checkpoints --disable-validation
  --no-save-optimizer-state --seed 1 --log-format simple --log-interval 20"
mkdir -p "$WORK"
step() { [ -e "$1" ] && echo "skip: $1" && return 1; echo "== $1"; }

if step "$WORK/data/bin"; then
  if [ "$CORPUS" = synthetic ]; then
    fairseq-heads prepare-lm --work-dir "$WORK/data" --corpus synthetic --synthetic-sentences 1500 --vocab-size 300
  else
    fairseq-heads prepare-lm --work-dir "$WORK/data" --corpus "$CORPUS" --source-dir "${DATA:?DATA: the corpus folder}" --vocab-size 2000
  fi
fi
BIN=$WORK/data/bin

if step "$WORK/baseline/checkpoint_last.pt"; then
  # shellcheck disable=SC2086
  fairseq-train "$BIN" $COMMON $BLOCK --task language_modeling_heads --arch gated_llama_tiny \
    --optimizer adam --lr 3e-3 --max-update "$UPDATES" --save-dir "$WORK/baseline"
fi
eval_lm() {  # $1 checkpoint, $2 output file
  [ -e "$2" ] || fairseq-eval-lm "$BIN" --user-dir "$USER_DIR" --path "$1" --tokens-per-sample 64 \
    --max-tokens 1024 --cpu --gen-subset valid 2>&1 | grep -o "Perplexity: [0-9.]*" > "$2"
  echo "$1: $(cat "$2")"
}
eval_lm "$WORK/baseline/checkpoint_last.pt" "$WORK/baseline/perplexity.txt"

if step "$WORK/stats"; then
  fairseq-heads stats "$BIN" --path "$WORK/baseline/checkpoint_last.pt" --gen-subset valid --cpu \
    --bootstrap-replicates 20 --induction-lengths 8,16 --induction-probes 16 --out-dir "$WORK/stats"
fi

if step "$WORK/l0/checkpoint_last.pt"; then
  # gates per KV group, and exactly 2 of the 4 groups at the end
  # shellcheck disable=SC2086
  fairseq-train "$BIN" $COMMON $BLOCK --task language_modeling_heads --arch gated_llama_tiny \
    --prune-unit kv-group --finetune-from-model "$WORK/baseline/checkpoint_last.pt" \
    --criterion cross_entropy_l0 --l0-lambda 0.05 --target-heads 2 --optimizer gate_adam \
    --lr 1e-3 --gate-lr-scale 100 --max-update "$FINETUNE_UPDATES" --save-dir "$WORK/l0" \
    --gate-trace "$WORK/l0/gate_trace.jsonl" --gate-trace-interval 5
fi
fairseq-heads gates "$WORK/l0/checkpoint_last.pt"

if step "$WORK/pruned_kv_group.pt"; then
  fairseq-heads prune --path "$WORK/l0/checkpoint_last.pt" --out "$WORK/pruned_kv_group.pt" \
    --from-gates --prune-unit kv-group
fi
if step "$WORK/pruned_query.pt"; then
  fairseq-heads prune --path "$WORK/baseline/checkpoint_last.pt" --out "$WORK/pruned_query.pt" \
    --from-importance "$WORK/stats/heads.csv" --metric lrp --keep 4
fi
eval_lm "$WORK/pruned_kv_group.pt" "$WORK/pruned_kv_group.perplexity.txt"
eval_lm "$WORK/pruned_query.pt" "$WORK/pruned_query.perplexity.txt"

if step "$WORK/curve_kv_group.csv"; then
  fairseq-heads curve "$BIN" --path "$WORK/baseline/checkpoint_last.pt" --scores "$WORK/stats/heads.csv" \
    --metric lrp --steps 0,1,2,3 --prune-unit kv-group --gen-subset valid --cpu --out "$WORK/curve_kv_group.csv"
fi

if python -c "import transformers" 2>/dev/null; then
  if step "$WORK/hf/export"; then
    python "$HERE/tiny_hf_llama.py" "$WORK/hf/model" "$WORK/data/text/train.txt"
    fairseq-heads import-hf "$WORK/hf/model" --out "$WORK/hf/imported"
    fairseq-heads binarise-hf "$WORK/hf/model" --text "$WORK/data/text" --out "$WORK/hf/bin"
    fairseq-eval-lm "$WORK/hf/bin" --user-dir "$USER_DIR" --path "$WORK/hf/imported/checkpoint.pt" \
      --tokens-per-sample 64 --max-tokens 1024 --cpu --gen-subset valid 2>&1 | grep -o "Perplexity: [0-9.]*"
    printf '%s\n' "type,layer,head,lrp" "dec-self,0,0,1" "dec-self,0,1,1" "dec-self,0,2,0" "dec-self,0,3,0" \
      "dec-self,1,0,0" "dec-self,1,1,0" "dec-self,1,2,1" "dec-self,1,3,1" > "$WORK/hf/scores.csv"
    fairseq-heads prune --path "$WORK/hf/imported/checkpoint.pt" --out "$WORK/hf/pruned.pt" \
      --from-importance "$WORK/hf/scores.csv" --metric lrp --keep 2 --prune-unit kv-group
    fairseq-heads export-hf --path "$WORK/hf/pruned.pt" --source "$WORK/hf/model" --out "$WORK/hf/export"
  fi
else
  echo "skip: the Hugging Face round trip (no transformers; pip install -e '.[hf]')"
fi
echo "done: $WORK"
