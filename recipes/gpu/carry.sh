#!/usr/bin/env bash
# recipes/gpu/carry.sh RECIPE [ARGS...]: on the CPU machine, what a GPU run carries (the device
# machine is offline) into $CARRY (default .carry, git-ignored): wheels/ (fairseq and what the GPU
# image lacks, for its Python 3.12; WHEELS=no skips them) and RECIPE.tar.xz (the recipe's data
# steps run here, data and syntax_data, with their step markers: the GPU run skips them).
# ARGS are the recipe's (--scale, --set) as on the device.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: carry.sh RECIPE [--scale S] [--set K=V ...]" >&2; exit 2; }
recipe=$1; shift
PY=${PYTHON:-$REPO/.venv/bin/python} CARRY=${CARRY:-$REPO/.carry}
if [ "${WHEELS:-yes}" != no ]; then
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$CARRY/wheels" fairseq-fixed==0.12.3.1 bitarray==3.12.3 cffi==2.1.1 pycparser==3.12 \
    hydra-core==1.3.2 omegaconf==2.3.0 conllu==6.0.0 tensorboardX==2.6.5
  ls "$CARRY"/wheels/antlr4_python3_runtime-4.9.3-*.whl > /dev/null 2>&1 ||
    "$PY" -m pip wheel -q --no-deps -w "$CARRY/wheels" antlr4-python3-runtime==4.9.3
fi
work=${WORK:-$REPO/work/gpu/$recipe}
# the steps that read the corpora (--data-root): those of them this recipe has
steps=$("$PY" -m fairseq_heads.cli recipe "$recipe" --results "$work" --dry-run "$@" |
  awk '$1 == "data" || $1 == "syntax_data" { print $1 }' | paste -sd, -)
"$PY" -m fairseq_heads.cli recipe "$recipe" --results "$work" --only "$steps" "$@"
mkdir -p "$CARRY"
(cd "$work" && tar -cf - data .steps/data.json $(ls -d syntax_data .steps/syntax_data.json 2> /dev/null)) |
  xz -T2 -6 > "$CARRY/$recipe.tar.xz"
du -sh "$CARRY"/*
