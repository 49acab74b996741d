#!/usr/bin/env bash
# recipes/publish_results.sh [--merge] RESULTS DOCS: copy the committed subset of a recipe's results
# folder (tables, report, figures, result files and translations, head statistics, curves,
# masks, gate and validation traces, gzipped) to DOCS, with the results folder's absolute paths
# in heads.json made relative.
# Checkpoints, data and logs stay behind. DOCS is written under a temporary name, then renamed.
#
# The traces of an L0 phase still running (models/<m>_l0.partial/) are copied too, and drawn
# as such; the finished phase replaces them in a later --merge, and keeps out those of a re-run
# (a session whose results folder was lost trains the phase again).
# --merge: DOCS keeps what it holds (its README, the results of earlier sessions) and the files
# of RESULTS are added to it or replace their namesakes; RESULTS needs no report, and none is
# copied: render it on the merged folder afterwards (`fairseq-heads report DOCS`). For a plan
# spread over sessions whose results folders may not outlive them (multi30k_en_de/converged_plan.sh).
set -euo pipefail
merge=no
[ "${1:-}" != --merge ] || { merge=yes; shift; }
[ $# = 2 ] || { echo "usage: publish_results.sh [--merge] RESULTS DOCS" >&2; exit 2; }
src=$(readlink -f "$1") dst=$(readlink -m "$2")
[ -d "$src" ] || { echo "publish_results.sh: $src is not a folder" >&2; exit 2; }
[ "$merge" = yes ] || [ -f "$src/tables.md" ] ||
  { echo "publish_results.sh: $src/tables.md missing (run the report first)" >&2; exit 2; }
tmp=$dst.partial
rm -rf "$tmp"
if [ "$merge" = yes ] && [ -d "$dst" ]; then
  cp -a "$dst" "$tmp"
else
  mkdir -p "$tmp"
fi
report_files="tables.md report.html figures/*.png"
[ "$merge" = no ] || report_files=""
cd "$src"
# shellcheck disable=SC2086  # report_files is a list of globs
for f in $report_files results/*/result.json stats/*/heads.csv \
  stats/*/heads.json stats/*/agreement.json curve/curve.csv curves/*/curve.csv \
  masks/*/head_mask.json; do
  [ -e "$f" ] || continue
  mkdir -p "$tmp/$(dirname "$f")"
  cp "$f" "$tmp/$f"
done
# each model's references and hypotheses (the T- and D- lines of fairseq-generate): what the
# report's paired bootstrap reads when it is rendered again from DOCS
for f in results/*/generate.txt results/*/generate.txt.gz; do
  [ -e "$f" ] || continue
  mkdir -p "$tmp/$(dirname "$f")"
  case $f in
  *.gz) cp "$f" "$tmp/$f" ;;
  *) grep -E '^[TD]-' "$f" | gzip -9nc > "$tmp/$f.gz" ;;
  esac
done
for f in models/*/gate_trace.jsonl models/*/validations*.jsonl; do
  [ -e "$f" ] || continue
  # a step still running (or stopped) has no result yet; but an L0 phase's traces are the
  # heads-dying figure so far, which the report draws as "still running" (report/build.py)
  case $f in models/*_l0.partial/*) ;; models/*.partial/*) continue ;; esac
  mkdir -p "$tmp/$(dirname "$f")"
  gzip -9nc "$f" > "$tmp/$f.gz"
done
# a finished L0 phase, of this or an earlier session, drops its running copy (that of an earlier
# --merge, or of a re-run after a results folder was lost)
for d in "$tmp"/models/*_l0; do
  [ ! -d "$d" ] || rm -rf "${d:?}.partial"
done
[ ! -d "$tmp/stats" ] || find "$tmp/stats" -name heads.json -exec sed -i "s#\"$src/#\"#g" {} +
chmod -R a+rX "$tmp"
rm -rf "$dst"
mv "$tmp" "$dst"
