#!/usr/bin/env bash
# Parallel text (or the built-in synthetic corpus) -> cleaned text -> sentencepiece -> fairseq data-bin.
# Thin wrapper: all options are those of `python -m fairseq_heads.commands.prepare --help`.
# PYTHON defaults to the project's .venv when present.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python; fi
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m fairseq_heads.commands.prepare "$@"
