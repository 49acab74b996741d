#!/usr/bin/env bash
# recipes/gpu/device.sh MINUTES RECIPE [ARGS...]: on the bare, offline GPU machine, from the
# repository root: install $CARRY/wheels (carry.sh; default .carry), unpack $CARRY/RECIPE.tar.xz's
# data steps, run the recipe (ARGS as `fairseq-heads recipe`: --scale, --set, --jobs) for at most
# MINUTES in all, packing the results into $OUT/results.tar.gz after every step.
# The install and the results live in .gpu-run/ (git-ignored), which a warm device machine keeps
# between calls: a second call, made while the machine is warm, skips both and continues the
# recipe where the first one's time ran out.
set -uo pipefail
minutes=$1 recipe=$2; shift 2
PY=${PYTHON:-python3} CARRY=${CARRY:-.carry} SITE=${SITE:-.gpu-run/site} RESULTS=${RESULTS:-.gpu-run/$recipe}
mkdir -p "$SITE" "$OUT"
if [ -e "$SITE/fairseq" ]; then
  echo "device.sh: wheels installed in $SITE already"
elif ls "$CARRY"/wheels/*.whl > /dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$CARRY"/wheels/*.whl || exit 2
fi
export PYTHONPATH=$PWD:$(cd "$SITE" && pwd)${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -d "$RESULTS/.steps" ]; then
  echo "device.sh: continuing the run in $RESULTS"
else
  mkdir -p "$RESULTS" && xz -dc "$CARRY/$recipe.tar.xz" | tar -C "$RESULTS" -xf - || exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
timeout "$(awk "BEGIN { print int($minutes * 60 - $SECONDS) }")" "$PY" -m fairseq_heads.cli recipe \
  "$recipe" --results "$RESULTS" --pack "$OUT/results.tar.gz" "$@" 2>&1 | tee "$OUT/console.log"
echo "device.sh: exit ${PIPESTATUS[0]} after $SECONDS s" | tee -a "$OUT/console.log"
