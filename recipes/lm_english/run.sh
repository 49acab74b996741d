#!/usr/bin/env bash
# Decoder-only language models: do specialised heads do the heavy lifting in an LM too?
# (recipes/README.md, docs/results/lm_english)
#
#   recipes/lm_english/run.sh                          # nine novels (gutenberg_en), split by book
#   CORPUS=wikitext2 recipes/lm_english/run.sh         # WikiText-2 valid+test, split by article
#   REPEAT_SPANS=1 recipes/lm_english/run.sh           # the labelled repeated-span setting
#   REPEAT_SPANS=1 REPEAT_PROB=1 LM_SIZE=2x4 recipes/lm_english/run.sh   # every span twice, 2 layers x 4 heads
#   CORPUS=markov_repeats LM_SIZE=2x4 recipes/lm_english/run.sh   # synthetic: chain lines written twice
#   BASELINE=path/to/checkpoint.pt recipes/lm_english/run.sh   # reuse a trained plain transformer_lm
#   SCALE=toy recipes/lm_english/run.sh                # the whole pipeline on the toy grammar (minutes)
#   PUD=0 recipes/lm_english/run.sh                    # without the syntactic heads on PUD English
#
# Steps (each resumable, keyed by its settings; recipes/lib.sh): data -> baseline -> its perplexity
# -> stats (every head function, LRP, gradient, confidence) -> for English text at cpu scale: pud
# (PUD's gold-parsed sentences binarised with the LM's own model) -> stats_pud (syntactic heads)
# -> per lambda: L0 fine-tune (gate trace) -> prune --from-gates -> perplexity -> stats of the
# pruned model (functions, induction loss drop) -> the lambda layouts of SCRATCH_LAMBDAS trained
# from scratch (same total updates as baseline + fine-tune) -> Michel curves per metric
# (perplexity) -> tables.md.
#
# Environment: RESULTS, DATA (default ../shared/data), CORPUS (gutenberg|wikitext2|markov_repeats),
# REPEAT_SPANS, REPEAT_PROB (default 0.5), LM_SIZE (3x8 | 2x4; cpu scale), SCALE (cpu|toy), BASELINE, PUD (1|0),
# BASELINE_UPDATES, FINETUNE_UPDATES, LAMBDAS, SCRATCH_LAMBDAS, CURVE_METRICS, CURVE_STEPS,
# GATE_LR_SCALE, THREADS (default 2).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
[ ! -d "$REPO/.venv/bin" ] || export PATH="$REPO/.venv/bin:$PATH"
export OMP_NUM_THREADS=${THREADS:-2}
SCALE=${SCALE:-cpu}
PYTHON=${PYTHON:-python}
DATA=${DATA:-$REPO/../shared/data}
CORPUS=${CORPUS:-gutenberg}
REPEAT_SPANS=${REPEAT_SPANS:-0}
REPEAT_PROB=${REPEAT_PROB:-0.5}
LM_SIZE=${LM_SIZE:-3x8}
BASELINE=${BASELINE:-}
PUD=${PUD:-1}
PUD_CONLLU=$DATA/ud_pud/en_pud-ud-test.conllu.gz

case $SCALE in
toy)
  RESULTS=$(readlink -m "${RESULTS:-$REPO/work/recipes/lm_english_toy}")
  DATA_ARGS="--corpus synthetic --synthetic-sentences 1500 --vocab-size 300"
  SIZE_ARGS="--decoder-layers 2 --decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-attention-heads 4
    --share-decoder-input-output-embed"
  BLOCK_ARGS="--tokens-per-sample 64 --sample-break-mode none --max-tokens 1024"
  BASELINE_UPDATES=${BASELINE_UPDATES:-40}
  FINETUNE_UPDATES=${FINETUNE_UPDATES:-20}
  BASELINE_LR="--lr 3e-3 --lr-scheduler inverse_sqrt --warmup-updates 10"
  FINETUNE_LR=1e-3
  GATE_LR_SCALE=400
  LAMBDAS=${LAMBDAS-0.05 0.5}
  SCRATCH_LAMBDAS=${SCRATCH_LAMBDAS-0.5}
  CURVE_STEPS=${CURVE_STEPS:-0,2,4,6}
  STATS_ARGS="--bootstrap-replicates 20 --induction-lengths 8,16 --induction-probes 16"
  PUD=0  # the toy grammar is not English: PUD's words are not its words
  GATE_TRACE_INTERVAL=5
  ;;
cpu)
  name=lm_english
  [ "$CORPUS" = gutenberg ] || name=${name}_$CORPUS
  [ "$CORPUS" != markov_repeats ] || name=lm_$CORPUS  # not English: a labelled synthetic setting
  [ "$REPEAT_SPANS" = 0 ] || name=${name}_repeat_spans
  [ "$REPEAT_SPANS" = 0 ] || [ "$REPEAT_PROB" = 0.5 ] || name=${name}_p$REPEAT_PROB
  [ "$LM_SIZE" = 3x8 ] || name=${name}_$LM_SIZE
  RESULTS=$(readlink -m "${RESULTS:-$REPO/work/recipes/$name}")
  case $CORPUS in
  gutenberg) DATA_ARGS="--corpus gutenberg --source-dir $DATA/gutenberg_en --vocab-size 8000" ;;
  wikitext2) DATA_ARGS="--corpus wikitext2 --source-dir $DATA/wikitext2 --vocab-size 8000" ;;
  # lines of a random second-order Markov chain over 100 symbols, each written twice (lm_corpus.py):
  # a model with previous-token and induction heads to find, on 1M train tokens
  markov_repeats) DATA_ARGS="--corpus markov_repeats --synthetic-sentences 30000"
    [ "$REPEAT_SPANS" = 0 ] || { echo "REPEAT_SPANS: markov_repeats lines are written twice already" >&2; exit 2; } ;;
  *) echo "CORPUS: unknown corpus '$CORPUS' (gutenberg, wikitext2 or markov_repeats)" >&2; exit 2 ;;
  esac
  [ "$REPEAT_SPANS" = 0 ] || DATA_ARGS="$DATA_ARGS --repeat-spans"
  [ "$REPEAT_SPANS" = 0 ] || [ "$REPEAT_PROB" = 0.5 ] || DATA_ARGS="$DATA_ARGS --repeat-prob $REPEAT_PROB"
  for dir in "$DATA/gutenberg_en" "$DATA/wikitext2"; do
    case $DATA_ARGS in *"$dir "*) [ -d "$dir" ] || { echo "DATA: $dir not found (set DATA=...)" >&2; exit 2; } ;; esac
  done
  case $LM_SIZE in
  # 3 layers x 8 heads of 32 (d=256): the size measured in ../shared/notes/lm-corpora.md to grow
  # previous-token heads on the novels within the CPU budget.
  3x8) SIZE_ARGS="--decoder-layers 3 --decoder-embed-dim 256 --decoder-ffn-embed-dim 1024 --decoder-attention-heads 8
    --share-decoder-input-output-embed"
    DEFAULT_CURVE_STEPS=0,8,16,24 ;;
  # 2 layers x 4 heads of 32 (d=128): the size the notes saw grow induction heads on text whose
  # every span is written twice (1,500 updates); not reproduced here, see
  # docs/results/lm_english_repeat_spans_p1_2x4
  2x4) SIZE_ARGS="--decoder-layers 2 --decoder-embed-dim 128 --decoder-ffn-embed-dim 512 --decoder-attention-heads 4
    --share-decoder-input-output-embed"
    DEFAULT_CURVE_STEPS=0,2,4,6,8 ;;
  *) echo "LM_SIZE: unknown size '$LM_SIZE' (3x8 or 2x4)" >&2; exit 2 ;;
  esac
  # the syntactic heads need English text with gold parses: PUD, for the English corpora only
  [ "$CORPUS" != markov_repeats ] || PUD=0
  [ "$PUD" = 0 ] || [ -f "$PUD_CONLLU" ] || { echo "DATA: $PUD_CONLLU not found (set DATA=... or PUD=0)" >&2; exit 2; }
  BLOCK_ARGS="--tokens-per-sample 256 --sample-break-mode none --max-tokens 4096"
  BASELINE_UPDATES=${BASELINE_UPDATES:-2000}
  FINETUNE_UPDATES=${FINETUNE_UPDATES:-100}
  BASELINE_LR="--lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 200 --warmup-init-lr 1e-7"
  # Adam moves a gate by up to lr x scale = 0.1 in log-alpha per update: within 100 updates an
  # open gate (log-alpha 3) can reach closed (< -2.4) where the penalty keeps winning; at 0.03
  # per update (scale 300, tried first) no gate could close in 150 updates whatever the lambda
  FINETUNE_LR=1e-4
  GATE_LR_SCALE=${GATE_LR_SCALE:-1000}
  DEFAULT_LAMBDAS="0.005 0.02 0.08" DEFAULT_SCRATCH_LAMBDAS=""
  if [ "$CORPUS" = markov_repeats ]; then
    # Measured before this setting's run (2x4, 1,500 updates, docs/results/lm_markov_repeats_2x4):
    # with the text settings above no head specialised; pre-norm layers at a constant lr 3e-3
    # grew previous-token and induction heads. Lambdas chosen to span nothing to most pruned.
    SIZE_ARGS="$SIZE_ARGS --decoder-normalize-before"
    BASELINE_LR="--lr 3e-3 --lr-scheduler fixed --warmup-updates 50"
    DEFAULT_LAMBDAS="0.01 0.03 0.1 0.3" DEFAULT_SCRATCH_LAMBDAS=0.1
  fi
  LAMBDAS=${LAMBDAS-$DEFAULT_LAMBDAS}
  SCRATCH_LAMBDAS=${SCRATCH_LAMBDAS-$DEFAULT_SCRATCH_LAMBDAS}
  CURVE_STEPS=${CURVE_STEPS:-$DEFAULT_CURVE_STEPS}
  STATS_ARGS=""
  GATE_TRACE_INTERVAL=25
  ;;
*) echo "SCALE: unknown scale '$SCALE' (cpu or toy)" >&2; exit 2 ;;
esac
CURVE_METRICS=${CURVE_METRICS:-lrp grad confidence}
TRAIN_ARGS="$BLOCK_ARGS --dropout 0.1 --attention-dropout 0.0 --optimizer adam --adam-betas (0.9,0.98)
  --weight-decay 0.01 --clip-norm 1.0 --cpu --num-workers 0 --seed 1 --log-format simple --log-interval 25"

# shellcheck source=recipes/lib.sh
source "$HERE/../lib.sh"
USER_DIR=$(fairseq_heads_user_dir)

train_into_step_out() {  # a fairseq-train run in $STEP_OUT; keeps the last checkpoint as checkpoint.pt
  # shellcheck disable=SC2086
  fairseq-train "$DATA_BIN" --user-dir "$USER_DIR" $TRAIN_ARGS "$@" --save-dir "$STEP_OUT" \
    --no-epoch-checkpoints --save-interval-updates 250 --keep-interval-updates 1
  mv "$STEP_OUT/checkpoint_last.pt" "$STEP_OUT/checkpoint.pt"
  rm -f "$STEP_OUT"/checkpoint_*.pt
}

step_data() {
  # shellcheck disable=SC2086
  fairseq-heads prepare-lm --work-dir "$STEP_OUT" $DATA_ARGS --workers 2
}

step_baseline() {
  if [ -n "$BASELINE" ]; then
    ln -s "$(readlink -f "$BASELINE")" "$STEP_OUT/checkpoint.pt"
  else
    # shellcheck disable=SC2086
    train_into_step_out --task language_modeling --arch transformer_lm $SIZE_ARGS $BASELINE_LR \
      --max-update "$BASELINE_UPDATES"
  fi
}

step_result() {  # $1 model name, $2 checkpoint, $3 kind, $4 lambda or "", $5 from-model or ""
  fairseq-heads lm-result "$DATA_BIN" --path "$2" --name "$1" --kind "$3" --subset test \
    ${4:+--l0-lambda "$4"} ${5:+--from-model "$5"} --results-dir "$RESULTS" --out "$STEP_OUT/result.json"
}

step_stats() {  # $1 checkpoint, $2 metrics (default: every LM metric)
  # shellcheck disable=SC2086
  fairseq-heads stats "$DATA_BIN" --path "$1" --gen-subset valid --cpu ${2:+--metrics "$2"} \
    $STATS_ARGS --out-dir "$STEP_OUT/stats"
  mv "$STEP_OUT/stats"/* "$STEP_OUT/" && rmdir "$STEP_OUT/stats"
}

step_pud() {  # PUD's English sentences (one a line) with the LM's sentencepiece model and dictionary
  "$PYTHON" -m fairseq_heads.data.lm_conllu_subset --data-bin "$DATA_BIN" --spm-model "$RESULTS/data/spm.model" \
    --subset "pud=$PUD_CONLLU" --out-dir "$STEP_OUT/bin"
}

step_stats_pud() {  # $1 checkpoint: syntactic heads on the arcs to earlier words (docs/metrics.md)
  # shellcheck disable=SC2086
  fairseq-heads stats "$RESULTS/pud/bin" --path "$1" --gen-subset pud --cpu \
    --conllu "$RESULTS/pud/bin/pud.conllu.gz" --metrics syntactic,positional,previous_token \
    $STATS_ARGS --out-dir "$STEP_OUT/stats"
  mv "$STEP_OUT/stats"/* "$STEP_OUT/" && rmdir "$STEP_OUT/stats"
}

step_l0() {  # $1 lambda
  # shellcheck disable=SC2086
  train_into_step_out --task language_modeling_heads --arch gated_transformer_lm $SIZE_ARGS \
    --finetune-from-model "$RESULTS/models/baseline/checkpoint.pt" \
    --criterion cross_entropy_l0 --l0-lambda "$1" --optimizer gate_adam --lr "$FINETUNE_LR" \
    --gate-lr-scale "$GATE_LR_SCALE" --lr-scheduler fixed --max-update "$FINETUNE_UPDATES" \
    --gate-trace "$STEP_OUT/gate_trace.jsonl" --gate-trace-interval "$GATE_TRACE_INTERVAL"
  fairseq-heads prune --path "$STEP_OUT/checkpoint.pt" --out "$STEP_OUT/pruned.pt" --from-gates
  fairseq-heads mask --path "$STEP_OUT/checkpoint.pt" --out "$STEP_OUT/head_mask.json"
}

step_scratch() {  # $1 the L0 model whose layout is trained: baseline + fine-tune updates in all
  # shellcheck disable=SC2086
  train_into_step_out --task language_modeling_heads --arch transformer_lm $SIZE_ARGS $BASELINE_LR \
    --head-mask "$RESULTS/models/$1/head_mask.json" --max-update $((BASELINE_UPDATES + FINETUNE_UPDATES))
}

step_curve() {  # $1 metric
  fairseq-heads curve "$DATA_BIN" --path "$RESULTS/models/baseline/checkpoint.pt" \
    --scores "$RESULTS/stats/baseline/heads.csv" --metric "$1" --steps "$CURVE_STEPS" \
    --gen-subset test --batch-size 16 --out "$STEP_OUT/curve.csv"
}

# ------------------------------------------------------------------ the steps, in order
mkdir -p "$RESULTS"
echo "results: $RESULTS"
run_step data "$RESULTS/data" "$DATA_ARGS" step_data
DATA_BIN=$RESULTS/data/bin

run_step baseline "$RESULTS/models/baseline" "${BASELINE:-$SIZE_ARGS $TRAIN_ARGS $BASELINE_LR $BASELINE_UPDATES}" step_baseline
run_step result_baseline "$RESULTS/results/baseline" "test" \
  step_result baseline "$RESULTS/models/baseline/checkpoint.pt" baseline "" ""
run_step stats "$RESULTS/stats/baseline" "$STATS_ARGS" step_stats "$RESULTS/models/baseline/checkpoint.pt" ""
if [ "$PUD" != 0 ]; then
  run_step pud "$RESULTS/pud" "$PUD_CONLLU" step_pud
  run_step stats_pud "$RESULTS/stats/baseline_pud" "$STATS_ARGS" step_stats_pud "$RESULTS/models/baseline/checkpoint.pt"
fi

for lambda in $LAMBDAS; do
  name=l0_$lambda
  # the steps after a model are keyed by the model's settings too: a redone model redoes them
  model_key="$SIZE_ARGS $TRAIN_ARGS $FINETUNE_UPDATES $FINETUNE_LR $GATE_LR_SCALE $GATE_TRACE_INTERVAL"
  run_step "$name" "$RESULTS/models/$name" "$model_key" step_l0 "$lambda"
  run_step "result_$name" "$RESULTS/results/$name" "test $model_key" \
    step_result "$name" "$RESULTS/models/$name/pruned.pt" l0 "$lambda" ""
  # the gated checkpoint computes what pruned.pt does (closed gates are 0) and keeps every layer's
  # 8 rows, which the heads table needs (stats refuses layers with different head counts)
  run_step "stats_$name" "$RESULTS/stats/$name" "$STATS_ARGS $model_key" \
    step_stats "$RESULTS/models/$name/checkpoint.pt" "confidence,positional,previous_token,duplicate_token,induction"
  case " $SCRATCH_LAMBDAS " in *" $lambda "*) ;; *) continue ;; esac
  run_step "scratch_$name" "$RESULTS/models/scratch_$name" "$SIZE_ARGS $TRAIN_ARGS $BASELINE_LR $BASELINE_UPDATES $FINETUNE_UPDATES" \
    step_scratch "$name"
  run_step "result_scratch_$name" "$RESULTS/results/scratch_$name" "test" \
    step_result "scratch_$name" "$RESULTS/models/scratch_$name/checkpoint.pt" from_scratch "" "$name"
done

for metric in $CURVE_METRICS; do
  run_step "curve_$metric" "$RESULTS/curves/$metric" "$CURVE_STEPS" step_curve "$metric"
done

report_key=$(for marker in "$RESULTS"/.done/*; do
  [ "${marker##*/}" = report ] || stat -c '%n %Y' "$marker"
done | cksum)
run_step report - "$report_key" fairseq-heads lm-report "$RESULTS"
echo "tables: $RESULTS/tables.md"
