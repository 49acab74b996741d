# recipes/paper_tables.sh: the steps behind the paper's tables, shared by the recipes
# (recipes/multi30k_en_de/run.sh, recipes/wmt_en_ru/run.sh). Sourced by them after they set:
#
#   RESULTS               results folder (absolute)
#   SRC, TGT              language codes of the data-bin
#   DATA_BIN              a data-bin folder with train/valid/GEN_SUBSET, or empty: then the step
#                         `data` runs the recipe's `prepare_data` function (writes $STEP_OUT/bin)
#                         and DATA_KEY keys it
#   BASELINE_CHECKPOINT   a trained plain `transformer` to start from, or empty: trained here
#   SIZE_ARGS             model size options (the baseline's, shared by every model)
#   TRAIN_ARGS            options of every training (dropout, batch, label smoothing, device)
#   BASELINE_TRAIN_ARGS   optimizer/schedule/length of the baseline and of the from-scratch models
#   FINETUNE_ARGS         optimizer/schedule/length of the L0 fine-tuning runs
#   LAMBDAS_ENC           L0 lambdas of the encoder-only runs (decoder frozen)
#   LAMBDAS_ALL           L0 lambdas of the all-attention-types runs (gate trace recorded)
#   SCRATCH_LAMBDAS       which of LAMBDAS_ALL also get their pruned layout trained from scratch
#                         (default: all of them; each costs a whole baseline training)
#   GATE_TRACE_INTERVAL   updates between gate-trace records
#   GEN_SUBSET, GEN_ARGS  the subset BLEU is measured on, fairseq-generate options (beam, batch)
#   STATS_SUBSET, STATS_CONLLU, STATS_ARGS   `fairseq-heads stats` of the baseline (conllu may be empty)
#   PUD_SRC, PUD_TGT, PUD_CONLLU (optional)   a parallel test set with source parses (PUD): when
#                         set, the step `pud` binarises it with the model's sentencepiece model
#                         (SPM_MODEL) and dictionaries, and the statistics run on it instead
#   CURVE_METRIC, CURVE_STEPS, CURVE_ARGS    `fairseq-heads curve` over the encoder heads
#   DEVICE_ARGS           --cpu, or empty on a GPU machine
#
# and optionally RECIPE_EXTRA_TRAIN_ARGS / RECIPE_EXTRA_GENERATE_ARGS, appended to every
# fairseq-train / fairseq-generate (the tests inject a bad option through them). Every step is
# keyed by its settings: change one and that step is redone on the next run (see recipes/lib.sh).

# shellcheck source=recipes/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PYTHON=${PYTHON:-python}
USER_DIR=$(fairseq_heads_user_dir)
ALL_TYPES=enc-self,dec-self,enc-dec
FAIRSEQ_COMMON="--user-dir $USER_DIR --task translation_heads -s $SRC -t $TGT $DEVICE_ARGS --num-workers 0 --seed 1"
FAIRSEQ_LOG="--log-format simple --log-interval 10 --no-progress-bar"
EXTRA_TRAIN=${RECIPE_EXTRA_TRAIN_ARGS:-}
EXTRA_GENERATE=${RECIPE_EXTRA_GENERATE_ARGS:-}

# A fairseq-train run in $STEP_OUT; keeps one checkpoint as checkpoint.pt ($1: best|last).
train_into_step_out() {
  local keep=$1
  shift
  # shellcheck disable=SC2086  # option strings are meant to split
  fairseq-train "$DATA_BIN" $FAIRSEQ_COMMON $FAIRSEQ_LOG "$@" $EXTRA_TRAIN \
    --save-dir "$STEP_OUT" --no-epoch-checkpoints
  mv "$STEP_OUT/checkpoint_$keep.pt" "$STEP_OUT/checkpoint.pt"
  rm -f "$STEP_OUT"/checkpoint_*.pt  # the other one, and --save-interval-updates ones
}

step_baseline() {
  if [ -n "$BASELINE_CHECKPOINT" ]; then
    ln -s "$(readlink -f "$BASELINE_CHECKPOINT")" "$STEP_OUT/checkpoint.pt"
  else
    # shellcheck disable=SC2086
    train_into_step_out best --arch transformer $SIZE_ARGS $TRAIN_ARGS \
      --criterion label_smoothed_cross_entropy $BASELINE_TRAIN_ARGS
  fi
}

step_l0_finetune() {  # $1 attention types, $2 lambda, $3 extra options (--freeze-decoder)
  # shellcheck disable=SC2086
  train_into_step_out last --arch gated_transformer $SIZE_ARGS $TRAIN_ARGS \
    --gated-attention "$1" $3 --finetune-from-model "$RESULTS/models/baseline/checkpoint.pt" \
    --criterion label_smoothed_cross_entropy_l0 --l0-lambda "$2" $FINETUNE_ARGS \
    --gate-trace "$STEP_OUT/gate_trace.jsonl" --gate-trace-interval "$GATE_TRACE_INTERVAL"
}

step_mask() {  # $1 model name
  fairseq-heads mask --path "$RESULTS/models/$1/checkpoint.pt" --out "$STEP_OUT/head_mask.json"
}

step_from_scratch() {  # $1 head mask file
  # shellcheck disable=SC2086
  train_into_step_out best --arch transformer $SIZE_ARGS $TRAIN_ARGS --head-mask "$1" \
    --criterion label_smoothed_cross_entropy $BASELINE_TRAIN_ARGS
}

step_bleu() {  # $1 model name, $2 kind, $3 lambda or "", $4 from-model or "", $5 head mask or ""
  local checkpoint=$RESULTS/models/$1/checkpoint.pt options=()
  [ -z "$3" ] || options+=(--l0-lambda "$3")
  [ -z "$4" ] || options+=(--from-model "$4")
  [ -z "$5" ] || options+=(--head-mask "$5")
  # --head-mask again for generation: fairseq-generate builds the task from its command line.
  # shellcheck disable=SC2086
  fairseq-generate "$DATA_BIN" $FAIRSEQ_COMMON --path "$checkpoint" --gen-subset "$GEN_SUBSET" \
    $GEN_ARGS ${5:+--head-mask "$5"} --remove-bpe sentencepiece --scoring sacrebleu \
    $EXTRA_GENERATE > "$STEP_OUT/generate.txt"
  fairseq-heads result "$STEP_OUT/generate.txt" --path "$checkpoint" --name "$1" --kind "$2" \
    --subset "$GEN_SUBSET" "${options[@]}" --out "$STEP_OUT/result.json"
}

step_pud() {
  "$PYTHON" -m fairseq_heads.data.extra_subset --data-bin "$DATA_BIN" --spm-model "$SPM_MODEL" \
    --src "$SRC" --tgt "$TGT" --subset "test=$PUD_SRC,$PUD_TGT" --conllu "test=$PUD_CONLLU" \
    --out-dir "$STEP_OUT"
}

step_stats() {
  # shellcheck disable=SC2086
  fairseq-heads stats "$STATS_DATA_BIN" --path "$RESULTS/models/baseline/checkpoint.pt" \
    --gen-subset "$STATS_SUBSET" ${STATS_CONLLU:+--conllu "$STATS_CONLLU"} \
    --metrics "confidence,lrp,grad,positional,rare${STATS_CONLLU:+,syntactic}" \
    -s "$SRC" -t "$TGT" $STATS_ARGS --out-dir "$STEP_OUT"
}

step_curve() {
  # Only the encoder heads are scored, so the curve removes encoder heads: the x axis of the
  # encoder-pruning figure. The L0 points are drawn beside it by the report, not here, so adding
  # a lambda does not redo the curve.
  awk -F, 'NR == 1 || $1 == "enc-self"' "$RESULTS/stats/baseline/heads.csv" > "$STEP_OUT/scores_enc_self.csv"
  # shellcheck disable=SC2086
  fairseq-heads curve "$DATA_BIN" --path "$RESULTS/models/baseline/checkpoint.pt" \
    --scores "$STEP_OUT/scores_enc_self.csv" --metric "$CURVE_METRIC" --steps "$CURVE_STEPS" \
    --gen-subset "$GEN_SUBSET" -s "$SRC" -t "$TGT" $CURVE_ARGS --out "$STEP_OUT/curve.csv"
}

step_report() {
  fairseq-heads report "$RESULTS"
}

# ------------------------------------------------------------------ the steps, in order
mkdir -p "$RESULTS"
echo "results: $RESULTS"

if [ -z "${DATA_BIN:-}" ]; then
  run_step data "$RESULTS/data" "$DATA_KEY" prepare_data
  DATA_BIN=$RESULTS/data/bin
fi

run_step baseline "$RESULTS/models/baseline" \
  "${BASELINE_CHECKPOINT:-train $SIZE_ARGS $TRAIN_ARGS $BASELINE_TRAIN_ARGS $EXTRA_TRAIN}" step_baseline
run_step bleu_baseline "$RESULTS/results/baseline" "$GEN_SUBSET $GEN_ARGS $EXTRA_GENERATE" \
  step_bleu baseline baseline "" "" ""

for lambda in $LAMBDAS_ENC; do
  name=enc_l0_$lambda
  run_step "$name" "$RESULTS/models/$name" "$SIZE_ARGS $TRAIN_ARGS $FINETUNE_ARGS $GATE_TRACE_INTERVAL $EXTRA_TRAIN" \
    step_l0_finetune enc-self "$lambda" --freeze-decoder
  run_step "bleu_$name" "$RESULTS/results/$name" "$GEN_SUBSET $GEN_ARGS $EXTRA_GENERATE" \
    step_bleu "$name" encoder_l0 "$lambda" "" ""
done

for lambda in $LAMBDAS_ALL; do
  name=all_l0_$lambda
  run_step "$name" "$RESULTS/models/$name" "$SIZE_ARGS $TRAIN_ARGS $FINETUNE_ARGS $GATE_TRACE_INTERVAL $EXTRA_TRAIN" \
    step_l0_finetune "$ALL_TYPES" "$lambda" ""
  run_step "bleu_$name" "$RESULTS/results/$name" "$GEN_SUBSET $GEN_ARGS $EXTRA_GENERATE" \
    step_bleu "$name" all_l0 "$lambda" "" ""
  run_step "mask_$name" "$RESULTS/masks/$name" "mask" step_mask "$name"
  mask=$RESULTS/masks/$name/head_mask.json
  case " ${SCRATCH_LAMBDAS-$LAMBDAS_ALL} " in *" $lambda "*) ;; *) continue ;; esac
  run_step "scratch_$name" "$RESULTS/models/scratch_$name" \
    "$SIZE_ARGS $TRAIN_ARGS $BASELINE_TRAIN_ARGS $EXTRA_TRAIN" step_from_scratch "$mask"
  run_step "bleu_scratch_$name" "$RESULTS/results/scratch_$name" "$GEN_SUBSET $GEN_ARGS $EXTRA_GENERATE" \
    step_bleu "scratch_$name" from_scratch "$lambda" "$name" "$mask"
done

STATS_DATA_BIN=$DATA_BIN
if [ -n "${PUD_SRC:-}" ]; then
  run_step pud "$RESULTS/pud" "$PUD_SRC $PUD_TGT $PUD_CONLLU $SPM_MODEL" step_pud
  STATS_DATA_BIN=$RESULTS/pud
  STATS_SUBSET=test
  STATS_CONLLU=$RESULTS/pud/test.conllu${PUD_CONLLU##*.conllu}  # keeps a .gz suffix
fi

run_step stats "$RESULTS/stats/baseline" "$STATS_DATA_BIN $STATS_SUBSET $STATS_CONLLU $STATS_ARGS" step_stats

if [ ! -f "$RESULTS/stats/baseline/heads.csv" ]; then
  echo "skip curve: no head scores (stats/baseline/heads.csv)"
else
  run_step curve "$RESULTS/curve" "$CURVE_METRIC $CURVE_STEPS $CURVE_ARGS $GEN_SUBSET" step_curve
fi

# The report reads every result file, so it is redone whenever a step above (re)ran.
report_key=$(for marker in "$RESULTS"/.done/*; do
  [ "${marker##*/}" = report ] || stat -c '%n %Y' "$marker"
done | cksum)
run_step report - "$report_key" step_report
echo "tables: $RESULTS/tables.md   report: $RESULTS/report.html"
