#!/usr/bin/env bash
# The issue-13 experiments (PROTOCOL=converged on the shared baseline), in priority order, on
# one results folder (ANALYSIS=no: no run writes the report; see the end). Every step resumes
# from its last checkpoint or is skipped when done, so the same command continues the plan in a
# later session, as long as RESULTS is still there.
#
#   CHAIN=prepare recipes/multi30k_en_de/converged_plan.sh   # the data and baseline steps, once
#   CHAIN=all nohup recipes/multi30k_en_de/converged_plan.sh > all.log 2>&1 &   # one run at a time, 2 threads
#   # or two chains side by side, one thread each:
#   CHAIN=A nohup recipes/multi30k_en_de/converged_plan.sh > A.log 2>&1 &
#   CHAIN=B nohup recipes/multi30k_en_de/converged_plan.sh > B.log 2>&1 &
#   # what has finished, into the published folder (which keeps earlier sessions' results):
#   recipes/publish_results.sh --merge "$RESULTS" docs/results/multi30k_en_de
#   fairseq-heads report docs/results/multi30k_en_de
#
# Which: on 2 cores one 2-thread run takes ~1.1-1.3 s per update, each of two 1-thread chains
# ~1.9 s (benchmarks/results/train_parallel_cpu.json: ~0.96 s per update of the machine, 1.3x
# the updates of the 2-thread run). `all` finishes each model in two thirds of a chain's time,
# which matters where a results folder may not outlive a 3-hour session: one L0 + fixed-mask
# model is 2,500-6,000 updates, a from-scratch model 3,000-8,000.
#
# The runs, first what answers a question of issue 13 by itself:
#   1 the encoder lambda=0 control (the reference of "heads gone at <= 0.5 BLEU")      chain B
#   2 all types lambda=0.02, seed 1, and that layout from scratch (item 2)             chain A
#   3 the all-types lambda=0 control, and its full layout (all 144 heads) from scratch  chain A
#     (the scratch side added in stop 22, when the 74-head layout from scratch had beaten
#     this control by 3.15 BLEU [2.17, 4.04]: it says how much of "scratch wins" is the
#     from-scratch schedule and not the pruned layout)
#   4 the encoder sweep lambda 0.01, 0.0075                                            chain B
#     (was 0.01, 0.02, 0.05: lambda=0.01 closed all 48 encoder heads in stop 16, so a larger
#     lambda has no head left to close; the next point goes between 0.005, 10 heads, and 0.01)
#   5 all types lambda=0.005, seed 1, and from scratch                                 chain A
#   6 all types lambda=0.02, seed 2, and from scratch                                  chain A
#   7 all types lambda=0.005, seed 2, and from scratch                                 chain B
#   8 all types lambda=0.02 at gate lr x100 (item 3): its L0 phase, the heads-dying    chain B
#     figure, is published (stop 13; trained again in stop 25, the same mask); what is left
#     is its fixed-mask phase and BLEU
#   9 the all-types lambda=0 control and its full layout from scratch, seed 2           chain A
#     (added in stop 27: seed 2's pairs were measured against seed 1's full layouts, so the
#     seed moved trained's advantage and the reference together; runs before 8 in `all`)
# The encoder lambda=0.005 model is not in the plan: its results are committed
# (docs/results/multi30k_en_de, stop 12); the report reads them from there.
#
# Environment: CHAIN (prepare|all|A|B), RESULTS (default work/recipes/multi30k_en_de_converged),
# BASELINE (default ../shared/models/multi30k_en_de_6x8), DATA, THREADS (default: 2 for
# prepare and all, 1 for A and B), PUBLISHED (default docs/results/multi30k_en_de:
# models whose results are there are not trained again), DRY_RUN (set: print each run's
# settings, its models and which of them are published; run nothing).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RUN=$HERE/run.sh
export RESULTS=${RESULTS:-$REPO/work/recipes/multi30k_en_de_converged}
export BASELINE=${BASELINE:-$REPO/../shared/models/multi30k_en_de_6x8}
export PROTOCOL=converged ANALYSIS=no
export PUBLISHED=${PUBLISHED:-$REPO/docs/results/multi30k_en_de}

run() {  # MODELS VAR=value ...: the models one run.sh call trains (space-separated) and its
  # settings (unset sweeps are empty: skipped). run.sh skips a model whose result is published
  # in PUBLISHED (its from-scratch side uses the published mask), so a later session need not
  # redo it when RESULTS did not outlive the session that made it.
  local models=$1 model published=""
  shift
  if [ -n "${DRY_RUN:-}" ]; then
    for model in $models; do
      [ ! -f "$PUBLISHED/results/$model/result.json" ] || published+=" $model"
    done
    echo "run.sh${*:+ $*} -> $models${published:+ (published:$published)}"
  else
    env LAMBDAS_ENC= LAMBDAS_ALL= SCRATCH_LAMBDAS= SEEDS=1 "$@" "$RUN"
  fi
}

plan_run() {  # $1: the run's number in the list above
  case $1 in
  1) run "enc_l0_0_conv_s1" LAMBDAS_ENC=0 ;;
  2) run "all_l0_0.02_conv_s1 scratch_all_l0_0.02_conv_s1" LAMBDAS_ALL=0.02 SCRATCH_LAMBDAS=0.02 SEEDS=1 ;;
  3) run "all_l0_0_conv_s1 scratch_all_l0_0_conv_s1" LAMBDAS_ALL=0 SCRATCH_LAMBDAS=0 SEEDS=1 ;;
  4) run "enc_l0_0.01_conv_s1 enc_l0_0.0075_conv_s1" LAMBDAS_ENC="0.01 0.0075" ;;
  5) run "all_l0_0.005_conv_s1 scratch_all_l0_0.005_conv_s1" LAMBDAS_ALL=0.005 SCRATCH_LAMBDAS=0.005 SEEDS=1 ;;
  6) run "all_l0_0.02_conv_s2 scratch_all_l0_0.02_conv_s2" LAMBDAS_ALL=0.02 SCRATCH_LAMBDAS=0.02 SEEDS=2 ;;
  7) run "all_l0_0.005_conv_s2 scratch_all_l0_0.005_conv_s2" LAMBDAS_ALL=0.005 SCRATCH_LAMBDAS=0.005 SEEDS=2 ;;
  8) run "all_l0_0.02_conv_s1_glr100" GATE_LR_SCALE=100 LAMBDAS_ALL=0.02 ;;
  9) run "all_l0_0_conv_s2 scratch_all_l0_0_conv_s2" LAMBDAS_ALL=0 SCRATCH_LAMBDAS=0 SEEDS=2 ;;
  esac
}

case ${CHAIN:-} in
prepare | all) export THREADS=${THREADS:-2} ;;
A | B) export THREADS=${THREADS:-1} ;;
*) echo "converged_plan.sh: CHAIN must be prepare, all, A or B, got '${CHAIN:-}'" >&2; exit 2 ;;
esac
case $CHAIN in
prepare) run "" ;;  # no sweep: the data, the baseline and its BLEU
all) for n in 1 2 3 4 5 6 7 9 8; do plan_run $n; done ;;
A) for n in 2 3 5 6 9; do plan_run $n; done ;;
B) for n in 1 4 7 8; do plan_run $n; done ;;  # 8 moved from A in stop 25: B had finished
esac
