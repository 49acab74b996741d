# recipes/lib.sh: the step runner of the recipes (source it; needs bash).
#
#   run_step NAME OUT_DIR KEY COMMAND [ARGS...]
#
# runs COMMAND with STEP_OUT set to a fresh OUT_DIR.partial; when COMMAND succeeds, renames
# OUT_DIR.partial to OUT_DIR and only then writes the done marker $RESULTS/.done/NAME holding
# KEY (the step's settings). A re-run prints "skip NAME (done)" when the marker exists and holds
# the same KEY; with another KEY the step is redone ("redo NAME (settings changed)").
# Steps that depend on a redone step are not redone automatically: delete their markers.
#
# Why this order: every output is first written under a temporary name, so a step that fails or
# is killed leaves no OUT_DIR and no marker - nothing a re-run could mistake for done. A left-over
# OUT_DIR without a marker (killed between rename and marker) is removed before the step runs.
#
# Call run_step as a plain command, never inside `if`, `||` or `&&`: bash switches `set -e` off
# for everything run in such a context, so a failing line would not stop the step.
# OUT_DIR "-" is for commands that write their outputs atomically themselves (STEP_OUT unset).
#
#   run_resumable_step NAME OUT_DIR KEY COMMAND [ARGS...]
#
# the same for a long training step whose COMMAND can resume from what it left in STEP_OUT
# (fairseq-train resumes from STEP_OUT/checkpoint_last.pt): a failed or killed run keeps
# OUT_DIR.partial (with the KEY it ran under, in OUT_DIR.partial/.step_key), and the next run
# with the same KEY goes on from there ("resume NAME"); with another KEY it starts afresh.
#
# Needs RESULTS (the results folder). STEP_LOG_DIR (default $RESULTS/logs) keeps each step's
# output in NAME.log (a resumed step appends to it); the last lines are printed when a step fails.

: "${RESULTS:?set RESULTS (the results folder) before sourcing recipes/lib.sh}"
STEP_LOG_DIR=${STEP_LOG_DIR:-$RESULTS/logs}

step_marker() { printf '%s/.done/%s' "$RESULTS" "$1"; }

step_is_done() {  # NAME KEY: true when the marker exists and records KEY
  local marker
  marker=$(step_marker "$1")
  [ -f "$marker" ] && [ "$(cat "$marker")" = "$2" ]
}

run_step() { _run_step no "$@"; }
run_resumable_step() { _run_step yes "$@"; }

_run_step() {
  local resumable=$1 name=$2 out=$3 key=$4
  shift 4
  local marker log status resume=no
  marker=$(step_marker "$name")
  if step_is_done "$name" "$key"; then
    echo "skip $name (done)"
    return 0
  fi
  if [ -f "$marker" ]; then
    echo "redo $name (settings changed)"
    rm -f "$marker"
  fi
  if [ "$resumable" = yes ] && [ -f "$out.partial/.step_key" ] && [ "$(cat "$out.partial/.step_key")" = "$key" ]; then
    resume=yes
    echo "resume $name (from $out.partial)"
  else
    echo "run  $name"
  fi
  mkdir -p "$STEP_LOG_DIR" "$(dirname "$marker")"
  log=$STEP_LOG_DIR/$name.log
  status=0
  if [ "$out" = "-" ]; then
    ( set -euo pipefail; "$@" ) > "$log" 2>&1 &
  else
    rm -rf "$out"
    if [ "$resume" = no ]; then
      rm -rf "$out.partial"
      mkdir -p "$out.partial"
      [ "$resumable" = no ] || printf '%s' "$key" > "$out.partial/.step_key"
      : > "$log"
    fi
    ( set -euo pipefail; export STEP_OUT=$out.partial; "$@" ) >> "$log" 2>&1 &
  fi
  # Waited for rather than run in `cmd || status=$?`, which would switch `set -e` off inside.
  wait $! || status=$?
  if [ "$status" -ne 0 ]; then
    echo "FAILED $name (exit $status); last lines of $log:" >&2
    tail -n 25 "$log" >&2
    if [ "$resumable" = yes ] && [ "$out" != "-" ]; then
      echo "(kept $out.partial: a re-run with the same settings resumes from it)" >&2
    elif [ "$out" != "-" ]; then
      rm -rf "$out.partial"
    fi
    return "$status"
  fi
  if [ "$out" != "-" ]; then
    rm -f "$out.partial/.step_key"
    mv "$out.partial" "$out"
  fi
  printf '%s' "$key" > "$marker.partial" && mv "$marker.partial" "$marker"
}

# The folder of the installed fairseq_heads package (fairseq's --user-dir), found without
# importing it: importing it loads fairseq, which takes seconds.
fairseq_heads_user_dir() {
  "${PYTHON:-python}" -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('fairseq_heads').origin))"
}
