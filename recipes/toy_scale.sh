# recipes/toy_scale.sh: SCALE=toy settings shared by the recipes (sourced by their run.sh).
# The synthetic corpus, a 2+2-layer d=32 model with 4 heads, a few dozen updates per training:
# every step of the paper's pipeline runs in a few minutes on 2 CPU cores (what CI and
# tests/recipes run). The numbers mean nothing; the files are the point.
SRC=src TGT=tgt
DATA_BIN=""
TOY_SIZES="--n-train 1500 --n-valid 60 --n-test 60 --vocab-size 400"
DATA_KEY="synthetic $TOY_SIZES"
prepare_data() {
  # shellcheck disable=SC2086
  fairseq-heads prepare --synthetic --work-dir "$STEP_OUT" $TOY_SIZES --workers 1
}
BASELINE_CHECKPOINT=""
SIZE_ARGS="--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 32 --decoder-embed-dim 32
  --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64
  --encoder-attention-heads 4 --decoder-attention-heads 4"
TRAIN_ARGS="--share-all-embeddings --dropout 0.1 --label-smoothing 0.1 --max-tokens 1024
  --adam-betas (0.9,0.98)"
BASELINE_TRAIN_ARGS="--optimizer adam --lr 5e-3 --lr-scheduler inverse_sqrt --warmup-updates 10
  --max-update ${TOY_UPDATES:-30}"
# A large gate learning rate so that heads close within a few updates. Adam moves every gate
# by about lr x scale per update whatever the gradient's size, so a lambda that outweighs the
# (tiny, barely trained) model's loss closes every head at once: small lambdas keep some.
DEFAULT_GATE_LR_SCALE=400
GATE_LR_SCALE=${GATE_LR_SCALE:-$DEFAULT_GATE_LR_SCALE}
FINETUNE_OPTIMIZER_ARGS="--optimizer gate_adam --lr 1e-3 --gate-lr-scale $GATE_LR_SCALE --lr-scheduler fixed"
FINETUNE_ARGS="$FINETUNE_OPTIMIZER_ARGS
  --max-update ${TOY_UPDATES:-20}"
# CI runs the quick protocol; PROTOCOL=converged at toy scale validates every 5 updates and
# stops after 2 unchanged validations / 2 without improvement (tests/recipes).
DEFAULT_PROTOCOL=quick
BASELINE_SCHEDULE_ARGS="--optimizer adam --lr 5e-3 --lr-scheduler inverse_sqrt --warmup-updates 10"
VALIDATE_UPDATES=${VALIDATE_UPDATES:-5}
PLATEAU_VALIDATIONS=${PLATEAU_VALIDATIONS:-2}
PLATEAU_LOSS_TOLERANCE=${PLATEAU_LOSS_TOLERANCE:-0.005}
PATIENCE=${PATIENCE:-2}
L0_MAX_UPDATES=${L0_MAX_UPDATES:-40}
FIXED_MASK_MAX_UPDATES=${FIXED_MASK_MAX_UPDATES:-30}
SCRATCH_MAX_UPDATES=${SCRATCH_MAX_UPDATES:-60}
LAMBDAS_ENC=${LAMBDAS_ENC-0.01}
LAMBDAS_ALL=${LAMBDAS_ALL-0.01}
GATE_TRACE_INTERVAL=5
GEN_SUBSET=test
GEN_ARGS="--beam 2 --batch-size 64"
# The statistics run on the toy test split binarised once more through the step `pud` (the
# path PUD takes at full scale); the synthetic corpus comes with gold parses.
SPM_MODEL=$RESULTS/data/spm.model
PUD_SRC=$RESULTS/data/clean/test.src
PUD_TGT=$RESULTS/data/clean/test.tgt
PUD_CONLLU=$RESULTS/data/clean/test.conllu
STATS_SUBSET=test
STATS_CONLLU=""
STATS_ARGS="--cpu --bootstrap-replicates 20"
CURVE_METRIC=grad
CURVE_STEPS=0,2,4,6
CURVE_ARGS="--beam 2"
DEVICE_ARGS=--cpu
