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
#                         (PROTOCOL=quick)
#   BASELINE_SCHEDULE_ARGS  optimizer/schedule of BASELINE_TRAIN_ARGS without its length: the
#                         from-scratch models of PROTOCOL=converged (default BASELINE_TRAIN_ARGS)
#   FINETUNE_OPTIMIZER_ARGS  optimizer/schedule of the L0 fine-tuning runs, gate lr included
#   FINETUNE_ARGS         the same with the length of a PROTOCOL=quick fine-tune
#   GATE_LR_SCALE, DEFAULT_GATE_LR_SCALE  the gates' lr / the weights' lr (--gate-lr-scale) and the
#                         recipe's default of it: a run at another scale gets `_glr<scale>` in its name
#   PROTOCOL              converged (default) or quick (DEFAULT_PROTOCOL sets the default), below
#   SEEDS                 training seeds of the trained-vs-scratch comparison (PROTOCOL=converged)
#   VALIDATE_UPDATES, PLATEAU_VALIDATIONS, PLATEAU_LOSS_TOLERANCE, PATIENCE, L0_MAX_UPDATES,
#   FIXED_MASK_MAX_UPDATES, SCRATCH_MAX_UPDATES   the converged protocol (below)
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
#   PUBLISHED             (optional) a published results folder (recipes/publish_results.sh) of
#                         earlier sessions: a converged model whose result and mask are there is
#                         not trained again; its from-scratch side uses that mask
#   ANALYSIS              yes (default) or no: with no, only the training and BLEU steps run, not
#                         pud/stats/curve/report - for several sweeps side by side on one RESULTS
#                         (each its own lambdas or seeds; a last run with yes writes the report)
#
# and optionally RECIPE_EXTRA_TRAIN_ARGS / RECIPE_EXTRA_GENERATE_ARGS, appended to every
# fairseq-train / fairseq-generate (the tests inject a bad option through them). Every step is
# keyed by its settings: change one and that step is redone on the next run (see recipes/lib.sh).
#
# PROTOCOL=quick: each L0 fine-tune runs FINETUNE_ARGS' fixed number of updates (seed 1; the
# models enc_l0_<λ>, all_l0_<λ>, scratch_all_l0_<λ>). PROTOCOL=converged (models
# <those names>_conv_s<seed>): an L0 fine-tune runs until the plateau rule holds
# (fairseq_heads/convergence.py: PLATEAU_VALIDATIONS validations in a row, VALIDATE_UPDATES updates
# apart, without a change of the open heads and with < PLATEAU_LOSS_TOLERANCE relative valid-loss
# change; at most L0_MAX_UPDATES) -> its open heads become a fixed head mask -> training goes on
# without the penalty until the valid loss has not improved for PATIENCE validations (fairseq's
# --patience; at most FIXED_MASK_MAX_UPDATES; the best checkpoint is kept). A from-scratch model
# is trained with the same validations and patience (at most SCRATCH_MAX_UPDATES). The
# all-types lambdas of SCRATCH_LAMBDAS run once per seed of SEEDS, each seed its own layout and
# its own from-scratch model; every other lambda runs with the first seed. The training steps
# resume from their fairseq checkpoints when killed (run_resumable_step).

# shellcheck source=recipes/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PYTHON=${PYTHON:-python}

# ------------------------------------------------------------------ settings, checked first
PROTOCOL=${PROTOCOL:-${DEFAULT_PROTOCOL:-converged}}
SEEDS=${SEEDS-1}
ANALYSIS=${ANALYSIS:-yes}
PUBLISHED=${PUBLISHED:-}
GATE_LR_SCALE=${GATE_LR_SCALE:-$DEFAULT_GATE_LR_SCALE}
BASELINE_SCHEDULE_ARGS=${BASELINE_SCHEDULE_ARGS:-$BASELINE_TRAIN_ARGS}

setting_error() {  # a setting the user can fix: one line, exit status 2, before any step
  echo "$1" >&2
  exit 2
}
case $PROTOCOL in
converged | quick) ;;
*) setting_error "PROTOCOL must be converged or quick, got '$PROTOCOL'" ;;
esac
case $ANALYSIS in
yes | no) ;;
*) setting_error "ANALYSIS must be yes or no, got '$ANALYSIS'" ;;
esac
[[ $SEEDS =~ ^[[:space:]]*[1-9][0-9]*([[:space:]]+[1-9][0-9]*)*[[:space:]]*$ ]] ||
  setting_error "SEEDS must be one or more positive integers separated by spaces, got '$SEEDS'"
[ "$(tr -s ' \t' '\n\n' <<< "$SEEDS" | grep -c .)" = "$(tr -s ' \t' '\n\n' <<< "$SEEDS" | grep . | sort -u | grep -c .)" ] ||
  setting_error "SEEDS must not repeat a seed, got '$SEEDS'"
[[ $GATE_LR_SCALE =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] && awk "BEGIN { exit !($GATE_LR_SCALE > 0) }" ||
  setting_error "GATE_LR_SCALE must be a number > 0, got '$GATE_LR_SCALE'"
if [ "$PROTOCOL" = converged ]; then
  for setting in VALIDATE_UPDATES PLATEAU_VALIDATIONS PATIENCE L0_MAX_UPDATES FIXED_MASK_MAX_UPDATES SCRATCH_MAX_UPDATES; do
    [[ ${!setting:-} =~ ^[1-9][0-9]*$ ]] || setting_error "$setting must be a positive integer, got '${!setting:-}'"
  done
  [[ ${PLATEAU_LOSS_TOLERANCE:-} =~ ^(0|0?\.[0-9]+)$ ]] ||
    setting_error "PLATEAU_LOSS_TOLERANCE must be a number in [0, 1), got '${PLATEAU_LOSS_TOLERANCE:-}'"
fi
read -r -a SEED_LIST <<< "$SEEDS"
GLR_SUFFIX=""  # a model trained at another gate lr than the recipe's default is named apart
[ "$GATE_LR_SCALE" = "$DEFAULT_GATE_LR_SCALE" ] || GLR_SUFFIX=_glr$GATE_LR_SCALE

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

# PROTOCOL=converged: validations (and a checkpoint) every VALIDATE_UPDATES updates, none at
# epoch ends, so that "N validations" means N x VALIDATE_UPDATES updates on either side.
CONVERGED_VALIDATION="--validate-interval-updates ${VALIDATE_UPDATES:-} --save-interval-updates ${VALIDATE_UPDATES:-}
  --validate-interval 1000000 --keep-interval-updates 1"
PLATEAU_RULE="--stop-on-plateau ${PLATEAU_VALIDATIONS:-} --plateau-loss-tolerance ${PLATEAU_LOSS_TOLERANCE:-}"

step_l0_until_plateau() {  # $1 attention types, $2 lambda, $3 extra options, $4 seed
  # shellcheck disable=SC2086
  train_into_step_out last --arch gated_transformer $SIZE_ARGS $TRAIN_ARGS \
    --gated-attention "$1" $3 --finetune-from-model "$RESULTS/models/baseline/checkpoint.pt" \
    --criterion label_smoothed_cross_entropy_l0 --l0-lambda "$2" $FINETUNE_OPTIMIZER_ARGS \
    --max-update "$L0_MAX_UPDATES" $CONVERGED_VALIDATION $PLATEAU_RULE \
    --validation-trace "$STEP_OUT/validations.jsonl" \
    --gate-trace "$STEP_OUT/gate_trace.jsonl" --gate-trace-interval "$GATE_TRACE_INTERVAL" --seed "$4"
}

step_fixed_mask_finetune() {  # $1 L0 model, $2 head mask, $3 attention types, $4 extra options, $5 seed
  # The L0 model's weights with its closed heads masked for good (--head-mask fixes every gate:
  # masked heads 0, the others fully open, no gate trained) and no penalty, until --patience.
  # shellcheck disable=SC2086
  train_into_step_out best --arch gated_transformer $SIZE_ARGS $TRAIN_ARGS \
    --gated-attention "$3" $4 --finetune-from-model "$RESULTS/models/$1/checkpoint.pt" \
    --head-mask "$2" --criterion label_smoothed_cross_entropy $FINETUNE_OPTIMIZER_ARGS \
    --max-update "$FIXED_MASK_MAX_UPDATES" $CONVERGED_VALIDATION --patience "$PATIENCE" \
    --validation-trace "$STEP_OUT/validations.jsonl" --seed "$5"
  # the L0 phase's traces beside the model: the report draws its heads dying over training
  cp "$RESULTS/models/$1/gate_trace.jsonl" "$STEP_OUT/gate_trace.jsonl"
  cp "$RESULTS/models/$1/validations.jsonl" "$STEP_OUT/validations_l0.jsonl"
}

step_from_scratch_until_patience() {  # $1 head mask file, $2 seed
  # shellcheck disable=SC2086
  train_into_step_out best --arch transformer $SIZE_ARGS $TRAIN_ARGS --head-mask "$1" \
    --criterion label_smoothed_cross_entropy $BASELINE_SCHEDULE_ARGS \
    --max-update "$SCRATCH_MAX_UPDATES" $CONVERGED_VALIDATION --patience "$PATIENCE" \
    --validation-trace "$STEP_OUT/validations.jsonl" --seed "$2"
}

step_mask() {  # $1 model name
  fairseq-heads mask --path "$RESULTS/models/$1/checkpoint.pt" --out "$STEP_OUT/head_mask.json"
}

step_from_scratch() {  # $1 head mask file
  # shellcheck disable=SC2086
  train_into_step_out best --arch transformer $SIZE_ARGS $TRAIN_ARGS --head-mask "$1" \
    --criterion label_smoothed_cross_entropy $BASELINE_TRAIN_ARGS
}

step_bleu() {  # $1 model name, $2 kind, $3 lambda or "", $4 from-model or "", $5 head mask or "",
  # then options of `fairseq-heads result` (--protocol, --seed, --phase)
  local checkpoint=$RESULTS/models/$1/checkpoint.pt options=()
  [ -z "$3" ] || options+=(--l0-lambda "$3")
  [ -z "$4" ] || options+=(--from-model "$4")
  [ -z "$5" ] || options+=(--head-mask "$5")
  options+=("${@:6}")
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
  # The curve removes encoder heads only (--types): the x axis of the encoder-pruning figure.
  # The L0 points are drawn beside it by the report, not here, so adding a lambda does not redo
  # the curve.
  # shellcheck disable=SC2086
  fairseq-heads curve "$DATA_BIN" --path "$RESULTS/models/baseline/checkpoint.pt" \
    --scores "$RESULTS/stats/baseline/heads.csv" --types enc-self --metric "$CURVE_METRIC" --steps "$CURVE_STEPS" \
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

QUICK="--protocol quick --seed 1"

quick_pruning() {  # $1 enc|all, $2 lambda: the PROTOCOL=quick steps of one lambda
  local name=${1}_l0_$2$GLR_SUFFIX kind=encoder_l0 types=enc-self extra=--freeze-decoder mask
  [ "$1" = enc ] || { kind=all_l0; types=$ALL_TYPES; extra=""; }
  run_step "$name" "$RESULTS/models/$name" "$SIZE_ARGS $TRAIN_ARGS $FINETUNE_ARGS $GATE_TRACE_INTERVAL $EXTRA_TRAIN" \
    step_l0_finetune "$types" "$2" "$extra"
  run_step "bleu_$name" "$RESULTS/results/$name" "$GEN_SUBSET $GEN_ARGS $EXTRA_GENERATE" \
    step_bleu "$name" "$kind" "$2" "" "" $QUICK
  [ "$1" = all ] || return 0
  run_step "mask_$name" "$RESULTS/masks/$name" "mask" step_mask "$name"
  mask=$RESULTS/masks/$name/head_mask.json
  case " ${SCRATCH_LAMBDAS-$LAMBDAS_ALL} " in *" $2 "*) ;; *) return 0 ;; esac
  run_step "scratch_$name" "$RESULTS/models/scratch_$name" \
    "$SIZE_ARGS $TRAIN_ARGS $BASELINE_TRAIN_ARGS $EXTRA_TRAIN" step_from_scratch "$mask"
  run_step "bleu_scratch_$name" "$RESULTS/results/scratch_$name" "$GEN_SUBSET $GEN_ARGS $EXTRA_GENERATE" \
    step_bleu "scratch_$name" from_scratch "$2" "$name" "$mask" $QUICK
}

converged_pruning() {  # $1 enc|all, $2 lambda, $3 seed, $4 yes: also from scratch
  local name=${1}_l0_${2}_conv_s$3$GLR_SUFFIX kind=encoder_l0 types=enc-self extra=--freeze-decoder
  [ "$1" = enc ] || { kind=all_l0; types=$ALL_TYPES; extra=""; }
  local mask=$RESULTS/masks/$name/head_mask.json
  if [ -n "$PUBLISHED" ] && [ -f "$PUBLISHED/results/$name/result.json" ] &&
    [ -f "$PUBLISHED/masks/$name/head_mask.json" ]; then
    # trained and scored by an earlier session: only its from-scratch side is left to run
    echo "skip $name (published in $PUBLISHED)"
    mask=$PUBLISHED/masks/$name/head_mask.json
  else
    converged_trained_side "$name" "$kind" "$types" "$extra" "$2" "$3"
  fi
  [ "$4" = yes ] || return 0
  if [ -n "$PUBLISHED" ] && [ -f "$PUBLISHED/results/scratch_$name/result.json" ]; then
    echo "skip scratch_$name (published in $PUBLISHED)"
    return 0
  fi
  run_resumable_step "scratch_$name" "$RESULTS/models/scratch_$name" \
    "$SIZE_ARGS $TRAIN_ARGS $BASELINE_SCHEDULE_ARGS $VALIDATE_UPDATES $PATIENCE $SCRATCH_MAX_UPDATES $EXTRA_TRAIN" \
    step_from_scratch_until_patience "$mask" "$3"
  # shellcheck disable=SC2086
  run_step "bleu_scratch_$name" "$RESULTS/results/scratch_$name" "$GEN_SUBSET $GEN_ARGS $EXTRA_GENERATE" \
    step_bleu "scratch_$name" from_scratch "$2" "$name" "$mask" --protocol converged --seed "$3" \
    --phase "from_scratch=$RESULTS/models/scratch_$name/validations.jsonl"
}

converged_trained_side() {  # $1 name, $2 kind, $3 types, $4 extra, $5 lambda, $6 seed:
  # the L0 phase, its mask, the fixed-mask phase and BLEU
  local name=$1 kind=$2 types=$3 extra=$4 l0=${1}_l0 mask=$RESULTS/masks/$1/head_mask.json
  local rule="$VALIDATE_UPDATES $PLATEAU_VALIDATIONS $PLATEAU_LOSS_TOLERANCE"
  local result="--protocol converged --seed $6 --plateau-validations $PLATEAU_VALIDATIONS
    --plateau-loss-tolerance $PLATEAU_LOSS_TOLERANCE"
  run_resumable_step "$l0" "$RESULTS/models/$l0" \
    "$SIZE_ARGS $TRAIN_ARGS $FINETUNE_OPTIMIZER_ARGS $rule $L0_MAX_UPDATES $GATE_TRACE_INTERVAL $EXTRA_TRAIN" \
    step_l0_until_plateau "$types" "$5" "$extra" "$6"
  run_step "mask_$name" "$RESULTS/masks/$name" "mask" step_mask "$l0"
  run_resumable_step "$name" "$RESULTS/models/$name" \
    "$SIZE_ARGS $TRAIN_ARGS $FINETUNE_OPTIMIZER_ARGS $rule $PATIENCE $FIXED_MASK_MAX_UPDATES $EXTRA_TRAIN" \
    step_fixed_mask_finetune "$l0" "$mask" "$types" "$extra" "$6"
  # shellcheck disable=SC2086
  run_step "bleu_$name" "$RESULTS/results/$name" "$GEN_SUBSET $GEN_ARGS $EXTRA_GENERATE" \
    step_bleu "$name" "$kind" "$5" "" "$mask" $result \
    --phase "l0=$RESULTS/models/$name/validations_l0.jsonl" \
    --phase "fixed_mask=$RESULTS/models/$name/validations.jsonl"
}

for lambda in $LAMBDAS_ENC; do
  if [ "$PROTOCOL" = quick ]; then
    quick_pruning enc "$lambda"
  else
    converged_pruning enc "$lambda" "${SEED_LIST[0]}" no
  fi
done

for lambda in $LAMBDAS_ALL; do
  if [ "$PROTOCOL" = quick ]; then
    quick_pruning all "$lambda"
    continue
  fi
  case " ${SCRATCH_LAMBDAS-$LAMBDAS_ALL} " in
  *" $lambda "*) for seed in "${SEED_LIST[@]}"; do converged_pruning all "$lambda" "$seed" yes; done ;;
  *) converged_pruning all "$lambda" "${SEED_LIST[0]}" no ;;
  esac
done

if [ "$ANALYSIS" = no ]; then
  echo "ANALYSIS=no: no statistics, curve or report"
  exit 0
fi

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
